//! What this CPU can do at most, measured: the f32 FMA peak (every FMA port, at each
//! vector width the CPU has) and the memory bandwidth a streaming read reaches. Kernel
//! speeds are stated as a share of these (`gemm_rate --peak`, `graphrw run --profile`),
//! and the memory-bound kernels of a decode step (a product of one row by a weight)
//! against the second.
//!
//! The FMA probe runs [`ZMM_CHAINS`] (or [`YMM_CHAINS`]) independent accumulator chains
//! per thread: more than FMA latency (4 cycles) times FMA ports (two 512-bit ports on
//! Intel server cores, two 256-bit pipes on Zen 3 and Zen 4), so it is bound by
//! throughput at either width. The peak is the best width's rate: a 256-bit probe
//! alone reads half the peak of a core with two 512-bit FMA ports (Ice Lake and later
//! Xeons), and the same on Zen 4, whose 512-bit FMAs take both 256-bit pipes.

use std::time::Instant;

/// Independent 256-bit accumulator chains per thread.
pub const YMM_CHAINS: usize = 12;
/// Independent 512-bit accumulator chains per thread (of the 32 `zmm` registers).
pub const ZMM_CHAINS: usize = 24;

/// Rounds of a probe; its figure is the best round's (a round that shares its core
/// with another process reads low, so rounds are short and many).
const ROUNDS: usize = 10;

/// Vector widths the FMA probe runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorWidth {
    /// 256-bit `ymm` FMAs (AVX2+FMA).
    Ymm,
    /// 512-bit `zmm` FMAs (AVX-512F).
    Zmm,
}

impl VectorWidth {
    /// f32 lanes per vector.
    pub fn lanes(self) -> usize {
        match self {
            VectorWidth::Ymm => 8,
            VectorWidth::Zmm => 16,
        }
    }

    /// Whether this CPU runs FMAs at this width.
    pub fn is_available(self) -> bool {
        match self {
            VectorWidth::Ymm => crate::cpu::Isa::Avx2Fma.is_available(),
            VectorWidth::Zmm => {
                crate::cpu::Isa::Avx2Fma.is_available() && crate::cpu::CpuFeatures::get().avx512f
            }
        }
    }
}

/// The f32 FMA peak of `threads` threads in GFLOP/s (2 flops per lane per FMA): the
/// best of the widths this CPU has ([`fma_peak_at`]), each the best of a few rounds of
/// `iters` steps. `None` without AVX2+FMA (or off x86-64).
pub fn fma_peak_gflops(threads: usize, iters: usize) -> Option<f64> {
    [VectorWidth::Ymm, VectorWidth::Zmm]
        .into_iter()
        .filter_map(|w| fma_peak_at(w, threads, iters))
        .reduce(f64::max)
}

/// The FMA rate at one vector width: `threads` threads each running `iters` steps of
/// its chains, in GFLOP/s, the best of a few rounds. `None` where the CPU lacks the
/// width.
pub fn fma_peak_at(width: VectorWidth, threads: usize, iters: usize) -> Option<f64> {
    if !width.is_available() {
        return None;
    }
    let threads = threads.max(1);
    let chains = match width {
        VectorWidth::Ymm => YMM_CHAINS,
        VectorWidth::Zmm => ZMM_CHAINS,
    };
    let flops = (threads * iters.max(1) * chains * width.lanes() * 2) as f64;
    let mut best = 0f64;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let sink: f32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || chains_on(width, iters, t as f32)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        std::hint::black_box(sink);
        best = best.max(flops / start.elapsed().as_secs_f64().max(1e-9) / 1e9);
    }
    Some(best)
}

/// One thread's chains at `width` (checked available by the caller).
fn chains_on(width: VectorWidth, iters: usize, seed: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match width {
        // SAFETY: AVX2 and FMA were detected (`VectorWidth::is_available`).
        VectorWidth::Ymm => unsafe { ymm_chains(iters, seed) },
        // SAFETY: AVX-512F was detected (`VectorWidth::is_available`).
        VectorWidth::Zmm => unsafe { zmm_chains(iters, seed) },
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (width, iters);
        seed
    }
}

/// `iters` (at least 1) rounds of [`YMM_CHAINS`] dependent-per-chain FMAs, in `asm` so
/// that the chains stay in registers at any optimisation level; returns a sum so
/// nothing is optimised away.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn ymm_chains(iters: usize, seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm256_set1_ps(0.999_9);
    let b = _mm256_set1_ps(1e-4);
    let mut acc: [__m256; YMM_CHAINS] = std::array::from_fn(|i| _mm256_set1_ps(seed + i as f32));
    // SAFETY: register arithmetic only (no memory is read or written); the loop runs
    // `iters.max(1)` times.
    unsafe {
        std::arch::asm!(
            "2:",
            "vfmadd231ps {c0}, {a}, {b}",
            "vfmadd231ps {c1}, {a}, {b}",
            "vfmadd231ps {c2}, {a}, {b}",
            "vfmadd231ps {c3}, {a}, {b}",
            "vfmadd231ps {c4}, {a}, {b}",
            "vfmadd231ps {c5}, {a}, {b}",
            "vfmadd231ps {c6}, {a}, {b}",
            "vfmadd231ps {c7}, {a}, {b}",
            "vfmadd231ps {c8}, {a}, {b}",
            "vfmadd231ps {c9}, {a}, {b}",
            "vfmadd231ps {c10}, {a}, {b}",
            "vfmadd231ps {c11}, {a}, {b}",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) iters.max(1) => _,
            a = in(ymm_reg) a,
            b = in(ymm_reg) b,
            c0 = inout(ymm_reg) acc[0],
            c1 = inout(ymm_reg) acc[1],
            c2 = inout(ymm_reg) acc[2],
            c3 = inout(ymm_reg) acc[3],
            c4 = inout(ymm_reg) acc[4],
            c5 = inout(ymm_reg) acc[5],
            c6 = inout(ymm_reg) acc[6],
            c7 = inout(ymm_reg) acc[7],
            c8 = inout(ymm_reg) acc[8],
            c9 = inout(ymm_reg) acc[9],
            c10 = inout(ymm_reg) acc[10],
            c11 = inout(ymm_reg) acc[11],
            options(nomem, nostack),
        );
    }
    let sum = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, &x| _mm256_add_ps(s, x));
    let mut out = [0f32; 8];
    // SAFETY: `out` holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
    out.iter().sum()
}

/// `iters` (at least 1) rounds of [`ZMM_CHAINS`] dependent-per-chain 512-bit FMAs, in
/// `asm` as [`ymm_chains`]; returns a sum so nothing is optimised away.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn zmm_chains(iters: usize, seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_ps(0.999_9);
    let b = _mm512_set1_ps(1e-4);
    let mut acc: [__m512; ZMM_CHAINS] = std::array::from_fn(|i| _mm512_set1_ps(seed + i as f32));
    // SAFETY: register arithmetic only (no memory is read or written); the loop runs
    // `iters.max(1)` times.
    unsafe {
        std::arch::asm!(
            "2:",
            "vfmadd231ps {c0}, {a}, {b}",
            "vfmadd231ps {c1}, {a}, {b}",
            "vfmadd231ps {c2}, {a}, {b}",
            "vfmadd231ps {c3}, {a}, {b}",
            "vfmadd231ps {c4}, {a}, {b}",
            "vfmadd231ps {c5}, {a}, {b}",
            "vfmadd231ps {c6}, {a}, {b}",
            "vfmadd231ps {c7}, {a}, {b}",
            "vfmadd231ps {c8}, {a}, {b}",
            "vfmadd231ps {c9}, {a}, {b}",
            "vfmadd231ps {c10}, {a}, {b}",
            "vfmadd231ps {c11}, {a}, {b}",
            "vfmadd231ps {c12}, {a}, {b}",
            "vfmadd231ps {c13}, {a}, {b}",
            "vfmadd231ps {c14}, {a}, {b}",
            "vfmadd231ps {c15}, {a}, {b}",
            "vfmadd231ps {c16}, {a}, {b}",
            "vfmadd231ps {c17}, {a}, {b}",
            "vfmadd231ps {c18}, {a}, {b}",
            "vfmadd231ps {c19}, {a}, {b}",
            "vfmadd231ps {c20}, {a}, {b}",
            "vfmadd231ps {c21}, {a}, {b}",
            "vfmadd231ps {c22}, {a}, {b}",
            "vfmadd231ps {c23}, {a}, {b}",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) iters.max(1) => _,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            c0 = inout(zmm_reg) acc[0],
            c1 = inout(zmm_reg) acc[1],
            c2 = inout(zmm_reg) acc[2],
            c3 = inout(zmm_reg) acc[3],
            c4 = inout(zmm_reg) acc[4],
            c5 = inout(zmm_reg) acc[5],
            c6 = inout(zmm_reg) acc[6],
            c7 = inout(zmm_reg) acc[7],
            c8 = inout(zmm_reg) acc[8],
            c9 = inout(zmm_reg) acc[9],
            c10 = inout(zmm_reg) acc[10],
            c11 = inout(zmm_reg) acc[11],
            c12 = inout(zmm_reg) acc[12],
            c13 = inout(zmm_reg) acc[13],
            c14 = inout(zmm_reg) acc[14],
            c15 = inout(zmm_reg) acc[15],
            c16 = inout(zmm_reg) acc[16],
            c17 = inout(zmm_reg) acc[17],
            c18 = inout(zmm_reg) acc[18],
            c19 = inout(zmm_reg) acc[19],
            c20 = inout(zmm_reg) acc[20],
            c21 = inout(zmm_reg) acc[21],
            c22 = inout(zmm_reg) acc[22],
            c23 = inout(zmm_reg) acc[23],
            options(nomem, nostack),
        );
    }
    let sum = acc
        .iter()
        .fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x));
    _mm512_reduce_add_ps(sum)
}

/// Bytes the bandwidth probe reads by default: four times the last-level cache (so
/// the read comes from memory, not cache), at least 256 MiB and at most 2 GiB; 512 MiB
/// where the cache size cannot be read (off Linux).
pub fn default_bandwidth_bytes() -> usize {
    let llc = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size")
        .ok()
        .and_then(|s| parse_cache_size(s.trim()));
    llc.map_or(512 << 20, |b| (4 * b).clamp(256 << 20, 2 << 30))
}

/// A sysfs cache size (`"32768K"`, `"480M"`, `"1024"`) in bytes.
fn parse_cache_size(text: &str) -> Option<usize> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// The read bandwidth of `threads` threads streaming over `bytes` of memory in GB/s
/// (each thread sums its own contiguous share; the best of a few rounds). `None`
/// where the buffer cannot be allocated.
pub fn memory_bandwidth_gbs(threads: usize, bytes: usize) -> Option<f64> {
    let threads = threads.max(1);
    let floats = (bytes / 4).max(threads * 64);
    let mut data: Vec<f32> = Vec::new();
    data.try_reserve_exact(floats).ok()?;
    data.resize(floats, 1.0);
    let share = floats.div_ceil(threads);
    let mut best = 0f64;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let sum: f32 = std::thread::scope(|s| {
            let handles: Vec<_> = data
                .chunks(share)
                .map(|part| s.spawn(move || sum_stream(part)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        std::hint::black_box(sum);
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        best = best.max((floats * 4) as f64 / secs / 1e9);
    }
    Some(best)
}

/// The sum of `xs` ([`sum_lanes`]), compiled for AVX-512 or AVX2 where the CPU has
/// them: a core's read stream reaches its bandwidth only with wide loads (16 MiB from
/// a Xeon's L3: 15.7 GB/s with the baseline's 16-byte loads).
fn sum_stream(xs: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::CpuFeatures::get().avx512f {
            // SAFETY: AVX-512F was detected just above.
            return unsafe { sum_avx512(xs) };
        }
        if crate::cpu::Isa::Avx2Fma.is_available() {
            // SAFETY: AVX2 was detected just above.
            return unsafe { sum_avx2(xs) };
        }
    }
    sum_lanes(xs)
}

/// [`sum_lanes`] compiled for AVX-512F.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_avx512(xs: &[f32]) -> f32 {
    sum_lanes(xs)
}

/// [`sum_lanes`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(xs: &[f32]) -> f32 {
    sum_lanes(xs)
}

/// The sum of `xs`, 64 independent lanes at a time (vectorised by LLVM at the ISA it is
/// compiled for).
#[inline(always)]
fn sum_lanes(xs: &[f32]) -> f32 {
    let mut acc = [0f32; 64];
    let mut chunks = xs.chunks_exact(64);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("480M"), Some(480 << 20));
        assert_eq!(parse_cache_size("1024"), Some(1024));
        assert_eq!(parse_cache_size("12X"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn bandwidth_probe_reads_a_positive_rate() {
        let gbs = memory_bandwidth_gbs(2, 8 << 20).expect("8 MiB allocates");
        assert!(gbs.is_finite() && gbs > 0.1, "{gbs}");
    }

    #[test]
    fn the_peak_is_the_best_width() {
        let Some(peak) = fma_peak_gflops(1, 200_000) else {
            return;
        };
        let ymm = fma_peak_at(VectorWidth::Ymm, 1, 200_000).expect("ymm with AVX2+FMA");
        // Each call measures anew, so allow the noise of a shared machine.
        assert!(peak > 0.5 * ymm, "peak {peak} against ymm {ymm}");
    }
}
