//! The [`GradRegistry`]: vjp rules by op, the built-in rules and any registered.

use std::collections::BTreeMap;
use std::fmt;

use super::context::VjpFn;
use crate::ops::{Op, OpDef, OpId};

/// Vjp rules by op ([`OpId`]): the built-in rules plus any user ops registered on it.
#[derive(Clone)]
pub struct GradRegistry {
    rules: BTreeMap<OpId, (&'static OpDef, VjpFn)>,
}

impl Default for GradRegistry {
    fn default() -> Self {
        GradRegistry::with_builtins()
    }
}

impl fmt::Debug for GradRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.rules.values().map(|(op, _)| op.name))
            .finish()
    }
}

impl GradRegistry {
    /// A registry with no rules (every op differentiates through its decomposition
    /// or fails).
    pub fn empty() -> GradRegistry {
        GradRegistry {
            rules: BTreeMap::new(),
        }
    }

    /// A registry holding the vjp rule of every differentiable built-in op.
    pub fn with_builtins() -> GradRegistry {
        let mut r = GradRegistry::empty();
        for &op in Op::ALL {
            if let Some(rule) = super::vjp_rules::builtin_rule(op) {
                r.rules.insert(op.into(), (op.def(), rule));
            }
        }
        r
    }

    /// Registers (or replaces) the rule of `op` — Thunder's `register_grad`/
    /// `grad_transform`. A registered rule wins over the op's decomposition.
    pub fn register(&mut self, op: &'static OpDef, rule: VjpFn) -> &mut GradRegistry {
        self.rules.insert(op.id(), (op, rule));
        self
    }

    /// The rule of `op`, if one is registered.
    pub fn get(&self, op: &OpDef) -> Option<VjpFn> {
        self.rules.get(&op.id()).map(|&(_, rule)| rule)
    }

    /// The ops that have rules, by [`OpId`] (the built-ins first, in table order).
    pub fn ops(&self) -> impl Iterator<Item = &'static OpDef> + '_ {
        self.rules.values().map(|&(op, _)| op)
    }
}
