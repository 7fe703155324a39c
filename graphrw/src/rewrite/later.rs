//! Rewrites that took a region a later rule would have fused: with
//! [`Rewriter::with_later`](super::Rewriter::with_later), each rewrite by one of the
//! rewriter's own rules first asks the later rule sets (the built-in fusions, say)
//! whether one of their rules matches a region holding a node the rewrite replaces. A
//! user rule that turns an MLP into `my.swiglu` is then reported beside the built-in
//! SwiGLU kernel's rule that would have fused that MLP, had the user rule not fired.
//!
//! The check is cheap and local: it runs only when a rule fires, and tries the later
//! rules anchored at the replaced nodes and at the users of the match's outputs (up to
//! [`USER_DEPTH`] steps down, at most [`ANCHORS_MAX`] anchors), on the graph as it is
//! before the rewrite. The later rules are tried on that graph, not on the graph their
//! own pass will see (after canonicalisation, say): a region they would match only
//! after another rewrite is not reported.

use std::fmt;

use crate::graph::{Graph, NodeId, Value};
use crate::pattern::NodeMatcher;

/// How many steps down from the match's outputs a later rule's anchor is looked for.
pub const USER_DEPTH: usize = 3;
/// The most anchors tried for one rewrite.
pub const ANCHORS_MAX: usize = 64;

/// A rewrite by one of the rewriter's rules that replaced a node where a rule of the
/// later rule sets ([`Rewriter::with_later`](super::Rewriter::with_later)) matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preempted {
    /// The rule that fired.
    pub rule: &'static str,
    /// Its anchor (`%id op "name"`), before the rewrite.
    pub at: String,
    /// The later rule whose match held a node the rewrite replaced.
    pub later: &'static str,
}

impl fmt::Display for Preempted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rule `{}` at {} rewrote a region that the later rule `{}` would have fused",
            self.rule, self.at, self.later
        )
    }
}

/// The first later rule (of `matcher`'s dispatch) whose match, anchored at one of the
/// `replaced` nodes or at a user of `outputs` (within [`USER_DEPTH`] steps), holds one
/// of the `replaced` nodes.
pub(super) fn later_match(
    matcher: &mut NodeMatcher<'_>,
    graph: &Graph,
    replaced: &[NodeId],
    outputs: &[Value],
) -> Option<&'static str> {
    let mut anchors: Vec<NodeId> = replaced.to_vec();
    let mut frontier: Vec<Value> = outputs.to_vec();
    for _ in 0..USER_DEPTH {
        let mut next = Vec::new();
        for v in frontier {
            for (user, _) in graph.uses(v) {
                if anchors.len() >= ANCHORS_MAX {
                    break;
                }
                if !anchors.contains(&user) {
                    anchors.push(user);
                    let outs = graph.node(user).map_or(0, |n| n.outputs().len());
                    next.extend((0..outs as u32).map(|o| Value::new(user, o)));
                }
            }
        }
        frontier = next;
    }
    for id in anchors {
        if !matcher.visit(graph, id) {
            continue;
        }
        while let Some((rule, m)) = matcher.next_match_ref(graph, |_| false) {
            if m.nodes.iter().any(|n| replaced.contains(n)) {
                return Some(rule.name);
            }
        }
    }
    None
}
