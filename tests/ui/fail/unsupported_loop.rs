use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        for i in 0..3 {}
        x.relu()
    }
}

fn main() {}
