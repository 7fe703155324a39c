use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        x.add(vec![1])
    }
}

fn main() {}
