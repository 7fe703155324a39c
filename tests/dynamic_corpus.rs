//! Models as they are published: real exports with dynamic batch and sequence axes
//! (`../shared/corpus_dynamic`: albert, electra, gpt_neox and falcon, each by the
//! TorchScript exporter and by dynamo with dynamic shapes), and the decoder steps with a
//! KV cache of dynamic length in `tests/models/decoders` (one new token, a chunk of new
//! tokens with the causal mask offset by the cache length, grouped kv heads; each by both
//! exporters; `tools/models/export_decoders.py` made them), one attention site each.
//!
//! For every model:
//! - the import leaves no op opaque: the shape arithmetic (`Shape`, `Gather`, `Concat`,
//!   ...) folds into symbolic attributes and the shape subgraph is dead;
//! - `rules::optimize` fuses every attention site the manifest counts, and every GELU
//!   (each `erf` of these exports is one, TorchScript's with its `0.5` after the next
//!   product);
//! - one plan runs both test sets, at batch 3 × length 11 and batch 1 × length 40
//!   (neither the export's shape), within 1e-4 + 1e-3 · max|y| of onnxruntime's reference;
//! - the written model keeps the symbolic dims as `dim_param`s, loads back, and
//!   onnxruntime runs it at both shapes (skipped without onnxruntime, failed under
//!   `CI=true`).

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

use graphrw::exec::{default_stack, plan};
use graphrw::{onnx, rules, verify, Graph, Tensor};
use graphrw_kernels::testing::compare::{check_close_tensor, max_abs_diff_tensor, Tol};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus_dynamic")
}

/// (model folder, attention sites): the manifest's models, then the decoder steps.
fn manifest() -> Vec<(PathBuf, usize)> {
    let text = std::fs::read_to_string(corpus().join("manifest.json")).expect("manifest.json");
    let mut out = Vec::new();
    let mut model = None;
    for line in text.lines() {
        let line = line.trim().trim_end_matches(',');
        if let Some(v) = line.strip_prefix("\"model\": ") {
            model = Some(corpus().join(v.trim_matches('"')));
        }
        if let Some(v) = line.strip_prefix("\"attention_sites\": ") {
            let sites = v.parse().expect("attention_sites is a number");
            out.push((model.take().expect("model before its sites"), sites));
        }
    }
    assert!(!out.is_empty(), "the manifest lists no model");
    let decoders = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/decoders");
    let mut steps: Vec<PathBuf> = std::fs::read_dir(&decoders)
        .expect("tests/models/decoders")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    steps.sort();
    assert_eq!(steps.len(), 6, "three decoder forms by two exporters");
    out.extend(steps.into_iter().map(|p| (p, 1)));
    out
}

fn short(dir: &Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("?")
        .to_string()
}

fn tensors(dir: &Path, prefix: &str) -> Vec<Tensor> {
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.exists())
        .map(|p| onnx::read_tensor_pb(&p).expect("tensor").1)
        .collect()
}

fn test_sets(model: &Path) -> Vec<PathBuf> {
    let mut sets: Vec<PathBuf> = std::fs::read_dir(model)
        .expect("model folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("test_data_set_"))
        })
        .collect();
    sets.sort();
    sets
}

/// The largest difference, or why the output is wrong: past 1e-4 + 1e-3 · max|y|, or a
/// NaN or Inf where the reference is finite (the shared comparison).
fn within(got: &Tensor, want: &Tensor) -> Result<f64, String> {
    let scale = want.to_f64_vec().iter().fold(0.0f64, |m, v| m.max(v.abs()));
    check_close_tensor(got, want, Tol::new(1e-4 + 1e-3 * scale, 0.0))?;
    max_abs_diff_tensor(got, want)
}

fn load(dir: &Path) -> Graph {
    onnx::load(dir.join("model.onnx")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn dynamic_exports_import_with_no_opaque_op_and_symbolic_inputs() {
    for (dir, _) in manifest() {
        let (name, g) = (short(&dir), load(&dir));
        let opaque: Vec<String> = g
            .topo_order()
            .expect("acyclic")
            .into_iter()
            .filter_map(|id| g.node(id))
            .filter(|n| n.op_name() == "opaque")
            .map(|n| n.attrs().str("op_type").unwrap_or("?").to_string())
            .collect();
        assert!(opaque.is_empty(), "{name}: opaque ops {opaque:?}");
        let input = g.node(g.inputs()[0]).expect("input");
        assert!(
            input.outputs()[0].shape.is_symbolic(),
            "{name}: the first input is not symbolic: {}",
            input.outputs()[0]
        );
    }
}

#[test]
fn every_site_fuses_and_one_plan_runs_every_shape() {
    let mut failures = Vec::new();
    for (dir, sites) in manifest() {
        let (name, mut g) = (short(&dir), load(&dir));
        // Every `erf` of these exports is a GELU's, in whichever spelling.
        let erfs = g.op_counts().get("erf").copied().unwrap_or(0);
        let report = rules::optimize(&mut g).unwrap_or_else(|e| panic!("{name}: {e}"));
        verify(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
        let fused = report
            .fused_nodes
            .get("scaled_dot_product_attention")
            .copied()
            .unwrap_or(0);
        if fused != sites {
            failures.push(format!("{name}: {fused} of {sites} attention sites fused"));
        }
        let ops = g.op_counts();
        let gelus: usize = ["fused.gelu_erf", "fused.bias_gelu"]
            .iter()
            .filter_map(|k| ops.get(k))
            .sum();
        if gelus != erfs || ops.contains_key("erf") {
            failures.push(format!("{name}: {gelus} of {erfs} GELUs fused"));
        }
        let p = plan(&g, &default_stack()).unwrap_or_else(|e| panic!("{name}: plan: {e}"));
        let sets = test_sets(&dir);
        assert!(sets.len() >= 2, "{name}: fewer than two test sets");
        // Each shape twice in a row (the second run reuses the first's bound views),
        // then the first shape again after the others.
        let order = sets.iter().flat_map(|s| [s, s]).chain(sets.first());
        for set in order {
            let (out, _) = p
                .run(&tensors(set, "input"))
                .unwrap_or_else(|e| panic!("{name} {}: {e}", set.display()));
            for (i, want) in tensors(set, "output").iter().enumerate() {
                match within(&out[i], want) {
                    Ok(err) => println!(
                        "{name} {}: output {i} {:?}, max error {err:e}",
                        set.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
                        out[i].shape()
                    ),
                    Err(e) => failures.push(format!("{name} {}: {e}", set.display())),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_symbol_bound_to_two_values_is_an_error_naming_it() {
    let (dir, _) = manifest().into_iter().next().expect("a model");
    let mut g = load(&dir);
    rules::optimize(&mut g).expect("optimize");
    let p = plan(&g, &default_stack()).expect("plan");
    let set = &test_sets(&dir)[0];
    let mut inputs = tensors(set, "input");
    // The second input (the attention mask) one column short: `seq` is bound twice.
    let mask = &inputs[1];
    let (b, s) = (mask.shape()[0], mask.shape()[1]);
    inputs[1] = Tensor::from_vec(vec![b, s - 1], vec![1i64; b * (s - 1)]).expect("mask");
    let err = p
        .run(&inputs)
        .expect_err("an inconsistent binding runs")
        .to_string();
    assert!(
        err.contains("seq") && err.contains(&s.to_string()) && err.contains(&(s - 1).to_string()),
        "{err}"
    );
}

/// Runs a model in onnxruntime on every test set given, printing the max error of
/// output 0 per set, or failing with the reason.
const SCRIPT: &str = r#"
import os, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
model, sets = sys.argv[1], sys.argv[2:]
s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
def read(p):
    t = onnx.TensorProto()
    with open(p, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)
for data in sets:
    feeds = {i.name: read(os.path.join(data, "input_%d.pb" % k)) for k, i in enumerate(s.get_inputs())}
    for k, got in enumerate(s.run(None, feeds)):
        want = read(os.path.join(data, "output_%d.pb" % k))
        if got.shape != want.shape:
            sys.exit("output %d: shape %s, expected %s" % (k, got.shape, want.shape))
        if not np.all(np.isfinite(got)):
            sys.exit("output %d: non-finite values" % k)
        err = float(np.abs(got - want).max())
        tol = 1e-4 + 1e-3 * float(np.abs(want).max())
        if err > tol:
            sys.exit("output %d: max error %g > tolerance %g" % (k, err, tol))
        print(os.path.basename(data), k, got.shape, err)
"#;

#[test]
fn onnxruntime_runs_the_written_models_at_other_shapes() {
    let Some(python) = support::python_or_skip() else {
        return;
    };
    let scratch = std::env::temp_dir().join(format!("graphrw_dynamic_{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let mut failures = Vec::new();
    for (dir, _) in manifest() {
        let (name, mut g) = (short(&dir), load(&dir));
        rules::optimize(&mut g).expect("optimize");
        let path = scratch.join(format!("{name}.onnx"));
        onnx::save(&g, &path).unwrap_or_else(|e| panic!("{name}: save: {e}"));
        // The written model keeps its symbolic dims and loads back.
        let back = onnx::load(&path).unwrap_or_else(|e| panic!("{name}: reload: {e}"));
        let input = back.node(back.inputs()[0]).expect("input");
        assert!(input.outputs()[0].shape.is_symbolic(), "{name}: dims lost");
        let run = Command::new(&python)
            .args(["-c", SCRIPT])
            .arg(&path)
            .args(test_sets(&dir))
            .output()
            .expect("python runs");
        let out = String::from_utf8_lossy(&run.stdout);
        if run.status.success() {
            println!("{name}: onnxruntime {}", out.trim().replace('\n', "; "));
        } else {
            let err = String::from_utf8_lossy(&run.stderr);
            failures.push(format!("{name}: {}", err.lines().last().unwrap_or("")));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
