//! The micro-kernels of the in-place path: the score and value tiles read K, Q^T, P^T
//! and V where they lie.

use std::arch::x86_64::*;

use super::*;

/// `s[j * lds + c] = sum_p k[j * d + p] * qt[p * ldq + c]` for `j < nk`, `c < ncols`
/// (`ncols` a multiple of 16, `ldq >= ncols`, `lds >= ncols`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
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
    assert!(ncols / NR * NR == ncols && ncols <= ldq && ncols <= lds);
    assert!(k.len() >= nk * d && qt.len() >= d * ldq && s.len() >= nk * lds);
    let (k, qt, s) = (k.as_ptr(), qt.as_ptr(), s.as_mut_ptr());
    let mut j = 0;
    while j < nk {
        let rows = MR.min(nk - j);
        for c in (0..ncols).step_by(NR) {
            // SAFETY: rows `j..j + rows` of `k` (length `d`) are inside `k` (nk * d
            // checked above); columns `c..c + 16` of the `d` rows of `qt` and of the
            // `rows` rows of `s` are inside them (`c + 16 <= ncols <= ldq, lds`).
            unsafe {
                let (kp, qp, sp) = (k.add(j * d), qt.add(c), s.add(j * lds + c));
                match rows {
                    6 => scores_micro::<6>(d, kp, qp, ldq, sp, lds),
                    5 => scores_micro::<5>(d, kp, qp, ldq, sp, lds),
                    4 => scores_micro::<4>(d, kp, qp, ldq, sp, lds),
                    3 => scores_micro::<3>(d, kp, qp, ldq, sp, lds),
                    2 => scores_micro::<2>(d, kp, qp, ldq, sp, lds),
                    _ => scores_micro::<1>(d, kp, qp, ldq, sp, lds),
                }
            }
        }
        j += rows;
    }
}

/// One `R x 16` block of the scores: `R` keys (rows of `k`, stride `d`) against 16
/// query columns of `qt` (`d` rows of stride `ldq`).
///
/// # Safety
/// AVX2 and FMA; `k` readable for `R * d` floats, `qt` for `d` rows of 16 at stride
/// `ldq`, `s` writable for `R` rows of 16 at stride `lds`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn scores_micro<const R: usize>(
    d: usize,
    k: *const f32,
    qt: *const f32,
    ldq: usize,
    s: *mut f32,
    lds: usize,
) {
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    for p in 0..d {
        // SAFETY: `p < d`: row `p` of `qt` and element `p` of each of the `R` key rows
        // are inside the caller's bounds.
        unsafe {
            let q0 = _mm256_loadu_ps(qt.add(p * ldq));
            let q1 = _mm256_loadu_ps(qt.add(p * ldq + 8));
            for r in 0..R {
                let kv = _mm256_broadcast_ss(&*k.add(r * d + p));
                lo[r] = _mm256_fmadd_ps(kv, q0, lo[r]);
                hi[r] = _mm256_fmadd_ps(kv, q1, hi[r]);
            }
        }
    }
    for r in 0..R {
        // SAFETY: row `r < R` of `s`, 16 floats, inside the caller's bounds.
        unsafe {
            _mm256_storeu_ps(s.add(r * lds), lo[r]);
            _mm256_storeu_ps(s.add(r * lds + 8), hi[r]);
        }
    }
}

/// `o[i * ldo + c] = alpha[i] * o[i * ldo + c] + sum_j pt[j * ldp + i] * v[j * ldv + c]`
/// for `i < nrows`, `c < dv`, `j < nk`: the probabilities stored transposed (`pt[j][i]`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
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
    let cols16 = dv / NR * NR;
    let cols8 = dv / 8 * 8;
    let (ptp, vp, op) = (pt.as_ptr(), v.as_ptr(), o.as_mut_ptr());
    let mut i = 0;
    while i < nrows {
        let rows = MR.min(nrows - i);
        let al = &alpha[i..i + rows];
        let mut c = 0;
        while c < cols8 {
            let wide = c < cols16;
            // SAFETY: rows `i..i + rows` (< nrows <= ldp) of every `pt` row `j < nk`,
            // columns `c..c + 16` (or `+ 8` when not `wide`, `c + 8 <= cols8 <= dv`)
            // of the `nk` rows of `v` and of the `rows` rows of `o`: all inside the
            // lengths checked above.
            unsafe {
                let (pp, vq, oq) = (ptp.add(i), vp.add(c), op.add(i * dv + c));
                match (rows, wide) {
                    (6, true) => values_micro::<6, 2>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (5, true) => values_micro::<5, 2>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (4, true) => values_micro::<4, 2>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (3, true) => values_micro::<3, 2>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (2, true) => values_micro::<2, 2>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (_, true) => values_micro::<1, 2>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (6, false) => values_micro::<6, 1>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (5, false) => values_micro::<5, 1>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (4, false) => values_micro::<4, 1>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (3, false) => values_micro::<3, 1>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (2, false) => values_micro::<2, 1>(nk, pp, ldp, vq, dv, al, oq, dv),
                    (_, false) => values_micro::<1, 1>(nk, pp, ldp, vq, dv, al, oq, dv),
                }
            }
            c += if wide { NR } else { 8 };
        }
        // The last `dv % 8` columns, plainly.
        for (r, &a) in al.iter().enumerate() {
            let orow = &mut o[(i + r) * dv..(i + r + 1) * dv];
            for (cc, out) in orow.iter_mut().enumerate().skip(cols8) {
                let mut acc = *out * a;
                for j in 0..nk {
                    acc = pt[j * ldp + i + r].mul_add(v[j * dv + cc], acc);
                }
                *out = acc;
            }
        }
        i += rows;
    }
}

/// One `R x (8 W)` block of the values: `R` accumulator rows (stride `ldo`) rescaled by
/// `alpha`, plus `R` probability columns of `pt` times `8 W` value columns.
///
/// # Safety
/// AVX2 and FMA; `pt` readable for `nk` rows of `R` at stride `ldp`, `v` for `nk` rows
/// of `8 W` at stride `ldv`, `o` readable and writable for `R` rows of `8 W` at stride
/// `ldo`; `alpha` has `R` elements.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn values_micro<const R: usize, const W: usize>(
    nk: usize,
    pt: *const f32,
    ldp: usize,
    v: *const f32,
    ldv: usize,
    alpha: &[f32],
    o: *mut f32,
    ldo: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); W]; R];
    for (r, accr) in acc.iter_mut().enumerate() {
        let a = _mm256_set1_ps(alpha[r]);
        for (w, x) in accr.iter_mut().enumerate() {
            // SAFETY: row `r < R`, columns `8 w .. 8 w + 8 <= 8 W` of `o`.
            *x = _mm256_mul_ps(a, unsafe { _mm256_loadu_ps(o.add(r * ldo + 8 * w)) });
        }
    }
    for j in 0..nk {
        // SAFETY: `j < nk`: row `j` of `v` (8 W floats) and of `pt` (R floats).
        unsafe {
            let vr: [__m256; W] = std::array::from_fn(|w| _mm256_loadu_ps(v.add(j * ldv + 8 * w)));
            for (r, accr) in acc.iter_mut().enumerate() {
                let p = _mm256_broadcast_ss(&*pt.add(j * ldp + r));
                for (x, &vv) in accr.iter_mut().zip(&vr) {
                    *x = _mm256_fmadd_ps(p, vv, *x);
                }
            }
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        for (w, &x) in accr.iter().enumerate() {
            // SAFETY: as for the loads above.
            unsafe { _mm256_storeu_ps(o.add(r * ldo + 8 * w), x) };
        }
    }
}
