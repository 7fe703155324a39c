//! Attention fusion: after [`super::canonical`], an attention block is
//! `softmax(q @ kᵀ [* scale] [+ mask], -1) @ v`, possibly with the exporters' guard
//! `where(isnan(p), 0, p)` on the probabilities. One rule with optional parts
//! (`mul(s?)`, `add(mask?)`, `opt(p, |p| ..)`) matches every form; each becomes one
//! `scaled_dot_product_attention(q, k, v, mask, scale)` node, with `k` recovered as
//! `kᵀ.transpose(-2, -1)` (canonicalisation then folds that transpose into the layout
//! ops that made `kᵀ`). A missing scale is a scale of 1 (T5 scales nothing). Grouped
//! kv heads written as `reshape(expand(unsqueeze(k, 2)))` (transformers' `repeat_kv`)
//! become `enable_gqa` on the fused node, so k and v are never materialised per head;
//! at symbolic shapes too (batch, new tokens, cache length), where the expand and
//! reshape targets are shape arithmetic: the rules read the shapes, not the targets.
//!
//! Semantics kept: the fused op gives zeros for query rows whose keys are all masked
//! with `-inf`, which is what the guarded form computes; an additive mask of large
//! finite negatives (eager exports) is computed exactly as before.
//!
//! Semantics changed, on purpose:
//! - **Fully masked rows of the unguarded forms.** Without the NaN guard, a query row
//!   whose keys are all masked with `-inf` is `softmax` of all `-inf`, which is NaN,
//!   and the block's output row is NaN. The fused node gives zeros for that row (the
//!   guarded form's value, and what SDPA kernels compute). So fusing an unguarded form
//!   turns a NaN row into zeros; every other row is unchanged.
//! - **Finite fills written with `masked_fill`/`where`.** Canonicalisation turns
//!   `masked_fill(x, m, fill)` before a softmax into `x + where(m, fill, 0)`. For any
//!   row with at least one visible key both give exactly zero weight to the hidden
//!   keys (`exp(fill - max)` underflows for `fill <= -1e4`); a row with no visible key
//!   averages `v` uniformly in the original and weights it by `softmax(x)` after.
//!   Such rows only exist for fully padded queries, whose outputs nothing reads.
//!
//! Grouped heads come in three spellings, all one fused node with `enable_gqa`: kv
//! heads repeated by `repeat_kv` (`unsqueeze`/`expand`/`reshape`, below), a
//! `matmul` that broadcasts one kv head (multi-query), and grouped queries viewed as
//! `[.., Hkv, G, S, D]` against `[.., Hkv, 1, S, D]` keys (see `attention_shapes`).

use crate::rule_set;
use crate::{GraphError, Var};

/// Checks shared by every attention rule: q, kᵀ and v of one rank >= 3 and one float
/// dtype, the contraction dims agree, the batch dims (before the heads) are the same,
/// k and v have one head count, and the query heads are either as many or a multiple
/// of them (then the fused node groups them, `enable_gqa`: what a broadcasting
/// `matmul` over one kv head, or over grouped `[.., Hkv, G, S, D]` queries, computes).
/// A head count it cannot prove compatible (say, 4 query heads over 3 kv heads, or
/// symbolic counts that differ) refuses the match instead of failing the replacement.
fn attention_shapes(
    q: &crate::pattern::TensorRef<'_>,
    kt: &crate::pattern::TensorRef<'_>,
    v: &crate::pattern::TensorRef<'_>,
) -> bool {
    let r = q.rank();
    let base = r >= 3
        && kt.rank() == r
        && v.rank() == r
        && q.dtype().is_float()
        && kt.dtype() == q.dtype()
        && v.dtype() == q.dtype()
        && q.dim(-1) == kt.dim(-2)
        && kt.dim(-1) == v.dim(-2);
    if !base {
        return false;
    }
    let (qd, kd, vd) = (&q.meta().shape.0, &kt.meta().shape.0, &v.meta().shape.0);
    if qd[..r - 3] != kd[..r - 3] || qd[..r - 3] != vd[..r - 3] || kd[r - 3] != vd[r - 3] {
        return false;
    }
    heads_grouping(&qd[r - 3], &kd[r - 3]).is_some()
}

/// `Some(false)` when q and k have the same head count, `Some(true)` when the kv heads
/// are a known divisor of the query heads (grouped heads), else `None`.
fn heads_grouping(hq: &crate::meta::Dim, hk: &crate::meta::Dim) -> Option<bool> {
    if hq == hk {
        return Some(false);
    }
    match (hq.known(), hk.known()) {
        (Some(hq), Some(hk)) if hk > 0 && hq % hk == 0 => Some(true),
        _ => None,
    }
}

/// The fused node (`enable_gqa` when k has fewer heads than q; [`attention_shapes`]
/// has checked they divide).
fn fused<'b>(
    q: Var<'b>,
    kt: Var<'b>,
    v: Var<'b>,
    mask: Option<Var<'b>>,
    scale: f64,
) -> Result<Var<'b>, GraphError> {
    let (qm, km) = (q.meta()?, kt.meta()?);
    let r = qm.rank();
    let gqa = r >= 3 && heads_grouping(&qm.shape.0[r - 3], &km.shape.0[r - 3]) == Some(true);
    let k = kt.transpose(-2, -1)?;
    q.scaled_dot_product_attention_with(k, v, mask, 0.0, false, Some(scale), gqa)
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

    // `repeat_kv` is read from the metadata of its three nodes (see
    // [`repeats_kv_heads`]), not from their attributes: at symbolic shapes the expand
    // and reshape targets are shape arithmetic (`AttrValue::Dims`), which binds no
    // `Vec<i64>` parameter, so they are matched with `_`.
    #[verify(generator = crate::rules::generators::grouped_kv_masked_scaled)]
    rule grouped_kv_heads_masked(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kd: i64, vd: i64, c: bool, s: f64) -> Tensor
    where check(|k, kd, kx, kr| repeats_kv_heads(&k, kd, &kx, &kr)),
        check(|k, v, vd, vx, vr| same_heads(&k, &v) && repeats_kv_heads(&v, vd, &vx, &vr))
    {
        let kx = k.unsqueeze(kd).expand(_);
        let kr = kx.reshape(_);
        let vx = v.unsqueeze(vd).expand(_);
        let vr = vx.reshape(_);
        q.scaled_dot_product_attention(kr, vr, mask, 0.0, c, s, false)
    } => {
        q.scaled_dot_product_attention_with(k, v, Some(mask), 0.0, c, Some(s), true)?
    }

    #[verify(generator = crate::rules::generators::grouped_kv_scaled)]
    rule grouped_kv_heads(q: Tensor, k: Tensor, v: Tensor, kd: i64, vd: i64, c: bool, s: f64) -> Tensor
    where check(|k, kd, kx, kr| repeats_kv_heads(&k, kd, &kx, &kr)),
        check(|k, v, vd, vx, vr| same_heads(&k, &v) && repeats_kv_heads(&v, vd, &vx, &vr))
    {
        let kx = k.unsqueeze(kd).expand(_);
        let kr = kx.reshape(_);
        let vx = v.unsqueeze(vd).expand(_);
        let vr = vx.reshape(_);
        q.scaled_dot_product_attention(kr, vr, None, 0.0, c, s, false)
    } => {
        q.scaled_dot_product_attention_with(k, v, None, 0.0, c, Some(s), true)?
    }

    // The two above with the scale unset (1/sqrt(head dim)): the builder's default and
    // an imported ONNX `Attention` without `scale`. `#[overlap]`: a `f64` parameter never
    // binds an unset attribute, so no node matches both.
    #[overlap]
    #[verify(generator = crate::rules::generators::grouped_kv_masked_default)]
    rule grouped_kv_heads_masked_default_scale(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kd: i64, vd: i64, c: bool) -> Tensor
    where check(|k, kd, kx, kr| repeats_kv_heads(&k, kd, &kx, &kr)),
        check(|k, v, vd, vx, vr| same_heads(&k, &v) && repeats_kv_heads(&v, vd, &vx, &vr))
    {
        let kx = k.unsqueeze(kd).expand(_);
        let kr = kx.reshape(_);
        let vx = v.unsqueeze(vd).expand(_);
        let vr = vx.reshape(_);
        q.scaled_dot_product_attention(kr, vr, mask, 0.0, c, None, false)
    } => {
        q.scaled_dot_product_attention_with(k, v, Some(mask), 0.0, c, None, true)?
    }

    #[overlap]
    #[verify(generator = crate::rules::generators::grouped_kv_default)]
    rule grouped_kv_heads_default_scale(q: Tensor, k: Tensor, v: Tensor, kd: i64, vd: i64, c: bool) -> Tensor
    where check(|k, kd, kx, kr| repeats_kv_heads(&k, kd, &kx, &kr)),
        check(|k, v, vd, vx, vr| same_heads(&k, &v) && repeats_kv_heads(&v, vd, &vx, &vr))
    {
        let kx = k.unsqueeze(kd).expand(_);
        let kr = kx.reshape(_);
        let vx = v.unsqueeze(vd).expand(_);
        let vr = vx.reshape(_);
        q.scaled_dot_product_attention(kr, vr, None, 0.0, c, None, false)
    } => {
        q.scaled_dot_product_attention_with(k, v, None, 0.0, c, None, true)?
    }
}

/// True when `repeated = reshape(expanded)`, `expanded = expand(unsqueeze(x, dim))` is
/// transformers' `repeat_kv` (or `repeat_interleave` over the heads): `x` is
/// `[.., h, s, d]`, the unsqueeze puts the new dim right after the heads, the expand
/// `[.., h, r, s, d]` grows that dim only, and the reshape `[.., h·r, s, d]` merges it
/// into the heads, so query head `i` reads kv head `i / r` — exactly `enable_gqa`'s
/// grouping.
///
/// Read from the metadata, which holds at symbolic shapes too (batch, cache length):
/// an expand and a reshape are fixed by their operand's and their output's shapes, so
/// their targets (shape arithmetic there) need not be read. The unsqueeze's position is
/// read from its attribute, as a dim of 1 elsewhere could look the same.
fn repeats_kv_heads(
    x: &crate::pattern::TensorRef<'_>,
    dim: i64,
    expanded: &crate::pattern::TensorRef<'_>,
    repeated: &crate::pattern::TensorRef<'_>,
) -> bool {
    let r = x.rank();
    if r < 3
        || crate::meta::normalize_axis(dim, r + 1) != Some(r - 2)
        || expanded.rank() != r + 1
        || repeated.rank() != r
    {
        return false;
    }
    let (xd, ed, rd) = (
        x.meta().shape.dims(),
        expanded.meta().shape.dims(),
        repeated.meta().shape.dims(),
    );
    let heads = xd[r - 3]
        .to_expr()
        .mul(&ed[r - 2].to_expr())
        .and_then(crate::meta::Dim::from_expr);
    // Every dim of `x` kept by the expand and by the reshape, but the heads by the
    // reshape, which are `h·r`.
    ed[..r - 2] == xd[..r - 2]
        && ed[r - 1..] == xd[r - 2..]
        && rd[..r - 3] == xd[..r - 3]
        && rd[r - 2..] == xd[r - 2..]
        && heads.as_ref() == Some(&rd[r - 3])
}

/// True when k and v have one head count (what `enable_gqa` groups both by).
fn same_heads(k: &crate::pattern::TensorRef<'_>, v: &crate::pattern::TensorRef<'_>) -> bool {
    k.rank() >= 3 && k.dim(-3).is_some() && k.dim(-3) == v.dim(-3)
}
