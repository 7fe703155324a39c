use graphrw::pattern;

pattern! {
    fn p(x: Tensor, a: Option<f64>, b: Option<f64>) -> Tensor {
        x.relu().mul(a?).mul(b?).neg()
    }
}

fn main() {}
