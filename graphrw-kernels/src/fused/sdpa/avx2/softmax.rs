//! The online-softmax step on 8 columns at a time and its 8-lane exponentials.

use std::arch::x86_64::*;

/// The shift a column's exponentials are taken against: its running max, or 0 while
/// that max is still `-inf` (every score so far masked), so that `e^(s - shift)` is 0
/// for a masked score instead of `e^(-inf + inf)` = NaN.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn exp_shift(max: __m256) -> __m256 {
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
pub(in crate::fused::sdpa) fn exp8(x: __m256) -> __m256 {
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
pub(in crate::fused::sdpa) fn exp8_shifted(s: __m256, u: __m256) -> __m256 {
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
pub(in crate::fused::sdpa) unsafe fn softmax_update(
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
