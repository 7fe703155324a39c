//! Branch-free f32 `exp`, `erf`, `tanh` and `sigmoid` that LLVM auto-vectorises.
//!
//! The standard library and `libm` compute these through calls, which keep a generated
//! kernel's loop scalar. These are straight-line polynomial code (range reduction,
//! both sides of every split computed and one selected, no tables), so a loop calling
//! them vectorises. Special values behave as the scalar functions: NaN gives NaN,
//! `exp(-inf) = 0`, `exp(+inf) = inf` (and overflow gives inf), `erf(±inf) = ±1`,
//! `tanh(±inf) = ±1`, and `-0.0` keeps its sign through `erf` and `tanh`.
//!
//! Accuracy, measured against f64 references in `tests/elementwise_math.rs`: `exp` and
//! `tanh` within about 2 ulp (relative error below 3e-7), `erf` within 2e-7 absolute
//! (and about 2 ulp relative below 1).
//!
//! Each function has a `*_with::<FMA>` form: with `FMA = true` the polynomial steps and
//! the range reduction use fused multiply-adds (`f32::mul_add`), for code compiled with
//! the `fma` target feature (the generated kernels' AVX2+FMA build, chosen at run
//! time). The results differ from the plain form by rounding only (an FMA rounds once
//! where a multiply then an add round twice) and stay within the same bounds. Without
//! the `fma` target feature `mul_add` is a slow library call: use the plain form there.

// The coefficients are kept as published/fitted (more digits than f32 holds); the
// compiler rounds each to the nearest f32, which is the value the error bounds were
// measured with.
#![allow(clippy::excessive_precision)]

const SIGN: u32 = 0x8000_0000;

/// `x` with the sign bit of `s` set when `s` is negative (`x` is non-negative or NaN).
#[inline(always)]
fn with_sign_of(x: f32, s: f32) -> f32 {
    f32::from_bits(x.to_bits() | (s.to_bits() & SIGN))
}

/// `2^n` for `n` in `[-126, 127]`, built in the exponent bits.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// `a * b + c`: one fused multiply-add with `FMA`, else a multiply and an add.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Horner's rule, highest coefficient first.
#[inline(always)]
fn horner<const N: usize, const FMA: bool>(x: f32, c: [f32; N]) -> f32 {
    let mut p = c[0];
    for &k in &c[1..] {
        p = madd::<FMA>(p, x, k);
    }
    p
}

/// `e^x`: `x = n ln2 + r` with `|r| <= ln2 / 2`, Cephes' degree-6 polynomial for `e^r`,
/// and `2^n` applied as two factors so that subnormal results and overflow to
/// infinity round as the scalar `exp` does.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_with::<false>(x)
}

/// [`exp`], with fused multiply-adds when `FMA` (see the module docs).
#[inline(always)]
pub fn exp_with<const FMA: bool>(x: f32) -> f32 {
    // Below LO the result rounds to 0, above HI to infinity.
    const LO: f32 = -104.0;
    const HI: f32 = 89.0;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that `n * LN2_HI` is exact for |n| <= 150.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    // `clamp` (unlike `max`/`min`) lets NaN pass through.
    let xc = x.clamp(LO, HI);
    let t = xc * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = madd::<FMA>(-n, LN2_HI, xc);
    let r = madd::<FMA>(-n, LN2_LO, r);
    let p = horner::<6, FMA>(
        r,
        [
            1.987_569_1e-4,
            1.398_2e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            0.5,
        ],
    );
    let e = madd::<FMA>(p, r * r, r) + 1.0;
    // n is in [-150, 129]: split it so that each factor is a normal power of two.
    let n_int = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let n1 = n_int >> 1;
    e * pow2(n1) * pow2(n_int - n1)
}

/// `1 / (1 + e^-x)`, through [`exp`].
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_with::<false>(x)
}

/// [`sigmoid`], with fused multiply-adds when `FMA` (see the module docs).
#[inline(always)]
pub fn sigmoid_with<const FMA: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp_with::<FMA>(-x))
}

/// The hyperbolic tangent: Cephes' odd polynomial below 0.625, `1 - 2 / (e^2|x| + 1)`
/// above, the sign of `x` restored last (so `tanh(-0.0) = -0.0`).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_with::<false>(x)
}

/// [`tanh`], with fused multiply-adds when `FMA` (see the module docs).
#[inline(always)]
pub fn tanh_with<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let z = a * a;
    let p = horner::<5, FMA>(
        z,
        [
            -5.704_988_7e-3,
            2.063_908_9e-2,
            -5.373_971_6e-2,
            1.333_144_2e-1,
            -3.333_328_2e-1,
        ],
    );
    let small = madd::<FMA>(a, z * p, a);
    // e^2a is infinite for large a, giving exactly 1.
    let large = 1.0 - 2.0 / (exp_with::<FMA>(a + a) + 1.0);
    // NaN fails the comparison and stays NaN through `large`.
    let r = if a < 0.625 { small } else { large };
    with_sign_of(r, x)
}

/// The error function: `|x| P(x^2)` below 1; above,
/// `1 - e^(-x^2) Q(t)` with `t = 1 / (1 + 0.47 |x|)` (`Q` fits `erfc(x) e^(x^2)` over
/// `[1, 4]`; beyond 4 the result rounds to 1); the sign of `x` restored last.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_with::<false>(x)
}

/// [`erf`], with fused multiply-adds when `FMA` (see the module docs).
#[inline(always)]
pub fn erf_with<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let small = a * horner::<7, FMA>(
        a * a,
        [
            7.898_210_2e-5,
            -8.024_354e-4,
            5.190_053_6e-3,
            -2.685_480_9e-2,
            1.128_361_2e-1,
            -3.761_262_9e-1,
            std::f32::consts::FRAC_2_SQRT_PI,
        ],
    );
    // Comparison (not `min`) so that NaN passes through.
    let ac = if a > 4.0 { 4.0 } else { a };
    let t = 1.0 / madd::<FMA>(0.47, ac, 1.0);
    let q = horner::<7, FMA>(
        t,
        [
            -1.233_679_8e-1,
            1.911_393_8e-1,
            1.882_501_7e-1,
            1.987_189_8e-1,
            2.828_802_5e-1,
            2.614_951_6e-1,
            2.939_339_2e-4,
        ],
    );
    let large = madd::<FMA>(-exp_with::<FMA>(-(ac * ac)), q, 1.0);
    let r = if a < 1.0 { small } else { large };
    with_sign_of(r, x)
}
