//! Repetition with min/max counts, and multi-output patterns (tuple returns).
use graphrw::pattern;

pattern! {
    fn adds(x: Tensor) -> Tensor {
        repeat(x, |t| t.add(_), 1..=4).relu()
    }
    fn at_least_two(x: Tensor) -> Tensor {
        repeat(x, |t| t.neg(), 2..)
    }
    fn split_heads(x: Tensor) -> (Tensor, Tensor) {
        (x.relu(), x.sigmoid())
    }
}

fn main() {
    assert_eq!(split_heads::OUTPUTS, 2);
    assert_eq!(adds::PATTERN.op_count, 2);
}
