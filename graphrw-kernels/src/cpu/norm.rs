//! Normalisations over trailing dims: layer norm and RMS norm.

use rayon::prelude::*;

use crate::broadcast::{broadcast_shapes, PAR_THRESHOLD};
use crate::cpu::util::{norm_dim, prod, same_dtype};
use crate::macros::dispatch_float;
use crate::{Element, KernelError, Real, Tensor};

/// Checks an affine parameter and expands it to the normalised shape, in compute type.
fn affine<T: Element>(
    op: &'static str,
    what: &str,
    x: &Tensor,
    p: Option<&Tensor>,
    norm_shape: &[usize],
) -> Result<Option<Vec<T::Acc>>, KernelError> {
    let Some(p) = p else { return Ok(None) };
    same_dtype(op, x, p)?;
    if broadcast_shapes(p.shape(), norm_shape).as_deref() != Some(norm_shape) {
        return Err(KernelError::shape(
            op,
            format!(
                "{what} of shape {:?} does not broadcast to the normalised shape {norm_shape:?}",
                p.shape()
            ),
        ));
    }
    let sizes: Vec<i64> = norm_shape.iter().map(|&s| s as i64).collect();
    let full = crate::cpu::expand(p, &sizes)?;
    Ok(Some(
        full.slice_of::<T>().iter().map(|v| v.to_acc()).collect(),
    ))
}

/// `sum(f(v))` over a row in the compute type, with independent partial sums so the
/// loop vectorises instead of waiting on one long chain of additions.
#[inline]
fn lane_sum<T: Element>(row: &[T], f: impl Fn(T::Acc) -> T::Acc) -> T::Acc {
    const LANES: usize = 8;
    let mut acc = [T::Acc::ZERO; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v.to_acc());
        }
    }
    let tail: T::Acc = rest.iter().map(|&v| f(v.to_acc())).sum();
    acc.iter().copied().sum::<T::Acc>() + tail
}

/// Runs `row(src_row, out_row)` over rows of `inner` elements, in parallel when large.
fn for_rows<T: Element>(src: &[T], inner: usize, row: impl Fn(&[T], &mut [T]) + Sync) -> Vec<T> {
    if inner == 0 || src.is_empty() {
        return vec![T::default(); src.len()];
    }
    // Every row is written by `row`.
    let mut out = crate::cpu::pool::buffer::<T>(src.len());
    if src.len() < PAR_THRESHOLD {
        out.chunks_mut(inner)
            .zip(src.chunks(inner))
            .for_each(|(o, s)| row(s, o));
    } else {
        out.par_chunks_mut(inner)
            .zip(src.par_chunks(inner))
            .with_min_len((PAR_THRESHOLD / 4 / inner).max(1))
            .for_each(|(o, s)| row(s, o));
    }
    out
}

/// Layer normalisation over dims `axis..` (ONNX `LayerNormalization`; `torch`'s
/// `layer_norm` with `normalized_shape = x.shape[axis..]`):
/// `(x - mean) / sqrt(var + eps) * weight + bias`, with the biased variance.
///
/// Float dtypes only; f16/bf16 accumulate in f32. `weight` and `bias` share `x`'s
/// dtype and broadcast to `x.shape[axis..]`.
pub fn layer_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    axis: i64,
    eps: f64,
) -> Result<Tensor, KernelError> {
    let op = "layer_norm";
    let d = norm_dim(op, axis, x.rank())?;
    let norm_shape = &x.shape()[d..];
    let inner = prod(norm_shape);
    dispatch_float!(x.dtype(), op, |T| {
        let w = affine::<T>(op, "weight", x, weight, norm_shape)?;
        let b = affine::<T>(op, "bias", x, bias, norm_shape)?;
        let eps = <T as Element>::Acc::from_f64(eps);
        let n = <T as Element>::Acc::from_f64(inner as f64);
        let out = for_rows(x.slice_of::<T>(), inner, |s, o| {
            let mean = lane_sum(s, |a| a) / n;
            let var = lane_sum(s, |a| (a - mean) * (a - mean)) / n;
            let rstd = <T as Element>::Acc::ONE / (var + eps).sqrt();
            for (i, (o, v)) in o.iter_mut().zip(s).enumerate() {
                let mut y = (v.to_acc() - mean) * rstd;
                if let Some(w) = &w {
                    y *= w[i];
                }
                if let Some(b) = &b {
                    y += b[i];
                }
                *o = T::from_acc(y);
            }
        });
        Ok(Tensor::from_data(x.shape().to_vec(), out))
    })
}

/// RMS normalisation over dims `axis..`: `x / sqrt(mean(x^2) + eps) * weight`.
///
/// Float dtypes only; f16/bf16 accumulate in f32. `weight` shares `x`'s dtype and
/// broadcasts to `x.shape[axis..]`.
pub fn rms_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    axis: i64,
    eps: f64,
) -> Result<Tensor, KernelError> {
    let op = "rms_norm";
    let d = norm_dim(op, axis, x.rank())?;
    let norm_shape = &x.shape()[d..];
    let inner = prod(norm_shape);
    dispatch_float!(x.dtype(), op, |T| {
        let w = affine::<T>(op, "weight", x, weight, norm_shape)?;
        let eps = <T as Element>::Acc::from_f64(eps);
        let n = <T as Element>::Acc::from_f64(inner as f64);
        let out = for_rows(x.slice_of::<T>(), inner, |s, o| {
            let ms = lane_sum(s, |a| a * a) / n;
            let r = <T as Element>::Acc::ONE / (ms + eps).sqrt();
            for (i, (o, v)) in o.iter_mut().zip(s).enumerate() {
                let mut y = v.to_acc() * r;
                if let Some(w) = &w {
                    y *= w[i];
                }
                *o = T::from_acc(y);
            }
        });
        Ok(Tensor::from_data(x.shape().to_vec(), out))
    })
}
