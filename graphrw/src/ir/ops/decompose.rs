//! Decompositions of built-in ops into other built-in ops: what a node runs as when no
//! executor claims it, and the reference semantics of fused ops.

use super::{Attrs, Op, Reduction};
use crate::builder::Builder;
use crate::meta::DType;
use crate::{GraphError, Value};

fn unsupported(message: String) -> GraphError {
    GraphError::Signature {
        op: Op::ScaledDotProductAttention.name(),
        node: None,
        message,
    }
}

/// `scaled_dot_product_attention` as matmul, scale, mask, softmax (with rows whose keys
/// are all masked set to zero, as the op defines), matmul. Grouped kv heads are
/// repeated with `unsqueeze`/`expand`/`reshape`; `is_causal` adds a lower-triangular
/// mask (top-left aligned).
pub fn sdpa(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let (q, mut k, mut v) = (b.var(x[0]), b.var(x[1]), b.var(x[2]));
    let dropout = a.float("dropout_p").map_err(|e| unsupported(e.0))?;
    if dropout != 0.0 {
        return Err(unsupported(format!(
            "dropout_p = {dropout} has no inference decomposition"
        )));
    }
    let qm = q.meta()?;
    let km = k.meta()?;
    let r = qm.rank();
    let dims = qm.shape.dims();
    let head_dim = dims[r - 1]
        .known()
        .ok_or_else(|| unsupported("the head dim must be known".into()))?;
    let scale = a
        .opt_float("scale")
        .map_err(|e| unsupported(e.0))?
        .unwrap_or(1.0 / (head_dim as f64).sqrt());
    if a.bool("enable_gqa").map_err(|e| unsupported(e.0))? && r >= 3 {
        let (hq, hkv) = (dims[r - 3].known(), km.shape.dims()[r - 3].known());
        if let (Some(hq), Some(hkv)) = (hq, hkv) {
            if hq != hkv {
                let rep = (hq / hkv) as i64;
                let lead: Option<Vec<i64>> = dims[..r - 3]
                    .iter()
                    .map(|d| d.known().map(|n| n as i64))
                    .collect();
                let lead =
                    lead.ok_or_else(|| unsupported("grouped heads need known batch dims".into()))?;
                let repeat = |t: crate::Var<'_>| -> Result<Value, GraphError> {
                    let d = t.meta()?.shape.dims()[r - 1]
                        .known()
                        .map_or(-1, |n| n as i64);
                    let mut size = vec![-1i64; r + 1];
                    size[r - 2] = rep;
                    let mut shape = lead.clone();
                    shape.extend([hq as i64, -1, d]);
                    Ok(t.unsqueeze(r as i64 - 2)?
                        .expand(&size)?
                        .reshape(&shape)?
                        .value())
                };
                k = b.var(repeat(k)?);
                v = b.var(repeat(v)?);
            }
        }
    }
    let scores = q.matmul(k.transpose(-2, -1)?)?.mul(scale)?;
    let causal = if a.bool("is_causal").map_err(|e| unsupported(e.0))? {
        let s = scores.meta()?;
        let sd = s.shape.dims();
        match (sd[r - 2].known(), sd[r - 1].known()) {
            (Some(sq), Some(skv)) => Some((sq as i64, skv as i64)),
            _ => return Err(unsupported("is_causal needs known sequence lengths".into())),
        }
    } else {
        None
    };
    let p = masked_probs(b, scores, causal, x.get(3).copied())?;
    Ok(vec![p.matmul(v)?.value()])
}

/// The attention probabilities from the scaled `scores`, as SDPA defines them (shared by
/// the forward and backward decompositions): the causal triangle of `[sq, skv]` and the
/// mask (boolean: keep where true; else added) applied, softmax over the keys, and a
/// row with no visible key giving zeros rather than NaN.
fn masked_probs<'b>(
    b: &'b Builder,
    mut scores: crate::Var<'b>,
    causal: Option<(i64, i64)>,
    mask: Option<Value>,
) -> Result<crate::Var<'b>, GraphError> {
    if let Some((sq, skv)) = causal {
        let visible = b.tril(b.ones_with(&[sq, skv], DType::Bool)?)?;
        scores = b.var(visible).where_(scores, f64::NEG_INFINITY)?;
    }
    if let Some(mask) = mask {
        let mask = b.var(mask);
        scores = if mask.meta()?.dtype == DType::Bool {
            mask.where_(scores, f64::NEG_INFINITY)?
        } else {
            scores.add(mask)?
        };
    }
    let p = scores.softmax(-1)?;
    p.isnan()?.where_(0.0, p)
}

fn attr_error(op: &'static str) -> impl Fn(super::InferError) -> GraphError {
    move |e| GraphError::Signature {
        op,
        node: None,
        message: e.0,
    }
}

/// The dims from `axis` to the end of a rank-`r` tensor.
fn trailing_dims(op: &'static str, axis: i64, r: usize) -> Result<Vec<i64>, GraphError> {
    let ax = crate::meta::normalize_axis(axis, r).ok_or_else(|| GraphError::Signature {
        op,
        node: None,
        message: format!("axis {axis} is out of range for rank {r}"),
    })?;
    Ok((ax as i64..r as i64).collect())
}

/// `layer_norm`: `(x - mean) * rsqrt(var + eps) * weight + bias` over the dims from
/// `axis` on (biased variance).
pub fn layer_norm(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let err = attr_error(Op::LayerNorm.name());
    let input = b.var(x[0]);
    let dims = trailing_dims(
        Op::LayerNorm.name(),
        a.int("axis").map_err(&err)?,
        input.meta()?.rank(),
    )?;
    let eps = a.float("eps").map_err(&err)?;
    let xc = input.sub(input.mean_with(&dims, true)?)?;
    let var = xc.mul(xc)?.mean_with(&dims, true)?;
    let mut y = xc.mul(var.add(eps)?.rsqrt()?)?;
    if let Some(&w) = x.get(1) {
        y = y.mul(w)?;
    }
    if let Some(&bias) = x.get(2) {
        y = y.add(bias)?;
    }
    Ok(vec![y.value()])
}

/// `rms_norm`: `x * rsqrt(mean(x^2) + eps) * weight` over the dims from `axis` on.
pub fn rms_norm(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let err = attr_error(Op::RmsNorm.name());
    let input = b.var(x[0]);
    let dims = trailing_dims(
        Op::RmsNorm.name(),
        a.int("axis").map_err(&err)?,
        input.meta()?.rank(),
    )?;
    let eps = a.float("eps").map_err(&err)?;
    let ms = input.mul(input)?.mean_with(&dims, true)?;
    let mut y = input.mul(ms.add(eps)?.rsqrt()?)?;
    if let Some(&w) = x.get(1) {
        y = y.mul(w)?;
    }
    Ok(vec![y.value()])
}

/// `scaled_dot_product_attention_backward` in plain ops: recompute the probabilities
/// `p`, then `dv = p^T dout`, `dp = dout v^T`, `ds = p * (dp - rowsum(dp * p))`,
/// `dq = scale * ds k`, `dk = scale * ds^T q`; grouped kv heads sum their group.
pub fn sdpa_backward(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let op = Op::ScaledDotProductAttentionBackward.name();
    let err = attr_error(op);
    let (dout, q, k, v) = (b.var(x[0]), b.var(x[1]), b.var(x[2]), b.var(x[3]));
    let (qm, km) = (q.meta()?, k.meta()?);
    let r = qm.rank();
    let known = |d: &crate::meta::Dim, what: &str| {
        d.known().ok_or_else(|| GraphError::Signature {
            op,
            node: None,
            message: format!("the {what} must be known"),
        })
    };
    let head_dim = known(&qm.shape.dims()[r - 1], "head dim")?;
    let scale = a
        .opt_float("scale")
        .map_err(&err)?
        .unwrap_or(1.0 / (head_dim as f64).sqrt());
    // Grouped heads: repeat k and v to the query heads, and sum their gradients back.
    let mut group = None;
    if a.bool("enable_gqa").map_err(&err)? && r >= 3 {
        let hq = known(&qm.shape.dims()[r - 3], "query head count")?;
        let hkv = known(&km.shape.dims()[r - 3], "key head count")?;
        if hq != hkv {
            group = Some((hq as i64, hkv as i64, (hq / hkv) as i64));
        }
    }
    let lead: Vec<i64> = qm.shape.dims()[..r.saturating_sub(3)]
        .iter()
        .map(|d| known(d, "batch dim").map(|n| n as i64))
        .collect::<Result<_, _>>()?;
    let (mut kr, mut vr) = (k, v);
    if let Some((hq, _, rep)) = group {
        let repeat = |t: crate::Var<'_>| -> Result<Value, GraphError> {
            let tm = t.meta()?;
            let (s, d) = (
                known(&tm.shape.dims()[r - 2], "sequence length")? as i64,
                known(&tm.shape.dims()[r - 1], "head dim")? as i64,
            );
            let mut size = vec![-1i64; r + 1];
            size[r - 2] = rep;
            let mut shape = lead.clone();
            shape.extend([hq, s, d]);
            Ok(t.unsqueeze(r as i64 - 2)?
                .expand(&size)?
                .reshape(&shape)?
                .value())
        };
        kr = b.var(repeat(k)?);
        vr = b.var(repeat(v)?);
    }
    let scores = q.matmul(kr.transpose(-2, -1)?)?.mul(scale)?;
    let causal = if a.bool("is_causal").map_err(&err)? {
        let s = scores.meta()?;
        let sd = s.shape.dims();
        Some((
            known(&sd[r - 2], "query length")? as i64,
            known(&sd[r - 1], "key length")? as i64,
        ))
    } else {
        None
    };
    let p = masked_probs(b, scores, causal, x.get(5).copied())?;
    let dv = p.transpose(-2, -1)?.matmul(dout)?;
    let dp = dout.matmul(vr.transpose(-2, -1)?)?;
    let ds = p.mul(dp.sub(dp.mul(p)?.sum_with(&[-1], true)?)?)?;
    let dq = ds.matmul(kr)?.mul(scale)?;
    let dk = ds.transpose(-2, -1)?.matmul(q)?.mul(scale)?;
    let (dk, dv) = match group {
        None => (dk, dv),
        Some((_, hkv, rep)) => {
            let fold = |t: crate::Var<'_>| -> Result<Value, GraphError> {
                let tm = t.meta()?;
                let mut shape = lead.clone();
                shape.extend([
                    hkv,
                    rep,
                    known(&tm.shape.dims()[r - 2], "sequence length")? as i64,
                    known(&tm.shape.dims()[r - 1], "head dim")? as i64,
                ]);
                Ok(t.reshape(&shape)?.sum_with(&[r as i64 - 2], false)?.value())
            };
            (b.var(fold(dk)?), b.var(fold(dv)?))
        }
    };
    Ok(vec![dq.value(), dk.value(), dv.value()])
}

/// Per-row cross-entropy terms shared by the forward and backward decompositions:
/// the one-hot target (bool, `[.., C]`), the valid-row mask and the class count.
fn cross_entropy_parts<'b>(
    b: &'b Builder,
    input: crate::Var<'b>,
    target: crate::Var<'b>,
    ignore_index: i64,
) -> Result<(crate::Var<'b>, crate::Var<'b>, i64), GraphError> {
    let m = input.meta()?;
    let c = m.shape.dims()[m.rank() - 1]
        .known()
        .ok_or_else(|| GraphError::Signature {
            op: Op::CrossEntropy.name(),
            node: None,
            message: "the class count must be known".into(),
        })? as i64;
    let classes = b.var(b.arange(c as f64)?);
    let onehot = target.unsqueeze(-1)?.eq(classes)?;
    let valid = target.ne(ignore_index as f64)?;
    Ok((onehot, valid, c))
}

/// `cross_entropy`: `-(1 - ls) * log_softmax(x)[target] - ls * mean(log_softmax(x))`
/// per row, zero where `target == ignore_index`, then reduced.
pub fn cross_entropy(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let err = attr_error(Op::CrossEntropy.name());
    let (input, target) = (b.var(x[0]), b.var(x[1]));
    let ls = a.float("label_smoothing").map_err(&err)?;
    let (onehot, valid, _) =
        cross_entropy_parts(b, input, target, a.int("ignore_index").map_err(&err)?)?;
    let logp = input.log_softmax(-1)?;
    let mut loss = onehot.where_(logp, 0.0)?.sum_with(&[-1], false)?.neg()?;
    if ls != 0.0 {
        let smooth = logp.mean_with(&[-1], false)?.neg()?;
        loss = loss.mul(1.0 - ls)?.add(smooth.mul(ls)?)?;
    }
    let loss = valid.where_(loss, 0.0)?;
    let dtype = input.meta()?.dtype;
    let out = match a.reduction().map_err(&err)? {
        Reduction::None => loss,
        Reduction::Sum => loss.sum()?,
        Reduction::Mean => loss.sum()?.div(valid.cast(dtype)?.sum()?)?,
    };
    Ok(vec![out.value()])
}

/// `cross_entropy_backward`: `(softmax(x) - (1 - ls) * onehot - ls / C) * g` per row,
/// zero on ignored rows, with `g` the loss cotangent (divided by the valid-row count
/// for `"mean"`).
pub fn cross_entropy_backward(
    b: &Builder,
    x: &[Value],
    a: &Attrs,
) -> Result<Vec<Value>, GraphError> {
    let err = attr_error(Op::CrossEntropyBackward.name());
    let (g, input, target) = (b.var(x[0]), b.var(x[1]), b.var(x[2]));
    let ls = a.float("label_smoothing").map_err(&err)?;
    let (onehot, valid, c) =
        cross_entropy_parts(b, input, target, a.int("ignore_index").map_err(&err)?)?;
    let dtype = input.meta()?.dtype;
    let mut d = input.softmax(-1)?.sub(onehot.cast(dtype)?.mul(1.0 - ls)?)?;
    if ls != 0.0 {
        d = d.sub(ls / c as f64)?;
    }
    let row = match a.reduction().map_err(&err)? {
        Reduction::None => g.unsqueeze(-1)?,
        Reduction::Sum => g,
        Reduction::Mean => g.div(valid.cast(dtype)?.sum()?)?,
    };
    let d = valid.unsqueeze(-1)?.where_(d.mul(row)?, 0.0)?;
    Ok(vec![d.value()])
}
