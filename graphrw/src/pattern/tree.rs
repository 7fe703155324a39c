//! The static data a compiled pattern is made of.
//!
//! `pattern!` emits one [`Pattern`] per pattern function: its nodes in a `static` array,
//! referring to each other by index, plus its parameters, roots and constraints. Nothing
//! here is built at run time.

use crate::ops::OpDef;
use crate::pattern::bindings::{Bindings, Slot};
use crate::{DType, Graph};

/// The kind of a pattern parameter (the type written in the pattern's signature); one
/// list with the `pattern!` macro's, in `graphrw-ops`.
pub use graphrw_ops::ParamKind;

/// A pattern parameter; its slot is its position in [`Pattern::params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// Name as written.
    pub name: &'static str,
    /// Kind.
    pub kind: ParamKind,
}

/// One node of a pattern tree.
#[derive(Debug, PartialEq)]
pub enum PatNode {
    /// `_`: any value.
    Any,
    /// A tensor parameter: binds the value to the slot, or, when the slot is already
    /// bound, requires the same value.
    Tensor(Slot),
    /// A constant node holding one number (0-d or all-ones shape).
    Const(ConstPat),
    /// An op application.
    Op(OpPat),
    /// Alternatives, tried in order (`a | b`).
    Alt(&'static [u16]),
    /// A chain repeated `min..=max` times (`repeat(base, |t| body, min..=max)`).
    Repeat(RepeatPat),
    /// The hole of a repeated chain's body (the closure parameter); the number is the
    /// index of its [`PatNode::Repeat`].
    Hole(u16),
}

/// What a constant node must hold.
#[derive(Debug, PartialEq)]
pub enum ConstPat {
    /// This number (compared with a relative tolerance suited to the constant's dtype).
    Value(f64),
    /// Any number, bound to a scalar parameter (or equal to it when already bound).
    Param(Slot),
}

/// An op application in a pattern.
#[derive(Debug, PartialEq)]
pub struct OpPat {
    /// The op.
    pub op: &'static OpDef,
    /// Pattern nodes of the operands, in order.
    pub operands: &'static [u16],
    /// When true the node may have more operands than listed (`_` in a trailing optional
    /// slot, or `..`); otherwise exactly `operands.len()`.
    pub more_operands: bool,
    /// Checks of attributes; attributes not listed may be anything.
    pub attrs: &'static [AttrCheck],
    /// Slot that receives the node's value (output 0); `None` inside a repeated chain,
    /// whose nodes match once per iteration.
    pub slot: Option<Slot>,
}

/// A check of one attribute of an op node.
#[derive(Debug, PartialEq)]
pub struct AttrCheck {
    /// Index of the attribute in the op's signature.
    pub index: usize,
    /// Name of the attribute (for messages).
    pub name: &'static str,
    /// What the value must be.
    pub pat: AttrPat,
}

/// What an attribute value must be.
#[derive(Debug, PartialEq)]
pub enum AttrPat {
    /// This int.
    Int(i64),
    /// This float.
    Float(f64),
    /// This bool.
    Bool(bool),
    /// This int list.
    Ints(&'static [i64]),
    /// This string.
    Str(&'static str),
    /// This dtype.
    DType(DType),
    /// Unset (an optional attribute).
    Null,
    /// Bound to a parameter (or equal to it when already bound).
    Param(Slot),
    /// Any of these.
    OneOf(&'static [AttrPat]),
}

/// A repeated chain.
#[derive(Debug, PartialEq)]
pub struct RepeatPat {
    /// The chain applied once; it contains one [`PatNode::Hole`] where the previous
    /// iteration's value (or the base) goes.
    pub body: u16,
    /// What the innermost iteration is applied to.
    pub base: u16,
    /// Fewest iterations.
    pub min: u16,
    /// Most iterations (`u16::MAX`: unbounded).
    pub max: u16,
}

/// How to find candidates for a root other than the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// A slot the earlier roots always bind to a value, and that occurs in this root.
    pub slot: Slot,
    /// How many ops lie between this root and that occurrence: candidates are the
    /// consumers of the bound value, `depth` levels up.
    pub depth: u16,
}

/// One output of a pattern (tuple returns give several).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// Its node.
    pub node: u16,
    /// How candidates are found (`None` for the first root, which is the anchor, and for
    /// roots that share nothing with earlier ones: those scan their op index).
    pub link: Option<Link>,
}

/// A comparison operator of a constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// One side of a constraint comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Term {
    /// `rank(x)` of a tensor binding.
    Rank(Slot),
    /// `dtype(x)` of a tensor binding.
    DType(Slot),
    /// `dim(x, i)` of a tensor binding (negative `i` counts from the end).
    Dim(Slot, i64),
    /// `users(x)`: how many node operands use the value, plus one if it is a graph output.
    Users(Slot),
    /// A scalar parameter.
    Param(Slot),
    /// An int literal.
    Int(i64),
    /// A float literal.
    Float(f64),
    /// A dtype literal.
    DTypeLit(DType),
    /// A bool literal.
    Bool(bool),
}

/// A predicate over a match in progress (the `check(..)` and `pred(..)` escape hatches).
pub type PredFn = fn(&Graph, &Bindings) -> bool;

/// What a constraint checks.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// A comparison of two terms.
    Compare(Term, CmpOp, Term),
    /// A Rust predicate.
    Pred(PredFn),
}

/// A `where` constraint. The matcher runs it as soon as every slot in `reads` is bound.
#[derive(Clone, Copy, Debug)]
pub struct Constraint {
    /// The slots it reads.
    pub reads: &'static [Slot],
    /// What it checks.
    pub check: Check,
    /// Its source text (for messages and the printer).
    pub text: &'static str,
}

/// A compiled pattern: what `pattern!` emits as `<name>::PATTERN`.
#[derive(Debug)]
pub struct Pattern {
    /// The pattern function's name.
    pub name: &'static str,
    /// Where it was written (`file:line`).
    pub location: &'static str,
    /// Parameters; parameter `i` is slot `i`.
    pub params: &'static [Param],
    /// Number of slots (parameters, then one per op node).
    pub slots: u16,
    /// The nodes; they refer to each other by index.
    pub nodes: &'static [PatNode],
    /// The outputs; the first is the anchor.
    pub roots: &'static [Root],
    /// The ops the anchor node can have (candidates come from the graph's op index).
    pub anchors: &'static [&'static OpDef],
    /// `where` constraints.
    pub constraints: &'static [Constraint],
    /// Number of ops the pattern matches (the default rule priority).
    pub op_count: u16,
}

impl Pattern {
    /// A pattern that matches nothing (emitted in place of a pattern with errors so that
    /// one mistake does not cascade).
    pub const STUB: Pattern = Pattern {
        name: "<error>",
        location: "",
        params: &[],
        slots: 0,
        nodes: &[],
        roots: &[],
        anchors: &[],
        constraints: &[],
        op_count: 0,
    };

    /// The slot of parameter `name`.
    pub fn param_slot(&self, name: &str) -> Option<Slot> {
        self.params
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as Slot)
    }

    /// Number of outputs.
    pub fn output_count(&self) -> usize {
        self.roots.len()
    }
}
