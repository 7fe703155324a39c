use graphrw::pattern;

pattern! {
    fn p(x: Tensor, s: f64, t: f64) -> Tensor {
        x.div(s) | x.mul(t)
    }
}

fn main() {}
