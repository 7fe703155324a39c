//! Errors of graph construction, inference and verification.

use thiserror::Error;

/// What went wrong while building, checking or changing a graph. Messages name the
/// node (by id `%N` or its given name), the op, and what was expected.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum GraphError {
    /// A node id that does not exist (removed, or never made).
    #[error("node %{0} does not exist")]
    NoSuchNode(usize),
    /// An output index past the node's outputs.
    #[error("node %{node} has no output {output}")]
    NoSuchOutput {
        /// Node id.
        node: usize,
        /// Output index.
        output: u32,
    },
    /// An operand index past the node's operands.
    #[error("node %{node} has no operand {operand}")]
    NoSuchOperand {
        /// Node id.
        node: usize,
        /// Operand index.
        operand: usize,
    },
    /// No op of that name.
    #[error("unknown op `{name}`{}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownOp {
        /// The name asked for.
        name: String,
        /// The closest known name.
        suggestion: Option<String>,
    },
    /// Two ops registered under one name.
    #[error("an op named `{0}` is already registered")]
    DuplicateOp(String),
    /// Operands or attributes do not fit the op's signature.
    #[error("`{op}`{}: {message}", node.as_ref().map(|n| format!(" (node {n})")).unwrap_or_default())]
    Signature {
        /// Op name.
        op: &'static str,
        /// Node name when known.
        node: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// Metadata inference rejected the operands.
    #[error("`{op}`{} on ({}): {message}", node.as_ref().map(|n| format!(" (node {n})")).unwrap_or_default(), inputs.join(", "))]
    Infer {
        /// Op name.
        op: &'static str,
        /// Node name when known.
        node: Option<String>,
        /// The operands' metadata as printed.
        inputs: Vec<String>,
        /// What is wrong.
        message: String,
    },
    /// A node still has users and cannot be removed.
    #[error("node %{node} (`{op}`) is still used by node %{user}")]
    StillUsed {
        /// Node id.
        node: usize,
        /// Op name.
        op: &'static str,
        /// A user's id.
        user: usize,
    },
    /// A node is a graph output and cannot be removed.
    #[error("node %{node} (`{op}`) is a graph output")]
    IsOutput {
        /// Node id.
        node: usize,
        /// Op name.
        op: &'static str,
    },
    /// The graph has a cycle through this node.
    #[error("the graph has a cycle through node %{node}")]
    Cycle {
        /// A node on the cycle.
        node: usize,
    },
    /// The verifier found a problem.
    #[error("verifier: node {node}: {message}")]
    Verify {
        /// The node as the printer shows it.
        node: String,
        /// What is wrong and what was expected.
        message: String,
    },
}
