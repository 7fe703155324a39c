use graphrw::pattern;

pattern! {
    fn p(x: Tensor, x: Tensor) -> Tensor {
        x.add(x)
    }
}

fn main() {}
