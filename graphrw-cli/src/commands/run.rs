//! `graphrw run MODEL_DIR [--model FILE]`: run a model on its ONNX test data with the
//! reference executor and compare with the expected outputs.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use graphrw::Tensor;

use super::CmdResult;

/// Absolute tolerance.
pub const ATOL: f64 = 1e-4;
/// Relative tolerance.
pub const RTOL: f64 = 1e-3;

/// How far one output is from the expected one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Error {
    /// Largest `|got - want|`.
    pub max_abs: f64,
    /// Largest `|got - want| / |want|` over nonzero `want`.
    pub max_rel: f64,
    /// True when every element is within `ATOL + RTOL * |want|`.
    pub ok: bool,
}

/// Compares `got` with `want` elementwise (NaN matches NaN).
pub fn compare(got: &Tensor, want: &Tensor) -> Result<Error, String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let mut e = Error {
        ok: true,
        ..Error::default()
    };
    for (g, w) in got.to_f64_vec().into_iter().zip(want.to_f64_vec()) {
        if g.is_nan() && w.is_nan() {
            continue;
        }
        let d = (g - w).abs();
        if d.is_nan() {
            e.ok = false;
            e.max_abs = f64::INFINITY;
            continue;
        }
        e.max_abs = e.max_abs.max(d);
        if w != 0.0 {
            e.max_rel = e.max_rel.max(d / w.abs());
        }
        if d > ATOL + RTOL * w.abs() {
            e.ok = false;
        }
    }
    Ok(e)
}

/// Files `prefix_N.pb` of `dir`, in order of N.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
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
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// The `test_data_set_*` folders of `dir`, sorted.
pub fn test_sets(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut sets: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("test_data_set_")
                && e.path().is_dir()
        })
        .map(|e| e.path())
        .collect();
    sets.sort();
    Ok(sets)
}

/// Runs the model on every test data set and prints the errors and times.
pub fn run(model_dir: &Path, model: Option<&Path>) -> CmdResult {
    let progress = std::io::stderr().is_terminal();
    let model_path = model
        .map(Path::to_path_buf)
        .unwrap_or_else(|| model_dir.join("model.onnx"));
    if progress {
        eprintln!("loading {}…", model_path.display());
    }
    let graph = super::load(&model_path)?;
    let sets = test_sets(model_dir)?;
    if sets.is_empty() {
        return Err(format!("{}: no test_data_set_* folders", model_dir.display()).into());
    }
    println!(
        "model: {} ({} nodes)",
        model_path.display(),
        graph.node_count()
    );
    let mut all_ok = true;
    for set in sets {
        let set_name = set
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let inputs: Vec<Tensor> = numbered(&set, "input_")?
            .iter()
            .map(|p| graphrw::onnx::read_tensor_pb(p).map(|(_, t)| t))
            .collect::<Result<_, _>>()?;
        let expected: Vec<(String, Tensor)> = numbered(&set, "output_")?
            .iter()
            .map(graphrw::onnx::read_tensor_pb)
            .collect::<Result<_, _>>()?;
        if inputs.len() != graph.inputs().len() {
            return Err(format!(
                "{set_name}: {} input files for {} graph inputs",
                inputs.len(),
                graph.inputs().len()
            )
            .into());
        }
        if progress {
            eprintln!("running {set_name}…");
        }
        let start = Instant::now();
        let outputs = graphrw::exec::run_reference(&graph, &inputs)
            .map_err(|e| format!("{set_name}: {e}"))?;
        let elapsed = start.elapsed();
        println!("{set_name}: ran in {:.2} ms", elapsed.as_secs_f64() * 1e3);
        if outputs.len() < expected.len() {
            return Err(format!(
                "{set_name}: the model gives {} outputs, the test data expects {}",
                outputs.len(),
                expected.len()
            )
            .into());
        }
        for (k, ((name, want), got)) in expected.iter().zip(&outputs).enumerate() {
            let label = if name.is_empty() {
                format!("output {k}")
            } else {
                format!("output {k} `{name}`")
            };
            match compare(got, want) {
                Ok(e) => {
                    all_ok &= e.ok;
                    println!(
                        "  {label}: max abs error {:.3e}, max rel error {:.3e}: {}",
                        e.max_abs,
                        e.max_rel,
                        if e.ok { "ok" } else { "BEYOND TOLERANCE" }
                    );
                }
                Err(m) => {
                    all_ok = false;
                    println!("  {label}: {m}");
                }
            }
        }
    }
    if all_ok {
        println!("all outputs within tolerance (abs {ATOL:e} + rel {RTOL:e})");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("some outputs are beyond tolerance (abs {ATOL:e} + rel {RTOL:e})");
        Ok(ExitCode::FAILURE)
    }
}
