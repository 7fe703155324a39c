use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        matmul(x)
    }
}

fn main() {}
