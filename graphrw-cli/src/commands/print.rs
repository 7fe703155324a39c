//! `graphrw print MODEL [--before PASS]`: the model as a program, as loaded or as a
//! pass of the pipeline sees it.

use std::path::Path;
use std::process::ExitCode;

use graphrw::rules;

use super::CmdResult;

/// Prints the program (the graph's `Display`); with `before`, after the pipeline's
/// passes up to the one named (`canonical`, `attention`, `norm-spellings`, `kernels`,
/// `unweighted-rms-norms`) or the one that first runs the rule so named, as that pass
/// sees it (the names `graphrw explain` gives).
pub fn run(model: &Path, before: Option<&str>) -> CmdResult {
    let mut graph = super::load(model)?;
    if let Some(name) = before {
        let passes = rules::rewrite_passes();
        let wanted = passes
            .iter()
            .find(|p| p.name.replace(' ', "-") == name || p.name == name)
            .or_else(|| passes.iter().find(|p| p.has_rule(name)))
            .ok_or_else(|| {
                let names: Vec<String> = passes.iter().map(|p| p.name.replace(' ', "-")).collect();
                format!(
                    "unknown pass or rule `{name}` (passes: {}; rules: graphrw explain --list-rules)",
                    names.join(", ")
                )
            })?;
        rules::run_until(&mut graph, |p| p.name == wanted.name)?;
    }
    print!("{graph}");
    Ok(ExitCode::SUCCESS)
}
