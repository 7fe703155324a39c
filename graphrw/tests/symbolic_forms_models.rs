//! Three small TorchScript exports with dynamic batch and sequence axes
//! (`tests/models/symbolic_forms`, made by `tools/models/export_symbolic_forms.py`, each
//! with two test sets of torch's outputs at different shapes), the forms of issue #53:
//!
//! - `causal_past`: a causal mask offset by a cache's length, `Trilu` with `k` read from a
//!   shape (saving the optimised model failed: `diagonal` had "no ONNX form");
//! - `position_ids`: RoBERTa's position ids, `CumSum` on int32 (the kernel gave int64 and
//!   the run failed);
//! - `mha_padding`: attention under a key-padding mask `[B, 1, 1, S]` (the written
//!   `Attention` was refused by onnxruntime).
//!
//! Each is optimised as `graphrw optimize` does, runs on the default stack at both test
//! sets, is saved with the form named above in it, loads back and runs again, and, where
//! onnxruntime is installed (`SKIPPED` without it, a failure under `CI=true`), runs in
//! onnxruntime at both test sets: every time with torch's outputs.

mod ort_support;

use std::path::PathBuf;

use graphrw::exec::{default_stack, reference_stack};
use graphrw::onnx::{load, load_bytes, read_test_sets, to_bytes};
use graphrw::rules;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/models/symbolic_forms")
        .join(name)
}

/// The model optimised, run, saved (its written ops holding `written`), loaded back and
/// run, and run in onnxruntime, always against torch's outputs.
fn check(name: &str, written: &str) {
    let d = dir(name);
    let sets = read_test_sets(&d).expect("test sets");
    assert_eq!(sets.len(), 2, "{name}: two test sets");
    let mut g = load(d.join("model.onnx")).expect("loads");
    ort_support::run_sets(&g, &sets, &reference_stack(), "as loaded, reference stack")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    rules::optimize(&mut g).unwrap_or_else(|e| panic!("{name}: optimize: {e}"));
    ort_support::run_sets(&g, &sets, &default_stack(), "optimised, default stack")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let bytes = to_bytes(&g).unwrap_or_else(|e| panic!("{name}: save: {e}"));
    let ops = ort_support::written_ops(&g);
    assert!(
        ops.iter().any(|o| o == written),
        "{name}: no `{written}` written: {ops:?}"
    );
    let back = load_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: load back: {e}"));
    ort_support::run_sets(&back, &sets, &reference_stack(), "loaded back")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    ort_support::saved_model_runs_in_onnxruntime(name, &bytes, &sets, &back);
}

#[test]
fn a_causal_mask_offset_by_the_cache_length_saves_and_runs_at_two_shapes() {
    check("causal_past", "Trilu");
}

#[test]
fn int32_position_ids_keep_their_dtype_and_run_at_two_shapes() {
    check("position_ids", "CumSum");
}

#[test]
fn a_key_padding_mask_attention_saves_and_runs_in_onnxruntime_at_two_shapes() {
    check("mha_padding", "Attention");
}
