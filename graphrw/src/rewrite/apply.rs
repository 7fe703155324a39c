//! Replacing a match as one atomic patch (the match checked safe to replace by
//! [`crate::pattern::check_safe`] first).

use smallvec::SmallVec;

use crate::builder::Builder;
use crate::graph::{Graph, NodeId, Value};
use crate::pattern::safety::{interior, Interior};
use crate::pattern::{Match, ReplaceFn};
use crate::GraphError;

/// The safety check lives with the patterns; its old paths here still work.
pub use crate::pattern::{check_safe, Unsafe};

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

/// [`apply`] for a match whose interior nodes
/// [`safe_interior`](crate::pattern::safety::safe_interior) has just given.
pub(crate) fn apply_safe(
    graph: &mut Graph,
    m: &Match,
    replace: ReplaceFn,
    inside: &Interior,
) -> Result<Patch, GraphError> {
    let b = Builder::from_graph(std::mem::take(graph));
    let built = replace(&b, &m.bindings);
    let (g, added) = b.into_parts();
    *graph = g;
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
    // The uses of one old output, sorted (listed aside: rewiring edits the list).
    let mut uses: SmallVec<[(NodeId, u32); 8]> = SmallVec::new();
    for (&old, &new) in m.outputs.iter().zip(&new_outputs) {
        if old == new {
            continue;
        }
        uses.clear();
        uses.extend(graph.uses(old));
        uses.sort_unstable();
        for &(user, operand) in &uses {
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
