//! The rewriter: applies rule sets greedily to a fixed point.
//!
//! A worklist of nodes, smallest id first (deterministic). For each node, the rules
//! whose anchor op is the node's op are tried in priority order (dispatch by anchor op:
//! a pass costs the rules that can anchor at each node, not every rule); the first
//! match that is safe to replace ([`apply::check_safe`]) is replaced atomically
//! ([`apply::apply`]), and the new nodes and their users go back on the worklist.
//! Matches never overlap: each replacement happens on the graph as it is after the
//! previous one. An iteration guard turns a rule ping-pong into an error naming the
//! rules; dead code is removed at the end. Configured egg-style with builder methods.
//!
//! ```
//! # use graphrw::rewrite::Rewriter;
//! # fn demo(graph: &mut graphrw::Graph, rules: &'static graphrw::RuleSet) -> Result<(), graphrw::rewrite::RewriteError> {
//! let report = Rewriter::new(&[rules]).with_iteration_limit(10_000).run(graph)?;
//! println!("{report}");
//! # Ok(()) }
//! ```

pub mod apply;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::graph::{Graph, NodeId, Value};
use crate::pattern::{matcher, Match, Rule, RuleSet};
use crate::verify::verify;
use crate::GraphError;

pub use apply::{check_safe, Patch, Unsafe};

/// A filter on matches: return false to skip a match (FX's `match_filters`).
pub type MatchFilter = fn(&Graph, &Match) -> bool;

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
    /// A replacement failed (the graph is as it was before that replacement).
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
}

/// One rewrite that happened.
#[derive(Clone, Debug)]
pub struct Firing {
    /// The rule.
    pub rule: &'static str,
    /// The anchor node (`%id op "name"`) before the rewrite.
    pub at: String,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every rewrite, in order.
    pub firings: Vec<Firing>,
    /// Matches found but not applied because they were unsafe, per rule.
    pub rejected_unsafe: BTreeMap<&'static str, usize>,
    /// Nodes removed by dead-code elimination at the end.
    pub dead_removed: usize,
    /// Nodes taken from the worklist.
    pub visited: usize,
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
        Ok(())
    }
}

/// Applies rule sets to a fixed point.
#[derive(Clone)]
pub struct Rewriter {
    rules: Vec<&'static Rule>,
    iteration_limit: Option<usize>,
    verify_each: bool,
    filters: Vec<MatchFilter>,
}

impl Rewriter {
    /// A rewriter over the rules of `sets`, tried in priority order (higher first, then
    /// set order, then declaration order).
    pub fn new(sets: &[&'static RuleSet]) -> Rewriter {
        let mut rules: Vec<&'static Rule> =
            sets.iter().flat_map(|s| s.rules.iter().copied()).collect();
        rules.sort_by_key(|r| std::cmp::Reverse(r.priority)); // stable: keeps declaration order
        Rewriter {
            rules,
            iteration_limit: None,
            verify_each: cfg!(debug_assertions),
            filters: Vec::new(),
        }
    }

    /// At most `limit` rewrites (default: 4 × nodes + 1000).
    pub fn with_iteration_limit(mut self, limit: usize) -> Rewriter {
        self.iteration_limit = Some(limit);
        self
    }

    /// Verify the graph after every rewrite (default: in debug builds).
    pub fn with_verify_each(mut self, on: bool) -> Rewriter {
        self.verify_each = on;
        self
    }

    /// Skip matches the filter refuses.
    pub fn with_filter(mut self, filter: MatchFilter) -> Rewriter {
        self.filters.push(filter);
        self
    }

    /// Rewrites `graph` in place to a fixed point.
    pub fn run(&self, graph: &mut Graph) -> Result<Report, RewriteError> {
        let start = Instant::now();
        let limit = self
            .iteration_limit
            .unwrap_or(4 * graph.node_count() + 1000);
        let by_op = self.dispatch_table();
        let mut report = Report::default();
        let mut queue: BTreeSet<NodeId> = graph.node_ids().collect();
        while let Some(id) = queue.pop_first() {
            report.visited += 1;
            let Some(node) = graph.node(id) else { continue };
            let Some(candidates) = by_op.get(node.op_name()) else {
                continue;
            };
            for &rule in candidates {
                let Some(m) = matcher::match_at(rule.pattern, graph, id) else {
                    continue;
                };
                if !self.filters.iter().all(|f| f(graph, &m)) {
                    continue;
                }
                if check_safe(graph, &m).is_err() {
                    *report.rejected_unsafe.entry(rule.name).or_default() += 1;
                    continue;
                }
                let at = describe(graph, id);
                let patch = apply::apply(graph, &m, rule.replace).map_err(|source| {
                    RewriteError::Replacement {
                        rule: rule.name,
                        node: at.clone(),
                        source: Box::new(source),
                    }
                })?;
                report.firings.push(Firing {
                    rule: rule.name,
                    at,
                });
                if report.firings.len() > limit {
                    return Err(ping_pong(limit, &report));
                }
                if self.verify_each {
                    verify(graph).map_err(|source| RewriteError::Verify {
                        rule: rule.name,
                        source: Box::new(source),
                    })?;
                }
                queue.extend(patch.rewired.iter().copied());
                for &n in &patch.added {
                    queue.insert(n);
                    for o in 0..graph.node(n).map_or(0, |n| n.outputs().len()) {
                        for (user, _) in graph.users(Value::new(n, o as u32)) {
                            queue.insert(user);
                        }
                    }
                }
                break;
            }
        }
        report.dead_removed = graph.remove_dead();
        report.time = start.elapsed();
        Ok(report)
    }

    /// Rules by anchor op name, each list in priority order.
    fn dispatch_table(&self) -> BTreeMap<&'static str, Vec<&'static Rule>> {
        let mut t: BTreeMap<&'static str, Vec<&'static Rule>> = BTreeMap::new();
        for &r in &self.rules {
            for op in r.pattern.anchors {
                t.entry(op.name).or_default().push(r);
            }
        }
        t
    }
}

/// `%12 softmax "node_softmax"`: a node named cheaply (printing whole programs per
/// rewrite would make the driver quadratic).
fn describe(graph: &Graph, id: NodeId) -> String {
    match graph.node(id) {
        Some(n) => match n.name() {
            Some(name) => format!("%{} {} {name:?}", id.index(), n.op_name()),
            None => format!("%{} {}", id.index(), n.op_name()),
        },
        None => format!("%{}", id.index()),
    }
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
