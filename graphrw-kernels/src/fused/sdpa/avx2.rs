//! Register-blocked AVX2+FMA micro-kernels for the two products of a tile, in f32:
//! the scores `S^T = K Q^T` and the values `O = alpha * O + P V`.
//!
//! Both are the broadcast-and-FMA kernels of BLIS-style GEMMs: a `6 x 16` block of the
//! result lives in 12 `ymm` accumulators for the whole contraction, each step loads two
//! vectors (16 contiguous floats) and broadcasts six scalars, and does 12 FMAs. With two
//! more registers for the loaded vectors and one for the broadcast, that is 15 of the 16
//! `ymm` registers, so nothing spills (the auto-vectorised version of the same tile,
//! written with arrays, did spill: see the module docs of `super`).
//!
//! The tile functions check every slice length once, at entry, with real assertions;
//! the micro-kernels then read through raw pointers within those bounds.

use std::arch::x86_64::*;

/// Rows of a micro-tile (keys for the scores, query rows for the values).
pub(super) const MR: usize = 6;
/// Columns of a micro-tile: two 8-lane vectors.
pub(super) const NR: usize = 16;

/// `s[j * lds + c] = sum_p k[j * d + p] * qt[p * ldq + c]` for `j < nk`, `c < ncols`
/// (`ncols` a multiple of 16, `ldq >= ncols`, `lds >= ncols`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_tile(
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
unsafe fn scores_micro<const R: usize>(
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
pub(super) unsafe fn values_tile(
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
unsafe fn values_micro<const R: usize, const W: usize>(
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

/// The score tile from packed operands: `s[(6 jp + r) * lds + 16 cp + t] = sum_p
/// kp[(jp * d + p) * 6 + r] * qp[(cp * d + p) * 16 + t]` for key panels `jp < npan`
/// (6 keys each, `kp` as [`super::packed`] lays them out: `[npan][d][6]`) and query
/// panels `cp < ncols / 16` (`qp`: `[ncols / 16][d][16]`). Each `6 x 16` micro-tile
/// reads both operands contiguously (one 24-byte and one 64-byte run per step), so
/// their rows share no cache sets and the hardware prefetcher follows them.
/// `q_outer` walks the query panels in the outer loop (one 16-column panel stays in
/// L1 while the key panels stream), else the key panels.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_packed(
    npan: usize,
    d: usize,
    kp: &[f32],
    qp: &[f32],
    ncols: usize,
    s: &mut [f32],
    lds: usize,
    q_outer: bool,
) {
    assert!(ncols.is_multiple_of(NR) && ncols <= lds);
    assert!(kp.len() >= npan * d * MR && qp.len() >= ncols * d && s.len() >= npan * MR * lds);
    let (kptr, qptr, sptr) = (kp.as_ptr(), qp.as_ptr(), s.as_mut_ptr());
    let ncp = ncols / NR;
    let (outer, inner) = if q_outer { (ncp, npan) } else { (npan, ncp) };
    for a in 0..outer {
        for b in 0..inner {
            let (jp, cp) = if q_outer { (b, a) } else { (a, b) };
            // SAFETY: key panel `jp < npan` (`d * 6` floats at `jp * d * 6`), query
            // panel `cp < ncols / 16` (`d * 16` floats at `cp * d * 16`) and rows
            // `6 jp .. 6 jp + 6` (< npan * 6), columns `16 cp .. 16 cp + 16` (<= ncols
            // <= lds) of `s`: all inside the lengths checked above.
            unsafe {
                scores_micro_packed(
                    d,
                    kptr.add(jp * d * MR),
                    qptr.add(cp * d * NR),
                    sptr.add(jp * MR * lds + cp * NR),
                    lds,
                    0,
                );
            }
        }
    }
}

/// One `6 x 16` block of the scores from a packed key panel (`kp[p * 6 + r]`) and a
/// packed query panel (`qp[p * 16 + t]`), depth `d`; returns the column maxima over
/// its first `valid` rows (`-inf` when `valid` is 0), taken from the registers before
/// the store, so the softmax needs no pass of its own to find them.
///
/// # Safety
/// AVX2 and FMA; `kp` readable for `6 d` floats, `qp` for `16 d`, `s` writable for 6
/// rows of 16 at stride `lds`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scores_micro_packed(
    d: usize,
    kp: *const f32,
    qp: *const f32,
    s: *mut f32,
    lds: usize,
    valid: usize,
) -> (__m256, __m256) {
    let mut lo = [_mm256_setzero_ps(); MR];
    let mut hi = [_mm256_setzero_ps(); MR];
    for p in 0..d {
        // SAFETY: `p < d`: 16 floats of `qp` at `16 p` and 6 of `kp` at `6 p`.
        unsafe {
            let q0 = _mm256_loadu_ps(qp.add(p * NR));
            let q1 = _mm256_loadu_ps(qp.add(p * NR + 8));
            for r in 0..MR {
                let kv = _mm256_broadcast_ss(&*kp.add(p * MR + r));
                lo[r] = _mm256_fmadd_ps(kv, q0, lo[r]);
                hi[r] = _mm256_fmadd_ps(kv, q1, hi[r]);
            }
        }
    }
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    let (mut m0, mut m1) = (ninf, ninf);
    for r in 0..MR {
        // SAFETY: row `r < 6` of `s`, 16 floats, inside the caller's bounds.
        unsafe {
            _mm256_storeu_ps(s.add(r * lds), lo[r]);
            _mm256_storeu_ps(s.add(r * lds + 8), hi[r]);
        }
        if r < valid {
            // The new score second: a NaN score makes the max NaN (see
            // `softmax_update`), so its row comes out NaN.
            m0 = _mm256_max_ps(m0, lo[r]);
            m1 = _mm256_max_ps(m1, hi[r]);
        }
    }
    (m0, m1)
}

/// The score tile and the online-softmax step in one pass over it, from packed
/// operands (the layouts of [`scores_packed`]): for each 16-column query panel, the
/// `nk` keys' scores (`s[j * lds + c]`, `j < nk`, key panels of 6 as in `kp`) with the
/// column maxima kept in registers as each micro-tile is stored, then, while that
/// `nk x 16` strip is still in L1, the step of [`softmax_update`] on its columns:
/// `alpha = e^(m - m_new)`, `s = e^(s - m_new)`, `l = alpha l + sum_j s`, `m = m_new`.
/// The same results as [`scores_packed`] followed by [`softmax_update`], without the
/// second and third passes over the whole `[nk, ncols]` tile (36 KiB at 96 x 96, more
/// than L1). No mask or causal triangle can be applied in between: the caller uses it
/// on blocks that have neither.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_softmax_packed(
    nk: usize,
    d: usize,
    kp: &[f32],
    qp: &[f32],
    ncols: usize,
    s: &mut [f32],
    lds: usize,
    m: &mut [f32],
    l: &mut [f32],
    alpha: &mut [f32],
) {
    let npan = nk.div_ceil(MR);
    assert!(ncols.is_multiple_of(NR) && ncols <= lds);
    assert!(m.len() >= ncols && l.len() >= ncols && alpha.len() >= ncols);
    assert!(kp.len() >= npan * d * MR && qp.len() >= ncols * d && s.len() >= npan * MR * lds);
    let (kptr, qptr, sptr) = (kp.as_ptr(), qp.as_ptr(), s.as_mut_ptr());
    for cp in 0..ncols / NR {
        let c = cp * NR;
        // SAFETY: columns `c..c + 16` (`<= ncols`) of `m`, `l`, `alpha`; key panel
        // `jp < npan`, query panel `cp < ncols / 16` and rows `6 jp .. 6 jp + 6`
        // (`< npan * 6`), columns `c..c + 16` (`<= lds`) of `s`: inside the lengths
        // checked above; the exp loop reads and writes rows `j < nk` of the same
        // columns.
        unsafe {
            let mo0 = _mm256_loadu_ps(m.as_ptr().add(c));
            let mo1 = _mm256_loadu_ps(m.as_ptr().add(c + 8));
            let (mut x0, mut x1) = (mo0, mo1);
            for jp in 0..npan {
                let (a, b) = scores_micro_packed(
                    d,
                    kptr.add(jp * d * MR),
                    qptr.add(cp * d * NR),
                    sptr.add(jp * MR * lds + c),
                    lds,
                    MR.min(nk - jp * MR),
                );
                x0 = _mm256_max_ps(x0, a);
                x1 = _mm256_max_ps(x1, b);
            }
            let (u0, u1) = (exp_shift(x0), exp_shift(x1));
            let a0 = exp8(_mm256_sub_ps(mo0, u0));
            let a1 = exp8(_mm256_sub_ps(mo1, u1));
            _mm256_storeu_ps(alpha.as_mut_ptr().add(c), a0);
            _mm256_storeu_ps(alpha.as_mut_ptr().add(c + 8), a1);
            _mm256_storeu_ps(m.as_mut_ptr().add(c), x0);
            _mm256_storeu_ps(m.as_mut_ptr().add(c + 8), x1);
            let mut l0 = _mm256_mul_ps(_mm256_loadu_ps(l.as_ptr().add(c)), a0);
            let mut l1 = _mm256_mul_ps(_mm256_loadu_ps(l.as_ptr().add(c + 8)), a1);
            for j in 0..nk {
                let p = sptr.add(j * lds + c);
                let e0 = exp8_shifted(_mm256_loadu_ps(p), u0);
                let e1 = exp8_shifted(_mm256_loadu_ps(p.add(8)), u1);
                _mm256_storeu_ps(p, e0);
                _mm256_storeu_ps(p.add(8), e1);
                l0 = _mm256_add_ps(l0, e0);
                l1 = _mm256_add_ps(l1, e1);
            }
            _mm256_storeu_ps(l.as_mut_ptr().add(c), l0);
            _mm256_storeu_ps(l.as_mut_ptr().add(c + 8), l1);
        }
    }
}

/// The value update from a packed value block: `o[i * ldo + 16 cp + t] = alpha[i] *
/// o[..] + sum_j pt[j * ldp + i] * vp[(cp * pstride + j) * 16 + t]` for `i < nrows`,
/// value panels `cp < npan` (16 columns each, `vp` laid out `[npan][pstride][16]` with
/// this block's keys starting at panel row 0 of the slice given), `j < nk`. Every
/// panel is full (the caller pads the value columns to a multiple of 16).
/// `v_outer` walks the value panels in the outer loop (one `nk x 16` panel stays in
/// L1 while the probability columns stream), else the query rows.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn values_packed(
    nk: usize,
    nrows: usize,
    pt: &[f32],
    ldp: usize,
    vp: &[f32],
    pstride: usize,
    npan: usize,
    alpha: &[f32],
    o: &mut [f32],
    ldo: usize,
    v_outer: bool,
) {
    assert!(nrows <= ldp && alpha.len() >= nrows && nk <= pstride && npan * NR <= ldo);
    assert!(pt.len() >= nk * ldp && o.len() >= nrows * ldo);
    assert!(npan == 0 || vp.len() >= (npan - 1) * pstride * NR + nk * NR);
    let (ptp, vptr, op) = (pt.as_ptr(), vp.as_ptr(), o.as_mut_ptr());
    let nstrips = nrows.div_ceil(MR);
    let (outer, inner) = if v_outer {
        (npan, nstrips)
    } else {
        (nstrips, npan)
    };
    for a in 0..outer {
        for b in 0..inner {
            let (cp, strip) = if v_outer { (a, b) } else { (b, a) };
            let i = strip * MR;
            let rows = MR.min(nrows - i);
            let al = &alpha[i..i + rows];
            // SAFETY: rows `i..i + rows` (<= nrows <= ldp) of the `nk` rows of `pt`;
            // rows `0..nk` of value panel `cp < npan` (16 floats each, inside the
            // length checked above); rows `i..i + rows` (<= nrows), columns
            // `16 cp .. 16 cp + 16` (<= ldo) of `o`.
            unsafe {
                let (pp, vq, oq) = (
                    ptp.add(i),
                    vptr.add(cp * pstride * NR),
                    op.add(i * ldo + cp * NR),
                );
                match rows {
                    6 => values_micro::<6, 2>(nk, pp, ldp, vq, NR, al, oq, ldo),
                    5 => values_micro::<5, 2>(nk, pp, ldp, vq, NR, al, oq, ldo),
                    4 => values_micro::<4, 2>(nk, pp, ldp, vq, NR, al, oq, ldo),
                    3 => values_micro::<3, 2>(nk, pp, ldp, vq, NR, al, oq, ldo),
                    2 => values_micro::<2, 2>(nk, pp, ldp, vq, NR, al, oq, ldo),
                    _ => values_micro::<1, 2>(nk, pp, ldp, vq, NR, al, oq, ldo),
                }
            }
        }
    }
}

/// The shift a column's exponentials are taken against: its running max, or 0 while
/// that max is still `-inf` (every score so far masked), so that `e^(s - shift)` is 0
/// for a masked score instead of `e^(-inf + inf)` = NaN.
#[target_feature(enable = "avx2")]
#[inline]
fn exp_shift(max: __m256) -> __m256 {
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    _mm256_blendv_ps(
        max,
        _mm256_setzero_ps(),
        _mm256_cmp_ps::<_CMP_EQ_OQ>(max, ninf),
    )
}

/// `e^x` on 8 lanes, as `2^(x log2 e)`: `x log2 e` splits into an integer `n` (built
/// in the exponent bits) and `f` in about `[-1/2, 1/2]`, with `2^f` from a degree-5
/// polynomial fitted for relative error (about 2e-7 in f32; 4e-7 is tested). 16 vector
/// operations, against 20 for the Cephes form of `Acc::exp_fast` (whose extra
/// precision is lost in the f32 sums of the softmax anyway). Exactly 0 below -87.34
/// (including `-inf`), NaN for NaN.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn exp8(x: __m256) -> __m256 {
    // Fitted (relative minimax on [-1/2, 1/2]); the first is close to ln 2 but not it.
    #[allow(clippy::approx_constant)]
    const C: [f32; 5] = [
        0.693_147,
        0.240_222_42,
        0.055_507_336,
        0.009_671_513,
        0.001_326_472_7,
    ];
    let lo = _mm256_set1_ps(-87.336_55);
    // `max`/`min` return their second operand when either is NaN: NaN stays NaN.
    let xc = _mm256_min_ps(_mm256_set1_ps(88.0), _mm256_max_ps(lo, x));
    // log2 e as f32 plus the rest: `f = x log2 e - n` is formed with one rounding
    // (two FMAs), so its error does not grow with |x| as `round(x log2 e)` alone would.
    let (l2e_hi, l2e_lo) = (
        _mm256_set1_ps(std::f32::consts::LOG2_E),
        _mm256_set1_ps(1.925_963e-8),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        xc, l2e_hi,
    ));
    let f = _mm256_fmadd_ps(xc, l2e_lo, _mm256_fmsub_ps(xc, l2e_hi, n));
    let mut p = _mm256_set1_ps(C[4]);
    for c in [C[3], C[2], C[1], C[0], 1.0] {
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
    }
    // n is in [-126, 127]: 2^n is a normal float.
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    let y = _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
    _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo))
}

/// `e^(s - u)` on 8 lanes for the probabilities of a softmax (`u` the column's max,
/// so `s - u <= 0`), with the exponent `t = (s - u) log2 e`. 14 vector operations
/// against the 18 of `exp8(s - u)`:
/// - no upper clamp (`t <= 0`);
/// - the lower clamp at -127 makes `2^n` the bit pattern 0 (`n + 127 = 0` in the
///   exponent field), so `t <= -126.5` (and `s = -inf`) gives exactly 0 with no blend;
/// - NaN stays NaN (the clamp returns its second operand, `t`, for NaN).
///
/// The difference is formed before the scaling: `s log2 e - u log2 e` in one FMA
/// would save an operation but overflows to `inf - inf` when `u` is near f32's
/// limit, as in a row masked everywhere by a finite-min additive mask (`-3.4e38`),
/// which must come out uniform. The error: two roundings of `t` (about `|t| 2^-23`),
/// so the relative error grows to about 2.5e-6 at `s - u = -20` (where `e^(s - u)` is
/// 2e-9, far below what an f32 sum of the larger probabilities keeps) and is the
/// polynomial's 2e-7 near 0. Tested against f64.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn exp8_shifted(s: __m256, u: __m256) -> __m256 {
    #[allow(clippy::approx_constant)]
    const C: [f32; 5] = [
        0.693_147,
        0.240_222_42,
        0.055_507_336,
        0.009_671_513,
        0.001_326_472_7,
    ];
    let t = _mm256_mul_ps(
        _mm256_sub_ps(s, u),
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    );
    let t = _mm256_max_ps(_mm256_set1_ps(-127.0), t);
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm256_sub_ps(t, n);
    let mut p = _mm256_set1_ps(C[4]);
    for c in [C[3], C[2], C[1], C[0], 1.0] {
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
    }
    // n is in [-127, 0]: `n + 127` is the biased exponent, 0 giving the float 0.
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(p, _mm256_castsi256_ps(pow2))
}

/// The online-softmax step of `tile::softmax_update_generic` on the transposed score
/// tile `s` (`nk` rows of stride `lds`, one column per query row), 8 columns at a
/// time with the column's max and sum in registers and [`exp8_shifted`] (the auto-vectorised
/// form kept them in memory and stored the max with masked moves, slow on AMD): for
/// each column `i < m.len()`, `m_new = max(m[i], s[..][i])`, `alpha[i] =
/// e^(m[i] - m_new)`, `s[j][i] = e^(s[j][i] - m_new)`, `l[i] = alpha[i] l[i] + sum_j
/// s[j][i]`, `m[i] = m_new`. A column whose max is still `-inf` takes its
/// exponentials against 0, so they stay exactly 0.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn softmax_update(
    s: &mut [f32],
    lds: usize,
    nk: usize,
    m: &mut [f32],
    l: &mut [f32],
    alpha: &mut [f32],
) {
    let w = m.len();
    assert!(w.is_multiple_of(8) && w <= lds && l.len() == w && alpha.len() == w);
    assert!(s.len() >= nk * lds);
    let sp = s.as_mut_ptr();
    for c in (0..w).step_by(8) {
        // SAFETY: columns `c..c + 8` (`c + 8 <= w <= lds`) of `m`, `l`, `alpha` (length
        // `w`) and of rows `j < nk` of `s` (`nk * lds <= s.len()`).
        unsafe {
            let col = sp.add(c);
            let mo = _mm256_loadu_ps(m.as_ptr().add(c));
            // Two chains, so the max's latency is hidden.
            let (mut x0, mut x1) = (mo, mo);
            let mut j = 0;
            while j + 2 <= nk {
                x0 = _mm256_max_ps(x0, _mm256_loadu_ps(col.add(j * lds)));
                x1 = _mm256_max_ps(x1, _mm256_loadu_ps(col.add((j + 1) * lds)));
                j += 2;
            }
            if j < nk {
                x0 = _mm256_max_ps(x0, _mm256_loadu_ps(col.add(j * lds)));
            }
            let mx = _mm256_max_ps(x0, x1);
            let used = exp_shift(mx);
            let a = exp8(_mm256_sub_ps(mo, used));
            _mm256_storeu_ps(alpha.as_mut_ptr().add(c), a);
            _mm256_storeu_ps(m.as_mut_ptr().add(c), mx);
            let mut l0 = _mm256_mul_ps(_mm256_loadu_ps(l.as_ptr().add(c)), a);
            let mut l1 = _mm256_setzero_ps();
            let mut j = 0;
            while j + 2 <= nk {
                let (p0, p1) = (col.add(j * lds), col.add((j + 1) * lds));
                let e0 = exp8_shifted(_mm256_loadu_ps(p0), used);
                let e1 = exp8_shifted(_mm256_loadu_ps(p1), used);
                _mm256_storeu_ps(p0, e0);
                _mm256_storeu_ps(p1, e1);
                l0 = _mm256_add_ps(l0, e0);
                l1 = _mm256_add_ps(l1, e1);
                j += 2;
            }
            if j < nk {
                let p0 = col.add(j * lds);
                let e0 = exp8_shifted(_mm256_loadu_ps(p0), used);
                _mm256_storeu_ps(p0, e0);
                l0 = _mm256_add_ps(l0, e0);
            }
            _mm256_storeu_ps(l.as_mut_ptr().add(c), _mm256_add_ps(l0, l1));
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tile::softmax_update_generic;

    /// Deterministic values in `[-1, 1)`.
    pub(in super::super) fn ramp(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i + seed * 7) * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// Whether a fused softmax step's value `y` agrees with the separate step's `x`.
    fn close(x: f32, y: f32) -> bool {
        x == y || (x - y).abs() <= 1e-6 * x.abs().max(1.0)
    }

    /// The probability tiles `(separate, fused)` agree over `nk` keys by `ncols`
    /// columns, rows `lds` apart.
    pub(in super::super) fn assert_probs_close(
        what: &str,
        (s1, s2): (&[f32], &[f32]),
        (nk, ncols, lds): (usize, usize, usize),
    ) {
        for j in 0..nk {
            for c in 0..ncols {
                let (x, y) = (s1[j * lds + c], s2[j * lds + c]);
                assert!(close(x, y), "{what}: p[{j}][{c}] {y} vs {x}");
            }
        }
    }

    /// The running state `m`, `l` and `alpha` (each a `(separate, fused)` pair) agree
    /// over `ncols` columns.
    pub(in super::super) fn assert_state_close(
        what: &str,
        state: [(&[f32], &[f32]); 3],
        ncols: usize,
    ) {
        for ((x, y), name) in state.into_iter().zip(["m", "l", "alpha"]) {
            for c in 0..ncols {
                assert!(
                    close(x[c], y[c]),
                    "{what}: {name}[{c}] {} vs {}",
                    y[c],
                    x[c]
                );
            }
        }
    }

    /// A running softmax state `(m, l)` over `ncols` columns for the score-pass tests:
    /// `fresh` as before the first key block (`-inf` maxima, zero sums), else as
    /// after earlier blocks (finite maxima with every fifth still `-inf`, sums >= 1).
    pub(in super::super) fn running_state(ncols: usize, fresh: bool) -> (Vec<f32>, Vec<f32>) {
        if fresh {
            return (vec![f32::NEG_INFINITY; ncols], vec![0.0; ncols]);
        }
        let m = ramp(ncols, 9)
            .into_iter()
            .enumerate()
            .map(|(i, x)| {
                if i % 5 == 0 {
                    f32::NEG_INFINITY
                } else {
                    x * 8.0
                }
            })
            .collect();
        let l = ramp(ncols, 11).into_iter().map(|x| x + 2.0).collect();
        (m, l)
    }

    /// The AVX2 exp against f64's `exp` (relative error <= 4e-7 over the range a
    /// softmax uses and beyond), and its edges: exactly 0 below -87.34 and at `-inf`,
    /// 1 at 0, NaN for NaN.
    #[test]
    fn exp8_matches_f64_exp() {
        if !crate::cpu::Isa::Avx2Fma.is_available() {
            println!("SKIPPED: exp8_matches_f64_exp needs AVX2 and FMA");
            return;
        }
        let mut xs: Vec<f32> = (-2000..=800).map(|i| i as f32 * 0.11).collect();
        xs.extend((0..4000).map(|i| -(i as f32) * 0.0023));
        xs.extend([
            f32::NEG_INFINITY,
            f32::NAN,
            -87.3,
            -87.4,
            -1e30,
            88.0,
            0.0,
            -0.0,
        ]);
        while !xs.len().is_multiple_of(8) {
            xs.push(1.5);
        }
        for chunk in xs.chunks(8) {
            let mut got = [0f32; 8];
            // SAFETY: AVX2 and FMA detected above; `chunk` and `got` hold 8 floats.
            unsafe {
                let y = super::exp8(super::_mm256_loadu_ps(chunk.as_ptr()));
                super::_mm256_storeu_ps(got.as_mut_ptr(), y);
            }
            for (&x, &g) in chunk.iter().zip(&got) {
                let ok = if x.is_nan() {
                    g.is_nan()
                } else if x < -87.336_55 {
                    g == 0.0
                } else {
                    let w = (x as f64).exp();
                    ((g as f64) - w).abs() <= 4e-7 * w
                };
                assert!(ok, "exp8({x}) = {g}, exp gives {}", (x as f64).exp());
            }
        }
        let mut one = [0f32; 8];
        // SAFETY: AVX2 and FMA detected above; `one` holds 8 floats.
        unsafe {
            super::_mm256_storeu_ps(one.as_mut_ptr(), super::exp8(super::_mm256_setzero_ps()))
        };
        assert_eq!(one, [1.0; 8]);
    }

    /// `exp8_shifted(s, u)` against f64's `e^(s - u)` for column maxima `u` of both
    /// signs and size, up to f32's limit (a finite-min mask), `s - u` from 0 to -90:
    /// relative error within the polynomial's 3e-7 plus the two roundings of the
    /// exponent (about 1e-7 per unit of `|t|`); tiny results (`e^(s - u)` below 1e-37)
    /// only checked to be tiny; exactly 0 at `s = -inf` and far below `u`, NaN for NaN.
    #[test]
    fn exp8_shifted_matches_f64_exp() {
        if !crate::cpu::Isa::Avx2Fma.is_available() {
            println!("SKIPPED: exp8_shifted_matches_f64_exp needs AVX2 and FMA");
            return;
        }
        for u in [0.0f32, 3.7, -12.5, 80.0, 1e-3, f32::MIN, -1e38, f32::MAX] {
            let mut ss: Vec<f32> = (0..=9000).map(|i| u - i as f32 * 0.01).collect();
            ss.extend([u, f32::NEG_INFINITY, f32::NAN, u - 200.0]);
            while !ss.len().is_multiple_of(8) {
                ss.push(u - 0.5);
            }
            for chunk in ss.chunks(8) {
                let mut got = [0f32; 8];
                // SAFETY: AVX2 and FMA detected above; `chunk` and `got` hold 8 floats.
                unsafe {
                    let y = super::exp8_shifted(
                        super::_mm256_loadu_ps(chunk.as_ptr()),
                        super::_mm256_set1_ps(u),
                    );
                    super::_mm256_storeu_ps(got.as_mut_ptr(), y);
                }
                for (&s, &g) in chunk.iter().zip(&got) {
                    let x = s as f64 - u as f64;
                    let w = x.exp();
                    let ok = if s.is_nan() {
                        g.is_nan()
                    } else if x < -88.5 {
                        g == 0.0
                    } else if w < 1e-37 {
                        (0.0..2e-37).contains(&g)
                    } else {
                        let tol = 3e-7 + 1e-7 * x.abs() * std::f64::consts::LOG2_E;
                        ((g as f64) - w).abs() <= tol * w
                    };
                    assert!(ok, "exp8_shifted({s}, u {u}) = {g}, exp gives {w}");
                }
            }
        }
    }

    /// The fused score + softmax pass against the score tile followed by the separate
    /// softmax step: key counts that are not a multiple of the 6-key panel (rows of
    /// the last panel past `nk` must not enter the max), one key, depths 1 to 64,
    /// several query panels, a stride wider than the columns, a fresh state (`m =
    /// -inf`) and a running one with some columns still at `-inf`.
    #[test]
    fn scores_softmax_packed_matches_separate_passes() {
        if !crate::cpu::Isa::Avx2Fma.is_available() {
            println!("SKIPPED: scores_softmax_packed_matches_separate_passes needs AVX2 and FMA");
            return;
        }
        use super::MR;
        for (nk, d, ncols, lds) in [
            (1usize, 1usize, 16usize, 16usize),
            (5, 3, 16, 32),
            (6, 8, 32, 32),
            (7, 16, 48, 64),
            (95, 64, 96, 96),
            (96, 64, 96, 96),
            (13, 128, 16, 16),
        ] {
            let npan = nk.div_ceil(MR);
            // Panel rows past `nk` hold keys of 40 (scores far above the real ones in
            // columns whose queries sum above 0): the separate step never sees them,
            // so a max that took them differs.
            let mut kp: Vec<f32> = ramp(npan * MR * d, nk + d)
                .into_iter()
                .map(|x| x * 2.0)
                .collect();
            for jp in 0..npan {
                for p in 0..d {
                    for r in 0..MR {
                        if jp * MR + r >= nk {
                            kp[(jp * d + p) * MR + r] = 40.0;
                        }
                    }
                }
            }
            let qp: Vec<f32> = ramp(ncols * d, 5)
                .into_iter()
                .map(|x| x * 40.0 / d as f32)
                .collect();
            for fresh in [true, false] {
                let (m, l) = running_state(ncols, fresh);
                let (mut s1, mut m1, mut l1, mut a1) = (
                    vec![0.0; npan * MR * lds],
                    m.clone(),
                    l.clone(),
                    vec![0.0; ncols],
                );
                let (mut s2, mut m2, mut l2, mut a2) = (s1.clone(), m, l, a1.clone());
                // SAFETY: AVX2 and FMA detected above.
                unsafe {
                    super::scores_packed(npan, d, &kp, &qp, ncols, &mut s1, lds, true);
                    super::softmax_update(&mut s1, lds, nk, &mut m1, &mut l1, &mut a1);
                    super::scores_softmax_packed(
                        nk, d, &kp, &qp, ncols, &mut s2, lds, &mut m2, &mut l2, &mut a2,
                    );
                }
                let what = format!("nk {nk} d {d} ncols {ncols} lds {lds} fresh {fresh}");
                assert_probs_close(&what, (&s1, &s2), (nk, ncols, lds));
                assert_state_close(&what, [(&m1, &m2), (&l1, &l2), (&a1, &a2)], ncols);
            }
        }
    }

    /// The AVX2 softmax step against the generic one on tiles of many shapes: odd key
    /// counts (the two-row unrolling's tail), one key, widths of 8 to 48 columns, a
    /// stride wider than the columns, running state from an earlier step, columns
    /// still without a visible key (`m = -inf`), masked scores, and NaN.
    #[test]
    fn softmax_update_matches_generic() {
        if !crate::cpu::Isa::Avx2Fma.is_available() {
            println!("SKIPPED: softmax_update_matches_generic needs AVX2 and FMA");
            return;
        }
        for (nk, w, lds) in [
            (1, 8, 8),
            (2, 16, 16),
            (5, 48, 48),
            (96, 48, 48),
            (37, 24, 40),
        ] {
            for step in 0..3 {
                let mut s: Vec<f32> = ramp(nk * lds, step + nk)
                    .into_iter()
                    .map(|x| x * 6.0)
                    .collect();
                // Column 0 all masked; column 3 masked but for the last key.
                for j in 0..nk {
                    s[j * lds] = f32::NEG_INFINITY;
                    if j + 1 < nk {
                        s[j * lds + 3] = f32::NEG_INFINITY;
                    }
                }
                if step == 2 {
                    s[(nk / 2) * lds + 5] = f32::NAN;
                }
                let mut m: Vec<f32> = ramp(w, 3).into_iter().map(|x| x * 4.0).collect();
                m[0] = f32::NEG_INFINITY;
                if step == 0 {
                    m.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                }
                let l: Vec<f32> = if step == 0 {
                    vec![0.0; w]
                } else {
                    ramp(w, 4).into_iter().map(|x| x + 2.0).collect()
                };
                let (mut s1, mut m1, mut l1, mut a1) =
                    (s.clone(), m.clone(), l.clone(), vec![0.0; w]);
                let mut scratch = vec![0.0; w];
                softmax_update_generic::<f32, true>(
                    &mut s1,
                    lds,
                    nk,
                    &mut m1,
                    &mut l1,
                    &mut a1,
                    &mut scratch,
                );
                let (mut s2, mut m2, mut l2, mut a2) = (s, m, l, vec![0.0; w]);
                // SAFETY: AVX2 and FMA detected above.
                unsafe { super::softmax_update(&mut s2, lds, nk, &mut m2, &mut l2, &mut a2) };
                let what = format!("nk {nk} w {w} lds {lds} step {step}");
                let close = |x: f32, y: f32| {
                    (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-6 * x.abs().max(1.0)
                };
                for j in 0..nk {
                    for i in 0..w {
                        let (x, y) = (s1[j * lds + i], s2[j * lds + i]);
                        assert!(close(x, y), "{what}: p[{j}][{i}] {y} vs {x}");
                    }
                }
                for i in 0..w {
                    assert!(close(l1[i], l2[i]), "{what}: l[{i}] {} vs {}", l2[i], l1[i]);
                    // A NaN score makes its column's sum (so its output row) NaN on both
                    // paths; where the NaN lands in the max and alpha depends on the
                    // order of the max, so only NaN-free columns compare those.
                    if !l1[i].is_nan() {
                        assert!(
                            close(a1[i], a2[i]),
                            "{what}: alpha[{i}] {} vs {}",
                            a2[i],
                            a1[i]
                        );
                        assert!(close(m1[i], m2[i]), "{what}: m[{i}] {} vs {}", m2[i], m1[i]);
                    }
                }
                if step == 2 {
                    assert!(l2[5].is_nan(), "{what}: the NaN score's column");
                }
                // Column 0 has no visible key: nothing is added, and the old sum is
                // dropped (alpha = e^-inf = 0).
                assert_eq!(l2[0], 0.0, "{what}");
                assert!((0..nk).all(|j| s2[j * lds] == 0.0), "{what}");
            }
        }
    }
}
