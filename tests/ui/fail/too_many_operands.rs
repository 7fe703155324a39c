use graphrw::pattern;

pattern! {
    fn p(x: Tensor, y: Tensor) -> Tensor {
        relu(x, y)
    }
}

fn main() {}
