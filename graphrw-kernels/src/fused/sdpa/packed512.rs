//! The packed path (see `packed.rs`) on AVX-512, with the micro-kernels of
//! `avx512/`: `8 x 48` score and value micro-tiles in f32 (f32 and f16 inputs), and
//! for bf16 inputs both products on AVX-512 BF16 dot products (`vdpbf16ps`, two bf16
//! products per f32 lane, f32 sums), the online softmax kept in f32 and the
//! probabilities rounded to bf16 for the value product, as PyTorch's CPU kernel does
//! (or, with `SdpaTuning::bf16_dot_products` off, bf16 converted to f32 as f16 is: a
//! core whose `vdpbf16ps` runs at half the f32 FMA's flop rate does more that way).
//!
//! Layouts (packed once per key/value head and thread, as far as the items need):
//! - f32: keys `[Skv/8][D][8]`, values `[Dv/16][Skv][16]`, the query block
//!   `[Bq/16][D][16]` scaled;
//! - bf16 (the input bits, no conversion): keys `[Skv/8][D/2][8][2]`, values
//!   `[Dv/16][Skv/2][16][2]`, queries `[Bq/16][D/2][16][2]` (not scaled: the score
//!   micro-tile multiplies its f32 sums by the scale, so no second rounding), and
//!   the probabilities of each key block `[Bk/2][Bq][2]`. Pairs run along the
//!   reduction dimension (`D` for the scores, the keys for the values), zero-padded.
//!
//! The mask, the causal triangle and the separate softmax step work on the f32 score
//! tile as on the AVX2 path (`avx2::softmax_update`); the bf16 path then converts the
//! probabilities to pairs (`avx512::probs_to_pairs`).

use half::slice::HalfFloatSliceExt;

use crate::Element;

use super::avx512::{self, Operands, ValueOperands, MR, NR};
use super::packed::{pack_panels, rows_f32, store_rows, KEEP_FLOATS};
use super::tile::HalfSrc;
use super::unpacked::apply_mask;
use super::{avx2, reset, Problem};

/// Per-thread buffers of the AVX-512 packed path, reused across work items and calls
/// (as `packed::PackScratch`).
#[derive(Default)]
struct Scratch512 {
    /// The call and key/value head held in the packed keys and values.
    head: Option<(u64, usize)>,
    /// Keys of that head packed so far (a multiple of 8, or all of them).
    done: usize,
    /// f32 keys `[Skv/8][D][8]`, values `[Dvp/16][Skv][16]`, queries `[Bqp/16][D][16]`.
    kp: Vec<f32>,
    vp: Vec<f32>,
    qp: Vec<f32>,
    /// bf16 keys `[Skv/8][D2][8][2]`, values `[Dvp/16][Skv2][16][2]`, queries
    /// `[Bqp/16][D2][16][2]`, probabilities `[Bk/2][Bqp][2]` (bits).
    kh: Vec<u16>,
    vh: Vec<u16>,
    qh: Vec<u16>,
    ph: Vec<u16>,
    /// Rows converted to f32 before packing (f16 keys, values, queries).
    rows: Vec<f32>,
    /// Scores (then, on the f32 path, probabilities), transposed: `[Bk][Bqp]`.
    s: Vec<f32>,
    /// The output accumulator `[Bqp][Dvp]`; running max, sum, rescale per query row.
    o: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    alpha: Vec<f32>,
}

impl Scratch512 {
    /// Floats (and pairs of bf16) held for packed keys and values.
    fn held(&self) -> usize {
        self.kp.capacity() + self.vp.capacity() + (self.kh.capacity() + self.vh.capacity()) / 2
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch512> = std::cell::RefCell::new(Scratch512::default());
}

/// `q`, `k`, `v` as bf16 bits when they are bf16 (the bf16 dot-product path).
type Bf16Src<'a> = (&'a [u16], &'a [u16], &'a [u16]);

/// The problem's `q`, `k` and `v` as bf16 bits, if they are bf16.
fn bf16_sources<'a, T: Element>(prob: &Problem<'a, T>) -> Option<Bf16Src<'a>> {
    match (prob.q_half, prob.k_half, prob.v_half) {
        (HalfSrc::BF16(q), HalfSrc::BF16(k), HalfSrc::BF16(v)) => Some((
            q.reinterpret_cast(),
            k.reinterpret_cast(),
            v.reinterpret_cast(),
        )),
        _ => None,
    }
}

/// One work item (query rows `qb * Bq ..` of batch-head `bh`, written to `out`) on the
/// AVX-512 packed path: bf16 dot products when the inputs are bf16 (and
/// `Problem::bf16_dot`), f32 otherwise.
/// `D` and `Dv` are not 0 and `Skv > 0`.
///
/// # Safety
/// The CPU must have AVX2, FMA and the features of `avx512::available`.
pub(super) unsafe fn item<T: Element>(prob: &Problem<'_, T>, bh: usize, qb: usize, out: &mut [T]) {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut ps) => {
            if ps.head.is_some_and(|h| h.0 != prob.call) && ps.held() > KEEP_FLOATS {
                *ps = Scratch512::default();
            }
            // SAFETY: this function's contract.
            unsafe { item_in(prob, &mut ps, bh, qb, out) };
        }
        // A work item never calls another; the fallback keeps that an allocation.
        // SAFETY: this function's contract.
        Err(_) => unsafe { item_in(prob, &mut Scratch512::default(), bh, qb, out) },
    })
}

/// Packs keys and values of head `kvh` up to key `kend` (rounded up to a panel of 8)
/// into `ps`, starting over when `ps` holds another head or call.
///
/// # Safety
/// The CPU must have the features of `avx512::available`.
unsafe fn ensure_packed<T: Element>(
    prob: &Problem<'_, T>,
    bf: Option<Bf16Src<'_>>,
    ps: &mut Scratch512,
    kvh: usize,
    kend: usize,
) {
    let (skv, d, dv) = (prob.dims.skv, prob.dims.d, prob.dims.dv);
    let dvp = dv.div_ceil(NR) * NR;
    let (d2, skv2) = (d.div_ceil(2), skv.div_ceil(2));
    if ps.head != Some((prob.call, kvh)) {
        ps.head = Some((prob.call, kvh));
        ps.done = 0;
        let kpanels = skv.div_ceil(MR) * MR;
        if bf.is_some() {
            reset(&mut ps.kh, kpanels * d2 * 2, 0);
            reset(&mut ps.vh, dvp * skv2 * 2, 0);
        } else {
            reset(&mut ps.kp, kpanels * d, 0.0);
            reset(&mut ps.vp, dvp * skv, 0.0);
        }
    }
    if kend <= ps.done {
        return;
    }
    // `j0` is a multiple of 8 (or all keys are packed).
    let (j0, j1) = (ps.done, (kend.div_ceil(MR) * MR).min(skv));
    let pitch = prob.dims.kv_pitch;
    let (k_off, v_off) = (kvh * pitch * d, kvh * pitch * dv);
    match bf {
        Some((_, k, v)) => {
            let krows = &k[k_off + j0 * d..k_off + j1 * d];
            // SAFETY: the CPU has the AVX-512 features (this function's contract); `j0` is
            // a multiple of 8 (a panel boundary) and the lengths are asserted inside.
            unsafe { avx512::pack_row_pairs::<MR>(krows, j1 - j0, d, &mut ps.kh[j0 * d2 * 2..]) };
            let vrows = &v[v_off + j0 * dv..v_off + j1 * dv];
            // SAFETY: the CPU has the AVX-512 features (this function's contract); `j0` is
            // even (a multiple of 8) and the lengths are asserted inside.
            unsafe { avx512::pack_value_pairs(vrows, j1 - j0, dv, j0, skv2, &mut ps.vh) };
        }
        None => {
            let krows = rows_f32(
                prob.k_f32,
                prob.k_half,
                prob.k,
                k_off + j0 * d..k_off + j1 * d,
                &mut ps.rows,
            );
            pack_panels::<MR>(krows, j1 - j0, d, 1.0, &mut ps.kp[j0 * d..]);
            let vrows = rows_f32(
                prob.v_f32,
                prob.v_half,
                prob.v,
                v_off + j0 * dv..v_off + j1 * dv,
                &mut ps.rows,
            );
            for (jj, row) in vrows.chunks_exact(dv.max(1)).enumerate() {
                let j = j0 + jj;
                for (cp, chunk) in row.chunks(NR).enumerate() {
                    let at = (cp * skv + j) * NR;
                    ps.vp[at..at + chunk.len()].copy_from_slice(chunk);
                }
            }
        }
    }
    ps.done = j1;
}

/// [`item`] with the scratch `ps`.
///
/// # Safety
/// As [`item`].
unsafe fn item_in<T: Element>(
    prob: &Problem<'_, T>,
    ps: &mut Scratch512,
    bh: usize,
    qb: usize,
    out: &mut [T],
) {
    let dims = prob.dims;
    let (hq, hkv, sq, skv, d, dv) = (dims.hq, dims.hkv, dims.sq, dims.skv, dims.d, dims.dv);
    let bf = bf16_sources(prob).filter(|_| prob.bf16_dot);
    let i0 = qb * prob.block_q;
    let nq = out.len() / dv;
    let bqp = nq.div_ceil(NR) * NR;
    let dvp = dv.div_ceil(NR) * NR;
    let (d2, skv2) = (d.div_ceil(2), skv.div_ceil(2));
    // Key blocks start on a key panel (so on a key pair).
    let bk = prob.block_k.div_ceil(MR) * MR;
    let group = hq / hkv;
    let kvh = (bh / hq) * hkv + (bh % hq) / group;
    let kend = if prob.causal { skv.min(i0 + nq) } else { skv };
    // SAFETY: this function's contract.
    unsafe { ensure_packed(prob, bf, ps, kvh, kend) };
    let scale = prob.scale.to_f64() as f32;

    let Scratch512 {
        kp,
        vp,
        qp,
        kh,
        vh,
        qh,
        ph,
        rows,
        s,
        o,
        m,
        l,
        alpha,
        ..
    } = ps;
    let q_range = (bh * sq + i0) * d..(bh * sq + i0 + nq) * d;
    match bf {
        Some((q, _, _)) => {
            reset(qh, bqp * d2 * 2, 0);
            // SAFETY: the CPU has the AVX-512 features (this function's contract); the
            // lengths are asserted inside.
            unsafe { avx512::pack_row_pairs::<NR>(&q[q_range], nq, d, qh) };
            if ph.len() < bk * bqp {
                ph.resize(bk * bqp, 0);
            }
        }
        None => {
            reset(qp, d * bqp, 0.0);
            let qrows = rows_f32(prob.q_f32, prob.q_half, prob.q, q_range, rows);
            pack_panels::<NR>(qrows, nq, d, scale, qp);
        }
    }
    let ops = match bf {
        Some(_) => Operands::Bf16 {
            kp: kh,
            qp: qh,
            d2,
            scale,
        },
        None => Operands::F32 { kp, qp, d },
    };
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
        let ops = match ops {
            Operands::F32 { kp, qp, d } => Operands::F32 {
                kp: &kp[j0 * d..],
                qp,
                d,
            },
            Operands::Bf16 { kp, qp, d2, scale } => Operands::Bf16 {
                kp: &kp[j0 * d2 * 2..],
                qp,
                d2,
                scale,
            },
        };
        let on_diagonal = prob.causal && j0 + nk > i0 + 1;
        if prob.fuse_softmax && prob.mask.is_none() && !on_diagonal {
            let p_out = bf.map(|_| &mut ph[..]);
            // SAFETY: the CPU has the AVX-512 features (this function's contract); the
            // slices' lengths are asserted inside.
            unsafe {
                avx512::scores_softmax(ops, prob.in_register, nk, bqp, s, bqp, p_out, m, l, alpha)
            };
        } else {
            // SAFETY: as above.
            unsafe { avx512::scores(ops, prob.in_register, npan, bqp, s, bqp) };
            if let Some(mask) = prob.mask {
                apply_mask(mask, bh, i0, nq, j0, nk, s, bqp, |x: T| x.to_f32());
            }
            if on_diagonal {
                for (jj, row) in s.chunks_exact_mut(bqp).take(nk).enumerate() {
                    let hide = (j0 + jj).saturating_sub(i0).min(nq);
                    row[..hide].fill(f32::NEG_INFINITY);
                }
            }
            // SAFETY: the CPU has AVX2 and FMA (this function's contract); the lengths are
            // asserted inside.
            unsafe { avx2::softmax_update(s, bqp, nk, m, l, alpha) };
            if bf.is_some() {
                // SAFETY: the CPU has the AVX-512 features (this function's contract); the
                // lengths are asserted inside.
                unsafe { avx512::probs_to_pairs(nk, bqp, s, bqp, ph) };
            }
        }
        let vops = match bf {
            Some(_) => ValueOperands::Bf16 {
                p: ph,
                vp: &vh[(j0 / 2) * NR * 2..],
            },
            None => ValueOperands::F32 {
                p: s,
                vp: &vp[j0 * NR..],
            },
        };
        let pstride = if bf.is_some() { skv2 } else { skv };
        // SAFETY: the CPU has the AVX-512 features (this function's contract); the lengths
        // are asserted inside.
        unsafe {
            avx512::values(
                vops,
                prob.in_register,
                nk,
                bqp,
                bqp,
                pstride,
                dvp / NR,
                alpha,
                o,
                dvp,
            )
        };
        j0 += nk;
    }
    store_rows(prob.fully_masked, o, dvp, l, out, dv);
}

#[cfg(test)]
mod tests {
    use super::super::packed::tests::{assert_close, grid_inputs, tensor};
    use super::super::select::{pick_kernel, Path};
    use super::super::{avx512, sdpa_with, FullyMaskedRows, SdpaKernel, SdpaOptions};
    use crate::cpu::{sdpa_reference, Isa};
    use crate::{DType, Tensor};

    /// Whether the CPU lacks what the AVX-512 path needs (then the tests say so and
    /// return).
    fn skip() -> bool {
        let has = crate::cpu::Isa::Avx2Fma.is_available() && avx512::available();
        if !has {
            println!(
                "SKIPPED: the AVX-512 SDPA kernel tests need AVX-512 F, BW, BF16 and AVX2+FMA"
            );
        }
        !has
    }

    /// The AVX-512 paths (f32 micro-tiles for f32 and f16, bf16 dot products for bf16),
    /// with the softmax step fused and separate, against the reference around their
    /// tile sizes: query counts around the 16-column panels and the 48-column strips,
    /// key counts around the 8-key panels, the key pairs and the 96-key blocks (odd
    /// last blocks: an odd last pair), depths and value widths that are odd (a padded
    /// pair) or not a multiple of 16, sizes 1, causal, bool masks with fully masked
    /// rows, additive masks with `-inf`, -1e9 and a finite-min row, grouped heads,
    /// both fully-masked fills; the path taken is asserted.
    #[test]
    fn avx512_matches_reference_at_tile_edges() {
        if skip() {
            return;
        }
        let mut seed = 500;
        for (sq, skv) in [
            (1, 1),
            (1, 2),
            (2, 9),
            (8, 8),
            (15, 17),
            (16, 16),
            (17, 47),
            (48, 48),
            (49, 97),
            (95, 96),
            (97, 103),
            (150, 193),
        ] {
            for (d, dv) in [
                (256, 40),
                (1, 1),
                (2, 16),
                (3, 17),
                (31, 48),
                (64, 50),
                (128, 64),
                (80, 130),
            ] {
                for (dtype, causal, mask) in [
                    (DType::F32, false, 0),
                    (DType::F32, true, 0),
                    (DType::F32, false, 1),
                    (DType::F32, false, 2),
                    (DType::F16, false, 1),
                    (DType::BF16, false, 0),
                    (DType::BF16, true, 0),
                    (DType::BF16, false, 1),
                    (DType::BF16, false, 2),
                ] {
                    seed += 1;
                    let (b, hq, hkv) = if seed % 2 == 0 { (1, 4, 2) } else { (2, 1, 1) };
                    let (q, k, v, m) =
                        grid_inputs(dtype, seed, [b, hq, hkv], [sq, skv, d, dv], mask);
                    let zero = seed % 3 == 0;
                    let opts = SdpaOptions {
                        is_causal: causal,
                        scale: None,
                        enable_gqa: hq != hkv,
                        fully_masked_rows: if zero {
                            FullyMaskedRows::Zero
                        } else {
                            FullyMaskedRows::Nan
                        },
                    };
                    let want_kernel = if dtype == DType::BF16 {
                        SdpaKernel::PackedAvx512Bf16
                    } else {
                        SdpaKernel::PackedAvx512
                    };
                    assert_eq!(pick_kernel(dtype, Path::Best, d, Isa::best()), want_kernel);
                    let mut want =
                        sdpa_reference(&q, &k, &v, m.as_ref(), causal, None, hq != hkv).unwrap();
                    if zero {
                        let w: Vec<f64> = want
                            .to_f64_vec()
                            .into_iter()
                            .map(|x| if x.is_nan() { 0.0 } else { x })
                            .collect();
                        want = Tensor::from_f64_slice(dtype, want.shape(), &w).unwrap();
                    }
                    let what = format!(
                        "{dtype:?} sq {sq} skv {skv} d {d} dv {dv} causal {causal} mask {mask} \
                         hq {hq} hkv {hkv} zero {zero}"
                    );
                    for path in [Path::Best, Path::SeparateSoftmax] {
                        let got = sdpa_with(&q, &k, &v, m.as_ref(), &opts, path).unwrap();
                        assert_close(&got, &want, &format!("{what} ({path:?})"));
                    }
                }
            }
        }
    }

    /// A scale of its own, negative and large (the f32 path scales the queries, the bf16
    /// path its f32 sums), against the reference, f32 and bf16, over several blocks.
    #[test]
    fn avx512_explicit_scales() {
        if skip() {
            return;
        }
        let (sq, skv, d, dv) = (101, 203, 40, 24);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let q = tensor(dtype, &[1, 2, sq, d], 41, -1.0, 1.0);
            let k = tensor(dtype, &[1, 2, skv, d], 42, -1.0, 1.0);
            let v = tensor(dtype, &[1, 2, skv, dv], 43, -1.0, 1.0);
            for scale in [-0.3, 0.9, 3.0] {
                for causal in [false, true] {
                    let opts = SdpaOptions {
                        is_causal: causal,
                        scale: Some(scale),
                        ..Default::default()
                    };
                    let want =
                        sdpa_reference(&q, &k, &v, None, causal, Some(scale), false).unwrap();
                    let got = sdpa_with(&q, &k, &v, None, &opts, Path::Best).unwrap();
                    let what = format!("{dtype:?} scale {scale} causal {causal}");
                    assert_close(&got, &want, &what);
                }
            }
        }
    }

    /// Several query blocks and key blocks with the bf16 and f32 AVX-512 paths against
    /// the unpacked one, causal together with a padding mask (the reference takes one
    /// or the other), and a value that is not finite at a key no row of its query block
    /// sees (key 99 for the block of rows 96..99, whose causal end is odd: the bf16
    /// path's last key pair holds it, multiplied by a padded probability 0, and must
    /// not read it).
    #[test]
    fn avx512_causal_blocks_match_unpacked() {
        if skip() {
            return;
        }
        let (sq, skv, d, dv) = (99, 120, 5, 20);
        for dtype in [DType::F32, DType::BF16] {
            let q = tensor(dtype, &[1, 2, sq, d], 31, -2.0, 2.0);
            let k = tensor(dtype, &[1, 2, skv, d], 32, -2.0, 2.0);
            let mut vv = tensor(DType::F32, &[1, 2, skv, dv], 33, -1.0, 1.0).to_f64_vec();
            for h in 0..2 {
                for c in 0..dv {
                    vv[(h * skv + 99) * dv + c] = f64::INFINITY;
                }
            }
            let v = Tensor::from_f64_slice(dtype, &[1, 2, skv, dv], &vv).unwrap();
            let keep: Vec<bool> = (0..skv).map(|j| j % 5 != 3).collect();
            let pad = Tensor::from_vec(vec![1, 1, 1, skv], keep).unwrap();
            for mask in [None, Some(&pad)] {
                let opts = SdpaOptions {
                    is_causal: true,
                    fully_masked_rows: FullyMaskedRows::Zero,
                    ..Default::default()
                };
                let want = sdpa_with(&q, &k, &v, mask, &opts, Path::Unpacked).unwrap();
                assert!(want.to_f64_vec().iter().all(|x| x.is_finite()));
                for path in [Path::Best, Path::SeparateSoftmax] {
                    let got = sdpa_with(&q, &k, &v, mask, &opts, path).unwrap();
                    let what = format!("{dtype:?} mask {} {path:?}", mask.is_some());
                    assert_close(&got, &want, &what);
                }
            }
        }
    }
}
