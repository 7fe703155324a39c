//! Whether the packed GEMM's tiles prefetch the next weight block: measured once per
//! process on the CPU it runs on, for each kernel.
//!
//! A weight block that streams from the last-level cache or memory stalls the first
//! tile that reads it, unless the tiles before it have prefetched it, each its share
//! (`panel_block`). Whether that pays depends on the core's own prefetchers,
//! and the CPUs disagree:
//! - on a 2-core Zen 4 the AVX-512 kernel lost 2-10% with it (weights cold, 2 threads,
//!   `gemm_rate --cold 8`: `128 x 768 x 2304` 216-220 GFLOP/s without, 194-196 with)
//!   while the AVX2 kernel gained 5-12% (`128 x 3072 x 768` 208 with, 185-189 without);
//! - on a 2-vCPU Intel Xeon (family 6 model 167) the AVX-512 kernel gained 6-17% at 2
//!   threads (`gemm_rate --cold 4`: `128 x 2048 x 5632` 231 with, 192 without, `128 x
//!   768 x 3072` 255 against 217).
//!
//! So neither is fixed: [`next_block`] times both on a product whose weights come from
//! beyond L2, once per kernel, and keeps the faster ([`Prefetch`] says what was
//! measured, for `graphrw run --profile`).
//!
//! The AVX-512 kernel's loops prefetch the share themselves, a line every four depths
//! (`Kernel::PREFETCH_IN_LOOP`): one instruction where the burst was a hundred, so it
//! costs little where nothing needed prefetching. The measured product's 12 MiB of
//! weights may sit in a large last-level cache (this Xeon's guest sees 480 MiB), where
//! no prefetch can pay, while a model's weights come from memory: there the measurement
//! came out either way from run to run, and each "off" cost 20% on GPT-2's LM head. So
//! a loop's prefetch is kept unless measured 5% slower.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{avx2, avx512, drive, Kernel, Layout, PackedB};
use crate::cpu::matmul::TileStore;
use crate::cpu::Isa;

/// What [`next_block`] measured for one kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prefetch {
    /// Whether the tiles prefetch the next weight block.
    pub on: bool,
    /// The best time of the measured product without prefetches over the best with
    /// them (above 1: prefetching was faster).
    pub speedup: f64,
}

/// The smallest packed weight whose products prefetch (as measured): a smaller one
/// stays in L2 from call to call, and its products never measure.
pub const MIN_BYTES: usize = 1 << 20;

/// The measured product: rows, depth and columns (3 MiB of packed weight per copy;
/// rows enough for each of a few threads to take its own tiles).
const SHAPE: (usize, usize, usize) = (96, 768, 1024);
/// Copies of the weight run in turn (12 MiB: past any core's L2, so that each call
/// reads its weight from the last-level cache or memory, as a model's products do).
const COPIES: usize = 4;
/// Rounds of both settings, alternated.
const ROUNDS: usize = 3;
/// Prefetching in a burst is kept only when it is at least this much faster (within
/// it, the fewer instructions win).
const MARGIN: f64 = 1.02;
/// Prefetching in the tiles' loops is kept unless it is at least this much slower.
const IN_LOOP_MARGIN: f64 = 0.95;

/// Whether a kernel keeps prefetching, given the time without over the time with.
fn keeps(in_loop: bool, speedup: f64) -> bool {
    speedup >= if in_loop { IN_LOOP_MARGIN } else { MARGIN }
}

static CHOICES: [OnceLock<Option<Prefetch>>; 2] = [OnceLock::new(), OnceLock::new()];

/// Whether the packed kernel for `isa` prefetches the next weight block: measured on
/// first use ([`measured`]), false where there is no such kernel.
pub fn next_block(isa: Isa) -> bool {
    measured(isa).is_some_and(|p| p.on)
}

/// What was measured for the packed kernel of `isa`, measuring it now if not yet
/// (`None` where there is no packed kernel for `isa` or the CPU lacks it).
pub fn measured(isa: Isa) -> Option<Prefetch> {
    let slot = match isa {
        Isa::Avx512 => &CHOICES[0],
        Isa::Avx2Fma => &CHOICES[1],
        Isa::Baseline => return None,
    };
    *slot.get_or_init(|| match isa {
        Isa::Avx512 if isa.is_available() => Some(measure::<avx512::Avx512<false>>(isa)),
        Isa::Avx2Fma if isa.is_available() => Some(measure::<avx2::Avx2>(isa)),
        _ => None,
    })
}

/// What was measured for the packed kernel of `isa` so far (`None`: not measured, as
/// no product has run on it, or no such kernel).
pub fn measured_so_far(isa: Isa) -> Option<Prefetch> {
    match isa {
        Isa::Avx512 => CHOICES[0].get().copied().flatten(),
        Isa::Avx2Fma => CHOICES[1].get().copied().flatten(),
        Isa::Baseline => None,
    }
}

/// Times [`SHAPE`] over [`COPIES`] weights with and without prefetching, split over the
/// current pool's threads as a plan's products are (its threads share the memory
/// bandwidth, which is where prefetching matters most), [`ROUNDS`] alternated rounds
/// each, and compares the best of each.
fn measure<K: Kernel>(isa: Isa) -> Prefetch {
    let (m, k, n) = SHAPE;
    let value = |i: usize| ((i * 7919) % 257) as f32 / 257.0 - 0.5;
    let a: Vec<f32> = (0..m * k).map(value).collect();
    let weights: Vec<PackedB> = (0..COPIES)
        .filter_map(|copy| {
            let b: Vec<f32> = (0..k * n).map(|i| value(i + copy)).collect();
            PackedB::pack_by_rows(&b, (k, n), n, 0, isa, &mut |_| {})
        })
        .collect();
    let mut c = vec![0f32; m * n];
    let mut best = [Duration::MAX; 2];
    for round in 0..ROUNDS {
        for turn in 0..2 {
            // Swapped every round, so that neither always runs first.
            let on = (turn + round) % 2 == 1;
            let start = Instant::now();
            for w in &weights {
                drive::<K>(
                    m,
                    (&a, k),
                    w,
                    &mut c,
                    (Layout::rows(n), TileStore::default()),
                    on,
                );
            }
            let t = start.elapsed();
            best[usize::from(on)] = best[usize::from(on)].min(t);
        }
    }
    std::hint::black_box(&c);
    let speedup = best[0].as_secs_f64() / best[1].as_secs_f64().max(1e-12);
    Prefetch {
        on: keeps(K::PREFETCH_IN_LOOP, speedup),
        speedup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_the_cpu_has_is_measured_once() {
        for isa in [Isa::Avx512, Isa::Avx2Fma] {
            let first = measured(isa);
            assert_eq!(first.is_some(), isa.is_available(), "{isa:?}");
            if let Some(p) = first {
                assert!(p.speedup.is_finite() && p.speedup > 0.0, "{p:?}");
                let in_loop = match isa {
                    Isa::Avx512 => <avx512::Avx512<false> as Kernel>::PREFETCH_IN_LOOP,
                    _ => <avx2::Avx2 as Kernel>::PREFETCH_IN_LOOP,
                };
                assert_eq!(p.on, keeps(in_loop, p.speedup));
                assert_eq!(measured(isa), first, "kept, not measured again");
                assert_eq!(next_block(isa), p.on);
            }
        }
        assert_eq!(measured(Isa::Baseline), None);
        assert!(!next_block(Isa::Baseline));
    }
}
