//! 16-lane exponentials for the softmax step (`exp16`, `exp16_shifted`).

use std::arch::x86_64::*;

/// The shift a column's exponentials are taken against: its running max, or 0 while
/// that max is still `-inf` (see `avx2::exp_shift`).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) fn exp_shift(max: __m512) -> __m512 {
    let ninf = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(max, _mm512_set1_ps(f32::NEG_INFINITY));
    _mm512_mask_mov_ps(max, ninf, _mm512_setzero_ps())
}

/// The polynomial of `2^f` for `f` in about `[-1/2, 1/2]` (`avx2::exp8`'s); also the
/// matmul epilogue's tanh-GELU (`cpu::matmul::activation`).
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn pow2_poly(f: __m512) -> __m512 {
    #[allow(clippy::approx_constant)]
    const C: [f32; 5] = [
        0.693_147,
        0.240_222_42,
        0.055_507_336,
        0.009_671_513,
        0.001_326_472_7,
    ];
    let mut p = _mm512_set1_ps(C[4]);
    for c in [C[3], C[2], C[1], C[0], 1.0] {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    p
}

/// `e^x` on 16 lanes: `avx2::exp8` in 512 bits (exactly 0 below -87.34 and at `-inf`,
/// NaN for NaN).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) fn exp16(x: __m512) -> __m512 {
    let lo = _mm512_set1_ps(-87.336_55);
    let xc = _mm512_min_ps(_mm512_set1_ps(88.0), _mm512_max_ps(lo, x));
    let (l2e_hi, l2e_lo) = (
        _mm512_set1_ps(std::f32::consts::LOG2_E),
        _mm512_set1_ps(1.925_963e-8),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(xc, l2e_hi),
    );
    let f = _mm512_fmadd_ps(xc, l2e_lo, _mm512_fmsub_ps(xc, l2e_hi, n));
    let p = pow2_poly(f);
    // n is in [-126, 127]: 2^n is a normal float.
    let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    let y = _mm512_mul_ps(p, _mm512_castsi512_ps(pow2));
    _mm512_mask_mov_ps(
        y,
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo),
        _mm512_setzero_ps(),
    )
}

/// `e^(s - u)` on 16 lanes for the probabilities (`u` the column's max): `avx2::
/// exp8_shifted` in 512 bits with `vscalefps` for the `2^n` (one operation for the
/// AVX2 form's four: 11 vector operations), the same bits but where that form
/// flushes a subnormal result to 0. The lower clamp is -151, where `p 2^n` rounds to exactly 0 (`p <
/// 1.42`, below half the smallest subnormal), so `s = -inf` (and anything below
/// `(s - u) log2 e = -150.5`) gives exactly 0; from there to about -126.5 the result
/// is a subnormal (the AVX2 form's is 0). NaN stays NaN, and
/// nothing overflows for `u` near f32's limit (the difference is formed first).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) fn exp16_shifted(s: __m512, u: __m512) -> __m512 {
    let t = _mm512_mul_ps(
        _mm512_sub_ps(s, u),
        _mm512_set1_ps(std::f32::consts::LOG2_E),
    );
    // `max` returns its second operand for NaN: NaN stays NaN.
    let t = _mm512_max_ps(_mm512_set1_ps(-151.0), t);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let p = pow2_poly(_mm512_sub_ps(t, n));
    _mm512_scalef_ps(p, n)
}
