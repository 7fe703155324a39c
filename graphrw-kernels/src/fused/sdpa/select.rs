//! Which implementation a call runs: the path the options ask for ([`Path`]), the
//! kernel of the best instruction set the CPU and the options allow
//! ([`pick_kernel`]), whether the decode path takes the call ([`takes_decode`]), and the
//! block sizes. The measured choice between the kernels is `choice.rs`.

use super::avx512;
use super::decode::{DECODE_FEW_QUERIES, DECODE_MAX_QUERIES, DECODE_MIN_KEYS, DECODE_MIN_KEYS_FEW};
use super::kernel::SdpaKernel;
use super::{BLOCK_K, BLOCK_Q, BLOCK_Q_CAUSAL, BLOCK_Q_CAUSAL_AVX512};
use crate::cpu::Isa;
use crate::{DType, KernelOptions, SdpaBlocks};

/// Which implementation of a work item runs (the default picks the fastest the CPU
/// has; tests force each one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// Packed operands for f32/f16/bf16 on AVX-512 (`packed512.rs`) or AVX2+FMA
    /// (`packed.rs`), the best the CPU has; else as `Unpacked`.
    Best,
    /// The operands read in place (the AVX2 micro-tiles where the CPU has them).
    Unpacked,
    /// As `Best`, but the packed path's softmax step always a pass of its own after
    /// the score tile, never fused into it (tests compare the two).
    #[cfg_attr(not(test), allow(dead_code))]
    SeparateSoftmax,
    /// The packed path on AVX2 even where the CPU has AVX-512.
    #[cfg_attr(not(test), allow(dead_code))]
    PackedAvx2,
    /// As `PackedAvx2`, with the softmax step a pass of its own.
    #[cfg_attr(not(test), allow(dead_code))]
    PackedAvx2Separate,
}

/// The path `kernel` asks for: [`SdpaTuning::pack`](crate::SdpaTuning::pack) off reads
/// K and V in place; the instruction set is capped by [`KernelOptions::sdpa_isa`].
pub(super) fn path_of(kernel: &KernelOptions) -> Path {
    if kernel.sdpa.pack {
        Path::Best
    } else {
        Path::Unpacked
    }
}

/// The implementation [`sdpa`](super::sdpa) runs for inputs of `dtype` (with a head size above 0)
/// on this CPU, with the thread's current [`KernelOptions`].
pub fn selected_kernel(dtype: DType) -> SdpaKernel {
    selected_kernel_with(dtype, &KernelOptions::current())
}

/// The implementation [`sdpa_tuned`](super::sdpa_tuned) runs with `kernel` for inputs of `dtype` (with a
/// head size above 0) on this CPU, for shapes outside the decode path's (more than
/// [`DECODE_MAX_QUERIES`] query rows or fewer than [`DECODE_MIN_KEYS`] keys; see
/// [`selected_kernel_for`]).
pub fn selected_kernel_with(dtype: DType, kernel: &KernelOptions) -> SdpaKernel {
    pick_kernel(dtype, path_of(kernel), 1, kernel.sdpa_isa()).tuned(&kernel.sdpa)
}

/// The implementation [`sdpa_tuned`](super::sdpa_tuned) runs with `kernel` for inputs of `dtype` with `sq`
/// query rows, `skv` keys and a head size above 0: [`SdpaKernel::Decode`] where the
/// decode path applies, else [`selected_kernel_with`]'s.
pub fn selected_kernel_for(
    dtype: DType,
    sq: usize,
    skv: usize,
    kernel: &KernelOptions,
) -> SdpaKernel {
    if takes_decode(dtype, path_of(kernel), kernel, sq, skv, 1) {
        SdpaKernel::Decode
    } else {
        selected_kernel_with(dtype, kernel)
    }
}

/// Whether a call with these sizes takes the decode path:
/// [`SdpaTuning::decode`](crate::SdpaTuning::decode) on, the default path (not forced by
/// a test or packing off), f32/f16/bf16, a head size above 0, at most
/// [`DECODE_MAX_QUERIES`] query rows, and at least [`DECODE_MIN_KEYS`] keys
/// ([`DECODE_MIN_KEYS_FEW`] with at most [`DECODE_FEW_QUERIES`] query rows; or
/// [`SdpaTuning::decode_min_keys`](crate::SdpaTuning::decode_min_keys) for any).
pub(super) fn takes_decode(
    dtype: DType,
    path: Path,
    kernel: &KernelOptions,
    sq: usize,
    skv: usize,
    d: usize,
) -> bool {
    kernel.sdpa.decode
        && path == Path::Best
        && dtype != DType::F64
        && d > 0
        && sq <= DECODE_MAX_QUERIES
        && skv
            >= kernel
                .sdpa
                .decode_min_keys
                .unwrap_or(if sq <= DECODE_FEW_QUERIES {
                    DECODE_MIN_KEYS_FEW
                } else {
                    DECODE_MIN_KEYS
                })
}

/// The implementation for `dtype` on `path` with head size `d`, at instruction set
/// `isa` (never above this CPU's: see [`KernelOptions::sdpa_isa`]).
pub(crate) fn pick_kernel(dtype: DType, path: Path, d: usize, isa: Isa) -> SdpaKernel {
    crate::isa_dispatch!(isa, {
        Avx2Fma => {
            let f32_compute = dtype != DType::F64;
            if path != Path::Unpacked && d > 0 && f32_compute {
                let avx2_only = matches!(path, Path::PackedAvx2 | Path::PackedAvx2Separate);
                if !avx2_only && isa >= Isa::Avx512 && avx512::available() {
                    if dtype == DType::BF16 {
                        SdpaKernel::PackedAvx512Bf16
                    } else {
                        SdpaKernel::PackedAvx512
                    }
                } else {
                    SdpaKernel::PackedAvx2
                }
            } else {
                SdpaKernel::Avx2
            }
        },
        _ => {
            let _ = (dtype, path, d);
            SdpaKernel::Plain
        },
    })
}

/// The block sizes: `tuned` ([`SdpaTuning::blocks`](crate::SdpaTuning::blocks)), else the
/// constants ([`BLOCK_Q_CAUSAL`] query rows when causal, [`BLOCK_Q_CAUSAL_AVX512`] on the
/// AVX-512 kernels).
pub(super) fn block_sizes(causal: bool, avx512: bool, tuned: Option<SdpaBlocks>) -> (usize, usize) {
    match tuned {
        Some(b) if b.q > 0 && b.k > 0 => (b.q, b.k),
        _ if causal && avx512 => (BLOCK_Q_CAUSAL_AVX512, BLOCK_K),
        _ if causal => (BLOCK_Q_CAUSAL, BLOCK_K),
        _ => (BLOCK_Q, BLOCK_K),
    }
}
