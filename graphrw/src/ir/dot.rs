//! Graphviz DOT export, with an optional set of highlighted nodes (a match).

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::graph::{Graph, NodeId, Value};
use crate::printer::Names;

/// The graph in DOT. Nodes in `highlight` are filled orange; edges are labelled with
/// the operand position when an op has more than one operand.
pub fn to_dot(graph: &Graph, highlight: &BTreeSet<NodeId>) -> String {
    let names = Names::new(graph);
    let mut out = String::from(
        "digraph graphrw {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for &id in names.order() {
        let Some(node) = graph.node(id) else { continue };
        let outs: Vec<String> = (0..node.outputs().len() as u32)
            .map(|o| names.get(Value::new(id, o)))
            .collect();
        let metas: Vec<String> = node.outputs().iter().map(|m| m.to_string()).collect();
        let label = format!(
            "{} = {}\\n{}",
            outs.join(", "),
            node.op_name(),
            metas.join(", ")
        );
        let style = if highlight.contains(&id) {
            ", style=filled, fillcolor=orange"
        } else if node.op().is(crate::ops::Op::Constant) {
            ", style=dashed"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  n{} [label=\"{}\"{style}];",
            id.index(),
            escape(&label)
        );
        let multi = node.operands().len() > 1;
        for (i, v) in node.operands().iter().enumerate() {
            let label = if multi {
                format!(" [label=\"{i}\"]")
            } else {
                String::new()
            };
            let _ = writeln!(out, "  n{} -> n{}{label};", v.node.index(), id.index());
        }
    }
    for (i, v) in graph.outputs().iter().enumerate() {
        let _ = writeln!(out, "  out{i} [label=\"output {i}\", shape=ellipse];");
        let _ = writeln!(out, "  n{} -> out{i};", v.node.index());
    }
    out.push_str("}\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('"', "\\\"")
}
