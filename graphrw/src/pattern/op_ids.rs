//! Dense keys for the ops a rule list mentions, found from a graph node's op by its
//! [`OpId`](crate::ops::OpId).
//!
//! The dispatch trees switch on the ops of a node and of its operands, several lookups
//! per node, so a lookup must cost a few instructions: a node's op id indexes a table
//! filled when the dispatch is built with the ops the rules name (ops the rules do not
//! mention get [`NO_OP`]). Two definitions with the same name have the same op id, so
//! they get the same key.

use crate::ops::{OpDef, OpId};

/// An op's key in one dispatch (dense from 0, so the trees are indexed by it).
pub(crate) type OpKey = u16;

/// The key of every op the rules do not mention.
pub(crate) const NO_OP: OpKey = OpKey::MAX;

/// Op ids to dense keys.
#[derive(Debug)]
pub(crate) struct OpIds {
    len: usize,
    /// Per op id, its key ([`NO_OP`] past the end).
    keys: Vec<OpKey>,
}

impl OpIds {
    /// Keys `0..` for `ops` (sorted and deduplicated first).
    pub(crate) fn new(ops: impl IntoIterator<Item = OpId>) -> OpIds {
        let mut ops: Vec<OpId> = ops.into_iter().collect();
        ops.sort_unstable();
        ops.dedup();
        assert!(ops.len() < NO_OP as usize, "too many ops");
        let size = ops.last().map_or(0, |op| op.index() + 1);
        let mut keys = vec![NO_OP; size];
        for (k, op) in ops.iter().enumerate() {
            keys[op.index()] = k as OpKey;
        }
        OpIds {
            len: ops.len(),
            keys,
        }
    }

    /// The key of op `def` ([`NO_OP`] when the rules do not mention it).
    #[inline]
    pub(crate) fn id(&self, def: &OpDef) -> OpKey {
        self.key(def.id())
    }

    /// The key of op `op` ([`NO_OP`] when the rules do not mention it).
    #[inline]
    pub(crate) fn key(&self, op: OpId) -> OpKey {
        self.keys.get(op.index()).copied().unwrap_or(NO_OP)
    }

    /// How many ops have keys (keys are `0..len`).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::builtin::{ADD, EXP, MATMUL, SOFTMAX};

    #[test]
    fn same_name_same_key_whatever_the_definition() {
        let ids = OpIds::new([MATMUL.id(), ADD.id(), SOFTMAX.id(), ADD.id()]);
        assert_eq!(ids.len(), 3);
        let add = ids.id(&ADD);
        assert_ne!(add, NO_OP);
        assert_ne!(ids.id(&MATMUL), add);
        // Another definition under the same name (leaked, so it is `'static`) has the
        // same key.
        let again: &'static OpDef = Box::leak(Box::new(OpDef {
            doc: "add, declared again",
            ..ADD
        }));
        assert_eq!(ids.id(again), add);
        // Built-ins the rules do not mention, and other ops, have no key.
        assert_eq!(ids.id(&EXP), NO_OP);
        let mine: &'static OpDef = Box::leak(Box::new(OpDef {
            name: "my.op_ids.op",
            builtin: None,
            ..EXP
        }));
        assert_eq!(ids.id(mine), NO_OP);
    }
}
