//! The generators that built-in rules state for their differential tests
//! (`#[verify(generator = ..)]`, see [`crate::selfcheck`]), where the pattern's own
//! generator cannot meet the rule's constraints by chance or where the rule keeps the
//! numbers only on inputs of a kind the module docs name:
//!
//! - masks before a softmax: the rewrite is exact on every row with a visible key;
//!   rows with none are the documented exception ([`crate::rules::attention`]), so the
//!   mask is a constant that keeps key 0 of every row;
//! - the exporters' swap of the last two dims through a 3-D view: reshape targets that
//!   merge the leading dims and swap the last two;
//! - `repeat_kv`'s grouped kv heads: the `unsqueeze`/`expand`/`reshape` chain exactly.

use crate::meta::{DType, TensorMeta};
use crate::selfcheck::Rng;
use crate::{Builder, Graph, GraphError, Tensor};

/// A float dtype and a shape of rank 2 to 4 with small dims.
fn float_and_shape(rng: &mut Rng, min_rank: usize) -> (DType, Vec<usize>) {
    let dtype = rng.pick(&[DType::F32, DType::F64]);
    let rank = rng.range(min_rank as i64, 4) as usize;
    let shape = (0..rank).map(|_| rng.range(2, 4) as usize).collect();
    (dtype, shape)
}

/// A bool constant of `shape` (its last dim the softmax's) whose key 0 is `visible` in
/// every row, the other entries random.
fn mask_keeping_key0(rng: &mut Rng, shape: &[usize], visible: bool) -> Result<Tensor, GraphError> {
    let last = shape.last().copied().unwrap_or(1);
    let n: usize = shape.iter().product();
    let data: Vec<bool> = (0..n)
        .map(|i| {
            if i % last == 0 {
                visible
            } else {
                rng.chance(0.5)
            }
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), data).map_err(|e| GraphError::Signature {
        op: "constant",
        node: None,
        message: e.to_string(),
    })
}

/// A fill that hides a score (at most [`crate::rules::canonical::HIDE_LIMIT`]).
fn hiding_fill(rng: &mut Rng) -> f64 {
    rng.pick(&[-1e4, -1e9, f64::NEG_INFINITY, f32::MIN as f64])
}

/// The softmax dim, the last, counted from either end.
fn last_dim(rng: &mut Rng, rank: usize) -> i64 {
    if rng.chance(0.5) {
        -1
    } else {
        rank as i64 - 1
    }
}

/// Which of the three mask spellings before a softmax.
#[derive(Clone, Copy)]
enum MaskForm {
    MaskedFill,
    WhereKeep,
    WhereHide,
}

fn masked_softmax(seed: u64, form: MaskForm) -> Result<Option<Graph>, GraphError> {
    let mut rng = Rng::new(seed);
    let (dtype, shape) = float_and_shape(&mut rng, 2);
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(dtype, known(&shape)));
    // The mask broadcasts over the leading dims half the time.
    let mshape = if rng.chance(0.5) {
        shape[shape.len() - 2..].to_vec()
    } else {
        shape.clone()
    };
    let visible = matches!(form, MaskForm::WhereKeep);
    let m = g.constant(mask_keeping_key0(&mut rng, &mshape, visible)?);
    let f = hiding_fill(&mut rng);
    let hidden = match form {
        MaskForm::MaskedFill => x.masked_fill(m, f)?,
        MaskForm::WhereKeep => m.where_(x, f)?,
        MaskForm::WhereHide => m.where_(f, x)?,
    };
    let y = hidden.softmax(last_dim(&mut rng, shape.len()))?;
    g.output(&[y])?;
    Ok(Some(g.finish()))
}

/// `masked_fill(x, m, fill).softmax(-1)` with a key visible in every row.
pub(crate) fn masked_fill_softmax(seed: u64) -> Result<Option<Graph>, GraphError> {
    masked_softmax(seed, MaskForm::MaskedFill)
}

/// `where(keep, x, fill).softmax(-1)` with a key visible in every row.
pub(crate) fn where_keep_softmax(seed: u64) -> Result<Option<Graph>, GraphError> {
    masked_softmax(seed, MaskForm::WhereKeep)
}

/// `where(hide, fill, x).softmax(-1)` with a key visible in every row.
pub(crate) fn where_hide_softmax(seed: u64) -> Result<Option<Graph>, GraphError> {
    masked_softmax(seed, MaskForm::WhereHide)
}

/// `reshape(permute(reshape(x, [n, s, d]), [0, 2, 1]), [.., d, s])` for an `x` of rank
/// 3 or 4 (targets with a `-1` now and then).
pub(crate) fn transpose_through_3d(seed: u64) -> Result<Option<Graph>, GraphError> {
    let mut rng = Rng::new(seed);
    let (dtype, shape) = float_and_shape(&mut rng, 3);
    let r = shape.len();
    let (s, d) = (shape[r - 2] as i64, shape[r - 1] as i64);
    let lead: Vec<i64> = shape[..r - 2].iter().map(|&x| x as i64).collect();
    let mut s1 = vec![lead.iter().product::<i64>(), s, d];
    let mut s2 = lead.clone();
    s2.extend([d, s]);
    if rng.chance(0.3) {
        s1[0] = -1;
    }
    if rng.chance(0.3) {
        s2[0] = -1;
    }
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(dtype, known(&shape)));
    let y = x.reshape(&s1)?.permute(&[0, 2, 1])?.reshape(&s2)?;
    g.output(&[y])?;
    Ok(Some(g.finish()))
}

/// `repeat_kv`: `reshape(expand(unsqueeze(x, 2)))`, the kv heads `[b, h, s, d]`
/// repeated `r` times each into `[b, h·r, s, d]`.
fn repeat_kv<'b>(
    rng: &mut Rng,
    x: crate::Var<'b>,
    shape: &[usize; 4],
    r: usize,
) -> Result<crate::Var<'b>, GraphError> {
    let [b, h, s, d] = shape.map(|x| x as i64);
    let dim = if rng.chance(0.5) { 2 } else { -3 };
    let r = r as i64;
    x.unsqueeze(dim)?
        .expand(&[b, h, r, s, d])?
        .reshape(&[b, h * r, s, d])
}

/// Which of the four grouped-kv-heads rules: with a mask, with a scale.
fn grouped_kv(seed: u64, masked: bool, scaled: bool) -> Result<Option<Graph>, GraphError> {
    let mut rng = Rng::new(seed);
    let dtype = rng.pick(&[DType::F32, DType::F64]);
    let [b, h, sq, skv, d] = [0; 5].map(|_| rng.range(1, 3) as usize + 1);
    let r = rng.range(1, 3) as usize;
    let g = Builder::new();
    let q = g.input("q", TensorMeta::new(dtype, [b, h * r, sq, d]));
    let k = g.input("k", TensorMeta::new(dtype, [b, h, skv, d]));
    let v = g.input("v", TensorMeta::new(dtype, [b, h, skv, d]));
    let mask = masked.then(|| g.input("mask", TensorMeta::new(dtype, [sq, skv])));
    let kr = repeat_kv(&mut rng, k, &[b, h, skv, d], r)?;
    let vr = repeat_kv(&mut rng, v, &[b, h, skv, d], r)?;
    let scale = scaled.then(|| rng.pick(&[0.125, 0.5, 1.0, 2.0]));
    let causal = !masked && rng.chance(0.5);
    let y = q.scaled_dot_product_attention_with(kr, vr, mask, 0.0, causal, scale, false)?;
    g.output(&[y])?;
    Ok(Some(g.finish()))
}

/// For `grouped_kv_heads`.
pub(crate) fn grouped_kv_scaled(seed: u64) -> Result<Option<Graph>, GraphError> {
    grouped_kv(seed, false, true)
}

/// For `grouped_kv_heads_masked`.
pub(crate) fn grouped_kv_masked_scaled(seed: u64) -> Result<Option<Graph>, GraphError> {
    grouped_kv(seed, true, true)
}

/// For `grouped_kv_heads_default_scale`.
pub(crate) fn grouped_kv_default(seed: u64) -> Result<Option<Graph>, GraphError> {
    grouped_kv(seed, false, false)
}

/// For `grouped_kv_heads_masked_default_scale`.
pub(crate) fn grouped_kv_masked_default(seed: u64) -> Result<Option<Graph>, GraphError> {
    grouped_kv(seed, true, false)
}

/// A known shape from sizes.
fn known(shape: &[usize]) -> crate::Shape {
    crate::Shape::known(&shape.iter().map(|&d| d as u64).collect::<Vec<_>>())
}

/// Attention whose mask holds the top-left causal triangle, in one of the spellings
/// [`crate::rules::causal`] takes apart: the bool triangle alone or `and` a padding
/// mask (either order), the additive triangle (`where(T, 0, -inf)`) alone or plus an
/// additive padding mask, or hiding with `finfo.min` alone. `Sq` and `Skv` differ now
/// and then (the triangle is top-left aligned).
#[cfg(test)]
pub(crate) fn causal_attention(seed: u64) -> Result<Option<Graph>, GraphError> {
    let mut rng = Rng::new(seed);
    let dtype = rng.pick(&[DType::F32, DType::F64]);
    let [b, h, d] = [0; 3].map(|_| rng.range(1, 3) as usize);
    let sq = rng.range(1, 4) as usize;
    let skv = if rng.chance(0.3) {
        rng.range(2, 5) as usize
    } else {
        sq.max(2)
    };
    let g = Builder::new();
    let q = g.input("q", TensorMeta::new(dtype, [b, h, sq, d]));
    let k = g.input("k", TensorMeta::new(dtype, [b, h, skv, d]));
    let v = g.input("v", TensorMeta::new(dtype, [b, h, skv, d]));
    let tri = g.var(g.tril(g.ones_with(&[sq as i64, skv as i64], DType::Bool)?)?);
    let zero = g.scalar(0.0, dtype);
    let mask = match rng.below(5) {
        0 => tri,
        1 => {
            let pad = g.input("pad", TensorMeta::new(DType::Bool, [b, 1, 1, skv]));
            if rng.chance(0.5) {
                tri.and(pad)?
            } else {
                pad.and(tri)?
            }
        }
        2 => tri.where_(zero, g.scalar(f64::NEG_INFINITY, dtype))?,
        3 => {
            let pad = g.input("pad", TensorMeta::new(dtype, [b, 1, 1, skv]));
            let additive = tri.where_(zero, g.scalar(f64::NEG_INFINITY, dtype))?;
            if rng.chance(0.5) {
                additive.add(pad)?
            } else {
                pad.add(additive)?
            }
        }
        _ => {
            let lowest = if dtype == DType::F32 {
                f32::MIN as f64
            } else {
                f64::MIN
            };
            tri.where_(zero, g.scalar(lowest, dtype))?
        }
    };
    let y = q.scaled_dot_product_attention(k, v, Some(mask))?;
    g.output(&[y])?;
    Ok(Some(g.finish()))
}
