//! The AVX-512 micro-kernel of the packed GEMM: a `12 x 32` tile whose 24 accumulators
//! stay in `zmm` registers; each depth step loads two weight vectors and broadcasts one
//! element of each of its 12 rows.

use std::arch::x86_64::*;

use super::Kernel;

/// Rows per micro-tile.
const MR: usize = 12;
/// Columns per micro-tile and per packed weight panel (two 16-lane vectors).
const NR: usize = 32;

/// The AVX-512F kernel.
pub(crate) struct Avx512;

impl Kernel for Avx512 {
    const MR: usize = MR;
    const NR: usize = NR;
    /// Measured: 256, 384 and 512 were slower on the module's shapes (Zen 4).
    const KC: usize = 768;
    const MC: usize = 480;

    unsafe fn tile(
        kc: usize,
        a: (*const f32, usize),
        bp: *const f32,
        add: (*const f32, *const f32),
        c: (*mut f32, usize),
        hw: (usize, usize),
    ) {
        // SAFETY: the caller keeps [`Kernel::tile`]'s contract, which is `tile`'s.
        unsafe { tile(kc, a, bp, add, c, hw) }
    }
}

/// [`Kernel::tile`] for [`Avx512`].
///
/// # Safety
/// AVX-512F; `a` readable for `h` rows of `kc` floats at stride `lda`, `bp` for `NR kc`,
/// `bias` (when not null) for `w` floats, `add_from` (when not null) for `h` rows of
/// `w` floats at stride `ldc`; `c` writable for `1 <= h <= MR` rows of `w <= NR`
/// floats at stride `ldc`.
#[target_feature(enable = "avx512f")]
unsafe fn tile(
    kc: usize,
    (a, lda): (*const f32, usize),
    bp: *const f32,
    (bias, add_from): (*const f32, *const f32),
    (c, ldc): (*mut f32, usize),
    (h, w): (usize, usize),
) {
    // SAFETY: row `min(r, h - 1) < h` of the caller's rows.
    let row: [*const f32; MR] = std::array::from_fn(|r| unsafe { a.add(r.min(h - 1) * lda) });
    if !add_from.is_null() {
        for r in 0..h {
            // SAFETY: a prefetch reads nothing; the addresses are the tile's rows.
            unsafe {
                let at = add_from.add(r * ldc) as *const i8;
                _mm_prefetch::<_MM_HINT_T0>(at);
                _mm_prefetch::<_MM_HINT_T0>(at.add(64));
            }
        }
    }
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..kc {
        // SAFETY: `p < kc`: `NR` floats at `p * NR` of `bp`, one at `p` of each row.
        unsafe {
            let b0 = _mm512_loadu_ps(bp.add(p * NR));
            let b1 = _mm512_loadu_ps(bp.add(p * NR + 16));
            for (accr, &ar) in acc.iter_mut().zip(&row) {
                let x = _mm512_set1_ps(*ar.add(p));
                accr[0] = _mm512_fmadd_ps(x, b0, accr[0]);
                accr[1] = _mm512_fmadd_ps(x, b1, accr[1]);
            }
        }
    }
    let mask = |v: usize| -> __mmask16 {
        let cols = w.saturating_sub(16 * v).min(16);
        ((1u32 << cols) - 1) as __mmask16
    };
    let masks = [mask(0), mask(1)];
    if !bias.is_null() {
        for (v, &m) in masks.iter().enumerate() {
            // SAFETY: `bias` holds the tile's `w` values; lanes past `w` are masked.
            let add = unsafe { _mm512_maskz_loadu_ps(m, bias.add(16 * v)) };
            for accr in acc.iter_mut().take(h) {
                accr[v] = _mm512_add_ps(accr[v], add);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate().take(h) {
        for (v, &m) in masks.iter().enumerate() {
            if m == 0 {
                continue;
            }
            // SAFETY: row `r < h`, columns `16 v..` under mask `m` (`< w`): inside
            // the tile the caller gave.
            unsafe {
                let mut x = accr[v];
                if !add_from.is_null() {
                    let from = add_from.add(r * ldc + 16 * v);
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, from));
                }
                _mm512_mask_storeu_ps(c.add(r * ldc + 16 * v), m, x);
            }
        }
    }
}
