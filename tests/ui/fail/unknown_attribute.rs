use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        softmax(x, dimm = -1)
    }
}

fn main() {}
