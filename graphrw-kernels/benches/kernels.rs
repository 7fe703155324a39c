//! Criterion benchmarks of the hot CPU kernels.
//!
//! Run with `cargo bench -p graphrw-kernels --bench kernels`.
//!
//! How to read the numbers: every benchmark sets a `Throughput`, so criterion prints a
//! rate next to the time.
//! - `matmul/*` use `Throughput::Elements(2 * m * k * n)`, the floating-point operations
//!   of the product: criterion's "Gelem/s" for these is directly GFLOP/s.
//! - `softmax` and `layer_norm` use `Throughput::Bytes` of the input read (the output
//!   written is as large again); these kernels are memory-bound, so compare their GiB/s
//!   with the machine's memory bandwidth.
//! - `binary/*` use `Throughput::Elements` of the output.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use graphrw_kernels::cpu::{self, BinaryOp};
use graphrw_kernels::{DType, Tensor};

fn ramp(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    Tensor::from_f64_slice(dtype, shape, &vals).expect("shape matches data")
}

/// A matmul benchmark: name, dtype, lhs shape, rhs shape, flops.
type MatmulCase = (&'static str, DType, Vec<usize>, Vec<usize>, u64);

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul");
    let cases: [MatmulCase; 4] = [
        (
            "512x512x512_f32",
            DType::F32,
            vec![512, 512],
            vec![512, 512],
            2 * 512 * 512 * 512,
        ),
        (
            "512x512x512_bf16",
            DType::BF16,
            vec![512, 512],
            vec![512, 512],
            2 * 512 * 512 * 512,
        ),
        (
            "attn_scores_12x128x64x128_f32",
            DType::F32,
            vec![12, 128, 64],
            vec![12, 64, 128],
            2 * 12 * 128 * 64 * 128,
        ),
        (
            "attn_scores_12x128x64x128_f16",
            DType::F16,
            vec![12, 128, 64],
            vec![12, 64, 128],
            2 * 12 * 128 * 64 * 128,
        ),
    ];
    for (name, dtype, sa, sb, flops) in cases {
        let (a, b) = (ramp(dtype, &sa), ramp(dtype, &sb));
        g.throughput(Throughput::Elements(flops));
        g.bench_function(name, |bench| {
            bench.iter(|| cpu::matmul(black_box(&a), black_box(&b)))
        });
    }
    g.finish();
}

fn softmax(c: &mut Criterion) {
    let mut g = c.benchmark_group("softmax");
    let x = ramp(DType::F32, &[12, 512, 512]);
    g.throughput(Throughput::Bytes(x.nbytes() as u64));
    g.bench_function("12x512x512_f32_dim-1", |bench| {
        bench.iter(|| cpu::softmax(black_box(&x), -1))
    });
    g.finish();
}

fn layer_norm(c: &mut Criterion) {
    let mut g = c.benchmark_group("layer_norm");
    let x = ramp(DType::F32, &[512, 768]);
    let w = ramp(DType::F32, &[768]);
    let b = ramp(DType::F32, &[768]);
    g.throughput(Throughput::Bytes(x.nbytes() as u64));
    g.bench_function("512x768_f32", |bench| {
        bench.iter(|| cpu::layer_norm(black_box(&x), Some(&w), Some(&b), -1, 1e-5))
    });
    g.finish();
}

fn binary(c: &mut Criterion) {
    let mut g = c.benchmark_group("binary");
    let a = ramp(DType::F32, &[1024, 1024]);
    let same = ramp(DType::F32, &[1024, 1024]);
    let row = ramp(DType::F32, &[1024]);
    let col = ramp(DType::F32, &[1024, 1]);
    g.throughput(Throughput::Elements(a.numel() as u64));
    g.bench_function("add_same_shape_1M_f32", |bench| {
        bench.iter(|| cpu::binary(BinaryOp::Add, black_box(&a), &same))
    });
    g.bench_function("add_row_broadcast_1M_f32", |bench| {
        bench.iter(|| cpu::binary(BinaryOp::Add, black_box(&a), &row))
    });
    g.bench_function("add_col_broadcast_1M_f32", |bench| {
        bench.iter(|| cpu::binary(BinaryOp::Add, black_box(&a), &col))
    });
    g.finish();
}

criterion_group!(benches, matmul, softmax, layer_norm, binary);
criterion_main!(benches);
