//! The graph's index of nodes by op: for each op name, a bitset over node indices.
//!
//! Adding and removing a node cost a bit flip (no tree to rebalance, no allocation once
//! the bitset has grown to the graph's size), and the nodes of an op come out in id
//! order, which is the order the matcher's anchor scan and the rewriter rely on. Ops are
//! kept in a short list looked up by the address of their `'static` name first, then by
//! its text (a graph has a few dozen distinct ops, so this beats hashing the name).

use fixedbitset::FixedBitSet;

use crate::graph::NodeId;
use crate::ops::same_name;

/// The nodes of one op.
#[derive(Clone, Debug, Default)]
struct OpNodes {
    bits: FixedBitSet,
    len: usize,
}

/// Nodes by op name.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpIndex {
    ops: Vec<(&'static str, OpNodes)>,
}

impl OpIndex {
    fn position(&self, op: &str) -> Option<usize> {
        // Addresses first: every node of an op shares its `OpDef`'s name.
        self.ops
            .iter()
            .position(|(name, _)| std::ptr::eq(*name, op))
            .or_else(|| self.ops.iter().position(|(name, _)| same_name(name, op)))
    }

    /// Records that node `id` has op `op`.
    pub(crate) fn insert(&mut self, op: &'static str, id: NodeId) {
        let i = match self.position(op) {
            Some(i) => i,
            None => {
                self.ops.push((op, OpNodes::default()));
                self.ops.len() - 1
            }
        };
        let nodes = &mut self.ops[i].1;
        if !nodes.bits.contains(id.index()) {
            nodes.bits.grow_and_insert(id.index());
            nodes.len += 1;
        }
    }

    /// Forgets node `id` of op `op`.
    pub(crate) fn remove(&mut self, op: &str, id: NodeId) {
        if let Some(i) = self.position(op) {
            let nodes = &mut self.ops[i].1;
            if nodes.bits.contains(id.index()) {
                nodes.bits.set(id.index(), false);
                nodes.len -= 1;
            }
        }
    }

    /// The nodes of op `op`, in id order.
    pub(crate) fn nodes(&self, op: &str) -> impl Iterator<Item = NodeId> + '_ {
        self.position(op)
            .into_iter()
            .flat_map(move |i| self.ops[i].1.bits.ones().map(NodeId::new))
    }

    /// Every op with at least one node, with its node count.
    pub(crate) fn counts(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        self.ops
            .iter()
            .filter(|(_, nodes)| nodes.len > 0)
            .map(|(name, nodes)| (*name, nodes.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_come_out_in_id_order_and_removal_is_exact() {
        let mut index = OpIndex::default();
        for i in [70, 3, 200, 3, 64] {
            index.insert("add", NodeId::new(i));
        }
        index.insert("mul", NodeId::new(5));
        // A name with the same text at another address finds the same entry.
        let add = String::from("add");
        let ids: Vec<usize> = index.nodes(&add).map(|n| n.index()).collect();
        assert_eq!(ids, [3, 64, 70, 200]);
        index.remove("add", NodeId::new(64));
        index.remove("add", NodeId::new(1000));
        index.remove("sub", NodeId::new(3));
        let ids: Vec<usize> = index.nodes("add").map(|n| n.index()).collect();
        assert_eq!(ids, [3, 70, 200]);
        let counts: Vec<_> = index.counts().collect();
        assert_eq!(counts, [("add", 3), ("mul", 1)]);
        index.remove("mul", NodeId::new(5));
        assert_eq!(index.counts().count(), 1);
        assert_eq!(index.nodes("sub").count(), 0);
    }
}
