use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        x.softmax(x)
    }
}

fn main() {}
