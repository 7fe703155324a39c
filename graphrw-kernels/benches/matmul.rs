//! The two GEMM backends side by side in one run, on the shapes of the main example's
//! GPT-style model (hidden 768, sequence 512) and on small products (where the backend
//! choice of `GemmBackend::Auto` is made), plus the fused bias + GELU epilogue against
//! the product followed by separate `add` and `gelu` kernels, and (`packed_weight`) the
//! AVX-512 GEMM on a weight packed beforehand against the `gemm` crate, which packs it
//! on every call, on the model's projections and on widths whose rows lie 4 KiB apart
//! (`cargo bench -p graphrw-kernels --bench matmul -- packed_weight`).
//!
//! Run with `cargo bench -p graphrw-kernels --bench matmul`. Every benchmark sets
//! `Throughput::Elements(2 m k n)`, so criterion's "Gelem/s" is GFLOP/s; compare the
//! `gemm` and `matrixmultiply` lines of one shape (measured in the same run).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use graphrw_kernels::cpu::UnaryOp;
use graphrw_kernels::cpu::{self, Activation, BinaryOp, Epilogue, GemmBackend, PackedWeight};
use graphrw_kernels::{DType, Tensor};

fn ramp(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| (((i + seed) * 7919) % 1000) as f64 / 5000.0 - 0.1)
        .collect();
    Tensor::from_f64_slice(DType::F32, shape, &vals).expect("shape matches data")
}

/// (name, lhs shape, rhs shape).
type Case = (&'static str, Vec<usize>, Vec<usize>);

fn backends(c: &mut Criterion) {
    let cases: Vec<Case> = vec![
        ("qkv_512x768x2304", vec![1, 512, 768], vec![768, 2304]),
        ("proj_512x768x768", vec![1, 512, 768], vec![768, 768]),
        ("mlp_up_512x768x3072", vec![1, 512, 768], vec![768, 3072]),
        ("mlp_down_512x3072x768", vec![1, 512, 3072], vec![3072, 768]),
        ("scores_12x512x64x512", vec![12, 512, 64], vec![12, 64, 512]),
        ("small_64x64x64", vec![64, 64], vec![64, 64]),
        ("small_16x16x16", vec![16, 16], vec![16, 16]),
        ("tiny_8x8x8", vec![8, 8], vec![8, 8]),
        ("tiny_4x4x4", vec![4, 4], vec![4, 4]),
    ];
    let mut g = c.benchmark_group("matmul_backend");
    for (name, sa, sb) in &cases {
        let (a, b) = (ramp(sa, 1), ramp(sb, 2));
        let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
        let n = sb[sb.len() - 1];
        let batch: usize = sa[..sa.len() - 2].iter().product();
        g.throughput(Throughput::Elements((2 * batch * m * k * n) as u64));
        if m * k * n > 1 << 20 {
            g.sample_size(20);
        } else {
            g.sample_size(100);
        }
        for (label, backend) in [
            ("gemm", GemmBackend::Gemm),
            ("matrixmultiply", GemmBackend::MatrixMultiply),
        ] {
            g.bench_with_input(BenchmarkId::new(*name, label), &backend, |bch, &be| {
                bch.iter(|| cpu::matmul_with(black_box(&a), black_box(&b), be).expect("matmul"))
            });
        }
    }
    g.finish();
}

fn epilogue(c: &mut Criterion) {
    let (a, w, bias) = (
        ramp(&[1, 512, 768], 1),
        ramp(&[768, 3072], 2),
        ramp(&[3072], 3),
    );
    let mut g = c.benchmark_group("matmul_epilogue");
    g.throughput(Throughput::Elements(2 * 512 * 768 * 3072));
    g.sample_size(20);
    g.bench_function("bias_gelu_fused", |bch| {
        bch.iter(|| {
            cpu::matmul_epilogue(
                black_box(&a),
                black_box(&w),
                Some(&bias),
                Activation::GeluTanh,
                GemmBackend::Auto,
            )
            .expect("matmul_epilogue")
        })
    });
    g.bench_function("bias_gelu_separate", |bch| {
        bch.iter(|| {
            let y = cpu::matmul(black_box(&a), black_box(&w)).expect("matmul");
            let y = cpu::binary(BinaryOp::Add, &y, &bias).expect("add");
            cpu::unary(UnaryOp::GeluTanh, &y).expect("gelu")
        })
    });
    g.finish();
}

/// The packed-weight GEMM (`Epilogue::packed`) against the `gemm` crate on the same
/// product, bias included: each shape's two lines come from one run. Nothing to compare
/// on a CPU without AVX-512F (no weight is packed there).
fn packed_weight(c: &mut Criterion) {
    let shapes = [
        (512, 768, 768),
        (512, 768, 3072),
        (512, 3072, 768),
        (512, 1024, 1024),
        (512, 4096, 1024),
    ];
    let mut g = c.benchmark_group("packed_weight");
    g.sample_size(20);
    for (m, k, n) in shapes {
        let (a, w, bias) = (ramp(&[m, k], 1), ramp(&[k, n], 2), ramp(&[n], 3));
        let Some(packed) = PackedWeight::new(&w, None) else {
            continue;
        };
        g.throughput(Throughput::Elements((2 * m * k * n) as u64));
        let label = format!("{m}x{k}x{n}");
        for (side, packed) in [("packed", Some(&packed)), ("gemm_crate", None)] {
            let epilogue = Epilogue {
                bias: Some(&bias),
                packed,
                ..Epilogue::default()
            };
            g.bench_function(BenchmarkId::new(&label, side), |bch| {
                bch.iter(|| {
                    cpu::matmul_epilogue_with(black_box(&a), &w, &epilogue, GemmBackend::Gemm)
                        .expect("matmul_epilogue")
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, backends, epilogue, packed_weight);
criterion_main!(benches);
