//! `graphrw dot MODEL [-o FILE] [--highlight RULE]`: Graphviz export, optionally with
//! the nodes of every match of a built-in rule filled in.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use super::CmdResult;

/// Writes the DOT text to `output`, or to standard output.
pub fn run(model: &Path, output: Option<&Path>, highlight: Option<&str>) -> CmdResult {
    let graph = super::load(model)?;
    let mut marked = BTreeSet::new();
    if let Some(name) = highlight {
        let (rule, _) = super::explain::find_rule(name)?;
        let matches = rule.pattern.find(&graph);
        eprintln!("{}: {} match(es) highlighted", rule.name, matches.len());
        marked.extend(matches.iter().flat_map(|m| m.nodes.iter().copied()));
    }
    let text = graphrw::dot::to_dot(&graph, &marked);
    match output {
        Some(path) => {
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
