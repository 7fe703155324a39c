use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor {}
}

fn main() {}
