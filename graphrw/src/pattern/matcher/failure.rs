//! Why a match failed: the deepest point the matcher reached in explain mode, and its
//! reason (what `explain` prints).

use crate::pattern::{Bound, Slot};
use crate::Value;

/// Where a failed match stopped: the deepest failure the matcher met (explain mode only).
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// Graph nodes matched when it stopped.
    pub depth: usize,
    /// Parameters bound when it stopped.
    pub bound: usize,
    /// The pattern node being matched (`None`: before the first root).
    pub pat: Option<u16>,
    /// The graph value it was matched against.
    pub value: Value,
    /// Why it failed.
    pub why: Why,
}

/// The reason of a [`Failure`].
#[derive(Clone, Debug)]
pub(crate) enum Why {
    /// The anchor's op is not one the pattern can start at.
    Anchor,
    /// A different op (or a constant where an op was expected).
    Op { expected: Vec<&'static str> },
    /// Not output 0 of its node.
    Output,
    /// Wrong number of operands.
    Operands {
        want: usize,
        more: bool,
        found: usize,
    },
    /// An attribute has another value.
    Attr {
        name: &'static str,
        index: usize,
        attr: usize,
    },
    /// Not a one-element constant.
    NotConst,
    /// A constant with another number.
    ConstValue { want: f64, found: f64 },
    /// An int parameter met a fractional constant.
    NotInt { found: f64 },
    /// A name already bound to something else.
    Rebound { slot: Slot, old: Bound, new: Bound },
    /// A shared (`let`) node already matched another value.
    Shared { old: Value },
    /// A `where` constraint failed.
    Constraint { index: usize, detail: String },
    /// No candidate for a further root of a multi-output pattern.
    NoRoot { root: u16 },
}
