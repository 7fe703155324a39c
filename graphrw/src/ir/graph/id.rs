//! The names of the graph's parts: a node's id ([`NodeId`]) and a value
//! ([`Value`], output `output` of a node). The op table, the op index and the builder
//! name nodes and values with these without reading the graph itself.

use petgraph::stable_graph::NodeIndex;

/// A node's id: its index in the graph's node table. Ids survive the removal of other
/// nodes; a removed node's id may be reused by a later node, so do not keep ids across
/// rewrites you did not make.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The id of index `index` (ids are `u32`: a larger index wraps, as petgraph's do).
    pub fn new(index: usize) -> NodeId {
        NodeId(index as u32)
    }

    /// The index, for tables kept beside the graph.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The node store's index of this node.
    pub(super) fn ix(self) -> NodeIndex<u32> {
        NodeIndex::new(self.0 as usize)
    }

    /// The id of the node store's index `ix`.
    pub(super) fn of(ix: NodeIndex<u32>) -> NodeId {
        NodeId(ix.index() as u32)
    }
}

/// A value: output `output` of node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    /// The producing node.
    pub node: NodeId,
    /// Which of its outputs.
    pub output: u32,
}

impl Value {
    /// Output `output` of `node`.
    pub fn new(node: NodeId, output: u32) -> Value {
        Value { node, output }
    }
}

impl From<NodeId> for Value {
    fn from(node: NodeId) -> Value {
        Value { node, output: 0 }
    }
}
