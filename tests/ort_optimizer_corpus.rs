//! graphrw runs what onnxruntime's transformer optimizer writes (issue #56 goal 3):
//! every corpus model (`../shared/corpus` and `../shared/corpus_dynamic`; a corpus that
//! is absent is `SKIPPED`) goes through `onnxruntime.transformers.optimizer`
//! (`optimize_model`, the model type its name says, `bert` where that type's fusions
//! fail, `opt_level=1`, `use_gpu=False`, `only_onnxruntime=False`), once, into a
//! temporary folder; graphrw loads the optimised file (its `SkipLayerNormalization`,
//! `FastGelu`, ... read as graphrw's own ops, none left opaque), optimises it with
//! `rules::optimize`, and runs it on each of the model's test sets, within
//! `1e-4 + 1e-3 * max|y|` of onnxruntime's run of the same optimised file (where
//! onnxruntime 1.32 cannot load that file, as with `bart_sdpa`'s: "Attempt to replace
//! the existing tensor", of the test set's reference for the model before it was
//! optimised, which the optimizer keeps). A file graphrw refuses as malformed passes
//! only where onnxruntime refuses the same node.
//!
//! `opt_level=1` keeps onnxruntime's portable fusions only (99 adds layout and
//! hardware-specific ones, `NchwcTransformer`, that it warns are for the machine that
//! wrote them; `GRAPHRW_ORT_OPT_LEVEL=99` runs the test at that level by hand, and
//! `GRAPHRW_OPTIMIZED_DIR=<dir>` runs it on `<dir>/<model>/model.onnx` that another
//! optimizer wrote, onnxscript's `optimize_for_ort` say, instead). The optimizer's
//! symbolic shape inference needs `sympy`, which onnxruntime 1.32 no longer installs
//! and CI does not install (its venv holds onnxruntime, onnx and numpy): without it a
//! stub module stands in, the optimizer says its shape inference failed and writes
//! fewer fusions (on `bert_sdpa`, its `Gelu`s but not its `SkipLayerNormalization`s),
//! and the test says so in a line. onnxruntime 1.32's `optimize_by_onnxruntime` also
//! imports `torch`, only to read `torch.version.hip`, so where torch is absent a stub
//! module saying "no ROCm" stands in. Without onnxruntime the test says `SKIPPED`,
//! except under `CI=true`,
//! where it fails. The whole run (17 models) takes seconds, so it is not `#[ignore]`d.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

use graphrw::exec::{default_stack, plan};
use graphrw::{onnx, rules, Tensor};

/// The corpora, each with its models' folders (those with a `model.onnx`).
fn corpora() -> Vec<(PathBuf, Vec<PathBuf>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    let mut out = Vec::new();
    for name in ["corpus", "corpus_dynamic"] {
        let dir = root.join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            println!(
                "SKIPPED: {} is absent: its models are not optimised",
                dir.display()
            );
            continue;
        };
        let mut models: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("model.onnx").exists())
            .collect();
        models.sort();
        out.push((dir, models));
    }
    out
}

/// For each model folder (the arguments after the output root and the level): optimise it into
/// `<out>/<k>/model.onnx` (or write why not in `error.txt`), list the contrib ops in
/// `contrib.txt`, run the optimised file in onnxruntime on each `test_data_set_<j>`
/// into `<out>/<k>/set_<j>/` (or write why not in `ort_error.txt`).
const SCRIPT: &str = r#"
import glob, os, sys, types, collections
try:
    import torch  # noqa: F401
except ImportError:
    # onnxruntime 1.32's optimize_by_onnxruntime imports torch only for torch.version.hip.
    t = types.ModuleType("torch"); v = types.ModuleType("torch.version"); v.hip = None; t.version = v
    sys.modules["torch"] = t; sys.modules["torch.version"] = v
try:
    import sympy  # noqa: F401
except ImportError:
    # Only the optimizer's symbolic shape inference reads it; it then reports failing.
    sys.modules["sympy"] = types.ModuleType("sympy")
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.transformers import optimizer
import logging
logging.disable(logging.WARNING)
out_root, level = sys.argv[1], int(sys.argv[2])
TYPES = [("albert", "bert"), ("electra", "bert"), ("bert", "bert"), ("gpt_neox", "gpt_neox"),
         ("gpt2", "gpt2"), ("t5", "t5"), ("bart", "bart")]
opts = ort.SessionOptions()
opts.log_severity_level = 4
for k, d in enumerate(sys.argv[3:]):
    out = os.path.join(out_root, str(k))
    os.makedirs(out, exist_ok=True)
    name = os.path.basename(d)
    kinds = [v for p, v in TYPES if name.startswith(p)] + ["bert"]
    pre = os.environ.get("GRAPHRW_OPTIMIZED_DIR")
    if pre:
        # Models another optimizer wrote (onnxscript's optimize_for_ort), by hand.
        path = os.path.join(out, "model.onnx")
        m = onnx.load(os.path.join(pre, name, "model.onnx"))
        onnx.save(m, path)
        ops = collections.Counter(n.op_type for n in m.graph.node if n.domain == "com.microsoft")
        with open(os.path.join(out, "contrib.txt"), "w") as f:
            f.write("given %s\n" % " ".join("%s=%d" % kv for kv in sorted(ops.items())))
        kinds = []
    try:
        m, errors = None, []
        for kind in kinds:
            try:
                m = optimizer.optimize_model(os.path.join(d, "model.onnx"), model_type=kind,
                                             opt_level=level, use_gpu=False, only_onnxruntime=False)
                break
            except Exception as e:
                errors.append("%s: %s: %s" % (kind, type(e).__name__, e))
        if pre:
            pass
        elif m is None:
            raise RuntimeError("; ".join(errors))
        else:
            path = os.path.join(out, "model.onnx")
            m.save_model_to_file(path)
            ops = collections.Counter(n.op_type for n in m.model.graph.node if n.domain == "com.microsoft")
            with open(os.path.join(out, "contrib.txt"), "w") as f:
                f.write("%s %s\n" % (kind, " ".join("%s=%d" % kv for kv in sorted(ops.items()))))
    except Exception as e:
        with open(os.path.join(out, "error.txt"), "w") as f:
            f.write(" ".join(str(e).split())[:600])
        continue
    try:
        s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for j, data in enumerate(sorted(glob.glob(os.path.join(d, "test_data_set_*")))):
            so = os.path.join(out, "set_%d" % j)
            os.makedirs(so, exist_ok=True)
            feeds = {}
            for i, meta in enumerate(s.get_inputs()):
                t = onnx.TensorProto()
                with open(os.path.join(data, "input_%d.pb" % i), "rb") as f:
                    t.ParseFromString(f.read())
                feeds[meta.name] = numpy_helper.to_array(t)
            for i, y in enumerate(s.run(None, feeds)):
                t = numpy_helper.from_array(np.asarray(y), "output_%d" % i)
                with open(os.path.join(so, "output_%d.pb" % i), "wb") as f:
                    f.write(t.SerializeToString())
    except Exception as e:
        with open(os.path.join(out, "ort_error.txt"), "w") as f:
            f.write(" ".join(str(e).split())[:600])
"#;

/// `got` within `1e-4 + 1e-3 * max|want|` of `want`, its shape; the worst error.
fn within(got: &Tensor, want: &Tensor) -> Result<f64, String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = 1e-4 + 1e-3 * scale;
    let worst = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(
            0.0f64,
            |m, d| {
                if d.is_nan() {
                    f64::INFINITY
                } else {
                    m.max(d)
                }
            },
        );
    if worst <= tol {
        Ok(worst)
    } else {
        Err(format!("max error {worst:e} > tolerance {tol:e}"))
    }
}

/// The optimised model `out` (folder `k` of the script) run by graphrw on `model`'s
/// test sets against onnxruntime's outputs; a line per set.
fn check(model: &Path, out: &Path) -> Result<Vec<String>, String> {
    if let Ok(e) = std::fs::read_to_string(out.join("error.txt")) {
        return Err(format!("onnxruntime's optimizer failed: {e}"));
    }
    // Where onnxruntime cannot load the file its own optimizer wrote, graphrw's run is
    // held to the reference of the model before optimisation (onnxruntime's, in the
    // test set), which the optimizer must keep.
    let ort_error = std::fs::read_to_string(out.join("ort_error.txt")).ok();
    let contrib = std::fs::read_to_string(out.join("contrib.txt")).map_err(|e| e.to_string())?;
    let mut g = match onnx::load(out.join("model.onnx")) {
        Ok(g) => g,
        Err(e) => return both_refuse(&e, ort_error.as_deref()),
    };
    if g.op_counts().contains_key("opaque") {
        return Err(format!("nodes left opaque: {:?}", g.op_counts()));
    }
    rules::optimize(&mut g).map_err(|e| format!("optimize: {e}"))?;
    let p = plan(&g, &default_stack()).map_err(|e| format!("plan: {e}"))?;
    let sets = onnx::read_test_sets(model).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    for (j, set) in sets.iter().enumerate() {
        let inputs: Vec<Tensor> = set.inputs.iter().map(|(_, t)| t.clone()).collect();
        let (got, _) = p.run(&inputs).map_err(|e| format!("set {j}: run: {e}"))?;
        let mut worst = 0.0f64;
        for (i, y) in got.iter().enumerate() {
            let want = match &ort_error {
                None => {
                    let path = out.join(format!("set_{j}/output_{i}.pb"));
                    onnx::read_tensor_pb(&path)
                        .map_err(|e| format!("set {j}: onnxruntime's output {i}: {e}"))?
                        .1
                }
                Some(_) => match set.outputs.get(i) {
                    Some((_, t)) => t.clone(),
                    None => continue,
                },
            };
            let err = within(y, &want).map_err(|e| format!("set {j}: output {i}: {e}"))?;
            worst = worst.max(err);
        }
        let against = match &ort_error {
            None => "onnxruntime on the optimised file".to_string(),
            Some(e) => format!(
                "the test set's reference (onnxruntime cannot load the optimised file: {})",
                e.chars().take(160).collect::<String>()
            ),
        };
        lines.push(format!(
            "[{}] set {j}: {} outputs, max error {worst:e} against {against}",
            contrib.trim(),
            got.len()
        ));
    }
    Ok(lines)
}

/// A file graphrw refuses passes only where onnxruntime refuses it too, for the node
/// graphrw names as malformed (onnxscript writes a `Gemm` of a 3-D `A` for GPT-2's
/// `Conv1D`, which neither runtime loads).
fn both_refuse(ours: &onnx::OnnxError, ort_error: Option<&str>) -> Result<Vec<String>, String> {
    let node = match ours {
        onnx::OnnxError::Malformed { node, .. } => node,
        _ => return Err(format!("load: {ours}")),
    };
    match ort_error {
        Some(theirs) if theirs.contains(&format!("({node})")) => Ok(vec![format!(
            "refused, as onnxruntime refuses it: {ours} (onnxruntime: {})",
            theirs.chars().take(120).collect::<String>()
        )]),
        _ => Err(format!("load: {ours} (onnxruntime loads the file)")),
    }
}

#[test]
fn graphrw_runs_what_onnxruntimes_transformer_optimizer_writes() {
    let corpora = corpora();
    let models: Vec<PathBuf> = corpora.into_iter().flat_map(|(_, m)| m).collect();
    if models.is_empty() {
        return;
    }
    let Some(python) = support::python_or_skip() else {
        return;
    };
    let sympy = Command::new(&python)
        .args(["-c", "import sympy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !sympy {
        println!(
            "{python} has no sympy: the optimizer runs without its symbolic shape \
             inference (a stub stands in), so it writes fewer fusions"
        );
    }
    // `GRAPHRW_ORT_OPT_LEVEL=99` tries onnxruntime's every fusion instead (by hand).
    let level: u32 = match std::env::var("GRAPHRW_ORT_OPT_LEVEL") {
        Ok(v) => v.parse().expect("GRAPHRW_ORT_OPT_LEVEL is 1, 2 or 99"),
        Err(_) => 1,
    };
    let scratch =
        std::env::temp_dir().join(format!("graphrw_ort_optimizer_{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let run = Command::new(&python)
        .args(["-c", SCRIPT])
        .arg(&scratch)
        .arg(level.to_string())
        .args(&models)
        .output()
        .expect("python runs");
    assert!(
        run.status.success(),
        "the optimizer script failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut failures = Vec::new();
    for (k, model) in models.iter().enumerate() {
        let name = model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        match check(model, &scratch.join(k.to_string())) {
            Ok(lines) => lines.iter().for_each(|l| println!("{name}: {l}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        failures.is_empty(),
        "{} of {} models:\n{}",
        failures.len(),
        models.len(),
        failures.join("\n")
    );
}
