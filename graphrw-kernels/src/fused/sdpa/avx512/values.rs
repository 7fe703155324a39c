//! The value micro-kernels: `O = alpha * O + P V` in f32 FMAs and bf16 dot products.

use std::arch::x86_64::*;

use super::*;

/// The packed operands of the values: f32 probabilities `[nk][ldp]` with value panels
/// `[npan][pstride][16]`, or bf16 probability pairs `[ceil(nk / 2)][ldp][2]` with value
/// panels `[npan][pstride][16][2]` (`pstride` pairs), as bits. This block's keys start
/// at row 0 of each panel of the slices given.
#[derive(Clone, Copy)]
pub(in crate::fused::sdpa) enum ValueOperands<'a> {
    /// f32 probabilities and values.
    F32 { p: &'a [f32], vp: &'a [f32] },
    /// bf16 pairs.
    Bf16 { p: &'a [u16], vp: &'a [u16] },
}

/// `o[i * ldo + c] = alpha[i] * o[..] + sum_j p[j][i] * v[j][c]` for query rows `i <
/// nrows` (a multiple of 8, `<= ldp`), value columns `c < 16 npan` (`<= ldo`), keys
/// `j < nk`; the micro-kernels broadcast each probability into a register once with
/// `in_register`, else inside each FMA (the same sums).
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(in crate::fused::sdpa) unsafe fn values(
    ops: ValueOperands<'_>,
    in_register: bool,
    nk: usize,
    nrows: usize,
    ldp: usize,
    pstride: usize,
    npan: usize,
    alpha: &[f32],
    o: &mut [f32],
    ldo: usize,
) {
    assert!(nrows.is_multiple_of(MR) && nrows <= ldp && alpha.len() >= nrows);
    assert!(npan * NR <= ldo && o.len() >= nrows * ldo);
    let nk2 = nk.div_ceil(2);
    match ops {
        ValueOperands::F32 { p, vp } => {
            assert!(nk <= pstride && p.len() >= nk * ldp);
            assert!(npan == 0 || vp.len() >= (npan - 1) * pstride * NR + nk * NR);
        }
        ValueOperands::Bf16 { p, vp } => {
            assert!(nk2 <= pstride && p.len() >= nk2 * ldp * 2);
            assert!(npan == 0 || vp.len() >= ((npan - 1) * pstride + nk2) * NR * 2);
        }
    }
    let op = o.as_mut_ptr();
    for i in (0..nrows).step_by(MR) {
        let al = alpha[i..i + MR].as_ptr();
        for (cp, w) in groups(npan) {
            let oq = op.wrapping_add(i * ldo + cp * NR);
            // SAFETY: query rows `i..i + 8 <= nrows` of the probabilities (`<= ldp`)
            // and of `o`, value panels `cp..cp + w <= npan` (rows `0..nk` or pair rows
            // `0..ceil(nk / 2)`), columns `16 cp .. 16 (cp + w) <= ldo` of `o`: inside
            // the lengths checked above.
            unsafe {
                match ops {
                    ValueOperands::F32 { p, vp } => {
                        let (pp, vq, vs) = (
                            p.as_ptr().add(i),
                            vp.as_ptr().add(cp * pstride * NR),
                            pstride * NR,
                        );
                        match (w, in_register) {
                            (3, false) => {
                                values_micro_f32::<3, false>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (2, false) => {
                                values_micro_f32::<2, false>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (_, false) => {
                                values_micro_f32::<1, false>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (3, true) => {
                                values_micro_f32::<3, true>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (2, true) => {
                                values_micro_f32::<2, true>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (_, true) => {
                                values_micro_f32::<1, true>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                        }
                    }
                    ValueOperands::Bf16 { p, vp } => {
                        let (pp, vq, vs) = (
                            p.as_ptr().add(i * 2),
                            vp.as_ptr().add(cp * pstride * NR * 2),
                            pstride * NR * 2,
                        );
                        match (w, in_register) {
                            (3, false) => {
                                values_micro_bf16::<3, false>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (2, false) => {
                                values_micro_bf16::<2, false>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (_, false) => {
                                values_micro_bf16::<1, false>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (3, true) => {
                                values_micro_bf16::<3, true>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (2, true) => {
                                values_micro_bf16::<2, true>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                            (_, true) => {
                                values_micro_bf16::<1, true>(nk, pp, ldp, vq, vs, al, oq, ldo)
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Loads the `8 x W` accumulator block of `o` (stride `ldo`), each row times its
/// `alpha`.
///
/// # Safety
/// The features of [`available`]; `o` readable for 8 rows of `16 W` at stride `ldo`, `alpha` for 8 floats.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) unsafe fn load_scaled<const W: usize>(
    o: *const f32,
    ldo: usize,
    alpha: *const f32,
) -> [[__m512; W]; MR] {
    // SAFETY: rows `r < 8`, columns `< 16 W` of `o`, element `r` of `alpha`.
    std::array::from_fn(|r| unsafe {
        let a = _mm512_set1_ps(*alpha.add(r));
        std::array::from_fn(|w| _mm512_mul_ps(a, _mm512_loadu_ps(o.add(r * ldo + w * NR))))
    })
}

/// Stores the `8 x W` accumulator block to `o` (stride `ldo`).
///
/// # Safety
/// The features of [`available`]; `o` writable for 8 rows of `16 W` at stride `ldo`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) unsafe fn store_block<const W: usize>(acc: &[[__m512; W]; MR], o: *mut f32, ldo: usize) {
    for (r, accr) in acc.iter().enumerate() {
        for (w, &x) in accr.iter().enumerate() {
            // SAFETY: row `r < 8`, columns `16 w .. 16 w + 16` of `o`.
            unsafe { _mm512_storeu_ps(o.add(r * ldo + w * NR), x) };
        }
    }
}

/// One `8 x 16 W` block of the f32 values: 8 query rows of `o` rescaled by `alpha`,
/// plus `p[j * ldp + r]` times the value panels `v[w * vs + j * 16 + t]`, `j < nk`.
/// With `IN_REGISTER`, each probability is broadcast into a register once
/// (`in_register`), else inside each FMA; the same sums either way.
///
/// # Safety
/// The features of [`available`]; `p` readable for `nk` rows of 8 at stride `ldp`, `v` for `W` panels of
/// `16 nk` at stride `vs`, `o` for 8 rows of `16 W` at stride `ldo`, `alpha` for 8.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn values_micro_f32<const W: usize, const IN_REGISTER: bool>(
    nk: usize,
    p: *const f32,
    ldp: usize,
    v: *const f32,
    vs: usize,
    alpha: *const f32,
    o: *mut f32,
    ldo: usize,
) {
    // SAFETY: the caller's contract.
    let mut acc = unsafe { load_scaled::<W>(o, ldo, alpha) };
    if IN_REGISTER {
        let (a, b) = ((p.cast(), ldp * 4), (v.cast(), vs * 4));
        // SAFETY: `nk` steps of 8 probabilities (a row of `ldp` floats a step) and `W`
        // value vectors at stride `vs` floats, 64 bytes a step: the caller's bounds.
        unsafe { in_register::fma_steps::<W>(nk, a, b, &mut acc) };
        // SAFETY: the caller's contract.
        return unsafe { store_block::<W>(&acc, o, ldo) };
    }
    for j in 0..nk {
        // SAFETY: `j < nk`: 16 floats of each value panel at `16 j`, 8 of `p` at
        // `j * ldp`.
        unsafe {
            let vr: [__m512; W] = std::array::from_fn(|w| _mm512_loadu_ps(v.add(w * vs + j * NR)));
            for (r, accr) in acc.iter_mut().enumerate() {
                let pv = _mm512_set1_ps(*p.add(j * ldp + r));
                for (x, &vv) in accr.iter_mut().zip(&vr) {
                    *x = _mm512_fmadd_ps(pv, vv, *x);
                }
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { store_block::<W>(&acc, o, ldo) }
}

/// One `8 x 16 W` block of the bf16 values: as [`values_micro_f32`] with probability
/// pairs `p[(jj * ldp + r) * 2 + e]` and value panels `v[w * vs + (jj * 16 + t) * 2 + e]`
/// for key pairs `jj < ceil(nk / 2)`; an odd last pair's values are loaded with their
/// second elements zeroed. `IN_REGISTER` as in [`values_micro_f32`], for the whole
/// pairs (the odd last one broadcasts inside its dot products in either form).
///
/// # Safety
/// The features of [`available`]; `p` readable for `ceil(nk / 2)` rows of 16 at
/// stride `2 ldp`, `v` for `W` panels of `32 ceil(nk / 2)` at stride `vs`, `o` for 8
/// rows of `16 W` at stride `ldo`, `alpha` for 8.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn values_micro_bf16<const W: usize, const IN_REGISTER: bool>(
    nk: usize,
    p: *const u16,
    ldp: usize,
    v: *const u16,
    vs: usize,
    alpha: *const f32,
    o: *mut f32,
    ldo: usize,
) {
    // SAFETY: the caller's contract.
    let mut acc = unsafe { load_scaled::<W>(o, ldo, alpha) };
    let nk2 = nk.div_ceil(2);
    let mut first = 0;
    if IN_REGISTER {
        first = nk / 2;
        let (a, b) = ((p.cast(), ldp * 4), (v.cast(), vs * 2));
        // SAFETY: `nk / 2` whole pairs: 8 probability pairs (a row of `ldp` pairs a
        // step) and `W` value vectors at stride `vs` bf16, 64 bytes a step: the
        // caller's bounds.
        unsafe { in_register::dpbf16_steps::<W>(first, a, b, &mut acc) };
    }
    for jj in first..nk2 {
        // The odd last key's pair: keep the first element of each value pair only.
        let keep: __mmask32 = if 2 * jj + 1 < nk {
            u32::MAX
        } else {
            0x5555_5555
        };
        // SAFETY: `jj < ceil(nk / 2)`: 32 bf16 of each value panel at `32 jj`, 16 of
        // `p` at `2 jj ldp`; the transmutes reinterpret 512 bits as 32 bf16.
        unsafe {
            let vr: [__m512bh; W] = std::array::from_fn(|w| {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_maskz_loadu_epi16(
                    keep,
                    v.add(w * vs + jj * 2 * NR).cast(),
                ))
            });
            for (r, accr) in acc.iter_mut().enumerate() {
                let pair = p.add((jj * ldp + r) * 2).cast::<i32>().read_unaligned();
                let pv = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair));
                for (x, &vv) in accr.iter_mut().zip(&vr) {
                    *x = _mm512_dpbf16_ps(*x, pv, vv);
                }
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { store_block::<W>(&acc, o, ldo) }
}
