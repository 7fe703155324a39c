//! The real corpus end to end: every model in `../shared/corpus/*/` loads, runs with
//! the reference executor on `test_data_set_0/input_*.pb`, and matches onnxruntime's
//! `output_0.pb` within 1e-4 absolute + 1e-3 relative; so does the same model after an
//! ONNX export and re-import.

use std::path::{Path, PathBuf};

use graphrw::Tensor;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus");
const ATOL: f64 = 1e-4;
const RTOL: f64 = 1e-3;

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

fn inputs(set: &Path, count: usize) -> Vec<Tensor> {
    (0..count)
        .map(|i| {
            let (_, t) =
                graphrw::onnx::read_tensor_pb(set.join(format!("input_{i}.pb"))).expect("input pb");
            t
        })
        .collect()
}

/// Max abs error, or a panic naming the first element beyond tolerance.
fn check(model: &str, got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape(), "{model}: output shape");
    let mut max_abs: f64 = 0.0;
    for (i, (g, w)) in got
        .to_f64_vec()
        .into_iter()
        .zip(want.to_f64_vec())
        .enumerate()
    {
        let d = (g - w).abs();
        assert!(
            d <= ATOL + RTOL * w.abs(),
            "{model}: element {i} is {g}, onnxruntime gives {w}"
        );
        max_abs = max_abs.max(d);
    }
    max_abs
}

#[test]
fn every_corpus_model_matches_onnxruntime() {
    for model in MODELS {
        let dir = PathBuf::from(CORPUS).join(model);
        let graph =
            graphrw::onnx::load(dir.join("model.onnx")).unwrap_or_else(|e| panic!("{model}: {e}"));
        let set = dir.join("test_data_set_0");
        let inputs = inputs(&set, graph.inputs().len());
        let (_, want) = graphrw::onnx::read_tensor_pb(set.join("output_0.pb")).expect("output pb");
        let got = graphrw::exec::run_reference(&graph, &inputs)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let err = check(model, &got[0], &want);
        println!("{model}: max abs error {err:.3e}");

        let exported =
            graphrw::onnx::to_bytes(&graph).unwrap_or_else(|e| panic!("{model}: export: {e}"));
        let again = graphrw::onnx::load_bytes(&exported)
            .unwrap_or_else(|e| panic!("{model}: re-import: {e}"));
        let got = graphrw::exec::run_reference(&again, &inputs)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        check(model, &got[0], &want);
    }
}
