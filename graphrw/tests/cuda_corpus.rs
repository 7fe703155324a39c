//! Whole corpus models on the GPU (feature `cuda`): each of the 8 models of
//! `../shared/corpus` (or `$GRAPHRW_CORPUS`), as exported, after attention fusion and
//! after the full default pipeline (`rules::optimize`, with generated kernels), is
//! planned on the CUDA stack, must run every kernel node on the GPU, must download
//! nothing but its outputs, and must match onnxruntime's `output_0.pb` within 1e-4
//! absolute + 1e-3 relative. Without a CUDA device it prints `skipped: ...` and returns.
#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphrw::exec::{plan, CudaExecutor, Executor, FusedCpu, ReferenceCpu};
use graphrw::generated::builtin;
use graphrw::{rules, Graph, Tensor};

const ATOL: f64 = 1e-4;
const RTOL: f64 = 1e-3;

mod onnx_support;
use onnx_support::{CORPUS, CORPUS_MODELS as MODELS};

fn corpus() -> PathBuf {
    std::env::var_os("GRAPHRW_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CORPUS))
}

fn inputs(set: &Path, count: usize) -> Vec<Tensor> {
    (0..count)
        .map(|i| {
            graphrw::onnx::read_tensor_pb(set.join(format!("input_{i}.pb")))
                .expect("input pb")
                .1
        })
        .collect()
}

/// Max abs error, or an error naming the first element beyond tolerance.
fn compare(got: &Tensor, want: &Tensor) -> Result<f64, String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let mut max_abs: f64 = 0.0;
    for (i, (g, w)) in got
        .to_f64_vec()
        .into_iter()
        .zip(want.to_f64_vec())
        .enumerate()
    {
        let d = (g - w).abs();
        if d.is_nan() || d > ATOL + RTOL * w.abs() {
            return Err(format!("element {i} is {g}, onnxruntime gives {w}"));
        }
        max_abs = max_abs.max(d);
    }
    Ok(max_abs)
}

fn run_on_gpu(
    cuda: &CudaExecutor,
    graph: &Graph,
    inputs: &[Tensor],
    want: &Tensor,
) -> Result<String, String> {
    let stack: Vec<Arc<dyn Executor>> = vec![
        Arc::new(cuda.clone()),
        Arc::new(FusedCpu),
        Arc::new(ReferenceCpu),
    ];
    let p = plan(graph, &stack).map_err(|e| e.to_string())?;
    let on_cpu: Vec<String> = p
        .assignments()
        .filter(|(_, e)| *e != cuda.name())
        .map(|(n, e)| {
            format!(
                "{} on {e}",
                p.graph().try_node(n).map(|n| n.op_name()).unwrap_or("?")
            )
        })
        .collect();
    if !on_cpu.is_empty() {
        return Err(format!("nodes not on the GPU: {on_cpu:?}"));
    }
    let ops = p.assignments().count();
    let before = cuda.transfers();
    let (out, report) = p.run(inputs).map_err(|e| e.to_string())?;
    let after = cuda.transfers();
    let downloads = after.downloads - before.downloads;
    let uploads = after.uploads - before.uploads;
    if downloads != graph.outputs().len() || report.outputs_downloaded != graph.outputs().len() {
        return Err(format!(
            "{downloads} downloads for {} outputs (only outputs may leave the device)",
            graph.outputs().len()
        ));
    }
    let err = compare(&out[0], want)?;
    Ok(format!(
        "{ops} ops on the GPU, {uploads} uploads, {downloads} downloads, max abs error {err:.3e}, {:.2} ms",
        report.total.as_secs_f64() * 1e3
    ))
}

/// Nodes of `graph` whose op is a built-in generated kernel.
fn generated_nodes(graph: &Graph) -> usize {
    graph
        .node_ids()
        .filter_map(|id| graph.node(id))
        .filter(|n| builtin::ALL.iter().any(|k| k.op.name == n.op_name()))
        .count()
}

#[test]
fn every_corpus_model_runs_on_the_gpu() {
    let cuda = match CudaExecutor::new(0) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: no CUDA device: every_corpus_model_runs_on_the_gpu: {e}");
            return;
        }
    };
    eprintln!("running on {:?}", cuda.device());
    let mut failures = Vec::new();
    for model in MODELS {
        let dir = corpus().join(model);
        let graph =
            graphrw::onnx::load(dir.join("model.onnx")).unwrap_or_else(|e| panic!("{model}: {e}"));
        let set = dir.join("test_data_set_0");
        let inputs = inputs(&set, graph.inputs().len());
        let (_, want) = graphrw::onnx::read_tensor_pb(set.join("output_0.pb")).expect("output pb");
        let mut fused = graph.clone();
        rules::fuse_attention(&mut fused).unwrap_or_else(|e| panic!("{model}: fusion: {e}"));
        // The full default pipeline: attention, causal masks, then the generated kernels,
        // whose nodes must all run on the GPU too (run_on_gpu refuses any CPU node).
        let mut optimized = graph.clone();
        rules::optimize(&mut optimized).unwrap_or_else(|e| panic!("{model}: optimize: {e}"));
        let generated = generated_nodes(&optimized);
        eprintln!("{model}: rules::optimize made {generated} generated-kernel nodes");
        for (form, g) in [
            ("as exported", &graph),
            ("fused", &fused),
            ("optimized", &optimized),
        ] {
            match run_on_gpu(&cuda, g, &inputs, &want) {
                Ok(line) => eprintln!("{model} ({form}): {line}"),
                Err(e) => {
                    eprintln!("{model} ({form}): FAIL: {e}");
                    failures.push(format!("{model} ({form}): {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
