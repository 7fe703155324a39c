use graphrw::pattern;

pattern! {
    fn p(x: Tensor, y: Tensor) -> Tensor {
        x.relu()
    }
}

fn main() {}
