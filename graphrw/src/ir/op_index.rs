//! The graph's index of nodes by op: for each op ([`OpId`]), a bitset over node indices.
//!
//! Adding and removing a node cost a bit flip (no tree to rebalance, no allocation once
//! the bitset has grown to the graph's size), and the nodes of an op come out in id
//! order, which is the order the matcher's anchor scan and the rewriter rely on. Ops are
//! kept in a short list looked up by their id (a graph has a few dozen distinct ops, so
//! a scan of small ints beats hashing).
//!
//! It also keeps a dense column of op codes by node index ([`OpIndex::codes`]): the op's
//! number in this index, doubled, plus one for a `constant` holding a single element.
//! The matcher's dispatch reads the op of a node and of its operands there (two bytes
//! per node, in a few cache lines) rather than in the node slots, and tells the scalar
//! constants that literals and scalar parameters match from the tensor constants that
//! they cannot without reading the payload.

use fixedbitset::FixedBitSet;

use crate::graph::NodeId;
use crate::ops::OpId;

/// The nodes of one op.
#[derive(Clone, Debug, Default)]
struct OpNodes {
    bits: FixedBitSet,
    len: usize,
}

/// The code of a free node slot in [`OpIndex::codes`].
pub(crate) const VACANT: u16 = u16::MAX;

/// The code of a node whose op's number does not fit in a code (more than 32 766
/// distinct ops in one graph): readers fall back to the node itself.
pub(crate) const UNCODED: u16 = u16::MAX - 1;

/// Nodes by op.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpIndex {
    /// In order of first insertion: an op's position here is its number, and it keeps
    /// it for the life of the index (an op whose nodes are all gone keeps its entry).
    ops: Vec<(OpId, OpNodes)>,
    /// Per node index, its op code (see the module docs), [`VACANT`] when free.
    codes: Vec<u16>,
}

/// The code of op number `number`, for a node that is (`scalar`) or is not a
/// one-element constant.
fn code(number: usize, scalar: bool) -> u16 {
    match u16::try_from(2 * number + usize::from(scalar)) {
        Ok(c) if c < UNCODED => c,
        _ => UNCODED,
    }
}

impl OpIndex {
    fn position(&self, op: OpId) -> Option<usize> {
        self.ops.iter().position(|(id, _)| *id == op)
    }

    /// Records that node `id` has op `op`; `scalar`: it is a constant of one element.
    pub(crate) fn insert(&mut self, op: OpId, id: NodeId, scalar: bool) {
        let i = match self.position(op) {
            Some(i) => i,
            None => {
                self.ops.push((op, OpNodes::default()));
                self.ops.len() - 1
            }
        };
        let nodes = &mut self.ops[i].1;
        if !nodes.bits.contains(id.index()) {
            if id.index() >= nodes.bits.len() {
                // Grown by doubling: `grow_and_insert` alone sizes the set to the new
                // index, a call per node added at the end of a growing graph.
                nodes.bits.grow((id.index() + 1).max(2 * nodes.bits.len()));
            }
            nodes.bits.insert(id.index());
            nodes.len += 1;
        }
        if id.index() >= self.codes.len() {
            self.codes.resize(id.index() + 1, VACANT);
        }
        self.codes[id.index()] = code(i, scalar);
    }

    /// Forgets node `id` of op `op`.
    pub(crate) fn remove(&mut self, op: OpId, id: NodeId) {
        if let Some(i) = self.position(op) {
            let nodes = &mut self.ops[i].1;
            if nodes.bits.contains(id.index()) {
                nodes.bits.set(id.index(), false);
                nodes.len -= 1;
                self.codes[id.index()] = VACANT;
            }
        }
    }

    /// Per node index, the node's op code (see the module docs); [`VACANT`] for a free
    /// slot. Indices past the end are free too.
    pub(crate) fn codes(&self) -> &[u16] {
        &self.codes
    }

    /// Every op ever inserted, by number (op code `2 * number` or `2 * number + 1`).
    pub(crate) fn numbered(&self) -> impl ExactSizeIterator<Item = OpId> + '_ {
        self.ops.iter().map(|(id, _)| *id)
    }

    /// The nodes of op `op`, in id order.
    pub(crate) fn nodes(&self, op: OpId) -> impl Iterator<Item = NodeId> + '_ {
        self.position(op)
            .into_iter()
            .flat_map(move |i| self.ops[i].1.bits.ones().map(NodeId::new))
    }

    /// Every op with at least one node, with its node count.
    pub(crate) fn counts(&self) -> impl Iterator<Item = (OpId, usize)> + '_ {
        self.ops
            .iter()
            .filter(|(_, nodes)| nodes.len > 0)
            .map(|(id, nodes)| (*id, nodes.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Op;

    fn id(op: Op) -> OpId {
        op.into()
    }

    #[test]
    fn nodes_come_out_in_id_order_and_removal_is_exact() {
        let mut index = OpIndex::default();
        for i in [70, 3, 200, 3, 64] {
            index.insert(id(Op::Add), NodeId::new(i), false);
        }
        index.insert(id(Op::Mul), NodeId::new(5), false);
        let ids: Vec<usize> = index.nodes(id(Op::Add)).map(|n| n.index()).collect();
        assert_eq!(ids, [3, 64, 70, 200]);
        index.remove(id(Op::Add), NodeId::new(64));
        index.remove(id(Op::Add), NodeId::new(1000));
        index.remove(id(Op::Sub), NodeId::new(3));
        let ids: Vec<usize> = index.nodes(id(Op::Add)).map(|n| n.index()).collect();
        assert_eq!(ids, [3, 70, 200]);
        let counts: Vec<_> = index.counts().collect();
        assert_eq!(counts, [(id(Op::Add), 3), (id(Op::Mul), 1)]);
        index.remove(id(Op::Mul), NodeId::new(5));
        assert_eq!(index.counts().count(), 1);
        assert_eq!(index.nodes(id(Op::Sub)).count(), 0);
    }

    #[test]
    fn codes_follow_inserts_and_removals() {
        let mut index = OpIndex::default();
        index.insert(id(Op::Add), NodeId::new(2), false);
        index.insert(id(Op::Constant), NodeId::new(0), true);
        index.insert(id(Op::Constant), NodeId::new(1), false);
        assert_eq!(index.codes(), [3, 2, 0]);
        index.remove(id(Op::Add), NodeId::new(2));
        // A removed node's slot is free; its op keeps its number.
        assert_eq!(index.codes(), [3, 2, VACANT]);
        index.insert(id(Op::Mul), NodeId::new(5), false);
        index.insert(id(Op::Add), NodeId::new(2), false);
        assert_eq!(index.codes(), [3, 2, 0, VACANT, VACANT, 4]);
        let ops: Vec<OpId> = index.numbered().collect();
        assert_eq!(ops, [id(Op::Add), id(Op::Constant), id(Op::Mul)]);
        // Numbers too big for a code are marked so, never wrapped.
        assert_eq!(code(40_000, false), UNCODED);
        assert_eq!(code(16_383, true), 32_767);
    }
}
