//! The activations a fused matmul epilogue applies in place ([`Activation`]), with f32
//! forms built for AVX-512 and AVX2+FMA where the CPU has them.

use crate::cpu::Isa;
use crate::Real;

/// An activation applied elementwise to a product in the epilogue of
/// [`matmul_epilogue`](super::matmul_epilogue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// No activation.
    #[default]
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// Exact GELU: `x/2 (1 + erf(x / sqrt 2))`.
    Gelu,
    /// GELU's tanh approximation: `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x sigmoid(x)` (SiLU / swish).
    Silu,
}

impl Activation {
    /// Every activation.
    pub const ALL: &'static [Activation] = &[
        Activation::Identity,
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ];

    /// The word that names it in an epilogue node's `activation` attribute (`none`,
    /// `relu`, `gelu`, `gelu_tanh`, `silu`).
    pub const fn word(self) -> &'static str {
        match self {
            Activation::Identity => "none",
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
        }
    }

    /// The activation `word` names, if any.
    pub fn parse(word: &str) -> Option<Activation> {
        Activation::ALL.iter().copied().find(|a| a.word() == word)
    }

    /// The activation on one compute-type value.
    #[inline]
    pub(crate) fn apply<F: Real>(self, x: F) -> F {
        let c = F::from_f64;
        match self {
            Activation::Identity => x,
            Activation::Relu => {
                if x > F::ZERO {
                    x
                } else {
                    F::ZERO
                }
            }
            Activation::Gelu => {
                c(0.5) * x * (F::ONE + (x * c(std::f64::consts::FRAC_1_SQRT_2)).erf())
            }
            Activation::GeluTanh => {
                let inner = c(0.797_884_560_802_865_4) * (x + c(0.044_715) * x * x * x);
                c(0.5) * x * (F::ONE + inner.tanh())
            }
            Activation::Silu => x / (F::ONE + (F::ZERO - x).exp()),
        }
    }
}

/// [`Activation::apply`] over a slice, one scalar call per element.
pub(super) fn activate_scalar<F: Real>(act: Activation, _isa: Isa, xs: &mut [F]) {
    if act != Activation::Identity {
        for x in xs {
            *x = act.apply(*x);
        }
    }
}

/// The f32 activation on the branch-free functions of [`crate::elementwise::math`]
/// (the loop vectorises; `libm`'s `tanhf`/`erff`/`expf` calls kept it scalar), in the
/// build of the generated kernels' [`Isa`](crate::elementwise::Isa): AVX-512 or
/// AVX2+FMA where the CPU has them. Measured (`[512, 64] x [64, 3072]` with an erf-GELU
/// epilogue against none, best of 20, one Zen 4 thread, processes alternated with
/// the fused kernels capped at AVX2): the GELU pass 2.1 ms with AVX2, 1.2 ms with AVX-512.
/// `isa` is [`crate::elementwise::isa`] read on the matmul's calling thread.
pub(super) fn activate_f32(act: Activation, isa: Isa, xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        // Checked again (detection is cached), so that no `Isa` value can reach code
        // for features this CPU lacks.
        match isa {
            // SAFETY: `activate_f32_avx512` only requires the target features it
            // enables, and `is_available` detected them all on this CPU.
            Isa::Avx512 if isa.is_available() => return unsafe { activate_f32_avx512(act, xs) },
            // SAFETY: `activate_f32_fma` only requires avx2 and fma, and
            // `is_available` detected both on this CPU.
            Isa::Avx2Fma if isa.is_available() => return unsafe { activate_f32_fma(act, xs) },
            _ => {}
        }
    }
    activate_f32_with::<false>(act, xs);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn activate_f32_avx512(act: Activation, xs: &mut [f32]) {
    activate_f32_with::<true>(act, xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn activate_f32_fma(act: Activation, xs: &mut [f32]) {
    activate_f32_with::<true>(act, xs)
}

#[inline(always)]
fn activate_f32_with<const FMA: bool>(act: Activation, xs: &mut [f32]) {
    use crate::elementwise::math::{erf_with, exp_with};
    match act {
        Activation::Identity => {}
        // `max` maps NaN to 0, as the scalar form does.
        Activation::Relu => xs.iter_mut().for_each(|x| *x = x.max(0.0)),
        Activation::Gelu => xs.iter_mut().for_each(|x| {
            *x = 0.5 * *x * (1.0 + erf_with::<FMA>(*x * std::f32::consts::FRAC_1_SQRT_2))
        }),
        Activation::GeluTanh => xs.iter_mut().for_each(|x| *x = gelu_tanh_with::<FMA>(*x)),
        Activation::Silu => xs
            .iter_mut()
            .for_each(|x| *x = *x / (1.0 + exp_with::<FMA>(-*x))),
    }
}

/// `-2u = MINUS_2U_C1 x + MINUS_2U_C3 x^3` in [`gelu_tanh_with`]: `-2 sqrt(2/pi)` and
/// `-2 sqrt(2/pi) 0.044715`.
const MINUS_2U_C1: f32 = -1.595_769_2;
/// See [`MINUS_2U_C1`].
const MINUS_2U_C3: f32 = -0.071_354_814;

/// GELU's tanh form as `x / (1 + e^(-2u))` with `u = sqrt(2/pi) (x + 0.044715 x^3)`:
/// the same function (`(1 + tanh u) / 2` is the logistic of `2u`), one exponential
/// and no tanh polynomial or branch, and no cancellation where `tanh u` nears -1
/// (`1 + tanh u` loses the low bits there).
#[inline(always)]
fn gelu_tanh_with<const FMA: bool>(x: f32) -> f32 {
    let minus_2u = x * (MINUS_2U_C1 + MINUS_2U_C3 * (x * x));
    x / (1.0 + crate::elementwise::math::exp_with::<FMA>(minus_2u))
}

/// `act` over `h` rows of `w` f32 values `ld` apart from `c`: a tile of the packed
/// GEMM's result, activated as its last depth block is stored, while it is in L1,
/// instead of in a pass of its own over the whole result (that pass cost about 0.8
/// ms of a `512 x 768 x 3072` product with a tanh-GELU, 2-core Zen 4). AVX-512 has its
/// own tanh-GELU (`gelu_tanh16`); the other activations run [`activate_f32_with`] a
/// vector's lanes at a time.
///
/// # Safety
/// `c` is valid for reads and writes of `h` rows of `w` floats at stride `ld`, and
/// nothing else accesses them during the call.
pub(crate) unsafe fn activate_tile_f32(
    act: Activation,
    isa: Isa,
    c: *mut f32,
    ld: usize,
    (h, w): (usize, usize),
) {
    if act == Activation::Identity {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: the features `activate_tile_avx512` enables were detected by
        // `is_available`; the caller's contract covers the tile.
        Isa::Avx512 if isa.is_available() => {
            return unsafe { activate_tile_avx512(act, c, ld, (h, w)) }
        }
        // SAFETY: avx2 and fma detected by `is_available`; the tile as above.
        Isa::Avx2Fma if isa.is_available() => {
            return unsafe { activate_tile_fma(act, c, ld, (h, w)) }
        }
        _ => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = isa;
    // SAFETY: the caller's contract.
    unsafe { activate_tile_with::<false, 8>(act, c, ld, (h, w)) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn activate_tile_avx512(act: Activation, c: *mut f32, ld: usize, hw: (usize, usize)) {
    if act == Activation::GeluTanh {
        // SAFETY: the caller's contract.
        return unsafe { gelu_tanh_tile_avx512(c, ld, hw) };
    }
    // SAFETY: the caller's contract.
    unsafe { activate_tile_with::<true, 16>(act, c, ld, hw) }
}

/// [`activate_tile_f32`]'s tanh-GELU on AVX-512: [`gelu_tanh_with`]'s form with the
/// attention kernels' `2^f` polynomial and `vscalefps` for the exponential (17 vector
/// operations and a division per 16 values, where the portable exponential's range
/// reduction and two-step scaling took 29). Measured (`gemm_rate --repeat 30 --act
/// gelu_tanh 512x768x3072` against `--act identity`, 2-core Zen 4, three interleaved
/// runs): the GELU took 0.17-0.25 ms of the product's 11, against 0.5-0.67 ms with the
/// portable form.
///
/// # Safety
/// As [`activate_tile_f32`]; the CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn gelu_tanh_tile_avx512(c: *mut f32, ld: usize, (h, w): (usize, usize)) {
    use std::arch::x86_64::*;
    for r in 0..h {
        for j in (0..w).step_by(16) {
            let left = w - j;
            let mask: __mmask16 = if left >= 16 { !0 } else { (1 << left) - 1 };
            // SAFETY: lanes `j..j + 16` of row `r`, masked to the `w` values the
            // caller's contract covers.
            let at = unsafe { c.add(r * ld + j) };
            // SAFETY: as above (masked lanes are neither read nor written).
            let x = unsafe { _mm512_maskz_loadu_ps(mask, at) };
            let y = gelu_tanh16(x);
            // SAFETY: as above.
            unsafe { _mm512_mask_storeu_ps(at, mask, y) };
        }
    }
}

/// `x / (1 + e^(-2u))` on 16 lanes ([`gelu_tanh_with`]). `-2u` is clamped to
/// `[-100, 100]` (NaN passes: `min`/`max` return their second operand for it): below,
/// `e^(-2u)` is 0 to f32 and the result `x`; above, it is infinite and the result `-0`
/// (NaN at `x = -inf`, as the scalar form gives).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn gelu_tanh16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use crate::fused::sdpa::avx512::exp::pow2_poly;
    use std::arch::x86_64::*;
    // log2(e), and the rest of it past f32.
    const L2E_HI: f32 = std::f32::consts::LOG2_E;
    const L2E_LO: f32 = 1.925_963e-8;
    let x2 = _mm512_mul_ps(x, x);
    let z = _mm512_mul_ps(
        x,
        _mm512_fmadd_ps(x2, _mm512_set1_ps(MINUS_2U_C3), _mm512_set1_ps(MINUS_2U_C1)),
    );
    let z = _mm512_max_ps(
        _mm512_set1_ps(-100.0),
        _mm512_min_ps(_mm512_set1_ps(100.0), z),
    );
    let hi = _mm512_set1_ps(L2E_HI);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(z, hi),
    );
    let f = _mm512_fmadd_ps(z, _mm512_set1_ps(L2E_LO), _mm512_fmsub_ps(z, hi, n));
    let e = _mm512_scalef_ps(pow2_poly(f), n);
    _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn activate_tile_fma(act: Activation, c: *mut f32, ld: usize, hw: (usize, usize)) {
    // SAFETY: the caller's contract.
    unsafe { activate_tile_with::<true, 8>(act, c, ld, hw) }
}

/// The rows of [`activate_tile_f32`], `L` values at a time (a vector's lanes: the
/// loop over a run of known length becomes one vector pass, where a row of a tile's
/// width is too short for the vectoriser's unrolled loop), the rest one by one.
///
/// # Safety
/// As [`activate_tile_f32`].
#[inline(always)]
unsafe fn activate_tile_with<const FMA: bool, const L: usize>(
    act: Activation,
    c: *mut f32,
    ld: usize,
    (h, w): (usize, usize),
) {
    for r in 0..h {
        // SAFETY: row `r` of the tile: `w` floats from `c + r ld`, valid and not
        // otherwise accessed (the caller's contract).
        let row = unsafe { std::slice::from_raw_parts_mut(c.add(r * ld), w) };
        let (lanes, rest) = row.as_chunks_mut::<L>();
        for run in lanes {
            activate_f32_with::<FMA>(act, run);
        }
        activate_f32_with::<FMA>(act, rest);
    }
}

#[cfg(test)]
mod tests {
    use super::super::gemm::Gemm;
    use super::*;
    use crate::testing::compare::{assert_close, Tol};

    /// Inputs covering the branches of the fast functions: zero, both signs, tiny and
    /// large magnitudes, the polynomial/exp split points, infinities and NaN.
    fn inputs() -> Vec<f32> {
        let mut xs = vec![
            0.0,
            -0.0,
            1e-8,
            -1e-8,
            0.3,
            0.625,
            -0.625,
            1.0,
            -1.0,
            3.9,
            4.1,
            -7.5,
            20.0,
            -20.0,
            90.0,
            -90.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            // Around the tanh-GELU's clamp of -2u at +-100, and far past it.
            -5.5,
            -10.5,
            50.0,
            -50.0,
            1e30,
            -1e30,
            f32::MAX,
            f32::MIN,
            1e-40,
            -1e-40,
        ];
        xs.extend((0..997).map(|i| (i as f32 - 498.0) * 0.0173));
        xs
    }

    /// The tile form (a GEMM result's tile, activated in place as it is stored) on
    /// every instruction set this CPU has: rows of 13 values 16 apart (a masked tail
    /// on AVX-512), the padding left alone.
    fn tile_paths(act: Activation, xs: &[f32]) -> Vec<(String, Vec<f32>)> {
        const W: usize = 13;
        const LD: usize = 16;
        let rows = xs.len().div_ceil(W);
        let mut paths = Vec::new();
        for isa in [Isa::Baseline, Isa::Avx2Fma, Isa::Avx512] {
            if !isa.is_available() {
                println!("SKIPPED: the {act:?} tile on {isa:?} (not on this CPU)");
                continue;
            }
            let mut tile = vec![f32::from_bits(0x7fc0_dead); rows * LD];
            for (i, &x) in xs.iter().enumerate() {
                tile[(i / W) * LD + i % W] = x;
            }
            let pads: Vec<u32> = tile.iter().map(|x| x.to_bits()).collect();
            // SAFETY: `tile` holds `rows` rows of `LD >= W` floats, borrowed mutably
            // for the call.
            unsafe { activate_tile_f32(act, isa, tile.as_mut_ptr(), LD, (rows, W)) };
            for (i, (x, pad)) in tile.iter().zip(&pads).enumerate() {
                if i % LD >= W {
                    assert_eq!(x.to_bits(), *pad, "{act:?} {isa:?}: padding {i} written");
                }
            }
            let got = (0..xs.len()).map(|i| tile[(i / W) * LD + i % W]).collect();
            paths.push((format!("tile {isa:?}"), got));
        }
        paths
    }

    /// Every activation, every f32 path (plain, and AVX2+FMA and AVX-512 when the CPU
    /// has them) against the scalar `libm` form computed in f64.
    #[test]
    fn f32_activation_paths_match_the_f64_scalar_form() {
        let acts = [
            Activation::Identity,
            Activation::Relu,
            Activation::Gelu,
            Activation::GeluTanh,
            Activation::Silu,
        ];
        let xs = inputs();
        for act in acts {
            let want: Vec<f64> = xs.iter().map(|&x| act.apply(x as f64)).collect();
            let mut paths: Vec<(&str, Vec<f32>)> = Vec::new();
            let mut plain = xs.clone();
            activate_f32_with::<false>(act, &mut plain);
            paths.push(("plain", plain));
            #[cfg(target_arch = "x86_64")]
            if crate::cpu::Isa::Avx2Fma.is_available() {
                let mut fast = xs.clone();
                // SAFETY: avx2 and fma detected just above.
                unsafe { activate_f32_fma(act, &mut fast) };
                paths.push(("avx2+fma", fast));
            } else {
                println!("SKIPPED: the {act:?} avx2+fma path needs AVX2 and FMA");
            }
            #[cfg(target_arch = "x86_64")]
            if crate::cpu::Isa::Avx512.is_available() {
                let mut wide = xs.clone();
                // SAFETY: `is_available` detected every feature the function enables.
                unsafe { activate_f32_avx512(act, &mut wide) };
                paths.push(("avx512", wide));
            } else {
                println!("SKIPPED: the {act:?} avx512 path needs AVX-512 F, VL, BW and DQ");
            }
            #[cfg(not(target_arch = "x86_64"))]
            println!("SKIPPED: the {act:?} avx2+fma and avx512 paths need x86-64");
            let mut dispatched = xs.clone();
            f32::activate(act, crate::elementwise::isa(), &mut dispatched);
            paths.push(("dispatched", dispatched));
            let tiles = tile_paths(act, &xs);
            paths.extend(tiles.iter().map(|(name, got)| (name.as_str(), got.clone())));
            for (name, got) in &paths {
                let got: Vec<f64> = got.iter().map(|&g| g as f64).collect();
                assert_close(
                    &got,
                    &want,
                    Tol::new(1e-6, 2e-6),
                    &format!("{act:?} {name}"),
                );
            }
        }
    }
}
