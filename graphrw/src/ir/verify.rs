//! The verifier: a graph is acyclic, every use is defined, operand lists, use lists
//! and use counts agree, attributes fit their op's signature, and every node's metadata is
//! what its op's inference gives.

use crate::graph::{check_signature, Graph, NodeId, Use, Value};
use crate::meta::TensorMeta;
use crate::ops::{AttrValue, Infer};
use crate::printer::{node_line, Names};
use crate::GraphError;

/// Checks `graph`; the first problem found is the error, naming the node as the
/// printer shows it and what was expected.
pub fn verify(graph: &Graph) -> Result<(), GraphError> {
    match verify_all(graph).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Checks `graph` as [`verify`] does and returns its nodes in [`Graph::topo_order`]'s
/// order: the cycle check orders the graph anyway, so a caller that needs the order
/// (the ONNX exporter) does not walk the graph a second time.
pub(crate) fn verify_ordered(graph: &Graph) -> Result<Vec<NodeId>, GraphError> {
    let (errors, order) = check(graph, true);
    match (errors.into_iter().next(), order) {
        (Some(e), _) => Err(e),
        (None, Some(order)) => Ok(order),
        // Not reached: without a cycle error the order is there.
        (None, None) => graph.topo_order(),
    }
}

/// Checks `graph` and returns every problem found.
pub fn verify_all(graph: &Graph) -> Vec<GraphError> {
    check(graph, false).0
}

/// Every problem of `graph`, and its topological order when `ordered` and it has no
/// cycle.
///
/// The use lists are checked from the operands' side only, with a count: each linked
/// operand slot finds its own entry in its producer's use list, so the slots map one to
/// one onto entries, and when there are as many entries as linked slots, every entry
/// points back to the slot that found it (what the per-list check would check, use by
/// use, at a random node each). Only when that does not hold is the graph checked
/// again with each use list read, so the errors are those of that check.
fn check(graph: &Graph, ordered: bool) -> (Vec<GraphError>, Option<Vec<NodeId>>) {
    match check_with(graph, ordered, false) {
        Some(found) => found,
        None => check_with(graph, ordered, true).unwrap_or_else(|| (Vec::new(), None)),
    }
}

/// [`check`], reading each node's use list (`each_use_list`) or counting entries;
/// `None` when the count does not settle it.
fn check_with(
    graph: &Graph,
    ordered: bool,
    each_use_list: bool,
) -> Option<(Vec<GraphError>, Option<Vec<NodeId>>)> {
    // Linked operand slots (whose producer exists) and use list entries of live nodes.
    let (mut linked_slots, mut entries, mut all_linked) = (0usize, 0usize, true);
    // Named only when something is wrong: naming every value costs more than the checks.
    let names = std::cell::OnceCell::new();
    let names = || names.get_or_init(|| Names::new(graph));
    let mut errors = Vec::new();
    let fail = |errors: &mut Vec<GraphError>, id: NodeId, message: String| {
        errors.push(GraphError::Verify {
            node: node_line(graph, names(), id),
            message,
        })
    };
    for id in graph.node_ids() {
        let Some(node) = graph.node(id) else { continue };
        // Every use is defined.
        for (i, &v) in node.operands().iter().enumerate() {
            if graph.meta(v).is_err() {
                fail(
                    &mut errors,
                    id,
                    format!(
                        "operand {i} uses %{}.{}, which does not exist (a dangling use)",
                        v.node.index(),
                        v.output
                    ),
                );
            }
        }
        // Each operand is in its producer's use list, at the slot the node keeps.
        let linked = node.operands().iter().enumerate().all(|(i, &v)| {
            let want = (
                id,
                Use {
                    output: v.output,
                    operand: i as u32,
                },
            );
            match graph.use_slot(id, i) {
                Some(slot) => {
                    linked_slots += usize::from(graph.node(v.node).is_some());
                    graph.node_uses(v.node).get(slot) == Some(&want)
                }
                None => graph.node(v.node).is_none(),
            }
        });
        if !linked {
            all_linked = false;
            fail(
                &mut errors,
                id,
                "its operand list and its producers' use lists disagree".into(),
            );
        }
        entries += graph.node_uses(id).len();
        // Each entry of its use list is an operand of a live user, which points back.
        let back = !each_use_list
            || graph
                .node_uses(id)
                .iter()
                .enumerate()
                .all(|(slot, &(user, u))| {
                    let i = u.operand as usize;
                    graph.node(user).and_then(|n| n.operands().get(i).copied())
                        == Some(Value::new(id, u.output))
                        && graph.use_slot(user, i) == Some(slot)
                });
        if !back {
            fail(
                &mut errors,
                id,
                "its use list names a use that its user's operands do not have".into(),
            );
        }
        // The graph's use count agrees with the use list.
        let listed = graph.node_uses(id).len();
        if graph.node_use_count(id) != listed {
            fail(
                &mut errors,
                id,
                format!(
                    "the graph counts {} uses of it, its use list has {listed}",
                    graph.node_use_count(id)
                ),
            );
        }
        // Signature.
        if let Err(message) = check_signature(node.op(), node.operands().len(), node.attr_values())
        {
            fail(&mut errors, id, format!("`{}` {message}", node.op_name()));
            continue;
        }
        // Output count and metadata.
        let expected = node.op().output_count(node.attr_values());
        if node.outputs().len() != expected {
            fail(
                &mut errors,
                id,
                format!(
                    "has {} outputs, `{}` makes {expected}",
                    node.outputs().len(),
                    node.op_name()
                ),
            );
            continue;
        }
        if let Some(message) = check_metadata(graph, id) {
            fail(&mut errors, id, message);
        }
    }
    for id in graph.inputs() {
        if graph.node(*id).map(|n| n.op_name()) != Some("input") {
            errors.push(GraphError::Verify {
                node: format!("%{}", id.index()),
                message: "is listed as a graph input but is not an `input` node".into(),
            });
        }
    }
    for (i, &v) in graph.outputs().iter().enumerate() {
        if graph.meta(v).is_err() {
            errors.push(GraphError::Verify {
                node: format!("%{}.{}", v.node.index(), v.output),
                message: format!("graph output {i} does not exist"),
            });
        }
    }
    let settled = each_use_list || (all_linked && linked_slots == entries);
    if !settled {
        return None;
    }
    // The same node either way: which nodes Kahn's algorithm leaves, and so the first
    // one on or behind a cycle, does not depend on the order it takes them in.
    let (on_cycle, order) = if ordered {
        match graph.topo_order() {
            Ok(order) => (None, Some(order)),
            Err(GraphError::Cycle { node }) => (Some(NodeId::new(node)), None),
            Err(e) => {
                errors.push(e);
                (None, None)
            }
        }
    } else {
        (graph.node_on_cycle(), None)
    };
    if let Some(node) = on_cycle {
        errors.push(GraphError::Verify {
            node: node_line(graph, names(), node),
            message: "lies on a cycle: a value depends on itself".into(),
        });
    }
    Some((errors, order))
}

fn check_metadata(graph: &Graph, id: NodeId) -> Option<String> {
    let node = graph.node(id)?;
    match node.op().infer {
        Infer::Declared => match node.op_name() {
            "constant" => {
                let Some(t) = node.payload() else {
                    return Some("a constant without a value".into());
                };
                let m = TensorMeta::of(t);
                (node.outputs()[0].dtype != m.dtype || node.outputs()[0].shape != m.shape)
                    .then(|| format!("metadata says {}, the constant is {m}", node.outputs()[0]))
            }
            "opaque" => match node.foreign() {
                None => Some("an opaque node without its foreign record".into()),
                Some(f) if f.types.len() != node.outputs().len() => Some(format!(
                    "an opaque node with {} outputs but {} output types recorded",
                    node.outputs().len(),
                    f.types.len()
                )),
                Some(_) => None,
            },
            _ => match node.attr_values().first() {
                Some(AttrValue::Str(_)) => None,
                _ => Some("an input without a name".into()),
            },
        },
        _ => {
            if node.operands().iter().any(|&v| graph.meta(v).is_err()) {
                return None;
            }
            match graph.infer_node(node.op(), node.operands(), node.attr_values(), node.name()) {
                Ok(inferred) if inferred == node.outputs() => None,
                Ok(inferred) => {
                    let want: Vec<String> = inferred.iter().map(|m| m.to_string()).collect();
                    Some(format!(
                        "metadata disagrees with `{}`'s inference, which gives {}",
                        node.op_name(),
                        want.join(", ")
                    ))
                }
                Err(e) => Some(format!("inference rejects this node: {e}")),
            }
        }
    }
}
