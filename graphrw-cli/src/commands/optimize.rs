//! `graphrw optimize MODEL -o OUT [--rules NAME...] [--single-file | --external-data]
//! [--data-file NAME]`: apply rule sets, report what fired, write the optimised model
//! as ONNX.
//!
//! External data in, external data out: the input's weights are memory-mapped when it
//! is loaded, the rules read only the small constants they inspect, and the writer
//! copies unchanged weights range by range into `OUT.data` (see
//! [`graphrw::onnx::external`]); a model past protobuf's 2 GiB limit is refused in
//! the single-file layout rather than written corrupt.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use graphrw::onnx::SaveOptions;
use graphrw::rewrite::Rewriter;
use graphrw::rules;

use super::CmdResult;

/// Rule sets by name, in the order given; with none (or `all`) runs the whole pipeline
/// ([`rules::optimize`]: attention fusion, causal masks, generated fused kernels); the
/// result is written with `save`'s weight layout.
pub fn run(model: &Path, output: &Path, names: &[String], save: &SaveOptions) -> CmdResult {
    let whole_pipeline = names.is_empty() || names == ["all"];
    if whole_pipeline {
        // The passes' decision trees are built on a second thread while the model
        // loads (see `rules::prepare`).
        std::thread::spawn(rules::prepare);
    }
    // On a terminal, each stage as it finishes (on stderr: stdout is the report).
    let progress = std::io::stderr().is_terminal();
    let stage = |what: &dyn std::fmt::Display| {
        if progress {
            eprintln!("  .. {what}");
        }
    };
    let t = Instant::now();
    let mut graph = super::load(model)?;
    stage(&format_args!(
        "loaded in {:.1} ms, {} nodes",
        t.elapsed().as_secs_f64() * 1e3,
        graph.node_count()
    ));
    if whole_pipeline {
        let verify = graphrw::rewrite::Verify::default();
        let done = rules::optimize_observed(&mut graph, verify, &mut |p| stage(p))?;
        for r in done.reports() {
            print!("{r}");
        }
        println!("{done}");
    } else {
        let before = graph.node_count();
        let mut sets = Vec::new();
        for name in names {
            match name.as_str() {
                "kernels" => sets.extend(graphrw::generated::builtin_rules()),
                _ => sets.push(rules::rule_set(name).ok_or_else(|| {
                    format!(
                        "unknown rule set `{name}` (known: all, canonical, attention, kernels, \
                         or one kernel: {})",
                        super::name_list(&kernel_names(), 80)
                    )
                })?),
            }
        }
        let report = Rewriter::new(&sets).run(&mut graph)?;
        print!("{report}");
        println!("nodes: {before} -> {}", graph.node_count());
    }
    // Saving verifies the graph before it writes anything (once: a second check
    // here would cost as much again on a big graph).
    let saved = graphrw::onnx::save_with(&graph, output, save)?;
    println!("{saved}");
    Ok(ExitCode::SUCCESS)
}

/// The built-in generated kernels' names, as `--rules` takes them.
fn kernel_names() -> Vec<&'static str> {
    graphrw::generated::builtin::ALL
        .iter()
        .filter_map(|k| k.op.name.strip_prefix("fused."))
        .collect()
}
