//! `_`, literals (operands match constants, attributes match values), `..`, alternatives
//! of sub-patterns and of attribute literals, a parameter used twice, `let`.
use graphrw::pattern;

pattern! {
    fn any_softmax(x: Tensor) -> Tensor {
        x.softmax(_)
    }
    fn halve(x: Tensor) -> Tensor {
        x.mul(0.5) | x.div(2)
    }
    fn last_dims(x: Tensor) -> Tensor {
        x.softmax(-1 | 3)
    }
    fn any_sum(x: Tensor) -> Tensor {
        x.sum(..)
    }
    fn square(x: Tensor) -> Tensor {
        let y = x.relu();
        y.mul(y)
    }
    fn ignore_operand(x: Tensor) -> Tensor {
        x.add(_)
    }
    fn cast_f16(x: Tensor) -> Tensor {
        x.cast(f16)
    }
    fn sdpa_any_mask(q: Tensor, k: Tensor, v: Tensor) -> Tensor {
        q.scaled_dot_product_attention(k, v, _, ..)
    }
}

fn main() {
    println!("{}", halve::PATTERN);
    assert_eq!(square::PATTERN.op_count, 2);
}
