//! [`OpId`]: an op's identity, a small `Copy` id interned once per op name.
//!
//! Every registry that looks an op up (the executors' kernels, the vjp rules, the graph's
//! index of nodes by op, the pattern dispatch's tables) is keyed by it; the name is for
//! printing and for the edges where ops come in as text (the ONNX rows, the command
//! line). A built-in op's id is its [`Op`]'s position in the op table, known at compile
//! time; any other op (a user op, a generated `fused.*` op) gets the next free id the
//! first time its name is seen, and keeps it for the life of the process, so two
//! definitions with the same name have the same id.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, RwLock};

use super::{Op, OpDef};

/// An op's identity (see the module docs). Ids are dense: `0..` the built-ins in table
/// order, then every other op name in the order it was first seen.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(u32);

/// The process's op names, by id.
struct Interner {
    names: Vec<&'static str>,
    by_name: HashMap<&'static str, OpId>,
}

static INTERNER: LazyLock<RwLock<Interner>> = LazyLock::new(|| {
    let names: Vec<&'static str> = Op::ALL.iter().map(|op| op.name()).collect();
    let by_name = names
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, OpId(i as u32)))
        .collect();
    RwLock::new(Interner { names, by_name })
});

thread_local! {
    /// The ids of the non-built-in op names this thread has asked for, by the address
    /// and length of the `'static` name (never freed, so never another name's): a
    /// handful per program, so a short list beats the lock. Keyed by the name, not by
    /// the definition's address, which a definition that is not `'static` gives up.
    static BY_NAME: RefCell<Vec<((usize, usize), OpId)>> = const { RefCell::new(Vec::new()) };
}

/// How many names [`BY_NAME`] keeps before it asks the interner every time.
const NAME_CACHE: usize = 64;

impl OpId {
    /// The id of built-in op `op` (usable in a `const`).
    pub const fn of(op: Op) -> OpId {
        OpId(op as u32)
    }

    /// The id of op name `name`, interned if it is new.
    pub fn intern(name: &'static str) -> OpId {
        if let Some(id) = OpId::find(name) {
            return id;
        }
        let mut interner = INTERNER.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = interner.by_name.get(name) {
            return id;
        }
        let id = OpId(u32::try_from(interner.names.len()).expect("fewer than 2^32 op names"));
        interner.names.push(name);
        interner.by_name.insert(name, id);
        id
    }

    /// The id of op name `name` if some op of that name has one (without interning).
    pub fn find(name: &str) -> Option<OpId> {
        let interner = INTERNER.read().unwrap_or_else(|e| e.into_inner());
        interner.by_name.get(name).copied()
    }

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self.builtin() {
            Some(op) => op.name(),
            None => {
                let interner = INTERNER.read().unwrap_or_else(|e| e.into_inner());
                interner.names[self.index()]
            }
        }
    }

    /// The id as an index (ids are dense from 0: a table indexed by them is a `Vec`).
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The built-in op this is, if it is one.
    pub fn builtin(self) -> Option<Op> {
        Op::ALL.get(self.index()).copied()
    }
}

impl From<Op> for OpId {
    fn from(op: Op) -> OpId {
        OpId::of(op)
    }
}

impl From<&OpDef> for OpId {
    fn from(def: &OpDef) -> OpId {
        def.id()
    }
}

impl fmt::Debug for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpId({}: {})", self.0, self.name())
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The id of a definition that is not a built-in: by its name's address in this
/// thread's cache, else interned by name.
pub(super) fn id_of_declared(def: &OpDef) -> OpId {
    let key = (def.name.as_ptr() as usize, def.name.len());
    BY_NAME.with(|cache| {
        if let Some(&(_, id)) = cache.borrow().iter().find(|(k, _)| *k == key) {
            return id;
        }
        let id = OpId::intern(def.name);
        let mut cache = cache.borrow_mut();
        if cache.len() < NAME_CACHE {
            cache.push((key, id));
        }
        id
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::builtin::{ADD, MATMUL};

    #[test]
    fn builtins_have_their_table_position_and_names_intern_once() {
        assert_eq!(ADD.id(), OpId::from(Op::Add));
        assert_eq!(OpId::find("matmul"), Some(MATMUL.id()));
        assert_eq!(MATMUL.id().builtin(), Some(Op::Matmul));
        let a = OpId::intern("test.op_id.fresh");
        assert_eq!(a.name(), "test.op_id.fresh");
        assert_eq!(a.builtin(), None);
        let text: &'static str = String::from("test.op_id.fresh").leak();
        assert_eq!(OpId::intern(text), a);
        assert_ne!(a, ADD.id());
    }

    #[test]
    fn a_definition_that_is_not_static_keeps_its_own_name() {
        // Made in turn on the stack (likely at one address), with two names.
        let ids: Vec<OpId> = ["test.op_id.first", "test.op_id.second"]
            .iter()
            .map(|&name| {
                let def = OpDef {
                    name,
                    builtin: None,
                    ..ADD
                };
                def.id()
            })
            .collect();
        assert_ne!(ids[0], ids[1]);
        assert_eq!(ids[1].name(), "test.op_id.second");
    }
}
