//! The ONNX mapping as data, read in both directions: which ONNX op (type, domain,
//! opsets) is which vocabulary op, which ONNX inputs are its operands, and where each
//! of its attributes sits in the ONNX node (an attribute, a constant input, or an
//! attribute that became an input at some opset), with ONNX's name, kind, default and
//! the values graphrw reads. `load/table_row.rs` maps a node through its row (`map_row`) and
//! `save/exporter.rs` writes a vocabulary node through it (`write_row`).
//!
//! The rows name the vocabulary's ops by their `static` [`OpDef`]s (generated from
//! `graphrw-ops/src/vocab.rs` into [`crate::ops::builtin`]), so an op renamed or
//! removed there breaks the build here; the kind of each graphrw attribute is read
//! from the op's signature rather than spelled again, and a test checks that every
//! row names attributes its op has, operand counts it takes, and kinds that convert.
//! Another (`table/round_trip.rs`) takes every row both ways at each opset boundary it has,
//! with `onnx.checker` over the models built and written.
//!
//! What is not one-to-one stays hand-written in `ops/`, import and export side by side: lowerings to
//! several vocabulary ops (Gemm, Einsum, BatchNormalization, Slice, Flatten, Clip, the
//! activations; Unsqueeze of several axes), arguments that depend on shapes or values
//! (Reshape's zeros, Expand's ones, Split's equal parts; `transpose`'s two dims written
//! as a permutation), forms before an opset that changed meaning (Softmax before 13),
//! constants (Constant, ConstantOfShape, Range), `Attention`, and the multi-node
//! spellings of the export (`ne`, `rsqrt`, `silu`, `masked_fill`). A row's [`Quirk`]
//! names the few hand-written steps a table-driven op still takes.

use super::dialect::{BASE_OPSET, MAX_OPSET};
use super::name_key::same_bytes;
use crate::ops::builtin as v;
use crate::ops::OpDef;

/// Which directions a row serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Load and save.
    Both,
    /// Load only (another row, or a special case, writes the vocabulary op).
    Load,
    /// Save only (the ONNX op loads through another row or a special case).
    Save,
}

/// Where an argument sits in the ONNX node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// An attribute.
    Attr,
    /// A constant input at this position.
    Input(usize),
    /// An attribute before opset `at`, the constant input `input` from `at` on.
    Moved {
        /// The input position since `at`.
        input: usize,
        /// The opset that moved it.
        at: i64,
    },
}

impl Place {
    /// The input position at `opset`, or `None` when it is an attribute there.
    pub(crate) fn input_at(self, opset: i64) -> Option<usize> {
        match self {
            Place::Attr => None,
            Place::Input(i) => Some(i),
            Place::Moved { input, at } => (opset >= at).then_some(input),
        }
    }
}

/// The ONNX kind of an argument (an attribute's type, or what a constant input holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnnxKind {
    /// `INT` (an input: one int64/int32 value).
    Int,
    /// `INTS` (an input: a 0-D or 1-D int64/int32 tensor).
    Ints,
    /// `FLOAT`.
    Float,
    /// `STRING` (UTF-8).
    Str,
}

/// ONNX's value of an absent argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Absent {
    /// The node must give it.
    Required,
    /// An int.
    Int(i64),
    /// An int list.
    Ints(&'static [i64]),
    /// A float.
    Float(f32),
    /// A string.
    Str(&'static str),
    /// The first operand's dims, reversed (`Transpose`'s `perm`).
    Reversed,
}

/// A value conversion beyond the kinds (ONNX's spelling differs from graphrw's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The same value.
    Same,
    /// ONNX `pads` `[b0, b1, e0, e1]` with `b == e` is graphrw's `[p0, p1]`.
    SymmetricPads,
    /// Axes of the first operand, read in range, sorted and without repeats.
    SortedAxes,
    /// A permutation of the first operand's dims, written without negative entries.
    Perm,
}

/// One argument: a graphrw attribute and where ONNX keeps it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arg {
    /// ONNX attribute name (or the input's name, for messages).
    pub onnx: &'static str,
    /// The vocabulary attribute.
    pub ours: &'static str,
    /// Where it sits.
    pub place: Place,
    /// Its ONNX kind; graphrw's kind comes from the op's signature (`Int` reads as an
    /// int, a bool (non-zero) or an ONNX dtype code, following it).
    pub kind: OnnxKind,
    /// ONNX's default.
    pub absent: Absent,
    /// The range every int of it must lie in (inclusive), checked at load.
    pub range: Option<(i64, i64)>,
    /// The strings graphrw reads (empty: any).
    pub choices: &'static [&'static str],
    /// A conversion of the value.
    pub shape: Shape,
}

/// An ONNX attribute graphrw does not carry but reads: only the listed values are
/// understood (anything else stays opaque), and the first is written when it is not
/// ONNX's default. It also picks between rows of one ONNX op (`Trilu`'s `upper`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    /// ONNX attribute name.
    pub onnx: &'static str,
    /// The values graphrw reads, and ONNX's default.
    pub values: HeldValues,
}

/// The values of a [`Held`] attribute.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HeldValues {
    /// An int attribute.
    Int {
        /// ONNX's default.
        default: i64,
        /// Values read.
        accept: &'static [i64],
    },
    /// A string attribute.
    Str {
        /// ONNX's default.
        default: &'static str,
        /// Values read.
        accept: &'static [&'static str],
    },
}

/// A hand-written step of an otherwise table-driven op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quirk {
    /// None.
    None,
    /// Before opset 7, `broadcast`/`axis` attributes align the second operand (load).
    LegacyBroadcast,
    /// `noop_with_empty_axes` 1 with no axes is the identity (load).
    ReduceNoop,
    /// The concatenated dim must stay within graphrw's limit (load).
    ConcatTotal,
    /// ONNX requires a scale: a missing weight is written as ones (save).
    OnesScale,
}

/// One row of the mapping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpMap {
    /// ONNX op type.
    pub onnx: &'static str,
    /// ONNX domain (`""`: ai.onnx).
    pub domain: &'static str,
    /// The vocabulary op (its `static`, so a renamed or removed op breaks the build).
    pub op: &'static OpDef,
    /// The default-domain opsets this row reads (inclusive).
    pub opsets: (i64, i64),
    /// The opset the exporter needs for it.
    pub write_opset: i64,
    /// How many leading ONNX inputs are operands (min, max; `usize::MAX`: variadic).
    pub operands: (usize, usize),
    /// A variadic ONNX op folded into a chain of the binary vocabulary op (`Max`).
    pub fold: bool,
    /// The arguments.
    pub args: &'static [Arg],
    /// Attributes held at values graphrw reads.
    pub held: &'static [Held],
    /// ONNX attributes accepted and dropped: they do not change the result graphrw
    /// computes (`Cast`'s `saturate` for float8, `Conv`'s `kernel_shape`).
    pub ignored: &'static [&'static str],
    /// Directions.
    pub dir: Dir,
    /// A hand-written step, if any.
    pub quirk: Quirk,
}

/// The default-domain opset written unless a row needs a newer one.
const BASE: i64 = BASE_OPSET;
const ALL: (i64, i64) = (1, MAX_OPSET);

const fn row(onnx: &'static str, op: &'static OpDef, operands: (usize, usize)) -> OpMap {
    OpMap {
        onnx,
        domain: "",
        op,
        opsets: ALL,
        write_opset: BASE,
        operands,
        fold: false,
        args: &[],
        held: &[],
        ignored: &[],
        dir: Dir::Both,
        quirk: Quirk::None,
    }
}

const fn unary(onnx: &'static str, op: &'static OpDef) -> OpMap {
    row(onnx, op, (1, 1))
}

const fn binary(onnx: &'static str, op: &'static OpDef) -> OpMap {
    OpMap {
        quirk: Quirk::LegacyBroadcast,
        ..row(onnx, op, (2, 2))
    }
}

const fn with(
    onnx: &'static str,
    op: &'static OpDef,
    operands: (usize, usize),
    args: &'static [Arg],
) -> OpMap {
    OpMap {
        args,
        ..row(onnx, op, operands)
    }
}

const fn fold(onnx: &'static str, op: &'static OpDef, dir: Dir) -> OpMap {
    OpMap {
        fold: true,
        dir,
        ..row(onnx, op, (1, usize::MAX))
    }
}

const fn arg(
    onnx: &'static str,
    ours: &'static str,
    place: Place,
    kind: OnnxKind,
    absent: Absent,
) -> Arg {
    Arg {
        onnx,
        ours,
        place,
        kind,
        absent,
        range: None,
        choices: &[],
        shape: Shape::Same,
    }
}

const fn int(onnx: &'static str, ours: &'static str, absent: Absent) -> Arg {
    arg(onnx, ours, Place::Attr, OnnxKind::Int, absent)
}

const fn float(onnx: &'static str, ours: &'static str, absent: Absent) -> Arg {
    arg(onnx, ours, Place::Attr, OnnxKind::Float, absent)
}

const fn ints(onnx: &'static str, ours: &'static str, absent: Absent) -> Arg {
    arg(onnx, ours, Place::Attr, OnnxKind::Ints, absent)
}

const fn held_int(onnx: &'static str, default: i64, accept: &'static [i64]) -> Held {
    Held {
        onnx,
        values: HeldValues::Int { default, accept },
    }
}

use Absent as A;

const AXIS_DIM: &[Arg] = &[int("axis", "dim", A::Int(0))];
const NORM_ARGS: &[Arg] = &[
    int("axis", "axis", A::Int(-1)),
    float("epsilon", "eps", A::Float(1e-5)),
];
const NORM_HELD: &[Held] = &[held_int("stash_type", 1, &[1])];
const SOFTMAX_ARGS: &[Arg] = &[int("axis", "dim", A::Int(-1))];
const KEEPDIMS: Arg = arg("keepdims", "keepdim", Place::Attr, OnnxKind::Int, A::Int(1));
const fn reduce_args(moved: i64) -> [Arg; 2] {
    [
        arg(
            "axes",
            "dims",
            Place::Moved {
                input: 1,
                at: moved,
            },
            OnnxKind::Ints,
            A::Ints(&[]),
        ),
        KEEPDIMS,
    ]
}
const REDUCE_13: &[Arg] = &reduce_args(13);
const REDUCE_18: &[Arg] = &reduce_args(18);
const fn reduce(onnx: &'static str, op: &'static OpDef, args: &'static [Arg]) -> OpMap {
    OpMap {
        ignored: &["noop_with_empty_axes"],
        quirk: Quirk::ReduceNoop,
        ..with(onnx, op, (1, 1), args)
    }
}
const fn trilu(op: &'static OpDef, held: &'static [Held]) -> OpMap {
    OpMap {
        opsets: (14, MAX_OPSET),
        held,
        ..with("Trilu", op, (1, 1), TRILU_K)
    }
}
const TRILU_K: &[Arg] = &[arg(
    "k",
    "diagonal",
    Place::Input(1),
    OnnxKind::Int,
    A::Int(0),
)];
const TRIU: &[Held] = &[held_int("upper", 1, &[1])];
const TRIL: &[Held] = &[held_int("upper", 1, &[0])];
/// Conv's int lists: at most 4096 each.
const fn conv_ints(onnx: &'static str, ours: &'static str, absent: &'static [i64]) -> Arg {
    Arg {
        range: Some((0, 1 << 12)),
        ..ints(onnx, ours, A::Ints(absent))
    }
}

/// Every table-driven op: ONNX op type and vocabulary op, in the order looked up (the
/// first row that fits the opset and the held attributes wins).
pub(crate) static OPS: &[OpMap] = &[
    // One-to-one, no attributes.
    binary("Add", &v::ADD),
    binary("Sub", &v::SUB),
    binary("Mul", &v::MUL),
    binary("Div", &v::DIV),
    binary("Pow", &v::POW),
    binary("And", &v::AND),
    binary("Or", &v::OR),
    binary("Equal", &v::EQ),
    binary("Less", &v::LT),
    binary("LessOrEqual", &v::LE),
    binary("Greater", &v::GT),
    binary("GreaterOrEqual", &v::GE),
    unary("Neg", &v::NEG),
    unary("Abs", &v::ABS),
    unary("Reciprocal", &v::RECIPROCAL),
    unary("Sqrt", &v::SQRT),
    unary("Exp", &v::EXP),
    unary("Log", &v::LOG),
    unary("Sin", &v::SIN),
    unary("Cos", &v::COS),
    unary("Erf", &v::ERF),
    unary("Tanh", &v::TANH),
    unary("Sigmoid", &v::SIGMOID),
    unary("Relu", &v::RELU),
    unary("Not", &v::NOT),
    unary("IsNaN", &v::ISNAN),
    row("Where", &v::WHERE, (3, 3)),
    row("MatMul", &v::MATMUL, (2, 2)),
    OpMap {
        dir: Dir::Save,
        ..row("Identity", &v::CONTIGUOUS, (1, 1))
    },
    // Variadic ONNX ops folded into a chain of binary ones.
    fold("Max", &v::MAXIMUM, Dir::Both),
    fold("Min", &v::MINIMUM, Dir::Both),
    fold("Sum", &v::ADD, Dir::Load),
    // Attributes renamed.
    OpMap {
        write_opset: 20,
        ..with(
            "Gelu",
            &v::GELU,
            (1, 1),
            &[Arg {
                choices: &["none", "tanh"],
                ..arg(
                    "approximate",
                    "approximate",
                    Place::Attr,
                    OnnxKind::Str,
                    A::Str("none"),
                )
            }],
        )
    },
    OpMap {
        opsets: (13, MAX_OPSET),
        ..with("Softmax", &v::SOFTMAX, (1, 1), SOFTMAX_ARGS)
    },
    OpMap {
        opsets: (13, MAX_OPSET),
        ..with("LogSoftmax", &v::LOG_SOFTMAX, (1, 1), SOFTMAX_ARGS)
    },
    // Cast-1 names the type with a string.
    OpMap {
        opsets: (6, MAX_OPSET),
        ignored: &["saturate", "round_mode"],
        ..with("Cast", &v::CAST, (1, 1), &[int("to", "dtype", A::Required)])
    },
    OpMap {
        quirk: Quirk::ConcatTotal,
        ..with(
            "Concat",
            &v::CONCAT,
            (1, usize::MAX),
            &[int("axis", "dim", A::Required)],
        )
    },
    with("Gather", &v::GATHER, (2, 2), AXIS_DIM),
    OpMap {
        dir: Dir::Save,
        ..with("Gather", &v::INDEX_SELECT, (2, 2), AXIS_DIM)
    },
    with("GatherElements", &v::GATHER_ELEMENTS, (2, 2), AXIS_DIM),
    // GatherND-11 has no `batch_dims`.
    OpMap {
        opsets: (1, 11),
        dir: Dir::Load,
        ..row("GatherND", &v::GATHER_ND, (2, 2))
    },
    OpMap {
        opsets: (12, MAX_OPSET),
        ..with(
            "GatherND",
            &v::GATHER_ND,
            (2, 2),
            &[int("batch_dims", "batch_dims", A::Int(0))],
        )
    },
    OpMap {
        held: NORM_HELD,
        quirk: Quirk::OnesScale,
        ..with("LayerNormalization", &v::LAYER_NORM, (2, 3), NORM_ARGS)
    },
    OpMap {
        held: NORM_HELD,
        quirk: Quirk::OnesScale,
        write_opset: 23,
        ..with("RMSNormalization", &v::RMS_NORM, (2, 2), NORM_ARGS)
    },
    // Inputs that are attributes in the vocabulary.
    trilu(&v::TRIU, TRIU),
    trilu(&v::TRIL, TRIL),
    OpMap {
        held: &[held_int("exclusive", 0, &[0]), held_int("reverse", 0, &[0])],
        ..with(
            "CumSum",
            &v::CUMSUM,
            (1, 1),
            &[arg(
                "axis",
                "dim",
                Place::Input(1),
                OnnxKind::Int,
                A::Required,
            )],
        )
    },
    with(
        "Transpose",
        &v::PERMUTE,
        (1, 1),
        &[Arg {
            shape: Shape::Perm,
            ..ints("perm", "dims", A::Reversed)
        }],
    ),
    with(
        "Squeeze",
        &v::SQUEEZE,
        (1, 1),
        &[Arg {
            shape: Shape::SortedAxes,
            ..arg(
                "axes",
                "dims",
                Place::Moved { input: 1, at: 13 },
                OnnxKind::Ints,
                A::Ints(&[]),
            )
        }],
    ),
    reduce("ReduceSum", &v::SUM, REDUCE_13),
    reduce("ReduceMean", &v::MEAN, REDUCE_18),
    reduce("ReduceMax", &v::AMAX, REDUCE_18),
    OpMap {
        held: &[Held {
            onnx: "auto_pad",
            values: HeldValues::Str {
                default: "NOTSET",
                accept: &["NOTSET", "VALID"],
            },
        }],
        ignored: &["kernel_shape"],
        ..with(
            "Conv",
            &v::CONV2D,
            (2, 3),
            &[
                conv_ints("strides", "stride", &[1, 1]),
                Arg {
                    shape: Shape::SymmetricPads,
                    ..conv_ints("pads", "padding", &[0, 0, 0, 0])
                },
                conv_ints("dilations", "dilation", &[1, 1]),
                Arg {
                    range: Some((1, 1 << 32)),
                    ..int("group", "groups", A::Int(1))
                },
            ],
        )
    },
];

/// The rows that load `op_type` of `domain` (`""`: ai.onnx) at default-domain opset
/// `opset`, in order.
pub(crate) fn loading<'a>(
    op_type: &'a str,
    domain: &'a str,
    opset: i64,
) -> impl Iterator<Item = &'static OpMap> + 'a {
    OPS.iter().filter(move |r| {
        r.onnx == op_type
            && r.domain == domain
            && r.dir != Dir::Save
            && (r.opsets.0..=r.opsets.1).contains(&opset)
    })
}

/// The row that writes vocabulary op `op` (names compared in line: this runs once a
/// saved node).
pub(crate) fn saving(op: &str) -> Option<&'static OpMap> {
    OPS.iter()
        .find(|r| same_bytes(r.op.name.as_bytes(), op.as_bytes()) && r.dir != Dir::Load)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod round_trip;
