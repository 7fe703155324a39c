//! One unary or binary op over `f32` lanes (`dst[i] = op(a[i], b[i])`), compiled once
//! per instruction set and chosen at run time: the arithmetic of an interpreted
//! elementwise group (`graphrw`'s `exec::tile`), whose instructions each run over a
//! tile of lanes.
//!
//! The transcendental ops (`exp`, `tanh`, `erf`, the sigmoid and the GELUs and SiLU
//! built on them) use the branch-free forms of [`super::math`], which vectorise; the
//! `libm` calls of the scalar kernels kept every such loop scalar (on a 2-vCPU Intel
//! Xeon, family 6 model 167, a tanh-GELU times a product over `128 x 16384` lanes took
//! 13.7 ms). They agree with the scalar kernels within the bounds `math` states (about
//! 2 ulp). `pow` stays on `powf`. NaN propagates as in the scalar kernels (`max`/`min`
//! of a NaN is NaN, `relu(NaN)` is NaN).

use graphrw_ops::{BinaryOp, UnaryOp};

use crate::cpu::Isa;
use crate::elementwise::math;

/// `dst[i] = op(a[i])` for every lane, built for `isa` (capped at what this CPU has).
pub fn unary_f32(isa: Isa, op: UnaryOp, dst: &mut [f32], a: &[f32]) {
    let isa = isa.min(Isa::best());
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: `Isa::best()` caps `isa` at the features this CPU was detected with.
        Isa::Avx512 => return unsafe { unary_avx512(op, dst, a) },
        // SAFETY: as above.
        Isa::Avx2Fma => return unsafe { unary_avx2(op, dst, a) },
        Isa::Baseline => {}
    }
    let _ = isa;
    unary_with::<false>(op, dst, a)
}

/// `dst[i] = op(a[i], b[i])` for every lane, built for `isa` (capped at what this CPU
/// has).
pub fn binary_f32(isa: Isa, op: BinaryOp, dst: &mut [f32], a: &[f32], b: &[f32]) {
    let isa = isa.min(Isa::best());
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: `Isa::best()` caps `isa` at the features this CPU was detected with.
        Isa::Avx512 => return unsafe { binary_avx512(op, dst, a, b) },
        // SAFETY: as above.
        Isa::Avx2Fma => return unsafe { binary_avx2(op, dst, a, b) },
        Isa::Baseline => {}
    }
    let _ = isa;
    binary_with(op, dst, a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn unary_avx512(op: UnaryOp, dst: &mut [f32], a: &[f32]) {
    unary_with::<true>(op, dst, a)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn unary_avx2(op: UnaryOp, dst: &mut [f32], a: &[f32]) {
    unary_with::<true>(op, dst, a)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn binary_avx512(op: BinaryOp, dst: &mut [f32], a: &[f32], b: &[f32]) {
    binary_with(op, dst, a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn binary_avx2(op: BinaryOp, dst: &mut [f32], a: &[f32], b: &[f32]) {
    binary_with(op, dst, a, b)
}

#[inline(always)]
fn b2f(b: bool) -> f32 {
    if b {
        1.0
    } else {
        0.0
    }
}

#[inline(always)]
fn nan_max(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x >= y {
        x
    } else {
        y
    }
}

#[inline(always)]
fn nan_min(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x <= y {
        x
    } else {
        y
    }
}

#[inline(always)]
fn map1(d: &mut [f32], a: &[f32], f: impl Fn(f32) -> f32) {
    for (d, &a) in d.iter_mut().zip(a) {
        *d = f(a);
    }
}

#[inline(always)]
fn map2(d: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
    for ((d, &a), &b) in d.iter_mut().zip(a).zip(b) {
        *d = f(a, b);
    }
}

/// `-2 sqrt(2/pi)` and `-2 sqrt(2/pi) 0.044715`: the tanh-GELU as `x / (1 + e^(-2u))`
/// with `u = sqrt(2/pi) (x + 0.044715 x^3)` (`(1 + tanh u) / 2` is the logistic of
/// `2u`; one exponential, no cancellation where `tanh u` nears -1).
const MINUS_2U: (f32, f32) = (-1.595_769_2, -0.071_354_814);

#[inline(always)]
fn binary_with(op: BinaryOp, dst: &mut [f32], a: &[f32], b: &[f32]) {
    match op {
        BinaryOp::Add => map2(dst, a, b, |x, y| x + y),
        BinaryOp::Sub => map2(dst, a, b, |x, y| x - y),
        BinaryOp::Mul => map2(dst, a, b, |x, y| x * y),
        BinaryOp::Div => map2(dst, a, b, |x, y| x / y),
        BinaryOp::Pow => map2(dst, a, b, f32::powf),
        BinaryOp::Maximum => map2(dst, a, b, nan_max),
        BinaryOp::Minimum => map2(dst, a, b, nan_min),
        BinaryOp::And => map2(dst, a, b, |x, y| b2f(x != 0.0 && y != 0.0)),
        BinaryOp::Or => map2(dst, a, b, |x, y| b2f(x != 0.0 || y != 0.0)),
        BinaryOp::Eq => map2(dst, a, b, |x, y| b2f(x == y)),
        BinaryOp::Ne => map2(dst, a, b, |x, y| b2f(x != y)),
        BinaryOp::Lt => map2(dst, a, b, |x, y| b2f(x < y)),
        BinaryOp::Le => map2(dst, a, b, |x, y| b2f(x <= y)),
        BinaryOp::Gt => map2(dst, a, b, |x, y| b2f(x > y)),
        BinaryOp::Ge => map2(dst, a, b, |x, y| b2f(x >= y)),
    }
}

#[inline(always)]
fn unary_with<const FMA: bool>(op: UnaryOp, dst: &mut [f32], a: &[f32]) {
    let inv_sqrt2 = std::f32::consts::FRAC_1_SQRT_2;
    match op {
        UnaryOp::Neg => map1(dst, a, |x| -x),
        UnaryOp::Abs => map1(dst, a, f32::abs),
        UnaryOp::Reciprocal => map1(dst, a, |x| 1.0 / x),
        UnaryOp::Sqrt => map1(dst, a, f32::sqrt),
        UnaryOp::Rsqrt => map1(dst, a, |x| 1.0 / x.sqrt()),
        UnaryOp::Exp => map1(dst, a, math::exp_with::<FMA>),
        UnaryOp::Log => map1(dst, a, f32::ln),
        UnaryOp::Sin => map1(dst, a, f32::sin),
        UnaryOp::Cos => map1(dst, a, f32::cos),
        UnaryOp::Erf => map1(dst, a, math::erf_with::<FMA>),
        UnaryOp::Tanh => map1(dst, a, math::tanh_with::<FMA>),
        UnaryOp::Sigmoid => map1(dst, a, math::sigmoid_with::<FMA>),
        UnaryOp::Relu => map1(dst, a, |x| if x < 0.0 { 0.0 } else { x }),
        UnaryOp::Gelu => map1(dst, a, |v| {
            0.5 * v * (1.0 + math::erf_with::<FMA>(v * inv_sqrt2))
        }),
        UnaryOp::GeluTanh => map1(dst, a, |v| {
            let minus_2u = v * (MINUS_2U.0 + MINUS_2U.1 * (v * v));
            v / (1.0 + math::exp_with::<FMA>(minus_2u))
        }),
        UnaryOp::Silu => map1(dst, a, |x| x * math::sigmoid_with::<FMA>(x)),
        UnaryOp::Not => map1(dst, a, |x| b2f(x == 0.0)),
        UnaryOp::IsNan => map1(dst, a, |x| b2f(x.is_nan())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cpu, Tensor};

    /// Values across every op's interesting ranges: signs, zeros, tiny and large
    /// magnitudes, the GELU's and sigmoid's tails, infinities and NaN.
    fn values() -> Vec<f32> {
        let mut xs = vec![
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            88.0,
            -88.0,
            -104.0,
        ];
        xs.extend((0..301).map(|i| (i as f32 - 150.0) / 12.5));
        xs
    }

    fn close(got: f32, want: f64) -> bool {
        let g = f64::from(got);
        g == want || (g.is_nan() && want.is_nan()) || (g - want).abs() <= 2e-6 * want.abs().max(1.0)
    }

    #[test]
    fn every_unary_op_on_every_isa_matches_the_scalar_kernel() {
        let xs = values();
        for isa in [Isa::Baseline, Isa::Avx2Fma, Isa::Avx512] {
            if !isa.is_available() {
                continue;
            }
            for &op in UnaryOp::ALL {
                let input = match op {
                    UnaryOp::Not => xs.iter().map(|&x| b2f(x > 0.5)).collect(),
                    _ => xs.clone(),
                };
                let tensor = match op {
                    UnaryOp::Not => Tensor::from_vec(
                        vec![input.len()],
                        input.iter().map(|&x| x != 0.0).collect::<Vec<bool>>(),
                    ),
                    _ => Tensor::from_vec(vec![input.len()], input.clone()),
                }
                .expect("a tensor");
                let want = match op {
                    UnaryOp::Not | UnaryOp::IsNan => cpu::unary(op, &tensor),
                    _ => cpu::elementwise::unary_scalar(op, &tensor),
                }
                .expect("the scalar kernel")
                .to_f64_vec();
                let mut got = vec![0f32; input.len()];
                unary_f32(isa, op, &mut got, &input);
                for ((&g, &w), &x) in got.iter().zip(&want).zip(&input) {
                    assert!(close(g, w), "{isa:?} {op:?}({x}): lanes {g}, scalar {w}");
                }
            }
        }
    }

    #[test]
    fn every_binary_op_on_every_isa_matches_the_scalar_kernel() {
        let xs = values();
        let ys: Vec<f32> = xs.iter().rev().copied().collect();
        for isa in [Isa::Baseline, Isa::Avx2Fma, Isa::Avx512] {
            if !isa.is_available() {
                continue;
            }
            for &op in BinaryOp::ALL {
                let logical = matches!(op, BinaryOp::And | BinaryOp::Or);
                let (a, b): (Vec<f32>, Vec<f32>) = match logical {
                    true => (
                        xs.iter().map(|&x| b2f(x > 0.0)).collect(),
                        ys.iter().map(|&y| b2f(y > 0.0)).collect(),
                    ),
                    false => (xs.clone(), ys.clone()),
                };
                let as_tensor = |v: &[f32]| {
                    match logical {
                        true => Tensor::from_vec(
                            vec![v.len()],
                            v.iter().map(|&x| x != 0.0).collect::<Vec<bool>>(),
                        ),
                        false => Tensor::from_vec(vec![v.len()], v.to_vec()),
                    }
                    .expect("a tensor")
                };
                let want = cpu::binary(op, &as_tensor(&a), &as_tensor(&b))
                    .expect("the scalar kernel")
                    .to_f64_vec();
                let mut got = vec![0f32; a.len()];
                binary_f32(isa, op, &mut got, &a, &b);
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        close(g, w),
                        "{isa:?} {op:?}({}, {}): lanes {g}, scalar {w}",
                        a[i],
                        b[i]
                    );
                }
            }
        }
    }
}
