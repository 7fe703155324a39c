use graphrw::pattern;

pattern! {
    fn p(x: Tensor, s: f64) -> Tensor {
        x.relu().mul(s?).neg()
    }
}

fn main() {}
