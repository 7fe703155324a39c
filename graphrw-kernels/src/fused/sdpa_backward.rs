//! Fused backward of scaled dot-product attention on the CPU (flash-attention style):
//! the probabilities are recomputed tile by tile from `q`, `k` and the row
//! log-sum-exp, never stored as an `Sq x Skv` matrix.
//!
//! Three passes, each parallel over independent outputs (no atomics):
//! 1. per query row: the log-sum-exp `lse` of its scores (online max and sum over key
//!    tiles) and `delta = rowsum(dout * out)`;
//! 2. per key tile of each kv head: for every query tile of its query heads,
//!    `P = exp(S - lse)`, `dV += P^T dO`, `dP = dO V^T`, `dS = P * (dP - delta)`,
//!    `dK += scale * dS^T Q` (grouped heads sum into their kv head here);
//! 3. per query tile: `dQ += scale * dS K` over the key tiles.
//!
//! The tiles are `[BLOCK_Q, BLOCK_K]` products on `matrixmultiply`'s GEMM; extra
//! memory is two score tiles and one product tile per work item plus `2 * Sq` floats
//! per head. Causal key tiles entirely above the diagonal are skipped.

use rayon::prelude::*;

use crate::cpu::attention_ref::{check, mask_layout, Dims, Mask};
use crate::cpu::matmul::Gemm;
use crate::macros::dispatch_float;
use crate::{DType, Element, KernelError, Real, Tensor};

use super::SdpaOptions;

/// Query rows per tile.
pub const BWD_BLOCK_Q: usize = 64;
/// Keys per tile.
pub const BWD_BLOCK_K: usize = 64;

/// The gradients of attention with respect to its three tensor operands.
#[derive(Debug, Clone)]
pub struct SdpaGrads {
    /// `[.., Hq, Sq, D]`.
    pub dq: Tensor,
    /// `[.., Hkv, Skv, D]`.
    pub dk: Tensor,
    /// `[.., Hkv, Skv, Dv]`.
    pub dv: Tensor,
}

/// The gradients of [`sdpa`](fn@super::sdpa) with respect to `q`, `k` and `v`, given its
/// output `out` and the output's cotangent `dout` (both `[.., Hq, Sq, Dv]`).
///
/// Shapes, dtypes, `mask` and `opts` are as for the forward kernel (a bool or additive
/// mask broadcasting to `[.., Hq, Sq, Skv]`, causal top-left, grouped heads with
/// `enable_gqa`). Rows whose keys are all masked have a constant output (zeros), so
/// they contribute no gradient. f16/bf16 are computed in f32, f64 in f64.
///
/// Errors, never panics, on mismatched ranks, shapes, head counts or dtypes.
pub fn sdpa_backward(
    dout: &Tensor,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
    mask: Option<&Tensor>,
    opts: &SdpaOptions,
) -> Result<SdpaGrads, KernelError> {
    let op = "sdpa_backward";
    let (dims, score_shape) = check(q, k, v, opts.enable_gqa)?;
    let mut out_shape = q.shape().to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = dims.dv;
    }
    for (what, t) in [("dout", dout), ("out", out)] {
        if t.dtype() != q.dtype() {
            return Err(KernelError::DTypeMismatch {
                op,
                lhs: q.dtype(),
                rhs: t.dtype(),
            });
        }
        if t.shape() != out_shape.as_slice() {
            return Err(KernelError::shape(
                op,
                format!(
                    "{what} is {:?}, expected the attention output's {out_shape:?}",
                    t.shape()
                ),
            ));
        }
    }
    let mask = match mask {
        Some(m) if m.dtype() != DType::Bool && m.dtype() != q.dtype() => {
            return Err(KernelError::DTypeMismatch {
                op,
                lhs: q.dtype(),
                rhs: m.dtype(),
            })
        }
        Some(m) => Some((m, mask_layout(m, &score_shape)?)),
        None => None,
    };
    let scale = opts.scale.unwrap_or(1.0 / (dims.d.max(1) as f64).sqrt());
    dispatch_float!(q.dtype(), op, |T| {
        let (dq, dk, dv) = grads::<T>(
            &dims,
            [dout, q, k, v, out],
            mask.as_ref(),
            opts.is_causal,
            scale,
        );
        Ok(SdpaGrads {
            dq: Tensor::from_data(q.shape().to_vec(), dq),
            dk: Tensor::from_data(k.shape().to_vec(), dk),
            dv: Tensor::from_data(v.shape().to_vec(), dv),
        })
    })
}

/// Everything the score tiles of one problem read.
struct Problem<'a, C> {
    dm: Dims,
    q: &'a [C],
    k: &'a [C],
    v: &'a [C],
    dout: &'a [C],
    mask: Option<(Vec<C>, &'a Mask)>,
    causal: bool,
    scale: C,
    group: usize,
}

impl<C: Gemm> Problem<'_, C> {
    /// The kv head that query head `bh` (batch * Hq + head) reads.
    fn kv_head(&self, bh: usize) -> usize {
        let (b, h) = (bh / self.dm.hq, bh % self.dm.hq);
        b * self.dm.hkv + h / self.group
    }

    /// `s = scale * Q[i0..i0+bq] K[j0..j0+bk]^T + mask` (`-inf` where masked), as a
    /// `[bq, bk]` row-major tile.
    fn scores(&self, bh: usize, i0: usize, bq: usize, j0: usize, bk: usize, s: &mut [C]) {
        let (d, skv) = (self.dm.d, self.dm.skv);
        let qh = &self.q[(bh * self.dm.sq + i0) * d..];
        let kh = &self.k[(self.kv_head(bh) * skv + j0) * d..];
        C::gemm(bq, d, bk, qh, d, 1, kh, 1, d, s);
        for (i, row) in s[..bq * bk].chunks_mut(bk).enumerate() {
            for (j, x) in row.iter_mut().enumerate() {
                *x *= self.scale;
                if self.causal && j0 + j > i0 + i {
                    *x = C::NEG_INFINITY;
                }
                if let Some((vals, layout)) = &self.mask {
                    *x += vals[layout.head_offsets[bh]
                        + (i0 + i) * layout.row_stride
                        + (j0 + j) * layout.col_stride];
                }
            }
        }
    }

    /// True when every key of the tile is above the causal diagonal for every query.
    fn skipped(&self, i0: usize, bq: usize, j0: usize) -> bool {
        self.causal && j0 > i0 + bq - 1
    }

    /// Turns a score tile into probabilities with the rows' log-sum-exp (0 for rows
    /// with every key masked, whose `lse` is `-inf`).
    fn probs(&self, s: &mut [C], bk: usize, lse: &[C]) {
        for (row, &l) in s.chunks_mut(bk).zip(lse) {
            for x in row.iter_mut() {
                *x = if l == C::NEG_INFINITY || *x == C::NEG_INFINITY {
                    C::ZERO
                } else {
                    (*x - l).exp()
                };
            }
        }
    }

    /// `dp = dO[i0..] V[j0..]^T` for the tile, then `ds = p * (dp - delta)` in place
    /// of `dp`.
    #[allow(clippy::too_many_arguments)]
    fn dscores(
        &self,
        bh: usize,
        i0: usize,
        bq: usize,
        j0: usize,
        bk: usize,
        p: &[C],
        delta: &[C],
        dp: &mut [C],
    ) {
        let (dv, skv) = (self.dm.dv, self.dm.skv);
        let doh = &self.dout[(bh * self.dm.sq + i0) * dv..];
        let vh = &self.v[(self.kv_head(bh) * skv + j0) * dv..];
        C::gemm(bq, dv, bk, doh, dv, 1, vh, 1, dv, dp);
        for ((drow, prow), &dl) in dp[..bq * bk].chunks_mut(bk).zip(p.chunks(bk)).zip(delta) {
            for (x, &pv) in drow.iter_mut().zip(prow) {
                *x = pv * (*x - dl);
            }
        }
    }
}

type Grads<T> = (Vec<T>, Vec<T>, Vec<T>);

fn grads<T: Element>(
    dm: &Dims,
    [dout, q, k, v, out]: [&Tensor; 5],
    mask: Option<&(&Tensor, Mask)>,
    causal: bool,
    scale: f64,
) -> Grads<T>
where
    T::Acc: Gemm,
{
    let (qa, ka, va) = (q.acc_cow::<T>(), k.acc_cow::<T>(), v.acc_cow::<T>());
    let (da, oa) = (dout.acc_cow::<T>(), out.acc_cow::<T>());
    let mask_vals = mask.map(|(m, layout)| {
        let vals: Vec<T::Acc> = if m.dtype() == DType::Bool {
            m.slice_of::<bool>()
                .iter()
                .map(|&b| {
                    if b {
                        T::Acc::ZERO
                    } else {
                        T::Acc::NEG_INFINITY
                    }
                })
                .collect()
        } else {
            m.to_f64_vec().into_iter().map(T::Acc::from_f64).collect()
        };
        (vals, layout)
    });
    let pr = Problem {
        dm: *dm,
        q: &qa,
        k: &ka,
        v: &va,
        dout: &da,
        mask: mask_vals,
        causal,
        scale: T::Acc::from_f64(scale),
        group: dm.hq.checked_div(dm.hkv).unwrap_or(1).max(1),
    };
    let zero = T::Acc::ZERO;
    let heads = dm.batch * dm.hq;
    let mut dq = vec![zero; heads * dm.sq * dm.d];
    let mut dk = vec![zero; dm.batch * dm.hkv * dm.skv * dm.d];
    let mut dv = vec![zero; dm.batch * dm.hkv * dm.skv * dm.dv];
    if dm.sq == 0 || dm.skv == 0 || dm.dv == 0 {
        return finish::<T>(dq, dk, dv);
    }
    // Pass 1: row log-sum-exp and delta.
    let mut lse = vec![zero; heads * dm.sq];
    let mut delta = vec![zero; heads * dm.sq];
    lse.par_chunks_mut(dm.sq)
        .zip(delta.par_chunks_mut(dm.sq))
        .enumerate()
        .for_each(|(bh, (lse, delta))| {
            row_stats(&pr, bh, lse);
            let base = bh * dm.sq * dm.dv;
            for (i, dl) in delta.iter_mut().enumerate() {
                let o = base + i * dm.dv;
                *dl = (0..dm.dv).map(|c| da[o + c] * oa[o + c]).sum();
            }
        });
    // Pass 2: dK and dV, one key tile of one kv head per work item.
    if dm.d > 0 {
        dk.par_chunks_mut(dm.skv * dm.d)
            .zip(dv.par_chunks_mut(dm.skv * dm.dv))
            .enumerate()
            .for_each(|(kvh, (dk, dv))| {
                dk.par_chunks_mut(BWD_BLOCK_K * dm.d)
                    .zip(dv.par_chunks_mut(BWD_BLOCK_K * dm.dv))
                    .enumerate()
                    .for_each(|(jb, (dk, dv))| {
                        key_tile(&pr, &lse, &delta, kvh, jb * BWD_BLOCK_K, dk, dv)
                    });
            });
    } else {
        dv.par_chunks_mut(dm.skv * dm.dv)
            .enumerate()
            .for_each(|(kvh, dv)| key_tile(&pr, &lse, &delta, kvh, 0, &mut [], dv));
    }
    // Pass 3: dQ, one query tile per work item.
    if dm.d > 0 {
        dq.par_chunks_mut(dm.sq * dm.d)
            .enumerate()
            .for_each(|(bh, dq)| {
                dq.par_chunks_mut(BWD_BLOCK_Q * dm.d)
                    .enumerate()
                    .for_each(|(ib, dq)| query_tile(&pr, &lse, &delta, bh, ib * BWD_BLOCK_Q, dq));
            });
    }
    finish::<T>(dq, dk, dv)
}

fn finish<T: Element>(dq: Vec<T::Acc>, dk: Vec<T::Acc>, dv: Vec<T::Acc>) -> Grads<T> {
    let back = |v: Vec<T::Acc>| v.into_iter().map(T::from_acc).collect();
    (back(dq), back(dk), back(dv))
}

/// The log-sum-exp of every score row of query head `bh` (online over key tiles).
fn row_stats<C: Gemm>(pr: &Problem<'_, C>, bh: usize, lse: &mut [C]) {
    let (sq, skv) = (pr.dm.sq, pr.dm.skv);
    let mut s = vec![C::ZERO; BWD_BLOCK_Q * BWD_BLOCK_K];
    let mut m = [C::NEG_INFINITY; BWD_BLOCK_Q];
    let mut l = [C::ZERO; BWD_BLOCK_Q];
    for i0 in (0..sq).step_by(BWD_BLOCK_Q) {
        let bq = BWD_BLOCK_Q.min(sq - i0);
        m[..bq].fill(C::NEG_INFINITY);
        l[..bq].fill(C::ZERO);
        for j0 in (0..skv).step_by(BWD_BLOCK_K) {
            if pr.skipped(i0, bq, j0) {
                break;
            }
            let bk = BWD_BLOCK_K.min(skv - j0);
            pr.scores(bh, i0, bq, j0, bk, &mut s);
            for (i, row) in s[..bq * bk].chunks(bk).enumerate() {
                let tile_max = row
                    .iter()
                    .fold(C::NEG_INFINITY, |a, &x| if x > a { x } else { a });
                let new_m = if tile_max > m[i] { tile_max } else { m[i] };
                if new_m == C::NEG_INFINITY {
                    continue;
                }
                let mut sum = C::ZERO;
                for &x in row {
                    sum += (x - new_m).exp();
                }
                l[i] = l[i] * (m[i] - new_m).exp() + sum;
                m[i] = new_m;
            }
        }
        for i in 0..bq {
            lse[i0 + i] = if m[i] == C::NEG_INFINITY {
                C::NEG_INFINITY
            } else {
                m[i] + l[i].ln()
            };
        }
    }
}

/// Adds `a` into `acc`, scaled by `f`.
fn add_scaled<C: Real>(acc: &mut [C], a: &[C], f: C) {
    for (x, &y) in acc.iter_mut().zip(a) {
        *x += f * y;
    }
}

/// dK and dV of keys `j0..j0+bk` of kv head `kvh` (`dk`/`dv` are that tile's rows).
fn key_tile<C: Gemm>(
    pr: &Problem<'_, C>,
    lse: &[C],
    delta: &[C],
    kvh: usize,
    j0: usize,
    dk: &mut [C],
    dv: &mut [C],
) {
    let dm = &pr.dm;
    let bk = dv.len() / dm.dv;
    let (b, hk) = (kvh / dm.hkv, kvh % dm.hkv);
    let mut s = vec![C::ZERO; BWD_BLOCK_Q * bk];
    let mut dp = vec![C::ZERO; BWD_BLOCK_Q * bk];
    let mut tmp = vec![C::ZERO; bk * dm.d.max(dm.dv)];
    for h in hk * pr.group..(hk + 1) * pr.group {
        let bh = b * dm.hq + h;
        let rows = bh * dm.sq;
        for i0 in (0..dm.sq).step_by(BWD_BLOCK_Q) {
            let bq = BWD_BLOCK_Q.min(dm.sq - i0);
            if pr.skipped(i0, bq, j0) {
                continue;
            }
            let (s, dp) = (&mut s[..bq * bk], &mut dp[..bq * bk]);
            pr.scores(bh, i0, bq, j0, bk, s);
            pr.probs(s, bk, &lse[rows + i0..rows + i0 + bq]);
            // dV += P^T dO
            let doh = &pr.dout[(rows + i0) * dm.dv..];
            C::gemm(bk, bq, dm.dv, s, 1, bk, doh, dm.dv, 1, &mut tmp);
            add_scaled(dv, &tmp[..bk * dm.dv], C::ONE);
            if dm.d == 0 {
                continue;
            }
            pr.dscores(bh, i0, bq, j0, bk, s, &delta[rows + i0..rows + i0 + bq], dp);
            // dK += scale * dS^T Q
            let qh = &pr.q[(rows + i0) * dm.d..];
            C::gemm(bk, bq, dm.d, dp, 1, bk, qh, dm.d, 1, &mut tmp);
            add_scaled(dk, &tmp[..bk * dm.d], pr.scale);
        }
    }
}

/// dQ of query rows `i0..` of query head `bh` (`dq` is that tile's rows).
fn query_tile<C: Gemm>(
    pr: &Problem<'_, C>,
    lse: &[C],
    delta: &[C],
    bh: usize,
    i0: usize,
    dq: &mut [C],
) {
    let dm = &pr.dm;
    let bq = dq.len() / dm.d;
    let rows = bh * dm.sq;
    let (lse, delta) = (
        &lse[rows + i0..rows + i0 + bq],
        &delta[rows + i0..rows + i0 + bq],
    );
    let mut s = vec![C::ZERO; bq * BWD_BLOCK_K];
    let mut dp = vec![C::ZERO; bq * BWD_BLOCK_K];
    let mut tmp = vec![C::ZERO; bq * dm.d];
    let kh = &pr.k[pr.kv_head(bh) * dm.skv * dm.d..];
    for j0 in (0..dm.skv).step_by(BWD_BLOCK_K) {
        if pr.skipped(i0, bq, j0) {
            break;
        }
        let bk = BWD_BLOCK_K.min(dm.skv - j0);
        let (s, dp) = (&mut s[..bq * bk], &mut dp[..bq * bk]);
        pr.scores(bh, i0, bq, j0, bk, s);
        pr.probs(s, bk, lse);
        pr.dscores(bh, i0, bq, j0, bk, s, delta, dp);
        // dQ += scale * dS K
        C::gemm(bq, bk, dm.d, dp, bk, 1, &kh[j0 * dm.d..], dm.d, 1, &mut tmp);
        add_scaled(dq, &tmp, pr.scale);
    }
}
