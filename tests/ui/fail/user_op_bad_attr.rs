use graphrw::ops::{AttrDefault, AttrKind, AttrSpec, Arity, Infer, OpClass, OpDef, OperandSpec, OutputCount};
use graphrw::pattern;

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

pattern! {
    fn p(x: Tensor) -> Tensor {
        SCALE(x, fctor = 2.0)
    }
}

fn main() {}
