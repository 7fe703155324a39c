//! The unfused reference of scaled dot-product attention: scores, mask, softmax, values.

use rayon::prelude::*;

use crate::broadcast::{broadcast_shapes, broadcast_strides, Odometer};
use crate::cpu::matmul::Gemm;
use crate::cpu::util::{prod, same_dtype};
use crate::macros::dispatch_float;
use crate::{DType, Element, KernelError, Real, Tensor};

/// Validated sizes of one attention call.
/// The sizes of an attention problem, shared by the reference and the fused kernels.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    /// Batch entries (product of the dims before the head dim).
    pub(crate) batch: usize,
    pub(crate) hq: usize,
    pub(crate) hkv: usize,
    pub(crate) sq: usize,
    pub(crate) skv: usize,
    /// Rows each key/value head takes in K and V's storage: `skv`, or more where K and
    /// V are a cache with spare capacity whose first `skv` rows are the keys.
    pub(crate) kv_pitch: usize,
    pub(crate) d: usize,
    pub(crate) dv: usize,
}

/// A mask read through broadcast strides over `[batch..., Hq, Sq, Skv]`.
pub(crate) struct Mask {
    /// Mask element offset of each (batch, head) pair.
    pub(crate) head_offsets: Vec<usize>,
    pub(crate) row_stride: usize,
    pub(crate) col_stride: usize,
}

/// Validates the shapes (one rank >= 2, consistent batch/head/sequence/head dims,
/// grouped heads only with `enable_gqa`); returns the sizes and the scores' shape.
pub(crate) fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    enable_gqa: bool,
) -> Result<(Dims, Vec<usize>), KernelError> {
    let op = "sdpa";
    same_dtype(op, q, k)?;
    same_dtype(op, q, v)?;
    let r = q.rank();
    let shapes = || format!("q {:?}, k {:?}, v {:?}", q.shape(), k.shape(), v.shape());
    if r < 2 || k.rank() != r || v.rank() != r {
        return Err(KernelError::shape(
            op,
            format!("q, k, v need one rank of at least 2: {}", shapes()),
        ));
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let lead = r.saturating_sub(3);
    let (hq, hkv, hv) = if r >= 3 {
        (qs[r - 3], ks[r - 3], vs[r - 3])
    } else {
        (1, 1, 1)
    };
    let consistent = qs[..lead] == ks[..lead]
        && qs[..lead] == vs[..lead]
        && hkv == hv
        && ks[r - 1] == qs[r - 1]
        && vs[r - 2] == ks[r - 2];
    if !consistent {
        return Err(KernelError::shape(
            op,
            format!("incompatible shapes: {}", shapes()),
        ));
    }
    if hq != hkv && !(enable_gqa && hkv > 0 && hq % hkv == 0) {
        return Err(KernelError::shape(
            op,
            format!(
                "{hq} query heads and {hkv} key/value heads need enable_gqa with Hq a multiple of Hkv: {}",
                shapes()
            ),
        ));
    }
    let dims = Dims {
        batch: prod(&qs[..lead]),
        hq,
        hkv,
        sq: qs[r - 2],
        skv: ks[r - 2],
        kv_pitch: ks[r - 2],
        d: qs[r - 1],
        dv: vs[r - 1],
    };
    let mut score_shape = qs[..r - 1].to_vec();
    score_shape.push(dims.skv);
    Ok((dims, score_shape))
}

pub(crate) fn mask_layout(mask: &Tensor, score_shape: &[usize]) -> Result<Mask, KernelError> {
    if broadcast_shapes(mask.shape(), score_shape).as_deref() != Some(score_shape) {
        return Err(KernelError::shape(
            "sdpa",
            format!(
                "attn_mask {:?} does not broadcast to the scores {score_shape:?}",
                mask.shape()
            ),
        ));
    }
    let r = score_shape.len();
    let st = broadcast_strides(mask.shape(), score_shape);
    let heads = &score_shape[..r - 2];
    let head_st: Vec<[usize; 1]> = st[..r - 2].iter().map(|&s| [s]).collect();
    let mut odo = Odometer::new(heads, &head_st, [0], 0);
    let head_offsets = (0..prod(heads))
        .map(|_| {
            let o = odo.offsets[0];
            odo.advance();
            o
        })
        .collect();
    Ok(Mask {
        head_offsets,
        row_stride: st[r - 2],
        col_stride: st[r - 1],
    })
}

/// Scaled dot-product attention, computed the plain unfused way:
/// `softmax(q @ k^T * scale + mask) @ v`.
///
/// Shapes: `q` is `[.., Hq, Sq, D]`, `k` is `[.., Hkv, Skv, D]`, `v` is
/// `[.., Hkv, Skv, Dv]` (leading dims equal; rank-2 operands have one implicit head);
/// the result is `[.., Hq, Sq, Dv]` in `q`'s dtype. `scale` defaults to `1 / sqrt(D)`.
///
/// - `attn_mask` broadcasts to `[.., Hq, Sq, Skv]`: bool (`true` attends, `false`
///   masks with `-inf`) or float (added to the scores).
/// - `is_causal` masks `j > i` (lower triangle aligned top-left, like PyTorch); it
///   cannot be combined with `attn_mask`.
/// - With `enable_gqa`, `Hq` must be a multiple of `Hkv` and query head `h` reads
///   key/value head `h / (Hq / Hkv)`; without it the head counts must match.
///
/// A query row whose scores are all masked gives NaN (the softmax of all `-inf`), as
/// PyTorch's math path does. Float dtypes only; f16/bf16 are computed in f32.
pub fn sdpa_reference(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
) -> Result<Tensor, KernelError> {
    let (dims, score_shape) = check(q, k, v, enable_gqa)?;
    if is_causal && attn_mask.is_some() {
        return Err(KernelError::invalid(
            "sdpa",
            "attn_mask cannot be combined with is_causal",
        ));
    }
    let mask = match attn_mask {
        Some(m) if m.dtype() != DType::Bool && !m.dtype().is_float() => {
            return Err(KernelError::UnsupportedDType {
                op: "sdpa",
                dtype: m.dtype(),
                expected: "a bool or float attn_mask",
            })
        }
        Some(m) => Some((m, mask_layout(m, &score_shape)?)),
        None => None,
    };
    let scale = scale.unwrap_or(1.0 / (dims.d.max(1) as f64).sqrt());
    let mut out_shape = q.shape().to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = dims.dv;
    }
    dispatch_float!(q.dtype(), "sdpa", |T| {
        let out = attend::<T>(&dims, q, k, v, mask.as_ref(), is_causal, scale);
        Ok(Tensor::from_data(out_shape, out))
    })
}

fn attend<T: Element>(
    dm: &Dims,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&(&Tensor, Mask)>,
    is_causal: bool,
    scale: f64,
) -> Vec<T>
where
    T::Acc: Gemm,
{
    let (qa, ka, va) = (q.acc_cow::<T>(), k.acc_cow::<T>(), v.acc_cow::<T>());
    let mask_vals: Option<(Vec<T::Acc>, &Mask)> = mask.map(|(m, layout)| {
        let vals = if m.dtype() == DType::Bool {
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
    let scale = T::Acc::from_f64(scale);
    let group = dm.hq.checked_div(dm.hkv).unwrap_or(1);
    let head_out = dm.sq * dm.dv;
    let mut out = vec![T::Acc::ZERO; dm.batch * dm.hq * head_out];
    let one_head = |(bh, dst): (usize, &mut [T::Acc])| {
        let (b, h) = (bh / dm.hq, bh % dm.hq);
        let kvh = b * dm.hkv + h / group;
        let qh = &qa[bh * dm.sq * dm.d..];
        let kh = &ka[kvh * dm.skv * dm.d..];
        let vh = &va[kvh * dm.skv * dm.dv..];
        let mut p = vec![T::Acc::ZERO; dm.sq * dm.skv];
        T::Acc::gemm(dm.sq, dm.d, dm.skv, qh, dm.d, 1, kh, 1, dm.d, &mut p);
        if dm.skv > 0 {
            for (i, row) in p.chunks_mut(dm.skv).enumerate() {
                for (j, s) in row.iter_mut().enumerate() {
                    *s *= scale;
                    if is_causal && j > i {
                        *s = T::Acc::NEG_INFINITY;
                    }
                    if let Some((vals, layout)) = &mask_vals {
                        *s += vals[layout.head_offsets[bh]
                            + i * layout.row_stride
                            + j * layout.col_stride];
                    }
                }
                let m = row
                    .iter()
                    .fold(T::Acc::NEG_INFINITY, |m, &x| if x > m { x } else { m });
                let mut sum = T::Acc::ZERO;
                for s in row.iter_mut() {
                    *s = (*s - m).exp();
                    sum += *s;
                }
                let inv = T::Acc::ONE / sum;
                row.iter_mut().for_each(|s| *s *= inv);
            }
        }
        T::Acc::gemm(dm.sq, dm.skv, dm.dv, &p, dm.skv, 1, vh, dm.dv, 1, dst);
    };
    if head_out > 0 {
        out.par_chunks_mut(head_out).enumerate().for_each(one_head);
    }
    out.into_iter().map(T::from_acc).collect()
}
