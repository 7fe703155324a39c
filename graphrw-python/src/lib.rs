//! `graphrw._native`: the Rust half of the `graphrw` Python package.
//!
//! The Python package (`python/graphrw/`) is the public API; this module gives it
//! plain values (bytes, strings, numbers, tuples) and raises the package's exceptions
//! (`graphrw._errors`) with the same one-line messages as the `graphrw` command. It
//! builds on graphrw's public API only ([`graphrw::onnx`], [`graphrw::rules`],
//! [`graphrw::exec`]), and `python -m graphrw` runs graphrw-cli's own subcommand code
//! (its library, `graphrw_cli::commands`), so the two print the same.
//!
//! Every entry point releases the GIL while it loads, optimises, saves or runs, and
//! catches a panic as a last resort (raised as `GraphrwError`), so nothing unwinds
//! into Python.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::Instant;

use graphrw::ir::sym::bounds::Bounds;
use graphrw::onnx::{SaveOptions, WeightLayout};
use graphrw::rewrite::Rewriter;
use graphrw::{rules, DType, Graph, Value};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

/// graphrw-cli's subcommands (`optimize`, `inspect`, `run`, `explain`) for
/// `python -m graphrw`: the CLI stays the one place their behaviour and output are
/// defined.
use graphrw_cli::commands;

mod arrays;
mod decode_loop;
mod explain;
mod meta;
mod session;

/// Which exception of `graphrw._errors` a failure raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The model could not be read.
    Load,
    /// The rewrite pipeline failed.
    Optimize,
    /// The model could not be written.
    Save,
    /// Planning or running failed.
    Run,
    /// An argument is wrong (unknown rule, node, dtype; inputs that do not fit).
    InvalidArgument,
    /// Anything else (a caught panic).
    Internal,
}

impl Kind {
    /// The exception class's name in `graphrw._errors`.
    fn class(self) -> &'static str {
        match self {
            Kind::Load => "LoadError",
            Kind::Optimize => "OptimizeError",
            Kind::Save => "SaveError",
            Kind::Run => "RunError",
            Kind::InvalidArgument => "InvalidArgument",
            Kind::Internal => "GraphrwError",
        }
    }
}

/// A failure on the Rust side: which exception, and its one-line message.
#[derive(Debug)]
struct Failure {
    kind: Kind,
    message: String,
}

impl Failure {
    fn new(kind: Kind, message: impl std::fmt::Display) -> Failure {
        Failure {
            kind,
            message: message.to_string(),
        }
    }

    /// The Python exception: the class from `graphrw._errors` (a `RuntimeError` if
    /// that module cannot be imported, which only a broken install does).
    fn into_pyerr(self, py: Python<'_>) -> PyErr {
        let class = py
            .import("graphrw._errors")
            .and_then(|m| m.getattr(self.kind.class()))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(ty) => PyErr::from_type(ty, self.message),
            Err(_) => pyo3::exceptions::PyRuntimeError::new_err(self.message),
        }
    }
}

type Outcome<T> = Result<T, Failure>;

/// Runs `f` with the GIL released, a panic turned into a `GraphrwError`.
fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> Outcome<T> + Send) -> PyResult<T> {
    let result = py.detach(|| {
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Failure::new(
                Kind::Internal,
                format!("internal error (a bug in graphrw, please report it): {what}"),
            ))
        })
    });
    result.map_err(|f| f.into_pyerr(py))
}

/// A model as Python gave it: a file (external data read from its folder) or the
/// bytes of a serialised `ModelProto`.
enum Source<'a> {
    Path(PathBuf),
    Bytes(&'a [u8]),
}

impl<'a> Source<'a> {
    /// The model as a log line names it: its path, or its size in bytes.
    fn describe(&self) -> String {
        match self {
            Source::Path(p) => p.display().to_string(),
            Source::Bytes(b) => format!("a model of {} bytes", b.len()),
        }
    }

    /// `bytes` (or `bytearray`-free `bytes` only) or a path (`str`, `os.PathLike`).
    fn extract(obj: &'a Bound<'_, PyAny>) -> PyResult<Source<'a>> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Source::Bytes(b.as_bytes()));
        }
        match obj.extract::<PathBuf>() {
            Ok(p) => Ok(Source::Path(p)),
            Err(_) => Err(Failure::new(
                Kind::InvalidArgument,
                format!(
                    "model: expected a path, bytes or an onnx.ModelProto, got {}",
                    obj.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_else(|_| "?".into())
                ),
            )
            .into_pyerr(obj.py())),
        }
    }

    /// Loads the graph (the error names the file, as the CLI's does).
    fn load(&self) -> Outcome<Graph> {
        match self {
            Source::Path(p) => commands::load(p).map_err(|e| Failure::new(Kind::Load, e)),
            Source::Bytes(b) => graphrw::onnx::load_bytes(b)
                .map_err(|e| Failure::new(Kind::Load, format!("model bytes: {e}"))),
        }
    }
}

/// What `optimize` did, as plain values for `graphrw.Report`.
struct OptimizeOutcome {
    /// Rewrites per rule.
    rule_counts: BTreeMap<String, usize>,
    /// `(rule, anchor, reason)` of each match whose replacement failed.
    skipped: Vec<(String, String, String)>,
    nodes_before: usize,
    nodes_after: usize,
    /// Nodes per fused op after the pass (`scaled_dot_product_attention`, `fused.*`).
    fused_nodes: BTreeMap<String, usize>,
    /// Attention nodes made causal (whole pipeline only).
    causal_masks: usize,
    /// The report as `graphrw optimize` prints it.
    text: String,
    /// The writer's summary line, when a file was written.
    saved: Option<String>,
    /// The optimised model, when asked for.
    model: Option<Vec<u8>>,
    /// Seconds spent loading, optimising and writing.
    seconds: f64,
}

/// The built-in generated kernels' names, as `rules` takes them.
fn kernel_names() -> Vec<&'static str> {
    graphrw::generated::builtin::ALL
        .iter()
        .filter_map(|k| k.op.name.strip_prefix("fused."))
        .collect()
}

/// Nodes per op for the ops the passes create.
fn fused_counts(graph: &Graph) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for op in graph
        .node_ids()
        .filter_map(|id| graph.node(id).map(|n| n.op_name()))
    {
        if op == "scaled_dot_product_attention" || op.starts_with("fused.") {
            *out.entry(op.to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// Options of [`optimize`] past the model.
struct OptimizeArgs {
    output: Option<PathBuf>,
    rules: Vec<String>,
    save: SaveOptions,
    want_bytes: bool,
}

/// `graphrw optimize`'s work, without printing: load, apply the rule sets, write.
/// Logs `message` at INFO on Python's `graphrw` logger (`logging.getLogger("graphrw")`),
/// from a thread that may not hold the GIL; a logging failure is ignored.
fn log_info(message: &str) {
    Python::attach(|py| {
        let _ = py
            .import("logging")
            .and_then(|logging| logging.call_method1("getLogger", ("graphrw",)))
            .and_then(|logger| logger.call_method1("info", ("%s", message)));
    });
}

fn run_optimize(src: &Source<'_>, args: &OptimizeArgs) -> Outcome<OptimizeOutcome> {
    let start = Instant::now();
    let names = &args.rules;
    let whole = names.is_empty() || *names == ["all"] || *names == ["default"];
    if whole {
        // Builds the passes' decision trees while the model loads, as the CLI does.
        std::thread::spawn(rules::prepare);
    }
    log_info(&format!("optimize: loading {}", src.describe()));
    let loading = Instant::now();
    let mut graph = src.load()?;
    log_info(&format!(
        "optimize: loaded in {:.1} ms, {} nodes",
        loading.elapsed().as_secs_f64() * 1e3,
        graph.node_count()
    ));
    let mut rule_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut text = String::new();
    let nodes_before = graph.node_count();
    let mut causal_masks = 0;
    let mut add = |r: &graphrw::rewrite::Report| {
        for (rule, n) in r.counts() {
            *rule_counts.entry(rule.to_string()).or_insert(0) += n;
        }
        for s in &r.skipped {
            skipped.push((s.rule.to_string(), s.at.clone(), s.reason.clone()));
        }
    };
    if whole {
        let verify = graphrw::rewrite::Verify::default();
        let done = rules::optimize_observed(&mut graph, verify, &mut |p| {
            log_info(&format!("optimize: {p}"))
        })
        .map_err(|e| Failure::new(Kind::Optimize, e))?;
        for r in done.reports() {
            add(r);
            text.push_str(&r.to_string());
        }
        text.push_str(&format!("{done}\n"));
        causal_masks = done.causal.converted;
    } else {
        let mut sets = Vec::new();
        for name in names {
            match name.as_str() {
                "kernels" => sets.extend(graphrw::generated::builtin_rules()),
                _ => sets.push(rules::rule_set(name).ok_or_else(|| {
                    Failure::new(
                        Kind::InvalidArgument,
                        format!(
                            "unknown rule set `{name}` (known: all, canonical, attention, \
                             kernels, or one kernel: {})",
                            commands::name_list(&kernel_names(), 80)
                        ),
                    )
                })?),
            }
        }
        let report = Rewriter::new(&sets)
            .run(&mut graph)
            .map_err(|e| Failure::new(Kind::Optimize, e))?;
        add(&report);
        text.push_str(&report.to_string());
        text.push_str(&format!(
            "nodes: {nodes_before} -> {}\n",
            graph.node_count()
        ));
    }
    let saved = match &args.output {
        Some(path) => {
            let saving = Instant::now();
            let saved = graphrw::onnx::save_with(&graph, path, &args.save)
                .map_err(|e| Failure::new(Kind::Save, e))?;
            log_info(&format!(
                "optimize: saved in {:.1} ms: {saved}",
                saving.elapsed().as_secs_f64() * 1e3
            ));
            text.push_str(&format!("{saved}\n"));
            Some(saved.to_string())
        }
        None => None,
    };
    let model = if args.want_bytes {
        Some(graphrw::onnx::to_bytes(&graph).map_err(|e| Failure::new(Kind::Save, e))?)
    } else {
        None
    };
    Ok(OptimizeOutcome {
        rule_counts,
        skipped,
        nodes_before,
        nodes_after: graph.node_count(),
        fused_nodes: fused_counts(&graph),
        causal_masks,
        text,
        saved,
        model,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The weight layout named by the Python wrapper: `keep`, `external` or `single`.
fn layout(name: &str) -> Outcome<WeightLayout> {
    match name {
        "keep" => Ok(WeightLayout::Keep),
        "external" => Ok(WeightLayout::External),
        "single" => Ok(WeightLayout::SingleFile),
        _ => Err(Failure::new(
            Kind::InvalidArgument,
            format!("unknown weight layout `{name}` (keep, external or single)"),
        )),
    }
}

/// Optimises a model (see `graphrw.optimize`); returns the report's fields as a dict.
#[pyfunction]
#[pyo3(signature = (model, output=None, rules=Vec::new(), layout="keep", data_file=None, want_bytes=false, assume=Vec::new()))]
#[allow(clippy::too_many_arguments)]
fn optimize<'py>(
    py: Python<'py>,
    model: &Bound<'py, PyAny>,
    output: Option<PathBuf>,
    rules: Vec<String>,
    layout: &str,
    data_file: Option<String>,
    want_bytes: bool,
    assume: Vec<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let src = Source::extract(model)?;
    let save = SaveOptions {
        layout: self::layout(layout).map_err(|f| f.into_pyerr(py))?,
        data_file,
        ..SaveOptions::default()
    };
    let args = OptimizeArgs {
        output,
        rules,
        save,
        want_bytes,
    };
    let bounds = bounds_of(&assume).map_err(|f| f.into_pyerr(py))?;
    let done = detached(py, || assuming(&bounds, || run_optimize(&src, &args)))?;
    let dict = pyo3::types::PyDict::new(py);
    dict.set_item("rule_counts", done.rule_counts)?;
    dict.set_item("skipped", done.skipped)?;
    dict.set_item("nodes_before", done.nodes_before)?;
    dict.set_item("nodes_after", done.nodes_after)?;
    dict.set_item("fused_nodes", done.fused_nodes)?;
    dict.set_item("causal_masks", done.causal_masks)?;
    dict.set_item("text", done.text)?;
    dict.set_item("saved", done.saved)?;
    dict.set_item("model", done.model.map(|b| PyBytes::new(py, &b)))?;
    dict.set_item("seconds", done.seconds)?;
    Ok(dict.into_any())
}

/// The lower bounds `texts` give (`["seq>=1", "past>=0,batch>=1"]`), merged.
fn bounds_of(texts: &[String]) -> Outcome<Bounds> {
    texts.iter().try_fold(Bounds::new(), |all, text| {
        Bounds::parse(text)
            .map(|b| all.merge(&b))
            .map_err(|e| Failure::new(Kind::InvalidArgument, format!("assume: {e}")))
    })
}

/// `f` with `bounds` in force: every model it loads holds them (`--assume` of the CLI).
fn assuming<T>(bounds: &Bounds, f: impl FnOnce() -> Outcome<T>) -> Outcome<T> {
    graphrw::ir::sym::in_force::with(bounds, f).0
}

/// The numpy name of a dtype (`float32`, `bfloat16`, `bool`, ...).
fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I64 => "int64",
        DType::I32 => "int32",
        DType::Bool => "bool",
        DType::U8 => "uint8",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
    }
}

/// The dtype of a numpy name, as [`numpy_name`] writes them.
fn from_numpy_name(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|&d| numpy_name(d) == name)
}

/// onnxruntime's type string of a dtype (`tensor(float)`).
fn ort_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "tensor(float)",
        DType::F64 => "tensor(double)",
        DType::F16 => "tensor(float16)",
        DType::BF16 => "tensor(bfloat16)",
        DType::I64 => "tensor(int64)",
        DType::I32 => "tensor(int32)",
        DType::Bool => "tensor(bool)",
        DType::U8 => "tensor(uint8)",
        DType::I8 => "tensor(int8)",
        DType::I16 => "tensor(int16)",
        DType::U16 => "tensor(uint16)",
        DType::U32 => "tensor(uint32)",
        DType::U64 => "tensor(uint64)",
    }
}

/// A graph input or output as `get_inputs()` shows it: name, numpy dtype name,
/// onnxruntime type string, and dims (a number, or a symbolic dim's name).
type IoInfo = (String, &'static str, &'static str, Vec<String>);

/// The description of the graph's value `v`, named `name`.
fn io_info(graph: &Graph, name: &str, v: Value) -> Outcome<IoInfo> {
    let meta = graph.meta(v).map_err(|e| Failure::new(Kind::Load, e))?;
    Ok((
        name.to_string(),
        numpy_name(meta.dtype),
        ort_type(meta.dtype),
        meta.shape.dims().iter().map(|d| d.to_string()).collect(),
    ))
}

/// The `graphrw` command (`graphrw_cli::cli`) on `argv` (the program's name first),
/// with the GIL released: the wheel's `graphrw` console script and `python -m graphrw`.
/// Its exit code; it prints what the command prints (a panic is a `GraphrwError`).
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> PyResult<u8> {
    detached(py, || Ok(graphrw_cli::cli::main_with(argv)))
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(optimize, m)?)?;
    m.add_function(wrap_pyfunction!(explain::explain, m)?)?;
    m.add_function(wrap_pyfunction!(explain::coverage, m)?)?;
    m.add_function(wrap_pyfunction!(explain::rules, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(session::model_meta, m)?)?;
    m.add_function(wrap_pyfunction!(session::has_cuda, m)?)?;
    m.add_class::<session::Session>()?;
    m.add_class::<session::Outputs>()?;
    m.add_class::<arrays::Array>()?;
    m.add_class::<decode_loop::Loop>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
