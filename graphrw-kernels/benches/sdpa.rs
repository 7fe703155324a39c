//! Criterion benchmark of the fused SDPA kernel against the unfused reference.
//!
//! Run with `cargo bench -p graphrw-kernels --bench sdpa` (add `-- --quick` or a filter
//! such as `-- 'sdpa/f32/d64/s1024'`).
//!
//! Each benchmark is `sdpa/{dtype}/d{D}/s{S}/{fused|unfused}` with B = 1, H = 8,
//! Sq = Skv = S, no mask, not causal. Throughput is `Elements(4 * B * H * S * S * D)`,
//! the floating-point operations of `q k^T` and `p v`, so criterion's "Gelem/s" reads
//! as GFLOP/s. The unfused side is `cpu::sdpa_reference`, which materialises the
//! `S x S` scores of every head it works on; it is skipped at S = 4096 (about 1 s per
//! call and 64 MiB per score matrix, which makes the run take minutes).
//!
//! Peak extra bytes are computed analytically and printed once per shape:
//! - unfused graph: the `[B, H, S, S]` scores and probabilities, both live between
//!   `softmax` and the second `matmul` (in the tensor dtype);
//! - unfused reference kernel: one f32 `S x S` matrix per thread in flight;
//! - fused kernel: per thread, the query, score and accumulator tiles and the running
//!   statistics (f32), plus the f32 key/value blocks for f16/bf16.

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use graphrw_kernels::fused::sdpa::{BLOCK_K, BLOCK_Q};
use graphrw_kernels::fused::{sdpa, SdpaOptions};
use graphrw_kernels::{cpu, DType, Tensor};

const B: usize = 1;
const H: usize = 8;

fn ramp(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| (((i + seed) * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    Tensor::from_f64_slice(dtype, shape, &vals).expect("shape matches data")
}

fn mib(bytes: usize) -> String {
    format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64)
}

fn bench_sdpa(c: &mut Criterion) {
    let threads = rayon::current_num_threads();
    let mut g = c.benchmark_group("sdpa");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for d in [64usize, 128] {
            for s in [128usize, 512, 1024, 2048, 4096] {
                let q = ramp(dtype, &[B, H, s, d], 0);
                let k = ramp(dtype, &[B, H, s, d], 1);
                let v = ramp(dtype, &[B, H, s, d], 2);
                let flops = (4 * B * H * s * s * d) as u64;
                let elem = dtype.size_in_bytes();
                let graph_bytes = 2 * B * H * s * s * elem;
                let ref_bytes = threads.min(B * H) * s * s * 4;
                let half_kv = if dtype == DType::F32 {
                    0
                } else {
                    BLOCK_K * 2 * d
                };
                let fused_bytes = threads * 4 * (BLOCK_Q * (d + d + BLOCK_K + 4) + half_kv);
                println!(
                    "sdpa/{dtype}/d{d}/s{s}: peak extra bytes: unfused graph {}, unfused \
                     reference kernel {}, fused {} ({threads} threads)",
                    mib(graph_bytes),
                    mib(ref_bytes),
                    mib(fused_bytes),
                );
                g.throughput(Throughput::Elements(flops));
                let opts = SdpaOptions::default();
                g.bench_function(format!("{dtype}/d{d}/s{s}/fused"), |bch| {
                    bch.iter(|| sdpa(black_box(&q), &k, &v, None, &opts).expect("sdpa"))
                });
                if s < 4096 {
                    g.bench_function(format!("{dtype}/d{d}/s{s}/unfused"), |bch| {
                        bch.iter(|| {
                            cpu::sdpa_reference(black_box(&q), &k, &v, None, false, None, false)
                                .expect("sdpa_reference")
                        })
                    });
                }
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench_sdpa);
criterion_main!(benches);
