//! The score micro-kernels (`S^T = K Q^T`, f32 FMAs and bf16 dot products) and the
//! score pass with the online-softmax step fused in.

use std::arch::x86_64::*;

use super::*;

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
pub(super) unsafe fn scores_micro_f32<const W: usize, const IN_REGISTER: bool>(
    d: usize,
    kp: *const f32,
    qp: *const f32,
    qs: usize,
    s: *mut f32,
    lds: usize,
    valid: usize,
) -> [__m512; MAXW] {
    let mut acc = [[_mm512_setzero_ps(); W]; MR];
    if IN_REGISTER {
        let (a, b) = ((kp.cast(), MR * 4), (qp.cast(), qs * 4));
        // SAFETY: `d` steps of 8 key floats (32 bytes a step) and `W` query vectors at
        // stride `qs` floats, 64 bytes a step: the caller's bounds.
        unsafe { in_register::fma_steps::<W>(d, a, b, &mut acc) };
        // SAFETY: rows `r < 8`, columns `< 16 W` of `s`, inside the caller's bounds.
        return unsafe { store_max::<W>(&acc, s, lds, valid, None) };
    }
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
/// [`scores_micro_f32`] otherwise (`IN_REGISTER` too).
///
/// # Safety
/// The features of [`available`]; `kp` readable for `16 d2` bf16, `qp` for `W` panels of
/// `32 d2` at stride `qs`, `s` writable for 8 rows of `16 W` at stride `lds`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_micro_bf16<const W: usize, const IN_REGISTER: bool>(
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
    if IN_REGISTER {
        let (a, b) = ((kp.cast(), MR * 4), (qp.cast(), qs * 2));
        // SAFETY: `d2` steps of 8 key pairs (32 bytes a step) and `W` query vectors at
        // stride `qs` bf16, 64 bytes a step: the caller's bounds.
        unsafe { in_register::dpbf16_steps::<W>(d2, a, b, &mut acc) };
        // SAFETY: rows `r < 8`, columns `< 16 W` of `s`, inside the caller's bounds.
        return unsafe { store_max::<W>(&acc, s, lds, valid, Some(scale)) };
    }
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
pub(super) unsafe fn store_max<const W: usize>(
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
/// `nk` keys (`-inf` where `nk` is 0); `in_register` picks the micro-kernels' form.
///
/// # Safety
/// The features of [`available`]; the operands hold `npan` key
/// panels and query panels `cp..cp + w`, `s` rows `0..8 npan` and columns
/// `16 cp .. 16 (cp + w)` at stride `lds` (the callers assert it).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn score_strip(
    ops: Operands<'_>,
    in_register: bool,
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
                    match (w, in_register) {
                        (3, false) => scores_micro_f32::<3, false>(d, k, q, qs, sp, lds, valid),
                        (2, false) => scores_micro_f32::<2, false>(d, k, q, qs, sp, lds, valid),
                        (_, false) => scores_micro_f32::<1, false>(d, k, q, qs, sp, lds, valid),
                        (3, true) => scores_micro_f32::<3, true>(d, k, q, qs, sp, lds, valid),
                        (2, true) => scores_micro_f32::<2, true>(d, k, q, qs, sp, lds, valid),
                        (_, true) => scores_micro_f32::<1, true>(d, k, q, qs, sp, lds, valid),
                    }
                }
                Operands::Bf16 { kp, qp, d2, scale } => {
                    let (k, q, qs) = (
                        kp.as_ptr().add(jp * d2 * MR * 2),
                        qp.as_ptr().add(cp * d2 * NR * 2),
                        d2 * NR * 2,
                    );
                    match (w, in_register) {
                        (3, false) => {
                            scores_micro_bf16::<3, false>(d2, k, q, qs, sp, lds, valid, scale)
                        }
                        (2, false) => {
                            scores_micro_bf16::<2, false>(d2, k, q, qs, sp, lds, valid, scale)
                        }
                        (_, false) => {
                            scores_micro_bf16::<1, false>(d2, k, q, qs, sp, lds, valid, scale)
                        }
                        (3, true) => {
                            scores_micro_bf16::<3, true>(d2, k, q, qs, sp, lds, valid, scale)
                        }
                        (2, true) => {
                            scores_micro_bf16::<2, true>(d2, k, q, qs, sp, lds, valid, scale)
                        }
                        (_, true) => {
                            scores_micro_bf16::<1, true>(d2, k, q, qs, sp, lds, valid, scale)
                        }
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
pub(in crate::fused::sdpa) enum Operands<'a> {
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
/// `c < ncols` (`ncols` a multiple of 16, `<= lds`), from packed operands; the
/// micro-kernels broadcast into a register with `in_register`.
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(in crate::fused::sdpa) unsafe fn scores(
    ops: Operands<'_>,
    in_register: bool,
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
        unsafe { score_strip(ops, in_register, npan, 0, cp, w, sp, lds) };
    }
}

/// The score tile and the online-softmax step in one pass (the same results as
/// [`scores`] followed by `avx2::softmax_update`), for key blocks with no mask and
/// off the causal diagonal: for each strip of up to 48 query columns, the `nk` keys'
/// scores with the column maxima kept in registers, then, while the strip is in L1,
/// `alpha = e^(m - m_new)`, `p = e^(s - m_new)`, `l = alpha l + sum_j p`, `m = m_new`.
/// The probabilities go to `s` in place (`p_out` `None`) or, as bf16 pairs for the
/// bf16 value product, to `p_out` (`[ceil(nk / 2)][lds][2]`; an odd last key's pair
/// has a zero second element); the sums are of the f32 probabilities. `in_register` as
/// in [`scores`].
///
/// # Safety
/// The CPU must have the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(in crate::fused::sdpa) unsafe fn scores_softmax(
    ops: Operands<'_>,
    in_register: bool,
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
        let mx = unsafe { score_strip(ops, in_register, npan, nk, cp, w, sp, lds) };
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
pub(super) unsafe fn softmax_columns(
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
