//! Checking a match is safe to replace, and replacing it as one atomic patch.

use std::collections::HashSet;

use smallvec::SmallVec;

use crate::builder::Builder;
use crate::graph::{Graph, NodeId, Value};
use crate::pattern::{Match, ReplaceFn};
use crate::GraphError;

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
fn interior(graph: &Graph, m: &Match) -> Interior {
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

    fn iter(&self) -> impl Iterator<Item = &NodeId> + '_ {
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
    for &n in inside.iter() {
        let Some(node) = graph.node(n) else { continue };
        for o in 0..node.outputs().len() as u32 {
            let v = Value::new(n, o);
            if m.outputs.contains(&v) {
                continue;
            }
            if graph.is_output(v) {
                return Err(Unsafe::EscapingValue {
                    node: n,
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
                    node: n,
                    user: Some(user),
                });
            }
        }
    }
    if m.outputs.len() > 1 {
        check_convex(graph, &inside)?;
    }
    Ok(inside)
}

/// No path from a node of `inside` through outside nodes back into `inside`.
fn check_convex(graph: &Graph, inside: &Interior) -> Result<(), Unsafe> {
    let mut stack: Vec<NodeId> = inside
        .iter()
        .flat_map(|&n| graph.consumers(n))
        .filter(|c| !inside.contains(c))
        .collect();
    let mut seen: HashSet<NodeId> = stack.iter().copied().collect();
    while let Some(n) = stack.pop() {
        for c in graph.consumers(n) {
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

/// What one replacement did.
#[derive(Clone, Debug, Default)]
pub struct Patch {
    /// Nodes the replacement added.
    pub added: Vec<NodeId>,
    /// Nodes outside the patch whose operands were rewired to the new outputs.
    pub rewired: Vec<NodeId>,
    /// Nodes removed because nothing used them any more: matched nodes, and the nodes
    /// only they used (graph inputs and outputs stay).
    pub removed: usize,
}

/// Replaces `m` by what `replace` builds, atomically: the new nodes are built aside and
/// checked (one per pattern output, same dtype and shape); only then are uses rewired
/// and the old nodes removed. On any error the graph is left exactly as it was.
pub fn apply(graph: &mut Graph, m: &Match, replace: ReplaceFn) -> Result<Patch, GraphError> {
    let inside = interior(graph, m);
    apply_safe(graph, m, replace, &inside)
}

/// [`apply`] for a match whose interior nodes [`safe_interior`] has just given.
pub(crate) fn apply_safe(
    graph: &mut Graph,
    m: &Match,
    replace: ReplaceFn,
    inside: &Interior,
) -> Result<Patch, GraphError> {
    let b = Builder::from_graph(std::mem::take(graph));
    let built = replace(&b, &m.bindings);
    let added = b.created();
    *graph = b.finish();
    let rollback = |graph: &mut Graph| {
        for &n in added.iter().rev() {
            let _ = graph.remove_node(n);
        }
    };
    let new_outputs = match built {
        Ok(v) => v,
        Err(e) => {
            rollback(graph);
            return Err(e);
        }
    };
    if let Err(e) = check_patch(graph, m, &new_outputs) {
        rollback(graph);
        return Err(e);
    }
    // Rewire every use of an old output, except uses by the new nodes themselves (a
    // replacement may read an old output's operands, never the old output).
    let mut rewired = Vec::new();
    for (&old, &new) in m.outputs.iter().zip(&new_outputs) {
        if old == new {
            continue;
        }
        for (user, operand) in graph.users(old) {
            if !added.contains(&user) {
                graph.set_operand(user, operand as usize, new)?;
                rewired.push(user);
            }
        }
        graph.redirect_output(old, new);
    }
    // Remove the matched nodes nothing uses any more, and what only they used (the
    // constants of the match, say): removing one releases its operands.
    let removed = inside.iter().map(|&n| graph.remove_if_dead(n)).sum();
    Ok(Patch {
        added,
        rewired,
        removed,
    })
}

fn check_patch(graph: &Graph, m: &Match, new_outputs: &[Value]) -> Result<(), GraphError> {
    let rule = m.pattern.name;
    if new_outputs.len() != m.outputs.len() {
        return Err(GraphError::Signature {
            op: "replacement",
            node: Some(rule.to_string()),
            message: format!(
                "built {} outputs for a pattern with {}",
                new_outputs.len(),
                m.outputs.len()
            ),
        });
    }
    // A replacement may also return an interior value (not the old output itself):
    // the rewired users then read it, so the dead-code cascade keeps it.
    for (i, (&old, &new)) in m.outputs.iter().zip(new_outputs).enumerate() {
        let (was, now) = (graph.meta(old)?, graph.meta(new)?);
        if was.dtype != now.dtype || was.shape != now.shape {
            return Err(GraphError::Signature {
                op: "replacement",
                node: Some(rule.to_string()),
                message: format!("output {i} was {was} and would become {now}"),
            });
        }
    }
    Ok(())
}
