//! onnxruntime runs what `graphrw optimize` writes: every corpus model, optimised with
//! the default pipeline (`rules::optimize`: attention fusion, causal masks, generated
//! kernels) and saved (standard `Attention`, LayerNormalization, RMSNormalization, Gelu,
//! RotaryEmbedding, model-local functions), gives onnxruntime's reference `output_0.pb` within
//! 1e-4 + 1e-3 * max|y|.
//!
//! The Python comes from `GRAPHRW_PYTHON` (CI sets it to the virtual environment that
//! `.ci/run` makes), else `.venv/bin/python` beside this file, else `python3`; it needs
//! onnxruntime, onnx and numpy. Without them the test says SKIPPED, except under
//! `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

use graphrw::{onnx, rules, verify, Tensor};

const MODELS: [&str; 8] = [
    "bert_eager",
    "bert_sdpa",
    "gpt2_eager",
    "gpt2_sdpa",
    "llama_eager",
    "llama_sdpa",
    "t5_eager",
    "bart_sdpa",
];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus")
}

/// Runs `model` in onnxruntime on the inputs of `data` (a `test_data_set_*` folder),
/// writing `output_N.pb` into `out`.
const SCRIPT: &str = r#"
import glob, os, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
model, data, out = sys.argv[1:4]
s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
names = [i.name for i in s.get_inputs()]
feeds = {}
for i, name in enumerate(names):
    t = onnx.TensorProto()
    with open(os.path.join(data, "input_%d.pb" % i), "rb") as f:
        t.ParseFromString(f.read())
    feeds[name] = numpy_helper.to_array(t)
for i, y in enumerate(s.run(None, feeds)):
    t = numpy_helper.from_array(np.asarray(y), "output_%d" % i)
    with open(os.path.join(out, "output_%d.pb" % i), "wb") as f:
        f.write(t.SerializeToString())
"#;

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
            |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
        );
    if worst <= tol {
        Ok(worst)
    } else {
        Err(format!("max error {worst:e} > tolerance {tol:e}"))
    }
}

#[test]
fn onnxruntime_runs_every_optimised_corpus_model() {
    let Some(python) = support::python_or_skip() else {
        return;
    };
    let scratch = std::env::temp_dir().join(format!("graphrw_ort_corpus_{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut failures = Vec::new();
    for name in MODELS {
        let dir = corpus().join(name);
        let mut g = onnx::load(dir.join("model.onnx")).expect("load");
        let done = rules::optimize(&mut g).unwrap_or_else(|e| panic!("{name}: {e}"));
        verify(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            done.fused_nodes
                .contains_key("scaled_dot_product_attention"),
            "{name}: no attention fused: {done}"
        );
        let model = scratch.join(format!("{name}.onnx"));
        onnx::save(&g, &model).unwrap_or_else(|e| panic!("{name}: save: {e}"));
        let out = scratch.join(name);
        std::fs::create_dir_all(&out).expect("out dir");
        let run = Command::new(&python)
            .args(["-c", SCRIPT])
            .arg(&model)
            .arg(dir.join("test_data_set_0"))
            .arg(&out)
            .output()
            .expect("python runs");
        if !run.status.success() {
            let err = String::from_utf8_lossy(&run.stderr);
            let last = err.lines().last().unwrap_or("").to_string();
            failures.push(format!(
                "{name}: onnxruntime refused the optimised model: {last}"
            ));
            continue;
        }
        let (_, got) = onnx::read_tensor_pb(out.join("output_0.pb")).expect("ort output");
        let (_, want) =
            onnx::read_tensor_pb(dir.join("test_data_set_0/output_0.pb")).expect("reference");
        match within(&got, &want) {
            Ok(err) => println!(
                "{name}: {} -> {} nodes, onnxruntime max error {err:e}",
                done.nodes_before, done.nodes_after
            ),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
