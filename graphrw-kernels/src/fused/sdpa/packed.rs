//! The f32-compute work item (f32, f16, bf16 inputs) on AVX2+FMA with both products
//! fed from packed operands, the layout a GEMM's micro-kernel reads.
//!
//! - Keys and values are packed **once per key/value head** (per thread, and only as
//!   far as the items need them: a causal item packs up to its last visible key), not
//!   once per query block: keys in panels of 6 (`[Skv/6][D][6]`, the broadcast operand
//!   of the score micro-tile), values in panels of 16 columns (`[Dv/16][Skv][16]`,
//!   the loaded operand of the value micro-tile), f16/bf16 converted to f32 on the way
//!   (once per head instead of once per query block).
//! - The query block is packed in panels of 16 columns, scaled (`[Bq/16][D][16]`).
//! - So every micro-tile reads contiguous runs. Unpacked, the value micro-tile read a
//!   16-column slab of V at a stride of `Dv` floats: at `Dv = 128` (512 bytes) its 96
//!   rows fall into 8 of L1's 64 sets and evicted each other (8 ways) on every pass.
//!
//! The extra memory is one head of packed keys and values per thread
//! (`Skv x (D + Dv)` f32, padded to the panels) besides the tiles.

use crate::Element;

use super::avx2::{self, MR, NR};
use super::unpacked::apply_mask;
use super::{reset, FullyMaskedRows, Problem};

/// Per-thread buffers of the packed path, reused across work items and calls (one
/// per thread, so a call does not fault in fresh pages for a head of packed keys).
struct PackScratch {
    /// The call ([`Problem::call`]) and key/value head held in `kp`/`vp`.
    head: (u64, usize),
    /// Keys of that head packed so far (a multiple of 6, or all of them).
    done: usize,
    /// Keys: `[ceil(Skv / 6)][D][6]`, zero past `Skv`.
    kp: Vec<f32>,
    /// Values: `[Dvp / 16][Skv][16]`, zero past `Dv`.
    vp: Vec<f32>,
    /// Rows converted to f32 before packing (f16/bf16 keys and values, queries).
    rows: Vec<f32>,
    /// The query block, scaled: `[Bqp / 16][D][16]`.
    qp: Vec<f32>,
    /// Scores, then probabilities, transposed: `[ceil(Bk / 6) 6][Bqp]`.
    s: Vec<f32>,
    /// The output accumulator: `[Bqp][Dvp]`.
    o: Vec<f32>,
    /// Running max, running sum and rescale factor per query row.
    m: Vec<f32>,
    l: Vec<f32>,
    alpha: Vec<f32>,
}

impl Default for PackScratch {
    fn default() -> Self {
        PackScratch {
            head: (u64::MAX, 0),
            done: 0,
            kp: Vec::new(),
            vp: Vec::new(),
            rows: Vec::new(),
            qp: Vec::new(),
            s: Vec::new(),
            o: Vec::new(),
            m: Vec::new(),
            l: Vec::new(),
            alpha: Vec::new(),
        }
    }
}

/// Rows `range` of a `[.., width]` key or value tensor as f32: borrowed when f32,
/// else converted into `buf`.
pub(super) fn rows_f32<'b, T: Element>(
    direct: Option<&'b [f32]>,
    half: super::tile::HalfSrc<'_>,
    all: &[T],
    range: std::ops::Range<usize>,
    buf: &'b mut Vec<f32>,
) -> &'b [f32] {
    if let Some(d) = direct {
        return &d[range];
    }
    use half::slice::HalfFloatSliceExt;
    buf.clear();
    buf.resize(range.len(), 0.0);
    match half {
        super::tile::HalfSrc::F16(s) => s[range].convert_to_f32_slice(buf),
        super::tile::HalfSrc::BF16(s) => s[range].convert_to_f32_slice(buf),
        super::tile::HalfSrc::None => {
            for (d, x) in buf.iter_mut().zip(&all[range]) {
                *d = x.to_f32();
            }
        }
    }
    buf
}

/// Packed keys and values above this many floats (16 MiB) are freed when the thread's
/// next call starts rather than reused by it (a thread keeps at most one head of a
/// call's packed keys and values between calls).
pub(super) const KEEP_FLOATS: usize = 1 << 22;

thread_local! {
    static SCRATCH: std::cell::RefCell<PackScratch> =
        std::cell::RefCell::new(PackScratch::default());
}

/// `dst[(g * w + p) * R + r] = src[(g * R + r) * w + p] * scale` for the `n` rows of
/// `src` (`[n, w]`): rows in panels of `R`, each panel stored column by column
/// (`[w][R]`). Rows of a last partial panel past `n` are left as they are.
pub(super) fn pack_panels<const R: usize>(
    src: &[f32],
    n: usize,
    w: usize,
    scale: f32,
    dst: &mut [f32],
) {
    for (g, rows) in src[..n * w].chunks(R * w).enumerate() {
        let panel = &mut dst[g * w * R..(g + 1) * w * R];
        let full = rows.len() == R * w;
        if full {
            let rows: [&[f32]; R] = std::array::from_fn(|r| &rows[r * w..(r + 1) * w]);
            for (p, out) in panel.chunks_exact_mut(R).enumerate() {
                for (y, row) in out.iter_mut().zip(&rows) {
                    *y = row[p] * scale;
                }
            }
        } else {
            for (r, row) in rows.chunks_exact(w).enumerate() {
                for (out, &x) in panel.chunks_exact_mut(R).zip(row) {
                    out[r] = x * scale;
                }
            }
        }
    }
}

/// Packs keys and values of head `kvh` up to key `kend` (rounded up to a panel) into
/// `ps`, starting over when `ps` holds another head or call.
fn ensure_packed<T: Element>(prob: &Problem<'_, T>, ps: &mut PackScratch, kvh: usize, kend: usize) {
    let (skv, d, dv) = (prob.dims.skv, prob.dims.d, prob.dims.dv);
    let dvp = dv.div_ceil(NR) * NR;
    if ps.head != (prob.call, kvh) {
        ps.head = (prob.call, kvh);
        ps.done = 0;
        reset(&mut ps.kp, skv.div_ceil(MR) * MR * d, 0.0);
        reset(&mut ps.vp, dvp * skv, 0.0);
    }
    if kend <= ps.done {
        return;
    }
    let (j0, j1) = (ps.done, (kend.div_ceil(MR) * MR).min(skv));
    let k_off = kvh * prob.dims.kv_pitch * d;
    let krows = rows_f32(
        prob.k_f32,
        prob.k_half,
        prob.k,
        k_off + j0 * d..k_off + j1 * d,
        &mut ps.rows,
    );
    // `j0` is a multiple of 6 (or all keys are packed).
    pack_panels::<MR>(krows, j1 - j0, d, 1.0, &mut ps.kp[j0 * d..]);
    let v_off = kvh * prob.dims.kv_pitch * dv;
    let vrows = rows_f32(
        prob.v_f32,
        prob.v_half,
        prob.v,
        v_off + j0 * dv..v_off + j1 * dv,
        &mut ps.rows,
    );
    for (jj, row) in vrows.chunks_exact(dv.max(1)).enumerate().take(j1 - j0) {
        let j = j0 + jj;
        for (cp, chunk) in row.chunks(NR).enumerate() {
            let at = (cp * skv + j) * NR;
            ps.vp[at..at + chunk.len()].copy_from_slice(chunk);
        }
    }
    ps.done = j1;
}

/// One work item (query rows `qb * Bq ..` of batch-head `bh`, written to `out`) on the
/// packed path. The same steps as `super::process_item`; `D` and `Dv` are not 0 and
/// `Skv > 0`.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
pub(super) unsafe fn item<T: Element>(prob: &Problem<'_, T>, bh: usize, qb: usize, out: &mut [T]) {
    SCRATCH.with(|cell| {
        // A work item never calls another, so the scratch is never borrowed twice; the
        // fallback keeps that an allocation rather than a panic.
        match cell.try_borrow_mut() {
            Ok(mut ps) => {
                if ps.head.0 != prob.call && ps.kp.capacity() + ps.vp.capacity() > KEEP_FLOATS {
                    *ps = PackScratch::default();
                }
                // SAFETY: this function's contract.
                unsafe { item_in(prob, &mut ps, bh, qb, out) };
            }
            // SAFETY: this function's contract.
            Err(_) => unsafe { item_in(prob, &mut PackScratch::default(), bh, qb, out) },
        }
    })
}

/// [`item`] with the scratch `ps`.
///
/// # Safety
/// As [`item`].
unsafe fn item_in<T: Element>(
    prob: &Problem<'_, T>,
    ps: &mut PackScratch,
    bh: usize,
    qb: usize,
    out: &mut [T],
) {
    let dims = prob.dims;
    let (hq, hkv, sq, skv, d, dv) = (dims.hq, dims.hkv, dims.sq, dims.skv, dims.d, dims.dv);
    let i0 = qb * prob.block_q;
    let nq = out.len() / dv;
    let bqp = nq.div_ceil(NR) * NR;
    let dvp = dv.div_ceil(NR) * NR;
    // Key blocks start on a key panel.
    let bk = prob.block_k.div_ceil(MR) * MR;
    let group = hq / hkv;
    let kvh = (bh / hq) * hkv + (bh % hq) / group;
    let kend = if prob.causal { skv.min(i0 + nq) } else { skv };
    ensure_packed(prob, ps, kvh, kend);
    let scale = prob.scale.to_f64() as f32;
    let crate::SdpaLoopOrder { q_outer, v_outer } = prob.loop_order;

    let PackScratch {
        kp,
        vp,
        rows,
        qp,
        s,
        o,
        m,
        l,
        alpha,
        ..
    } = ps;
    reset(qp, d * bqp, 0.0);
    let q_range = (bh * sq + i0) * d..(bh * sq + i0 + nq) * d;
    let qrows = rows_f32(prob.q_f32, prob.q_half, prob.q, q_range, rows);
    pack_panels::<NR>(qrows, nq, d, scale, qp);
    reset(m, bqp, f32::NEG_INFINITY);
    reset(l, bqp, 0.0);
    reset(alpha, bqp, 0.0);
    reset(o, bqp * dvp, 0.0);
    // Every score read is written first (whole key panels, all `bqp` columns).
    if s.len() < bk * bqp {
        s.resize(bk * bqp, 0.0);
    }

    let mut j0 = 0;
    while j0 < kend {
        let nk = bk.min(kend - j0);
        let npan = nk.div_ceil(MR);
        let kblock = &kp[j0 * d..(j0 + npan * MR) * d];
        let on_diagonal = prob.causal && j0 + nk > i0 + 1;
        if prob.fuse_softmax && prob.mask.is_none() && !on_diagonal {
            // Nothing to hide in this block: the softmax step runs on each 16-column
            // strip of scores as it is computed (max from the registers, exp while
            // the strip is in L1).
            // SAFETY: the CPU has AVX2 and FMA (this function's contract); the slices'
            // lengths are asserted inside.
            unsafe { avx2::scores_softmax_packed(nk, d, kblock, qp, bqp, s, bqp, m, l, alpha) };
        } else {
            // SAFETY: the CPU has AVX2 and FMA (this function's contract); the slices'
            // lengths are asserted inside.
            unsafe { avx2::scores_packed(npan, d, kblock, qp, bqp, s, bqp, q_outer) };
            if let Some(mask) = prob.mask {
                apply_mask(mask, bh, i0, nq, j0, nk, s, bqp, |x: T| x.to_f32());
            }
            if on_diagonal {
                for (jj, row) in s.chunks_exact_mut(bqp).take(nk).enumerate() {
                    let hide = (j0 + jj).saturating_sub(i0).min(nq);
                    row[..hide].fill(f32::NEG_INFINITY);
                }
            }
            // SAFETY: as above.
            unsafe { avx2::softmax_update(s, bqp, nk, m, l, alpha) };
        }
        // SAFETY: as above.
        unsafe {
            avx2::values_packed(
                nk,
                nq,
                s,
                bqp,
                &vp[j0 * NR..],
                skv,
                dvp / NR,
                alpha,
                o,
                dvp,
                v_outer,
            )
        };
        j0 += nk;
    }

    store_rows(prob.fully_masked, o, dvp, l, out, dv);
}

/// Writes the output rows (`out`: `[rows, dv]`) from the accumulator `o` (rows of
/// stride `ldo`) divided by the row sums `l`; a row whose sum is 0 (every key masked)
/// gets `fully_masked`'s fill.
pub(super) fn store_rows<T: Element>(
    fully_masked: FullyMaskedRows,
    o: &[f32],
    ldo: usize,
    l: &[f32],
    out: &mut [T],
    dv: usize,
) {
    let masked_fill = match fully_masked {
        FullyMaskedRows::Zero => T::from_f32(0.0),
        FullyMaskedRows::Nan => T::from_f32(f32::NAN),
    };
    for ((dst, acc), &li) in out
        .chunks_exact_mut(dv)
        .zip(o.chunks_exact(ldo))
        .zip(l.iter())
    {
        if li == 0.0 {
            dst.fill(masked_fill);
        } else {
            let inv = 1.0 / li;
            for (y, &x) in dst.iter_mut().zip(acc) {
                *y = T::from_f32(x * inv);
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::select::{pick_kernel, Path};
    use super::super::{sdpa_with, FullyMaskedRows, SdpaKernel, SdpaOptions};
    use crate::cpu::sdpa_reference;
    use crate::cpu::Isa;
    use crate::{DType, Tensor};

    /// Deterministic pseudo-random values in `[lo, hi)` (xorshift).
    pub(in super::super) fn values(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                lo + (hi - lo) * ((x >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect()
    }

    /// A tensor of [`values`].
    pub(in super::super) fn tensor(
        dtype: DType,
        shape: &[usize],
        seed: u64,
        lo: f64,
        hi: f64,
    ) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f64_slice(dtype, shape, &values(n, seed, lo, hi)).unwrap()
    }

    /// The grid tests' operands: `q` `[b, hq, sq, d]` and `k` in `[-2, 2)`, `v`
    /// `[b, hkv, skv, dv]` in `[-1, 1)`, and mask kind `mask` (see [`test_mask`]), all
    /// drawn from `seed`.
    pub(in super::super) fn grid_inputs(
        dtype: DType,
        seed: u64,
        [b, hq, hkv]: [usize; 3],
        [sq, skv, d, dv]: [usize; 4],
        mask: u32,
    ) -> (Tensor, Tensor, Tensor, Option<Tensor>) {
        let q = tensor(dtype, &[b, hq, sq, d], seed, -2.0, 2.0);
        let k = tensor(dtype, &[b, hkv, skv, d], seed + 1000, -2.0, 2.0);
        let v = tensor(dtype, &[b, hkv, skv, dv], seed + 2000, -1.0, 1.0);
        (q, k, v, test_mask(mask, dtype, [b, hq, sq, skv], seed))
    }

    /// `got` within `(atol x max |want|, rtol)` of `want` element by element, NaN where
    /// `want` is NaN.
    pub(in super::super) fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
        assert_eq!(got.shape(), want.shape(), "{what}: shape");
        let (atol, rtol) = match want.dtype() {
            DType::F32 => (1e-5, 1e-4),
            DType::F16 => (2e-3, 2e-3),
            _ => (2e-2, 2e-2),
        };
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        let scale = w
            .iter()
            .filter(|x| !x.is_nan())
            .fold(1.0f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            if b.is_nan() {
                assert!(a.is_nan(), "{what}: element {i}: got {a}, want NaN");
            } else {
                let err = (a - b).abs();
                assert!(
                    err <= atol * scale + rtol * b.abs(),
                    "{what}: element {i}: got {a}, want {b} (err {err:e})"
                );
            }
        }
    }

    /// The test masks: 0 none; 1 bool `[Sq, Skv]`, about a third masked, rows 0 and
    /// `Sq / 2` fully masked; 2 additive `[B, Hq, Sq, Skv]` with `-inf` and -1e9, row 1
    /// finite-min (`f32::MIN`) everywhere.
    pub(in super::super) fn test_mask(
        kind: u32,
        dtype: DType,
        [b, hq, sq, skv]: [usize; 4],
        seed: u64,
    ) -> Option<Tensor> {
        match kind {
            1 => {
                let keep: Vec<bool> = values(sq * skv, seed + 3000, 0.0, 1.0)
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| x > 0.33 && i / skv != 0 && i / skv != sq / 2)
                    .collect();
                Some(Tensor::from_vec(vec![sq, skv], keep).unwrap())
            }
            2 => {
                let shape = [b, hq, sq, skv];
                let vals: Vec<f64> = values(b * hq * sq * skv, seed + 4000, -3.0, 1.0)
                    .into_iter()
                    .enumerate()
                    .map(|(i, x)| match i % 7 {
                        // Row 1 of each head: finite-min everywhere (the
                        // exporters' mask), uniform weights.
                        _ if (i / skv) % sq == 1 => f32::MIN as f64,
                        0 if i % skv != 0 => f64::NEG_INFINITY,
                        3 => -1e9,
                        _ => x,
                    })
                    .collect();
                Some(Tensor::from_f64_slice(dtype, &shape, &vals).unwrap())
            }
            _ => None,
        }
    }

    /// Whether the packed paths run: the CPU has AVX2+FMA (their least); prints the
    /// skip where not.
    fn has_avx2_fma() -> bool {
        let has = crate::cpu::Isa::Avx2Fma.is_available();
        if !has {
            println!("SKIPPED: the packed SDPA paths need AVX2 and FMA");
        }
        has
    }

    /// The packed path against the reference and against the unpacked path: sizes 1,
    /// odd sizes, sizes around the 6-key and 16-column panels and the 96 blocks, value
    /// widths that are not a multiple of 16, grouped heads (heads sharing a packed
    /// key/value head), causal, bool masks with fully masked rows, additive masks,
    /// f16 and bf16; the packed path both with the softmax step fused into the score
    /// pass (key blocks with no mask and off the causal diagonal) and as a pass of its
    /// own; the best packed path (AVX-512 where the CPU has it: f32 micro-tiles, bf16
    /// dot products for bf16) and the AVX2 one.
    #[test]
    fn packed_matches_reference_and_unpacked() {
        if !has_avx2_fma() {
            return;
        }
        let avx512 = super::super::avx512::available();
        if !avx512 {
            println!("SKIPPED: the AVX-512 packed SDPA paths need AVX-512 F, BW and BF16 (tested the AVX2 one as the best)");
        }
        let mut seed = 1;
        for (sq, skv) in [
            (1, 1),
            (1, 7),
            (7, 1),
            (5, 6),
            (6, 13),
            (17, 95),
            (31, 97),
            (96, 96),
            (97, 193),
            (200, 5),
            (130, 300),
        ] {
            for (d, dv) in [(1, 1), (7, 5), (16, 16), (24, 40), (64, 64), (128, 17)] {
                for (dtype, causal, mask) in [
                    (DType::F32, false, 0),
                    (DType::F32, true, 0),
                    (DType::F32, false, 1),
                    (DType::F32, false, 2),
                    (DType::F16, true, 0),
                    (DType::BF16, false, 0),
                    (DType::BF16, false, 1),
                ] {
                    seed += 1;
                    let (b, hq, hkv) = if seed % 2 == 0 { (1, 4, 2) } else { (2, 2, 2) };
                    let (q, k, v, m) =
                        grid_inputs(dtype, seed, [b, hq, hkv], [sq, skv, d, dv], mask);
                    let opts = SdpaOptions {
                        is_causal: causal,
                        scale: None,
                        enable_gqa: hq != hkv,
                        fully_masked_rows: FullyMaskedRows::Nan,
                    };
                    let what = format!("{dtype:?} sq {sq} skv {skv} d {d} dv {dv} causal {causal} mask {mask} hq {hq} hkv {hkv}");
                    let best = pick_kernel(dtype, Path::Best, d, Isa::best());
                    let want_kernel = match (avx512, dtype) {
                        (false, _) => SdpaKernel::PackedAvx2,
                        (true, DType::BF16) => SdpaKernel::PackedAvx512Bf16,
                        (true, _) => SdpaKernel::PackedAvx512,
                    };
                    assert_eq!(best, want_kernel, "{what}");
                    assert_eq!(
                        pick_kernel(dtype, Path::PackedAvx2, d, Isa::best()),
                        SdpaKernel::PackedAvx2
                    );
                    let packed = sdpa_with(&q, &k, &v, m.as_ref(), &opts, Path::Best).unwrap();
                    let unpacked =
                        sdpa_with(&q, &k, &v, m.as_ref(), &opts, Path::Unpacked).unwrap();
                    let want =
                        sdpa_reference(&q, &k, &v, m.as_ref(), causal, None, hq != hkv).unwrap();
                    let separate =
                        sdpa_with(&q, &k, &v, m.as_ref(), &opts, Path::SeparateSoftmax).unwrap();
                    assert_close(&packed, &want, &what);
                    assert_close(&packed, &unpacked, &format!("{what} (vs unpacked)"));
                    assert_close(&separate, &want, &format!("{what} (separate softmax)"));
                    for path in [Path::PackedAvx2, Path::PackedAvx2Separate] {
                        let got = sdpa_with(&q, &k, &v, m.as_ref(), &opts, path).unwrap();
                        assert_close(&got, &want, &format!("{what} ({path:?})"));
                    }
                }
            }
        }
    }

    /// Causal and a mask together (the reference takes one or the other), several
    /// query blocks: packed against unpacked.
    #[test]
    fn packed_causal_with_mask_matches_unpacked() {
        if !has_avx2_fma() {
            return;
        }
        let (sq, skv, d) = (150, 211, 40);
        let q = tensor(DType::F32, &[1, 3, sq, d], 7, -2.0, 2.0);
        let k = tensor(DType::F32, &[1, 3, skv, d], 8, -2.0, 2.0);
        let v = tensor(DType::F32, &[1, 3, skv, d], 9, -1.0, 1.0);
        let keep: Vec<bool> = values(skv, 10, 0.0, 1.0).iter().map(|&x| x > 0.2).collect();
        let m = Tensor::from_vec(vec![1, 1, 1, skv], keep).unwrap();
        let opts = SdpaOptions {
            is_causal: true,
            fully_masked_rows: FullyMaskedRows::Zero,
            ..Default::default()
        };
        let unpacked = sdpa_with(&q, &k, &v, Some(&m), &opts, Path::Unpacked).unwrap();
        for path in [Path::Best, Path::PackedAvx2] {
            let packed = sdpa_with(&q, &k, &v, Some(&m), &opts, path).unwrap();
            assert_close(&packed, &unpacked, &format!("causal + mask ({path:?})"));
        }
    }

    /// The per-thread packed keys belong to one call: a second call with other keys
    /// and values of the same shape (same heads) must not reuse them (each packed
    /// path, f32 and bf16).
    #[test]
    fn packed_scratch_is_not_reused_across_calls() {
        if !has_avx2_fma() {
            return;
        }
        for dtype in [DType::F32, DType::BF16] {
            let q = tensor(dtype, &[1, 2, 40, 16], 1, -1.0, 1.0);
            let opts = SdpaOptions::default();
            for path in [Path::Best, Path::PackedAvx2] {
                for seed in [2, 3, 4] {
                    let k = tensor(dtype, &[1, 2, 50, 16], seed, -2.0, 2.0);
                    let v = tensor(dtype, &[1, 2, 50, 16], seed + 10, -1.0, 1.0);
                    let got = sdpa_with(&q, &k, &v, None, &opts, path).unwrap();
                    let want = sdpa_reference(&q, &k, &v, None, false, None, false).unwrap();
                    let what = format!("{dtype:?} {path:?} call with seed {seed}");
                    assert_close(&got, &want, &what);
                }
            }
        }
    }
}
