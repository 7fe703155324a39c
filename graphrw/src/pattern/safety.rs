//! Whether a match is safe to replace: no interior value used outside it, and (for a
//! multi-output match) no path that leaves it and comes back. The rewriter checks it
//! before every replacement; [`find_with`](crate::pattern::find_with) keeps only safe
//! matches (FX's `fully_contained`).

use std::collections::HashSet;

use smallvec::SmallVec;

use crate::pattern::Match;
use crate::{Graph, NodeId, Value};

/// Why a match may not be replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsafe {
    /// An interior value (not a pattern output) is used outside the match.
    EscapingValue {
        /// The matched node whose output escapes.
        node: NodeId,
        /// A user outside the match, or `None` when the value is a graph output.
        user: Option<NodeId>,
    },
    /// A path leaves the match and comes back into it: replacing it would make a cycle.
    NotConvex {
        /// The outside node on the path.
        via: NodeId,
    },
}

impl std::fmt::Display for Unsafe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsafe::EscapingValue {
                node,
                user: Some(u),
            } => write!(
                f,
                "interior node %{} is also used by %{} outside the match",
                node.index(),
                u.index()
            ),
            Unsafe::EscapingValue { node, user: None } => {
                write!(f, "interior node %{} is a graph output", node.index())
            }
            Unsafe::NotConvex { via } => write!(
                f,
                "the match is not convex: a path leaves it and returns through %{}",
                via.index()
            ),
        }
    }
}

/// The nodes of a match that its replacement takes away: every matched op node (graph
/// inputs and constants bound by the pattern stay), sorted by id.
pub(crate) fn interior(graph: &Graph, m: &Match) -> Interior {
    let mut nodes: SmallVec<[NodeId; 16]> = m
        .nodes
        .iter()
        .copied()
        .filter(|&n| graph.node(n).is_some_and(|n| !n.op().is_source_leaf()))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    Interior(nodes)
}

/// A match's interior nodes (a handful: a sorted inline list beats a tree or a hash set).
pub(crate) struct Interior(SmallVec<[NodeId; 16]>);

impl Interior {
    fn contains(&self, n: &NodeId) -> bool {
        self.0.binary_search(n).is_ok()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &NodeId> + '_ {
        self.0.iter()
    }
}

/// Checks that replacing `m` cannot leave a dangling use or make a cycle.
pub fn check_safe(graph: &Graph, m: &Match) -> Result<(), Unsafe> {
    safe_interior(graph, m).map(drop)
}

/// [`check_safe`], returning the match's interior nodes for [`apply_safe`].
pub(crate) fn safe_interior(graph: &Graph, m: &Match) -> Result<Interior, Unsafe> {
    let inside = interior(graph, m);
    for v in inner_values(graph, m, &inside) {
        if graph.is_output(v) {
            return Err(Unsafe::EscapingValue {
                node: v.node,
                user: None,
            });
        }
        if let Some(user) = graph
            .uses(v)
            .map(|(u, _)| u)
            .filter(|u| !inside.contains(u))
            .min()
        {
            return Err(Unsafe::EscapingValue {
                node: v.node,
                user: Some(user),
            });
        }
    }
    if m.outputs.len() > 1 {
        check_convex(graph, &inside)?;
    }
    Ok(inside)
}

/// No path from a node of `inside` through outside nodes back into `inside`.
/// [`safe_interior`]'s verdict without naming the escaping use (the rewriter counts
/// unsafe matches; it does not report which user made them so), at a cost that does not
/// grow with the fan-out of an interior value: one shared by every layer of a model (a
/// mask computed once) would make listing its uses, at every layer's match, quadratic.
/// A value with a few uses is checked by listing them; one with many escapes exactly
/// when it has more uses than the interior's operand slots that read it.
pub(crate) fn safe_interior_verdict(graph: &Graph, m: &Match) -> Option<Interior> {
    /// Up to this many uses, listing them is cheaper than counting the interior's.
    const LISTED: usize = 8;
    let inside = interior(graph, m);
    for v in inner_values(graph, m, &inside) {
        if graph.is_output(v) {
            return None;
        }
        let uses = graph.use_count(v);
        let escapes = if uses <= LISTED {
            graph.uses(v).any(|(u, _)| !inside.contains(&u))
        } else {
            // Every interior node is live, so each of its slots reading `v` is one
            // of `v`'s uses: more uses than those means one outside.
            let inner: usize = inside
                .iter()
                .filter_map(|&u| graph.node(u))
                .map(|u| u.operands().iter().filter(|&&x| x == v).count())
                .sum();
            uses > inner
        };
        if escapes {
            return None;
        }
    }
    if m.outputs.len() > 1 && check_convex(graph, &inside).is_err() {
        return None;
    }
    Some(inside)
}

/// The outputs of the interior's nodes that the match does not replace: each must have
/// no use outside the interior and not be a graph output, or the rewrite would leave it
/// dangling.
fn inner_values<'a>(
    graph: &'a Graph,
    m: &'a Match,
    inside: &'a Interior,
) -> impl Iterator<Item = Value> + 'a {
    inside
        .iter()
        .filter_map(move |&n| graph.node(n).map(|node| (n, node.outputs().len() as u32)))
        .flat_map(|(n, outputs)| (0..outputs).map(move |o| Value::new(n, o)))
        .filter(move |v| !m.outputs.contains(v))
}

fn check_convex(graph: &Graph, inside: &Interior) -> Result<(), Unsafe> {
    let mut stack: Vec<NodeId> = inside
        .iter()
        .flat_map(|&n| graph.node_users(n))
        .filter(|c| !inside.contains(c))
        .collect();
    let mut seen: HashSet<NodeId> = stack.iter().copied().collect();
    while let Some(n) = stack.pop() {
        for c in graph.node_users(n) {
            if inside.contains(&c) {
                return Err(Unsafe::NotConvex { via: n });
            }
            if seen.insert(c) {
                stack.push(c);
            }
        }
    }
    Ok(())
}
