//! Shared by the workspace tests that run onnxruntime.

use std::path::Path;
use std::process::Command;

/// A Python with onnxruntime, onnx and numpy: `GRAPHRW_PYTHON` (CI sets it to the
/// virtual environment `.ci/run` makes), else `.venv/bin/python` beside the workspace,
/// else `python3`; or why there is none.
pub fn python() -> Result<String, String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("GRAPHRW_PYTHON") {
        candidates.push(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if venv.exists() {
        candidates.push(venv.display().to_string());
    }
    candidates.push("python3".into());
    for p in &candidates {
        let probe = Command::new(p)
            .args(["-c", "import onnxruntime, onnx, numpy"])
            .output();
        if probe.is_ok_and(|o| o.status.success()) {
            return Ok(p.clone());
        }
    }
    Err(format!(
        "no Python with onnxruntime, onnx and numpy among {candidates:?} \
         (set GRAPHRW_PYTHON or run .ci/run)"
    ))
}

/// [`python`], or `None` after printing `SKIPPED` — except under `CI=true`, where a
/// missing onnxruntime fails the test.
pub fn python_or_skip() -> Option<String> {
    match python() {
        Ok(p) => Some(p),
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true: onnxruntime is required: {why}")
        }
        Err(why) => {
            println!("SKIPPED: {why}");
            None
        }
    }
}
