//! The built-in op vocabulary as data: the one source of truth.
//!
//! `graphrw` expands its op declarations and its `Op` enum from this table (through
//! `graphrw-macros`' hidden `__builtin_op_table!` macro), and `pattern!` checks op
//! names, operand counts and attribute kinds against it at compile time. Shape
//! inference is code and lives in `graphrw::ops::infer`; each entry names its
//! inference function.

/// How many values an operand slot takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arity {
    /// Exactly one value.
    Required,
    /// Zero or one value. Only trailing slots are optional: a node carries its present
    /// operands in order, so an optional slot can be filled only if the ones before it are.
    Optional,
    /// Any number of values (only as the last slot).
    Variadic,
}

/// The kind of an attribute value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `i64`.
    Int,
    /// `f64`.
    Float,
    /// `bool`.
    Bool,
    /// A list of `i64` (dims, sizes).
    Ints,
    /// A string.
    Str,
    /// A dtype.
    DType,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Bool => "bool",
            Kind::Ints => "int list",
            Kind::Str => "string",
            Kind::DType => "dtype",
        })
    }
}

/// An attribute's default, or `Required` when it has none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DefaultValue {
    /// No default: every node gives it.
    Required,
    /// The attribute is optional and absent by default (`scale: Option<f64> = None`).
    Null,
    /// An int.
    Int(i64),
    /// A float.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// An int list.
    Ints(&'static [i64]),
    /// A string.
    Str(&'static str),
    /// A dtype, by name (`f32`).
    DType(&'static str),
}

/// How many outputs a node of the op has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outputs {
    /// A fixed number.
    Fixed(usize),
    /// As many as the length of the named `Ints` attribute (`split`).
    PerElementOf(&'static str),
}

/// The broad family of an op (used by printers, executors and the tile executor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// No operands: inputs, constants, factories.
    Source,
    /// Elementwise with broadcasting.
    Elementwise,
    /// Reduces dims.
    Reduction,
    /// Moves or reinterprets data.
    Layout,
    /// Gathers by index.
    Indexing,
    /// Contracts dims (matmul, conv, attention).
    Contraction,
    /// Normalises along dims (softmax, layer_norm).
    Normalization,
    /// Anything else.
    Other,
}

/// How an op is differentiated: its column in the table, which the vjp rules follow
/// (a test holds the two together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grad {
    /// By a vjp rule of its own (`graphrw::grad::vjp_rules`).
    Rule,
    /// Through its decomposition.
    Decomposition,
    /// No gradient along its outputs (sources, comparisons, logic, `isnan`, `opaque`).
    None,
    /// No rule yet: differentiating it is a clear error.
    NotYet,
}

/// One operand slot of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    /// Name, for messages and keyword arguments.
    pub name: &'static str,
    /// How many values it takes.
    pub arity: Arity,
}

/// One attribute.
#[derive(Clone, Copy, Debug)]
pub struct Attr {
    /// Name.
    pub name: &'static str,
    /// Kind of value.
    pub kind: Kind,
    /// Default.
    pub default: DefaultValue,
}

/// One op of the vocabulary.
#[derive(Clone, Copy, Debug)]
pub struct OpSpec {
    /// Unique name (ATen's where it has one).
    pub name: &'static str,
    /// One-line description.
    pub doc: &'static str,
    /// Operand slots in order.
    pub operands: &'static [Operand],
    /// Attributes in order.
    pub attrs: &'static [Attr],
    /// How many outputs.
    pub outputs: Outputs,
    /// True when the first two operands may be swapped.
    pub commutative: bool,
    /// Family.
    pub class: Class,
    /// Name of the shape/dtype inference function in `graphrw::ops::infer`.
    pub infer: &'static str,
    /// Name of the decomposition function in `graphrw::ops::decompose`, if any.
    pub decompose: Option<&'static str>,
    /// How it is differentiated.
    pub grad: Grad,
}

const fn req(name: &'static str) -> Operand {
    Operand {
        name,
        arity: Arity::Required,
    }
}
const fn opt(name: &'static str) -> Operand {
    Operand {
        name,
        arity: Arity::Optional,
    }
}
const fn var(name: &'static str) -> Operand {
    Operand {
        name,
        arity: Arity::Variadic,
    }
}
const fn attr(name: &'static str, kind: Kind, default: DefaultValue) -> Attr {
    Attr {
        name,
        kind,
        default,
    }
}

const X: &[Operand] = &[req("input")];
const XY: &[Operand] = &[req("input"), req("other")];
const NO_ATTRS: &[Attr] = &[];
const ONE: Outputs = Outputs::Fixed(1);

const fn unary(name: &'static str, doc: &'static str, infer: &'static str) -> OpSpec {
    OpSpec {
        name,
        doc,
        operands: X,
        attrs: NO_ATTRS,
        outputs: ONE,
        commutative: false,
        class: Class::Elementwise,
        infer,
        decompose: None,
        grad: Grad::Rule,
    }
}

const fn binary(
    name: &'static str,
    doc: &'static str,
    commutative: bool,
    infer: &'static str,
) -> OpSpec {
    OpSpec {
        name,
        doc,
        operands: XY,
        attrs: NO_ATTRS,
        outputs: ONE,
        commutative,
        class: Class::Elementwise,
        infer,
        decompose: None,
        grad: Grad::Rule,
    }
}

const fn op(
    name: &'static str,
    doc: &'static str,
    operands: &'static [Operand],
    attrs: &'static [Attr],
    class: Class,
    infer: &'static str,
) -> OpSpec {
    OpSpec {
        name,
        doc,
        operands,
        attrs,
        outputs: ONE,
        commutative: false,
        class,
        infer,
        decompose: None,
        grad: Grad::Rule,
    }
}

use DefaultValue as D;
use Kind as K;

const REDUCE_ATTRS: &[Attr] = &[
    attr("dims", K::Ints, D::Ints(&[])),
    attr("keepdim", K::Bool, D::Bool(false)),
];
const SIZE_DTYPE: &[Attr] = &[
    attr("size", K::Ints, D::Required),
    attr("dtype", K::DType, D::DType("f32")),
];

const CE_ATTRS: &[Attr] = &[
    attr("ignore_index", K::Int, D::Int(-100)),
    attr("label_smoothing", K::Float, D::Float(0.0)),
    attr("reduction", K::Str, D::Str("mean")),
];

/// `spec`, differentiated as `grad` says.
const fn grad(grad: Grad, spec: OpSpec) -> OpSpec {
    OpSpec { grad, ..spec }
}

/// Every built-in op. Names and signatures follow ATen/PyTorch; ops that only ONNX
/// has (`gather_nd`) keep ONNX's semantics. Reductions with empty `dims` reduce all
/// dimensions.
pub const BUILTIN_OPS: &[OpSpec] = &[
    // --- sources -----------------------------------------------------------------
    grad(Grad::None, op("input", "A graph input (placeholder); its metadata is declared.", &[], &[attr("name", K::Str, D::Required)], Class::Source, "declared")),
    grad(Grad::None, op("constant", "A constant tensor (an initialiser); the value is the node's payload.", &[], NO_ATTRS, Class::Source, "declared")),
    OpSpec { name: "opaque", doc: "An op graphrw does not model (an ONNX op outside the vocabulary, or at an opset whose meaning graphrw does not read), carried through unchanged: `op_type` and `domain` name it, `known` has one entry per output (1 when its metadata is exact, 0 when unknown), and the node's foreign record keeps its attributes and subgraphs for export. A wildcard operand to patterns, never an anchor; no executor has a kernel for it.", operands: &[var("inputs")], attrs: &[attr("op_type", K::Str, D::Required), attr("domain", K::Str, D::Str("")), attr("known", K::Ints, D::Required)], outputs: Outputs::PerElementOf("known"), commutative: false, class: Class::Other, infer: "declared", decompose: None, grad: Grad::None },
    grad(Grad::None, op("arange", "`arange(start, end, step)`: a 1-D range.", &[], &[attr("start", K::Float, D::Float(0.0)), attr("end", K::Float, D::Required), attr("step", K::Float, D::Float(1.0)), attr("dtype", K::DType, D::DType("i64"))], Class::Source, "arange")),
    grad(Grad::None, op("full", "`full(size, value)`: a tensor filled with `value`.", &[], &[attr("size", K::Ints, D::Required), attr("value", K::Float, D::Required), attr("dtype", K::DType, D::DType("f32"))], Class::Source, "full")),
    grad(Grad::None, op("sym_ints", "`sym_ints(values, scalar)`: dims known at run time (`[batch, seq*12]`) as an i64 tensor: 1-D, or a scalar with `scalar`. What ONNX computes with `Shape` and its arithmetic; bound when the plan runs.", &[], &[attr("values", K::Ints, D::Required), attr("scalar", K::Bool, D::Bool(false))], Class::Source, "sym_ints")),
    grad(Grad::None, op("zeros", "`zeros(size)`.", &[], SIZE_DTYPE, Class::Source, "full")),
    grad(Grad::None, op("ones", "`ones(size)`.", &[], SIZE_DTYPE, Class::Source, "full")),
    // --- elementwise binary (broadcasting) -----------------------------------------
    binary("add", "`input + other`, broadcasting.", true, "broadcast_same_dtype"),
    binary("sub", "`input - other`, broadcasting.", false, "broadcast_same_dtype"),
    binary("mul", "`input * other`, broadcasting.", true, "broadcast_same_dtype"),
    binary("div", "`input / other` (true division for floats, truncating for ints), broadcasting.", false, "broadcast_same_dtype"),
    binary("pow", "`input ** other`, broadcasting; the result has `input`'s dtype.", false, "broadcast_lhs_dtype"),
    binary("maximum", "Elementwise maximum, broadcasting.", true, "broadcast_same_dtype"),
    binary("minimum", "Elementwise minimum, broadcasting.", true, "broadcast_same_dtype"),
    grad(Grad::None, binary("and", "Logical and of two bool tensors, broadcasting.", true, "broadcast_logical")),
    grad(Grad::None, binary("or", "Logical or of two bool tensors, broadcasting.", true, "broadcast_logical")),
    grad(Grad::None, binary("eq", "`input == other` as bool, broadcasting.", true, "broadcast_compare")),
    grad(Grad::None, binary("ne", "`input != other` as bool, broadcasting.", true, "broadcast_compare")),
    grad(Grad::None, binary("lt", "`input < other` as bool, broadcasting.", false, "broadcast_compare")),
    grad(Grad::None, binary("le", "`input <= other` as bool, broadcasting.", false, "broadcast_compare")),
    grad(Grad::None, binary("gt", "`input > other` as bool, broadcasting.", false, "broadcast_compare")),
    grad(Grad::None, binary("ge", "`input >= other` as bool, broadcasting.", false, "broadcast_compare")),
    // --- elementwise unary ---------------------------------------------------------
    unary("neg", "`-input`.", "same_numeric"),
    unary("abs", "`|input|`.", "same_numeric"),
    unary("reciprocal", "`1 / input`.", "same_float"),
    unary("sqrt", "Square root.", "same_float"),
    unary("rsqrt", "`1 / sqrt(input)`.", "same_float"),
    unary("exp", "`e ** input`.", "same_float"),
    unary("log", "Natural logarithm.", "same_float"),
    unary("sin", "Sine.", "same_float"),
    unary("cos", "Cosine.", "same_float"),
    unary("erf", "The error function.", "same_float"),
    unary("tanh", "Hyperbolic tangent.", "same_float"),
    unary("sigmoid", "`1 / (1 + exp(-input))`.", "same_float"),
    unary("relu", "`max(input, 0)`.", "same_numeric"),
    op("gelu", "GELU; `approximate` is `\"none\"` (erf) or `\"tanh\"`.", X, &[attr("approximate", K::Str, D::Str("none"))], Class::Elementwise, "gelu"),
    unary("silu", "`input * sigmoid(input)`.", "same_float"),
    grad(Grad::None, unary("not", "Logical not of a bool tensor.", "same_bool")),
    grad(Grad::None, unary("isnan", "True where `input` is NaN.", "float_to_bool")),
    op("where", "`where(condition, input, other)`: `input` where `condition` holds, else `other`; broadcasting.", &[req("condition"), req("input"), req("other")], NO_ATTRS, Class::Elementwise, "where_"),
    op("cast", "Converts to `dtype`.", X, &[attr("dtype", K::DType, D::Required)], Class::Elementwise, "cast"),
    op("masked_fill", "`value` where `mask` is true, else `input`; broadcasting.", &[req("input"), req("mask")], &[attr("value", K::Float, D::Required)], Class::Elementwise, "masked_fill"),
    op("dropout", "Dropout; the identity unless `train`.", X, &[attr("p", K::Float, D::Float(0.5)), attr("train", K::Bool, D::Bool(false))], Class::Elementwise, "same_float"),
    op("contiguous", "A dense row-major copy (a layout op for executors that need one).", X, NO_ATTRS, Class::Layout, "identity"),
    // --- contraction -------------------------------------------------------------
    op("matmul", "Matrix product with `torch.matmul`'s rules (batched, broadcasting, 1-D operands).", XY, NO_ATTRS, Class::Contraction, "matmul"),
    grad(Grad::NotYet, op("conv2d", "2-D convolution of an NCHW input with an OIHW weight.", &[req("input"), req("weight"), opt("bias")], &[attr("stride", K::Ints, D::Ints(&[1, 1])), attr("padding", K::Ints, D::Ints(&[0, 0])), attr("dilation", K::Ints, D::Ints(&[1, 1])), attr("groups", K::Int, D::Int(1))], Class::Contraction, "conv2d")),
    // --- layout ------------------------------------------------------------------
    op("transpose", "Swaps dimensions `dim0` and `dim1` (negative dims count from the end).", X, &[attr("dim0", K::Int, D::Required), attr("dim1", K::Int, D::Required)], Class::Layout, "transpose"),
    op("permute", "Reorders dimensions: output dim `i` is input dim `dims[i]`.", X, &[attr("dims", K::Ints, D::Required)], Class::Layout, "permute"),
    op("reshape", "Reshapes to `shape` (one entry may be -1).", X, &[attr("shape", K::Ints, D::Required)], Class::Layout, "reshape"),
    op("expand", "Broadcasts to `size` (-1 keeps a dimension; new leading dims allowed).", X, &[attr("size", K::Ints, D::Required)], Class::Layout, "expand"),
    op("unsqueeze", "Inserts a dimension of size 1 at `dim`.", X, &[attr("dim", K::Int, D::Required)], Class::Layout, "unsqueeze"),
    op("squeeze", "Removes the size-1 dimensions in `dims` (all of them when empty).", X, &[attr("dims", K::Ints, D::Ints(&[]))], Class::Layout, "squeeze"),
    op("concat", "Concatenates `tensors` along `dim`.", &[var("tensors")], &[attr("dim", K::Int, D::Int(0))], Class::Layout, "concat"),
    OpSpec { name: "split", doc: "Splits along `dim` into pieces of `split_sizes`; one output per piece.", operands: X, attrs: &[attr("split_sizes", K::Ints, D::Required), attr("dim", K::Int, D::Int(0))], outputs: Outputs::PerElementOf("split_sizes"), commutative: false, class: Class::Layout, infer: "split", decompose: None, grad: Grad::Rule },
    op("slice", "`input[start:end:step]` along `dim` (bounds clamped, negative from the end).", X, &[attr("dim", K::Int, D::Int(0)), attr("start", K::Int, D::Int(0)), attr("end", K::Int, D::Int(i64::MAX)), attr("step", K::Int, D::Int(1))], Class::Layout, "slice"),
    op("tril", "Keeps the lower triangle (`j - i <= diagonal`) of the last two dims, zero elsewhere.", X, &[attr("diagonal", K::Int, D::Int(0))], Class::Layout, "identity"),
    op("triu", "Keeps the upper triangle (`j - i >= diagonal`) of the last two dims, zero elsewhere.", X, &[attr("diagonal", K::Int, D::Int(0))], Class::Layout, "identity"),
    // --- indexing ----------------------------------------------------------------
    op("gather", "ONNX `Gather`: picks slices of `input` along `dim` by `index` (any rank); output shape is `input.shape[:dim] + index.shape + input.shape[dim+1:]`.", &[req("input"), req("index")], &[attr("dim", K::Int, D::Int(0))], Class::Indexing, "gather"),
    op("gather_elements", "`torch.gather`: `out[i][j] = input[index[i][j]][j]` along `dim`; output has `index`'s shape.", &[req("input"), req("index")], &[attr("dim", K::Int, D::Int(0))], Class::Indexing, "gather_elements"),
    grad(Grad::NotYet, op("gather_nd", "ONNX `GatherND` with `batch_dims`.", &[req("input"), req("index")], &[attr("batch_dims", K::Int, D::Int(0))], Class::Indexing, "gather_nd")),
    op("index_select", "Selects entries of `input` along `dim` by a 1-D `index`.", &[req("input"), req("index")], &[attr("dim", K::Int, D::Required)], Class::Indexing, "index_select"),
    op("cumsum", "Cumulative sum along `dim`.", X, &[attr("dim", K::Int, D::Required)], Class::Other, "cumsum"),
    // --- reductions ----------------------------------------------------------------
    op("sum", "Sum over `dims` (all when empty).", X, REDUCE_ATTRS, Class::Reduction, "reduce"),
    op("mean", "Mean over `dims` (all when empty).", X, REDUCE_ATTRS, Class::Reduction, "reduce"),
    op("amax", "Maximum over `dims` (all when empty).", X, REDUCE_ATTRS, Class::Reduction, "reduce"),
    op("softmax", "Softmax along `dim`.", X, &[attr("dim", K::Int, D::Required)], Class::Normalization, "softmax"),
    op("log_softmax", "Log-softmax along `dim`.", X, &[attr("dim", K::Int, D::Required)], Class::Normalization, "softmax"),
    // --- normalisation -------------------------------------------------------------
    grad(Grad::Decomposition, OpSpec { decompose: Some("layer_norm"), ..op("layer_norm", "Layer normalisation over the dims from `axis` to the end, with optional affine `weight` and `bias`.", &[req("input"), opt("weight"), opt("bias")], &[attr("axis", K::Int, D::Int(-1)), attr("eps", K::Float, D::Float(1e-5))], Class::Normalization, "norm") }),
    grad(Grad::Decomposition, OpSpec { decompose: Some("rms_norm"), ..op("rms_norm", "RMS normalisation over the dims from `axis` to the end, with an optional `weight`.", &[req("input"), opt("weight")], &[attr("axis", K::Int, D::Int(-1)), attr("eps", K::Float, D::Float(1e-6))], Class::Normalization, "norm") }),
    // --- attention -----------------------------------------------------------------
    OpSpec { decompose: Some("sdpa"), ..op("scaled_dot_product_attention", "`softmax(q @ k^T * scale + mask) @ v` over `[.., heads, seq, dim]` tensors; `attn_mask` is boolean (true = attend) or additive; `scale` defaults to `1/sqrt(head_dim)`; query rows whose keys are all masked give zeros; with `enable_gqa` the query heads are grouped over fewer kv heads.", &[req("query"), req("key"), req("value"), opt("attn_mask")], &[attr("dropout_p", K::Float, D::Float(0.0)), attr("is_causal", K::Bool, D::Bool(false)), attr("scale", K::Float, D::Null), attr("enable_gqa", K::Bool, D::Bool(false))], Class::Contraction, "sdpa") },
    grad(Grad::Decomposition, OpSpec { outputs: Outputs::Fixed(3), decompose: Some("sdpa_backward"), ..op("scaled_dot_product_attention_backward", "The gradients `(dq, dk, dv)` of `scaled_dot_product_attention(query, key, value, attn_mask)` given its output `out` and the output's cotangent `grad_out` (the probabilities are recomputed); grouped kv heads get their group's summed gradients.", &[req("grad_out"), req("query"), req("key"), req("value"), req("out"), opt("attn_mask")], &[attr("is_causal", K::Bool, D::Bool(false)), attr("scale", K::Float, D::Null), attr("enable_gqa", K::Bool, D::Bool(false))], Class::Contraction, "sdpa_backward") }),
    // --- losses --------------------------------------------------------------------
    OpSpec { decompose: Some("cross_entropy"), ..op("cross_entropy", "Softmax cross-entropy of logits `input` `[.., C]` against class indices `target` `[..]` (i64), as `torch.nn.functional.cross_entropy` with the classes last: rows whose target is `ignore_index` count zero; `label_smoothing` mixes in the uniform distribution; `reduction` is `\"mean\"` (over non-ignored rows), `\"sum\"` or `\"none\"`.", &[req("input"), req("target")], CE_ATTRS, Class::Normalization, "cross_entropy") },
    grad(Grad::Decomposition, OpSpec { decompose: Some("cross_entropy_backward"), ..op("cross_entropy_backward", "The gradient of `cross_entropy(input, target)` with respect to `input`, given the loss's cotangent `grad_out` (the softmax is recomputed).", &[req("grad_out"), req("input"), req("target")], CE_ATTRS, Class::Normalization, "cross_entropy_backward") }),
];

/// Looks an op up by name.
pub fn find(name: &str) -> Option<&'static OpSpec> {
    BUILTIN_OPS.iter().find(|op| op.name == name)
}
