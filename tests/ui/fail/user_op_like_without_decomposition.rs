use graphrw::ops::{Arity, Infer, OpClass, OpDef, OperandSpec, OutputCount};
use graphrw::pattern;

pub static HALF: OpDef = OpDef {
    name: "my.half",
    doc: "Halves its input.",
    operands: &[OperandSpec { name: "input", arity: Arity::Required }],
    attrs: &[],
    outputs: OutputCount::Fixed(1),
    commutative: false,
    class: OpClass::Elementwise,
    infer: Infer::Like,
    decompose: None,
    builtin: None,
};

pattern! {
    fn p(x: Tensor) -> Tensor {
        HALF(x).relu()
    }
}

fn main() {}
