use graphrw::pattern;

pattern! {
    fn p(x: Tensor, s: Option<f64>) -> Tensor {
        x.relu().mul(s?)
    }
}

fn main() {}
