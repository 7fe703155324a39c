//! A user op called with one operand too many: the error is at the call and gives both
//! counts.
use graphrw::ops::{AttrDefault, AttrKind, AttrSpec, Arity, Infer, OpClass, OpDef, OperandSpec, OutputCount};
use graphrw::pattern;

pub mod my_ops {
    use super::*;

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
    fn p(x: Tensor, y: Tensor) -> Tensor {
        my_ops::SCALE(x, y).relu()
    }
}

fn main() {}
