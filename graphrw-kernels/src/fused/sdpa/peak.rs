//! A tiny FMA-throughput probe: what the machine's f32 FMA peak really is, to state the
//! fused kernel's speed as a fraction of it (see `benches/sdpa.rs`).

use std::time::Instant;

/// Independent accumulator chains per thread: more than FMA latency (4-5 cycles) times
/// FMA units (2) on current x86 cores, so the probe is throughput-bound.
const CHAINS: usize = 12;

/// Measures the f32 FMA throughput of `threads` threads running `iters` rounds of
/// `CHAINS` independent 8-lane FMAs each; returns GFLOP/s (2 flops per lane per FMA),
/// or `None` without AVX2+FMA (or off x86-64).
pub fn fma_peak_gflops(threads: usize, iters: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::Isa::Avx2Fma.is_available() {
        let threads = threads.max(1);
        let start = Instant::now();
        let sink: f32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    // SAFETY: AVX2 and FMA were detected just above.
                    s.spawn(move || unsafe { fma_chains(iters, t as f32) })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        let secs = start.elapsed().as_secs_f64();
        std::hint::black_box(sink);
        let flops = (threads * iters * CHAINS * 8 * 2) as f64;
        return Some(flops / secs / 1e9);
    }
    let _ = (threads, iters);
    None
}

/// `iters` rounds of [`CHAINS`] dependent-per-chain FMAs; returns a sum so nothing is
/// optimised away.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains(iters: usize, seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm256_set1_ps(0.999_9);
    let b = _mm256_set1_ps(1e-4);
    let mut acc: [__m256; CHAINS] = std::array::from_fn(|i| _mm256_set1_ps(seed + i as f32));
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut out = [0f32; 8];
    let sum = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, &x| _mm256_add_ps(s, x));
    // SAFETY: `out` holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
    out.iter().sum()
}
