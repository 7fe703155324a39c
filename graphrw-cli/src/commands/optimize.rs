//! `graphrw optimize MODEL -o OUT [--rules NAME...]`: apply rule sets, report what
//! fired, write the optimised model as ONNX.

use std::path::Path;
use std::process::ExitCode;

use graphrw::rewrite::Rewriter;
use graphrw::{rules, verify};

use super::CmdResult;

/// Rule sets by name, in the order given; `attention` alone (the default) runs the
/// whole fusion pipeline (canonicalise, then fuse with canonicalisation on).
pub fn run(model: &Path, output: &Path, names: &[String]) -> CmdResult {
    let mut graph = super::load(model)?;
    let before = graph.nodes_with_op("softmax").count();
    let reports = if names.is_empty() || names == ["attention"] {
        rules::fuse_attention(&mut graph)?
    } else {
        let mut sets = Vec::new();
        for name in names {
            sets.push(rules::rule_set(name).ok_or_else(|| {
                format!("unknown rule set `{name}` (known: canonical, attention)")
            })?);
        }
        vec![Rewriter::new(&sets).run(&mut graph)?]
    };
    verify(&graph)?;
    for r in &reports {
        print!("{r}");
    }
    let fused = graph.nodes_with_op("scaled_dot_product_attention").count();
    println!(
        "attention: {fused} fused node(s); softmax {before} -> {}",
        graph.nodes_with_op("softmax").count()
    );
    graphrw::onnx::save(&graph, output)?;
    println!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}
