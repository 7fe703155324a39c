//! A dtype written as torch spells it.
use graphrw::pattern;

pattern! {
    fn p(x: Tensor) -> Tensor where dtype(x) == float32 {
        x.relu()
    }
}

fn main() {}
