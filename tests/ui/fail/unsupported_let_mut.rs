use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {
        let mut y = x.relu();
        y.neg()
    }
}

fn main() {}
