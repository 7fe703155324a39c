//! The verifier: a graph is acyclic, every use is defined, operand lists, edges and
//! use counts agree, attributes fit their op's signature, and every node's metadata is
//! what its op's inference gives.

use petgraph::visit::EdgeRef;
use petgraph::Direction;

use crate::graph::{check_signature, Graph, NodeId, Value};
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

/// Checks `graph` and returns every problem found.
pub fn verify_all(graph: &Graph) -> Vec<GraphError> {
    let names = Names::new(graph);
    let mut errors = Vec::new();
    let fail = |errors: &mut Vec<GraphError>, id: NodeId, message: String| {
        errors.push(GraphError::Verify {
            node: node_line(graph, &names, id),
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
        // Edges agree with the operand list.
        let mut edges: Vec<(u32, Value)> = graph
            .dag()
            .edges_directed(id, Direction::Incoming)
            .map(|e| {
                (
                    e.weight().operand,
                    Value::new(e.source(), e.weight().output),
                )
            })
            .collect();
        edges.sort_unstable();
        let listed: Vec<(u32, Value)> = node
            .operands()
            .iter()
            .enumerate()
            .filter(|(_, v)| graph.node(v.node).is_some())
            .map(|(i, &v)| (i as u32, v))
            .collect();
        if edges != listed {
            fail(
                &mut errors,
                id,
                "its operand list and its incoming edges disagree".into(),
            );
        }
        // The graph's use count agrees with the outgoing edges.
        let out_degree = graph.dag().edges_directed(id, Direction::Outgoing).count();
        if graph.use_count_of_node(id) != out_degree {
            fail(
                &mut errors,
                id,
                format!(
                    "the graph counts {} uses of it, its outgoing edges are {out_degree}",
                    graph.use_count_of_node(id)
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
    if let Err(GraphError::Cycle { node }) = graph.topo_order() {
        errors.push(GraphError::Verify {
            node: node_line(graph, &names, NodeId::new(node)),
            message: "lies on a cycle: a value depends on itself".into(),
        });
    }
    errors
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
