//! `graphrw.explain` and `graphrw.rules`: the coverage report of a model as plain
//! values, one rule's explanation as `graphrw explain --rule` prints it (graphrw-cli's
//! own text), and every built-in rule's name.

use graphrw::rules::{Coverage, NearMiss, Site};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::{commands, detached, Failure, Kind, Outcome, Source};

/// The failure of an explanation: an unknown rule or node is a bad argument, a
/// pipeline failure an optimisation error.
fn failure(e: commands::explain::ExplainError) -> Failure {
    match e {
        commands::explain::ExplainError::Unknown(m) => Failure::new(Kind::InvalidArgument, m),
        commands::explain::ExplainError::Pipeline(e) => Failure::new(Kind::Optimize, e),
    }
}

/// `graphrw explain MODEL --rule NAME [--node N]`'s text.
fn run_explain(src: &Source<'_>, rule: &str, node: Option<&str>) -> Outcome<String> {
    let graph = src.load()?;
    let shown = match src {
        Source::Path(p) => commands::short_path(p),
        Source::Bytes(_) => "MODEL".into(),
    };
    commands::explain::rule_text(graph, &shown, rule, node).map_err(failure)
}

/// Explains a built-in rule on a model (see `graphrw.explain`).
#[pyfunction]
#[pyo3(signature = (model, rule, node=None))]
pub(crate) fn explain(
    py: Python<'_>,
    model: &Bound<'_, PyAny>,
    rule: String,
    node: Option<String>,
) -> PyResult<String> {
    let src = Source::extract(model)?;
    detached(py, || run_explain(&src, &rule, node.as_deref()))
}

fn near_dict<'py>(py: Python<'py>, n: &NearMiss) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("rule", n.rule)?;
    d.set_item("pass", n.pass)?;
    d.set_item("anchor", &n.why.anchor_name)?;
    d.set_item("node", n.why.node_name.as_deref())?;
    d.set_item("position", &n.why.position)?;
    d.set_item("check", &n.why.check)?;
    d.set_item("message", &n.why.message)?;
    d.set_item("matched", n.why.matched)?;
    Ok(d)
}

fn site_dict<'py>(py: Python<'py>, s: &Site) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("node", &s.node)?;
    d.set_item("onnx_name", s.onnx_name.as_deref())?;
    d.set_item("op", s.op)?;
    d.set_item("pass", s.pass)?;
    d.set_item("fused_by", s.fused_by)?;
    d.set_item("rewritten_by", s.rewritten_by)?;
    let nearest = s.nearest.as_ref().map(|n| near_dict(py, n)).transpose()?;
    d.set_item("nearest", nearest)?;
    d.set_item("reason", s.reason())?;
    Ok(d)
}

/// The coverage report of a model (see `graphrw.explain`): `{"sites": [dict],
/// "text": str}`, each site's fields as `--json` writes them.
#[pyfunction]
pub(crate) fn coverage<'py>(
    py: Python<'py>,
    model: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let src = Source::extract(model)?;
    let (report, text): (Coverage, String) = detached(py, || {
        let graph = src.load()?;
        let report =
            graphrw::rules::coverage(&graph).map_err(|e| Failure::new(Kind::Optimize, e))?;
        let text = format!("{report}");
        Ok((report, text))
    })?;
    let sites = PyList::empty(py);
    for s in &report.sites {
        sites.append(site_dict(py, s)?)?;
    }
    let d = PyDict::new(py);
    d.set_item("sites", sites)?;
    d.set_item("text", text)?;
    Ok(d.into_any())
}

/// Every built-in rule: `(name, rule set, pass)`, as `graphrw explain --list-rules`
/// lists them.
#[pyfunction]
pub(crate) fn rules() -> Vec<(&'static str, String, &'static str)> {
    commands::explain::rules_list()
}
