//! The tiles a decode task runs, by instruction set ([`Level`]): the general kernel's
//! (`Acc`, portable or AVX2+FMA), or for f32 the AVX-512F ones (`avx512.rs`).

#[cfg(target_arch = "x86_64")]
use super::avx512;
use crate::fused::sdpa::tile::Acc;

/// The instruction set the tasks are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::fused::sdpa) enum Level {
    /// Portable loops.
    Plain,
    /// AVX2+FMA (the general kernel's in-place tiles).
    Avx2,
    /// AVX-512F tiles (`avx512.rs`) with AVX2+FMA.
    Avx512,
}

/// The score and value tiles of a task: the general kernel's (`Acc`), or the AVX-512
/// ones for f32 when `WIDE`.
pub(in crate::fused::sdpa) trait Tiles: Acc {
    /// [`Acc::scores_tile`] (`qt`: the transposed query rows, `ldq` columns), on the
    /// AVX-512 tiles when `WIDE`, there from the `nrows` row-major query rows `q` when
    /// they are few (`q` is filled only then: see [`Tiles::dot_rows`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn scores<const FMA: bool, const WIDE: bool>(
        micro: bool,
        nk: usize,
        d: usize,
        k: &[Self],
        qt: &[Self],
        ldq: usize,
        q: &[Self],
        nrows: usize,
        s: &mut [Self],
    ) {
        let _ = (q, nrows);
        Self::scores_tile::<FMA>(micro, nk, d, k, qt, ldq, s)
    }

    /// Whether [`Tiles::scores`] reads the row-major query rows for `nrows` rows.
    #[inline(always)]
    fn dot_rows<const WIDE: bool>(nrows: usize) -> bool {
        let _ = nrows;
        false
    }

    /// [`Acc::values_rows`], on the AVX-512 tiles when `WIDE`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn values<const FMA: bool, const WIDE: bool>(
        micro: bool,
        nk: usize,
        nrows: usize,
        ldp: usize,
        dv: usize,
        pt: &[Self],
        v: &[Self],
        alpha: &[Self],
        o: &mut [Self],
    ) {
        Self::values_rows::<FMA>(micro, nk, nrows, ldp, dv, pt, v, alpha, o)
    }
}

impl Tiles for f64 {}

impl Tiles for f32 {
    #[inline(always)]
    fn scores<const FMA: bool, const WIDE: bool>(
        micro: bool,
        nk: usize,
        d: usize,
        k: &[f32],
        qt: &[f32],
        ldq: usize,
        q: &[f32],
        nrows: usize,
        s: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if WIDE {
            // SAFETY: `WIDE` tasks run only where the SDPA instruction set, never above
            // the CPU's, is AVX-512 (`Level::Avx512`).
            unsafe {
                if Self::dot_rows::<WIDE>(nrows) {
                    avx512::scores_rows(nk, d, k, q, nrows, s, ldq)
                } else {
                    avx512::scores_tile(nk, d, k, qt, ldq, ldq, s, ldq)
                }
            };
            return;
        }
        let _ = (q, nrows);
        Self::scores_tile::<FMA>(micro, nk, d, k, qt, ldq, s)
    }

    #[inline(always)]
    fn dot_rows<const WIDE: bool>(nrows: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        if WIDE {
            return nrows <= avx512::DOT_ROWS;
        }
        let _ = nrows;
        false
    }

    #[inline(always)]
    fn values<const FMA: bool, const WIDE: bool>(
        micro: bool,
        nk: usize,
        nrows: usize,
        ldp: usize,
        dv: usize,
        pt: &[f32],
        v: &[f32],
        alpha: &[f32],
        o: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if WIDE {
            // SAFETY: as in `scores`: the CPU has AVX-512F.
            unsafe { avx512::values_tile(nk, nrows, dv, pt, ldp, v, alpha, o) };
            return;
        }
        Self::values_rows::<FMA>(micro, nk, nrows, ldp, dv, pt, v, alpha, o)
    }
}
