//! The micro-kernels of the packed path: scores and values from packed panels, and the
//! score pass with the online-softmax step fused in.

use std::arch::x86_64::*;

use super::*;

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
pub(in crate::fused::sdpa) unsafe fn scores_packed(
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
pub(super) unsafe fn scores_micro_packed(
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
pub(in crate::fused::sdpa) unsafe fn scores_softmax_packed(
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
pub(in crate::fused::sdpa) unsafe fn values_packed(
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
