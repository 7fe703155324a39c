//! Canonicalisation: rewrite the many spellings of one computation into one, so that a
//! few attention patterns cover what exporters and model authors write.
//!
//! - layout: `transpose`/`permute` chains fold into one `permute` (dropped when it is the
//!   identity); the exporters' "reshape to 3-D, swap the last two dims, reshape back"
//!   becomes a plain `transpose(-2, -1)`;
//! - scales: division by a scalar becomes multiplication by its inverse; scalar factors
//!   on either operand of a `matmul` move after it; consecutive scalar factors merge (so
//!   `sqrt(scale)` applied to both q and k becomes one `scale` on the scores);
//! - masks: two additive terms on scores that feed a softmax (T5's position bias and
//!   padding mask) become one, so attention patterns see a single mask; scores hidden
//!   by `masked_fill(m, fill)`, `where(keep, x, fill)` or `where(m, fill, x)` before a
//!   softmax, with `fill` `-inf` or a large negative (`finfo.min`, `-1e9`, `-1e4`:
//!   anything at most [`HIDE_LIMIT`]), become `x + where(keep, 0, fill)`, an additive
//!   mask (see [`crate::rules::attention`] for what this means for rows with no
//!   visible key);
//! - dims: a softmax over a dim counted from the front (`softmax(x, 3)` of a 4-D `x`)
//!   is written counted from the end (`softmax(x, -1)`);
//! - softmax: written by hand (`exp(x - amax(x)) / sum(exp(x - amax(x)))`, with or
//!   without the max) becomes `softmax`; a softmax computed in another float precision
//!   (`cast(softmax(cast(x, f32)), f16)`) is computed in `x`'s own (the fused kernels
//!   accumulate in f32 anyway), and a cast to the dtype a value already has goes away;
//! - log-sum-exp: `x - (log(sum(exp(x - m), d, keepdim)) + m)`, with any shift `m`
//!   constant along `d` (the max, torch's guarded max that `ReduceLogSumExp` imports
//!   as, or none at all), is `log_softmax(x, d)`, and `exp(log_softmax(x, d))` is
//!   `softmax(x, d)`; so `exp(x - logsumexp(x, d, keepdim=True))` is a softmax. A
//!   log-sum-exp without its dim (`keepdim=False`) put back by `unsqueeze` at the same
//!   dim is the kept form again (`unsqueeze(squeeze(y, [d]), d)` is `y`);
//! - relative-position scores: a scale after a bias on the scores
//!   (`(q @ kT + bias) * s`, Transformer-XL's content plus shifted position scores) is
//!   applied to each (`q @ kT * s + bias * s`), so the bias is an additive mask;
//! - GELU: `x * (1 + erf(x / sqrt(2)))` with its `0.5` applied elsewhere is twice the
//!   decomposed GELU (`x * 0.5 * (1 + erf(..)) * 2`), which the kernels pass fuses; a
//!   scale by exactly 1 goes;
//! - scales: a scalar factor moves after the layout ops (`reshape`, `transpose`,
//!   `permute`, `unsqueeze`, `expand`) that follow it, so a scale applied to q or k
//!   right after their projection meets the `matmul`.

use crate::rule_set;

/// `perm` with negative entries resolved against `rank`, if it is a permutation.
pub(crate) fn normalized_perm(perm: &[i64], rank: usize) -> Option<Vec<usize>> {
    if perm.len() != rank {
        return None;
    }
    let mut seen = vec![false; rank];
    perm.iter()
        .map(|&p| {
            let p = crate::meta::normalize_axis(p, rank)?;
            (!std::mem::replace(&mut seen[p], true)).then_some(p)
        })
        .collect()
}

/// The permutation a `transpose(dim0, dim1)` performs on a tensor of `rank`.
pub(crate) fn transpose_perm(rank: usize, d0: i64, d1: i64) -> Option<Vec<usize>> {
    let a = crate::meta::normalize_axis(d0, rank)?;
    let b = crate::meta::normalize_axis(d1, rank)?;
    let mut p: Vec<usize> = (0..rank).collect();
    p.swap(a, b);
    Some(p)
}

/// `permute(permute(x, inner), outer)` as one permutation of `x`.
pub(crate) fn compose(inner: &[usize], outer: &[usize]) -> Vec<usize> {
    outer.iter().map(|&o| inner[o]).collect()
}

fn as_i64(p: &[usize]) -> Vec<i64> {
    p.iter().map(|&d| d as i64).collect()
}

fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &d)| i == d)
}

/// True when `perm` (dims possibly negative) is the identity permutation of `rank`.
/// Allocation-free: `identity_permute` runs this at every `permute` node.
fn is_identity_perm(perm: &[i64], rank: usize) -> bool {
    perm.len() == rank
        && perm
            .iter()
            .enumerate()
            .all(|(i, &d)| crate::meta::normalize_axis(d, rank) == Some(i))
}

/// Builds `permute(x, p)`, or returns `x` when `p` is the identity.
fn permute_or_identity<'b>(
    x: crate::Var<'b>,
    p: &[usize],
) -> Result<crate::Var<'b>, crate::GraphError> {
    if is_identity(p) {
        Ok(x)
    } else {
        x.permute(&as_i64(p))
    }
}

/// For `reshape(permute(reshape(x, s1), [0, 2, 1]), s2)` — the exporters' way to swap
/// the last two dims through a 3-D view: when `s1` merges the leading dims of the result
/// into one (`[n, s, d]`) and `s2` is `[.., d, s]` with `n` their product, the shape
/// `[.., s, d]` such that the whole equals `transpose(reshape(x, [.., s, d]), -2, -1)`.
pub(crate) fn transpose_split_shape(numel: u64, s1: &[i64], s2: &[i64]) -> Option<Vec<i64>> {
    let s1 = resolve_reshape(numel, s1)?;
    let s2 = resolve_reshape(numel, s2)?;
    if s1.len() != 3 || s2.len() < 3 {
        return None;
    }
    let (n, s, d) = (s1[0], s1[1], s1[2]);
    let lead = &s2[..s2.len() - 2];
    if s2[s2.len() - 2..] != [d, s] || lead.iter().product::<i64>() != n {
        return None;
    }
    let mut shape = lead.to_vec();
    shape.extend([s, d]);
    Some(shape)
}

/// True when `y = reshape(permute(v, [0, 2, 1]))` with `v = reshape(x)` swaps the last
/// two dims of `x`: `x` is `[.., s, d]`, `v` is `[n, s, d]` with `n` the product of
/// `x`'s leading dims, and `y` is `[.., d, s]`. Read from the metadata, so it holds at
/// symbolic shapes (where the reshape targets are shape arithmetic) too.
fn swaps_last_two_in_3d(
    x: &crate::pattern::TensorRef<'_>,
    v: &crate::pattern::TensorRef<'_>,
    y: &crate::pattern::TensorRef<'_>,
) -> bool {
    let r = x.rank();
    if r < 3 || v.rank() != 3 || y.rank() != r {
        return false;
    }
    let (xd, vd, yd) = (
        x.meta().shape.dims(),
        v.meta().shape.dims(),
        y.meta().shape.dims(),
    );
    let lead = xd[..r - 2]
        .iter()
        .try_fold(crate::meta::SymExpr::int(1), |acc, d| acc.mul(&d.to_expr()))
        .and_then(crate::meta::Dim::from_expr);
    lead.as_ref() == Some(&vd[0])
        && vd[1..] == xd[r - 2..]
        && yd[..r - 2] == xd[..r - 2]
        && yd[r - 2] == xd[r - 1]
        && yd[r - 1] == xd[r - 2]
}

/// A reshape target with its `-1` resolved against `numel`.
fn resolve_reshape(numel: u64, shape: &[i64]) -> Option<Vec<i64>> {
    let known: i64 = shape.iter().filter(|&&d| d != -1).product();
    let mut out = shape.to_vec();
    if let Some(i) = shape.iter().position(|&d| d == -1) {
        if known <= 0 || numel as i64 % known != 0 {
            return None;
        }
        out[i] = numel as i64 / known;
    }
    (out.iter().all(|&d| d >= 0) && out.iter().product::<i64>() == numel as i64).then_some(out)
}

/// True when `v` is finite once stored in the float dtype `dtype`.
fn finite_in(v: f64, dtype: crate::DType) -> bool {
    let max = match dtype {
        crate::DType::F16 => 65504.0,
        crate::DType::BF16 => 3.389_531_389_251_535_5e38,
        crate::DType::F32 => f64::from(f32::MAX),
        _ => f64::MAX,
    };
    v.abs() <= max
}

/// The largest fill value that hides a score: a masked score of at most this much
/// gives `exp(fill - max) == 0` in every float dtype for any reasonable score.
pub const HIDE_LIMIT: f64 = -1e4;

/// True when `fill` hides the scores it replaces before a softmax.
fn hides(fill: f64) -> bool {
    fill <= HIDE_LIMIT
}

/// True when `dims` is one dim of `x`, the last.
fn is_last_dim(x: &crate::pattern::TensorRef<'_>, dims: &[i64]) -> bool {
    let r = x.rank();
    matches!(dims, [d] if crate::meta::normalize_axis(*d, r) == Some(r.wrapping_sub(1)))
}

/// `softmax(x, dims[0])` with the dim counted from the end.
fn softmax_over<'b>(x: crate::Var<'b>, dims: &[i64]) -> Result<crate::Var<'b>, crate::GraphError> {
    let r = x.meta()?.rank() as i64;
    let d = dims.first().copied().unwrap_or(-1);
    x.softmax(if d >= 0 { d - r } else { d })
}

/// True when `y = x - (log(sum(exp(x - m), d, keepdim)) + m)` is `log_softmax(x, d)`:
/// `x` is float, `d` is one dim of it, `m` is constant along `d` (a dim of 1 there, or
/// no such dim once aligned from the end), and `y` has `x`'s shape (so `m` broadcast
/// no dim of `x`). Then `log(sum(exp(x - m))) + m` is `logsumexp(x, d)` whatever `m`.
fn is_log_softmax_by_hand(
    x: &crate::pattern::TensorRef<'_>,
    m: &crate::pattern::TensorRef<'_>,
    d: &[i64],
    y: &crate::pattern::TensorRef<'_>,
) -> bool {
    let r = x.rank();
    let [d] = d else {
        return false;
    };
    let Some(d) = crate::meta::normalize_axis(*d, r) else {
        return false;
    };
    if !x.dtype().is_float() || m.rank() > r || y.meta().shape != x.meta().shape {
        return false;
    }
    let off = r - m.rank();
    d < off || m.meta().shape.dims()[d - off].known() == Some(1)
}

/// True when `unsqueeze(squeeze(y, dims), dim)` is `y`: `dims` is one dim of `y`, of
/// size 1, and `dim` puts it back where it was.
fn unsqueeze_restores(y: &crate::pattern::TensorRef<'_>, dims: &[i64], dim: i64) -> bool {
    let r = y.rank();
    let [d] = dims else {
        return false;
    };
    match (
        crate::meta::normalize_axis(*d, r),
        crate::meta::normalize_axis(dim, r),
    ) {
        (Some(a), Some(b)) => a == b && y.meta().shape.dims()[a].known() == Some(1),
        _ => false,
    }
}

/// `log_softmax(x, dims[0])` with the dim counted from the end.
fn log_softmax_over<'b>(
    x: crate::Var<'b>,
    dims: &[i64],
) -> Result<crate::Var<'b>, crate::GraphError> {
    let r = x.meta()?.rank() as i64;
    let d = dims.first().copied().unwrap_or(-1);
    x.log_softmax(if d >= 0 { d - r } else { d })
}

/// `x + where(keep, 0, fill)` in `x`'s dtype: scores with an additive mask.
fn add_hiding<'b>(
    b: &'b crate::Builder,
    x: crate::Var<'b>,
    keep: crate::Var<'b>,
    fill: f64,
) -> Result<crate::Var<'b>, crate::GraphError> {
    let dt = x.meta()?.dtype;
    let mask = keep.where_(b.scalar(0.0, dt), b.scalar(fill, dt))?;
    x.add(mask)
}

rule_set! {
    /// Layout and scale canonicalisation (see the module docs).
    pub static CANONICAL;

    rule transpose_transpose(x: Tensor, a: i64, b: i64, c: i64, d: i64) -> Tensor {
        x.transpose(a, b).transpose(c, d)
    } => {
        let rank = x.meta()?.rank();
        match (transpose_perm(rank, a, b), transpose_perm(rank, c, d)) {
            (Some(p), Some(q)) => permute_or_identity(x, &compose(&p, &q))?,
            _ => x.transpose(a, b)?.transpose(c, d)?,
        }
    }

    rule transpose_of_permute(x: Tensor, p: Vec<i64>, a: i64, b: i64) -> Tensor {
        x.permute(p).transpose(a, b)
    } => {
        let rank = x.meta()?.rank();
        match (normalized_perm(&p, rank), transpose_perm(rank, a, b)) {
            (Some(p), Some(q)) => permute_or_identity(x, &compose(&p, &q))?,
            _ => x.permute(&p)?.transpose(a, b)?,
        }
    }

    rule permute_of_transpose(x: Tensor, a: i64, b: i64, p: Vec<i64>) -> Tensor {
        x.transpose(a, b).permute(p)
    } => {
        let rank = x.meta()?.rank();
        match (transpose_perm(rank, a, b), normalized_perm(&p, rank)) {
            (Some(t), Some(q)) => permute_or_identity(x, &compose(&t, &q))?,
            _ => x.transpose(a, b)?.permute(&p)?,
        }
    }

    rule permute_permute(x: Tensor, p: Vec<i64>, q: Vec<i64>) -> Tensor {
        x.permute(p).permute(q)
    } => {
        let rank = x.meta()?.rank();
        match (normalized_perm(&p, rank), normalized_perm(&q, rank)) {
            (Some(p), Some(q)) => permute_or_identity(x, &compose(&p, &q))?,
            _ => x.permute(&p)?.permute(&q)?,
        }
    }

    // The first check is implied by the second (a `permute`'s dims are as many as its
    // operand's rank) and reads `p` alone, so it runs as soon as the attribute is bound:
    // the permutes that are not the identity (every one, in a real model) fail without
    // the operand being matched or its metadata read.
    rule identity_permute(x: Tensor, p: Vec<i64>) -> Tensor
    where check(|p| is_identity_perm(&p, p.len())), check(|x, p| is_identity_perm(&p, x.rank()))
    {
        x.permute(p)
    } => {
        x
    }

    #[verify(generator = crate::rules::generators::transpose_through_3d)]
    rule reshape_transpose_reshape(x: Tensor, s1: Vec<i64>, p: Vec<i64>, s2: Vec<i64>) -> Tensor
    where check(|x, s1, p, s2| p[..] == [0, 2, 1]
        && x.meta().shape.numel().and_then(|n| transpose_split_shape(n, &s1, &s2)).is_some())
    {
        x.reshape(s1).permute(p).reshape(s2)
    } => {
        let numel = x.meta()?.shape.numel().unwrap_or(0);
        match transpose_split_shape(numel, &s1, &s2) {
            Some(shape) => x.reshape(&shape)?.transpose(-2, -1)?,
            None => x.reshape(&s1)?.permute(&p)?.reshape(&s2)?,
        }
    }

    // The same swap at symbolic shapes, where both reshape targets are shape arithmetic
    // (dynamo's `k.transpose(-2, -1)` over a cache of symbolic length): read from the
    // metadata of `x`, the 3-D view and the result instead.
    #[overlap]
    #[verify(generator = crate::rules::generators::transpose_through_3d)]
    rule reshape_transpose_reshape_symbolic(x: Tensor, p: Vec<i64>) -> Tensor
    where check(|p| p[..] == [0, 2, 1]), check(|x, v, y| swaps_last_two_in_3d(&x, &v, &y))
    {
        let v = x.reshape(_);
        let y = v.permute(p).reshape(_);
        y
    } => {
        x.transpose(-2, -1)?
    }

    // `1 / s` must be finite in `x`'s dtype: dividing an f16 value by 1e-5 is finite
    // where multiplying by 1e5 is not (found by the rule's own test).
    rule div_by_scalar(x: Tensor, s: f64) -> Tensor
    where s != 0.0, check(|x, s| x.dtype().is_float() && finite_in(1.0 / s, x.dtype()))
    {
        x.div(s)
    } => {
        x.mul(1.0 / s)?
    }

    rule matmul_scaled_lhs(a: Tensor, b: Tensor, s: f64) -> Tensor where check(|a| a.dtype().is_float()) {
        a.mul(s).matmul(b)
    } => {
        a.matmul(b)?.mul(s)?
    }

    #[overlap]
    rule matmul_scaled_rhs(a: Tensor, b: Tensor, s: f64) -> Tensor where check(|a| a.dtype().is_float()) {
        a.matmul(b.mul(s))
    } => {
        a.matmul(b)?.mul(s)?
    }

    rule mul_mul_scalars(x: Tensor, s: f64, t: f64) -> Tensor where check(|x| x.dtype().is_float()) {
        x.mul(s).mul(t)
    } => {
        x.mul(s * t)?
    }

    // A scale of exactly 1 (what `mul_mul_scalars` leaves of `* 2 * 0.5`) goes, where
    // it broadcasts nothing: `x * 1` is `x` to the bit.
    rule mul_by_one(x: Tensor) -> Tensor
    where check(|x, y| x.dtype().is_float() && y.meta() == x.meta())
    {
        let y = x.mul(1.0);
        y
    } => {
        x
    }

    // GELU with its `0.5` applied elsewhere (TorchScript's ELECTRA and GPT-NeoX write
    // `x * (1 + erf(x / sqrt(2)))` and halve after the next `matmul`): twice the
    // decomposed GELU, which the kernels pass fuses, the `2` moving on to meet the `0.5`.
    // Scaling by 0.5 and by 2 is exact, so the value is the same to the bit. The full
    // spelling `x * (1 + erf(..)) * 0.5` becomes `x * 0.5 * (1 + erf(..)) * 1`, and
    // `mul_by_one` ends it.
    rule gelu_erf_unhalved(x: Tensor) -> Tensor where check(|x| x.dtype().is_float()) {
        let e = (x.div(1.4142135623730951) | x.mul(0.7071067811865476)).erf().add(1.0);
        x.mul(e)
    } => {
        let e = x.mul(0.7071067811865476)?.erf()?.add(1.0)?;
        x.mul(0.5)?.mul(e)?.mul(2.0)?
    }

    rule scores_two_masks(a: Tensor, b: Tensor, m1: Tensor, m2: Tensor, d: i64) -> Tensor
    where check(|a, m1, m2| a.dtype().is_float() && m1.dtype() == a.dtype() && m2.dtype() == a.dtype())
    {
        a.matmul(b).add(m1).add(m2).softmax(d)
    } => {
        a.matmul(b)?.add(m1.add(m2)?)?.softmax(d)?
    }

    rule scaled_scores_two_masks(a: Tensor, b: Tensor, s: f64, m1: Tensor, m2: Tensor, d: i64) -> Tensor
    where check(|a, m1, m2| a.dtype().is_float() && m1.dtype() == a.dtype() && m2.dtype() == a.dtype())
    {
        a.matmul(b).mul(s).add(m1).add(m2).softmax(d)
    } => {
        a.matmul(b)?.mul(s)?.add(m1.add(m2)?)?.softmax(d)?
    }

    // `d >= 0` reads `d` alone, so it fails as soon as the attribute is bound (the usual
    // `dim = -1`), before the operand is matched.
    rule softmax_dim_from_front(x: Tensor, d: i64) -> Tensor
    where d >= 0, check(|x, d| (d as usize) < x.rank())
    {
        x.softmax(d)
    } => {
        let r = x.meta()?.rank() as i64;
        x.softmax(d - r)?
    }

    rule softmax_by_hand(x: Tensor, d1: Vec<i64>, d2: Vec<i64>) -> Tensor
    where check(|x, d1, d2| x.dtype().is_float() && d1.len() == 1 && d2.len() == 1
        && crate::meta::normalize_axis(d1[0], x.rank()).is_some()
        && crate::meta::normalize_axis(d1[0], x.rank()) == crate::meta::normalize_axis(d2[0], x.rank()))
    {
        let e = x.sub(x.amax(d1, true)).exp();
        e.div(e.sum(d2, true))
    } => {
        softmax_over(x, &d1)?
    }

    rule softmax_by_hand_no_max(x: Tensor, d: Vec<i64>) -> Tensor
    where check(|x, d| x.dtype().is_float() && is_last_dim(&x, &d))
    {
        let e = x.exp();
        e.div(e.sum(d, true))
    } => {
        x.softmax(-1)?
    }

    // `m` is any shift constant along `d`: the max (`amax`, `max(..).values`), torch's
    // guarded max (`where(|max| == inf, 0, max)`, what `ReduceLogSumExp` imports as), or
    // a detached max; the check reads its shape, not how it was made.
    rule log_softmax_by_hand(x: Tensor, m: Tensor, d: Vec<i64>) -> Tensor
    where check(|x, m, d, y| is_log_softmax_by_hand(&x, &m, &d, &y))
    {
        let y = x.sub(x.sub(m).exp().sum(d, true).log().add(m));
        y
    } => {
        log_softmax_over(x, &d)?
    }

    // Without a shift: `x - log(sum(exp(x)))`.
    rule log_softmax_by_hand_no_shift(x: Tensor, d: Vec<i64>) -> Tensor
    where check(|x, d, y| x.dtype().is_float() && d.len() == 1
        && crate::meta::normalize_axis(d[0], x.rank()).is_some()
        && y.meta().shape == x.meta().shape)
    {
        let y = x.sub(x.exp().sum(d, true).log());
        y
    } => {
        log_softmax_over(x, &d)?
    }

    rule exp_of_log_softmax(x: Tensor, d: i64) -> Tensor {
        x.log_softmax(d).exp()
    } => {
        x.softmax(d)?
    }

    rule unsqueeze_of_squeeze(y: Tensor, dims: Vec<i64>, d: i64) -> Tensor
    where check(|y, dims, d| unsqueeze_restores(&y, &dims, d))
    {
        y.squeeze(dims).unsqueeze(d)
    } => {
        y
    }

    // Transformer-XL: `(content + position) * scale`, masked or not, before a softmax.
    // `#[overlap]`: scores plus a mask that is itself such a scaled sum match
    // `scores_two_masks` too; either rewrite keeps the value, and this one runs again on
    // the merged mask.
    #[overlap]
    rule scale_after_score_bias(a: Tensor, b: Tensor, bias: Tensor, s: f64, mask: Option<Tensor>, d: i64) -> Tensor
    where check(|a, bias| a.dtype().is_float() && bias.dtype() == a.dtype())
    {
        a.matmul(b).add(bias).mul(s).add(mask?).softmax(d)
    } => {
        let bias = bias.mul(s)?;
        let bias = match mask {
            Some(mask) => bias.add(mask)?,
            None => bias,
        };
        a.matmul(b)?.mul(s)?.add(bias)?.softmax(d)?
    }

    // Computing in `x`'s own precision changes the rounding when the other precision
    // is narrower (bf16: 3 significant digits), hence the tolerance.
    #[verify(tol = 3e-2)]
    rule softmax_in_other_precision(x: Tensor, wide: DType, d: i64, back: DType) -> Tensor
    where check(|x, wide, back| x.dtype() == back && x.dtype().is_float() && wide.is_float())
    {
        x.cast(wide).softmax(d).cast(back)
    } => {
        x.softmax(d)?
    }

    rule cast_to_own_dtype(x: Tensor, t: DType) -> Tensor
    where check(|x, t| x.dtype() == t)
    {
        x.cast(t)
    } => {
        x
    }

    // Exact on rows with a visible key; a row with none is the documented exception
    // (`rules::attention`), so the generator keeps one.
    #[verify(generator = crate::rules::generators::masked_fill_softmax)]
    rule masked_fill_before_softmax(x: Tensor, m: Tensor, f: f64, d: i64) -> Tensor
    where check(|x, m, f| x.dtype().is_float() && m.dtype() == crate::DType::Bool && hides(f))
    {
        x.masked_fill(m, f).softmax(d)
    } => {
        add_hiding(b, x, m.not()?, f)?.softmax(d)?
    }

    #[verify(generator = crate::rules::generators::where_keep_softmax)]
    rule where_keep_before_softmax(x: Tensor, m: Tensor, f: f64, d: i64) -> Tensor
    where check(|x, m, f| x.dtype().is_float() && m.dtype() == crate::DType::Bool && hides(f))
    {
        m.where_(x, f).softmax(d)
    } => {
        add_hiding(b, x, m, f)?.softmax(d)?
    }

    #[overlap]
    #[verify(generator = crate::rules::generators::where_hide_softmax)]
    rule where_hide_before_softmax(x: Tensor, m: Tensor, f: f64, d: i64) -> Tensor
    where check(|x, m, f| x.dtype().is_float() && m.dtype() == crate::DType::Bool && hides(f))
    {
        m.where_(f, x).softmax(d)
    } => {
        add_hiding(b, x, m.not()?, f)?.softmax(d)?
    }

    rule scale_after_reshape(x: Tensor, s: f64, shape: Vec<i64>) -> Tensor
    where check(|x| x.dtype().is_float() && x.rank() >= 1)
    {
        x.mul(s).reshape(shape)
    } => {
        x.reshape(&shape)?.mul(s)?
    }

    rule scale_after_transpose(x: Tensor, s: f64, a: i64, c: i64) -> Tensor
    where check(|x| x.dtype().is_float() && x.rank() >= 1)
    {
        x.mul(s).transpose(a, c)
    } => {
        x.transpose(a, c)?.mul(s)?
    }

    rule scale_after_permute(x: Tensor, s: f64, p: Vec<i64>) -> Tensor
    where check(|x| x.dtype().is_float() && x.rank() >= 1)
    {
        x.mul(s).permute(p)
    } => {
        x.permute(&p)?.mul(s)?
    }

    rule scale_after_unsqueeze(x: Tensor, s: f64, d: i64) -> Tensor
    where check(|x| x.dtype().is_float() && x.rank() >= 1)
    {
        x.mul(s).unsqueeze(d)
    } => {
        x.unsqueeze(d)?.mul(s)?
    }

    rule scale_after_expand(x: Tensor, s: f64, size: Vec<i64>) -> Tensor
    where check(|x| x.dtype().is_float() && x.rank() >= 1)
    {
        x.mul(s).expand(size)
    } => {
        x.expand(&size)?.mul(s)?
    }

    rule not_not(x: Tensor) -> Tensor {
        x.not().not()
    } => {
        x
    }
}
