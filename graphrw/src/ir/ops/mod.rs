//! The op vocabulary: what an op is ([`OpDef`]), its attributes, and the built-in ops.
//!
//! Every op, built-in or user-declared, is a `static` [`OpDef`]: its operands, its
//! attributes with kinds and defaults, how many outputs it has, whether it is
//! commutative, how its output metadata is inferred, and optionally a decomposition
//! into other ops. The built-in statics live in [`builtin`] and are generated from the
//! op table in `graphrw-ops` (the same table `pattern!` checks against), with [`Op`],
//! one variant per built-in op: [`OpDef::builtin`] says which built-in op a definition
//! is (`None` for ops declared elsewhere), and dispatch is an exhaustive `match` on it.
//!
//! Declaring your own op is writing another `static`, with `builtin: None`:
//!
//! ```
//! use graphrw::ops::{AttrDefault, AttrKind, AttrSpec, Arity, Attrs, Infer, InferError, OpClass,
//!     OpDef, OperandSpec, OutputCount};
//! use graphrw::TensorMeta;
//!
//! fn infer_scale(inputs: &[&TensorMeta], _attrs: &Attrs) -> Result<Vec<TensorMeta>, InferError> {
//!     Ok(vec![inputs[0].clone()])
//! }
//!
//! /// `input * factor`.
//! pub static SCALE: OpDef = OpDef {
//!     name: "my.scale",
//!     doc: "Multiplies by a constant factor.",
//!     operands: &[OperandSpec { name: "input", arity: Arity::Required }],
//!     attrs: &[AttrSpec { name: "factor", kind: AttrKind::Float, default: AttrDefault::Float(1.0) }],
//!     outputs: OutputCount::Fixed(1),
//!     commutative: false,
//!     class: OpClass::Elementwise,
//!     infer: Infer::Fn(infer_scale),
//!     decompose: None,
//!     builtin: None, // not a built-in op
//! };
//! ```

pub mod builtin;
pub mod decompose;
mod id;
pub mod infer;

use std::fmt;

use crate::graph::draft::Builder;
use crate::graph::Value;
use crate::meta::{DType, EvalError, SymExpr, TensorMeta};
use crate::GraphError;

pub use builtin::{Op, BUILTIN};
/// The parts of an op's signature that the op table (`graphrw-ops`) and `OpDef` share:
/// operand slots and their arity, attribute kinds, output counts and op classes.
/// A loss's `reduction`, the values of its attribute.
pub use graphrw_kernels::fused::cross_entropy::Reduction;
pub use graphrw_ops::vocab::{
    Arity, Class as OpClass, Kind as AttrKind, Operand as OperandSpec, Outputs as OutputCount,
};
pub use graphrw_ops::GeluApproximation;
pub use id::OpId;

/// An attribute's default, usable in a `static`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttrDefault {
    /// No default: every node must give it.
    Required,
    /// Optional, absent unless given ([`AttrValue::Null`]).
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
    /// A dtype.
    DType(DType),
}

impl AttrDefault {
    /// The default as a value, or `None` when the attribute is required.
    pub fn value(&self) -> Option<AttrValue> {
        Some(match *self {
            AttrDefault::Required => return None,
            AttrDefault::Null => AttrValue::Null,
            AttrDefault::Int(v) => AttrValue::Int(v),
            AttrDefault::Float(v) => AttrValue::Float(v),
            AttrDefault::Bool(v) => AttrValue::Bool(v),
            AttrDefault::Ints(v) => AttrValue::Ints(v.to_vec()),
            AttrDefault::Str(v) => AttrValue::Str(v.to_string()),
            AttrDefault::DType(v) => AttrValue::DType(v),
        })
    }
}

/// One attribute of an op.
#[derive(Clone, Copy, Debug)]
pub struct AttrSpec {
    /// Name.
    pub name: &'static str,
    /// Kind.
    pub kind: AttrKind,
    /// Default.
    pub default: AttrDefault,
}

/// A concrete attribute value on a node.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// An optional attribute left unset.
    Null,
    /// An int.
    Int(i64),
    /// A float.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// An int list.
    Ints(Vec<i64>),
    /// A string.
    Str(String),
    /// A dtype.
    DType(DType),
    /// An int (or integral float) known only at run time: `seq`, `past + seq`.
    Sym(SymExpr),
    /// An int list some of whose entries are known only at run time
    /// (`reshape(x, [batch, seq, 12, 64])`).
    Dims(Vec<SymExpr>),
}

impl AttrValue {
    /// An int list that is `Ints` where every entry is known, else `Dims`.
    pub fn sym_ints(v: Vec<SymExpr>) -> AttrValue {
        match v
            .iter()
            .map(SymExpr::as_const)
            .collect::<Option<Vec<i64>>>()
        {
            Some(ints) => AttrValue::Ints(ints),
            None => AttrValue::Dims(v),
        }
    }

    /// An int that is `Int` where known, else `Sym`.
    pub fn sym_int(v: SymExpr) -> AttrValue {
        match v.as_const() {
            Some(n) => AttrValue::Int(n),
            None => AttrValue::Sym(v),
        }
    }

    /// True when the value depends on symbols bound at run time.
    pub fn is_symbolic(&self) -> bool {
        matches!(self, AttrValue::Sym(_) | AttrValue::Dims(_))
    }

    /// This value with its symbols bound: `Sym` becomes `Int` (or `Float` where the
    /// attribute is a float), `Dims` becomes `Ints`. Other values are returned as they are.
    pub fn bind(
        &self,
        kind: AttrKind,
        env: &dyn Fn(&str) -> Option<i64>,
    ) -> Result<AttrValue, EvalError> {
        Ok(match self {
            AttrValue::Sym(e) if kind == AttrKind::Float => AttrValue::Float(e.eval(env)? as f64),
            AttrValue::Sym(e) => AttrValue::Int(e.eval(env)?),
            AttrValue::Dims(v) => {
                AttrValue::Ints(v.iter().map(|e| e.eval(env)).collect::<Result<_, _>>()?)
            }
            v => v.clone(),
        })
    }

    /// True when this value may be stored in an attribute of `spec`.
    pub fn fits(&self, spec: &AttrSpec) -> bool {
        match self {
            AttrValue::Null => spec.default == AttrDefault::Null,
            AttrValue::Int(_) => spec.kind == AttrKind::Int,
            AttrValue::Float(_) => spec.kind == AttrKind::Float,
            AttrValue::Bool(_) => spec.kind == AttrKind::Bool,
            AttrValue::Ints(_) => spec.kind == AttrKind::Ints,
            AttrValue::Str(_) => spec.kind == AttrKind::Str,
            AttrValue::DType(_) => spec.kind == AttrKind::DType,
            AttrValue::Sym(_) => matches!(spec.kind, AttrKind::Int | AttrKind::Float),
            AttrValue::Dims(_) => spec.kind == AttrKind::Ints,
        }
    }

    /// A short name of what this value is, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            AttrValue::Null => "none",
            AttrValue::Int(_) => "int",
            AttrValue::Float(_) => "float",
            AttrValue::Bool(_) => "bool",
            AttrValue::Ints(_) => "int list",
            AttrValue::Str(_) => "string",
            AttrValue::DType(_) => "dtype",
            AttrValue::Sym(_) => "symbolic int",
            AttrValue::Dims(_) => "symbolic int list",
        }
    }
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Null => f.write_str("None"),
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{v:?}"),
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Ints(v) => write!(f, "{v:?}"),
            AttrValue::Str(v) => write!(f, "{v:?}"),
            AttrValue::DType(v) => write!(f, "{v}"),
            AttrValue::Sym(v) => write!(f, "{v}"),
            AttrValue::Dims(v) => {
                f.write_str("[")?;
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// A node's attributes read through its op's signature (every attribute present).
#[derive(Clone, Copy, Debug)]
pub struct Attrs<'a> {
    specs: &'static [AttrSpec],
    values: &'a [AttrValue],
}

impl<'a> Attrs<'a> {
    /// Views `values` (aligned with `specs`) by name.
    pub fn new(specs: &'static [AttrSpec], values: &'a [AttrValue]) -> Attrs<'a> {
        Attrs { specs, values }
    }

    /// Every value, aligned with the op's signature.
    pub fn values(&self) -> &'a [AttrValue] {
        self.values
    }

    /// The value of attribute `name`, if the op has it.
    pub fn get(&self, name: &str) -> Option<&'a AttrValue> {
        let i = self.specs.iter().position(|s| s.name == name)?;
        self.values.get(i)
    }

    /// (name, value) pairs in signature order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'a AttrValue)> + '_ {
        self.specs.iter().map(|s| s.name).zip(self.values.iter())
    }

    /// Attribute `name` as an int.
    pub fn int(&self, name: &str) -> Result<i64, InferError> {
        match self.get(name) {
            Some(AttrValue::Int(v)) => Ok(*v),
            other => Err(attr_kind_error(name, "int", other)),
        }
    }

    /// Attribute `name` as a float.
    pub fn float(&self, name: &str) -> Result<f64, InferError> {
        match self.get(name) {
            Some(AttrValue::Float(v)) => Ok(*v),
            other => Err(attr_kind_error(name, "float", other)),
        }
    }

    /// Optional float attribute `name` (`None` when unset).
    pub fn opt_float(&self, name: &str) -> Result<Option<f64>, InferError> {
        match self.get(name) {
            Some(AttrValue::Float(v)) => Ok(Some(*v)),
            Some(AttrValue::Null) => Ok(None),
            other => Err(attr_kind_error(name, "float or None", other)),
        }
    }

    /// Attribute `name` as a bool.
    pub fn bool(&self, name: &str) -> Result<bool, InferError> {
        match self.get(name) {
            Some(AttrValue::Bool(v)) => Ok(*v),
            other => Err(attr_kind_error(name, "bool", other)),
        }
    }

    /// Attribute `name` as an int list.
    pub fn ints(&self, name: &str) -> Result<&'a [i64], InferError> {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => Ok(v),
            other => Err(attr_kind_error(name, "int list", other)),
        }
    }

    /// Attribute `name` as an int list whose entries may be symbolic (`Ints` or `Dims`).
    pub fn sym_ints(&self, name: &str) -> Result<std::borrow::Cow<'a, [SymExpr]>, InferError> {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => Ok(v.iter().map(|&n| SymExpr::int(n)).collect()),
            Some(AttrValue::Dims(v)) => Ok(std::borrow::Cow::Borrowed(v)),
            other => Err(attr_kind_error(name, "int list", other)),
        }
    }

    /// Attribute `name` as an int that may be symbolic (`Int`, an integral `Float`, or
    /// `Sym`).
    pub fn sym_int(&self, name: &str) -> Result<SymExpr, InferError> {
        match self.get(name) {
            Some(AttrValue::Int(v)) => Ok(SymExpr::int(*v)),
            Some(AttrValue::Float(v)) if v.fract() == 0.0 && v.abs() < 9.0e15 => {
                Ok(SymExpr::int(*v as i64))
            }
            Some(AttrValue::Sym(e)) => Ok(e.clone()),
            other => Err(attr_kind_error(name, "int", other)),
        }
    }

    /// Attribute `name` as a string.
    pub fn str(&self, name: &str) -> Result<&'a str, InferError> {
        match self.get(name) {
            Some(AttrValue::Str(v)) => Ok(v),
            other => Err(attr_kind_error(name, "string", other)),
        }
    }

    /// `gelu`'s `approximate` attribute, read as its enum.
    pub fn gelu_approximation(&self) -> Result<GeluApproximation, InferError> {
        let word = self.str("approximate")?;
        GeluApproximation::parse(word).ok_or_else(|| {
            InferError(format!(
                "gelu approximate must be \"none\" or \"tanh\", found {word:?}"
            ))
        })
    }

    /// A loss's `reduction` attribute, read as its enum.
    pub fn reduction(&self) -> Result<Reduction, InferError> {
        let word = self.str("reduction")?;
        Reduction::parse(word).map_err(|_| {
            InferError(format!(
                "reduction must be \"mean\", \"sum\" or \"none\", found {word:?}"
            ))
        })
    }

    /// Attribute `name` as a dtype.
    pub fn dtype(&self, name: &str) -> Result<DType, InferError> {
        match self.get(name) {
            Some(AttrValue::DType(v)) => Ok(*v),
            other => Err(attr_kind_error(name, "dtype", other)),
        }
    }
}

fn attr_kind_error(name: &str, expected: &str, found: Option<&AttrValue>) -> InferError {
    InferError(match found {
        None => format!("has no attribute `{name}`"),
        Some(v) => format!("attribute `{name}` should be {expected}, found {v}"),
    })
}

/// Why metadata inference rejected its inputs (the caller adds op and node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferError(pub String);

impl fmt::Display for InferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InferError {}

/// Makes an [`InferError`] from a format string.
#[macro_export]
#[doc(hidden)]
macro_rules! infer_bail {
    ($($t:tt)*) => { return Err($crate::ops::InferError(format!($($t)*))) };
}

/// A metadata inference function: operand metadata and attributes to output metadata.
pub type InferFn = fn(&[&TensorMeta], &Attrs) -> Result<Vec<TensorMeta>, InferError>;

/// A decomposition: builds the op out of other ops on `builder`, from the operands
/// and attributes of a node, and returns the values that replace its outputs.
pub type DecomposeFn = fn(&Builder, &[Value], &Attrs) -> Result<Vec<Value>, GraphError>;

/// How an op's output metadata is found.
#[derive(Clone, Copy)]
pub enum Infer {
    /// By a function.
    Fn(InferFn),
    /// By running the op's decomposition on metadata alone (Thunder's `like`).
    Like,
    /// Given when the node is made (graph inputs and constants).
    Declared,
}

impl fmt::Debug for Infer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Infer::Fn(_) => "Fn",
            Infer::Like => "Like",
            Infer::Declared => "Declared",
        })
    }
}

/// An op: everything the graph, the patterns and the executors know about it.
#[derive(Debug)]
pub struct OpDef {
    /// Unique name; built-in ops use ATen names, user ops should use a prefix (`my.op`).
    pub name: &'static str,
    /// One-line description.
    pub doc: &'static str,
    /// Operand slots in order.
    pub operands: &'static [OperandSpec],
    /// Attributes in order; every node carries all of them.
    pub attrs: &'static [AttrSpec],
    /// Output count.
    pub outputs: OutputCount,
    /// True when the first two operands may be swapped.
    pub commutative: bool,
    /// Family.
    pub class: OpClass,
    /// Metadata inference.
    pub infer: Infer,
    /// Decomposition into other ops, if any.
    pub decompose: Option<DecomposeFn>,
    /// Which built-in op this is: `Some` in the built-in statics (generated from the op
    /// table), `None` in every op declared elsewhere. Dispatch on a node's op is a
    /// `match` on it, never a comparison of names.
    pub builtin: Option<Op>,
}

impl OpDef {
    /// True when this is built-in op `op` (a compare of two small enums).
    pub fn is(&self, op: Op) -> bool {
        self.builtin == Some(op)
    }

    /// The op's identity, the key of every registry: a built-in's is its [`Op`]'s; any
    /// other definition's is interned by its name the first time it is asked for (two
    /// definitions with the same name have the same id).
    pub fn id(&self) -> OpId {
        match self.builtin {
            Some(op) => op.into(),
            None => id::id_of_declared(self),
        }
    }

    /// The index of attribute `name`.
    pub fn attr_index(&self, name: &str) -> Option<usize> {
        self.attrs.iter().position(|a| a.name == name)
    }

    /// The fewest and most operands a node of this op may have (`None`: unbounded).
    pub fn operand_range(&self) -> (usize, Option<usize>) {
        let mut min = 0;
        let mut max = Some(0usize);
        for o in self.operands {
            match o.arity {
                Arity::Required => {
                    min += 1;
                    max = max.map(|m| m + 1);
                }
                Arity::Optional => max = max.map(|m| m + 1),
                Arity::Variadic => max = None,
            }
        }
        (min, max)
    }

    /// How many outputs a node with these attributes has.
    pub fn output_count(&self, attrs: &[AttrValue]) -> usize {
        match self.outputs {
            OutputCount::Fixed(n) => n,
            OutputCount::PerElementOf(name) => {
                match self.attr_index(name).and_then(|i| attrs.get(i)) {
                    Some(AttrValue::Ints(v)) => v.len(),
                    _ => 0,
                }
            }
        }
    }

    /// True for the two source ops whose nodes are made with declared metadata (graph
    /// inputs and constants; an `opaque` node declares its metadata too, but it computes).
    pub fn is_source_leaf(&self) -> bool {
        matches!(self.infer, Infer::Declared) && self.class == OpClass::Source
    }
}

impl PartialEq for OpDef {
    /// The same op: the same definition, or the same [`OpId`].
    fn eq(&self, other: &OpDef) -> bool {
        std::ptr::eq(self, other) || self.id() == other.id()
    }
}

impl Eq for OpDef {}

/// The built-in op named `name` (for the edges where ops come in as text).
pub fn lookup(name: &str) -> Option<&'static OpDef> {
    OpId::find(name).and_then(OpId::builtin).map(Op::def)
}

/// A set of ops by name: the built-ins plus any user ops registered on it (used by
/// importers and the command line to resolve names).
#[derive(Clone, Debug)]
pub struct OpRegistry {
    ops: std::collections::BTreeMap<&'static str, &'static OpDef>,
}

impl Default for OpRegistry {
    fn default() -> Self {
        OpRegistry::with_builtins()
    }
}

impl OpRegistry {
    /// A registry holding every built-in op.
    pub fn with_builtins() -> OpRegistry {
        OpRegistry {
            ops: BUILTIN.iter().map(|op| (op.name, *op)).collect(),
        }
    }

    /// Adds a user op; an op of the same name is an error.
    pub fn register(&mut self, op: &'static OpDef) -> Result<(), GraphError> {
        if let Err(message) = op.soundness() {
            return Err(GraphError::Signature {
                op: op.name,
                node: None,
                message: message.into(),
            });
        }
        if self.ops.contains_key(op.name) {
            return Err(GraphError::DuplicateOp(op.name.to_string()));
        }
        self.ops.insert(op.name, op);
        Ok(())
    }

    /// The op named `name`.
    pub fn get(&self, name: &str) -> Option<&'static OpDef> {
        self.ops.get(name).copied()
    }

    /// Every op, by name.
    pub fn iter(&self) -> impl Iterator<Item = &'static OpDef> + '_ {
        self.ops.values().copied()
    }
}
