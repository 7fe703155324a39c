//! A user op by Rust path, and a checked rule set with priorities and `#[overlap]`.
use graphrw::ops::{AttrDefault, AttrKind, AttrSpec, Arity, Infer, OpClass, OpDef, OperandSpec, OutputCount};
use graphrw::{pattern, rule_set};

pub mod my_ops {
    use super::*;
    /// `input * factor`.
    pub static SCALE: OpDef = OpDef {
        name: "my.scale",
        doc: "Multiplies by a factor.",
        operands: &[OperandSpec { name: "input", arity: Arity::Required }],
        attrs: &[AttrSpec { name: "factor", kind: AttrKind::Float, default: AttrDefault::Float(1.0) }],
        outputs: OutputCount::Fixed(1),
        commutative: false,
        class: OpClass::Elementwise,
        infer: Infer::Fn(|i, _| Ok(vec![i[0].clone()])),
        decompose: None,
        builtin: None,
    };
}

pattern! {
    fn scaled(x: Tensor, f: f64) -> Tensor {
        my_ops::SCALE(x, factor = f).relu()
    }
}

rule_set! {
    /// Canonical forms.
    pub static CANON;

    rule div_to_mul(x: Tensor, s: f64) -> Tensor where s != 0.0 {
        x.div(s)
    } => {
        x.mul(1.0 / s)?
    }

    #[priority(10)]
    rule neg_neg(x: Tensor) -> Tensor {
        x.neg().neg()
    } => {
        x
    }

    rule relu_relu(x: Tensor) -> Tensor {
        x.relu().relu()
    } => {
        x.relu()?
    }

    #[overlap]
    rule relu_of_neg(x: Tensor) -> Tensor {
        x.neg().relu()
    } => {
        x.neg()?.relu()?
    }
}

fn main() {
    assert_eq!(CANON.rules[0].name, "neg_neg");
    assert_eq!(CANON.rules.len(), 4);
    let _ = &scaled::PATTERN;
}
