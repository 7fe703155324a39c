//! Small torch exports of attention whose softmax is spelled through log-sum-exp or
//! log-softmax, and of Transformer-XL's relative-position scores
//! (`tests/models/softmax_spellings`, made by `tools/models/export_softmax_spellings.py`:
//! TorchScript at opset 17 and dynamo at opset 18, dynamic batch and sequence axes, two
//! test sets of torch's outputs at shapes other than the export's). Issue #53, item 4.
//!
//! Each model loads, runs on the reference stack, and is optimised as `graphrw optimize`
//! does: its one attention fuses into one `scaled_dot_product_attention` with no
//! `softmax`, `exp` or `log_softmax` left (for the relative-position models, the shift's
//! pad, reshape and slice stay, as the fused node's additive mask). The optimised graph
//! runs on the default stack, is saved with an ONNX `Attention` in it, loads back and
//! runs again, and, where onnxruntime is installed (`SKIPPED` without it, a failure
//! under `CI=true`), runs in onnxruntime at both test sets: every time against torch's
//! outputs.

mod ort_support;

use std::path::PathBuf;

use graphrw::exec::{default_stack, reference_stack};
use graphrw::onnx::{load, load_bytes, read_test_sets, to_bytes};
use graphrw::ops::Op;
use graphrw::{rules, Graph};

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/models/softmax_spellings")
        .join(name)
}

/// How many nodes of `g` run `op`.
fn count(g: &Graph, op: Op) -> usize {
    g.node_ids()
        .filter(|&id| g.node(id).is_some_and(|n| n.op().is(op)))
        .count()
}

/// What the optimised graph must hold besides its one fused attention.
#[derive(Clone, Copy)]
enum Scores {
    /// Plain scores: nothing of the softmax's spelling is left.
    Plain,
    /// Transformer-XL's relative-position scores: the shift (a `slice` between two
    /// `reshape`s) is left, feeding the fused node's mask.
    RelativeShift,
}

/// The model loaded, optimised (one fused attention, no softmax left), run, saved with
/// an `Attention`, loaded back and run, and run in onnxruntime, always against torch.
fn check(name: &str, scores: Scores) {
    let d = dir(name);
    let sets = read_test_sets(&d).expect("test sets");
    assert_eq!(sets.len(), 2, "{name}: two test sets");
    let mut g = load(d.join("model.onnx")).expect("loads");
    ort_support::run_sets(&g, &sets, &reference_stack(), "as loaded, reference stack")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let done = rules::optimize(&mut g).unwrap_or_else(|e| panic!("{name}: optimize: {e}"));
    let left = || graphrw::printer::print(&g);
    assert_eq!(
        count(&g, Op::ScaledDotProductAttention),
        1,
        "{name}: one fused attention ({done}):\n{}",
        left()
    );
    for op in [Op::Softmax, Op::LogSoftmax, Op::Exp, Op::Log] {
        assert_eq!(count(&g, op), 0, "{name}: `{op}` left:\n{}", left());
    }
    if let Scores::RelativeShift = scores {
        assert!(
            count(&g, Op::Slice) >= 1,
            "{name}: the shift's slice:\n{}",
            left()
        );
        let sdpa = g
            .node_ids()
            .find(|&id| {
                g.node(id)
                    .is_some_and(|n| n.op().is(Op::ScaledDotProductAttention))
            })
            .expect("fused node");
        assert_eq!(
            g.node(sdpa).map(|n| n.operands().len()),
            Some(4),
            "{name}: the position scores are the fused node's mask:\n{}",
            left()
        );
    }
    ort_support::run_sets(&g, &sets, &default_stack(), "optimised, default stack")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let bytes = to_bytes(&g).unwrap_or_else(|e| panic!("{name}: save: {e}"));
    let ops = ort_support::written_ops(&g);
    assert!(
        ops.iter().any(|o| o == "Attention"),
        "{name}: no `Attention` written: {ops:?}"
    );
    let back = load_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: load back: {e}"));
    ort_support::run_sets(&back, &sets, &reference_stack(), "loaded back")
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    ort_support::saved_model_runs_in_onnxruntime(name, &bytes, &sets, &back);
}

#[test]
fn torch_logsumexp_with_keepdim_from_torchscript_fuses() {
    check("lse_keepdim", Scores::Plain);
}

#[test]
fn torch_logsumexp_without_keepdim_then_unsqueezed_fuses() {
    check("lse_unsqueeze", Scores::Plain);
}

#[test]
fn torch_logsumexp_from_dynamo_fuses() {
    check("lse_dynamo", Scores::Plain);
}

#[test]
fn log_sum_exp_written_with_the_max_shift_fuses() {
    check("max_shifted", Scores::Plain);
}

#[test]
fn log_sum_exp_with_max_values_and_the_sum_first_fuses() {
    check("max_shifted_values", Scores::Plain);
}

#[test]
fn exp_of_log_softmax_fuses() {
    check("log_softmax_exp", Scores::Plain);
}

#[test]
fn transformer_xl_relative_shift_stays_the_mask_of_a_fused_attention() {
    check("relpos_shift", Scores::RelativeShift);
}

#[test]
fn transformer_xl_relative_shift_under_a_causal_mask_from_dynamo_fuses() {
    check("relpos_shift_causal", Scores::RelativeShift);
}
