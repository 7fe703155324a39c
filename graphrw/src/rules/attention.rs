//! Attention fusion: after [`super::canonical`], an attention block is
//! `softmax(q @ kᵀ [* scale] [+ mask], -1) @ v`, possibly with the exporters' guard
//! `where(isnan(p), 0, p)` on the probabilities. One rule with optional parts
//! (`mul(s?)`, `add(mask?)`, `opt(p, |p| ..)`) matches every form; each becomes one
//! `scaled_dot_product_attention(q, k, v, mask, scale)` node, with `k` recovered as
//! `kᵀ.transpose(-2, -1)` (canonicalisation then folds that transpose into the layout
//! ops that made `kᵀ`). A missing scale is a scale of 1 (T5 scales nothing). Grouped
//! kv heads written as `reshape(expand(unsqueeze(k, 2)))` (transformers' `repeat_kv`)
//! become `enable_gqa` on the fused node, so k and v are never materialised per head.
//!
//! Semantics kept: the fused op gives zeros for query rows whose keys are all masked
//! with `-inf`, which is what the guarded form computes; an additive mask of large
//! finite negatives (eager exports) is computed exactly as before.

use crate::rule_set;
use crate::{GraphError, Var};

/// Checks shared by every attention rule: q, kᵀ and v of one rank >= 3 and one float
/// dtype, and the contraction dims agree.
fn attention_shapes(
    q: &crate::pattern::TensorRef<'_>,
    kt: &crate::pattern::TensorRef<'_>,
    v: &crate::pattern::TensorRef<'_>,
) -> bool {
    let r = q.rank();
    r >= 3
        && kt.rank() == r
        && v.rank() == r
        && q.dtype().is_float()
        && kt.dtype() == q.dtype()
        && v.dtype() == q.dtype()
        && q.dim(-1) == kt.dim(-2)
        && kt.dim(-1) == v.dim(-2)
}

/// The fused node.
fn fused<'b>(
    q: Var<'b>,
    kt: Var<'b>,
    v: Var<'b>,
    mask: Option<Var<'b>>,
    scale: f64,
) -> Result<Var<'b>, GraphError> {
    let k = kt.transpose(-2, -1)?;
    q.scaled_dot_product_attention(k, v, mask, 0.0, false, Some(scale), false)
}

rule_set! {
    /// Attention blocks to `scaled_dot_product_attention` (see the module docs).
    pub static ATTENTION;

    /// Every form at once: the scale, the mask and the NaN guard are optional parts, so
    /// one rule covers the eight spellings (with or without each) without eight rules.
    rule attention(q: Tensor, kt: Tensor, v: Tensor, s: Option<f64>, mask: Option<Tensor>) -> Tensor
    where check(|q, kt, v| attention_shapes(&q, &kt, &v))
    {
        let p = q.matmul(kt).mul(s?).add(mask?).softmax(-1);
        opt(p, |p| p.isnan().where_(0.0, p)).matmul(v)
    } => {
        fused(q, kt, v, mask, s.unwrap_or(1.0))?
    }

    rule grouped_kv_heads_masked(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, ke: Vec<i64>, kr: Vec<i64>, ve: Vec<i64>, vr: Vec<i64>, s: f64) -> Tensor
    where check(|k, ke, kr| repeats_kv_heads(&k, &ke, &kr)), check(|v, ve, vr| repeats_kv_heads(&v, &ve, &vr))
    {
        q.scaled_dot_product_attention(
            k.unsqueeze(2).expand(ke).reshape(kr),
            v.unsqueeze(2).expand(ve).reshape(vr),
            mask, 0.0, false, s, false)
    } => {
        q.scaled_dot_product_attention(k, v, Some(mask), 0.0, false, Some(s), true)?
    }

    rule grouped_kv_heads(q: Tensor, k: Tensor, v: Tensor, ke: Vec<i64>, kr: Vec<i64>, ve: Vec<i64>, vr: Vec<i64>, s: f64) -> Tensor
    where check(|k, ke, kr| repeats_kv_heads(&k, &ke, &kr)), check(|v, ve, vr| repeats_kv_heads(&v, &ve, &vr))
    {
        q.scaled_dot_product_attention(
            k.unsqueeze(2).expand(ke).reshape(kr),
            v.unsqueeze(2).expand(ve).reshape(vr),
            None, 0.0, false, s, false)
    } => {
        q.scaled_dot_product_attention(k, v, None, 0.0, false, Some(s), true)?
    }
}

/// True when `reshape(expand(unsqueeze(x, 2), expand), reshape)` is transformers'
/// `repeat_kv`: `x` is `[b, h, s, d]`, the expand makes `[b, h, r, s, d]` and the
/// reshape merges `h` and `r`, so query head `i` reads kv head `i / r` — exactly
/// `enable_gqa`'s grouping.
fn repeats_kv_heads(x: &crate::pattern::TensorRef<'_>, expand: &[i64], reshape: &[i64]) -> bool {
    let Some(dims) = x.meta().shape.as_known() else {
        return false;
    };
    let [b, h, s, d] = dims[..] else { return false };
    let [eb, eh, r, es, ed] = expand[..] else {
        return false;
    };
    let keeps = |e: i64, n: u64| e == -1 || e == n as i64;
    keeps(eb, b)
        && keeps(eh, h)
        && keeps(es, s)
        && keeps(ed, d)
        && r >= 1
        && reshape == [b as i64, h as i64 * r, s as i64, d as i64]
}
