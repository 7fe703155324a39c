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
    #[error("{}", infer_line(op, node.as_deref(), inputs, message))]
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

/// `e` as shown after a caller that already named the node `node` (the ONNX importer's
/// `MatMul node_x: `): an inference error of that node leaves out its `(node ...)`, so
/// that the line does not spend its length on the name twice.
pub(crate) fn graph_error_at(node: &str, e: &GraphError) -> String {
    match e {
        GraphError::Infer {
            op,
            node: Some(n),
            inputs,
            message,
        } if n == node => infer_line(op, None, inputs, message),
        _ => e.to_string(),
    }
}

/// The longest [`GraphError::Infer`] line with the operands shown: errors' first lines
/// stay within 200 characters with room for a caller's prefix (the ONNX node).
const MAX_LINE: usize = 150;

/// One line for [`GraphError::Infer`]: the op, the node, the operands' metadata and the
/// message, leaving the operands out when the line would pass [`MAX_LINE`] characters
/// (the message names the shapes it is about), and cutting a message longer than that.
fn infer_line(op: &str, node: Option<&str>, inputs: &[String], message: &str) -> String {
    let at = node.map(|n| format!(" (node {n})")).unwrap_or_default();
    let full = format!("`{op}`{at} on ({}): {message}", inputs.join(", "));
    if full.chars().count() <= MAX_LINE {
        return full;
    }
    let short = format!("`{op}`{at}: {message}");
    if short.chars().count() <= MAX_LINE {
        return short;
    }
    // A message that is long by itself (a shape of very high rank): leave out its
    // trailing parenthesis (the messages say what differs first, then the shapes in
    // parentheses), else cut it.
    if let Some(i) = short.rfind(" (").filter(|&i| i > at.len() + op.len() + 3) {
        if short[..i].chars().count() <= MAX_LINE && short.ends_with(')') {
            return short[..i].to_string();
        }
    }
    let mut cut: String = short.chars().take(MAX_LINE - 1).collect();
    cut.push('…');
    cut
}
