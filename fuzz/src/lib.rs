//! The checks the fuzz targets run on one input, kept apart from libFuzzer so a test
//! can replay the regression seeds with `cargo test` in this folder.
//!
//! [`pipeline`] is the oracle: what loads must verify; every rule set either fails
//! with an error or leaves a graph that verifies; that graph saves, and what it saves
//! loads again and verifies. Anything else panics, which the fuzzer reports.

use graphrw::rewrite::Rewriter;
use graphrw::{onnx, rules, verify, Graph};

/// The rule sets `graphrw optimize --rules` offers, besides `all`: `canonical`,
/// `attention`, `kernels` (every generated kernel) and each generated kernel alone.
fn rule_sets() -> Vec<(String, Vec<&'static graphrw::RuleSet>)> {
    let mut sets = vec![
        ("canonical".to_string(), vec![&rules::CANONICAL]),
        ("attention".to_string(), vec![&rules::ATTENTION]),
        ("kernels".to_string(), graphrw::generated::builtin_rules()),
    ];
    for k in graphrw::generated::builtin::ALL {
        if let Some(name) = k.op.name.strip_prefix("fused.") {
            sets.push((name.to_string(), vec![k.rules]));
        }
    }
    sets
}

/// Saves `graph`, loads the bytes again and verifies the result; panics (the fuzzer's
/// finding) when a graph that verified cannot make the round trip.
fn roundtrip(graph: &Graph, step: &str) {
    let bytes = match onnx::to_bytes(graph) {
        Ok(b) => b,
        // The one refusal save may make of a graph that loaded: an op read at an old
        // opset whose meaning changed since, with no upgrade to the opset graphrw
        // writes (refused at save, not at load, so that `inspect` and `run` still work).
        Err(e) if e.to_string().contains("onnx.version_converter") => {
            short_first_line(step, &e.to_string());
            return;
        }
        Err(e) => panic!("{step}: a verified graph failed to save: {e}"),
    };
    match onnx::load_bytes(&bytes) {
        Ok(again) => {
            if let Err(e) = verify(&again) {
                panic!("{step}: reloaded graph fails the verifier: {e}");
            }
        }
        Err(e) => panic!("{step}: what graphrw saved does not load again: {e}"),
    }
}

/// Checks that an error message's first line is at most 200 characters.
fn short_first_line(step: &str, message: &str) {
    let first = message.lines().next().unwrap_or("");
    assert!(
        first.chars().count() <= 200,
        "{step}: error's first line is {} chars: {first}",
        first.chars().count()
    );
}

/// Load, verify, then for `all` and every named rule set: optimise a copy, verify,
/// save, load again and verify.
pub fn pipeline(data: &[u8]) {
    let graph = match onnx::load_bytes(data) {
        Ok(g) => g,
        Err(e) => {
            short_first_line("load", &e.to_string());
            return;
        }
    };
    if let Err(e) = verify(&graph) {
        panic!("load: a loaded graph fails the verifier: {e}");
    }
    let _ = graph.to_string();
    roundtrip(&graph, "load");

    let mut all = graph.clone();
    match rules::optimize(&mut all) {
        Ok(_) => {
            if let Err(e) = verify(&all) {
                panic!("optimize(all): result fails the verifier: {e}");
            }
            roundtrip(&all, "optimize(all)");
        }
        Err(e) => short_first_line("optimize(all)", &e.to_string()),
    }
    for (name, sets) in rule_sets() {
        let mut g = graph.clone();
        match Rewriter::new(&sets).run(&mut g) {
            Ok(_) => {
                if let Err(e) = verify(&g) {
                    panic!("optimize({name}): result fails the verifier: {e}");
                }
                roundtrip(&g, &format!("optimize({name})"));
            }
            Err(e) => short_first_line(&format!("optimize({name})"), &e.to_string()),
        }
    }
}
