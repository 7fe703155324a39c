//! The inner loops of the fused attention: a vectorisable `exp`, the score micro-kernel
//! (`S^T = K Q^T` on a tile) and the value micro-kernel (`O = alpha * O + P V`).
//!
//! Everything here is `#[inline(always)]` and generic over `FMA`: the work-item driver is
//! compiled twice, once inside a `#[target_feature(enable = "avx2,fma")]` function (where
//! LLVM auto-vectorises these loops to 256-bit FMA code) and once for the baseline
//! target. Without the `FMA` flag, `fmadd` is a plain multiply-add (`mul_add` would call
//! the slow software `fmaf` there).

use crate::Real;

/// The compute type of the fused kernel: `f32` (for f32, f16, bf16) or `f64`.
pub(super) trait Acc: Real {
    /// `a * b + c`, fused when `FMA`.
    fn fmadd<const FMA: bool>(a: Self, b: Self, c: Self) -> Self;
    /// `e^x`, in a form LLVM vectorises; exactly 0 for `-inf` and very negative `x`.
    fn exp_fast<const FMA: bool>(x: Self) -> Self;
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

/// Queries per score micro-tile (columns of `S^T`, the vector dimension).
pub(super) const NR_Q: usize = 16;
/// Keys per score micro-tile (rows of `S^T`): 4 x 2 vectors = 8 accumulators. (6 x 2
/// was measured 4-5x slower: LLVM spills the accumulators.)
pub(super) const MR_K: usize = 4;
/// Query rows per value micro-tile.
pub(super) const MR_O: usize = 4;
/// Value columns per value micro-tile (the vector dimension): 4 x 2 vectors = 8
/// accumulators; narrower tails use 8, 4 and 1 columns.
pub(super) const NR_O: usize = 16;

/// `s[r * lds + c] = sum_p k[r * d + p] * qt[p * ldq + c]` for `r < MR`, `c < NR`:
/// `MR` keys (rows of `k`, length `d` each) against `NR` query columns of the packed,
/// transposed query block `qt` (`d` rows of stride `ldq`, starting at column 0 of the
/// slices given).
#[inline(always)]
pub(super) fn scores_micro<F: Acc, const MR: usize, const NR: usize, const FMA: bool>(
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
pub(super) fn values_micro<F: Acc, const MR: usize, const NR: usize, const FMA: bool>(
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
