//! Criterion benchmark of the fused SDPA backward kernel against the decomposed
//! backward graph (the op sequence of `graphrw::ops::decompose::sdpa_backward`, run
//! with the same reference CPU kernels the reference executor uses).
//!
//! Run with `cargo bench -p graphrw-kernels --bench sdpa_backward` (add a filter such
//! as `-- 'sdpa_backward/f32/d64/s512'`, and `--warm-up-time 1 --measurement-time 3`).
//!
//! Each benchmark is `sdpa_backward/{dtype}/d{D}/s{S}/{fused|decomposed}` with B = 1,
//! H = 8, Sq = Skv = S, no mask, not causal. Throughput is
//! `Elements(10 * B * H * S * S * D)`: the floating-point operations of the five
//! products of the backward (`q k^T`, `p^T dout`, `dout v^T`, `ds k`, `ds^T q`), so
//! criterion's "Gelem/s" reads as GFLOP/s. The fused kernel recomputes `q k^T` twice
//! more and `dout v^T` once more than that count (its price for not storing `p`).
//!
//! Peak extra bytes (printed once per shape): the decomposed graph holds at least three
//! `[B, H, S, S]` matrices at once (`p`, `dp`, and their product or `ds`); the fused
//! kernel holds `2 * B * H * S` row statistics and, per thread, two score tiles and
//! one product tile.

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use graphrw_kernels::cpu::{self, BinaryOp, ReduceOp, UnaryOp};
use graphrw_kernels::fused::sdpa_backward::{sdpa_backward, BWD_BLOCK_K, BWD_BLOCK_Q};
use graphrw_kernels::fused::{sdpa, FullyMaskedRows, SdpaOptions};
use graphrw_kernels::{DType, KernelError, Tensor};

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

/// The decomposed backward graph, node by node.
fn decomposed(
    dout: &Tensor,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: &Tensor,
    zero: &Tensor,
) -> Result<[Tensor; 3], KernelError> {
    use BinaryOp::{Mul, Sub};
    let s = cpu::matmul(q, &cpu::transpose(k, -2, -1)?)?;
    let s = cpu::binary(Mul, &s, scale)?;
    let p = cpu::softmax(&s, -1)?;
    let p = cpu::where_(&cpu::unary(UnaryOp::IsNan, &p)?, zero, &p)?;
    let dv = cpu::matmul(&cpu::transpose(&p, -2, -1)?, dout)?;
    let dp = cpu::matmul(dout, &cpu::transpose(v, -2, -1)?)?;
    let rows = cpu::reduce(ReduceOp::Sum, &cpu::binary(Mul, &dp, &p)?, &[-1], true)?;
    let ds = cpu::binary(Mul, &p, &cpu::binary(Sub, &dp, &rows)?)?;
    let dq = cpu::binary(Mul, &cpu::matmul(&ds, k)?, scale)?;
    let dk = cpu::binary(Mul, &cpu::matmul(&cpu::transpose(&ds, -2, -1)?, q)?, scale)?;
    Ok([dq, dk, dv])
}

fn bench_sdpa_backward(c: &mut Criterion) {
    let threads = rayon::current_num_threads();
    let mut g = c.benchmark_group("sdpa_backward");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for dtype in [DType::F32, DType::BF16] {
        let d = 64usize;
        for s in [128usize, 512, 1024] {
            let shape = [B, H, s, d];
            let (q, k, v, dout) = (
                ramp(dtype, &shape, 0),
                ramp(dtype, &shape, 1),
                ramp(dtype, &shape, 2),
                ramp(dtype, &shape, 3),
            );
            let opts = SdpaOptions {
                fully_masked_rows: FullyMaskedRows::Zero,
                ..Default::default()
            };
            let out = sdpa(&q, &k, &v, None, &opts).expect("sdpa");
            let scale_v = 1.0 / (d as f64).sqrt();
            let scale = Tensor::full(dtype, &[], scale_v);
            let zero = Tensor::full(dtype, &[], 0.0);
            let elem = dtype.size_in_bytes();
            println!(
                "sdpa_backward/{dtype}/d{d}/s{s}: peak extra bytes: decomposed >= {}, fused {} \
                 ({threads} threads)",
                mib(3 * B * H * s * s * elem),
                mib(2 * B * H * s * 4
                    + threads * 4 * (2 * BWD_BLOCK_Q * BWD_BLOCK_K + BWD_BLOCK_K * d)),
            );
            g.throughput(Throughput::Elements((10 * B * H * s * s * d) as u64));
            g.bench_function(format!("{dtype}/d{d}/s{s}/fused"), |bch| {
                bch.iter(|| {
                    sdpa_backward(black_box(&dout), &q, &k, &v, &out, None, &opts)
                        .expect("sdpa_backward")
                })
            });
            g.bench_function(format!("{dtype}/d{d}/s{s}/decomposed"), |bch| {
                bch.iter(|| {
                    decomposed(black_box(&dout), &q, &k, &v, &scale, &zero).expect("decomposed")
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_sdpa_backward);
criterion_main!(benches);
