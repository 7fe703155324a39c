//! Shape and dtype inference of the built-in ops.
//!
//! Each function takes the operands' metadata and the node's (normalised) attributes
//! and returns the metadata of every output, or an [`InferError`] saying what is
//! wrong in terms of shapes and dims; the caller adds which node and op.
//!
//! Symbolic dims: a symbolic dim broadcasts against 1 and against itself; against a
//! known size other than 1 it takes that size; against another symbolic dim it gives
//! the dim `broadcast(a, b)` ([`SymExpr::broadcast`]), bound at run time, assuming
//! nothing (two that differ by a constant, `seq` against `seq + 1`, are an error).
//! Two different symbolic dims that must be
//! equal (the inner dims of `matmul`, `concat`'s dims outside its axis,
//! attention's head and sequence dims, a mask's dims and the scores' it broadcasts
//! into) go to [`crate::assume::unify`]: when the graph
//! adds the node, an equality that can be solved for one symbol (`s15 + s70` against
//! `s70 + s95`: `s95 = s15`, as exporters often name one size twice) is assumed,
//! recorded on the graph and checked at run time; one that cannot (`seq` against
//! `past + seq`) is an error that names both. Sizes computed from symbols (reshape targets, concatenations, slices) are
//! expressions ([`crate::meta::SymExpr`]); a size no expression can say is a fresh
//! symbol, bound from the tensor when the plan runs.

use smallvec::smallvec;

use graphrw_kernels::Tensor;

use super::{Attrs, InferError, Op};
use crate::infer_bail;
use crate::meta::{normalize_axis, DType, Dim, Dims, Shape, Sign, SymExpr, TensorMeta};
use crate::ops::AttrValue;

type Out = Result<Vec<TensorMeta>, InferError>;

fn one(dtype: DType, shape: Shape, like: &TensorMeta) -> Out {
    Ok(vec![TensorMeta {
        dtype,
        shape,
        device: like.device,
    }])
}

fn cpu(dtype: DType, shape: Shape) -> Out {
    Ok(vec![TensorMeta::new(dtype, shape)])
}

fn axis(dim: i64, rank: usize, what: &str) -> Result<usize, InferError> {
    normalize_axis(dim, rank).ok_or_else(|| {
        InferError(format!(
            "{what} {dim} is out of range for a tensor of rank {rank}"
        ))
    })
}

/// Broadcasts two shapes with numpy's rules.
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Result<Shape, InferError> {
    broadcast_dims(&a.0, &b.0).map(Shape)
}

/// [`broadcast_shapes`] of two lists of dims, reading them in place (no copy of either
/// operand's dims: it runs for every elementwise node built or verified).
fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Result<Dims, InferError> {
    let one = Dim::Known(1);
    let rank = a.len().max(b.len());
    let mut out = Dims::with_capacity(rank);
    for i in 0..rank {
        let da = dim_from_end(a, rank - 1 - i, &one);
        let db = dim_from_end(b, rank - 1 - i, &one);
        out.push(broadcast_dim(da, db).ok_or_else(|| {
            InferError(format!(
                "shapes {} and {} do not broadcast (dim {i}: {da} vs {db})",
                Shape::from(a),
                Shape::from(b)
            ))
        })?);
    }
    Ok(out)
}

/// Dim `k` counted from the end of `s`, or `one` where `s` is shorter.
fn dim_from_end<'a>(s: &'a [Dim], k: usize, one: &'a Dim) -> &'a Dim {
    if k < s.len() {
        &s[s.len() - 1 - k]
    } else {
        one
    }
}

fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    Some(match (a, b) {
        _ if a == b => a.clone(),
        (Dim::Known(1), _) => b.clone(),
        (_, Dim::Known(1)) => a.clone(),
        (Dim::Known(_), Dim::Known(_)) => return None,
        (Dim::Known(_), _) => a.clone(),
        (_, Dim::Known(_)) => b.clone(),
        _ => {
            let (ea, eb) = (a.to_expr(), b.to_expr());
            if ea.sub(&eb)?.as_const().is_some() {
                return None;
            }
            return Dim::from_expr(SymExpr::broadcast(&[ea, eb])?);
        }
    })
}

/// Whether `from` broadcasts into `to` (broadcasting the two gives `to`): each dim of
/// `from` is 1, `to`'s, a symbolic dim against a known one, or a symbolic dim whose
/// broadcast with `to`'s symbolic dim [`crate::assume::unify`] finds equal to it (a
/// requirement, checked at run time: `m` is 1 or `k`).
fn broadcasts_into(from: &Shape, to: &Shape) -> Result<bool, InferError> {
    let b = broadcast_shapes(to, from)?;
    Ok(b.rank() == to.rank()
        && b.0.iter().zip(&to.0).all(|(x, t)| {
            x == t || (x.is_symbolic() && t.is_symbolic() && crate::assume::unify(x, t).is_some())
        }))
}

/// Whether two dims that must be equal can be: two known sizes when equal, a known
/// size and a symbolic dim always (the symbol takes the size when bound), two symbolic
/// dims when [`crate::assume::unify`] finds them equal or assumes so.
fn dims_agree(a: &Dim, b: &Dim) -> bool {
    match (a.known(), b.known()) {
        (Some(x), Some(y)) => x == y,
        (Some(_), None) | (None, Some(_)) => true,
        (None, None) => crate::assume::unify(a, b).is_some(),
    }
}

fn same_dtype(a: &TensorMeta, b: &TensorMeta) -> Result<DType, InferError> {
    if a.dtype != b.dtype {
        infer_bail!(
            "operand dtypes differ: {} and {} (insert a cast)",
            a.dtype,
            b.dtype
        );
    }
    Ok(a.dtype)
}

/// Binary elementwise op whose operands and result share one dtype.
pub fn broadcast_same_dtype(x: &[&TensorMeta], _: &Attrs) -> Out {
    let dtype = same_dtype(x[0], x[1])?;
    if dtype == DType::Bool {
        infer_bail!("arithmetic on bool tensors is not defined (cast first)");
    }
    one(dtype, broadcast_shapes(&x[0].shape, &x[1].shape)?, x[0])
}

/// Binary elementwise op whose result has the left operand's dtype (`pow`).
pub fn broadcast_lhs_dtype(x: &[&TensorMeta], _: &Attrs) -> Out {
    if x[0].dtype == DType::Bool || x[1].dtype == DType::Bool {
        infer_bail!("pow of bool tensors is not defined");
    }
    one(
        x[0].dtype,
        broadcast_shapes(&x[0].shape, &x[1].shape)?,
        x[0],
    )
}

/// Logical op on two bool tensors.
pub fn broadcast_logical(x: &[&TensorMeta], _: &Attrs) -> Out {
    if x[0].dtype != DType::Bool || x[1].dtype != DType::Bool {
        infer_bail!(
            "logical ops take bool operands, found {} and {}",
            x[0].dtype,
            x[1].dtype
        );
    }
    one(
        DType::Bool,
        broadcast_shapes(&x[0].shape, &x[1].shape)?,
        x[0],
    )
}

/// Comparison: same dtype in, bool out.
pub fn broadcast_compare(x: &[&TensorMeta], _: &Attrs) -> Out {
    same_dtype(x[0], x[1])?;
    one(
        DType::Bool,
        broadcast_shapes(&x[0].shape, &x[1].shape)?,
        x[0],
    )
}

/// Unary op on numbers (not bool), same metadata out.
pub fn same_numeric(x: &[&TensorMeta], _: &Attrs) -> Out {
    if x[0].dtype == DType::Bool {
        infer_bail!("expected a numeric tensor, found bool");
    }
    Ok(vec![x[0].clone()])
}

/// Unary op on floats, same metadata out.
pub fn same_float(x: &[&TensorMeta], _: &Attrs) -> Out {
    if !x[0].dtype.is_float() {
        infer_bail!("expected a floating-point tensor, found {}", x[0].dtype);
    }
    Ok(vec![x[0].clone()])
}

/// `softmax`/`log_softmax(dim)`: a float input, `dim` within its rank.
pub fn softmax(x: &[&TensorMeta], a: &Attrs) -> Out {
    let out = same_float(x, a)?;
    axis(a.int("dim")?, x[0].rank().max(1), "softmax dim")?;
    Ok(out)
}

/// `cumsum(dim)`: a numeric input, `dim` within its rank.
pub fn cumsum(x: &[&TensorMeta], a: &Attrs) -> Out {
    let out = same_numeric(x, a)?;
    axis(a.int("dim")?, x[0].rank().max(1), "cumsum dim")?;
    Ok(out)
}

/// `gelu(approximate)`: a float input, `approximate` `"none"` or `"tanh"`.
pub fn gelu(x: &[&TensorMeta], a: &Attrs) -> Out {
    let out = same_float(x, a)?;
    a.gelu_approximation()?;
    Ok(out)
}

/// Unary op on bools, same metadata out.
pub fn same_bool(x: &[&TensorMeta], _: &Attrs) -> Out {
    if x[0].dtype != DType::Bool {
        infer_bail!("expected a bool tensor, found {}", x[0].dtype);
    }
    Ok(vec![x[0].clone()])
}

/// Float in, bool of the same shape out (`isnan`).
pub fn float_to_bool(x: &[&TensorMeta], _: &Attrs) -> Out {
    if !x[0].dtype.is_float() {
        infer_bail!("expected a floating-point tensor, found {}", x[0].dtype);
    }
    one(DType::Bool, x[0].shape.clone(), x[0])
}

/// Any tensor, same metadata out.
pub fn identity(x: &[&TensorMeta], _: &Attrs) -> Out {
    Ok(vec![x[0].clone()])
}

/// `where(condition, input, other)`.
pub fn where_(x: &[&TensorMeta], _: &Attrs) -> Out {
    if x[0].dtype != DType::Bool {
        infer_bail!("condition must be bool, found {}", x[0].dtype);
    }
    let dtype = same_dtype(x[1], x[2])?;
    let s = broadcast_shapes(&x[0].shape, &x[1].shape)?;
    one(dtype, broadcast_shapes(&s, &x[2].shape)?, x[1])
}

/// `cast(input, dtype)`.
pub fn cast(x: &[&TensorMeta], a: &Attrs) -> Out {
    one(a.dtype("dtype")?, x[0].shape.clone(), x[0])
}

/// `masked_fill(input, mask, value)`: the mask broadcasts to the input's shape.
pub fn masked_fill(x: &[&TensorMeta], _: &Attrs) -> Out {
    if x[1].dtype != DType::Bool {
        infer_bail!("mask must be bool, found {}", x[1].dtype);
    }
    if !broadcasts_into(&x[1].shape, &x[0].shape)? {
        infer_bail!(
            "mask {} does not broadcast to the input's shape {}",
            x[1].shape,
            x[0].shape
        );
    }
    Ok(vec![x[0].clone()])
}

mod contraction;
mod layout;
mod reduce;
mod source;

pub use contraction::*;
pub use layout::*;
pub use reduce::*;
pub use source::*;

/// The ops whose constant operands [`check_constants`] checks.
pub const CONSTANT_CHECKED: &[Op] = &[Op::Gather, Op::GatherElements, Op::IndexSelect];

/// Checks the values of an op's constant operands against the other operands' dims,
/// beyond what metadata can say: a constant index of `gather`, `gather_elements` or
/// `index_select` must lie within the indexed dim (negative indices count from the end,
/// except for `index_select`). `constants[i]` is operand `i`'s value where it is a
/// constant.
pub fn check_constants(
    op: Op,
    x: &[&TensorMeta],
    constants: &[Option<&Tensor>],
    a: &Attrs,
) -> Result<(), InferError> {
    if !CONSTANT_CHECKED.contains(&op) || x.len() < 2 {
        return Ok(());
    }
    let Some(index) = constants.get(1).copied().flatten() else {
        return Ok(());
    };
    if !matches!(index.dtype(), DType::I64 | DType::I32) {
        return Ok(());
    }
    let d = axis(a.int("dim")?, x[0].rank().max(1), "index dim")?;
    let Some(n) = x[0].shape.0.get(d).and_then(Dim::known) else {
        return Ok(());
    };
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let low = if op == Op::IndexSelect { 0 } else { -n };
    if let Some((at, &bad)) = index
        .to_i64_vec()
        .iter()
        .enumerate()
        .find(|(_, &i)| i < low || i >= n)
    {
        let range = if low == 0 {
            format!("0..{n}")
        } else {
            format!("-{n}..{n}")
        };
        infer_bail!(
            "constant index {bad} (element {at}) is out of range {range} for dim {d} of {}",
            x[0].shape
        );
    }
    Ok(())
}
