//! Rules (pattern + replacement + name + priority) and rule sets, as static items.

use std::fmt;

use crate::ops::OpId;
use crate::pattern::{Bindings, Pattern};
use crate::{Builder, Graph, GraphError, Value};

/// A replacement: builds the new subgraph on a builder holding the matched graph and
/// returns one value per pattern output. What `replacement!` emits.
pub type ReplaceFn = fn(&Builder, &Bindings) -> Result<Vec<Value>, GraphError>;

/// A generator a rule states for its own differential test (`#[verify(generator =
/// path)]`): given a seed, a graph whose output is a match of the rule (see
/// [`crate::selfcheck`]). `Ok(None)` means "no graph for this seed", counted as a
/// rejected try.
pub type GenFn = fn(u64) -> Result<Option<Graph>, GraphError>;

/// How a rule's differential test runs (`#[verify(..)]` on a rule in `rule_set!`), read
/// by [`crate::selfcheck`].
#[derive(Clone, Copy, Debug, Default)]
pub struct VerifySpec {
    /// `skip = "why"`: the rule is not verified, for this reason.
    pub skip: Option<&'static str>,
    /// `graphs = N`: graphs to try (default [`crate::selfcheck::Config`]'s).
    pub graphs: Option<u32>,
    /// `tol = x`: the tolerance, `|after - before| <= tol * (1 + |before|)` (default by
    /// dtype).
    pub tol: Option<f64>,
    /// `generator = path`: the rule's own generator instead of the pattern's.
    pub generator: Option<GenFn>,
}

impl VerifySpec {
    /// Verified with the defaults.
    pub const DEFAULT: VerifySpec = VerifySpec {
        skip: None,
        graphs: None,
        tol: None,
        generator: None,
    };
}

/// A rewrite rule.
#[derive(Clone, Copy)]
pub struct Rule {
    /// Name (for reports).
    pub name: &'static str,
    /// What it matches.
    pub pattern: &'static Pattern,
    /// What it builds instead.
    pub replace: ReplaceFn,
    /// Higher first; by default the number of ops the pattern matches.
    pub priority: i32,
    /// How its differential test runs ([`crate::selfcheck`]).
    pub verify: VerifySpec,
}

impl Rule {
    /// A rule with the default priority (the pattern's op count).
    pub const fn new(name: &'static str, pattern: &'static Pattern, replace: ReplaceFn) -> Rule {
        Rule {
            name,
            pattern,
            replace,
            priority: pattern.op_count as i32,
            verify: VerifySpec::DEFAULT,
        }
    }

    /// The same rule with another verification spec.
    pub const fn with_verify(self, verify: VerifySpec) -> Rule {
        Rule { verify, ..self }
    }

    /// The same rule with another priority.
    pub const fn with_priority(self, priority: i32) -> Rule {
        Rule { priority, ..self }
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("pattern", &self.pattern.name)
            .field("priority", &self.priority)
            .finish()
    }
}

/// A set of rules, in the order they are tried: priority descending, then declaration
/// order. `rule_set!` emits one, checked for shadowed and overlapping rules.
#[derive(Clone, Copy, Debug)]
pub struct RuleSet {
    /// Name.
    pub name: &'static str,
    /// The rules, in the order they are tried.
    pub rules: &'static [&'static Rule],
}

impl RuleSet {
    /// The rule named `name`.
    pub fn rule(&self, name: &str) -> Option<&'static Rule> {
        self.rules.iter().copied().find(|r| r.name == name)
    }

    /// Rules whose anchor can be op `op`, in the order they are tried.
    pub fn rules_for_op(&self, op: impl Into<OpId>) -> impl Iterator<Item = &'static Rule> + '_ {
        let op = op.into();
        self.rules
            .iter()
            .copied()
            .filter(move |r| r.pattern.anchors.iter().any(|a| a.id() == op))
    }
}
