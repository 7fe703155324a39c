//! Dense ids for the op names a rule list mentions, found from a graph node's op by the
//! address of its definition.
//!
//! The dispatch trees switch on the ops of a node and of its operands, several lookups
//! per node, so a lookup must cost a few instructions: a node's `&'static OpDef` is
//! looked up by its address in a table filled when the dispatch is built, with the ops
//! the rules name and every built-in op (ops the rules do not mention get [`NO_OP`]).
//! A graph built from the built-ins or from the rules' own ops hits the table; any
//! other definition (a user op declared again under an existing name, say) takes the
//! slow path, a lookup by name, so two ops with the same name always get the same id.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::ops::{OpDef, BUILTIN};

/// An op name's id in one dispatch.
pub(crate) type OpId = u16;

/// The id of every name the rules do not mention.
pub(crate) const NO_OP: OpId = OpId::MAX;

/// log2 of the address table's size (512 slots of 16 bytes: the built-ins and the
/// rules' ops fill a fraction; a definition whose slot is taken takes the slow path).
/// Kept small: each dispatch built fills one, and on a small graph the page faults of a
/// bigger table cost more than the pass.
const TABLE_BITS: u32 = 9;

/// One slot of the address table: an op definition's address, and its id.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    addr: usize,
    id: OpId,
}

/// Op names to dense ids.
#[derive(Debug)]
pub(crate) struct OpIds {
    names: Vec<&'static str>,
    by_text: HashMap<Name, OpId, BuildHasherDefault<FxHasher>>,
    by_addr: Box<[Slot]>,
}

impl OpIds {
    /// Ids `0..` for `names` (sorted and deduplicated first); `defs` (with the
    /// built-ins) are the definitions found by address.
    pub(crate) fn new(
        names: impl IntoIterator<Item = &'static str>,
        defs: impl IntoIterator<Item = &'static OpDef>,
    ) -> OpIds {
        let mut names: Vec<&'static str> = names.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        assert!(names.len() < NO_OP as usize, "too many op names");
        let by_text: HashMap<Name, OpId, BuildHasherDefault<FxHasher>> = names
            .iter()
            .enumerate()
            .map(|(i, &n)| (Name(n), i as OpId))
            .collect();
        let mut ids = OpIds {
            names,
            by_text,
            by_addr: vec![Slot::default(); 1 << TABLE_BITS].into_boxed_slice(),
        };
        for def in defs.into_iter().chain(BUILTIN.iter().copied()) {
            let id = ids.by_name(def.name);
            let slot = &mut ids.by_addr[table_slot(def)];
            // A slot taken by another definition stays theirs: this one takes the
            // slow path.
            if slot.addr == 0 {
                *slot = Slot {
                    addr: address(def),
                    id,
                };
            }
        }
        ids
    }

    /// The id of op `def` ([`NO_OP`] when the rules do not mention its name).
    #[inline]
    pub(crate) fn id(&self, def: &'static OpDef) -> OpId {
        let slot = self.by_addr[table_slot(def)];
        if slot.addr == address(def) {
            return slot.id;
        }
        self.by_name(def.name)
    }

    /// The id of the op named `name` ([`NO_OP`] when the rules do not mention it).
    pub(crate) fn by_name(&self, name: &'static str) -> OpId {
        self.by_text.get(&Name(name)).copied().unwrap_or(NO_OP)
    }

    /// How many names have ids (ids are `0..len`).
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

fn address(def: &OpDef) -> usize {
    def as *const OpDef as usize
}

/// Fibonacci hashing of a definition's address into the table.
#[inline]
fn table_slot(def: &OpDef) -> usize {
    ((address(def) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TABLE_BITS)) as usize
}

/// An op name as a key of the slow path, compared by address first, then by text.
/// Hashed in one mixing round by its length and its first and last eight (or four)
/// bytes.
#[derive(Clone, Copy, Debug)]
struct Name(&'static str);

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        std::ptr::eq(self.0, other.0) || self.0 == other.0
    }
}

impl Eq for Name {}

impl std::hash::Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let b = self.0.as_bytes();
        let n = b.len();
        // Fixed-size reads only (a variable-length copy would be a `memcpy` call).
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let half = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[at..at + 4]);
            u64::from(u32::from_le_bytes(w))
        };
        let w = if n >= 8 {
            word(0) ^ word(n - 8).rotate_left(29)
        } else if n >= 4 {
            half(0) | half(n - 4) << 32
        } else {
            b.iter().fold(0u64, |w, &c| (w << 8) | u64::from(c))
        };
        state.write_u64(w ^ (n as u64).rotate_left(56));
    }
}

/// A small fast hasher for [`Name`] keys (FxHash's mixing): a `Name` hashes one `u64`
/// word, so `write_u64` is the path taken; `write` mixes bytes one at a time.
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
}

impl FxHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(name: &str) -> &'static OpDef {
        BUILTIN.iter().find(|op| op.name == name).unwrap()
    }

    #[test]
    fn same_name_same_id_whatever_the_definition() {
        let ids = OpIds::new(["matmul", "add", "softmax", "add"], [builtin("add")]);
        assert_eq!(ids.len(), 3);
        let add = ids.by_name("add");
        assert_ne!(add, NO_OP);
        // The built-in definition hits the address table.
        assert_eq!(ids.id(builtin("add")), add);
        assert_eq!(ids.id(builtin("matmul")), ids.by_name("matmul"));
        // Another definition under the same name (leaked, so it is `'static`) takes
        // the slow path to the same id.
        let again: &'static OpDef = Box::leak(Box::new(OpDef {
            doc: "add, declared again",
            ..*builtin("add")
        }));
        assert_eq!(ids.id(again), add);
        // Built-ins the rules do not mention, and unknown names, have no id.
        assert_eq!(ids.id(builtin("exp")), NO_OP);
        let mine: &'static OpDef = Box::leak(Box::new(OpDef {
            name: "my.op",
            builtin: None,
            ..*builtin("exp")
        }));
        assert_eq!(ids.id(mine), NO_OP);
        // A name at another address is found by its text.
        let text: &'static str = Box::leak(String::from("softmax").into_boxed_str());
        assert_eq!(ids.by_name(text), ids.by_name("softmax"));
    }
}
