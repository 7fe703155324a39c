//! `graphrw inspect MODEL`: what a model holds.

use std::path::Path;
use std::process::ExitCode;

use graphrw::ops::Op;
use graphrw::Value;

use super::CmdResult;

/// True for the ops that hold data rather than compute (graph inputs, constants).
fn is_leaf(op: &str) -> bool {
    [Op::Input, Op::Constant].iter().any(|o| o.name() == op)
}

/// Prints the node count, the ops with their counts, the inputs and the outputs.
pub fn run(model: &Path) -> CmdResult {
    let graph = super::load(model)?;
    let counts = graph.op_counts();
    let ops: usize = counts
        .iter()
        .filter(|(op, _)| !is_leaf(op))
        .map(|(_, n)| n)
        .sum();
    let (constants, bytes) = graph
        .nodes_of(Op::Constant)
        .filter_map(|id| graph.node(id)?.payload())
        .fold((0usize, 0usize), |(n, b), t| (n + 1, b + t.nbytes()));
    println!("model: {}", model.display());
    println!(
        "nodes: {} ({ops} ops, {constants} constants of {}, {} inputs)",
        graph.node_count(),
        human_bytes(bytes),
        graph.inputs().len()
    );
    println!("inputs:");
    for &id in graph.inputs() {
        let name = graph.node(id).and_then(|n| n.name()).unwrap_or("?");
        println!("  {name}: {}", graph.meta(Value::from(id))?);
    }
    println!("outputs:");
    for (name, &v) in graph.output_names().iter().zip(graph.outputs()) {
        println!("  {name}: {}", graph.meta(v)?);
    }
    println!("ops:");
    let mut by_count: Vec<(&str, usize)> =
        counts.into_iter().filter(|(op, _)| !is_leaf(op)).collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let width = by_count.iter().map(|(op, _)| op.len()).max().unwrap_or(0);
    for (op, n) in by_count {
        println!("  {op:<width$}  {n}");
    }
    Ok(ExitCode::SUCCESS)
}

fn human_bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}
