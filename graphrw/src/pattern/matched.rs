//! A match of a whole pattern: [`Match`] (the pattern, what its roots and nodes matched,
//! and its [`Bindings`]) and [`PatternMatch`] (the typed struct `pattern!` emits per
//! pattern).

use crate::pattern::{Bindings, Bound, Pattern};
use crate::{NodeId, Value};

/// One match of a pattern in a graph.
#[derive(Clone, Debug)]
pub struct Match {
    /// The pattern.
    pub pattern: &'static Pattern,
    /// The value each root matched (the first is the anchor's).
    pub outputs: Vec<Value>,
    /// Every node the pattern's ops and constants matched, each once, in match order.
    pub nodes: Vec<NodeId>,
    /// The slots.
    pub bindings: Bindings,
}

impl Match {
    /// What parameter `name` is bound to.
    pub fn get(&self, name: &str) -> Option<&Bound> {
        self.bindings.get(self.pattern.param_slot(name)?)
    }

    /// The typed match struct of the pattern (`sfdp_1::Match`). Panics when `M` belongs
    /// to another pattern.
    pub fn typed<M: PatternMatch>(&self) -> M {
        assert!(
            std::ptr::eq(M::pattern(), self.pattern),
            "typed match of pattern `{}` asked of a match of `{}`",
            M::pattern().name,
            self.pattern.name
        );
        M::from_bindings(&self.bindings)
    }
}

/// The typed match struct `pattern!` emits for each pattern: one field per parameter
/// (`Value` for tensors, `f64`/`i64`/`bool`/`Vec<i64>`/`String`/`DType` for scalars).
pub trait PatternMatch: Sized {
    /// The pattern.
    fn pattern() -> &'static Pattern;
    /// Reads the fields from complete bindings of the pattern.
    fn from_bindings(bindings: &Bindings) -> Self;
}
