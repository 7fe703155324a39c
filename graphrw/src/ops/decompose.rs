//! Decompositions of built-in ops into other built-in ops: what a node runs as when no
//! executor claims it, and the reference semantics of fused ops.

use super::Attrs;
use crate::builder::Builder;
use crate::meta::DType;
use crate::{GraphError, Value};

fn unsupported(message: String) -> GraphError {
    GraphError::Signature {
        op: "scaled_dot_product_attention",
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
    let mut scores = q.matmul(k.transpose(-2, -1)?)?.mul(scale)?;
    if a.bool("is_causal").map_err(|e| unsupported(e.0))? {
        let s = scores.meta()?;
        let sd = s.shape.dims();
        let (sq, skv) = match (sd[r - 2].known(), sd[r - 1].known()) {
            (Some(sq), Some(skv)) => (sq as i64, skv as i64),
            _ => return Err(unsupported("is_causal needs known sequence lengths".into())),
        };
        let visible = b.ones(&[sq, skv], DType::Bool)?;
        let visible = b.tril(visible, 0)?;
        scores = b.var(visible).where_(scores, f64::NEG_INFINITY)?;
    }
    if let Some(&mask) = x.get(3) {
        let mask = b.var(mask);
        scores = if mask.meta()?.dtype == DType::Bool {
            mask.where_(scores, f64::NEG_INFINITY)?
        } else {
            scores.add(mask)?
        };
    }
    let p = scores.softmax(-1)?;
    let p = p.isnan()?.where_(0.0, p)?;
    Ok(vec![p.matmul(v)?.value()])
}
