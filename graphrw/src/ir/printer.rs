//! Prints a graph as a readable program, one op per line with its metadata, in the
//! style of Thunder's traces:
//!
//! ```text
//! graph(q: f32[1, 4, 16, 8], k: f32[1, 4, 16, 8]) {
//!   t0 = transpose(k, dim0=-2, dim1=-1)  # f32[1, 4, 8, 16]
//!   t1 = matmul(q, t0)  # f32[1, 4, 16, 16]
//!   return t1
//! }
//! ```
//!
//! Assumptions between symbols ([`crate::assume`]) follow the signature, one a line:
//! `assume s95 = s15  (`matmul` (node sdpa): s15 + s70 vs s70 + s95)`; then the
//! broadcasts an op needed equal to a member, checked at run time as well:
//! `require broadcast(k, m) = k  (`matmul` (node pv))`.
//!
//! Names are stable: inputs keep their names, constants are `c0, c1, …` and other
//! values `t0, t1, …`, numbered in the graph's deterministic topological order, so the
//! same graph always prints the same text.

use std::fmt::Write;

use crate::graph::{Graph, NodeId, Value};
use crate::ops::{AttrValue, Op};

/// The printed name of every value of a graph.
///
/// Names are numbers until asked for: a node keeps the number of its first `t` (or its
/// `c`), and [`Names::get`] spells the name. Only inputs keep a string. The verifier
/// and the exporter build this for every graph they see, so on a million-node graph
/// it costs a few bytes a node, not a string per value.
#[derive(Clone, Debug, Default)]
pub struct Names {
    /// Per node index, how its values are named.
    slots: Vec<Slot>,
    /// The names of the graph inputs, by [`Slot::Input`] index.
    inputs: Vec<String>,
    order: Vec<NodeId>,
}

/// How one node's values are named.
#[derive(Clone, Copy, Debug, Default)]
enum Slot {
    /// Not in the graph.
    #[default]
    Absent,
    /// An input: its name is `inputs[i]`.
    Input(u32),
    /// A constant `c{n}`.
    Constant(u32),
    /// Outputs `t{first}` to `t{first + count - 1}`.
    Temps { first: u32, count: u32 },
}

impl Names {
    /// Names every value of `graph`. On a cyclic graph, nodes are numbered in id order.
    pub fn new(graph: &Graph) -> Names {
        let order = graph
            .topo_order()
            .unwrap_or_else(|_| graph.node_ids().collect());
        let len = order.iter().map(|id| id.index() + 1).max().unwrap_or(0);
        let mut slots = vec![Slot::Absent; len];
        let mut inputs = Vec::new();
        let mut taken = std::collections::HashSet::new();
        let (mut t, mut c) = (0u32, 0u32);
        for &id in &order {
            let Some(node) = graph.node(id) else { continue };
            let slot = match node.builtin() {
                Some(Op::Input) => {
                    let base = sanitize(node.name().unwrap_or("input"));
                    let mut name = base.clone();
                    let mut k = 1;
                    while !taken.insert(name.clone()) {
                        name = format!("{base}_{k}");
                        k += 1;
                    }
                    inputs.push(name);
                    Slot::Input(inputs.len() as u32 - 1)
                }
                Some(Op::Constant) => {
                    c += 1;
                    Slot::Constant(c - 1)
                }
                _ => {
                    let count = node.outputs().len() as u32;
                    t += count;
                    Slot::Temps {
                        first: t - count,
                        count,
                    }
                }
            };
            slots[id.index()] = slot;
        }
        Names {
            slots,
            inputs,
            order,
        }
    }

    /// The printed name of `v` (`%N.o` for a value the graph does not have).
    pub fn get(&self, v: Value) -> String {
        let slot = self.slots.get(v.node.index()).copied().unwrap_or_default();
        match slot {
            Slot::Input(i) if v.output == 0 => match self.inputs.get(i as usize) {
                Some(name) => name.clone(),
                None => format!("%{}.{}", v.node.index(), v.output),
            },
            Slot::Constant(n) if v.output == 0 => format!("c{n}"),
            Slot::Temps { first, count } if v.output < count => format!("t{}", first + v.output),
            _ => format!("%{}.{}", v.node.index(), v.output),
        }
    }

    /// The order nodes are printed in.
    pub fn order(&self) -> &[NodeId] {
        &self.order
    }
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{s}")
    } else {
        s
    }
}

/// One node as a line of the program, without indentation:
/// `t7 = softmax(t6, dim=-1)  # f32[1, 4, 16, 16]`.
pub fn node_line(graph: &Graph, names: &Names, id: NodeId) -> String {
    let Some(node) = graph.node(id) else {
        return format!("%{} (removed)", id.index());
    };
    let lhs: Vec<String> = (0..node.outputs().len().max(1) as u32)
        .map(|o| names.get(Value::new(id, o)))
        .collect();
    let mut args: Vec<String> = node.operands().iter().map(|&v| names.get(v)).collect();
    if node.op().is(Op::Constant) {
        args.push(constant_text(node.payload()));
    } else if !node.op().is(Op::Input) {
        let opaque = node.op().is(Op::Opaque);
        for (name, v) in node.attrs().iter() {
            // An opaque node's `known` shows as `?` metadata, an empty domain not at all.
            let noise = opaque && (name == "known" || *v == AttrValue::Str(String::new()));
            match v {
                AttrValue::Null => {}
                _ if noise => {}
                AttrValue::Float(x) => args.push(format!("{name}={}", float_text(*x))),
                _ => args.push(format!("{name}={v}")),
            }
        }
    }
    let metas: Vec<String> = (0..node.outputs().len())
        .map(|o| meta_text(node, o))
        .collect();
    format!(
        "{} = {}({})  # {}",
        lhs.join(", "),
        node.op_name(),
        args.join(", "),
        metas.join(", ")
    )
}

/// Output `o`'s metadata, or `?` when graphrw does not know it (see [`crate::foreign`]).
fn meta_text(node: &crate::graph::Node, o: usize) -> String {
    match node.outputs().get(o) {
        Some(m) if node.is_known(o) => m.to_string(),
        _ => "?".to_string(),
    }
}

/// A float attribute: at f32 precision when it is an f32 widened (what ONNX
/// attributes and most written constants are: `1.702`, not `1.7020000219345093`), else
/// at f64 precision.
fn float_text(x: f64) -> String {
    let narrow = x as f32;
    if f64::from(narrow) == x {
        format!("{narrow:?}")
    } else {
        format!("{x:?}")
    }
}

/// A one-element constant's value as its dtype writes it: `1` for an integer, `true`
/// for a bool, a float at its own precision (`1.702` for f32, f16 and bf16).
fn constant_text(t: Option<&graphrw_kernels::Tensor>) -> String {
    use graphrw_kernels::DType;
    match t {
        Some(t) if t.numel() == 1 => match t.dtype() {
            // Every integer but u64 is exact in i64.
            DType::U64 => t
                .as_slice::<u64>()
                .map_or_else(|_| "?".into(), |v| v[0].to_string()),
            DType::I64
            | DType::I32
            | DType::I16
            | DType::I8
            | DType::U32
            | DType::U16
            | DType::U8 => t.to_i64_vec()[0].to_string(),
            DType::Bool => (t.to_i64_vec()[0] != 0).to_string(),
            DType::F64 => format!("{:?}", t.to_f64_vec()[0]),
            DType::F32 | DType::F16 | DType::BF16 => format!("{:?}", t.to_f64_vec()[0] as f32),
        },
        Some(t) => format!("<{} values>", t.numel()),
        None => "<missing>".into(),
    }
}

/// The whole graph as a program.
pub fn print(graph: &Graph) -> String {
    let names = Names::new(graph);
    let mut out = String::new();
    let params: Vec<String> = graph
        .inputs()
        .iter()
        .filter_map(|&id| {
            let node = graph.node(id)?;
            node.outputs().first()?;
            Some(format!(
                "{}: {}",
                names.get(Value::from(id)),
                meta_text(node, 0)
            ))
        })
        .collect();
    let _ = writeln!(out, "graph({}) {{", params.join(", "));
    if !graph.bounds().is_empty() {
        let _ = writeln!(out, "  assume {}", graph.bounds());
    }
    for a in graph.assumptions() {
        let _ = writeln!(out, "  assume {a}");
    }
    for r in graph.requirements() {
        let _ = writeln!(out, "  require {r}");
    }
    for &id in names.order() {
        if graph.node(id).is_some_and(|n| n.op().is(Op::Input)) {
            continue;
        }
        let _ = writeln!(out, "  {}", node_line(graph, &names, id));
    }
    let rets: Vec<String> = graph.outputs().iter().map(|&v| names.get(v)).collect();
    let _ = writeln!(out, "  return {}", rets.join(", "));
    out.push_str("}\n");
    out
}

impl std::fmt::Display for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&print(self))
    }
}
