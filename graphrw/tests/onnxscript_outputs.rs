//! Models that onnxscript's `optimize_for_ort` wrote (issue #56 goal 3), committed in
//! `tests/models/onnxscript_for_ort/` (made by its `gen.py` from the small corpus exports):
//! its `SkipLayerNormalization`s name their unread statistics outputs, its attention
//! blocks are `Attention` / `MultiHeadAttention`, a TorchScript export's scores are a
//! `FusedMatMul`. Each loads with no node left opaque, runs on the reference stack and,
//! optimised, on the default stack, and matches onnxruntime on the same file. The
//! inputs are made here: batch 2 and 13 tokens where the axes are dynamic (the exports'
//! own shapes are other), ids below 100, the second row's last 4 tokens masked out.

mod ort_support;

use std::path::{Path, PathBuf};

use graphrw::graph::Value;
use graphrw::{DType, Graph, Tensor};

/// The committed models, in name order.
fn models() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/onnxscript_for_ort");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the committed models")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    out.sort();
    out
}

/// `input_ids` and `attention_mask` for `g`'s inputs: dynamic dims as batch 2 × 13 tokens.
fn inputs(g: &Graph) -> Vec<Tensor> {
    g.inputs()
        .iter()
        .map(|&id| {
            let node = g.node(id).expect("input node");
            let meta = g
                .meta(Value {
                    node: id,
                    output: 0,
                })
                .expect("input meta");
            assert_eq!(meta.dtype, DType::I64, "{:?}", node.name());
            let dims: Vec<usize> = meta
                .shape
                .dims()
                .iter()
                .zip([2, 13])
                .map(|(d, dynamic)| d.known().map_or(dynamic, |n| n as usize))
                .collect();
            let (rows, cols) = (dims[0], dims[1]);
            let values: Vec<i64> = if node.name().is_some_and(|n| n.contains("mask")) {
                (0..rows * cols)
                    .map(|i| i64::from(!(i / cols == 1 && i % cols >= cols - 4)))
                    .collect()
            } else {
                (0..rows * cols)
                    .map(|i| ((i * 31 + 7) % 100) as i64)
                    .collect()
            };
            Tensor::from_vec(dims, values).expect("tensor")
        })
        .collect()
}

#[test]
fn what_onnxscript_writes_for_onnxruntime_loads_and_runs_as_onnxruntime_runs_it() {
    let models = models();
    assert!(models.len() >= 4, "{models:?}");
    let mut ours = Vec::new();
    let mut cases = Vec::new();
    for path in &models {
        let name = path
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(path).expect("read");
        let g = graphrw::onnx::load_bytes(&bytes).expect("loads");
        let fed = inputs(&g);
        let (_, reference) = ort_support::load_and_run_both_ways(&name, &bytes, &fed);
        ours.push(reference);
        cases.push(ort_support::Case {
            name,
            model: bytes,
            inputs: fed,
        });
    }
    let Some(python) = ort_support::python_or_skip("onnxscript's outputs are not compared") else {
        return;
    };
    for ((case, got), want) in cases
        .iter()
        .zip(&ours)
        .zip(ort_support::run_all(&python, &cases))
    {
        let want = want.unwrap_or_else(|e| panic!("{}: onnxruntime: {e}", case.name));
        ort_support::same_all(got, &want)
            .unwrap_or_else(|e| panic!("{}: against onnxruntime: {e}", case.name));
    }
}
