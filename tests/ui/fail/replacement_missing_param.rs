use graphrw::{pattern, replacement};

pattern! {
    fn scale(x: Tensor, s: f64) -> Tensor {
        x.div(s)
    }
}

replacement! {
    fn fused(x: Tensor) -> Tensor for scale {
        x.relu()?
    }
}

fn main() {}
