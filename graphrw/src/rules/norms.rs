//! Normalisation spellings: the many ways exporters write an RMS norm, brought to the
//! one form the `fused.rms_norm` kernel's rule matches
//! (`x * rsqrt(mean(x * x, -1) + eps) * weight`), so that one rule fuses them all.
//!
//! The TorchScript exporter writes HF Llama's `LlamaRMSNorm` as `Pow(x, 2)`,
//! `ReduceMean`, `Add(eps)`, `Sqrt`, `Div(1, .)`, `Mul(x, .)`, with the weight applied
//! after a `Cast` back to the input dtype (`weight * hidden.to(input_dtype)`). Before
//! this pass none of that fused: the kernel's rule knew `sqrt(.).reciprocal()` and
//! `rsqrt` but not `1 / sqrt(.)`, and the weight sat outside the `f32` region, on the
//! far side of the cast. [`NORM_SPELLINGS`] rewrites, everywhere in the graph:
//!
//! - `pow(x, 2)` to `x * x`;
//! - `1 / y` to `reciprocal(y)`, `reciprocal(sqrt(y))` to `rsqrt(y)`, and
//!   `x / sqrt(y)` to `x * rsqrt(y)`;
//! - `sum(x, [d], keepdim) / n` (or `* (1 / n)`) to `mean(x, [d], keepdim)` when `n` is
//!   the size of dim `d`;
//! - `mean(x, [d])` with `d` counted from the front to `d` counted from the end;
//! - `cast(a * b, narrow) * w`, with `a` in a wider float dtype and `w` a per-channel
//!   scale (rank at most 1) in the narrow one, to `cast(a * b * cast(w, wide), narrow)`:
//!   the weight moves into the wide region, where it meets the norm (one rounding
//!   instead of two; the product is otherwise the same).
//!
//! An RMS norm without a weight is fused by [`UNWEIGHTED_RMS_NORM`], run after the
//! kernels' pass (so that a norm with a weight is fused with it first): what is left of
//! the canonical form becomes `fused.rms_norm` with a weight of ones.
//!
//! The ONNX importer reads `ReduceMean`'s axes from the attribute (opset 17) and from
//! the input (opset 18) alike, so both opsets give the same graph here.

use crate::generated::builtin::rms_norm;
use crate::rule_set;
use crate::{DType, GraphError, Tensor, Var};

/// True when `s` is the inverse of the size of `x`'s dim `dims[0]` (one dim, known size).
fn is_inverse_dim(x: &crate::pattern::TensorRef<'_>, dims: &[i64], s: f64) -> bool {
    match dims {
        [d] => x
            .dim(*d)
            .and_then(|d| d.known())
            .is_some_and(|n| n > 0 && (s * n as f64 - 1.0).abs() < 1e-6),
        _ => false,
    }
}

/// True when `n` is the size of `x`'s dim `dims[0]` (one dim, known size).
fn is_dim_size(x: &crate::pattern::TensorRef<'_>, dims: &[i64], n: f64) -> bool {
    n != 0.0 && is_inverse_dim(x, dims, 1.0 / n)
}

/// True when `wide` is a float dtype strictly wider than the float dtype `narrow`.
fn is_wider_float(wide: DType, narrow: DType) -> bool {
    wide.is_float() && narrow.is_float() && wide.size_in_bytes() > narrow.size_in_bytes()
}

/// True when `x`'s last dim is `dims`, and that dim has a known size.
fn is_known_last_dim(x: &crate::pattern::TensorRef<'_>, dims: &[i64]) -> bool {
    let r = x.rank();
    matches!(dims, [d] if crate::meta::normalize_axis(*d, r) == Some(r.wrapping_sub(1)))
        && x.dim(-1).and_then(|d| d.known()).is_some()
}

/// `fused.rms_norm(x, ones, eps)`: the norm with a unit weight over `x`'s last dim.
fn unit_rms_norm<'b>(b: &'b crate::Builder, x: Var<'b>, eps: f64) -> Result<Var<'b>, GraphError> {
    let meta = x.meta()?;
    let n = meta
        .shape
        .dims()
        .last()
        .and_then(|d| d.known())
        .ok_or_else(|| GraphError::Signature {
            op: rms_norm::KERNEL.op.name,
            node: None,
            message: "the last dim's size is not known".into(),
        })?;
    let ones = b.constant(Tensor::full(meta.dtype, &[n as usize], 1.0));
    b.call(rms_norm::KERNEL.op)
        .arg(x)
        .arg(ones)
        .attr("eps", eps)
        .build()
}

rule_set! {
    /// The spellings of an RMS norm, brought to the kernel's form (see the module docs).
    pub static NORM_SPELLINGS;

    // The exponent and the numerator are bound as tensors, so that a one-element
    // constant of higher rank (which would broadcast `x` up) is left alone.
    rule square_by_pow(x: Tensor, c: Tensor) -> Tensor
    where check(|x, c| x.dtype().is_float() && c.scalar() == Some(2.0) && c.rank() <= x.rank())
    {
        x.pow(c)
    } => {
        x.mul(x)?
    }

    rule one_over(c: Tensor, y: Tensor) -> Tensor
    where check(|c, y| y.dtype().is_float() && c.scalar() == Some(1.0) && c.rank() <= y.rank())
    {
        c.div(y)
    } => {
        y.reciprocal()?
    }

    rule reciprocal_sqrt(y: Tensor) -> Tensor {
        y.sqrt().reciprocal()
    } => {
        y.rsqrt()?
    }

    rule div_by_sqrt(x: Tensor, y: Tensor) -> Tensor
    where check(|x, y| x.dtype().is_float() && x.dtype() == y.dtype() && x.scalar() != Some(1.0))
    {
        x.div(y.sqrt())
    } => {
        x.mul(y.rsqrt()?)?
    }

    rule sum_times_inverse_size(x: Tensor, d: Vec<i64>, k: bool, s: f64) -> Tensor
    where check(|x, d, s| x.dtype().is_float() && is_inverse_dim(&x, &d, s))
    {
        x.sum(d, k).mul(s)
    } => {
        x.mean_with(&d, k)?
    }

    rule sum_over_size(x: Tensor, d: Vec<i64>, k: bool, n: f64) -> Tensor
    where check(|x, d, n| x.dtype().is_float() && is_dim_size(&x, &d, n))
    {
        x.sum(d, k).div(n)
    } => {
        x.mean_with(&d, k)?
    }

    rule mean_dim_from_front(x: Tensor, d: Vec<i64>, k: bool) -> Tensor
    where check(|d| d.len() == 1 && d[0] >= 0), check(|x, d| (d[0] as usize) < x.rank())
    {
        x.mean(d, k)
    } => {
        let r = x.meta()?.rank() as i64;
        x.mean_with(&[d[0] - r], k)?
    }

    rule weight_inside_cast(a: Tensor, c: Tensor, t: DType, w: Tensor) -> Tensor
    where check(|a, t, w| is_wider_float(a.dtype(), t) && w.dtype() == t && w.rank() <= 1)
    {
        a.mul(c).cast(t).mul(w)
    } => {
        let wide = a.meta()?.dtype;
        a.mul(c)?.mul(w.cast(wide)?)?.cast(t)?
    }
}

rule_set! {
    /// An RMS norm without a weight, in [`NORM_SPELLINGS`]' form, as `fused.rms_norm`
    /// with a weight of ones (run after the kernels' pass).
    pub static UNWEIGHTED_RMS_NORM;

    rule rms_norm_unit_weight(x: Tensor, d: Vec<i64>, eps: f64) -> Tensor
    where check(|x, d| x.dtype().is_float() && is_known_last_dim(&x, &d))
    {
        x.mul(x.mul(x).mean(d, true).add(eps).rsqrt())
    } => {
        unit_rms_norm(b, x, eps)?
    }
}
