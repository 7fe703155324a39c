//! Why the gradient transform failed.

use thiserror::Error;

use crate::GraphError;

/// What went wrong while building a backward graph. Messages name the op and the node
/// (as the printer shows it) where one is involved.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum GradError {
    /// The differentiated output has more than one element and no cotangents were given.
    #[error("output {output} is {meta}, not a scalar: give output cotangents (`Cotangents::Given`) to differentiate a non-scalar output")]
    NonScalarOutput {
        /// The output index.
        output: usize,
        /// Its metadata as printed.
        meta: String,
    },
    /// A node on the differentiated path has an op with neither a vjp rule nor a
    /// decomposition.
    #[error("`{op}` (node {node}) has no vjp rule and no decomposition to differentiate through; register one with `GradRegistry::register`")]
    NoRule {
        /// The op.
        op: &'static str,
        /// The node as printed.
        node: String,
    },
    /// A `wrt` value is not a graph input.
    #[error("cannot differentiate with respect to {value}: {message}")]
    NotAnInput {
        /// The value as printed (`%N:i`).
        value: String,
        /// What it is instead.
        message: String,
    },
    /// A vjp rule returned something that does not fit its node, or refused it.
    #[error("vjp of `{op}` (node {node}): {message}")]
    Rule {
        /// The op.
        op: &'static str,
        /// The node as printed.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// The graph has no outputs, or the cotangent mode does not fit it.
    #[error("{0}")]
    Outputs(String),
    /// Building a backward node failed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

impl GradError {
    /// A rule failure for a rule to return: the transform fills in op and node.
    pub fn unsupported(message: impl Into<String>) -> GradError {
        GradError::Rule {
            op: "",
            node: String::new(),
            message: message.into(),
        }
    }
}
