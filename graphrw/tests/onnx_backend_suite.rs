//! The ONNX project's backend test models (shipped in the `onnx` Python package under
//! `onnx/backend/test/data/*/*/model.onnx`, with `test_data_set_*` folders), as
//! shipped: old opsets, ops graphrw does not model, strings.
//!
//! Every model must load, `optimize` with the default rules, save and load again; and
//! wherever graphrw runs a model, its outputs must agree with the test data. Models it
//! cannot run (an opaque op without a kernel, ...) are counted as refused, with why.
//! The package is found through `$GRAPHRW_PYTHON` or `python3`; without it the test
//! says it skipped, except under `CI=true`, where that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use graphrw::{onnx, Tensor};

/// The fewest models that must run and agree (of 140 in onnx 1.23).
const PASS_FLOOR: usize = 76;

fn suite_dir() -> Option<PathBuf> {
    let python = std::env::var("GRAPHRW_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python)
        .args([
            "-c",
            "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data'))",
        ])
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && dir.is_dir()).then_some(dir)
}

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name
                .strip_prefix(prefix)?
                .strip_suffix(".pb")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// Within `1e-4 + 1e-3 * |want|` everywhere (NaN where NaN is expected).
fn agrees(got: &Tensor, want: &Tensor) -> bool {
    got.shape() == want.shape()
        && got
            .to_f64_vec()
            .iter()
            .zip(want.to_f64_vec())
            .all(|(&g, w)| (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-4 + 1e-3 * w.abs())
}

enum Outcome {
    Pass,
    Wrong(String),
    Refused(String),
}

/// Runs every test data set of `dir` through `graph`.
fn run_model(graph: &graphrw::Graph, dir: &Path) -> Outcome {
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    sets.sort();
    for set in sets {
        let mut inputs = Vec::new();
        for p in numbered(&set, "input_") {
            match onnx::read_tensor_pb(&p) {
                Ok((_, t)) => inputs.push(t),
                Err(e) => return Outcome::Refused(format!("input: {e}")),
            }
        }
        let got = match graphrw::exec::run_reference(graph, &inputs) {
            Ok(o) => o,
            Err(e) => {
                let first = e.to_string();
                let why = first
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .trim()
                    .to_string();
                return Outcome::Refused(why);
            }
        };
        for (i, p) in numbered(&set, "output_").iter().enumerate() {
            let want = match onnx::read_tensor_pb(p) {
                Ok((_, t)) => t,
                Err(e) => return Outcome::Refused(format!("output: {e}")),
            };
            match got.get(i) {
                Some(g) if agrees(g, &want) => {}
                Some(g) => {
                    return Outcome::Wrong(format!(
                        "output {i}: {:?} vs expected {:?}",
                        g.shape(),
                        want.shape()
                    ))
                }
                None => return Outcome::Wrong(format!("no output {i}")),
            }
        }
    }
    Outcome::Pass
}

#[test]
fn backend_models_load_optimize_save_and_agree_where_they_run() {
    let Some(root) = suite_dir() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but the onnx Python package (backend test data) was not found"
        );
        println!("SKIPPED: the onnx Python package was not found (set GRAPHRW_PYTHON)");
        return;
    };
    let mut models: Vec<PathBuf> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .flat_map(|kind| std::fs::read_dir(kind.path()).into_iter().flatten())
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    models.sort();
    let (mut failed, mut wrong, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    let mut pass = 0;
    for dir in &models {
        let name = dir.strip_prefix(&root).unwrap_or(dir).display().to_string();
        let step = (|| -> Result<graphrw::Graph, String> {
            let mut g = onnx::load(dir.join("model.onnx")).map_err(|e| format!("load: {e}"))?;
            graphrw::rules::optimize(&mut g).map_err(|e| format!("optimize: {e}"))?;
            graphrw::verify(&g).map_err(|e| format!("verify: {e}"))?;
            let bytes = onnx::to_bytes(&g).map_err(|e| format!("save: {e}"))?;
            // For checking the saved models elsewhere (onnx.checker, onnxruntime).
            if let Ok(out) = std::env::var("GRAPHRW_BACKEND_OUT") {
                let file = PathBuf::from(out).join(name.replace('/', "__") + ".onnx");
                std::fs::write(&file, &bytes).map_err(|e| format!("{}: {e}", file.display()))?;
            }
            let again = onnx::load_bytes(&bytes).map_err(|e| format!("reload: {e}"))?;
            Ok(again)
        })();
        let g = match step {
            Ok(g) => g,
            Err(e) => {
                failed.push(format!("{name}: {e}"));
                continue;
            }
        };
        match run_model(&g, dir) {
            Outcome::Pass => pass += 1,
            Outcome::Wrong(w) => wrong.push(format!("{name}: {w}")),
            Outcome::Refused(r) => refused.push(format!("{name}: {r}")),
        }
    }
    println!(
        "backend suite: {} models; pass {pass}, wrong {}, refused {}, failed {}",
        models.len(),
        wrong.len(),
        refused.len(),
        failed.len()
    );
    for r in &refused {
        println!("  refused {r}");
    }
    assert!(models.len() >= 100, "found only {} models", models.len());
    assert!(
        failed.is_empty(),
        "load/optimize/save failed:\n{}",
        failed.join("\n")
    );
    assert!(wrong.is_empty(), "wrong answers:\n{}", wrong.join("\n"));
    assert!(
        pass >= PASS_FLOOR,
        "only {pass} models pass (floor {PASS_FLOOR})"
    );
}
