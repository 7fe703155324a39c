//! `graphrw optimize MODEL -o OUT [--rules NAME...]`: apply rule sets, report what
//! fired, write the optimised model as ONNX.

use std::path::Path;
use std::process::ExitCode;

use graphrw::rewrite::Rewriter;
use graphrw::{rules, verify};

use super::CmdResult;

/// Rule sets by name, in the order given; with none (or `all`) runs the whole pipeline
/// ([`rules::optimize`]: attention fusion, causal masks, generated fused kernels).
pub fn run(model: &Path, output: &Path, names: &[String]) -> CmdResult {
    let mut graph = super::load(model)?;
    if names.is_empty() || names == ["all"] {
        let done = rules::optimize(&mut graph)?;
        verify(&graph)?;
        for r in done.attention.iter().chain([&done.kernels]) {
            print!("{r}");
        }
        println!("{done}");
    } else {
        let before = graph.node_count();
        let mut sets = Vec::new();
        for name in names {
            match name.as_str() {
                "kernels" => sets.extend(graphrw::fused::builtin_rules()),
                _ => sets.push(rules::rule_set(name).ok_or_else(|| {
                    format!(
                        "unknown rule set `{name}` (known: all, canonical, attention, kernels, \
                         or one kernel: {})",
                        kernel_names().join(", ")
                    )
                })?),
            }
        }
        let report = Rewriter::new(&sets).run(&mut graph)?;
        verify(&graph)?;
        print!("{report}");
        println!("nodes: {before} -> {}", graph.node_count());
    }
    graphrw::onnx::save(&graph, output)?;
    println!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

/// The built-in generated kernels' names, as `--rules` takes them.
fn kernel_names() -> Vec<&'static str> {
    graphrw::fused::builtin::ALL
        .iter()
        .filter_map(|k| k.op.name.strip_prefix("fused."))
        .collect()
}
