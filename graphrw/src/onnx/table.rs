//! The one-to-one part of the ONNX mapping, read in both directions: an ONNX op that
//! is exactly one vocabulary op with the same operands and no attributes. Ops whose
//! mapping is not one-to-one (attributes to rename, inputs that are attributes in the
//! vocabulary, opset-dependent forms) are the special cases of `load.rs` and `save.rs`.

/// One row: the ONNX op type (default domain, every opset since it has this form), the
/// vocabulary op, and the operand count.
pub(crate) struct Simple {
    /// ONNX op type.
    pub onnx: &'static str,
    /// Vocabulary op name.
    pub op: &'static str,
    /// Operands (1 or 2).
    pub arity: usize,
}

const fn row(onnx: &'static str, op: &'static str, arity: usize) -> Simple {
    Simple { onnx, op, arity }
}

/// Every one-to-one op.
pub(crate) const SIMPLE: &[Simple] = &[
    row("Add", "add", 2),
    row("Sub", "sub", 2),
    row("Mul", "mul", 2),
    row("Div", "div", 2),
    row("Pow", "pow", 2),
    row("And", "and", 2),
    row("Or", "or", 2),
    row("Equal", "eq", 2),
    row("Less", "lt", 2),
    row("LessOrEqual", "le", 2),
    row("Greater", "gt", 2),
    row("GreaterOrEqual", "ge", 2),
    row("Neg", "neg", 1),
    row("Abs", "abs", 1),
    row("Reciprocal", "reciprocal", 1),
    row("Sqrt", "sqrt", 1),
    row("Exp", "exp", 1),
    row("Log", "log", 1),
    row("Sin", "sin", 1),
    row("Cos", "cos", 1),
    row("Erf", "erf", 1),
    row("Tanh", "tanh", 1),
    row("Sigmoid", "sigmoid", 1),
    row("Relu", "relu", 1),
    row("Not", "not", 1),
    row("IsNaN", "isnan", 1),
];
