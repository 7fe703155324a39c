//! The AVX2+FMA micro-kernel of the packed GEMM, for x86-64 without AVX-512 (most
//! laptops, desktops and many cloud instances): a `6 x 16` tile, as BLIS's and MLAS's
//! Haswell kernels. Its 12 accumulators, the two weight vectors of a depth step and the
//! broadcast element take 15 of the 16 `ymm` registers; each depth step loads the two
//! weight vectors and broadcasts one element of each of its 6 rows (12 FMAs).

use std::arch::x86_64::*;

use super::Kernel;

/// Rows per micro-tile.
const MR: usize = 6;
/// Columns per micro-tile and per packed weight panel (two 8-lane vectors).
const NR: usize = 16;
/// Lanes of a `ymm` vector of f32.
const LANES: usize = 8;

/// The AVX2+FMA kernel.
pub(crate) struct Avx2;

impl Kernel for Avx2 {
    const MR: usize = MR;
    const NR: usize = NR;
    /// A weight micro-panel of 256 depths (16 KiB) stays in L1 while the tiles of a
    /// row block pass over it.
    const KC: usize = 256;
    /// A row block of 240 rows of 256 depths (240 KiB) stays in L2.
    const MC: usize = 240;
    const PREFETCH_IN_LOOP: bool = false;

    unsafe fn tile(
        kc: usize,
        a: (*const f32, usize),
        (bp, _): (*const f32, *const f32),
        add: (*const f32, *const f32),
        c: (*mut f32, usize),
        hw: (usize, usize),
    ) {
        // SAFETY: the caller keeps [`Kernel::tile`]'s contract, which is `tile`'s.
        unsafe { tile(kc, a, bp, add, c, hw) }
    }
}

/// [`Kernel::tile`] for [`Avx2`].
///
/// # Safety
/// AVX2 and FMA; `a` readable for `h` rows of `kc` floats at stride `lda`, `bp` for
/// `NR kc`, `bias` (when not null) for `w` floats, `add_from` (when not null) for `h`
/// rows of `w` floats at stride `ldc`; `c` writable for `1 <= h <= MR` rows of
/// `w <= NR` floats at stride `ldc`.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(
    kc: usize,
    (a, lda): (*const f32, usize),
    bp: *const f32,
    (bias, add_from): (*const f32, *const f32),
    (c, ldc): (*mut f32, usize),
    (h, w): (usize, usize),
) {
    if !add_from.is_null() {
        for r in 0..h {
            // SAFETY: a prefetch reads nothing; the address is the tile's row.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(add_from.add(r * ldc) as *const i8) };
        }
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    // SAFETY (each arm): `h` rows of `kc` floats at stride `lda` from `a`, `NR kc`
    // floats at `bp` (the function's contract).
    unsafe {
        match h {
            6 => steps::<6>(kc, (a, lda), bp, &mut acc),
            5 => steps::<5>(kc, (a, lda), bp, &mut acc),
            4 => steps::<4>(kc, (a, lda), bp, &mut acc),
            3 => steps::<3>(kc, (a, lda), bp, &mut acc),
            2 => steps::<2>(kc, (a, lda), bp, &mut acc),
            _ => steps::<1>(kc, (a, lda), bp, &mut acc),
        }
    }
    // Columns of each vector inside the tile, and the lane masks of partial ones.
    let cols = [w.min(LANES), w.saturating_sub(LANES).min(LANES)];
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let masks = cols.map(|n| _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lanes));
    // Loads the vector `v` of a tile row from `at`: whole, or its first `cols[v]` lanes.
    // SAFETY (callers): `at` holds `cols[v]` floats.
    let load = |at: *const f32, v: usize| unsafe {
        if cols[v] == LANES {
            _mm256_loadu_ps(at)
        } else {
            _mm256_maskload_ps(at, masks[v])
        }
    };
    if !bias.is_null() {
        for v in 0..2 {
            if cols[v] == 0 {
                continue;
            }
            // SAFETY: `bias` holds the tile's `w` values, `cols[v]` of them from
            // `LANES v`; lanes past `w` are masked.
            let add = load(unsafe { bias.add(LANES * v) }, v);
            for accr in acc.iter_mut().take(h) {
                accr[v] = _mm256_add_ps(accr[v], add);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate().take(h) {
        for v in 0..2 {
            if cols[v] == 0 {
                continue;
            }
            // SAFETY: row `r < h`, columns `LANES v..` up to `cols[v]` (`< w`, the rest
            // masked): inside the tile the caller gave, in `c` and in `add_from`.
            unsafe {
                let at = r * ldc + LANES * v;
                let mut x = accr[v];
                if !add_from.is_null() {
                    x = _mm256_add_ps(x, load(add_from.add(at), v));
                }
                if cols[v] == LANES {
                    _mm256_storeu_ps(c.add(at), x);
                } else {
                    _mm256_maskstore_ps(c.add(at), masks[v], x);
                }
            }
        }
    }
}

/// The depth loop of a tile of `H <= MR` rows, `acc[..H] += a @ bp` over `kc` depths: a
/// tile of fewer rows (the last of a product whose rows are not a multiple of 6: 2 of
/// them at 128 and 512 rows) does its own rows' work alone, where one loop for every
/// row count ran all 6, the last row repeated. Measured on a 2-core Zen 4, 2 threads,
/// CPU time (`gemm_rate --cpu-time --repeat 40`, four interleaved runs, GFLOP/s per
/// core, the AVX2+FMA kernel): `128 x 768 x 768` 105.5-106.7 -> 105.8-107.5, `128 x 768
/// x 3072` 105.7-106.4 -> 106.8-107.5; less than the third of a tile saved suggests, as
/// a tile of 2 rows has 4 chains of FMAs, too few to keep both FMA units busy.
///
/// # Safety
/// AVX2 and FMA; `a` readable for `H` rows of `kc` floats at stride `lda`, `bp` for
/// `NR kc` floats.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn steps<const H: usize>(
    kc: usize,
    (a, lda): (*const f32, usize),
    bp: *const f32,
    acc: &mut [[__m256; 2]; MR],
) {
    // SAFETY: rows `r < H` of the caller's rows.
    let row: [*const f32; H] = std::array::from_fn(|r| unsafe { a.add(r * lda) });
    for p in 0..kc {
        // SAFETY: `p < kc`: `NR` floats at `p * NR` of `bp`, one at `p` of each row.
        unsafe {
            let b0 = _mm256_loadu_ps(bp.add(p * NR));
            let b1 = _mm256_loadu_ps(bp.add(p * NR + LANES));
            for (accr, &ar) in acc.iter_mut().zip(&row) {
                let x = _mm256_set1_ps(*ar.add(p));
                accr[0] = _mm256_fmadd_ps(x, b0, accr[0]);
                accr[1] = _mm256_fmadd_ps(x, b1, accr[1]);
            }
        }
    }
}
