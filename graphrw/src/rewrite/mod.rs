//! The rewriter: applies rule sets greedily to a fixed point.
//!
//! A worklist of nodes, smallest id first (deterministic). For each node, the rules
//! that can match it are tried in priority order by a [`NodeMatcher`]: they come from
//! the rule sets' merged decision trees ([`Dispatch`], built once per list of rule
//! sets), which look at the node's op, the ops of its operands and its attributes once
//! for all rules, so rules that cannot match a node cost nothing. The first
//! match that is safe to replace ([`check_safe`]) is replaced atomically
//! ([`apply::apply`]), with whatever only the match used, and the new nodes and their
//! users go back on the worklist; unless a rule of higher priority claims it first: one
//! whose pattern holds this rule's anchor op below its own anchor, and that matches at
//! a user of the match with the match inside its own. That rule's match is then
//! replaced instead, so a larger rule wins over a smaller one nested in it whatever the
//! node order (the guide's chapter 3, *Priorities*). Matches never overlap: each replacement happens on
//! the graph as it is after the previous one. An iteration guard turns a rule
//! ping-pong into an error naming the rules. A replacement that fails is rolled back
//! (the graph is exactly as before), the match is skipped and listed in
//! [`Report::skipped`] with the rule, the node and the reason, and rewriting goes on
//! ([`Rewriter::with_strict`] makes it an error instead). Dead code is removed at the end (not
//! first: as in FX, a match whose outputs nobody uses is still replaced). Configured
//! egg-style with builder methods; FX's matching options come as [`MatchOptions`]
//! ([`Rewriter::with_options`]). How much is verified is a [`Verify`]
//! ([`Rewriter::with_verify`]): by default, in debug builds, the whole graph at both
//! ends of a run and only what each rewrite touched in between, so a run stays linear.
//!
//! ```
//! # use graphrw::rewrite::Rewriter;
//! # fn demo(graph: &mut graphrw::Graph, rules: &'static graphrw::RuleSet) -> Result<(), graphrw::rewrite::RewriteError> {
//! let report = Rewriter::new(&[rules]).with_iteration_limit(10_000).run(graph)?;
//! println!("{report}");
//! # Ok(()) }
//! ```

pub mod apply;
mod later;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::graph::{Graph, Node, NodeId, Value};
use crate::op_index::VACANT;
use crate::pattern::dispatch::Dispatch;
use crate::pattern::matcher::Scratch;
use crate::pattern::safety::safe_interior_verdict;
use crate::pattern::{MatchOptions, NodeMatcher, Rule, RuleSet};
use crate::verify::{verify, verify_patch, Touched};
use crate::GraphError;

pub use crate::pattern::{check_safe, Unsafe};
pub use apply::Patch;
pub use later::Preempted;

pub use crate::pattern::MatchFilter;

/// Why rewriting failed.
#[derive(Debug, Error)]
pub enum RewriteError {
    /// Rules kept firing: most likely two rules undo each other.
    #[error("rewriting did not reach a fixed point after {limit} rewrites; the last rewrites were by: {}", rules.join(", "))]
    IterationLimit {
        /// The limit that was hit.
        limit: usize,
        /// The rules that fired in the last rewrites, most frequent first.
        rules: Vec<String>,
    },
    /// A replacement failed (the graph is as it was before that replacement). Only
    /// returned by a strict rewriter ([`Rewriter::with_strict`]); by default the match
    /// is skipped and listed in [`Report::skipped`].
    #[error("rule `{rule}` at {node}: {source}")]
    Replacement {
        /// The rule.
        rule: &'static str,
        /// The anchor (`%id op "name"`).
        node: String,
        /// The error.
        source: Box<GraphError>,
    },
    /// The graph failed verification after a rewrite (a bug in a rule or in graphrw).
    #[error("after rule `{rule}`: {source}")]
    Verify {
        /// The rule that fired last.
        rule: &'static str,
        /// The verifier's error.
        source: Box<GraphError>,
    },
    /// The graph failed the whole-graph check at the start of a run (it was given
    /// broken) or at its end, after dead-code removal ([`Verify`]).
    #[error("{when}: {source}")]
    Invalid {
        /// `"the graph given to the rewriter"` or `"after dead-code removal"`.
        when: &'static str,
        /// The verifier's error.
        source: Box<GraphError>,
    },
}

/// How much of the graph a run verifies ([`Rewriter::with_verify`]).
///
/// The default, [`Verify::default`], is [`Verify::Local`] in builds with debug
/// assertions (`cargo test`, `cargo build`) and [`Verify::Off`] in release builds:
/// a debug build then costs a constant amount of checking per rewrite, not a walk of
/// the whole graph per rewrite ([`Verify::Full`]), so rewriting stays linear in the
/// graph's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// No check.
    Off,
    /// The whole graph once before the first rewrite and once after the last (after
    /// dead-code removal).
    Ends,
    /// [`Verify::Ends`], and after each rewrite the nodes it touched: the new nodes,
    /// the nodes rewired to them, the producers whose use lists changed, and no cycle
    /// through the new nodes (within a budget; the end check covers the rest).
    Local,
    /// The whole graph before the first rewrite and after every one (quadratic: for
    /// hunting a bug in a rule on a small graph).
    Full,
}

impl Default for Verify {
    fn default() -> Verify {
        if cfg!(debug_assertions) {
            Verify::Local
        } else {
            Verify::Off
        }
    }
}

/// One rewrite that happened.
#[derive(Clone, Debug)]
pub struct Firing {
    /// The rule.
    pub rule: &'static str,
    /// The anchor node (`%id op "name"`) before the rewrite.
    pub at: String,
    /// The matched op nodes the rewrite replaced, sorted, as ids of the graph before
    /// it (a later rewrite may give a freed id to a new node).
    pub replaced: Vec<NodeId>,
}

/// A match whose replacement failed: rolled back (the graph is as it was before) and
/// skipped.
#[derive(Clone, Debug)]
pub struct Skip {
    /// The rule.
    pub rule: &'static str,
    /// The anchor node (`%id op "name"`).
    pub at: String,
    /// Why the replacement failed.
    pub reason: String,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule `{}` at {}: {}", self.rule, self.at, self.reason)
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every rewrite, in order.
    pub firings: Vec<Firing>,
    /// Matches found but not applied because they were unsafe, per rule.
    pub rejected_unsafe: BTreeMap<&'static str, usize>,
    /// Matches whose replacement failed and was rolled back, in order (each rule and
    /// anchor at most once).
    pub skipped: Vec<Skip>,
    /// Rewrites that replaced a node where a rule of the later rule sets matched
    /// ([`Rewriter::with_later`]), in order: the later rule would have fused that
    /// region, had this rewrite not taken it.
    pub preempted: Vec<Preempted>,
    /// Nodes removed by dead-code elimination after the last rewrite. The nodes a
    /// replacement leaves unused are removed with it and not counted here.
    pub dead_removed: usize,
    /// Nodes taken from the worklist.
    pub visited: usize,
    /// Nodes the verifier checked over the run ([`Verify`]): the whole graph at each
    /// end, the touched nodes and the cycle search's visits after each rewrite.
    pub verified: usize,
    /// Full match attempts (a rule tried at a node its decision tree let through).
    pub attempts: usize,
    /// Time spent.
    pub time: Duration,
}

impl Report {
    /// Rewrites per rule.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut c = BTreeMap::new();
        for f in &self.firings {
            *c.entry(f.rule).or_default() += 1;
        }
        c
    }

    /// Total rewrites.
    pub fn total(&self) -> usize {
        self.firings.len()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} rewrites in {:.3} ms ({} nodes visited, {} dead nodes removed)",
            self.total(),
            self.time.as_secs_f64() * 1e3,
            self.visited,
            self.dead_removed
        )?;
        for (rule, n) in self.counts() {
            writeln!(f, "  {rule:<40} {n:>6}")?;
        }
        for (rule, n) in &self.rejected_unsafe {
            writeln!(f, "  {rule:<40} {n:>6} matches skipped as unsafe")?;
        }
        for skip in &self.skipped {
            writeln!(f, "  skipped (replacement failed, rolled back): {skip}")?;
        }
        for p in &self.preempted {
            writeln!(f, "  preempted: {p}")?;
        }
        Ok(())
    }
}

/// Applies rule sets to a fixed point.
#[derive(Clone)]
pub struct Rewriter {
    sets: Vec<&'static RuleSet>,
    iteration_limit: Option<usize>,
    verify: Verify,
    strict: bool,
    options: MatchOptions,
    later: Vec<&'static RuleSet>,
}

impl Rewriter {
    /// A rewriter over the rules of `sets`, tried in priority order (higher first, then
    /// set order, then declaration order).
    pub fn new(sets: &[&'static RuleSet]) -> Rewriter {
        Rewriter {
            sets: sets.to_vec(),
            iteration_limit: None,
            verify: Verify::default(),
            strict: false,
            options: MatchOptions::new(),
            later: Vec::new(),
        }
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> Vec<&'static Rule> {
        self.dispatch().rules().to_vec()
    }

    /// The merged decision trees of the rule sets (built at the first use of this list
    /// of sets, then shared).
    fn dispatch(&self) -> Arc<Dispatch> {
        Dispatch::for_sets(&self.sets)
    }

    /// At most `limit` rewrites (default: 4 × nodes + 1000).
    pub fn with_iteration_limit(mut self, limit: usize) -> Rewriter {
        self.iteration_limit = Some(limit);
        self
    }

    /// How much of the graph to verify ([`Verify`]; default [`Verify::default`]).
    pub fn with_verify(mut self, verify: Verify) -> Rewriter {
        self.verify = verify;
        self
    }

    /// `true`: verify the whole graph after every rewrite ([`Verify::Full`]); `false`:
    /// verify nothing ([`Verify::Off`]).
    pub fn with_verify_each(self, on: bool) -> Rewriter {
        self.with_verify(if on { Verify::Full } else { Verify::Off })
    }

    /// Make a failing replacement an error ([`RewriteError::Replacement`]) instead of a
    /// skipped match (default: off; either way the graph is left as it was before the
    /// failed replacement).
    pub fn with_strict(mut self, on: bool) -> Rewriter {
        self.strict = on;
        self
    }

    /// Skip matches the filter refuses.
    pub fn with_filter(mut self, filter: MatchFilter) -> Rewriter {
        self.options = self.options.filter(filter);
        self
    }

    /// Match with FX's options: `match_output`, `match_placeholder`,
    /// `ignore_literals` and filters apply to every match tried.
    /// `remove_overlapping_matches` and `fully_contained` do not change anything here:
    /// rewrites happen one at a time on the graph as the previous one left it (so they
    /// never overlap), and only safe matches are ever replaced.
    pub fn with_options(mut self, options: MatchOptions) -> Rewriter {
        self.options = options;
        self
    }

    /// Rule sets that run after this rewriter (the built-in fusions,
    /// [`rules::fusions`](crate::rules::fusions), for rules of your own run before
    /// [`rules::optimize`](crate::rules::optimize)): each rewrite by a rule of this
    /// rewriter (not of `sets`) that replaces a node where one of their rules matches
    /// is listed in [`Report::preempted`] with that rule, and printed with the report.
    /// Only rewrites are checked, on the graph as it is before each (see
    /// [`Preempted`]'s module for what that misses).
    pub fn with_later(mut self, sets: &[&'static RuleSet]) -> Rewriter {
        self.later = sets.to_vec();
        self
    }

    /// Rewrites `graph` in place to a fixed point.
    pub fn run(&self, graph: &mut Graph) -> Result<Report, RewriteError> {
        let start = Instant::now();
        let limit = self
            .iteration_limit
            .unwrap_or(4 * graph.node_count() + 1000);
        let dispatch = self.dispatch();
        let mut matcher = NodeMatcher::new(&dispatch, graph, &self.options);
        let claims = dispatch.claims();
        let later = (!self.later.is_empty()).then(|| Dispatch::for_sets(&self.later));
        let later_options = MatchOptions::new();
        let mut later_matcher = later
            .as_deref()
            .map(|d| NodeMatcher::new(d, graph, &later_options));
        let is_later = |rule: &Rule| {
            self.later
                .iter()
                .any(|s| s.rules.iter().any(|r| std::ptr::eq(*r, rule)))
        };
        let mut scratch = Scratch::default();
        let mut report = Report::default();
        let mut queue = Worklist::default();
        // (rule, anchor) pairs whose replacement failed.
        let mut failed: HashSet<(&'static str, NodeId)> = HashSet::new();
        // Producers whose use lists a rewrite changed (for the local check).
        let mut producers: Vec<NodeId> = Vec::new();
        if self.verify != Verify::Off {
            report.verified += graph.node_count();
            verify(graph).map_err(|source| RewriteError::Invalid {
                when: "the graph given to the rewriter",
                source: Box::new(source),
            })?;
        }
        queue.insert_live(graph);
        while let Some(id) = queue.pop() {
            report.visited += 1;
            matcher.visit(graph, id);
            // A rule whose replacement failed here is not tried again.
            while let Some((rule, m)) = matcher.next_match_ref(graph, |rule| {
                !failed.is_empty() && failed.contains(&(rule.name, id))
            }) {
                let Some(inside) = safe_interior_verdict(graph, m) else {
                    *report.rejected_unsafe.entry(rule.name).or_default() += 1;
                    continue;
                };
                // A rule of higher priority whose match holds this one takes it.
                let claimed = if claims.is_empty() {
                    None
                } else {
                    claims.claimant(graph, rule, id, &self.options, &mut scratch, |r, a| {
                        !failed.is_empty() && failed.contains(&(r.name, a))
                    })
                };
                let (rule, m, inside, anchor) = match &claimed {
                    Some(c) => (
                        c.rule,
                        &c.m,
                        &c.inside,
                        c.m.outputs.first().map_or(id, |v| v.node),
                    ),
                    None => (rule, m, &inside, id),
                };
                let at = describe(graph, anchor);
                let replaced: Vec<NodeId> = inside.iter().copied().collect();
                let preempted = match later_matcher.as_mut() {
                    Some(lm) if !is_later(rule) => {
                        later::later_match(lm, graph, &replaced, &m.outputs)
                    }
                    _ => None,
                };
                if self.verify == Verify::Local {
                    producers.clear();
                    producers.extend(
                        inside
                            .iter()
                            .filter_map(|&n| graph.node(n))
                            .flat_map(|n| n.operands().iter().map(|v| v.node)),
                    );
                }
                let patch = match apply::apply_safe(graph, m, rule.replace, inside) {
                    Ok(patch) => patch,
                    Err(source) if self.strict => {
                        return Err(RewriteError::Replacement {
                            rule: rule.name,
                            node: at,
                            source: Box::new(source),
                        })
                    }
                    Err(source) => {
                        // `apply_safe` rolled the patch back: the graph is unchanged.
                        failed.insert((rule.name, anchor));
                        report.skipped.push(Skip {
                            rule: rule.name,
                            at,
                            reason: source.to_string(),
                        });
                        continue;
                    }
                };
                if let Some(later) = preempted {
                    report.preempted.push(Preempted {
                        rule: rule.name,
                        at: at.clone(),
                        later,
                    });
                }
                report.firings.push(Firing {
                    rule: rule.name,
                    at,
                    replaced,
                });
                if report.firings.len() > limit {
                    return Err(ping_pong(limit, &report));
                }
                let checked = match self.verify {
                    Verify::Off | Verify::Ends => Ok(()),
                    Verify::Local => {
                        producers.extend(
                            patch
                                .added
                                .iter()
                                .filter_map(|&n| graph.node(n))
                                .flat_map(|n| n.operands().iter().map(|v| v.node)),
                        );
                        producers.sort_unstable();
                        producers.dedup();
                        producers.retain(|n| graph.node(*n).is_some());
                        let touched = Touched {
                            added: &patch.added,
                            rewired: &patch.rewired,
                            producers: &producers,
                        };
                        verify_patch(graph, &touched, &mut report.verified)
                    }
                    Verify::Full => {
                        report.verified += graph.node_count();
                        verify(graph)
                    }
                };
                checked.map_err(|source| RewriteError::Verify {
                    rule: rule.name,
                    source: Box::new(source),
                })?;
                for &n in &patch.rewired {
                    queue.insert(n);
                }
                for &n in &patch.added {
                    queue.insert(n);
                    for o in 0..graph.node(n).map_or(0, |n| n.outputs().len()) {
                        for (user, _) in graph.uses(Value::new(n, o as u32)) {
                            queue.insert(user);
                        }
                    }
                }
                break;
            }
        }
        report.attempts = matcher.attempts();
        report.dead_removed = graph.remove_dead();
        if self.verify != Verify::Off {
            report.verified += graph.node_count();
            verify(graph).map_err(|source| RewriteError::Invalid {
                when: "after dead-code removal",
                source: Box::new(source),
            })?;
        }
        report.time = start.elapsed();
        Ok(report)
    }
}

/// The nodes still to visit: a bit per node index, popped smallest first (a freed
/// index reused by a new node goes back on the list like any other).
#[derive(Debug, Default)]
struct Worklist {
    bits: Vec<u64>,
    /// No bit below this index is set.
    first: usize,
}

impl Worklist {
    /// Every live node of `graph`, found from its op-code column (two bytes per node
    /// index) rather than by walking the node slots (a stream of the whole node table
    /// on a big graph, before any visit).
    fn insert_live(&mut self, graph: &Graph) {
        let codes = graph.op_codes();
        self.bits
            .resize(self.bits.len().max(codes.len().div_ceil(64)), 0);
        for (w, chunk) in codes.chunks(64).enumerate() {
            let mut word = 0u64;
            for (b, &code) in chunk.iter().enumerate() {
                word |= u64::from(code != VACANT) << b;
            }
            self.bits[w] |= word;
        }
        self.first = 0;
    }

    fn insert(&mut self, id: NodeId) {
        let i = id.index();
        if i / 64 >= self.bits.len() {
            self.bits.resize(i / 64 + 1, 0);
        }
        self.bits[i / 64] |= 1 << (i % 64);
        self.first = self.first.min(i);
    }

    fn pop(&mut self) -> Option<NodeId> {
        let mut w = self.first / 64;
        while w < self.bits.len() {
            let word = self.bits[w];
            if word != 0 {
                let b = word.trailing_zeros() as usize;
                self.bits[w] &= !(1u64 << b);
                let i = w * 64 + b;
                self.first = i + 1;
                return Some(NodeId::new(i));
            }
            w += 1;
        }
        self.first = self.bits.len() * 64;
        None
    }
}

/// `%12 softmax "node_softmax"`: a node named cheaply (printing whole programs per
/// rewrite would make the driver quadratic).
///
/// Written piece by piece rather than with `format!`: it runs once per rewrite, and
/// `{:?}` escapes a name char by char where a plain name (the usual ONNX name) needs no
/// escape at all. The text is what `format!("%{id} {op} {name:?}")` gives.
fn describe(graph: &Graph, id: NodeId) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(32 + graph.node(id).and_then(Node::name).map_or(0, str::len));
    s.push('%');
    // Writing to a String cannot fail.
    let _ = write!(s, "{}", id.index());
    let Some(n) = graph.node(id) else {
        return s;
    };
    s.push(' ');
    s.push_str(n.op_name());
    if let Some(name) = n.name() {
        s.push(' ');
        if name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ')
        {
            s.reserve(name.len() + 2);
            s.push('"');
            s.push_str(name);
            s.push('"');
        } else {
            let _ = write!(s, "{name:?}");
        }
    }
    s
}

fn ping_pong(limit: usize, report: &Report) -> RewriteError {
    let window = report.firings.len().min(64);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &report.firings[report.firings.len() - window..] {
        *counts.entry(f.rule).or_default() += 1;
    }
    let mut rules: Vec<(&str, usize)> = counts.into_iter().collect();
    rules.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    RewriteError::IterationLimit {
        limit,
        rules: rules
            .into_iter()
            .map(|(r, n)| format!("{r} ({n}x)"))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{DType, TensorMeta};

    /// `describe` writes what `format!("%{id} {op} {name:?}")` writes, for plain names
    /// and for names that need escapes.
    #[test]
    fn describe_writes_what_debug_writes() {
        let mut g = Graph::new();
        let meta = TensorMeta::new(DType::F32, [2usize]);
        for name in [
            "node_MatMul_12",
            "with space",
            "a\"quote",
            "back\\slash",
            "tab\there",
            "é/ü",
            "it's",
            "",
        ] {
            let v = g.add_input(name, meta.clone());
            assert_eq!(
                describe(&g, v.node),
                format!("%{} input {name:?}", v.node.index())
            );
        }
        let c = g.add_constant(crate::Tensor::full(DType::F32, &[], 1.0));
        assert_eq!(
            describe(&g, c.node),
            format!("%{} constant", c.node.index())
        );
        assert_eq!(describe(&g, NodeId::new(999)), "%999");
    }
}
