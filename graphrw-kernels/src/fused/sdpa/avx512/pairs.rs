//! bf16 pair packing: probabilities rounded to bf16 in key pairs, and key, query and
//! value rows interleaved in pairs along the reduction dimension.

use std::arch::x86_64::*;

use super::*;

/// The `vpermw` index that interleaves two 16-element halves: `[0, 16, 1, 17, ..]`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) fn interleave_index() -> __m512i {
    const IDX: [u16; 32] = {
        let mut a = [0u16; 32];
        let mut i = 0;
        while i < 16 {
            a[2 * i] = i as u16;
            a[2 * i + 1] = 16 + i as u16;
            i += 1;
        }
        a
    };
    // SAFETY: `IDX` is 64 readable bytes.
    unsafe { _mm512_loadu_si512(IDX.as_ptr().cast()) }
}

/// Stores `(e0[t], e1[t])` rounded to bf16 (nearest even) as 16 pairs at `dst`.
///
/// # Safety
/// The features of [`available`]; `dst` writable for 32 `u16`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) unsafe fn store_pairs(dst: *mut u16, e0: __m512, e1: __m512, idx: __m512i) {
    // `cvtne2ps_pbh(a, b)` puts `b` in the low 16 elements, `a` in the high 16.
    // SAFETY: the transmute reinterprets 32 bf16 as 512 bits; `dst` is writable for 64
    // bytes (the caller's contract).
    unsafe {
        let halves = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(e1, e0));
        _mm512_storeu_si512(dst.cast(), _mm512_permutexvar_epi16(idx, halves));
    }
}

/// The probabilities `p` (`[nk][lds]` f32, the first `ncols` columns) as bf16 pairs
/// along the keys: `pairs[((j / 2) * lds + c) * 2 + j % 2]`, with a zero second element
/// in an odd last pair (the form the bf16 value product broadcasts).
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(in crate::fused::sdpa) unsafe fn probs_to_pairs(
    nk: usize,
    ncols: usize,
    p: &[f32],
    lds: usize,
    pairs: &mut [u16],
) {
    assert!(ncols.is_multiple_of(NR) && ncols <= lds);
    assert!(p.len() >= nk * lds && pairs.len() >= nk.div_ceil(2) * lds * 2);
    let (pp, dst) = (p.as_ptr(), pairs.as_mut_ptr());
    let idx = interleave_index();
    for j in (0..nk).step_by(2) {
        for c in (0..ncols).step_by(NR) {
            // SAFETY: rows `j` and `j + 1` (when `< nk`), columns `c..c + 16 <= ncols
            // <= lds` of `p`; pair row `j / 2 < ceil(nk / 2)`, the same columns, of
            // `pairs`: inside the lengths checked above.
            unsafe {
                let e0 = _mm512_loadu_ps(pp.add(j * lds + c));
                let e1 = if j + 1 < nk {
                    _mm512_loadu_ps(pp.add((j + 1) * lds + c))
                } else {
                    _mm512_setzero_ps()
                };
                store_pairs(dst.add(((j / 2) * lds + c) * 2), e0, e1, idx);
            }
        }
    }
}

/// Packs `n` rows (`rows`: `[n][d]` bf16 bits) in panels of `R` rows (8 for the keys,
/// 16 for the queries), pairs along `d`: row `g R + r`'s elements `2 p2, 2 p2 + 1` go to
/// `dst[((g * d2 + p2) * R + r) * 2 ..][..2]` (`d2 = ceil(d / 2)`), each 32-bit pair
/// fetched by a `vpgatherdd` of 16 lanes (`16 / R` pairs of `R` rows). Elements of a
/// last partial panel past `n`, and an odd `d`'s missing second element, are left as
/// they are (the caller's zeros).
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(in crate::fused::sdpa) unsafe fn pack_row_pairs<const R: usize>(
    rows: &[u16],
    n: usize,
    d: usize,
    dst: &mut [u16],
) {
    const { assert!(R == 8 || R == 16) };
    let d2 = d.div_ceil(2);
    let full = d / 2;
    assert!(rows.len() >= n * d && dst.len() >= n.div_ceil(R) * d2 * R * 2);
    // Lane `l` reads pair `l / R` (of the step's) of row `l % R`: byte offsets.
    let per = 16 / R;
    let offs: [i32; 16] = std::array::from_fn(|l| ((l % R) * d * 2 + (l / R) * 4) as i32);
    // SAFETY: `offs` is 64 readable bytes.
    let offsets = unsafe { _mm512_loadu_si512(offs.as_ptr().cast()) };
    for g in 0..n.div_ceil(R) {
        let nr = R.min(n - g * R);
        let base = rows[g * R * d..].as_ptr();
        let lane_mask = |pairs: usize| {
            (0..16)
                .filter(|&l| l % R < nr && l / R < pairs)
                .fold(0u16, |m, l| m | (1 << l))
        };
        let all = lane_mask(per);
        for p2 in (0..full).step_by(per) {
            let mask = if p2 + per <= full {
                all
            } else {
                lane_mask(full - p2)
            };
            // SAFETY: every lane `l` in `mask` (`l % R < nr`, `p2 + l / R < full`) reads
            // 4 bytes of row `g R + l % R < n` at elements `2 (p2 + l / R) ..+ 2 <= 2 full
            // <= d`, inside `rows` (checked
            // above); the store writes those lanes' pairs at `(g d2 + p2) R + l` (in
            // pairs), `< (g + 1) d2 R`, inside `dst`.
            unsafe {
                let v = _mm512_mask_i32gather_epi32::<1>(
                    _mm512_setzero_si512(),
                    mask,
                    offsets,
                    base.add(p2 * 2).cast(),
                );
                let at = dst.as_mut_ptr().add((g * d2 + p2) * R * 2);
                _mm512_mask_storeu_epi32(at.cast(), mask, v);
            }
        }
        if d % 2 == 1 {
            for r in 0..nr {
                dst[((g * d2 + d2 - 1) * R + r) * 2] = rows[(g * R + r) * d + d - 1];
            }
        }
    }
}

/// Packs the value rows of keys `j0 .. j0 + n` (`rows`: `[n][dv]` bf16 bits, `j0`
/// even) into the pair panels `vh` (`[ceil(dv / 16)][skv2][16][2]`): key `j`'s column
/// `c` goes to `vh[(((c / 16) * skv2 + j / 2) * 16 + c % 16) * 2 + j % 2]`, two keys'
/// 16 columns interleaved by one `vpermw`. An odd last key's partner elements are
/// left as they are (the caller's zeros).
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(in crate::fused::sdpa) unsafe fn pack_value_pairs(
    rows: &[u16],
    n: usize,
    dv: usize,
    j0: usize,
    skv2: usize,
    vh: &mut [u16],
) {
    assert!(j0.is_multiple_of(2) && rows.len() >= n * dv && (j0 + n).div_ceil(2) <= skv2);
    assert!(vh.len() >= dv.div_ceil(NR) * skv2 * NR * 2);
    let full = dv / NR * NR;
    let idx = interleave_index();
    for jj in 0..n.div_ceil(2) {
        let (j, pair) = (2 * jj, j0 / 2 + jj);
        let a = &rows[j * dv..(j + 1) * dv];
        let b = if j + 1 < n {
            Some(&rows[(j + 1) * dv..(j + 2) * dv])
        } else {
            None
        };
        for c in (0..dv).step_by(NR) {
            let at = ((c / NR) * skv2 + pair) * NR * 2;
            match b {
                Some(b) if c < full => {
                    // SAFETY: columns `c..c + 16 <= full <= dv` of rows `a` and `b`
                    // (length `dv`) and 32 elements of `vh` at `at` (pair row `pair <
                    // skv2` of panel `c / 16 < ceil(dv / 16)`): inside the lengths
                    // checked above.
                    unsafe {
                        let lo = _mm256_loadu_si256(a.as_ptr().add(c).cast());
                        let hi = _mm256_loadu_si256(b.as_ptr().add(c).cast());
                        let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                        let out = _mm512_permutexvar_epi16(idx, both);
                        _mm512_storeu_si512(vh.as_mut_ptr().add(at).cast(), out);
                    }
                }
                _ => {
                    for (t, &x) in a[c..dv.min(c + NR)].iter().enumerate() {
                        vh[at + 2 * t] = x;
                    }
                    if let Some(b) = b {
                        for (t, &x) in b[c..dv.min(c + NR)].iter().enumerate() {
                            vh[at + 2 * t + 1] = x;
                        }
                    }
                }
            }
        }
    }
}
