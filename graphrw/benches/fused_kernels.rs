//! Generated fused kernels against the unfused chain (their decomposition on the
//! reference executor) and against a plain copy of the same bytes, at 1 M and 16 M
//! output elements (f32, rows of 1024; weights and biases `[1024]`, masks `[1, 1024]`).
//!
//! Throughput is the bytes the fused kernel must move (its operands read once, its
//! output written once), so criterion's GB/s compare directly: `fused / copy` is the
//! fraction of copy bandwidth, `fused / unfused` the speed-up.
//!
//! `cargo bench -p graphrw --bench fused_kernels -- --warm-up-time 1 --measurement-time 3`
//! (add a filter such as `rms_norm` to run one kernel).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use graphrw::exec::{plan, Executor, Plan, ReferenceCpu};
use graphrw::fused::{builtin, FusedKernel};
use graphrw::ops::AttrValue;
use graphrw::{Builder, DType, Dim, Tensor, TensorMeta};

const ROW: usize = 1024;

fn shape_of(param: &str, rows: usize) -> Vec<usize> {
    match param {
        "weight" | "bias" => vec![ROW],
        "mask" => vec![1, ROW],
        _ => vec![rows, ROW],
    }
}

fn scalar_of(name: &str) -> f64 {
    match name {
        "eps" => 1e-5,
        "scale" => 0.125,
        _ => 1.0,
    }
}

fn unfused_plan(k: &FusedKernel, shapes: &[Vec<usize>]) -> Plan {
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
    // The reference stack has no kernel for the fused op: it runs the decomposition.
    let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
    plan(&g.finish(), &stack).expect("plan")
}

fn bench(c: &mut Criterion) {
    for &(label, elems) in &[("1M", 1usize << 20), ("16M", 1usize << 24)] {
        let rows = elems / ROW;
        let mut group = c.benchmark_group(format!("fused_kernels/{label}"));
        group.sample_size(10);
        for k in builtin::ALL {
            let shapes: Vec<Vec<usize>> = k.tensors.iter().map(|t| shape_of(t, rows)).collect();
            let inputs: Vec<Tensor> = shapes
                .iter()
                .map(|s| {
                    let n: usize = s.iter().product();
                    let v: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 24.0).collect();
                    Tensor::from_vec(s.clone(), v).expect("tensor")
                })
                .collect();
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let scalars: Vec<f64> = k.scalars.iter().map(|s| scalar_of(s)).collect();
            let bytes = (inputs.iter().map(|t| t.nbytes()).sum::<usize>() + elems * 4) as u64;
            group.throughput(Throughput::Bytes(bytes));
            let name = k.op.name.trim_start_matches("fused.");
            group.bench_function(BenchmarkId::new("fused", name), |b| {
                b.iter(|| (k.cpu)(&refs, &scalars, DType::F32).expect("kernel"))
            });
            let p = unfused_plan(k, &shapes);
            group.bench_function(BenchmarkId::new("unfused", name), |b| {
                b.iter(|| p.run(&inputs).expect("run"))
            });
            // A plain copy moving the same bytes: read half, write half.
            let src = vec![1f32; (bytes / 8) as usize];
            group.bench_function(BenchmarkId::new("copy", name), |b| b.iter(|| src.clone()));
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
