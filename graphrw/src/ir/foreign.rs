//! What graphrw keeps of a node or value it does not model, so that export writes it
//! back as it came.
//!
//! An ONNX op outside the vocabulary (or at an opset whose meaning graphrw does not
//! read) becomes an `opaque` node: a wildcard to patterns, printed with its ONNX op
//! type, and refused by executors. Its [`Foreign`] record holds the node as ONNX
//! encoded it (op type, domain and attributes, subgraphs included, byte for byte),
//! the opset its domain had in the source model, which optional inputs and outputs
//! were present, the outer-scope names its subgraphs read, and per output the ONNX
//! type when graphrw's metadata is only a placeholder.
//!
//! **Unknown metadata.** A value whose dtype or shape graphrw cannot state (no
//! `value_info`, an unknown rank, strings, sequences) keeps a placeholder
//! [`TensorMeta`](crate::TensorMeta) and is marked unknown here, never in the
//! metadata itself, so the rest of the crate keeps its "rank is always known"
//! invariant. The importer makes every node that reads an unknown value opaque too,
//! so no shape inference ever sees a placeholder; the printer shows it as `?`.

/// The export record of an opaque node or of a graph input of a foreign type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Foreign {
    /// The encoded ONNX `NodeProto` without inputs, outputs or name (op type, domain,
    /// attributes): empty for a graph input.
    pub node: Vec<u8>,
    /// The opset version of the node's domain in the model it came from.
    pub opset: i64,
    /// Per ONNX input slot: true when present (it is the next operand), false when the
    /// slot was left empty.
    pub inputs: Vec<bool>,
    /// Per ONNX output slot: true when present (it is the next output), false when empty.
    pub outputs: Vec<bool>,
    /// Outer-scope value names the node's subgraphs read; they are the operands after
    /// the node's own inputs, and export gives them these names again.
    pub captures: Vec<String>,
    /// Per present output: `None` when the metadata is exact, else the encoded ONNX
    /// `TypeProto` (empty when the model gave none) and a placeholder metadata.
    pub types: Vec<Option<Vec<u8>>>,
}
