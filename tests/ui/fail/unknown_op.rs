use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        x.sofmax(-1)
    }
}

fn main() {}
