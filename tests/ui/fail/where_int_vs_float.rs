//! An `i64` parameter compared with a float literal: a bound it can never take.
use graphrw::pattern;

pattern! {
    fn p(x: Tensor, d0: i64) -> Tensor where d0 > 0.5 {
        x.softmax(d0)
    }
}

fn main() {}
