//! `graphrw explain MODEL --json`: the coverage report ([`graphrw::rules::Coverage`])
//! as one JSON object, for tools:
//!
//! ```text
//! {"sites": [{"node": "t8", "onnx_name": "/attn/Softmax", "op": "softmax",
//!             "pass": "attention", "fused_by": "attention", "rewritten_by": null,
//!             "nearest": null, "reason": null}, ...],
//!  "summary": {"sites": 9, "fused": 7, "not_fused": 2,
//!              "fused_by_rule": {"attention": 2, ...},
//!              "not_fused_by_reason": {"`bias_gelu`: operand 1 of `mul`: expected `mul`": 2}}}
//! ```
//!
//! A `nearest` is `{"rule", "pass", "anchor", "node", "position", "check", "message",
//! "matched"}`: the rule, the pass whose graph its names are from, its anchor and the
//! node where its pattern stopped as the printer names them, the pattern position,
//! the failed check without the graph's names, and the sentence naming them.

use std::fmt::Write;

use graphrw::rules::{Coverage, NearMiss, Site};

/// `text` as a JSON string literal.
fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An optional string as JSON (`null` when absent).
fn opt(text: Option<&str>) -> String {
    text.map_or_else(|| "null".into(), string)
}

fn nearest(n: &NearMiss) -> String {
    format!(
        "{{\"rule\": {}, \"pass\": {}, \"anchor\": {}, \"node\": {}, \"position\": {}, \
         \"check\": {}, \"message\": {}, \"matched\": {}}}",
        string(n.rule),
        string(n.pass),
        string(&n.why.anchor_name),
        opt(n.why.node_name.as_deref()),
        string(&n.why.position),
        string(&n.why.check),
        string(&n.why.message),
        n.why.matched
    )
}

fn site(s: &Site) -> String {
    format!(
        "{{\"node\": {}, \"onnx_name\": {}, \"op\": {}, \"pass\": {}, \"fused_by\": {}, \
         \"rewritten_by\": {}, \"nearest\": {}, \"reason\": {}}}",
        string(&s.node),
        opt(s.onnx_name.as_deref()),
        string(s.op),
        string(s.pass),
        opt(s.fused_by),
        opt(s.rewritten_by),
        s.nearest.as_ref().map_or_else(|| "null".into(), nearest),
        opt(s.reason().as_deref())
    )
}

/// A map of counts as a JSON object.
fn counts<'a>(items: impl Iterator<Item = (&'a str, usize)>) -> String {
    let fields: Vec<String> = items.map(|(k, n)| format!("{}: {n}", string(k))).collect();
    format!("{{{}}}", fields.join(", "))
}

/// The report as JSON, one site a line.
pub fn to_json(report: &Coverage) -> String {
    let sites: Vec<String> = report.sites.iter().map(site).collect();
    let fused = report.fused();
    let by_rule = report.fused_by_rule();
    let by_reason = report.not_fused_by_reason();
    format!(
        "{{\"sites\": [\n  {}\n],\n\"summary\": {{\"sites\": {}, \"fused\": {fused}, \
         \"not_fused\": {}, \"fused_by_rule\": {}, \"not_fused_by_reason\": {}}}}}",
        sites.join(",\n  "),
        report.sites.len(),
        report.sites.len() - fused,
        counts(by_rule.iter().map(|(k, n)| (*k, *n))),
        counts(by_reason.iter().map(|(k, n)| (k.as_str(), *n)))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(opt(None), "null");
    }

    #[test]
    fn an_empty_report_is_an_object_with_a_summary() {
        let json = to_json(&Coverage::default());
        assert!(
            json.contains("\"summary\": {\"sites\": 0, \"fused\": 0"),
            "{json}"
        );
    }
}
