//! `graphrw dot MODEL [-o FILE]`: Graphviz export.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use super::CmdResult;

/// Writes the DOT text to `output`, or to standard output.
pub fn run(model: &Path, output: Option<&Path>) -> CmdResult {
    let graph = super::load(model)?;
    let text = graphrw::dot::to_dot(&graph, &BTreeSet::new());
    match output {
        Some(path) => {
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
