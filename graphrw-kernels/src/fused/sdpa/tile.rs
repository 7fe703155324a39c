//! The inner loops of the fused attention: a vectorisable `exp`, the score micro-kernel
//! (`S^T = K Q^T` on a tile) and the value micro-kernel (`O = alpha * O + P V`).
//!
//! Everything here is `#[inline(always)]` and generic over `FMA`: the work-item driver is
//! compiled twice, once inside a `#[target_feature(enable = "avx2,fma")]` function (where
//! LLVM auto-vectorises these loops to 256-bit FMA code) and once for the baseline
//! target. Without the `FMA` flag, `fmadd` is a plain multiply-add (`mul_add` would call
//! the slow software `fmaf` there).

use std::ops::Range;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::{Real, Tensor};

/// A key or value tensor stored as f16 or bf16, for bulk conversion to f32 (half's
/// slice conversion uses F16C for f16 where the CPU has it; bf16 is a shift).
#[derive(Clone, Copy)]
pub(super) enum HalfSrc<'a> {
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    None,
}

impl<'a> HalfSrc<'a> {
    /// The f16/bf16 elements of `t`, if that is its dtype.
    pub(super) fn of(t: &'a Tensor) -> Self {
        if let Ok(s) = t.as_slice::<f16>() {
            HalfSrc::F16(s)
        } else if let Ok(s) = t.as_slice::<bf16>() {
            HalfSrc::BF16(s)
        } else {
            HalfSrc::None
        }
    }
}

/// The compute type of the fused kernel: `f32` (for f32, f16, bf16) or `f64`.
pub(super) trait Acc: Real {
    /// `a * b + c`, fused when `FMA`.
    fn fmadd<const FMA: bool>(a: Self, b: Self, c: Self) -> Self;
    /// `e^x`, in a form LLVM vectorises; exactly 0 for `-inf` and very negative `x`.
    fn exp_fast<const FMA: bool>(x: Self) -> Self;
    /// The score tile `s[j][c] = sum_p k[j][p] qt[p][c]` for `j < nk` keys (rows of
    /// `k`, length `d`) and all `ldq` query columns of the packed, transposed query
    /// block `qt` (`[d, ldq]`, `ldq` a multiple of [`NR_Q`]); `s` has stride `ldq`.
    #[inline(always)]
    fn scores_tile<const FMA: bool>(
        micro: bool,
        nk: usize,
        d: usize,
        k: &[Self],
        qt: &[Self],
        ldq: usize,
        s: &mut [Self],
    ) {
        let _ = micro;
        scores_tile_generic::<Self, FMA>(nk, d, k, qt, ldq, s)
    }

    /// The value update `o[i][c] = alpha[i] o[i][c] + sum_j pt[j][i] v[j][c]` for all
    /// `ldp` query rows, `c < dv`, `j < nk`; the probabilities are stored transposed
    /// (`pt` is `[nk, ldp]`), `v` is `[nk, dv]`, `o` is `[ldp, dv]`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn values_tile<const FMA: bool>(
        micro: bool,
        nk: usize,
        ldp: usize,
        dv: usize,
        pt: &[Self],
        v: &[Self],
        alpha: &[Self],
        o: &mut [Self],
    ) {
        let _ = micro;
        values_tile_generic::<Self, FMA>(nk, ldp, ldp, dv, pt, v, alpha, o)
    }

    /// [`Acc::values_tile`] on the first `nrows` query rows only (`nrows <= ldp`; the
    /// portable loops round `nrows` up to a multiple of 4, so `ldp` must be one).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn values_rows<const FMA: bool>(
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
        let _ = micro;
        values_tile_generic::<Self, FMA>(nk, nrows, ldp, dv, pt, v, alpha, o)
    }

    /// The online-softmax step on the transposed score tile `s` (`nk` rows of stride
    /// `lds`, one column per query row): see [`softmax_update_generic`]; `mnew` is
    /// scratch of `m`'s length.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn softmax_update<const FMA: bool>(
        micro: bool,
        s: &mut [Self],
        lds: usize,
        nk: usize,
        m: &mut [Self],
        l: &mut [Self],
        alpha: &mut [Self],
        mnew: &mut [Self],
    ) {
        let _ = micro;
        softmax_update_generic::<Self, FMA>(s, lds, nk, m, l, alpha, mnew)
    }

    /// Fills `dst` with `src[range]` converted, when `src` is f16/bf16 and this is f32;
    /// false (and `dst` untouched) otherwise.
    #[inline(always)]
    fn from_half(src: HalfSrc<'_>, range: Range<usize>, dst: &mut Vec<Self>) -> bool {
        let _ = (src, range, dst);
        false
    }

    /// The larger of two values (a select LLVM turns into `max`).
    #[inline(always)]
    fn vmax(a: Self, b: Self) -> Self {
        if a > b {
            a
        } else {
            b
        }
    }
}

impl Acc for f32 {
    #[inline(always)]
    fn from_half(src: HalfSrc<'_>, range: Range<usize>, dst: &mut Vec<f32>) -> bool {
        if matches!(src, HalfSrc::None) {
            return false;
        }
        dst.clear();
        dst.resize(range.len(), 0.0);
        match src {
            HalfSrc::F16(s) => s[range].convert_to_f32_slice(dst),
            HalfSrc::BF16(s) => s[range].convert_to_f32_slice(dst),
            HalfSrc::None => {}
        }
        true
    }

    #[inline(always)]
    fn scores_tile<const FMA: bool>(
        micro: bool,
        nk: usize,
        d: usize,
        k: &[f32],
        qt: &[f32],
        ldq: usize,
        s: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if FMA && micro {
            // SAFETY: `micro` is true only where the CPU has AVX2 and FMA (see
            // `Problem::micro`).
            unsafe { super::avx2::scores_tile(nk, d, k, qt, ldq, ldq, s, ldq) };
            return;
        }
        let _ = micro;
        scores_tile_generic::<f32, FMA>(nk, d, k, qt, ldq, s)
    }

    #[inline(always)]
    fn values_tile<const FMA: bool>(
        micro: bool,
        nk: usize,
        ldp: usize,
        dv: usize,
        pt: &[f32],
        v: &[f32],
        alpha: &[f32],
        o: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if FMA && micro {
            // SAFETY: `micro` is true only where the CPU has AVX2 and FMA (see
            // `Problem::micro`).
            unsafe { super::avx2::values_tile(nk, ldp, dv, pt, ldp, v, alpha, o) };
            return;
        }
        let _ = micro;
        values_tile_generic::<f32, FMA>(nk, ldp, ldp, dv, pt, v, alpha, o)
    }

    #[inline(always)]
    fn values_rows<const FMA: bool>(
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
        if FMA && micro {
            // SAFETY: `micro` is true only where the CPU has AVX2 and FMA (see
            // `Problem::micro`).
            unsafe { super::avx2::values_tile(nk, nrows, dv, pt, ldp, v, alpha, o) };
            return;
        }
        let _ = micro;
        values_tile_generic::<f32, FMA>(nk, nrows, ldp, dv, pt, v, alpha, o)
    }

    #[inline(always)]
    fn softmax_update<const FMA: bool>(
        micro: bool,
        s: &mut [f32],
        lds: usize,
        nk: usize,
        m: &mut [f32],
        l: &mut [f32],
        alpha: &mut [f32],
        mnew: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if FMA && micro && m.len().is_multiple_of(8) {
            // SAFETY: `micro` is true only where the CPU has AVX2 and FMA (see
            // `Problem::micro`).
            unsafe { super::avx2::softmax_update(s, lds, nk, m, l, alpha) };
            return;
        }
        let _ = micro;
        softmax_update_generic::<f32, FMA>(s, lds, nk, m, l, alpha, mnew)
    }

    #[inline(always)]
    fn fmadd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
        if FMA {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }

    /// Cephes' `expf`: `x = n ln2 + r`, a degree-6 polynomial for `e^r`, `2^n` built in
    /// the exponent bits. About 1 ulp over `[-87.3, 88]`; 0 below (including `-inf`).
    #[inline(always)]
    fn exp_fast<const FMA: bool>(x: f32) -> f32 {
        const LO: f32 = -87.336_55;
        const HI: f32 = 88.0;
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
        const MAGIC: f32 = 12_582_912.0;
        let xc = x.clamp(LO, HI);
        let t = Self::fmadd::<FMA>(xc, LOG2E, MAGIC);
        let n = t - MAGIC;
        let r = Self::fmadd::<FMA>(n, -LN2_HI, xc);
        let r = Self::fmadd::<FMA>(n, -LN2_LO, r);
        let mut p = 1.987_569_1e-4f32;
        p = Self::fmadd::<FMA>(p, r, 1.398_2e-3);
        p = Self::fmadd::<FMA>(p, r, 8.333_452e-3);
        p = Self::fmadd::<FMA>(p, r, 4.166_579_6e-2);
        p = Self::fmadd::<FMA>(p, r, 1.666_666_5e-1);
        p = Self::fmadd::<FMA>(p, r, 0.5);
        let e = Self::fmadd::<FMA>(p, r * r, r) + 1.0;
        // n is in [-126, 127]: the low bits of t hold it (two's complement offset).
        let n_int = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
        let pow2 = f32::from_bits((n_int.wrapping_add(127) as u32) << 23);
        if x < LO {
            0.0
        } else {
            e * pow2
        }
    }
}

impl Acc for f64 {
    #[inline(always)]
    fn fmadd<const FMA: bool>(a: f64, b: f64, c: f64) -> f64 {
        if FMA {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }

    /// f64 is not a performance target: the precise library `exp`.
    #[inline(always)]
    fn exp_fast<const FMA: bool>(x: f64) -> f64 {
        x.exp()
    }
}

/// [`Acc::scores_tile`] with the portable micro-kernels (auto-vectorised).
#[inline(always)]
fn scores_tile_generic<F: Acc, const FMA: bool>(
    nk: usize,
    d: usize,
    kb: &[F],
    qt: &[F],
    bqp: usize,
    s: &mut [F],
) {
    let mut j = 0;
    while j + MR_K <= nk {
        for c0 in (0..bqp).step_by(NR_Q) {
            scores_micro::<F, MR_K, NR_Q, FMA>(
                d,
                &kb[j * d..],
                &qt[c0..],
                bqp,
                &mut s[j * bqp + c0..],
                bqp,
            );
        }
        j += MR_K;
    }
    while j < nk {
        for c0 in (0..bqp).step_by(NR_Q) {
            scores_micro::<F, 1, NR_Q, FMA>(
                d,
                &kb[j * d..],
                &qt[c0..],
                bqp,
                &mut s[j * bqp + c0..],
                bqp,
            );
        }
        j += 1;
    }
}

/// [`Acc::values_tile`] with the portable micro-kernels (auto-vectorised), on the first
/// `nrows` rows rounded up to a multiple of [`MR_O`] (at most `bqp`, the stride of `s`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn values_tile_generic<F: Acc, const FMA: bool>(
    nk: usize,
    nrows: usize,
    bqp: usize,
    dv: usize,
    s: &[F],
    vb: &[F],
    alpha: &[F],
    o: &mut [F],
) {
    for i in (0..nrows.div_ceil(MR_O) * MR_O).step_by(MR_O) {
        let mut c = 0;
        while c + NR_O <= dv {
            values_micro::<F, MR_O, NR_O, FMA>(
                nk,
                &s[i..],
                bqp,
                &vb[c..],
                dv,
                &alpha[i..],
                &mut o[i * dv + c..],
                dv,
            );
            c += NR_O;
        }
        while c + 8 <= dv {
            values_micro::<F, MR_O, 8, FMA>(
                nk,
                &s[i..],
                bqp,
                &vb[c..],
                dv,
                &alpha[i..],
                &mut o[i * dv + c..],
                dv,
            );
            c += 8;
        }
        while c + 4 <= dv {
            values_micro::<F, MR_O, 4, FMA>(
                nk,
                &s[i..],
                bqp,
                &vb[c..],
                dv,
                &alpha[i..],
                &mut o[i * dv + c..],
                dv,
            );
            c += 4;
        }
        while c < dv {
            values_micro::<F, MR_O, 1, FMA>(
                nk,
                &s[i..],
                bqp,
                &vb[c..],
                dv,
                &alpha[i..],
                &mut o[i * dv + c..],
                dv,
            );
            c += 1;
        }
    }
}

/// Queries per score micro-tile (columns of `S^T`, the vector dimension).
pub(super) const NR_Q: usize = 16;
/// Keys per score micro-tile (rows of `S^T`): 4 x 2 vectors = 8 accumulators. (6 x 2
/// was measured 4-5x slower: LLVM spills the accumulators.)
const MR_K: usize = 4;
/// Query rows per value micro-tile.
const MR_O: usize = 4;
/// Value columns per value micro-tile (the vector dimension): 4 x 2 vectors = 8
/// accumulators; narrower tails use 8, 4 and 1 columns.
const NR_O: usize = 16;

/// `s[r * lds + c] = sum_p k[r * d + p] * qt[p * ldq + c]` for `r < MR`, `c < NR`:
/// `MR` keys (rows of `k`, length `d` each) against `NR` query columns of the packed,
/// transposed query block `qt` (`d` rows of stride `ldq`, starting at column 0 of the
/// slices given).
#[inline(always)]
fn scores_micro<F: Acc, const MR: usize, const NR: usize, const FMA: bool>(
    d: usize,
    k: &[F],
    qt: &[F],
    ldq: usize,
    s: &mut [F],
    lds: usize,
) {
    let mut acc = [[F::ZERO; NR]; MR];
    let rows: [&[F]; MR] = std::array::from_fn(|r| &k[r * d..r * d + d]);
    for (p, qrow) in qt.chunks(ldq).take(d).enumerate() {
        let qv: &[F; NR] = qrow[..NR].try_into().expect("NR columns");
        for (accr, row) in acc.iter_mut().zip(&rows) {
            let a = row[p];
            for (o, &b) in accr.iter_mut().zip(qv) {
                *o = F::fmadd::<FMA>(a, b, *o);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        s[r * lds..r * lds + NR].copy_from_slice(accr);
    }
}

/// `o[r][c] = alpha[r] * o[r][c] + sum_j pt[j * ldp + r] * v[j * ldv + c]` for
/// `r < MR`, `c < NR`, `j < nk`: `MR` query rows of the accumulator (stride `ldo`)
/// against `NR` value columns, with the probabilities stored transposed (`pt[j][i]`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn values_micro<F: Acc, const MR: usize, const NR: usize, const FMA: bool>(
    nk: usize,
    pt: &[F],
    ldp: usize,
    v: &[F],
    ldv: usize,
    alpha: &[F],
    o: &mut [F],
    ldo: usize,
) {
    let mut acc = [[F::ZERO; NR]; MR];
    for (r, accr) in acc.iter_mut().enumerate() {
        let a = alpha[r];
        for (x, &y) in accr.iter_mut().zip(&o[r * ldo..r * ldo + NR]) {
            *x = y * a;
        }
    }
    for (prow, vrow) in pt.chunks(ldp).zip(v.chunks(ldv)).take(nk) {
        let pv: &[F; MR] = prow[..MR].try_into().expect("MR rows");
        let vv: &[F; NR] = vrow[..NR].try_into().expect("NR columns");
        for (accr, &a) in acc.iter_mut().zip(pv) {
            for (x, &b) in accr.iter_mut().zip(vv) {
                *x = F::fmadd::<FMA>(a, b, *x);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        o[r * ldo..r * ldo + NR].copy_from_slice(accr);
    }
}

/// The online-softmax step on a transposed score tile `s[j][i]` (`nk` rows of stride
/// `lds`): updates the running max `m` and sum `l`, leaves `alpha = e^(m_old - m_new)`
/// (the accumulator's rescale factor) and turns the scores into `e^(s - m_new)`.
///
/// A row still without any visible key keeps `m = -inf`; its exponentials are taken
/// against 0 so they stay exactly 0 (no `-inf - -inf` NaN).
#[inline(always)]
pub(super) fn softmax_update_generic<F: Acc, const FMA: bool>(
    s: &mut [F],
    lds: usize,
    nk: usize,
    m: &mut [F],
    l: &mut [F],
    alpha: &mut [F],
    mnew: &mut [F],
) {
    mnew.copy_from_slice(m);
    for row in s.chunks_exact(lds).take(nk) {
        for (x, &y) in mnew.iter_mut().zip(row) {
            *x = F::vmax(*x, y);
        }
    }
    for (((a, mu), mo), li) in alpha
        .iter_mut()
        .zip(mnew.iter_mut())
        .zip(m.iter_mut())
        .zip(l.iter_mut())
    {
        let mx = *mu;
        let used = if mx == F::NEG_INFINITY { F::ZERO } else { mx };
        *a = F::exp_fast::<FMA>(*mo - used);
        *li *= *a;
        *mo = mx;
        *mu = used;
    }
    for row in s.chunks_exact_mut(lds).take(nk) {
        for ((x, &mu), li) in row.iter_mut().zip(mnew.iter()).zip(l.iter_mut()) {
            *x = F::exp_fast::<FMA>(*x - mu);
            *li += *x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Acc;

    #[test]
    fn exp_fast_matches_std() {
        for i in -2000..=800 {
            let x = i as f32 * 0.11;
            let (a, b) = (f32::exp_fast::<false>(x), x.exp());
            assert!(
                (a - b).abs() <= 4.0 * f32::EPSILON * b.abs() + 1e-37,
                "{x}: {a} vs {b}"
            );
        }
        assert_eq!(f32::exp_fast::<false>(f32::NEG_INFINITY), 0.0);
        assert_eq!(f32::exp_fast::<false>(0.0), 1.0);
    }
}
