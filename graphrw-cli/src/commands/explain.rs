//! `graphrw explain MODEL --rule NAME [--node N]`: why a built-in rule does or does not
//! match, at one node or as the rule's near misses over the whole model. With the name
//! of a rule set that is not also a rule's (`canonical`, a kernel's) and `--node`, why
//! no rule of the set fires at that node ([`graphrw::pattern::explain_rules`]).

use std::path::Path;
use std::process::ExitCode;

use graphrw::pattern::{explain_named, explain_rules, near_misses};
use graphrw::printer::{node_line, Names};
use graphrw::{rules, Graph, NodeId, Rule, Value};

use super::CmdResult;

/// The built-in rule sets searched for `--rule` and `--highlight`, by name.
const SETS: [&str; 2] = ["canonical", "attention"];

/// The built-in rule named `name`, or an error listing the names.
pub fn find_rule(name: &str) -> Result<&'static Rule, Box<dyn std::error::Error>> {
    let sets: Vec<&'static graphrw::RuleSet> =
        SETS.iter().filter_map(|s| rules::rule_set(s)).collect();
    if let Some(r) = sets.iter().find_map(|s| s.rule(name)) {
        return Ok(r);
    }
    let known: Vec<&str> = sets
        .iter()
        .flat_map(|s| s.rules.iter().map(|r| r.name))
        .collect();
    Err(format!(
        "unknown rule `{name}` (built-in rules: {})",
        super::name_list(&known, 120)
    )
    .into())
}

/// The node printed as `name` (`t41`, `c3`, an input's name) or with that ONNX name.
fn find_node(graph: &Graph, names: &Names, name: &str) -> Option<NodeId> {
    graph.node_ids().find(|&id| {
        let node = graph.node(id);
        (0..node.map_or(0, |n| n.outputs().len()) as u32)
            .any(|o| names.get(Value::new(id, o)) == name)
            || node.and_then(|n| n.name()) == Some(name)
    })
}

/// Explains `rule` at `node`, or lists its ten nearest misses.
pub fn run(model: &Path, rule: &str, node: Option<&str>) -> CmdResult {
    let graph = super::load(model)?;
    let names = Names::new(&graph);
    let is_rule = find_rule(rule).is_ok();
    if let (false, Some(set), Some(n)) = (is_rule, rules::rule_set(rule), node) {
        let id = find_node(&graph, &names, n)
            .ok_or_else(|| format!("no node printed as or named `{n}` (see `graphrw print`)"))?;
        println!("rule set `{}`:", set.name);
        println!("{}", explain_rules(&[set], &graph, id));
        return Ok(ExitCode::SUCCESS);
    }
    let rule = find_rule(rule)?;
    println!("rule `{}`:\n{}", rule.name, rule.pattern);
    match node {
        Some(n) => {
            let id = find_node(&graph, &names, n).ok_or_else(|| {
                format!("no node printed as or named `{n}` (see `graphrw print`)")
            })?;
            println!("at {}:", node_line(&graph, &names, id));
            println!("  {}", explain_named(rule.pattern, &graph, id, &names));
        }
        None => {
            let matches = rule.pattern.find(&graph).len();
            println!("{matches} match(es)");
            let misses = near_misses(rule.pattern, &graph);
            if misses.is_empty() && matches == 0 {
                let ops: Vec<String> = rule
                    .pattern
                    .anchors
                    .iter()
                    .map(|op| format!("`{}`", op.name))
                    .collect();
                println!(
                    "no candidate: no node has the op the pattern starts at ({})",
                    ops.join(" or ")
                );
            } else {
                println!("{} near miss(es), deepest first:", misses.len());
            }
            for why in misses.iter().take(10) {
                println!("  {}\n    {why}", node_line(&graph, &names, why.anchor));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
