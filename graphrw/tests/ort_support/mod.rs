//! Running saved models in onnxruntime from the tests: a Python with onnxruntime (or
//! a printed `SKIPPED`, and a failure under `CI=true`, as `.ci/run` provides one through
//! `GRAPHRW_PYTHON`), and many (model, inputs) cases run in one Python process, their
//! outputs read back with the dtypes onnxruntime gave them.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use graphrw::exec::{plan, Executor};
use graphrw::onnx::{to_model, TestSet};
use graphrw::{DType, Graph, Tensor};
use graphrw_kernels::testing::compare;

/// Loads the model `bytes` (named `name` in messages), checks that no node passed
/// through unread, runs it on the reference stack and, optimised, on the default stack,
/// and checks the two agree. Returns the optimised graph and the reference outputs.
pub fn load_and_run_both_ways(name: &str, bytes: &[u8], fed: &[Tensor]) -> (Graph, Vec<Tensor>) {
    use graphrw::exec::{default_stack, reference_stack};
    let g = graphrw::onnx::load_bytes(bytes).unwrap_or_else(|e| panic!("{name}: load: {e}"));
    assert!(
        !g.op_counts().contains_key("opaque"),
        "{name}: the node passed through unread: {:?}",
        g.op_counts()
    );
    let (reference, _) = plan(&g, &reference_stack())
        .and_then(|p| p.run(fed))
        .unwrap_or_else(|e| panic!("{name}: reference stack: {e}"));
    let mut optimised = g;
    graphrw::rules::optimize(&mut optimised).unwrap_or_else(|e| panic!("{name}: optimize: {e}"));
    let (fast, _) = plan(&optimised, &default_stack())
        .and_then(|p| p.run(fed))
        .unwrap_or_else(|e| panic!("{name}: default stack: {e}"));
    same_all(&fast, &reference)
        .unwrap_or_else(|e| panic!("{name}: optimised against the reference: {e}"));
    (optimised, reference)
}

/// A Python with onnxruntime and numpy: `GRAPHRW_PYTHON` (CI sets it), else the
/// workspace's `.venv/bin/python` (what `.ci/run` makes), else `python3`; or why none.
pub fn python() -> Result<String, String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("GRAPHRW_PYTHON") {
        candidates.push(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.exists() {
        candidates.push(venv.display().to_string());
    }
    candidates.push("python3".into());
    for p in &candidates {
        let probe = Command::new(p)
            .args(["-c", "import onnxruntime, numpy"])
            .output();
        if probe.is_ok_and(|o| o.status.success()) {
            return Ok(p.clone());
        }
    }
    Err(format!(
        "no Python with onnxruntime and numpy among {candidates:?} (set GRAPHRW_PYTHON)"
    ))
}

/// [`python`], or `None` after printing `SKIPPED: <why>: <what>` (what is not checked)
/// — except under `CI=true`, where a missing onnxruntime fails the test.
pub fn python_or_skip(what: &str) -> Option<String> {
    match python() {
        Ok(p) => Some(p),
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true: onnxruntime is required: {why}")
        }
        Err(why) => {
            println!("SKIPPED: {why}: {what}");
            None
        }
    }
}

/// One model run in onnxruntime: its bytes and its inputs, in the order of the
/// model's graph inputs.
pub struct Case {
    /// Shown in messages.
    pub name: String,
    /// The saved model.
    pub model: Vec<u8>,
    /// One tensor per graph input, in order.
    pub inputs: Vec<Tensor>,
}

/// The numpy name of a dtype (bf16 has none).
fn numpy_name(dt: DType) -> &'static str {
    match dt {
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

/// Reads every case's folder, writes its outputs (`out{k}.bin` with `outs.txt`
/// holding `dtype:d0,d1` per line) or `error.txt` (onnxruntime's message on one line,
/// its middle cut where it is long: the end says what failed).
const SCRIPT: &str = r#"
import os, sys
import numpy as np, onnxruntime as ort
root = sys.argv[1]
opts = ort.SessionOptions()
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
opts.log_severity_level = 4
for line in open(os.path.join(root, "manifest.txt")):
    parts = line.rstrip("\n").split("|")
    d = os.path.join(root, parts[0])
    try:
        s = ort.InferenceSession(os.path.join(d, "model.onnx"), opts, providers=["CPUExecutionProvider"])
        feeds = {}
        for j, (meta, spec) in enumerate(zip(s.get_inputs(), parts[1:])):
            dt, dims = spec.split(":")
            shape = [int(x) for x in dims.split(",") if x]
            a = np.fromfile(os.path.join(d, "in%d.bin" % j), dtype=dt).reshape(shape)
            feeds[meta.name] = a
        outs = s.run(None, feeds)
        with open(os.path.join(d, "outs.txt"), "w") as f:
            for k, y in enumerate(outs):
                y = np.ascontiguousarray(y)
                y.tofile(os.path.join(d, "out%d.bin" % k))
                f.write("%s:%s\n" % (y.dtype.name, ",".join(str(n) for n in y.shape)))
    except Exception as e:
        msg = " ".join(str(e).split())
        if len(msg) > 600:
            msg = msg[:200] + " ... " + msg[-350:]
        with open(os.path.join(d, "error.txt"), "w") as f:
            f.write(msg)
"#;

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// Runs every case in onnxruntime (one Python process, graph optimisations off so
/// that each op runs as written): per case its outputs, or onnxruntime's error.
pub fn run_all(python: &str, cases: &[Case]) -> Vec<Result<Vec<Tensor>, String>> {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "graphrw-ort-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let result = run_in(python, &dir, cases);
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(r) => r,
        Err(e) => cases.iter().map(|_| Err(e.clone())).collect(),
    }
}

fn run_in(
    python: &str,
    dir: &Path,
    cases: &[Case],
) -> Result<Vec<Result<Vec<Tensor>, String>>, String> {
    let io = |e: std::io::Error| e.to_string();
    let mut manifest = String::new();
    for (i, c) in cases.iter().enumerate() {
        let d = dir.join(i.to_string());
        std::fs::create_dir_all(&d).map_err(io)?;
        std::fs::write(d.join("model.onnx"), &c.model).map_err(io)?;
        let _ = write!(manifest, "{i}");
        for (j, t) in c.inputs.iter().enumerate() {
            std::fs::write(d.join(format!("in{j}.bin")), t.to_raw_bytes()).map_err(io)?;
            let dims: Vec<String> = t.shape().iter().map(|n| n.to_string()).collect();
            let _ = write!(manifest, "|{}:{}", numpy_name(t.dtype()), dims.join(","));
        }
        manifest.push('\n');
    }
    std::fs::write(dir.join("manifest.txt"), manifest).map_err(io)?;
    let out = Command::new(python)
        .args(["-c", SCRIPT])
        .arg(dir)
        .output()
        .map_err(io)?;
    if !out.status.success() {
        return Err(format!(
            "the onnxruntime script failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((0..cases.len())
        .map(|i| read_outputs(&dir.join(i.to_string())))
        .collect())
}

fn read_outputs(d: &Path) -> Result<Vec<Tensor>, String> {
    if let Ok(e) = std::fs::read_to_string(d.join("error.txt")) {
        return Err(format!("onnxruntime: {e}"));
    }
    let list = std::fs::read_to_string(d.join("outs.txt")).map_err(|e| e.to_string())?;
    let mut outs = Vec::new();
    for (k, line) in list.lines().enumerate() {
        let (dt, dims) = line.split_once(':').ok_or("bad outs.txt")?;
        let dtype = DType::from_name(dt)
            .ok_or_else(|| format!("output {k}: onnxruntime gave dtype {dt}"))?;
        let shape: Vec<usize> = dims
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| format!("bad dim {s}")))
            .collect::<Result<_, String>>()?;
        let bytes = std::fs::read(d.join(format!("out{k}.bin"))).map_err(|e| e.to_string())?;
        outs.push(Tensor::from_raw_bytes(dtype, &shape, &bytes).map_err(|e| e.to_string())?);
    }
    Ok(outs)
}

/// `got` has `want`'s dtype and shape and its values: integers and bools exactly,
/// floats within `1e-4` plus `1e-3` of the largest finite magnitude (NaN and the
/// infinities where `want` has them).
pub fn same(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "dtype {} where {} is expected",
            got.dtype(),
            want.dtype()
        ));
    }
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?} where {:?} is expected",
            got.shape(),
            want.shape()
        ));
    }
    if !want.dtype().is_float() {
        // Exactly, element by element in their bytes (a u64 past 2^53 is not exact in
        // f64).
        let width = want.dtype().size_in_bytes();
        let (gb, wb) = (got.to_raw_bytes(), want.to_raw_bytes());
        return match gb
            .chunks(width)
            .zip(wb.chunks(width))
            .position(|(a, b)| a != b)
        {
            None => Ok(()),
            Some(i) => Err(format!(
                "element {i} is {:?} where {:?} is expected",
                Tensor::from_raw_bytes(want.dtype(), &[1], &gb[i * width..(i + 1) * width]),
                Tensor::from_raw_bytes(want.dtype(), &[1], &wb[i * width..(i + 1) * width]),
            )),
        };
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let scale = w
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    compare::check_close(&g, &w, compare::Tol::new(1e-4 + 1e-3 * scale, 0.0))
}

/// [`same`] over lists of outputs.
pub fn same_all(got: &[Tensor], want: &[Tensor]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} outputs where {} are expected",
            got.len(),
            want.len()
        ));
    }
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        same(g, w).map_err(|e| format!("output {k}: {e}"))?;
    }
    Ok(())
}

/// The outputs a test set expects, in order.
pub fn expected(set: &TestSet) -> Vec<Tensor> {
    set.outputs.iter().map(|(_, t)| t.clone()).collect()
}

/// Runs `g` on `stack` at every test set against its expected outputs; an error names
/// `what` and the set.
pub fn run_sets(
    g: &Graph,
    sets: &[TestSet],
    stack: &[std::sync::Arc<dyn Executor>],
    what: &str,
) -> Result<(), String> {
    let p = plan(g, stack).map_err(|e| format!("{what}: plan: {e}"))?;
    for (i, set) in sets.iter().enumerate() {
        let inputs = set.inputs_for(g).map_err(|e| format!("{what}: {e}"))?;
        let (got, _) = p
            .run(&inputs)
            .map_err(|e| format!("{what}, set {i}: {e}"))?;
        same_all(&got, &expected(set)).map_err(|e| format!("{what}, set {i}: {e}"))?;
    }
    Ok(())
}

/// The ONNX op types `g` is saved as, in order.
pub fn written_ops(g: &Graph) -> Vec<String> {
    let model = to_model(g).expect("model");
    let graph = model.graph.expect("graph");
    graph.node.into_iter().map(|n| n.op_type).collect()
}

/// The saved model `bytes` (`back` as it loads again) run in onnxruntime at every test
/// set, against the expected outputs; a printed `SKIPPED` without onnxruntime (a
/// failure under `CI=true`).
pub fn saved_model_runs_in_onnxruntime(name: &str, bytes: &[u8], sets: &[TestSet], back: &Graph) {
    let Some(python) = python_or_skip(&format!("{name} is not run in onnxruntime")) else {
        return;
    };
    let cases: Vec<Case> = sets
        .iter()
        .enumerate()
        .map(|(i, set)| Case {
            name: format!("{name} set {i}"),
            model: bytes.to_vec(),
            inputs: set.inputs_for(back).expect("inputs"),
        })
        .collect();
    for ((c, set), got) in cases.iter().zip(sets).zip(run_all(&python, &cases)) {
        if let Err(e) = got.and_then(|g| same_all(&g, &expected(set))) {
            panic!("{}: onnxruntime on the saved model: {e}", c.name);
        }
    }
}
