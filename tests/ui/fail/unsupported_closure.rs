use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        x.add(|t| t)
    }
}

fn main() {}
