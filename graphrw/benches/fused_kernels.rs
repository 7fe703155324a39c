//! Generated fused kernels against the unfused chain (their decomposition on the
//! reference executor) and against a plain copy of the same bytes, at 1 M and 16 M
//! output elements (f32, rows of 1024; weights and biases `[1024]`, masks `[1, 1024]`)
//! and at GPT-2 small's activations for a sequence of 512 (`gpt2_s512`: 512 rows of 768).
//!
//! Like is compared with like: `fused` and `unfused` are both plans of the same
//! one-node graph run through the interpreter (`fused` on `[generated, reference]`, which
//! the bench checks gives the node to the generated kernel; `unfused` on the reference
//! stack, which runs the decomposition), and `copy` is a rayon-parallel copy, as the
//! kernels are parallel (the tile-executor bench's copy).
//!
//! Throughput is the bytes the fused kernel must move (its operands read once, its
//! output written once), so criterion's GB/s compare directly: `fused / copy` is the
//! fraction of copy bandwidth, `fused / unfused` the speed-up.
//!
//! `cargo bench -p graphrw --bench fused_kernels -- --warm-up-time 1 --measurement-time 3`
//! (add a filter such as `rms_norm` to run one kernel).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use graphrw::exec::{generated_executor, GENERATED_CPU};
use graphrw::exec::{plan, Executor, Plan, ReferenceCpu};
use graphrw::generated::{builtin, FusedKernel};
use graphrw::ops::AttrValue;
use graphrw::{Builder, DType, Dim, Tensor, TensorMeta};
use rayon::prelude::*;

/// The sizes benched: label, rows, row length.
const SIZES: [(&str, usize, usize); 3] = [
    ("1M", 1 << 10, 1024),
    ("16M", 1 << 14, 1024),
    ("gpt2_s512", 512, 768),
];

fn shape_of(param: &str, rows: usize, row: usize) -> Vec<usize> {
    match param {
        "weight" | "bias" => vec![row],
        "mask" => vec![1, row],
        _ => vec![rows, row],
    }
}

fn scalar_of(name: &str) -> f64 {
    match name {
        "eps" => 1e-5,
        "scale" => 0.125,
        _ => 1.0,
    }
}

/// The one-node graph of `k` planned on `stack`.
fn one_node_plan(k: &FusedKernel, shapes: &[Vec<usize>], stack: &[Arc<dyn Executor>]) -> Plan {
    let g = Builder::new();
    let ins: Vec<_> = k
        .tensors
        .iter()
        .zip(shapes)
        .map(|(n, s)| {
            let dims: Vec<Dim> = s.iter().map(|&d| Dim::from(d)).collect();
            g.input(n, TensorMeta::new(DType::F32, dims)).value()
        })
        .collect();
    let attrs: Vec<(&str, AttrValue)> = k
        .scalars
        .iter()
        .map(|s| (*s, AttrValue::Float(scalar_of(s))))
        .collect();
    let out = g.apply(k.op, &ins, &attrs).expect("node");
    g.output(&[g.var(out[0])]).expect("output");
    plan(&g.finish(), stack).expect("plan")
}

fn bench(c: &mut Criterion) {
    let generated: Vec<Arc<dyn Executor>> =
        vec![Arc::new(generated_executor()), Arc::new(ReferenceCpu)];
    let reference: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
    for (label, rows, row) in SIZES {
        let elems = rows * row;
        let mut group = c.benchmark_group(format!("fused_kernels/{label}"));
        group.sample_size(10);
        for k in builtin::ALL {
            let shapes: Vec<Vec<usize>> =
                k.tensors.iter().map(|t| shape_of(t, rows, row)).collect();
            let inputs: Vec<Tensor> = shapes
                .iter()
                .map(|s| {
                    let n: usize = s.iter().product();
                    let v: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 24.0).collect();
                    Tensor::from_vec(s.clone(), v).expect("tensor")
                })
                .collect();
            let bytes = (inputs.iter().map(|t| t.nbytes()).sum::<usize>() + elems * 4) as u64;
            group.throughput(Throughput::Bytes(bytes));
            let name = k.op.name.trim_start_matches("fused.");
            let fused = one_node_plan(k, &shapes, &generated);
            let node = fused
                .graph()
                .nodes_with_op(k.op.name)
                .next()
                .expect("the fused node is kept");
            assert_eq!(fused.executor_of(node), Some(GENERATED_CPU), "{name}");
            group.bench_function(BenchmarkId::new("fused", name), |b| {
                b.iter(|| fused.run(&inputs).expect("run"))
            });
            // The reference stack has no kernel for the fused op: it runs the decomposition.
            let unfused = one_node_plan(k, &shapes, &reference);
            group.bench_function(BenchmarkId::new("unfused", name), |b| {
                b.iter(|| unfused.run(&inputs).expect("run"))
            });
            // A parallel copy moving the same bytes: read half, write half.
            let src = vec![1f32; (bytes / 8) as usize];
            group.bench_function(BenchmarkId::new("copy", name), |b| {
                b.iter(|| {
                    let mut dst = vec![0f32; src.len()];
                    dst.par_chunks_mut(1 << 16)
                        .zip(src.par_chunks(1 << 16))
                        .for_each(|(d, s)| d.copy_from_slice(s));
                    dst
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
