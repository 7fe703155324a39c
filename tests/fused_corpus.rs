//! The built-in fused kernels on the real corpus: after attention fusion, the chains the
//! exporters emit (erf/tanh GELU, RMSNorm, SwiGLU, residual add + LayerNorm, the Llama
//! rotary embeddings' rotate-half) become fused nodes, run on the generated kernels, and
//! the model still matches onnxruntime's `output_0.pb` (1e-4 absolute + 1e-3 relative).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphrw::exec::{generated_executor, GENERATED_CPU};
use graphrw::exec::{plan, Executor, FusedCpu, ReferenceCpu};
use graphrw::generated::fuse_kernels;
use graphrw::{onnx, rules, verify, Tensor};
use graphrw_kernels::testing::compare::{check_close_tensor, Tol};

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

fn inputs(dir: &Path) -> Vec<Tensor> {
    let mut v = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("test_data_set_0/input_{i}.pb"));
        if !p.exists() {
            break;
        }
        v.push(onnx::read_tensor_pb(&p).expect("input").1);
    }
    v
}

#[test]
fn fused_kernels_fire_on_the_corpus_and_outputs_match() {
    let stack: Vec<Arc<dyn Executor>> = vec![
        Arc::new(generated_executor()),
        Arc::new(FusedCpu),
        Arc::new(ReferenceCpu),
    ];
    let mut failures = Vec::new();
    let mut total: BTreeMap<&'static str, usize> = BTreeMap::new();
    for model in MODELS {
        let dir = corpus().join(model);
        let mut graph = onnx::load(dir.join("model.onnx")).expect("load");
        // Each rotate-half chain (slice, slice, neg, concat) holds the model's only `neg`s.
        let rotate_halves = graph.nodes_with_op("neg").count();
        rules::fuse_attention(&mut graph).expect("attention fusion");
        let report = fuse_kernels(&mut graph).expect("kernel fusion");
        verify(&graph).expect("verified");
        let mut fired: BTreeMap<&'static str, usize> = BTreeMap::new();
        for (op, n) in graph.op_counts() {
            if op.starts_with("fused.") {
                fired.insert(op, n);
                *total.entry(op).or_default() += n;
            }
        }
        println!("{model}: {fired:?}");
        if model.starts_with("llama") {
            let rotary = fired.get("fused.rotary_embedding").copied().unwrap_or(0);
            println!(
                "{model}: {rotary} rotary embeddings fused of {rotate_halves} rotate-half chains"
            );
            if rotate_halves == 0 || rotary != rotate_halves {
                failures.push(format!(
                    "{model}: {rotary} fused.rotary_embedding nodes for {rotate_halves} rotate-half chains\n{report}"
                ));
            }
            if graph.nodes_with_op("neg").count() != 0 {
                failures.push(format!(
                    "{model}: a rotate-half chain is left unfused\n{graph}"
                ));
            }
        }
        if fired.is_empty() {
            failures.push(format!("{model}: no fused kernel fired\n{report}"));
            continue;
        }
        let p = plan(&graph, &stack).expect("plan");
        if !p.assignments().any(|(_, e)| e == GENERATED_CPU) {
            failures.push(format!(
                "{model}: fused nodes not run by the generated kernels"
            ));
        }
        for n in p.graph().nodes_with_op("fused.rotary_embedding") {
            if p.executor_of(n) != Some(GENERATED_CPU) {
                failures.push(format!(
                    "{model}: a rotary embedding not run by its generated kernel\n{p}"
                ));
            }
        }
        let (mut out, _) = p.run(&inputs(&dir)).expect("run");
        let (_, want) =
            onnx::read_tensor_pb(dir.join("test_data_set_0/output_0.pb")).expect("output");
        let got = out.remove(0);
        if let Err(e) = check_close_tensor(&got, &want, Tol::new(1e-4, 1e-3)) {
            failures.push(format!("{model}: {e} (the reference is onnxruntime's)"));
        }
    }
    println!("fused nodes over the corpus: {total:?}");
    // What the corpus computes in decomposed form (see the README of graphrw::generated).
    for op in [
        "fused.gelu_tanh",
        "fused.bias_gelu",
        "fused.rms_norm",
        "fused.swiglu",
        "fused.add_layer_norm",
        "fused.rotary_embedding",
    ] {
        if !total.contains_key(op) {
            failures.push(format!("{op} fired nowhere in the corpus"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
