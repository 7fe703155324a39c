use graphrw::{pattern, replacement};

pattern! {
    fn scale(x: Tensor, s: f64) -> Tensor {
        x.div(s)
    }
}

replacement! {
    fn fused(x: Tensor, s: f64) -> (Tensor, Tensor) for scale {
        (x.mul(1.0 / s)?, x)
    }
}

fn main() {}
