//! An `f64` parameter compared with an integer literal.
use graphrw::pattern;

pattern! {
    fn p(x: Tensor, s: f64) -> Tensor where s > 1 {
        x.mul(s)
    }
}

fn main() {}
