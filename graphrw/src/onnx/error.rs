//! What can go wrong reading or writing ONNX.

use thiserror::Error;

use crate::GraphError;

/// An error of ONNX import or export. Every message names the file, initialiser,
/// input or node concerned and says what is wrong.
#[derive(Debug, Error)]
pub enum OnnxError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid protobuf message of the expected kind.
    #[error("{what} is not a valid ONNX protobuf (truncated or corrupt): {message}")]
    Decode {
        /// What was being decoded (`model`, `tensor file x.pb`).
        what: String,
        /// The decoder's reason.
        message: String,
    },
    /// The model as a whole is not something graphrw can read.
    #[error("{0}")]
    Model(String),
    /// A graph input cannot be declared (no tensor type, unsupported dtype, bad dim).
    #[error("graph input `{name}`: {message}")]
    Input {
        /// The input's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// An initialiser or tensor attribute cannot be decoded.
    #[error("tensor `{name}`: {message}")]
    Tensor {
        /// The tensor's name (initialiser name, or `node/attribute`).
        name: String,
        /// What is wrong.
        message: String,
    },
    /// External data is missing, out of bounds or outside the model's folder.
    #[error("external data of tensor `{name}`: {message}")]
    ExternalData {
        /// The initialiser's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// An op type that has no mapping onto the vocabulary.
    #[error("unknown ONNX op `{op_type}` (domain `{domain}`) at node {node}")]
    UnknownOp {
        /// The ONNX op type.
        op_type: String,
        /// Its domain (empty for the default domain).
        domain: String,
        /// The node's name.
        node: String,
    },
    /// A node the importer or exporter cannot translate.
    #[error("{op_type} {node}: {message}")]
    Node {
        /// The ONNX op type (import) or vocabulary op (export).
        op_type: String,
        /// The node's name.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// A node of an op graphrw knows (its ONNX table or a special case of the loader)
    /// that breaks the ONNX spec: an attribute of the wrong kind, a missing required
    /// input, an out-of-range axis, an undefined element type, an impossible equation.
    /// Unlike [`OnnxError::Node`] (a valid form graphrw does not read, which the
    /// importer carries as an opaque node), this refuses the model. See `MALFORMED.md`.
    #[error("malformed {op_type} node {node}: {message}")]
    Malformed {
        /// The ONNX op type.
        op_type: String,
        /// The node's name.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// A node uses a value nothing defines.
    #[error("node {node} uses `{value}`, which is not defined (no graph input, initialiser or node output of that name)")]
    Undefined {
        /// The node's name (or `graph output`).
        node: String,
        /// The undefined value's name.
        value: String,
    },
    /// The nodes form a cycle.
    #[error("the graph has a cycle through node {node}")]
    Cycle {
        /// A node on the cycle.
        node: String,
    },
    /// The graph rejected a node: the op cannot take these shapes or dtypes.
    #[error("{op_type} {node}: {}", crate::error::graph_error_at(node, source))]
    Graph {
        /// The ONNX op type.
        op_type: String,
        /// The node's name.
        node: String,
        /// The graph's own error (inference, signature).
        #[source]
        source: Box<GraphError>,
    },
    /// The imported graph failed verification, or the graph to export is invalid.
    #[error("the graph is invalid: {0}")]
    Verify(#[source] Box<GraphError>),
}

impl OnnxError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> OnnxError {
        OnnxError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn verify(e: GraphError) -> OnnxError {
        OnnxError::Verify(Box::new(e))
    }

    /// Names from the file are clipped so that a message's first line stays short.
    pub(crate) fn node(op_type: &str, node: &str, message: impl Into<String>) -> OnnxError {
        OnnxError::Node {
            op_type: clip(op_type, 40),
            node: clip(node, 60),
            message: message.into(),
        }
    }

    /// An [`OnnxError::Malformed`], the names clipped like [`OnnxError::node`]'s.
    pub(crate) fn malformed(op_type: &str, node: &str, message: impl Into<String>) -> OnnxError {
        OnnxError::Malformed {
            op_type: clip(op_type, 40),
            node: clip(node, 60),
            message: message.into(),
        }
    }

    pub(crate) fn tensor(name: &str, message: impl Into<String>) -> OnnxError {
        OnnxError::Tensor {
            name: clip(name, 60),
            message: message.into(),
        }
    }
}

/// `text` cut to at most `max` characters (on a char boundary), with `...` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(3)).collect();
    format!("{cut}...")
}
