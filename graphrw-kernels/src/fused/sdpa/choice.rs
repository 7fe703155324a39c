//! Which SDPA variant runs a call, chosen by timing the candidates on this CPU. The
//! first call of each kind of shape ([`SdpaKey`]: dtype, head sizes, the query and key
//! counts rounded up to powers of two, the grouping of query heads, causal or masked,
//! instruction set and threads) runs every candidate ([`SdpaVariant`]: the decode path
//! on or off, the packed kernels at the best instruction set or capped at AVX2, the
//! AVX-512 ones broadcasting inside their FMAs or into a register, bf16 on BF16 dot
//! products or on the f32 FMAs) in turn: an untimed round, then two or three timed
//! ones, each candidate's best counting (one timing each let the first candidate's cold
//! caches, or a passing load on a shared machine, pick the kernel). It returns the
//! fastest run's result and keeps the choice for the process ([`global`]). Candidates
//! that would run the same kernel run once. Off with
//! [`SdpaTuning::choose`](crate::SdpaTuning::choose) (then the thresholds and the best
//! instruction set decide, as tuned).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cpu::{Broadcast, Isa};
use crate::{DType, KernelError, KernelOptions, Tensor};

use super::{selected_kernel_for, SdpaKernel};

/// Timed rounds of the candidates on a key's first call (after one untimed round).
const CHOICE_ROUNDS: usize = 3;

/// Time past which no further round is timed once two have been (a prompt's call of
/// tens of milliseconds is timed twice).
const CHOICE_BUDGET: Duration = Duration::from_millis(20);

/// What an SDPA choice is kept for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SdpaKey {
    /// The operands' dtype, by name.
    pub dtype: DType,
    /// Query rows, rounded up to a power of two.
    pub sq: usize,
    /// Keys, rounded up to a power of two.
    pub skv: usize,
    /// Head sizes of keys and values.
    pub d: (usize, usize),
    /// Query heads per key/value head.
    pub group: usize,
    /// Causal, masked.
    pub causal_mask: (bool, bool),
    /// The highest instruction set the options allow SDPA.
    pub isa: Isa,
    /// Threads the call may use.
    pub threads: usize,
}

impl fmt::Display for SdpaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} Sq<={} Skv<={} D={}/{} group {}{}{}",
            self.dtype.name(),
            self.sq,
            self.skv,
            self.d.0,
            self.d.1,
            self.group,
            if self.causal_mask.0 { " causal" } else { "" },
            if self.causal_mask.1 { " masked" } else { "" },
        )
    }
}

/// A candidate: the SDPA tuning it runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpaVariant {
    /// The decode path allowed.
    pub decode: bool,
    /// The instruction set cap.
    pub max_isa: Isa,
    /// The AVX-512 packed kernels' broadcast form.
    pub broadcast: Broadcast,
    /// bf16 on AVX-512 BF16 dot products (else on the f32 FMAs).
    pub bf16_dot: bool,
}

impl SdpaVariant {
    /// `kernel` with this variant's tuning.
    pub fn apply(self, kernel: &KernelOptions) -> KernelOptions {
        kernel.with_sdpa(
            kernel
                .sdpa
                .with_decode(self.decode)
                .with_max_isa(self.max_isa)
                .with_broadcast(self.broadcast)
                .with_bf16_dot_products(self.bf16_dot),
        )
    }
}

/// A kept choice: the kernel that won and every candidate's time.
#[derive(Clone, Debug, PartialEq)]
pub struct SdpaChosen {
    /// The fastest candidate.
    pub variant: SdpaVariant,
    /// The kernel it runs.
    pub kernel: SdpaKernel,
    /// Each candidate's kernel and its best time over the timed rounds.
    pub candidates: Vec<(SdpaKernel, Duration)>,
}

/// Kept SDPA choices; one per process ([`global`]).
#[derive(Debug, Default)]
pub struct SdpaChooser {
    choices: Mutex<HashMap<SdpaKey, SdpaChosen>>,
}

/// The process's SDPA chooser.
pub fn global() -> &'static SdpaChooser {
    static CHOOSER: OnceLock<SdpaChooser> = OnceLock::new();
    CHOOSER.get_or_init(SdpaChooser::default)
}

impl SdpaChooser {
    /// Every kept choice, by key.
    pub fn choices(&self) -> Vec<(SdpaKey, SdpaChosen)> {
        let mut all: Vec<_> = self
            .choices
            .lock()
            .map(|c| c.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default();
        all.sort_by_key(|(k, _)| *k);
        all
    }

    /// `run` with the options of the kept choice for `key`, or, on the key's first
    /// call, with each candidate of `kernel` for a call of `dtype`, `sq` query rows and
    /// `skv` keys (the fastest's result is returned and its choice kept).
    pub(crate) fn run_chosen(
        &self,
        key: SdpaKey,
        (dtype, sq, skv): (DType, usize, usize),
        kernel: &KernelOptions,
        run: &dyn Fn(&KernelOptions) -> Result<Tensor, KernelError>,
    ) -> Result<Tensor, KernelError> {
        if let Some(c) = self
            .choices
            .lock()
            .ok()
            .and_then(|c| c.get(&key).map(|c| c.variant))
        {
            return run(&c.apply(kernel));
        }
        // One candidate per distinct kernel.
        let mut distinct: Vec<(SdpaVariant, SdpaKernel, KernelOptions)> = Vec::new();
        for variant in candidates(kernel, sq) {
            let opts = variant.apply(kernel);
            let selected = selected_kernel_for(dtype, sq, skv, &opts);
            if distinct.iter().all(|d| d.1 != selected) {
                distinct.push((variant, selected, opts));
            }
        }
        if distinct.is_empty() {
            return run(kernel);
        }
        // Round 0 warms the caches and the threads for every candidate alike; then the
        // timed rounds, each candidate's best counting; the output kept is the one of
        // the fastest run so far, so the winner's is returned.
        let mut best = vec![Duration::MAX; distinct.len()];
        let mut fastest: Option<(Tensor, Duration)> = None;
        let mut timed = Duration::ZERO;
        for round in 0..=CHOICE_ROUNDS {
            for ((_, _, opts), best) in distinct.iter().zip(best.iter_mut()) {
                let t = Instant::now();
                let out = run(opts)?;
                let took = t.elapsed();
                if round == 0 {
                    continue;
                }
                timed += took;
                *best = (*best).min(took);
                if fastest.as_ref().is_none_or(|f| took < f.1) {
                    fastest = Some((out, took));
                }
            }
            if round >= 2 && timed > CHOICE_BUDGET {
                break;
            }
        }
        let Some((at, _)) = best.iter().enumerate().min_by_key(|(_, t)| **t) else {
            return run(kernel);
        };
        let (variant, selected, _) = distinct[at];
        let tried: Vec<(SdpaKernel, Duration)> = distinct
            .iter()
            .zip(&best)
            .map(|((_, k, _), t)| (*k, *t))
            .collect();
        let Some((out, _)) = fastest else {
            return run(kernel);
        };
        if let Ok(mut c) = self.choices.lock() {
            c.entry(key).or_insert(SdpaChosen {
                variant,
                kernel: selected,
                candidates: tried,
            });
        }
        Ok(out)
    }
}

/// The variants `kernel` allows for `sq` query rows: the decode path on (where its
/// tuning allows it and the queries are few) and off, at the SDPA instruction set and,
/// on AVX-512, capped at AVX2; at AVX-512 in both broadcast forms, bf16 on its dot
/// products and on the f32 FMAs (the decode path and the AVX2 kernels have one form,
/// f32 no dot products: [`SdpaChooser::run_chosen`] runs each kernel once).
fn candidates(kernel: &KernelOptions, sq: usize) -> Vec<SdpaVariant> {
    let isa = kernel.sdpa_isa();
    let (fma, reg) = (Broadcast::InFma, Broadcast::InRegister);
    let isas: &[(Isa, Broadcast, bool)] = match isa {
        Isa::Avx512 => &[
            (Isa::Avx512, fma, true),
            (Isa::Avx512, reg, true),
            (Isa::Avx512, fma, false),
            (Isa::Avx512, reg, false),
            (Isa::Avx2Fma, fma, true),
        ],
        Isa::Avx2Fma => &[(Isa::Avx2Fma, fma, true)],
        Isa::Baseline => &[(Isa::Baseline, fma, true)],
    };
    let decodes: &[bool] = if kernel.sdpa.decode && sq <= super::DECODE_MAX_QUERIES {
        &[true, false]
    } else {
        &[false]
    };
    decodes
        .iter()
        .flat_map(|&decode| {
            isas.iter()
                .map(move |&(max_isa, broadcast, bf16_dot)| SdpaVariant {
                    decode,
                    max_isa,
                    broadcast,
                    bf16_dot,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::{sdpa, SdpaOptions};
    use crate::testing::compare::{assert_close_tensor, Tol};

    fn ramp(shape: &[usize], seed: usize) -> Tensor {
        let n: usize = shape.iter().product();
        let data = (0..n)
            .map(|i| ((i * 7919 + seed * 31) % 997) as f32 / 498.0 - 1.0)
            .collect();
        Tensor::from_vec(shape.to_vec(), data).expect("tensor")
    }

    /// The first call of a kind of shape times its candidates and keeps one; every call
    /// gives the reference's result, whichever runs.
    #[test]
    fn chosen_variants_give_the_reference_result() {
        let (q, k, v) = (
            ramp(&[1, 8, 1, 64], 1),
            ramp(&[1, 2, 300, 64], 2),
            ramp(&[1, 2, 300, 64], 3),
        );
        let opts = SdpaOptions {
            enable_gqa: true,
            ..SdpaOptions::default()
        };
        let want =
            crate::cpu::sdpa_reference(&q, &k, &v, None, false, None, true).expect("reference");
        for call in 0..2 {
            let got = sdpa(&q, &k, &v, None, &opts).expect("sdpa");
            assert_close_tensor(&got, &want, Tol::new(1e-5, 1e-4), &format!("call {call}"));
        }
        let kept: Vec<_> = global()
            .choices()
            .into_iter()
            .filter(|(key, _)| key.sq == 1 && key.skv == 512 && key.group == 4 && key.d == (64, 64))
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let chosen = &kept[0].1;
        assert!(!chosen.candidates.is_empty());
        assert!(chosen.candidates.iter().any(|c| c.0 == chosen.kernel));
    }

    #[test]
    fn candidates_follow_the_options() {
        let all = candidates(&KernelOptions::default(), 1);
        let isa = KernelOptions::default().sdpa_isa();
        let per_decode = if isa == Isa::Avx512 { 5 } else { 1 };
        assert_eq!(all.len(), 2 * per_decode);
        assert_eq!(candidates(&KernelOptions::default(), 512).len(), per_decode);
        let no_decode =
            KernelOptions::default().with_sdpa(crate::SdpaTuning::default().with_decode(false));
        assert!(candidates(&no_decode, 1).iter().all(|v| !v.decode));
        let avx2 = KernelOptions::default().with_max_isa(Isa::Avx2Fma);
        assert!(candidates(&avx2, 1)
            .iter()
            .all(|v| v.max_isa <= Isa::Avx2Fma));
    }
}
