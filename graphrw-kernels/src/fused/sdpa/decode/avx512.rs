//! AVX-512F tiles of the decode path, reading the keys, values, transposed queries and
//! probabilities where they lie (nothing packed: a decode step reads each key and value
//! row once, so packing would cost as much as the products).
//!
//! Both are broadcast-and-FMA tiles with up to `8 x 48` results in 24 `zmm`
//! accumulators: the scores `S^T = K Q^T` (8 keys x up to 3 vectors of 16 query
//! columns, the key element broadcast), the values `O = alpha * O + P V` (8 query rows
//! x up to 3 vectors of 16 value columns, the probability broadcast; the last vector
//! of a row masked where `Dv` is not a multiple of 16).
//!
//! The tile functions check every slice length once, at entry, with real assertions;
//! the micro-kernels then read through raw pointers within those bounds.

use std::arch::x86_64::*;

/// Rows of a micro-tile (keys for the scores, query rows for the values).
const MR: usize = 8;
/// Lanes of a vector.
const NR: usize = 16;
/// Most vectors a micro-tile spans.
const MAXW: usize = 3;

/// Splits `n` vectors into groups of at most [`MAXW`], as even as possible: yields
/// `(first vector, vectors)`.
fn groups(n: usize) -> impl Iterator<Item = (usize, usize)> {
    let count = n.div_ceil(MAXW);
    (0..count).map(move |g| {
        let start = g * n / count;
        (start, (g + 1) * n / count - start)
    })
}

/// Calls `$f::<R, W>($args)` for the runtime `rows` (1 to 8) and `w` (1 to 3).
macro_rules! dispatch_rw {
    ($rows:expr, $w:expr, $f:ident($($args:expr),*)) => {
        match ($rows, $w) {
            (8, 3) => $f::<8, 3>($($args),*),
            (8, 2) => $f::<8, 2>($($args),*),
            (8, _) => $f::<8, 1>($($args),*),
            (7, 3) => $f::<7, 3>($($args),*),
            (7, 2) => $f::<7, 2>($($args),*),
            (7, _) => $f::<7, 1>($($args),*),
            (6, 3) => $f::<6, 3>($($args),*),
            (6, 2) => $f::<6, 2>($($args),*),
            (6, _) => $f::<6, 1>($($args),*),
            (5, 3) => $f::<5, 3>($($args),*),
            (5, 2) => $f::<5, 2>($($args),*),
            (5, _) => $f::<5, 1>($($args),*),
            (4, 3) => $f::<4, 3>($($args),*),
            (4, 2) => $f::<4, 2>($($args),*),
            (4, _) => $f::<4, 1>($($args),*),
            (3, 3) => $f::<3, 3>($($args),*),
            (3, 2) => $f::<3, 2>($($args),*),
            (3, _) => $f::<3, 1>($($args),*),
            (2, 3) => $f::<2, 3>($($args),*),
            (2, 2) => $f::<2, 2>($($args),*),
            (2, _) => $f::<2, 1>($($args),*),
            (_, 3) => $f::<1, 3>($($args),*),
            (_, 2) => $f::<1, 2>($($args),*),
            (_, _) => $f::<1, 1>($($args),*),
        }
    };
}

/// `s[j * lds + c] = sum_p k[j * d + p] * qt[p * ldq + c]` for `j < nk`, `c < ncols`
/// (`ncols` a multiple of 16, `ldq >= ncols`, `lds >= ncols`).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(in crate::fused::sdpa) unsafe fn scores_tile(
    nk: usize,
    d: usize,
    k: &[f32],
    qt: &[f32],
    ldq: usize,
    ncols: usize,
    s: &mut [f32],
    lds: usize,
) {
    assert!(ncols.is_multiple_of(NR) && ncols <= ldq && ncols <= lds);
    assert!(k.len() >= nk * d && qt.len() >= d * ldq && s.len() >= nk * lds);
    let (k, qt, s) = (k.as_ptr(), qt.as_ptr(), s.as_mut_ptr());
    let mut j = 0;
    while j < nk {
        let rows = MR.min(nk - j);
        for (v0, w) in groups(ncols / NR) {
            let c = v0 * NR;
            // SAFETY: rows `j..j + rows` of `k` (length `d`) are inside `k` (nk * d
            // checked above); columns `c..c + 16 w <= ncols` of the `d` rows of `qt`
            // and of the `rows` rows of `s` are inside them (`ncols <= ldq, lds`).
            unsafe {
                let (kp, qp, sp) = (k.add(j * d), qt.add(c), s.add(j * lds + c));
                dispatch_rw!(rows, w, scores_micro(d, kp, qp, ldq, sp, lds));
            }
        }
        j += rows;
    }
}

/// One `R x 16 W` block of the scores: `R` keys (rows of `k`, stride `d`) against
/// `16 W` query columns of `qt` (`d` rows of stride `ldq`).
///
/// # Safety
/// AVX-512F; `k` readable for `R * d` floats, `qt` for `d` rows of `16 W` at stride
/// `ldq`, `s` writable for `R` rows of `16 W` at stride `lds`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scores_micro<const R: usize, const W: usize>(
    d: usize,
    k: *const f32,
    qt: *const f32,
    ldq: usize,
    s: *mut f32,
    lds: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); W]; R];
    for p in 0..d {
        // SAFETY: `p < d`: row `p` of `qt` (16 W floats) and element `p` of each of the
        // `R` key rows are inside the caller's bounds.
        unsafe {
            let q: [__m512; W] = std::array::from_fn(|w| _mm512_loadu_ps(qt.add(p * ldq + NR * w)));
            for (r, accr) in acc.iter_mut().enumerate() {
                let kv = _mm512_set1_ps(*k.add(r * d + p));
                for (x, &qv) in accr.iter_mut().zip(&q) {
                    *x = _mm512_fmadd_ps(kv, qv, *x);
                }
            }
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        for (w, &x) in accr.iter().enumerate() {
            // SAFETY: row `r < R` of `s`, 16 floats at `16 w < 16 W`, inside the
            // caller's bounds.
            unsafe { _mm512_storeu_ps(s.add(r * lds + NR * w), x) };
        }
    }
}

/// Query rows up to which [`scores_rows`] runs instead of [`scores_tile`]: its cost per
/// key grows with the rows (`rows x D / 16` FMAs, a reduction and a scattered store per
/// row), [`scores_tile`]'s does not (`D` FMAs for up to 16 rows). Measured
/// (`sdpa_time --decode --cpu-time`, one thread, f32 D=64 Skv=1024 Sq=1, Hkv=4,
/// `scores_tile` -> `scores_rows`): 1 row (Hq=4) 166 -> 109 us, 2 rows (Hq=8) 165 ->
/// 144 us, 4 rows 178 -> 199 us, 8 rows 185 -> 289 us; Hq=Hkv=32 1800 -> 1070 us.
pub(in crate::fused::sdpa) const DOT_ROWS: usize = 2;

/// `s[j * lds + r] = sum_p k[j * d + p] * q[r * d + p]` for `j < nk`, `r < nrows`:
/// the transposed scores of a few query rows `q` (row-major), as dot products along
/// `D` (16 keys at a time, their 16 sums reduced together by [`reduce16`]). Columns
/// `nrows..lds` of `s` are left as they are.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(in crate::fused::sdpa) unsafe fn scores_rows(
    nk: usize,
    d: usize,
    k: &[f32],
    q: &[f32],
    nrows: usize,
    s: &mut [f32],
    lds: usize,
) {
    assert!(nrows <= lds && k.len() >= nk * d && q.len() >= nrows * d);
    assert!(s.len() >= nk * lds);
    let nvec = d.div_ceil(NR);
    let tail: __mmask16 = match d % NR {
        0 => 0xFFFF,
        t => (1u16 << t) - 1,
    };
    let mask = |c: usize| if c + 1 == nvec { tail } else { 0xFFFF };
    let (kp, qp) = (k.as_ptr(), q.as_ptr());
    let mut sums = [0.0f32; NR];
    for j0 in (0..nk).step_by(NR) {
        let n = NR.min(nk - j0);
        for r in 0..nrows {
            let mut acc = [_mm512_setzero_ps(); NR];
            for c in 0..nvec {
                // SAFETY: row `r < nrows` of `q` and rows `j0 + jj < nk` of `k`, the
                // lanes of `mask(c)` at `16 c` (inside `d`): within the lengths checked
                // above.
                unsafe {
                    let qv = _mm512_maskz_loadu_ps(mask(c), qp.add(r * d + NR * c));
                    for (jj, x) in acc.iter_mut().enumerate().take(n) {
                        let kv = _mm512_maskz_loadu_ps(mask(c), kp.add((j0 + jj) * d + NR * c));
                        *x = _mm512_fmadd_ps(kv, qv, *x);
                    }
                }
            }
            // SAFETY: the CPU has AVX-512F, this function's contract.
            let z = unsafe { reduce16(&acc) };
            // SAFETY: `sums` holds 16 floats.
            unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), z) };
            for jj in 0..n {
                // Lane `4 m + t` of `reduce16`'s result holds key `4 t + m`.
                s[(j0 + jj) * lds + r] = sums[4 * (jj % 4) + jj / 4];
            }
        }
    }
}

/// The 16 horizontal sums of `acc`, in one vector: lane `4 m + t` holds the sum of
/// `acc[4 t + m]` (a transposing reduction: 15 shuffles and 15 additions in four
/// steps, instead of a reduction of its own for each vector).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn reduce16(acc: &[__m512; NR]) -> __m512 {
    // 16 -> 8: halves of pairs; quadrants 0-1 hold vector 2i's 8 partial sums, 2-3
    // vector 2i + 1's.
    let r: [__m512; 8] = std::array::from_fn(|i| {
        let (a, b) = (acc[2 * i], acc[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        )
    });
    // 8 -> 4: quadrant m of u[i] holds vector 4i + m's 4 partial sums.
    let u: [__m512; 4] = std::array::from_fn(|i| {
        let (x, y) = (r[2 * i], r[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(x, y),
            _mm512_shuffle_f32x4::<0xDD>(x, y),
        )
    });
    // 4 -> 2: quadrant m of w[i] holds [8i + m, 8i + 4 + m, 8i + m, 8i + 4 + m].
    let w: [__m512; 2] = std::array::from_fn(|i| {
        let (x, y) = (u[2 * i], u[2 * i + 1]);
        _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y))
    });
    // 2 -> 1: quadrant m holds the sums of vectors m, 4 + m, 8 + m, 12 + m.
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x44>(w[0], w[1]),
        _mm512_shuffle_ps::<0xEE>(w[0], w[1]),
    )
}

/// `o[i * dv + c] = alpha[i] * o[i * dv + c] + sum_j pt[j * ldp + i] * v[j * dv + c]`
/// for `i < nrows`, `c < dv`, `j < nk`: the probabilities stored transposed.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(in crate::fused::sdpa) unsafe fn values_tile(
    nk: usize,
    nrows: usize,
    dv: usize,
    pt: &[f32],
    ldp: usize,
    v: &[f32],
    alpha: &[f32],
    o: &mut [f32],
) {
    assert!(nrows <= ldp && alpha.len() >= nrows);
    assert!(pt.len() >= nk * ldp && v.len() >= nk * dv && o.len() >= nrows * dv);
    let nvec = dv.div_ceil(NR);
    // The lanes of the last vector inside `dv`.
    let tail: __mmask16 = match dv % NR {
        0 => 0xFFFF,
        t => (1u16 << t) - 1,
    };
    let (ptp, vp, op) = (pt.as_ptr(), v.as_ptr(), o.as_mut_ptr());
    let mut i = 0;
    while i < nrows {
        let rows = MR.min(nrows - i);
        let al = alpha[i..i + rows].as_ptr();
        for (v0, w) in groups(nvec) {
            let c = v0 * NR;
            let last = if v0 + w == nvec { tail } else { 0xFFFF };
            // SAFETY: rows `i..i + rows` (< nrows <= ldp) of every `pt` row `j < nk`;
            // columns `c..c + 16 w` of the `nk` rows of `v` and of the `rows` rows of
            // `o`, the last vector's lanes past `dv` masked off (`last`): all inside
            // the lengths checked above; `al` has `rows` elements.
            unsafe {
                let (pp, vq, oq) = (ptp.add(i), vp.add(c), op.add(i * dv + c));
                dispatch_rw!(rows, w, values_micro(nk, pp, ldp, vq, dv, al, oq, dv, last));
            }
        }
        i += rows;
    }
}

/// One `R x 16 W` block of the values: `R` accumulator rows (stride `ldo`) rescaled by
/// `alpha`, plus `R` probability columns of `pt` times `16 W` value columns; the last
/// vector's loads and stores masked by `last`.
///
/// # Safety
/// AVX-512F; `pt` readable for `nk` rows of `R` at stride `ldp`, `v` for `nk` rows of
/// `16 (W - 1)` floats plus the `last` lanes at stride `ldv`, `o` readable and writable
/// for `R` such rows at stride `ldo`; `alpha` readable for `R` floats.
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn values_micro<const R: usize, const W: usize>(
    nk: usize,
    pt: *const f32,
    ldp: usize,
    v: *const f32,
    ldv: usize,
    alpha: *const f32,
    o: *mut f32,
    ldo: usize,
    last: __mmask16,
) {
    let mask = |w: usize| if w + 1 == W { last } else { 0xFFFF };
    let mut acc = [[_mm512_setzero_ps(); W]; R];
    for (r, accr) in acc.iter_mut().enumerate() {
        // SAFETY: `r < R` elements of `alpha`; row `r` of `o`, the lanes of `mask(w)`.
        unsafe {
            let a = _mm512_set1_ps(*alpha.add(r));
            for (w, x) in accr.iter_mut().enumerate() {
                let y = _mm512_maskz_loadu_ps(mask(w), o.add(r * ldo + NR * w));
                *x = _mm512_mul_ps(a, y);
            }
        }
    }
    for j in 0..nk {
        // SAFETY: `j < nk`: row `j` of `v` (the lanes of `mask(w)`) and of `pt` (`R`
        // floats).
        unsafe {
            let vr: [__m512; W] =
                std::array::from_fn(|w| _mm512_maskz_loadu_ps(mask(w), v.add(j * ldv + NR * w)));
            for (r, accr) in acc.iter_mut().enumerate() {
                let p = _mm512_set1_ps(*pt.add(j * ldp + r));
                for (x, &vv) in accr.iter_mut().zip(&vr) {
                    *x = _mm512_fmadd_ps(p, vv, *x);
                }
            }
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        for (w, &x) in accr.iter().enumerate() {
            // SAFETY: as for the loads above.
            unsafe { _mm512_mask_storeu_ps(o.add(r * ldo + NR * w), mask(w), x) };
        }
    }
}

#[cfg(test)]
mod tests {
    /// Deterministic values in `[-1, 1)`.
    fn ramp(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i + seed * 131) * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() <= 1e-4 * (1.0 + b.abs())
    }

    #[test]
    fn tiles_match_plain_loops_at_odd_sizes() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            println!("SKIPPED: no AVX-512F");
            return;
        }
        for (nk, d, ncols) in [
            (1, 1, 16),
            (7, 5, 16),
            (9, 64, 48),
            (17, 33, 64),
            (25, 8, 112),
        ] {
            let (k, qt) = (ramp(nk * d, 1), ramp(d * ncols, 2));
            let mut s = vec![0.0f32; nk * ncols];
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { super::scores_tile(nk, d, &k, &qt, ncols, ncols, &mut s, ncols) };
            for j in 0..nk {
                for c in 0..ncols {
                    let want: f32 = (0..d).map(|p| k[j * d + p] * qt[p * ncols + c]).sum();
                    assert!(close(s[j * ncols + c], want), "scores {nk} {d} {ncols}");
                }
            }
        }
        for (nk, d, nrows) in [
            (1, 1, 1),
            (15, 64, 8),
            (16, 17, 3),
            (37, 128, 5),
            (40, 40, 1),
        ] {
            let (k, q) = (ramp(nk * d, 7), ramp(nrows * d, 8));
            let lds = 16;
            let mut s = vec![9.0f32; nk * lds];
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { super::scores_rows(nk, d, &k, &q, nrows, &mut s, lds) };
            for j in 0..nk {
                for r in 0..lds {
                    let want = if r < nrows {
                        (0..d).map(|p| k[j * d + p] * q[r * d + p]).sum()
                    } else {
                        9.0
                    };
                    assert!(close(s[j * lds + r], want), "rows {nk} {d} {nrows}");
                }
            }
        }
        for (nk, nrows, ldp, dv) in [
            (1, 1, 16, 1),
            (5, 9, 16, 15),
            (3, 17, 32, 17),
            (8, 4, 16, 50),
        ] {
            let (pt, v, alpha) = (ramp(nk * ldp, 3), ramp(nk * dv, 4), ramp(nrows, 5));
            let o0 = ramp(nrows * dv, 6);
            let mut o = o0.clone();
            // One element past the rows: the masked tail must leave it alone.
            o.push(42.0);
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { super::values_tile(nk, nrows, dv, &pt, ldp, &v, &alpha, &mut o) };
            assert_eq!(o[nrows * dv], 42.0);
            for i in 0..nrows {
                for c in 0..dv {
                    let pv: f32 = (0..nk).map(|j| pt[j * ldp + i] * v[j * dv + c]).sum();
                    let want = alpha[i] * o0[i * dv + c] + pv;
                    assert!(close(o[i * dv + c], want), "values {nk} {nrows} {dv}");
                }
            }
        }
    }
}
