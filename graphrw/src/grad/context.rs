//! What a vjp rule is and sees: the [`VjpFn`] type and the [`VjpContext`] a rule
//! reads (the rules themselves are in `vjp_rules`, the registry in `registry`).

use std::fmt;

use super::GradError;
use crate::builder::{Builder, Var};
use crate::meta::{Shape, TensorMeta};
use crate::ops::{AttrValue, Attrs, OpDef};
use crate::Value;

/// What a vjp rule returns: one optional gradient per operand of the node, in operand
/// order (`None`: no gradient, e.g. an index or a mask).
pub type VjpResult<'b> = Result<Vec<Option<Var<'b>>>, GradError>;

/// A vjp rule: builds the gradients of a node's operands from the cotangents of its
/// outputs, with the builder the context holds. A plain `fn`, so generated code and
/// `static` tables can name it.
///
/// ```
/// use graphrw::grad::{VjpContext, VjpResult};
///
/// /// `mul(a, b)`: `(g * b, g * a)`; broadcasting is undone by the transform.
/// fn mul_vjp<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
///     let g = cx.cotangent(0)?;
///     Ok(vec![Some(g.mul(cx.input(1))?), Some(g.mul(cx.input(0))?)])
/// }
/// ```
pub type VjpFn = for<'b> fn(&VjpContext<'b>) -> VjpResult<'b>;

/// Everything a vjp rule may read about the node it differentiates, and the builder
/// to add backward nodes with.
pub struct VjpContext<'b> {
    pub(super) builder: &'b Builder,
    pub(super) op: &'static OpDef,
    pub(super) node: String,
    pub(super) attrs: Vec<AttrValue>,
    pub(super) inputs: Vec<Value>,
    pub(super) outputs: Vec<Value>,
    pub(super) cotangents: Vec<Option<Value>>,
    pub(super) needs_grad: Vec<bool>,
}

impl<'b> VjpContext<'b> {
    /// The builder that the backward graph is being built on.
    pub fn builder(&self) -> &'b Builder {
        self.builder
    }

    /// The op of the node.
    pub fn op(&self) -> &'static OpDef {
        self.op
    }

    /// The node as the printer names it (for messages).
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The node's attributes (normalised: every attribute present).
    pub fn attrs(&self) -> Attrs<'_> {
        Attrs::new(self.op.attrs, &self.attrs)
    }

    /// How many operands the node has.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Operand `i` of the node (a forward value, usable in backward nodes).
    pub fn input(&self, i: usize) -> Var<'b> {
        self.builder.var(self.inputs[i])
    }

    /// Operand `i`, if the node has that many operands (optional operands).
    pub fn try_input(&self, i: usize) -> Option<Var<'b>> {
        self.inputs.get(i).map(|&v| self.builder.var(v))
    }

    /// The metadata of operand `i`.
    pub fn input_meta(&self, i: usize) -> Result<TensorMeta, GradError> {
        Ok(self.builder.meta(self.inputs[i])?)
    }

    /// Output `i` of the node (the forward result, reusable in the backward).
    pub fn output(&self, i: usize) -> Var<'b> {
        self.builder.var(self.outputs[i])
    }

    /// How many outputs the node has.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The cotangent of output `i`, or `None` when nothing downstream needs it.
    pub fn cotangent_opt(&self, i: usize) -> Option<Var<'b>> {
        self.cotangents
            .get(i)
            .copied()
            .flatten()
            .map(|v| self.builder.var(v))
    }

    /// The cotangent of output `i`; zeros of the output's metadata when nothing
    /// downstream needs that output (multi-output ops).
    pub fn cotangent(&self, i: usize) -> Result<Var<'b>, GradError> {
        if let Some(v) = self.cotangent_opt(i) {
            return Ok(v);
        }
        let meta = self.builder.meta(self.outputs[i])?;
        zeros(self.builder, &meta, &self.node)
    }

    /// True when the gradient of operand `i` is needed (a rule may skip the work
    /// for operands that are not, and return `None` for them).
    pub fn needs_grad(&self, i: usize) -> bool {
        self.needs_grad.get(i).copied().unwrap_or(false)
    }
}

impl fmt::Debug for VjpContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VjpContext")
            .field("op", &self.op.name)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

pub(super) fn known_dims(shape: &Shape) -> Result<Vec<i64>, GradError> {
    shape
        .dims()
        .iter()
        .map(|d| {
            d.known().map(|n| n as i64).ok_or_else(|| {
                GradError::unsupported(format!("needs a known shape, found {shape}"))
            })
        })
        .collect()
}

/// Zeros of `meta` (a known shape), for values no cotangent reaches.
pub(super) fn zeros<'b>(
    b: &'b Builder,
    meta: &TensorMeta,
    what: &str,
) -> Result<Var<'b>, GradError> {
    let dims = known_dims(&meta.shape).map_err(|_| {
        GradError::Outputs(format!(
            "zeros for {what} need a known shape, found {}",
            meta.shape
        ))
    })?;
    Ok(b.var(b.zeros_with(&dims, meta.dtype)?))
}
