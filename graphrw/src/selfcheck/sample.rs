//! Values the generator draws: attribute values that fit an op and its operands'
//! shapes (axes within the rank, permutations, reshape and expand targets that hold the
//! element count), scalar parameters (plain numbers, sizes and their inverses, the large
//! negatives masks hide with), and the random inputs the graphs run on.

use super::Rng;
use crate::meta::{DType, TensorMeta};
use crate::ops::{AttrKind, AttrSpec, AttrValue, Op, OpDef};
use crate::{GraphError, Tensor};

/// The float dtypes a generated graph computes in.
pub(super) const FLOATS: [DType; 2] = [DType::F32, DType::F64];

/// With [`super::Config::half`], the half types too (a third of the graphs).
pub(super) const WITH_HALF: [DType; 6] = [
    DType::F32,
    DType::F32,
    DType::F64,
    DType::F64,
    DType::F16,
    DType::BF16,
];

/// The dtypes a `DType` parameter (a `cast` target) is drawn from.
const CAST_TARGETS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// Numbers a float parameter often is in real rules: identities, small factors,
/// epsilons. (Not the large negatives masks hide with: as scales they make any two
/// roundings differ by more than a tolerance can say; the mask rules state their own
/// generators.)
const SPECIAL_FLOATS: [f64; 10] = [0.0, 1.0, -1.0, 2.0, 0.5, 3.0, 0.125, 1e-5, 1e-6, 0.044715];

/// The known dims of `meta` (1 where symbolic: generated graphs have none).
fn dims(meta: &TensorMeta) -> Vec<u64> {
    meta.shape
        .dims()
        .iter()
        .map(|d| d.known().unwrap_or(1))
        .collect()
}

/// An axis of a tensor of rank `r`, counted from the front or the back.
pub(super) fn axis(rng: &mut Rng, r: usize) -> i64 {
    let r = r.max(1) as i64;
    rng.range(-r, r - 1)
}

/// A float parameter: a plain number, a special one, or a size of the graph (or its
/// inverse: `sum / n` is a mean).
pub(super) fn float(rng: &mut Rng, sizes: &[u64]) -> f64 {
    match rng.below(10) {
        0..=3 => (rng.uniform(-2.0, 2.0) * 1000.0).round() / 1000.0,
        4..=6 => rng.pick(&SPECIAL_FLOATS),
        _ => {
            let n = if sizes.is_empty() {
                2
            } else {
                rng.pick(sizes).max(1)
            };
            if rng.chance(0.5) {
                n as f64
            } else {
                1.0 / n as f64
            }
        }
    }
}

/// An int parameter that is not an axis: small, either sign.
fn small_int(rng: &mut Rng) -> i64 {
    rng.range(-2, 3)
}

/// A permutation of `0..r` (the identity a quarter of the time), some entries written
/// counted from the back.
fn permutation(rng: &mut Rng, r: usize) -> Vec<i64> {
    let mut p: Vec<i64> = (0..r as i64).collect();
    if !rng.chance(0.25) {
        for i in (1..r).rev() {
            p.swap(i, rng.below(i + 1));
        }
    }
    if rng.chance(0.2) {
        for d in &mut p {
            if rng.chance(0.5) {
                *d -= r as i64;
            }
        }
    }
    p
}

/// A reshape target for `shape`: the same shape, two neighbours merged, a dim split,
/// a 1 inserted, or everything flattened; one entry `-1` a third of the time.
fn reshape_target(rng: &mut Rng, shape: &[u64]) -> Vec<i64> {
    let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let r = s.len();
    let mut out = match rng.below(5) {
        1 if r >= 2 => {
            let i = rng.below(r - 1);
            let mut o = s[..i].to_vec();
            o.push(s[i] * s[i + 1]);
            o.extend(&s[i + 2..]);
            o
        }
        2 => match s.iter().position(|&d| d == 4 || d == 6) {
            Some(i) => {
                let mut o = s[..i].to_vec();
                o.extend([2, s[i] / 2]);
                o.extend(&s[i + 1..]);
                o
            }
            None => s.clone(),
        },
        3 => {
            let mut o = s.clone();
            o.insert(rng.below(r + 1), 1);
            o
        }
        4 => vec![s.iter().product()],
        _ => s.clone(),
    };
    if !out.is_empty() && rng.chance(0.33) {
        let i = rng.below(out.len());
        out[i] = -1;
    }
    out
}

/// An expand target for `shape`: dims of 1 grown, others kept (`-1` now and then), and
/// sometimes a new leading dim.
fn expand_target(rng: &mut Rng, shape: &[u64]) -> Vec<i64> {
    let mut out: Vec<i64> = shape
        .iter()
        .map(|&d| {
            if d == 1 && rng.chance(0.6) {
                rng.range(2, 4)
            } else if rng.chance(0.3) {
                -1
            } else {
                d as i64
            }
        })
        .collect();
    if rng.chance(0.2) {
        out.insert(0, rng.range(2, 3));
    }
    out
}

/// Reduction dims of a tensor of rank `r`: one axis mostly, sometimes none (all) or two.
fn reduce_dims(rng: &mut Rng, r: usize) -> Vec<i64> {
    match rng.below(10) {
        0 => Vec::new(),
        1 if r >= 2 => {
            let a = rng.below(r) as i64;
            let b = (a + 1 + rng.below(r - 1) as i64) % r as i64;
            vec![a, b]
        }
        _ => vec![axis(rng, r)],
    }
}

/// Squeeze dims: a dim of size 1 when there is one, else any axis.
fn squeeze_dims(rng: &mut Rng, shape: &[u64]) -> Vec<i64> {
    let ones: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] == 1).collect();
    if ones.is_empty() || rng.chance(0.1) {
        return vec![axis(rng, shape.len())];
    }
    let i = rng.pick(&ones) as i64;
    vec![if rng.chance(0.5) {
        i
    } else {
        i - shape.len() as i64
    }]
}

/// A value for attribute `spec` of `op` that the pattern leaves free or
/// binds to a parameter not bound yet, fitting the operands' metadata `operands`.
pub(super) fn attr(
    rng: &mut Rng,
    op: &'static OpDef,
    spec: &AttrSpec,
    operands: &[TensorMeta],
    sizes: &[u64],
) -> AttrValue {
    let shape = operands.first().map(dims).unwrap_or_default();
    let r = shape.len();
    let builtin = op.builtin;
    match (builtin, spec.kind) {
        (Some(Op::Permute), AttrKind::Ints) => AttrValue::Ints(permutation(rng, r)),
        (Some(Op::Reshape), AttrKind::Ints) => AttrValue::Ints(reshape_target(rng, &shape)),
        (Some(Op::Expand), AttrKind::Ints) => AttrValue::Ints(expand_target(rng, &shape)),
        (Some(Op::Squeeze), AttrKind::Ints) => AttrValue::Ints(squeeze_dims(rng, &shape)),
        (Some(Op::Unsqueeze), AttrKind::Int) => AttrValue::Int(axis(rng, r + 1)),
        (Some(Op::Sum | Op::Mean | Op::Amax), AttrKind::Ints) => {
            AttrValue::Ints(reduce_dims(rng, r))
        }
        (Some(Op::Slice), AttrKind::Int) => slice_attr(rng, spec.name, &shape),
        (Some(Op::Cast), AttrKind::DType) => AttrValue::DType(rng.pick(&CAST_TARGETS)),
        (_, AttrKind::Int) if spec.name.starts_with("dim") || spec.name == "axis" => {
            AttrValue::Int(axis(rng, r))
        }
        (_, AttrKind::Int) => AttrValue::Int(small_int(rng)),
        (_, AttrKind::Float) => AttrValue::Float(float(rng, sizes)),
        (_, AttrKind::Bool) => AttrValue::Bool(rng.chance(0.5)),
        (_, AttrKind::DType) => AttrValue::DType(rng.pick(&CAST_TARGETS)),
        (Some(Op::Gelu), AttrKind::Str) => AttrValue::Str(rng.pick(&["none", "tanh"]).into()),
        (_, AttrKind::Str | AttrKind::Ints) => spec.default.value().unwrap_or(AttrValue::Null),
    }
}

/// `slice`'s `dim`, `start`, `end` and `step` (by name): the last axis half the time
/// (where rotations slice), a start of 0 or half the last dim, an end of half of it,
/// all of it or "to the end", a step of 1.
fn slice_attr(rng: &mut Rng, name: &str, shape: &[u64]) -> AttrValue {
    let r = shape.len();
    let size = shape.last().copied().unwrap_or(1) as i64;
    AttrValue::Int(match name {
        "dim" if rng.chance(0.5) => {
            if rng.chance(0.5) {
                -1
            } else {
                r as i64 - 1
            }
        }
        "dim" => axis(rng, r),
        "start" => rng.pick(&[0, size / 2]),
        "end" => rng.pick(&[size / 2, size, i64::MAX]),
        _ => 1,
    })
}

/// A random tensor for an input of `meta` (known shape): floats in `[-2, 2)`, ints in
/// `-3..=3`, bools even.
pub(super) fn input(rng: &mut Rng, meta: &TensorMeta) -> Result<Tensor, GraphError> {
    let shape: Vec<usize> = dims(meta).iter().map(|&d| d as usize).collect();
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n)
        .map(|_| match meta.dtype {
            DType::Bool => f64::from(u8::from(rng.chance(0.5))),
            DType::I64 | DType::I32 => rng.range(-3, 3) as f64,
            _ => rng.uniform(-2.0, 2.0),
        })
        .collect();
    Tensor::from_f64_slice(meta.dtype, &shape, &data).map_err(|e| GraphError::Signature {
        op: "input",
        node: None,
        message: e.to_string(),
    })
}
