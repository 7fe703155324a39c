use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        x
    }
}

fn main() {}
