//! The pattern's intermediate form: what analysis ([`super::analysis`]) builds from a
//! parsed pattern function, and lowering and code generation read. Nodes refer to each
//! other by index into [`Ir::nodes`]; parameters are the first slots, op nodes take the
//! next ones.

use quote::ToTokens;
use syn::{Expr, Ident, Path, Type};

use crate::vocab::{Kind, OpSpec};

/// The dtype names a pattern may write.
pub const DTYPES: &[&str] = &["f32", "f64", "f16", "bf16", "i64", "i32", "bool"];

/// The dtype name a pattern writes for a name users bring from torch, numpy or ONNX
/// (`float32` is `f32`).
pub fn dtype_alias(name: &str) -> Option<&'static str> {
    Some(match name {
        "float32" | "float" | "FLOAT" | "Float" | "single" => "f32",
        "float64" | "double" | "DOUBLE" | "Double" => "f64",
        "float16" | "half" | "FLOAT16" | "Half" => "f16",
        "bfloat16" | "BFLOAT16" | "BFloat16" => "bf16",
        "int64" | "long" | "INT64" | "Long" => "i64",
        "int32" | "int" | "INT32" | "Int" => "i32",
        "boolean" | "BOOL" | "Bool" => "bool",
        _ => return None,
    })
}

/// The kind of a parameter: the list `graphrw-ops` keeps for the macros and the runtime.
pub use graphrw_ops::ParamKind;

/// The kind a signature's type names, if it names one.
pub fn kind_of_type(ty: &Type) -> Option<ParamKind> {
    ParamKind::from_type_name(&ty.to_token_stream().to_string().replace(' ', ""))
}

pub struct Param {
    pub name: Ident,
    pub kind: Option<ParamKind>,
    /// Declared `Option<..>`: bound only when the optional part it is in matched.
    pub optional: bool,
    pub ty: Type,
}

/// A parameter type: its kind, and whether it is written `Option<..>` (an optional
/// part's binding). `None` for types a pattern does not support.
pub fn param_type(ty: &Type) -> Option<(ParamKind, bool)> {
    match option_inner(ty) {
        Some(inner) => kind_of_type(inner).map(|k| (k, true)),
        None => kind_of_type(ty).map(|k| (k, false)),
    }
}

/// `T` of a type written `Option<T>`.
pub fn option_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Option" || p.qself.is_some() {
        return None;
    }
    let syn::PathArguments::AngleBracketed(a) = &seg.arguments else {
        return None;
    };
    match a.args.iter().collect::<Vec<_>>().as_slice() {
        [syn::GenericArgument::Type(t)] => Some(t),
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Int(i64),
    Float(f64),
    Bool(bool),
    Ints(Vec<i64>),
    Str(String),
    DType(&'static str),
    Null,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AttrPattern {
    Lit(Lit),
    Param(usize),
    OneOf(Vec<Lit>),
}

#[derive(Clone)]
pub enum AttrKey {
    Builtin(usize, &'static str),
    User(Ident, Option<Kind>),
}

#[derive(Clone)]
pub struct AttrCheck {
    pub key: AttrKey,
    pub pat: AttrPattern,
}

#[derive(Clone)]
pub enum OpRef {
    Builtin(&'static OpSpec),
    User(Path),
}

impl OpRef {
    pub fn key(&self) -> String {
        match self {
            OpRef::Builtin(op) => op.name.to_string(),
            OpRef::User(p) => p.to_token_stream().to_string(),
        }
    }
    pub fn commutative(&self) -> bool {
        matches!(self, OpRef::Builtin(op) if op.commutative)
    }
}

#[derive(Clone)]
pub struct OpNode {
    pub op: OpRef,
    pub operands: Vec<usize>,
    pub more: bool,
    pub attrs: Vec<AttrCheck>,
    pub slot: Option<usize>,
}

#[derive(Clone)]
pub enum Node {
    Any,
    Tensor(usize),
    ConstValue(f64),
    ConstParam(usize),
    Op(OpNode),
    Alt(Vec<usize>),
    Repeat {
        body: usize,
        base: usize,
        min: u16,
        max: u16,
    },
    Hole(usize),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    Rank(usize),
    DType(usize),
    Dim(usize, i64),
    Users(usize),
    Param(usize),
    Int(i64),
    Float(f64),
    DTypeLit(&'static str),
    Bool(bool),
}

pub enum Check {
    Compare(Term, Cmp, Term),
    /// `check(|a, b| body)`: (name, slot, kind) per argument.
    Closure(Vec<(Ident, usize, ParamKind)>, Box<Expr>),
    Pred(Path),
}

pub struct Constraint {
    pub reads: Vec<usize>,
    pub check: Check,
    pub text: String,
}

/// A checked pattern.
pub struct Ir {
    pub params: Vec<Param>,
    pub nodes: Vec<Node>,
    pub roots: Vec<usize>,
    pub constraints: Vec<Constraint>,
    pub slots: usize,
}
