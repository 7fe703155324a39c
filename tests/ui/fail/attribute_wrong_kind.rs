use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        x.softmax(1.5)
    }
}

fn main() {}
