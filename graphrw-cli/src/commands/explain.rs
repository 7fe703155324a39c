//! `graphrw explain`: which sites of a model fused and why the others did not
//! (`graphrw explain MODEL`, [`graphrw::rules::coverage()`]; `--json` for tools); why one
//! built-in rule does or does not match (`--rule NAME [--node N]`), on the graph as the
//! pipeline has it when that rule's pass runs; and every rule's name
//! (`--list-rules`). With the name of a rule set that is not also a rule's
//! (`canonical`, a kernel's) and `--node`, why no rule of the set fires at that node
//! ([`graphrw::pattern::explain_rules`]).

use std::fmt::Write;
use std::path::Path;
use std::process::ExitCode;

use graphrw::pattern::{explain_named, explain_rules, near_misses};
use graphrw::printer::{node_line, Names};
use graphrw::rules::{self, OptimizeError, RewritePass};
use graphrw::{Graph, NodeId, Rule, RuleSet, Value};

use super::CmdResult;

/// Why an explanation could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// An unknown rule or node (the message lists what there is, or says where).
    #[error("{0}")]
    Unknown(String),
    /// The pipeline failed before the rule's pass.
    #[error(transparent)]
    Pipeline(#[from] OptimizeError),
}

/// The built-in rule named `name` and the first pipeline pass that runs it, or an error
/// listing the names.
pub fn find_rule(name: &str) -> Result<(&'static Rule, RewritePass), ExplainError> {
    let passes = rules::rewrite_passes();
    for pass in &passes {
        if let Some(rule) = pass.sets.iter().find_map(|s| s.rule(name)) {
            return Ok((rule, pass.clone()));
        }
    }
    let known: Vec<&str> = all_rules(&passes).iter().map(|(r, _, _)| r.name).collect();
    Err(ExplainError::Unknown(format!(
        "unknown rule `{name}` (built-in rules: {}; `graphrw explain --list-rules` lists them all)",
        super::name_list(&known, 80)
    )))
}

/// A built-in rule set's name as `graphrw optimize --rules` takes it (`canonical`,
/// `attention`, `norms`, a kernel's `swiglu`); the unweighted RMS norm's set, which
/// `--rules` does not take, by its lower-cased name.
fn set_label(set: &'static RuleSet) -> String {
    let named = ["canonical", "attention", "norms"]
        .into_iter()
        .find(|n| rules::rule_set(n).is_some_and(|s| std::ptr::eq(s, set)));
    if let Some(n) = named {
        return n.to_string();
    }
    graphrw::generated::builtin::ALL
        .iter()
        .find(|k| std::ptr::eq(k.rules, set))
        .and_then(|k| k.op.name.strip_prefix("fused."))
        .map_or_else(|| set.name.to_lowercase(), str::to_string)
}

/// Every built-in rule once, with its rule set and the first pass that runs it, in
/// pipeline order.
fn all_rules(passes: &[RewritePass]) -> Vec<(&'static Rule, String, &'static str)> {
    let mut out: Vec<(&'static Rule, String, &'static str)> = Vec::new();
    for pass in passes {
        for &set in &pass.sets {
            for &rule in set.rules {
                if !out.iter().any(|(r, _, _)| std::ptr::eq(*r, rule)) {
                    out.push((rule, set_label(set), pass.name));
                }
            }
        }
    }
    out
}

/// The text of `graphrw explain --list-rules`: every built-in rule, the rule set it
/// belongs to and the pass that runs it first, one a line in pipeline order.
pub fn rules_text() -> String {
    let passes = rules::rewrite_passes();
    let all = all_rules(&passes);
    let width = all.iter().map(|(r, _, _)| r.name.len()).max().unwrap_or(0);
    let mut out = format!("{} built-in rules (rule, set, pass):\n", all.len());
    for (rule, set, pass) in all {
        let _ = writeln!(out, "  {:<width$}  {set:<20} {pass}", rule.name);
    }
    out.push_str(
        "explain one on a model: graphrw explain MODEL --rule NAME [--node N]; \
         every site of a model: graphrw explain MODEL\n",
    );
    out
}

/// The rules of `graphrw explain --list-rules`: (rule, rule set, pass).
pub fn rules_list() -> Vec<(&'static str, String, &'static str)> {
    all_rules(&rules::rewrite_passes())
        .into_iter()
        .map(|(r, s, p)| (r.name, s, p))
        .collect()
}

/// The node printed as `name` (`t41`, `c3`, an input's name) or with that ONNX name.
pub fn find_node(graph: &Graph, names: &Names, name: &str) -> Option<NodeId> {
    graph.node_ids().find(|&id| {
        let node = graph.node(id);
        (0..node.map_or(0, |n| n.outputs().len()) as u32)
            .any(|o| names.get(Value::new(id, o)) == name)
            || node.and_then(|n| n.name()) == Some(name)
    })
}

/// Runs the pipeline on `graph` up to `pass` (the graph that pass sees); the line
/// saying so.
fn to_pass(graph: &mut Graph, model: &str, pass: &RewritePass) -> Result<String, ExplainError> {
    let before = graph.node_count();
    rules::run_until(graph, |p| p.name == pass.name)?;
    Ok(format!(
        "on the graph as the `{}` pass sees it ({before} nodes loaded, {} now; \
         `graphrw print {model} --before {}` prints it)\n",
        pass.name,
        graph.node_count(),
        pass.name.replace(' ', "-")
    ))
}

/// The unknown-node error, naming the pass whose graph was searched.
fn no_node(n: &str, model: &str, pass: &str) -> ExplainError {
    ExplainError::Unknown(format!(
        "no node printed as or named `{n}` in the graph the `{pass}` pass sees \
         (see `graphrw print {model} --before {}`)",
        pass.replace(' ', "-")
    ))
}

/// `graphrw explain MODEL --rule NAME [--node N]`'s text, on `graph` as loaded: the
/// pipeline runs up to the rule's pass first. `model` is how its hints name the model.
pub fn rule_text(
    mut graph: Graph,
    model: &str,
    rule: &str,
    node: Option<&str>,
) -> Result<String, ExplainError> {
    let found = find_rule(rule);
    let passes = rules::rewrite_passes();
    let set_pass = passes
        .iter()
        .find(|p| p.sets.iter().any(|s| set_label(s) == rule));
    if let (Err(_), Some(pass), Some(n)) = (&found, set_pass, node) {
        let mut out = format!("rule set `{rule}`:\n");
        out.push_str(&to_pass(&mut graph, model, pass)?);
        let names = Names::new(&graph);
        let id = find_node(&graph, &names, n).ok_or_else(|| no_node(n, model, pass.name))?;
        let set = pass
            .sets
            .iter()
            .find(|s| set_label(s) == rule)
            .copied()
            .ok_or_else(|| no_node(n, model, pass.name))?;
        let _ = writeln!(out, "{}", explain_rules(&[set], &graph, id));
        return Ok(out);
    }
    let (rule, pass) = found?;
    let mut out = format!("rule `{}`:\n{}\n", rule.name, rule.pattern);
    out.push_str(&to_pass(&mut graph, model, &pass)?);
    let names = Names::new(&graph);
    match node {
        Some(n) => {
            let id = find_node(&graph, &names, n).ok_or_else(|| no_node(n, model, pass.name))?;
            let _ = writeln!(out, "at {}:", node_line(&graph, &names, id));
            let _ = writeln!(out, "  {}", explain_named(rule.pattern, &graph, id, &names));
        }
        None => {
            let matches = rule.pattern.find(&graph).len();
            let _ = writeln!(out, "{matches} match(es)");
            let misses = near_misses(rule.pattern, &graph);
            if misses.is_empty() && matches == 0 {
                let ops: Vec<String> = rule
                    .pattern
                    .anchors
                    .iter()
                    .map(|op| format!("`{}`", op.name))
                    .collect();
                let _ = writeln!(
                    out,
                    "no candidate: no node has the op the pattern starts at ({})",
                    ops.join(" or ")
                );
            } else {
                let _ = writeln!(out, "{} near miss(es), deepest first:", misses.len());
            }
            for why in misses.iter().take(10) {
                let _ = writeln!(
                    out,
                    "  {}\n    {why}",
                    node_line(&graph, &names, why.anchor)
                );
            }
            if let Some(first) = misses.first() {
                let _ = writeln!(
                    out,
                    "one node: graphrw explain {model} --rule {} --node {}",
                    rule.name, first.anchor_name
                );
            }
        }
    }
    Ok(out)
}

/// The line after a coverage report that says how to look at its first miss closer.
pub fn coverage_hint(report: &rules::Coverage, model: &str) -> String {
    match report.sites.iter().find_map(|s| s.nearest.as_ref()) {
        Some(n) => format!(
            "one miss in full: graphrw explain {model} --rule {} --node {}\n",
            n.rule, n.why.anchor_name
        ),
        None => String::new(),
    }
}

/// Runs `graphrw explain`: the rule list, one rule's explanation, or the model's
/// coverage (as text or JSON).
pub fn run(
    model: Option<&Path>,
    rule: Option<&str>,
    node: Option<&str>,
    list_rules: bool,
    json: bool,
) -> CmdResult {
    if list_rules {
        print!("{}", rules_text());
        return Ok(ExitCode::SUCCESS);
    }
    let model = model.ok_or("a model is required (graphrw explain MODEL [--rule NAME])")?;
    let graph = super::load(model)?;
    let shown = super::short_path(model);
    match rule {
        Some(rule) => print!("{}", rule_text(graph, &shown, rule, node)?),
        None if node.is_some() => {
            return Err("--node needs --rule (graphrw explain MODEL --rule NAME --node N)".into())
        }
        None => {
            let report = rules::coverage(&graph)?;
            if json {
                println!("{}", super::coverage_json::to_json(&report));
            } else {
                println!("{report}");
                print!("{}", coverage_hint(&report, &shown));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
