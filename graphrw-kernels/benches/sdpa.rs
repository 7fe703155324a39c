//! Criterion benchmark of the fused SDPA kernel against the unfused reference.
//!
//! Run with `cargo bench -p graphrw-kernels --bench sdpa` (add `-- --quick` or a filter
//! such as `-- 'sdpa/f32/d64/s1024'`).
//!
//! Each benchmark is `sdpa/{dtype}/d{D}/s{S}/{fused|unfused_graph|unfused}` with B = 1, H = 8,
//! Sq = Skv = S, no mask, not causal. Throughput is `Elements(4 * B * H * S * S * D)`,
//! the floating-point operations of `q k^T` and `p v`, so criterion's "Gelem/s" reads
//! as GFLOP/s. Two unfused sides, both skipped at S = 4096 (about 1 s per call and
//! 64 MiB per score matrix, which makes the run take minutes):
//! - `unfused_graph`: the graph before fusion, node by node on the reference kernels
//!   (`matmul`, `mul` by the scale, `softmax`, `matmul`), each intermediate a whole
//!   `[B, H, S, S]` tensor — what the "fused vs the unfused graph" compares;
//! - `unfused`: `cpu::sdpa_reference`, a per-head kernel that materialises one `S x S`
//!   score matrix per head in flight (a stronger baseline than the graph).
//!
//! The f32 FMA peak the GFLOP/s are compared with is printed first, two ways:
//! - nominal: cores x clock (`cpu MHz` of /proc/cpuinfo) x 2 FMA units x 8 lanes x 2
//!   flops (AVX2 cores of the Zen and Skylake families have two 256-bit FMA units);
//! - measured: `fused::sdpa::fma_peak_gflops`, 12 independent FMA chains per thread
//!   on every rayon thread (lower than nominal when other processes share the cores).
//!
//! The machine is often shared (other processes take the cores), which lowers wall-clock
//! GFLOP/s. So the f32 D=64/128 S=1024/2048 shapes are also timed in CPU time (the
//! process's user + system time from /proc/self/stat, over a few seconds of calls):
//! flops per CPU-second times the thread count estimates the uncontended rate, printed
//! as a fraction of the nominal and of the CPU-time FMA probe (rayon's idle spinning
//! counts as CPU time, so this errs low).
//!
//! Peak extra bytes are computed analytically and printed once per shape:
//! - unfused graph: the `[B, H, S, S]` scores and probabilities, both live between
//!   `softmax` and the second `matmul` (in the tensor dtype);
//! - unfused reference kernel: one f32 `S x S` matrix per thread in flight;
//! - fused kernel: per thread, the query, score and accumulator tiles and the running
//!   statistics (f32), plus the f32 key/value blocks for f16/bf16.

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use graphrw_kernels::cpu::{self, BinaryOp};
use graphrw_kernels::fused::sdpa::{fma_peak_gflops, BLOCK_K, BLOCK_Q};
use graphrw_kernels::fused::{sdpa, SdpaOptions};
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

/// The clock of the first core in /proc/cpuinfo, in GHz.
fn nominal_ghz() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("cpu MHz"))?;
    Some(line.split(':').nth(1)?.trim().parse::<f64>().ok()? / 1000.0)
}

fn print_peak(threads: usize) {
    if let Some(ghz) = nominal_ghz() {
        println!(
            "f32 FMA peak, nominal: {threads} cores x {ghz:.3} GHz x 2 FMA units x 8 lanes x 2 \
             = {:.1} GFLOP/s",
            threads as f64 * ghz * 32.0
        );
    }
    match fma_peak_gflops(threads, 50_000_000) {
        Some(g) => println!("f32 FMA peak, measured: {g:.1} GFLOP/s on {threads} threads"),
        None => println!("f32 FMA peak, measured: no AVX2+FMA on this CPU"),
    }
}

/// The process's CPU time (user + system) in seconds, from /proc/self/stat (Linux;
/// clock ticks of 1/100 s).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Runs `f` for about `secs` seconds of wall time; returns (calls, CPU seconds).
fn cpu_time_of(secs: f64, mut f: impl FnMut()) -> Option<(usize, f64)> {
    let start = std::time::Instant::now();
    let c0 = cpu_seconds()?;
    let mut calls = 0;
    while start.elapsed().as_secs_f64() < secs {
        f();
        calls += 1;
    }
    Some((calls, cpu_seconds()? - c0))
}

/// The CPU-time estimates described in the module docs.
fn print_cpu_time_rates(threads: usize) {
    let ghz = nominal_ghz().unwrap_or(f64::NAN);
    let nominal = threads as f64 * ghz * 32.0;
    let probe_iters = 200_000_000;
    let (Some(c0), Some(_), Some(c1)) = (
        cpu_seconds(),
        fma_peak_gflops(threads, probe_iters),
        cpu_seconds(),
    ) else {
        return;
    };
    let probe_cpu = c1 - c0;
    let probe = (threads * probe_iters * 12 * 16) as f64 / probe_cpu * threads as f64 / 1e9;
    println!(
        "cpu-time f32 FMA probe: {probe:.1} GFLOP/s ({threads} threads x flops per CPU-second)"
    );
    for (d, s) in [(64usize, 1024usize), (64, 2048), (128, 1024), (128, 2048)] {
        let q = ramp(DType::F32, &[B, H, s, d], 0);
        let k = ramp(DType::F32, &[B, H, s, d], 1);
        let v = ramp(DType::F32, &[B, H, s, d], 2);
        let flops = (4 * B * H * s * s * d) as f64;
        let opts = SdpaOptions::default();
        let fused = cpu_time_of(3.0, || {
            black_box(sdpa(&q, &k, &v, None, &opts).expect("sdpa"));
        });
        let unfused = cpu_time_of(3.0, || {
            black_box(
                cpu::sdpa_reference(&q, &k, &v, None, false, None, false).expect("sdpa_reference"),
            );
        });
        if let (Some((nf, cf)), Some((nu, cu))) = (fused, unfused) {
            let gf = flops * nf as f64 / cf * threads as f64 / 1e9;
            let gu = flops * nu as f64 / cu * threads as f64 / 1e9;
            println!(
                "cpu-time sdpa/f32/d{d}/s{s}: fused {gf:.1} GFLOP/s ({:.0}% of nominal, {:.0}% of \
                 probe), unfused {gu:.1} GFLOP/s, fused/unfused {:.2}x",
                100.0 * gf / nominal,
                100.0 * gf / probe,
                gf / gu
            );
        }
    }
}

/// The unfused graph an exporter writes, node by node on the reference kernels (what
/// the reference executor runs before fusion): `q @ k^T`, `* scale`, `softmax`, `@ v`,
/// each result a whole `[B, H, S, S]` (or `[B, H, S, D]`) tensor.
fn unfused_graph(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: &Tensor,
) -> Result<Tensor, KernelError> {
    let s = cpu::matmul(q, &cpu::transpose(k, -2, -1)?)?;
    let s = cpu::binary(BinaryOp::Mul, &s, scale)?;
    let p = cpu::softmax(&s, -1)?;
    cpu::matmul(&p, v)
}

fn bench_sdpa(c: &mut Criterion) {
    let threads = rayon::current_num_threads();
    print_peak(threads);
    if std::env::var_os("SDPA_CPU_TIME").is_some() {
        print_cpu_time_rates(threads);
    }
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
                    let scale = Tensor::full(dtype, &[], 1.0 / (d as f64).sqrt());
                    g.bench_function(format!("{dtype}/d{d}/s{s}/unfused_graph"), |bch| {
                        bch.iter(|| unfused_graph(black_box(&q), &k, &v, &scale).expect("graph"))
                    });
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
