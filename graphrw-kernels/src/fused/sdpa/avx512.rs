//! AVX-512 micro-kernels of the packed path (`packed512.rs`): the scores `S^T = K Q^T`
//! and the values `O = alpha * O + P V`, in f32 (AVX-512F FMAs) and in bf16 (AVX-512
//! BF16 `vdpbf16ps`: two bf16 products per f32 lane, accumulated in f32), and the
//! online-softmax step on 16 columns at a time.
//!
//! With 32 `zmm` registers a micro-tile holds `8 x 48` f32 results (24 accumulators):
//! each step of the scores loads up to three 16-column query vectors and broadcasts 8
//! key elements (folded into the FMA as an embedded broadcast), each step of the
//! values loads up to three 16-column value vectors and broadcasts 8 probabilities.
//! Rows are always full: keys come in panels of [`MR`] = 8 (the key block is a
//! multiple of 8), query rows in the 16-padded block; only the width (1 to 3 vectors)
//! varies.
//!
//! The bf16 layouts hold pairs along the reduction dimension, so each 32-bit lane is one
//! pair: keys `[Skv/8][D/2][8][2]` (broadcast operand), queries `[Bq/16][D/2][16][2]`,
//! values `[Dv/16][Skv/2][16][2]`, probabilities `[Bk/2][Bq][2]` (broadcast operand).
//! An odd last pair has a zero second element (keys, queries) or, for the values,
//! is loaded with its second half masked to zero, so a value past the block (which
//! the padded probability 0 multiplies) never matters even if it is not finite.
//!
//! The tile functions check every slice length once, at entry, with real assertions;
//! the micro-kernels then read through raw pointers within those bounds.

use std::arch::x86_64::*;

/// Keys per key panel (rows of a score micro-tile) and query rows per value
/// micro-tile.
pub(super) const MR: usize = 8;
/// Columns per panel: one 16-lane vector.
pub(super) const NR: usize = 16;
/// Whether the CPU has the target features every function here is compiled with,
/// and so needs: AVX-512F, AVX-512BW and AVX-512 BF16. The f32 kernels use only
/// AVX-512F, but one set keeps the contract simple (Zen 4, Sapphire Rapids and Cooper
/// Lake have all three; Skylake-X and Ice Lake, without BF16, run the AVX2 path).
pub(super) fn available() -> bool {
    let f = crate::cpu::CpuFeatures::get();
    f.avx512f && f.avx512bw && f.avx512bf16
}
/// Most 16-column vectors a micro-tile spans (24 accumulators with 8 rows).
const MAXW: usize = 3;

/// Splits `n` panels into groups of at most [`MAXW`], as even as possible (4 panels:
/// 2 + 2, not 3 + 1, so no group runs the narrowest micro-tile when it need not):
/// yields `(first panel, panels)`.
fn groups(n: usize) -> impl Iterator<Item = (usize, usize)> {
    let count = n.div_ceil(MAXW);
    (0..count).map(move |g| {
        // Group `g` starts after `g` groups of the even split.
        let start = g * n / count;
        (start, (g + 1) * n / count - start)
    })
}

/// One `8 x 16 W` block of f32 scores from a packed key panel (`kp[p * 8 + r]`) and `W`
/// packed query panels (`qp[w * qs + p * 16 + t]`), depth `d`, stored to `s` (8 rows of
/// `16 W` at stride `lds`); returns the column maxima over the first `valid` rows
/// (`-inf` when none).
///
/// # Safety
/// The features of [`available`]; `kp` readable for `8 d` floats, `qp` for `W` panels of `16 d` at stride
/// `qs`, `s` writable for 8 rows of `16 W` at stride `lds`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
unsafe fn scores_micro_f32<const W: usize>(
    d: usize,
    kp: *const f32,
    qp: *const f32,
    qs: usize,
    s: *mut f32,
    lds: usize,
    valid: usize,
) -> [__m512; MAXW] {
    let mut acc = [[_mm512_setzero_ps(); W]; MR];
    for p in 0..d {
        // SAFETY: `p < d`: 16 floats at `w * qs + 16 p` of each query panel and 8 at
        // `8 p` of the key panel, inside the caller's bounds.
        unsafe {
            let q: [__m512; W] = std::array::from_fn(|w| _mm512_loadu_ps(qp.add(w * qs + p * NR)));
            for (r, accr) in acc.iter_mut().enumerate() {
                let kv = _mm512_set1_ps(*kp.add(p * MR + r));
                for (x, &qv) in accr.iter_mut().zip(&q) {
                    *x = _mm512_fmadd_ps(kv, qv, *x);
                }
            }
        }
    }
    // SAFETY: rows `r < 8`, columns `< 16 W` of `s`, inside the caller's bounds.
    unsafe { store_max::<W>(&acc, s, lds, valid, None) }
}

/// One `8 x 16 W` block of scores from bf16 pairs: the key panel `kp[(p2 * 8 + r) * 2 +
/// e]` and `W` query panels `qp[w * qs + (p2 * 16 + t) * 2 + e]`, `d2` pairs deep, the
/// f32 sums times `scale` (the queries are not scaled before rounding to bf16); as
/// [`scores_micro_f32`] otherwise.
///
/// # Safety
/// The features of [`available`]; `kp` readable for `16 d2` bf16, `qp` for `W` panels of
/// `32 d2` at stride `qs`, `s` writable for 8 rows of `16 W` at stride `lds`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_micro_bf16<const W: usize>(
    d2: usize,
    kp: *const u16,
    qp: *const u16,
    qs: usize,
    s: *mut f32,
    lds: usize,
    valid: usize,
    scale: f32,
) -> [__m512; MAXW] {
    let mut acc = [[_mm512_setzero_ps(); W]; MR];
    for p in 0..d2 {
        // SAFETY: `p < d2`: 32 bf16 at `w * qs + 32 p` of each query panel and 16 at
        // `16 p` of the key panel, inside the caller's bounds; the transmutes
        // reinterpret 512 bits as 32 bf16 (any bits are a valid `__m512bh`).
        unsafe {
            let q: [__m512bh; W] = std::array::from_fn(|w| {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    qp.add(w * qs + p * 2 * NR).cast(),
                ))
            });
            for (r, accr) in acc.iter_mut().enumerate() {
                let pair = kp.add((p * MR + r) * 2).cast::<i32>().read_unaligned();
                let kv = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair));
                for (x, &qv) in accr.iter_mut().zip(&q) {
                    *x = _mm512_dpbf16_ps(*x, kv, qv);
                }
            }
        }
    }
    // SAFETY: rows `r < 8`, columns `< 16 W` of `s`, inside the caller's bounds.
    unsafe { store_max::<W>(&acc, s, lds, valid, Some(scale)) }
}

/// Stores the `8 x W` accumulators (times `scale` if given) to `s` (stride `lds`) and
/// returns the column maxima
/// of the first `valid` rows (the new score second: a NaN score makes the max NaN, so
/// its row comes out NaN, as in `avx2::softmax_update`).
///
/// # Safety
/// The features of [`available`]; `s` writable for 8 rows of `16 W` at stride `lds`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
unsafe fn store_max<const W: usize>(
    acc: &[[__m512; W]; MR],
    s: *mut f32,
    lds: usize,
    valid: usize,
    scale: Option<f32>,
) -> [__m512; MAXW] {
    let mut mx = [_mm512_set1_ps(f32::NEG_INFINITY); MAXW];
    for (r, accr) in acc.iter().enumerate() {
        for (w, &x) in accr.iter().enumerate() {
            let x = match scale {
                Some(sc) => _mm512_mul_ps(x, _mm512_set1_ps(sc)),
                None => x,
            };
            // SAFETY: row `r < 8`, columns `16 w .. 16 w + 16 <= 16 W` of `s`.
            unsafe { _mm512_storeu_ps(s.add(r * lds + w * NR), x) };
            if r < valid {
                mx[w] = _mm512_max_ps(mx[w], x);
            }
        }
    }
    mx
}

/// The score micro-tiles of one strip of `w` (1 to 3) query panels starting at panel
/// `cp`, over key panels `0..npan`; returns the strip's column maxima over the first
/// `nk` keys (`-inf` where `nk` is 0).
///
/// # Safety
/// The features of [`available`]; the operands hold `npan` key
/// panels and query panels `cp..cp + w`, `s` rows `0..8 npan` and columns
/// `16 cp .. 16 (cp + w)` at stride `lds` (the callers assert it).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
unsafe fn score_strip(
    ops: Operands<'_>,
    npan: usize,
    nk: usize,
    cp: usize,
    w: usize,
    s: *mut f32,
    lds: usize,
) -> [__m512; MAXW] {
    let mut mx = [_mm512_set1_ps(f32::NEG_INFINITY); MAXW];
    for jp in 0..npan {
        let valid = MR.min(nk.saturating_sub(jp * MR));
        let sp = s.wrapping_add(jp * MR * lds + cp * NR);
        // SAFETY: key panel `jp < npan`, query panels `cp..cp + w` and the `8 x 16 w`
        // block of `s` at rows `8 jp`, column `16 cp`: inside the caller's bounds.
        let t = unsafe {
            match ops {
                Operands::F32 { kp, qp, d } => {
                    let (k, q, qs) = (
                        kp.as_ptr().add(jp * d * MR),
                        qp.as_ptr().add(cp * d * NR),
                        d * NR,
                    );
                    match w {
                        3 => scores_micro_f32::<3>(d, k, q, qs, sp, lds, valid),
                        2 => scores_micro_f32::<2>(d, k, q, qs, sp, lds, valid),
                        _ => scores_micro_f32::<1>(d, k, q, qs, sp, lds, valid),
                    }
                }
                Operands::Bf16 { kp, qp, d2, scale } => {
                    let (k, q, qs) = (
                        kp.as_ptr().add(jp * d2 * MR * 2),
                        qp.as_ptr().add(cp * d2 * NR * 2),
                        d2 * NR * 2,
                    );
                    match w {
                        3 => scores_micro_bf16::<3>(d2, k, q, qs, sp, lds, valid, scale),
                        2 => scores_micro_bf16::<2>(d2, k, q, qs, sp, lds, valid, scale),
                        _ => scores_micro_bf16::<1>(d2, k, q, qs, sp, lds, valid, scale),
                    }
                }
            }
        };
        for (m, x) in mx.iter_mut().zip(t) {
            *m = _mm512_max_ps(*m, x);
        }
    }
    mx
}

/// The packed operands of the scores: f32 (`kp`: `[npan][d][8]`, `qp`:
/// `[ncols / 16][d][16]`) or bf16 pairs (`kp`: `[npan][d2][8][2]`, `qp`:
/// `[ncols / 16][d2][16][2]`, as bits, unscaled: the sums are multiplied by `scale`).
#[derive(Clone, Copy)]
pub(super) enum Operands<'a> {
    /// f32 keys and queries, depth `d`.
    F32 {
        kp: &'a [f32],
        qp: &'a [f32],
        d: usize,
    },
    /// bf16 pairs, `d2` pairs deep; the scores are the sums times `scale`.
    Bf16 {
        kp: &'a [u16],
        qp: &'a [u16],
        d2: usize,
        scale: f32,
    },
}

impl Operands<'_> {
    /// Asserts that the operands hold `npan` key panels and `ncols / 16` query panels.
    fn check(&self, npan: usize, ncols: usize) {
        match *self {
            Operands::F32 { kp, qp, d } => {
                assert!(kp.len() >= npan * d * MR && qp.len() >= ncols * d);
            }
            Operands::Bf16 { kp, qp, d2, .. } => {
                assert!(kp.len() >= npan * d2 * MR * 2 && qp.len() >= ncols * d2 * 2);
            }
        }
    }
}

/// The score tile `s[(8 jp + r) * lds + c]` for key panels `jp < npan` and columns
/// `c < ncols` (`ncols` a multiple of 16, `<= lds`), from packed operands.
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn scores(
    ops: Operands<'_>,
    npan: usize,
    ncols: usize,
    s: &mut [f32],
    lds: usize,
) {
    assert!(ncols.is_multiple_of(NR) && ncols <= lds && s.len() >= npan * MR * lds);
    ops.check(npan, ncols);
    let sp = s.as_mut_ptr();
    for (cp, w) in groups(ncols / NR) {
        // SAFETY: the lengths are checked above; the key count only selects the rows
        // whose maxima are taken (none here).
        unsafe { score_strip(ops, npan, 0, cp, w, sp, lds) };
    }
}

/// The score tile and the online-softmax step in one pass (the same results as
/// [`scores`] followed by `avx2::softmax_update`), for key blocks with no mask and
/// off the causal diagonal: for each strip of up to 48 query columns, the `nk` keys'
/// scores with the column maxima kept in registers, then, while the strip is in L1,
/// `alpha = e^(m - m_new)`, `p = e^(s - m_new)`, `l = alpha l + sum_j p`, `m = m_new`.
/// The probabilities go to `s` in place (`p_out` `None`) or, as bf16 pairs for the
/// bf16 value product, to `p_out` (`[ceil(nk / 2)][lds][2]`; an odd last key's pair
/// has a zero second element); the sums are of the f32 probabilities.
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_softmax(
    ops: Operands<'_>,
    nk: usize,
    ncols: usize,
    s: &mut [f32],
    lds: usize,
    mut p_out: Option<&mut [u16]>,
    m: &mut [f32],
    l: &mut [f32],
    alpha: &mut [f32],
) {
    let npan = nk.div_ceil(MR);
    assert!(ncols.is_multiple_of(NR) && ncols <= lds && s.len() >= npan * MR * lds);
    assert!(m.len() >= ncols && l.len() >= ncols && alpha.len() >= ncols);
    if let Some(p) = &p_out {
        assert!(p.len() >= nk.div_ceil(2) * lds * 2);
    }
    ops.check(npan, ncols);
    let sp = s.as_mut_ptr();
    for (cp, w) in groups(ncols / NR) {
        // SAFETY: the lengths are checked above.
        let mx = unsafe { score_strip(ops, npan, nk, cp, w, sp, lds) };
        for (i, &x) in mx.iter().enumerate().take(w) {
            let c = (cp + i) * NR;
            // SAFETY: columns `c..c + 16 <= ncols` of `m`, `l`, `alpha`, of rows
            // `j < nk` of `s` and of the `ceil(nk / 2)` pair rows of `p_out`, all
            // checked above.
            unsafe {
                let p = p_out.as_deref_mut().map(|p| p.as_mut_ptr());
                softmax_columns(x, nk, sp.add(c), lds, p, c, m, l, alpha);
            }
        }
    }
}

/// The online-softmax step on 16 columns (`col`, `nk` rows of stride `lds`) whose new
/// scores' maximum is `mx`; columns `c..c + 16` of `m`, `l`, `alpha`. The
/// probabilities go back to `col`, or as bf16 pairs to `pairs` (`[ceil(nk/2)][lds][2]`,
/// these columns at `2 c`).
///
/// # Safety
/// The features of [`available`]; the 16 columns
/// of `nk` rows of `col`, of `ceil(nk / 2)` rows of `pairs` and `c + 16` elements of
/// `m`, `l`, `alpha` are in bounds.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_columns(
    mx: __m512,
    nk: usize,
    col: *mut f32,
    lds: usize,
    pairs: Option<*mut u16>,
    c: usize,
    m: &mut [f32],
    l: &mut [f32],
    alpha: &mut [f32],
) {
    // SAFETY: see the function's contract.
    unsafe {
        let mo = _mm512_loadu_ps(m.as_ptr().add(c));
        let x = _mm512_max_ps(mo, mx);
        let u = exp_shift(x);
        let a = exp16(_mm512_sub_ps(mo, u));
        _mm512_storeu_ps(alpha.as_mut_ptr().add(c), a);
        _mm512_storeu_ps(m.as_mut_ptr().add(c), x);
        let mut l0 = _mm512_mul_ps(_mm512_loadu_ps(l.as_ptr().add(c)), a);
        let mut l1 = _mm512_setzero_ps();
        match pairs {
            None => {
                let mut j = 0;
                while j + 2 <= nk {
                    let (p0, p1) = (col.add(j * lds), col.add((j + 1) * lds));
                    let e0 = exp16_shifted(_mm512_loadu_ps(p0), u);
                    let e1 = exp16_shifted(_mm512_loadu_ps(p1), u);
                    _mm512_storeu_ps(p0, e0);
                    _mm512_storeu_ps(p1, e1);
                    l0 = _mm512_add_ps(l0, e0);
                    l1 = _mm512_add_ps(l1, e1);
                    j += 2;
                }
                if j < nk {
                    let p0 = col.add(j * lds);
                    let e0 = exp16_shifted(_mm512_loadu_ps(p0), u);
                    _mm512_storeu_ps(p0, e0);
                    l0 = _mm512_add_ps(l0, e0);
                }
            }
            Some(pb) => {
                let idx = interleave_index();
                let mut j = 0;
                while j < nk {
                    let e0 = exp16_shifted(_mm512_loadu_ps(col.add(j * lds)), u);
                    let e1 = if j + 1 < nk {
                        exp16_shifted(_mm512_loadu_ps(col.add((j + 1) * lds)), u)
                    } else {
                        _mm512_setzero_ps()
                    };
                    l0 = _mm512_add_ps(l0, e0);
                    l1 = _mm512_add_ps(l1, e1);
                    store_pairs(pb.add(((j / 2) * lds + c) * 2), e0, e1, idx);
                    j += 2;
                }
            }
        }
        _mm512_storeu_ps(l.as_mut_ptr().add(c), _mm512_add_ps(l0, l1));
    }
}

/// The `vpermw` index that interleaves two 16-element halves: `[0, 16, 1, 17, ..]`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
fn interleave_index() -> __m512i {
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
unsafe fn store_pairs(dst: *mut u16, e0: __m512, e1: __m512, idx: __m512i) {
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
pub(super) unsafe fn probs_to_pairs(
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
pub(super) unsafe fn pack_row_pairs<const R: usize>(
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
pub(super) unsafe fn pack_value_pairs(
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

/// The packed operands of the values: f32 probabilities `[nk][ldp]` with value panels
/// `[npan][pstride][16]`, or bf16 probability pairs `[ceil(nk / 2)][ldp][2]` with value
/// panels `[npan][pstride][16][2]` (`pstride` pairs), as bits. This block's keys start
/// at row 0 of each panel of the slices given.
#[derive(Clone, Copy)]
pub(super) enum ValueOperands<'a> {
    /// f32 probabilities and values.
    F32 { p: &'a [f32], vp: &'a [f32] },
    /// bf16 pairs.
    Bf16 { p: &'a [u16], vp: &'a [u16] },
}

/// `o[i * ldo + c] = alpha[i] * o[..] + sum_j p[j][i] * v[j][c]` for query rows `i <
/// nrows` (a multiple of 8, `<= ldp`), value columns `c < 16 npan` (`<= ldo`), keys
/// `j < nk`.
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn values(
    ops: ValueOperands<'_>,
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
                        match w {
                            3 => values_micro_f32::<3>(nk, pp, ldp, vq, vs, al, oq, ldo),
                            2 => values_micro_f32::<2>(nk, pp, ldp, vq, vs, al, oq, ldo),
                            _ => values_micro_f32::<1>(nk, pp, ldp, vq, vs, al, oq, ldo),
                        }
                    }
                    ValueOperands::Bf16 { p, vp } => {
                        let (pp, vq, vs) = (
                            p.as_ptr().add(i * 2),
                            vp.as_ptr().add(cp * pstride * NR * 2),
                            pstride * NR * 2,
                        );
                        match w {
                            3 => values_micro_bf16::<3>(nk, pp, ldp, vq, vs, al, oq, ldo),
                            2 => values_micro_bf16::<2>(nk, pp, ldp, vq, vs, al, oq, ldo),
                            _ => values_micro_bf16::<1>(nk, pp, ldp, vq, vs, al, oq, ldo),
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
unsafe fn load_scaled<const W: usize>(
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
unsafe fn store_block<const W: usize>(acc: &[[__m512; W]; MR], o: *mut f32, ldo: usize) {
    for (r, accr) in acc.iter().enumerate() {
        for (w, &x) in accr.iter().enumerate() {
            // SAFETY: row `r < 8`, columns `16 w .. 16 w + 16` of `o`.
            unsafe { _mm512_storeu_ps(o.add(r * ldo + w * NR), x) };
        }
    }
}

/// One `8 x 16 W` block of the f32 values: 8 query rows of `o` rescaled by `alpha`,
/// plus `p[j * ldp + r]` times the value panels `v[w * vs + j * 16 + t]`, `j < nk`.
///
/// # Safety
/// The features of [`available`]; `p` readable for `nk` rows of 8 at stride `ldp`, `v` for `W` panels of
/// `16 nk` at stride `vs`, `o` for 8 rows of `16 W` at stride `ldo`, `alpha` for 8.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn values_micro_f32<const W: usize>(
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
/// second elements zeroed.
///
/// # Safety
/// The features of [`available`]; `p` readable for `ceil(nk / 2)` rows of 16 at
/// stride `2 ldp`, `v` for `W` panels of `32 ceil(nk / 2)` at stride `vs`, `o` for 8
/// rows of `16 W` at stride `ldo`, `alpha` for 8.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn values_micro_bf16<const W: usize>(
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
    for jj in 0..nk2 {
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

/// The shift a column's exponentials are taken against: its running max, or 0 while
/// that max is still `-inf` (see `avx2::exp_shift`).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
fn exp_shift(max: __m512) -> __m512 {
    let ninf = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(max, _mm512_set1_ps(f32::NEG_INFINITY));
    _mm512_mask_mov_ps(max, ninf, _mm512_setzero_ps())
}

/// The polynomial of `2^f` for `f` in about `[-1/2, 1/2]` (`avx2::exp8`'s).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
fn pow2_poly(f: __m512) -> __m512 {
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
fn exp16(x: __m512) -> __m512 {
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
fn exp16_shifted(s: __m512, u: __m512) -> __m512 {
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

#[cfg(test)]
mod tests {
    use super::super::avx2;
    use super::super::avx2::tests::{assert_probs_close, assert_state_close, ramp, running_state};
    use super::*;
    use half::bf16;

    /// Whether the CPU lacks the features of [`available`] (then the tests say so and
    /// return).
    fn skip() -> bool {
        let has = available() && crate::cpu::Isa::Avx2Fma.is_available();
        if !has {
            println!(
                "SKIPPED: the AVX-512 SDPA kernel tests need AVX-512 F, BW, BF16 and AVX2+FMA"
            );
        }
        !has
    }

    /// `exp16` gives the AVX2 `exp8`'s results bit for bit (the same operations, 16
    /// lanes), `exp16_shifted` `exp8_shifted`'s wherever that is not 0, exactly 0 at
    /// `s = -inf` and a subnormal at most where that flushes to 0, over the
    /// softmax's range (`s <= u`) and its edges (`-inf`, NaN, maxima near f32's limits, results
    /// down to 0); the AVX2 forms are tested against f64.
    #[test]
    fn exp16_matches_avx2_exp8() {
        if skip() {
            return;
        }
        let mut xs: Vec<f32> = (-3000..=900).map(|i| i as f32 * 0.1).collect();
        xs.extend([
            f32::NEG_INFINITY,
            f32::NAN,
            -87.3,
            -87.4,
            -1e30,
            88.0,
            0.0,
            -0.0,
        ]);
        xs.extend([-103.0, -104.0, -104.5, -105.0, -200.0]);
        while !xs.len().is_multiple_of(16) {
            xs.push(0.25);
        }
        for u in [0.0f32, 3.7, -12.5, f32::MIN, f32::MAX] {
            let us = [u; 16];
            for chunk in xs.chunks(16) {
                let (mut a, mut b, mut c, mut e) = ([0f32; 16], [0f32; 16], [0f32; 16], [0f32; 16]);
                // SAFETY: the features were detected above; every array holds 16 floats.
                unsafe {
                    let x = _mm512_loadu_ps(chunk.as_ptr());
                    let uv = _mm512_loadu_ps(us.as_ptr());
                    _mm512_storeu_ps(a.as_mut_ptr(), exp16(x));
                    _mm512_storeu_ps(b.as_mut_ptr(), exp16_shifted(_mm512_add_ps(x, uv), uv));
                    for h in 0..2 {
                        let x8 = _mm256_loadu_ps(chunk.as_ptr().add(8 * h));
                        let u8v = _mm256_set1_ps(u);
                        _mm256_storeu_ps(c.as_mut_ptr().add(8 * h), avx2::exp8(x8));
                        let s8 = _mm256_add_ps(x8, u8v);
                        _mm256_storeu_ps(e.as_mut_ptr().add(8 * h), avx2::exp8_shifted(s8, u8v));
                    }
                }
                for i in 0..16 {
                    assert_eq!(a[i].to_bits(), c[i].to_bits(), "exp16({})", chunk[i]);
                    // The same bits but where the AVX2 form flushes to 0 (`2^n` with
                    // `n = -127`): there a subnormal at most; 0 for `-inf`.
                    let what = format!(
                        "exp16_shifted({} + {u}, {u}) = {}, exp8_shifted {}",
                        chunk[i], b[i], e[i]
                    );
                    if chunk[i] > 0.0 {
                        // Outside a softmax (`s > u`): not compared.
                    } else if e[i] != 0.0 || chunk[i] == f32::NEG_INFINITY {
                        assert_eq!(b[i].to_bits(), e[i].to_bits(), "{what}");
                    } else {
                        let tiny = (0.0..f32::MIN_POSITIVE).contains(&b[i]);
                        assert!(e[i] == 0.0 && tiny, "{what}");
                    }
                }
            }
        }
    }

    /// `probs_to_pairs`: each pair is the two keys' probabilities rounded to bf16 (nearest
    /// even), an odd last key paired with 0; columns past `ncols` untouched.
    #[test]
    fn probs_to_pairs_layout() {
        if skip() {
            return;
        }
        for (nk, ncols, lds) in [(1, 16, 16), (2, 16, 32), (7, 48, 48), (96, 96, 96)] {
            let p: Vec<f32> = ramp(nk * lds, nk).into_iter().map(|x| x * 3.0).collect();
            let mut pairs = vec![0xffffu16; nk.div_ceil(2) * lds * 2];
            // SAFETY: the features were detected above.
            unsafe { probs_to_pairs(nk, ncols, &p, lds, &mut pairs) };
            for jj in 0..nk.div_ceil(2) {
                for c in 0..lds {
                    for e in 0..2 {
                        let j = 2 * jj + e;
                        let got = pairs[(jj * lds + c) * 2 + e];
                        let want = if c >= ncols {
                            0xffff
                        } else if j < nk {
                            bf16::from_f32(p[j * lds + c]).to_bits()
                        } else {
                            0
                        };
                        assert_eq!(got, want, "nk {nk} ncols {ncols}: key {j} column {c}");
                    }
                }
            }
        }
    }

    /// The fused score + softmax pass against the score tile followed by the AVX2
    /// softmax step (and, for bf16, `probs_to_pairs`), f32 and bf16 operands: key counts
    /// that are not a multiple of the 8-key panel or of 2 (panel rows past `nk` hold
    /// large keys that must not enter the max), one key, odd depths, strips of 1 to 3
    /// panels, a stride wider than the columns, a fresh and a running state with some
    /// columns still at `-inf`.
    #[test]
    fn scores_softmax_matches_separate_passes() {
        if skip() {
            return;
        }
        for (nk, d, ncols, lds) in [
            (1usize, 1usize, 16usize, 16usize),
            (5, 3, 16, 32),
            (8, 8, 32, 32),
            (9, 16, 48, 64),
            (95, 64, 96, 96),
            (96, 63, 96, 96),
            (13, 128, 80, 80),
        ] {
            let npan = nk.div_ceil(MR);
            let d2 = d.div_ceil(2);
            // Keys `[npan * 8][d]`, 40 past `nk`; queries `[ncols][d]`.
            let keys: Vec<f32> = (0..npan * MR * d)
                .map(|i| {
                    if i / d >= nk {
                        40.0
                    } else {
                        ramp(1, i)[0] * 2.0
                    }
                })
                .collect();
            let qs: Vec<f32> = ramp(ncols * d, 5)
                .into_iter()
                .map(|x| x * 40.0 / d as f32)
                .collect();
            // Round to bf16 first so the f32 and bf16 forms see the same numbers.
            let keys: Vec<f32> = keys.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
            let qs: Vec<f32> = qs.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
            let mut kp = vec![0f32; npan * d * MR];
            let mut kh = vec![0u16; npan * d2 * MR * 2];
            for j in 0..npan * MR {
                for p in 0..d {
                    kp[((j / MR) * d + p) * MR + j % MR] = keys[j * d + p];
                    kh[(((j / MR) * d2 + p / 2) * MR + j % MR) * 2 + p % 2] =
                        bf16::from_f32(keys[j * d + p]).to_bits();
                }
            }
            let mut qp = vec![0f32; ncols * d];
            let mut qh = vec![0u16; ncols * d2 * 2];
            for i in 0..ncols {
                for p in 0..d {
                    qp[((i / NR) * d + p) * NR + i % NR] = qs[i * d + p];
                    qh[(((i / NR) * d2 + p / 2) * NR + i % NR) * 2 + p % 2] =
                        bf16::from_f32(qs[i * d + p]).to_bits();
                }
            }
            for bf in [false, true] {
                let ops = if bf {
                    Operands::Bf16 {
                        kp: &kh,
                        qp: &qh,
                        d2,
                        scale: 1.0,
                    }
                } else {
                    Operands::F32 {
                        kp: &kp,
                        qp: &qp,
                        d,
                    }
                };
                for fresh in [true, false] {
                    let (m, l) = running_state(ncols, fresh);
                    let (mut s1, mut m1, mut l1, mut a1) = (
                        vec![0.0; npan * MR * lds],
                        m.clone(),
                        l.clone(),
                        vec![0.0; ncols],
                    );
                    let (mut s2, mut m2, mut l2, mut a2) = (s1.clone(), m, l, a1.clone());
                    let mut p1 = vec![0u16; nk.div_ceil(2) * lds * 2];
                    let mut p2 = p1.clone();
                    // SAFETY: the features were detected above.
                    unsafe {
                        scores(ops, npan, ncols, &mut s1, lds);
                        avx2::softmax_update(
                            &mut s1[..nk * lds],
                            lds,
                            nk,
                            &mut m1,
                            &mut l1,
                            &mut a1,
                        );
                        if bf {
                            probs_to_pairs(nk, ncols, &s1, lds, &mut p1);
                        }
                        let out = if bf { Some(&mut p2[..]) } else { None };
                        scores_softmax(
                            ops, nk, ncols, &mut s2, lds, out, &mut m2, &mut l2, &mut a2,
                        );
                    }
                    let what =
                        format!("nk {nk} d {d} ncols {ncols} lds {lds} bf16 {bf} fresh {fresh}");
                    if bf {
                        for (i, (&x, &y)) in p1.iter().zip(&p2).enumerate() {
                            let (x, y) = (bf16::from_bits(x).to_f32(), bf16::from_bits(y).to_f32());
                            // One bf16 step apart at most (the f32 exps agree to 1e-6).
                            assert!(
                                (x - y).abs() <= x.abs() / 128.0,
                                "{what}: pair element {i}: {y} vs {x}"
                            );
                        }
                    } else {
                        assert_probs_close(&what, (&s1, &s2), (nk, ncols, lds));
                    }
                    assert_state_close(&what, [(&m1, &m2), (&l1, &l2), (&a1, &a2)], ncols);
                }
            }
        }
    }

    /// `pack_row_pairs` against the layout written element by element, for key
    /// panels (8 rows) and query panels (16 rows): odd and even depths, one row, full
    /// and partial last panels; what it must not write keeps its old value.
    #[test]
    fn pack_row_pairs_layout() {
        if skip() {
            return;
        }
        for (n, d) in [
            (1usize, 1usize),
            (1, 2),
            (7, 3),
            (8, 64),
            (9, 5),
            (17, 31),
            (40, 128),
        ] {
            let rows: Vec<u16> = (0..n * d).map(|i| (i * 5 + 3) as u16).collect();
            let d2 = d.div_ceil(2);
            fn want_of<const R: usize>(rows: &[u16], n: usize, d: usize) -> Vec<u16> {
                let d2 = d.div_ceil(2);
                let mut w = vec![0x1234_u16; n.div_ceil(R) * d2 * R * 2];
                for i in 0..n {
                    for p in 0..d {
                        w[(((i / R) * d2 + p / 2) * R + i % R) * 2 + p % 2] = rows[i * d + p];
                    }
                }
                w
            }
            let mut got8 = vec![0x1234_u16; n.div_ceil(8) * d2 * 16];
            let mut got16 = vec![0x1234_u16; n.div_ceil(16) * d2 * 32];
            // SAFETY: the features were detected above.
            unsafe {
                pack_row_pairs::<8>(&rows, n, d, &mut got8);
                pack_row_pairs::<16>(&rows, n, d, &mut got16);
            }
            assert_eq!(got8, want_of::<8>(&rows, n, d), "R 8 n {n} d {d}");
            assert_eq!(got16, want_of::<16>(&rows, n, d), "R 16 n {n} d {d}");
        }
    }

    /// `pack_value_pairs` against the layout written element by element: value widths
    /// below, at and past 16 columns (a scalar tail), an even and an odd key count (the
    /// last key's partner left as it was), a block that starts at a later pair.
    #[test]
    fn pack_value_pairs_layout() {
        if skip() {
            return;
        }
        for (n, dv, j0, skv2) in [
            (1usize, 1usize, 0usize, 1usize),
            (2, 16, 0, 1),
            (5, 17, 2, 6),
            (8, 40, 8, 12),
            (96, 64, 0, 48),
        ] {
            let rows: Vec<u16> = (0..n * dv).map(|i| (i * 7 + 1) as u16).collect();
            let len = dv.div_ceil(NR) * skv2 * NR * 2;
            let mut want = vec![0xabcd_u16; len];
            for j in 0..n {
                for c in 0..dv {
                    let jk = j0 + j;
                    want[(((c / NR) * skv2 + jk / 2) * NR + c % NR) * 2 + jk % 2] =
                        rows[j * dv + c];
                }
            }
            let mut got = vec![0xabcd_u16; len];
            // SAFETY: the features were detected above.
            unsafe { pack_value_pairs(&rows, n, dv, j0, skv2, &mut got) };
            assert_eq!(got, want, "n {n} dv {dv} j0 {j0} skv2 {skv2}");
        }
    }

    /// The value product, f32 and bf16, against a scalar sum (the bf16 form on
    /// probabilities and values that bf16 holds exactly, so only the order of the f32
    /// sums differs): odd key counts (a padded last pair whose value is infinite: the
    /// masked load must drop it), one to eight 16-column panels, rows a multiple of 8.
    #[test]
    fn values_match_scalar() {
        if skip() {
            return;
        }
        for (nk, nrows, npan) in [
            (1usize, 8usize, 1usize),
            (3, 16, 2),
            (8, 8, 3),
            (17, 32, 4),
            (96, 96, 8),
            (95, 48, 5),
        ] {
            let (ldp, ldo) = (nrows + 16, npan * NR + 16);
            let pstride = nk + 3;
            let p: Vec<f32> = ramp(nk * ldp, 3)
                .into_iter()
                .map(|x| bf16::from_f32(x.abs()).to_f32())
                .collect();
            let v: Vec<f32> = ramp(npan * pstride * NR, 4)
                .into_iter()
                .map(|x| bf16::from_f32(x).to_f32())
                .collect();
            let alpha: Vec<f32> = ramp(nrows, 5).into_iter().map(|x| x + 1.0).collect();
            let o0: Vec<f32> = ramp(nrows * ldo, 6);
            let mut want = o0.clone();
            for i in 0..nrows {
                for c in 0..npan * NR {
                    let mut acc = 0f64;
                    for j in 0..nk {
                        acc += p[j * ldp + i] as f64
                            * v[((c / NR) * pstride + j) * NR + c % NR] as f64;
                    }
                    want[i * ldo + c] = (alpha[i] * o0[i * ldo + c]) + acc as f32;
                }
            }
            // bf16 forms: probability pairs and value pairs (rows past `nk`: infinite).
            let ps2 = pstride.div_ceil(2);
            let mut ph = vec![0u16; nk.div_ceil(2) * ldp * 2];
            for j in 0..nk {
                for i in 0..ldp {
                    ph[((j / 2) * ldp + i) * 2 + j % 2] = bf16::from_f32(p[j * ldp + i]).to_bits();
                }
            }
            let mut vh = vec![bf16::INFINITY.to_bits(); npan * ps2 * NR * 2];
            for cp in 0..npan {
                for j in 0..nk {
                    for t in 0..NR {
                        vh[((cp * ps2 + j / 2) * NR + t) * 2 + j % 2] =
                            bf16::from_f32(v[(cp * pstride + j) * NR + t]).to_bits();
                    }
                }
            }
            for bf in [false, true] {
                let mut o = o0.clone();
                let ops = if bf {
                    ValueOperands::Bf16 { p: &ph, vp: &vh }
                } else {
                    ValueOperands::F32 { p: &p, vp: &v }
                };
                let ps = if bf { ps2 } else { pstride };
                // SAFETY: the features were detected above.
                unsafe { values(ops, nk, nrows, ldp, ps, npan, &alpha, &mut o, ldo) };
                for i in 0..nrows {
                    for c in 0..ldo {
                        let (x, y) = (want[i * ldo + c], o[i * ldo + c]);
                        let ok = if c < npan * NR {
                            (x - y).abs() <= 1e-5 * (1.0 + x.abs())
                        } else {
                            y == o0[i * ldo + c]
                        };
                        assert!(
                            ok,
                            "nk {nk} rows {nrows} panels {npan} bf16 {bf}: o[{i}][{c}] {y} vs {x}"
                        );
                    }
                }
            }
        }
    }
}
