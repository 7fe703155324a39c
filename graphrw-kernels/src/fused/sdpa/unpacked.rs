//! The work item that reads K and V in place (the unpacked path, and f64): the score
//! tile, the mask and causal triangle, the online softmax and `P V` on the portable
//! tiles of `tile.rs` (the AVX2 micro-tiles where the options allow), and the mask
//! applied to a transposed score tile, which the packed paths share.

use super::mask::{MaskData, MaskView};
use super::tile::{Acc, NR_Q};
use super::{reset, FullyMaskedRows, Problem, Scratch};
use crate::cpu::attention_ref::Dims;
use crate::{Element, Real};

/// One work item: query rows `qb * Bq ..` of batch-head `bh`, written to `out`
/// (`[rows, Dv]`).
#[inline(always)]
pub(super) fn process_item<T: Element, const FMA: bool>(
    prob: &Problem<'_, T>,
    scratch: &mut Scratch<T::Acc>,
    bh: usize,
    qb: usize,
    out: &mut [T],
) where
    T::Acc: Acc,
{
    let Dims {
        hq,
        hkv,
        sq,
        skv,
        d,
        dv,
        ..
    } = prob.dims;
    let neg_inf = <T::Acc as Real>::NEG_INFINITY;
    let zero = <T::Acc as Real>::ZERO;
    let i0 = qb * prob.block_q;
    let nq = out.len() / dv;
    let bqp = nq.div_ceil(NR_Q) * NR_Q;
    let Scratch {
        qt,
        s,
        o,
        m,
        l,
        alpha,
        mnew,
        kbuf,
        vbuf,
        ..
    } = scratch;

    // Pack the query block: transposed, scaled, padded with zero columns.
    reset(qt, d * bqp, zero);
    if d > 0 {
        let qrows = &prob.q[(bh * sq + i0) * d..(bh * sq + i0 + nq) * d];
        for (i, row) in qrows.chunks_exact(d).enumerate() {
            for (dst, &x) in qt[i..].iter_mut().step_by(bqp).zip(row) {
                *dst = x.to_acc() * prob.scale;
            }
        }
    }
    reset(m, bqp, neg_inf);
    reset(l, bqp, zero);
    reset(alpha, bqp, zero);
    reset(mnew, bqp, zero);
    reset(o, bqp * dv, zero);
    reset(s, prob.block_k * bqp, zero);

    let group = hq / hkv;
    let kvh = (bh / hq) * hkv + (bh % hq) / group;
    let pitch = prob.dims.kv_pitch;
    let (k_off, v_off) = (kvh * pitch * d, kvh * pitch * dv);
    // Causal: keys past the last query row of the block are all masked.
    let kend = if prob.causal { skv.min(i0 + nq) } else { skv };
    let mut j0 = 0;
    while j0 < kend {
        let nk = prob.block_k.min(kend - j0);
        let kb: &[T::Acc] = match prob.k_direct {
            Some(all) => &all[k_off + j0 * d..k_off + (j0 + nk) * d],
            None => {
                let range = k_off + j0 * d..k_off + (j0 + nk) * d;
                if !T::Acc::from_half(prob.k_half, range.clone(), kbuf) {
                    kbuf.clear();
                    kbuf.extend(prob.k[range].iter().map(|x| x.to_acc()));
                }
                kbuf
            }
        };

        // S^T = K Q^T on the tile.
        T::Acc::scores_tile::<FMA>(prob.micro, nk, d, kb, qt, bqp, s);

        if let Some(mask) = prob.mask {
            apply_mask(mask, bh, i0, nq, j0, nk, s, bqp, |x: T| x.to_acc());
        }
        if prob.causal && j0 + nk > i0 + 1 {
            // Key kj is hidden from the rows i with i0 + i < kj.
            for (jj, row) in s.chunks_exact_mut(bqp).take(nk).enumerate() {
                let hide = (j0 + jj).saturating_sub(i0).min(nq);
                row[..hide].fill(neg_inf);
            }
        }

        T::Acc::softmax_update::<FMA>(prob.micro, s, bqp, nk, m, l, alpha, mnew);

        let vb: &[T::Acc] = match prob.v_direct {
            Some(all) => &all[v_off + j0 * dv..v_off + (j0 + nk) * dv],
            None => {
                let range = v_off + j0 * dv..v_off + (j0 + nk) * dv;
                if !T::Acc::from_half(prob.v_half, range.clone(), vbuf) {
                    vbuf.clear();
                    vbuf.extend(prob.v[range].iter().map(|x| x.to_acc()));
                }
                vbuf
            }
        };
        // O = alpha * O + P V.
        T::Acc::values_tile::<FMA>(prob.micro, nk, bqp, dv, s, vb, alpha, o);
        j0 += nk;
    }

    // Normalise and store.
    let masked_fill = match prob.fully_masked {
        FullyMaskedRows::Zero => T::from_f64(0.0),
        FullyMaskedRows::Nan => T::from_f64(f64::NAN),
    };
    for ((dst, acc), &li) in out
        .chunks_exact_mut(dv)
        .zip(o.chunks_exact(dv))
        .zip(l.iter())
    {
        if li == zero {
            dst.fill(masked_fill);
        } else {
            let inv = <T::Acc as Real>::ONE / li;
            for (y, &x) in dst.iter_mut().zip(acc) {
                *y = T::from_acc(x * inv);
            }
        }
    }
}

/// Adds the mask to the transposed score tile `s[j][i]` (`-inf` for a false bool).
/// `conv` converts an additive mask's element to the score type.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn apply_mask<T: Element, F: Real>(
    mask: &MaskView<'_, T>,
    bh: usize,
    i0: usize,
    nq: usize,
    j0: usize,
    nk: usize,
    s: &mut [F],
    lds: usize,
    conv: impl Fn(T) -> F,
) {
    let (rs, cs) = (mask.row_stride, mask.col_stride);
    let base = mask.head_offsets[bh] + i0 * rs;
    let neg_inf = F::NEG_INFINITY;
    for (jj, row) in s.chunks_exact_mut(lds).take(nk).enumerate() {
        let at = base + (j0 + jj) * cs;
        let row = &mut row[..nq];
        match mask.data {
            MaskData::Bool(b) if rs == 0 => {
                if !b[at] {
                    row.fill(neg_inf);
                }
            }
            MaskData::Bool(b) => {
                for (x, &keep) in row.iter_mut().zip(b[at..].iter().step_by(rs)) {
                    if !keep {
                        *x = neg_inf;
                    }
                }
            }
            MaskData::Add(a) if rs == 0 => {
                let add = conv(a[at]);
                row.iter_mut().for_each(|x| *x += add);
            }
            MaskData::Add(a) => {
                for (x, &y) in row.iter_mut().zip(a[at..].iter().step_by(rs)) {
                    *x += conv(y);
                }
            }
        }
    }
}
