//! Shape and dtype inference of the built-in ops.
//!
//! Each function takes the operands' metadata and the node's (normalised) attributes
//! and returns the metadata of every output, or an [`InferError`] saying what is
//! wrong in terms of shapes and dims; the caller adds which node and op.
//!
//! Symbolic dims: a symbolic dim broadcasts against 1 and against itself; against a
//! known size other than 1 it takes that size; two different plain symbols are assumed
//! equal (the left one is kept), as exporters often name one size twice; an expression
//! against a different symbolic dim (`seq` against `past + seq`) is an error that names
//! both. Sizes computed from symbols (reshape targets, concatenations, slices) are
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
        (Dim::Sym(_), Dim::Sym(_)) => a.clone(),
        _ => return None,
    })
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
    match a.str("approximate")? {
        "none" | "tanh" => Ok(out),
        other => infer_bail!("gelu approximate must be \"none\" or \"tanh\", found {other:?}"),
    }
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
    let s = broadcast_shapes(&x[0].shape, &x[1].shape)?;
    if s != x[0].shape {
        infer_bail!(
            "mask {} does not broadcast to the input's shape {}",
            x[1].shape,
            x[0].shape
        );
    }
    Ok(vec![x[0].clone()])
}

fn sizes(a: &Attrs, name: &str) -> Result<Shape, InferError> {
    let v = a.sym_ints(name)?;
    v.iter()
        .map(|e| match Dim::from_expr(e.clone()) {
            Some(d) if !negative(e) => Ok(d),
            _ => Err(InferError(format!("`{name}` has a negative size {e}"))),
        })
        .collect()
}

/// True when `e` is below zero for every binding but the all-zero one (no size).
fn negative(e: &SymExpr) -> bool {
    matches!(e.sign(), Sign::Negative | Sign::NonPositive) && e.as_const() != Some(0)
}

/// `sym_ints(values, scalar)`: the dims in `values` as an i64 tensor, 1-D or (with
/// `scalar`) a scalar of the one value.
pub fn sym_ints(_: &[&TensorMeta], a: &Attrs) -> Out {
    let n = a.sym_ints("values")?.len();
    if a.bool("scalar")? {
        if n != 1 {
            infer_bail!("a scalar `sym_ints` holds one value, found {n}");
        }
        return cpu(DType::I64, Shape::default());
    }
    cpu(DType::I64, Shape(smallvec![Dim::Known(n as u64)]))
}

/// `full`/`zeros`/`ones`.
pub fn full(_: &[&TensorMeta], a: &Attrs) -> Out {
    cpu(a.dtype("dtype")?, sizes(a, "size")?)
}

/// `arange(start, end, step)`.
pub fn arange(_: &[&TensorMeta], a: &Attrs) -> Out {
    let symbolic = ["start", "end", "step"]
        .iter()
        .any(|n| a.get(n).is_some_and(AttrValue::is_symbolic));
    if symbolic {
        return arange_symbolic(a);
    }
    let (start, end, step) = (a.float("start")?, a.float("end")?, a.float("step")?);
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
        infer_bail!("arange needs finite bounds and a non-zero step, got ({start}, {end}, {step})");
    }
    let n = ((end - start) / step).ceil().max(0.0) as u64;
    cpu(a.dtype("dtype")?, Shape(smallvec![Dim::Known(n)]))
}

/// `arange` whose bounds are known only at run time: integral bounds, a constant step.
fn arange_symbolic(a: &Attrs) -> Out {
    let (start, end, step) = (a.sym_int("start")?, a.sym_int("end")?, a.sym_int("step")?);
    let Some(k) = step.as_const().filter(|&k| k != 0) else {
        infer_bail!("arange with symbolic bounds needs a constant non-zero step, found {step}");
    };
    let span = if k > 0 {
        end.sub(&start)
    } else {
        start.sub(&end)
    };
    let k = k.unsigned_abs() as i64;
    let n = span
        .and_then(|s| s.add(&SymExpr::int(k - 1)))
        .and_then(|s| s.div_floor(&SymExpr::int(k)));
    let Some(n) = n else {
        infer_bail!("arange({start}, {end}, {step}): the length overflows");
    };
    let n = match n.sign() {
        Sign::Negative => SymExpr::int(0),
        _ => n,
    };
    let Some(d) = Dim::from_expr(n) else {
        infer_bail!("arange({start}, {end}, {step}) has a negative length");
    };
    cpu(a.dtype("dtype")?, Shape(smallvec![d]))
}

/// `matmul` with torch's rules: 1-D operands are promoted and the added dim removed;
/// batch dims broadcast.
pub fn matmul(x: &[&TensorMeta], _: &Attrs) -> Out {
    let (a, b) = (&x[0].shape, &x[1].shape);
    let dtype = same_dtype(x[0], x[1])?;
    if dtype == DType::Bool {
        infer_bail!("matmul of bool tensors is not defined");
    }
    if a.rank() == 0 || b.rank() == 0 {
        infer_bail!("matmul needs operands of rank >= 1, found {a} and {b}");
    }
    // Rank-1 operands read as [1, k] and [k, 1]; the others in place, not copied.
    let (a1, b1);
    let a2: &[Dim] = if a.rank() == 1 {
        a1 = [Dim::Known(1), a.0[0].clone()];
        &a1
    } else {
        &a.0
    };
    let b2: &[Dim] = if b.rank() == 1 {
        b1 = [b.0[0].clone(), Dim::Known(1)];
        &b1
    } else {
        &b.0
    };
    let k_a = &a2[a2.len() - 1];
    let k_b = &b2[b2.len() - 2];
    if broadcast_dim(k_a, k_b).is_none()
        || (k_a.known().is_some() && k_b.known().is_some() && k_a != k_b)
    {
        infer_bail!("matmul inner dimensions differ: {a} @ {b} ({k_a} vs {k_b})");
    }
    let mut out = broadcast_dims(&a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .map_err(|e| InferError(format!("matmul batch dims: {}", e.0)))?;
    if a.rank() > 1 {
        out.push(a2[a2.len() - 2].clone());
    }
    if b.rank() > 1 {
        out.push(b2[b2.len() - 1].clone());
    }
    one(dtype, Shape(out), x[0])
}

/// `conv2d(input, weight, bias?)` on NCHW / OIHW.
pub fn conv2d(x: &[&TensorMeta], a: &Attrs) -> Out {
    let (inp, w) = (&x[0].shape, &x[1].shape);
    let dtype = same_dtype(x[0], x[1])?;
    if inp.rank() != 4 || w.rank() != 4 {
        infer_bail!("conv2d takes a 4-D input and weight, found {inp} and {w}");
    }
    let (stride, pad, dil, groups) = (
        a.ints("stride")?,
        a.ints("padding")?,
        a.ints("dilation")?,
        a.int("groups")?,
    );
    if stride.len() != 2 || pad.len() != 2 || dil.len() != 2 {
        infer_bail!("stride, padding and dilation need two entries each");
    }
    if groups < 1 || stride.iter().chain(dil).any(|&s| s < 1) || pad.iter().any(|&p| p < 0) {
        infer_bail!("groups, stride and dilation must be >= 1 and padding >= 0");
    }
    if let (Some(c), Some(wc)) = (inp.0[1].known(), w.0[1].known()) {
        if c != wc * groups as u64 {
            infer_bail!("input has {c} channels but weight expects {wc} x {groups} groups");
        }
    }
    if let Some(b) = x.get(2) {
        if b.rank() != 1 {
            infer_bail!("bias must be 1-D, found {}", b.shape);
        }
    }
    let mut out = smallvec![inp.0[0].clone(), w.0[0].clone()];
    for i in 0..2 {
        let size = match (inp.0[2 + i].known(), w.0[2 + i].known()) {
            (Some(n), Some(k)) => {
                let eff = (dil[i] as u64)
                    .saturating_mul(k.saturating_sub(1))
                    .saturating_add(1);
                let padded = n.saturating_add((pad[i] as u64).saturating_mul(2));
                if padded < eff {
                    infer_bail!("conv2d kernel {w} is larger than the padded input {inp}");
                }
                Dim::Known((padded - eff) / stride[i] as u64 + 1)
            }
            _ => Dim::sym(&format!("conv({})", inp.0[2 + i])),
        };
        out.push(size);
    }
    one(dtype, Shape(out), x[0])
}

/// `transpose(dim0, dim1)`.
pub fn transpose(x: &[&TensorMeta], a: &Attrs) -> Out {
    let r = x[0].rank();
    let d0 = axis(a.int("dim0")?, r, "dim0")?;
    let d1 = axis(a.int("dim1")?, r, "dim1")?;
    let mut s = x[0].shape.clone();
    s.0.swap(d0, d1);
    one(x[0].dtype, s, x[0])
}

/// `permute(dims)`: dims must be a permutation of the axes.
pub fn permute(x: &[&TensorMeta], a: &Attrs) -> Out {
    let r = x[0].rank();
    let dims = a.ints("dims")?;
    if dims.len() != r {
        infer_bail!("permute dims {dims:?} do not match rank {r}");
    }
    let mut seen: smallvec::SmallVec<[bool; 8]> = smallvec![false; r];
    let mut out = Dims::with_capacity(r);
    for &d in dims {
        let d = axis(d, r, "permute dim")?;
        if std::mem::replace(&mut seen[d], true) {
            infer_bail!("permute dims {dims:?} repeat dim {d}");
        }
        out.push(x[0].shape.0[d].clone());
    }
    one(x[0].dtype, Shape(out), x[0])
}

/// `reshape(shape)`: at most one -1, inferred from the element count; entries may be
/// symbolic.
pub fn reshape(x: &[&TensorMeta], a: &Attrs) -> Out {
    if let Some(AttrValue::Dims(_)) = a.get("shape") {
        return reshape_symbolic(x, a);
    }
    let target = a.ints("shape")?;
    let mut infer_at = None;
    let mut known: u64 = 1;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 if infer_at.is_none() => infer_at = Some(i),
            -1 => infer_bail!("reshape target {target:?} has more than one -1"),
            d if d < 0 => infer_bail!("reshape target {target:?} has a negative size {d}"),
            d => known = known.saturating_mul(d as u64),
        }
    }
    let mut out: Dims = target
        .iter()
        .map(|&d| Dim::Known(d.max(0) as u64))
        .collect();
    match (x[0].shape.numel(), infer_at) {
        (Some(n), Some(i)) => {
            if known == 0 || n % known != 0 {
                infer_bail!("cannot reshape {} ({n} elements) to {target:?}", x[0].shape);
            }
            out[i] = Dim::Known(n / known);
        }
        (Some(n), None) => {
            if n != known {
                infer_bail!(
                    "cannot reshape {} ({n} elements) to {target:?} ({known} elements)",
                    x[0].shape
                );
            }
        }
        (None, Some(i)) => out[i] = inferred_dim(&x[0].shape, &SymExpr::int(known as i64))?,
        (None, None) => {}
    }
    one(x[0].dtype, Shape(out), x[0])
}

/// `(a, b)` where `x = a*m` and `y = b*m` for one product of symbols `m`.
fn one_term_ratio(x: &SymExpr, y: &SymExpr) -> Option<(i64, i64)> {
    let (mut tx, mut ty) = (x.terms(), y.terms());
    let ((a, fx), (b, fy)) = (tx.next()?, ty.next()?);
    if tx.next().is_some() || ty.next().is_some() || fx.is_empty() {
        return None;
    }
    let same = fx.len() == fy.len()
        && fx.iter().zip(&fy).all(|(p, q)| match (p, q) {
            (crate::meta::Factor::Sym(p), crate::meta::Factor::Sym(q)) => p == q,
            _ => false,
        });
    same.then_some((a, b))
}

/// The `-1` of a reshape of `shape` whose other entries multiply to `rest`: the exact
/// quotient where there is one, a floor division by a constant, else a fresh symbol
/// (bound from the tensor at run time).
fn inferred_dim(shape: &Shape, rest: &SymExpr) -> Result<Dim, InferError> {
    if rest.as_const() == Some(0) {
        infer_bail!("cannot reshape {shape} to a shape with a 0 and a -1");
    }
    let quotient = shape.numel_expr().and_then(|n| n.div_floor(rest));
    Ok(quotient
        .and_then(Dim::from_expr)
        .unwrap_or_else(|| Dim::sym(&format!("{shape}/{rest}"))))
}

fn reshape_symbolic(x: &[&TensorMeta], a: &Attrs) -> Out {
    let target = a.sym_ints("shape")?;
    let mut infer_at = None;
    let mut rest = SymExpr::int(1);
    let mut out = Dims::with_capacity(target.len());
    for (i, e) in target.iter().enumerate() {
        if e.as_const() == Some(-1) {
            if infer_at.replace(i).is_some() {
                infer_bail!(
                    "reshape target {} has more than one -1",
                    AttrValue::Dims(target.to_vec())
                );
            }
            out.push(Dim::Known(1));
            continue;
        }
        let Some(d) = Dim::from_expr(e.clone()).filter(|_| !negative(e)) else {
            infer_bail!(
                "reshape target {} has a negative size {e}",
                AttrValue::Dims(target.to_vec())
            );
        };
        rest = match rest.mul(e) {
            Some(r) => r,
            None => infer_bail!(
                "reshape target {} overflows",
                AttrValue::Dims(target.to_vec())
            ),
        };
        out.push(d);
    }
    match infer_at {
        Some(i) => out[i] = inferred_dim(&x[0].shape, &rest)?,
        None => {
            if let Some(n) = x[0].shape.numel_expr() {
                // Unequal for every binding, or a constant multiple of the other.
                let multiple = one_term_ratio(&n, &rest).is_some_and(|(a, b)| a != b);
                if n.equals(&rest) == Some(false) || multiple {
                    infer_bail!(
                        "cannot reshape {} ({n} elements) to {} ({rest} elements)",
                        x[0].shape,
                        AttrValue::Dims(target.to_vec())
                    );
                }
            }
        }
    }
    one(x[0].dtype, Shape(out), x[0])
}

/// `expand(size)`: -1 keeps a dim; the input broadcasts to the result.
pub fn expand(x: &[&TensorMeta], a: &Attrs) -> Out {
    if let Some(AttrValue::Dims(_)) = a.get("size") {
        return expand_symbolic(x, a);
    }
    let size = a.ints("size")?;
    let s = &x[0].shape;
    if size.len() < s.rank() {
        infer_bail!("expand to {size:?} has fewer dims than the input {s}");
    }
    let lead = size.len() - s.rank();
    let mut out = Dims::with_capacity(size.len());
    for (i, &d) in size.iter().enumerate() {
        let src = (i >= lead).then(|| &s.0[i - lead]);
        out.push(match (d, src) {
            (-1, Some(src)) => src.clone(),
            (-1, None) => infer_bail!("expand: -1 is not allowed for a new leading dim ({size:?})"),
            (d, _) if d < 0 => infer_bail!("expand: negative size {d}"),
            (d, Some(src)) if !src.is_one() && src.known().is_some_and(|n| n != d as u64) => {
                infer_bail!("cannot expand {s} to {size:?}: dim {i} is {src}, not 1")
            }
            (d, _) => Dim::Known(d as u64),
        });
    }
    one(x[0].dtype, Shape(out), x[0])
}

fn expand_symbolic(x: &[&TensorMeta], a: &Attrs) -> Out {
    let size = a.sym_ints("size")?;
    let s = &x[0].shape;
    let shown = || AttrValue::Dims(size.to_vec());
    if size.len() < s.rank() {
        infer_bail!("expand to {} has fewer dims than the input {s}", shown());
    }
    let lead = size.len() - s.rank();
    let mut out = Dims::with_capacity(size.len());
    for (i, e) in size.iter().enumerate() {
        let src = (i >= lead).then(|| &s.0[i - lead]);
        if e.as_const() == Some(-1) {
            match src {
                Some(src) => out.push(src.clone()),
                None => infer_bail!(
                    "expand: -1 is not allowed for a new leading dim ({})",
                    shown()
                ),
            }
            continue;
        }
        let Some(d) = Dim::from_expr(e.clone()).filter(|_| !negative(e)) else {
            infer_bail!("expand: negative size {e}");
        };
        if let Some(src) = src {
            if !src.is_one() && broadcast_dim(src, &d).is_none() {
                infer_bail!("cannot expand {s} to {}: dim {i} is {src}, not 1", shown());
            }
        }
        out.push(d);
    }
    one(x[0].dtype, Shape(out), x[0])
}

/// `unsqueeze(dim)`.
pub fn unsqueeze(x: &[&TensorMeta], a: &Attrs) -> Out {
    let d = axis(a.int("dim")?, x[0].rank() + 1, "unsqueeze dim")?;
    let mut s = x[0].shape.clone();
    s.0.insert(d, Dim::Known(1));
    one(x[0].dtype, s, x[0])
}

/// `squeeze(dims)`: each named dim must be 1; empty dims squeeze every known 1.
pub fn squeeze(x: &[&TensorMeta], a: &Attrs) -> Out {
    let dims = a.ints("dims")?;
    let r = x[0].rank();
    let mut drop = vec![false; r];
    if dims.is_empty() {
        for (i, d) in x[0].shape.0.iter().enumerate() {
            drop[i] = d.is_one();
        }
    } else {
        for &d in dims {
            let d = axis(d, r, "squeeze dim")?;
            if x[0].shape.0[d].known().is_some_and(|n| n != 1) {
                infer_bail!("cannot squeeze dim {d} of {}: it is not 1", x[0].shape);
            }
            drop[d] = true;
        }
    }
    let s = x[0]
        .shape
        .0
        .iter()
        .zip(&drop)
        .filter(|(_, &dr)| !dr)
        .map(|(d, _)| d.clone())
        .collect();
    one(x[0].dtype, Shape(s), x[0])
}

/// `concat(tensors, dim)`.
pub fn concat(x: &[&TensorMeta], a: &Attrs) -> Out {
    let Some(first) = x.first() else {
        infer_bail!("concat needs at least one tensor");
    };
    let r = first.rank();
    let d = axis(a.int("dim")?, r, "concat dim")?;
    let mut total = Some(SymExpr::int(0));
    for (i, t) in x.iter().enumerate() {
        if t.dtype != first.dtype || t.rank() != r {
            infer_bail!(
                "concat operand {i} is {t}, expected {} of rank {r}",
                first.dtype
            );
        }
        for (j, (p, q)) in t.shape.0.iter().zip(&first.shape.0).enumerate() {
            if j != d && p.known().is_some() && q.known().is_some() && p != q {
                infer_bail!(
                    "concat operand {i} has shape {}, expected {} outside dim {d}",
                    t.shape,
                    first.shape
                );
            }
        }
        total = total.and_then(|sum| sum.add(&t.shape.0[d].to_expr()));
    }
    let mut s = first.shape.clone();
    s.0[d] = match total.and_then(Dim::from_expr) {
        Some(n) => n,
        None => infer_bail!("concat along dim {d} overflows"),
    };
    one(first.dtype, s, first)
}

/// `split(split_sizes, dim)`: the sizes must add up to the dim.
pub fn split(x: &[&TensorMeta], a: &Attrs) -> Out {
    let sizes = a.ints("split_sizes")?;
    let d = axis(a.int("dim")?, x[0].rank(), "split dim")?;
    if sizes.is_empty() || sizes.iter().any(|&s| s < 0) {
        infer_bail!("split sizes {sizes:?} must be non-empty and non-negative");
    }
    if let Some(n) = x[0].shape.0[d].known() {
        let sum = sizes.iter().try_fold(0i64, |acc, &s| acc.checked_add(s));
        let Some(sum) = sum else {
            infer_bail!("split sizes {sizes:?} overflow");
        };
        if sum as u64 != n {
            infer_bail!(
                "split sizes {sizes:?} add up to {sum}, but dim {d} of {} is {n}",
                x[0].shape
            );
        }
    }
    Ok(sizes
        .iter()
        .map(|&s| {
            let mut shape = x[0].shape.clone();
            shape.0[d] = Dim::Known(s as u64);
            TensorMeta {
                dtype: x[0].dtype,
                shape,
                device: x[0].device,
            }
        })
        .collect())
}

/// `slice(dim, start, end, step)` with python's clamping.
pub fn slice(x: &[&TensorMeta], a: &Attrs) -> Out {
    let d = axis(a.int("dim")?, x[0].rank(), "slice dim")?;
    if ["start", "end"]
        .iter()
        .any(|n| a.get(n).is_some_and(AttrValue::is_symbolic))
    {
        return slice_symbolic(x, a, d);
    }
    let (start, end, step) = (a.int("start")?, a.int("end")?, a.int("step")?);
    if step < 1 {
        infer_bail!("slice step must be >= 1, found {step}");
    }
    let mut s = x[0].shape.clone();
    s.0[d] = match s.0[d].known() {
        Some(n) => Dim::Known(slice_len(n as i64, start, end, step)),
        None => return slice_symbolic(x, a, d),
    };
    one(x[0].dtype, s, x[0])
}

/// A slice whose bounds are known only at run time. A symbolic bound is taken to be in
/// range (`x[:seq]` of a table of 512 rows is `seq` rows, not `min(seq, 512)`); the
/// interpreter checks every result against its metadata, so a bound out of range at
/// run time is an error there, not a wrong size.
fn slice_symbolic(x: &[&TensorMeta], a: &Attrs, d: usize) -> Out {
    let step = a.int("step")?;
    if step < 1 {
        infer_bail!("slice step must be >= 1, found {step}");
    }
    let n = x[0].shape.0[d].to_expr();
    let bound = |name: &str| -> Result<SymExpr, InferError> {
        let e = a.sym_int(name)?;
        Ok(match e.as_const() {
            Some(c) if c < 0 => n.add(&e).unwrap_or(e),
            Some(c) if x[0].shape.0[d].known().is_some_and(|k| c as u64 >= k) => n.clone(),
            Some(i64::MAX) => n.clone(),
            _ => e,
        })
    };
    let (start, end) = (bound("start")?, bound("end")?);
    let len = end
        .sub(&start)
        .and_then(|l| l.add(&SymExpr::int(step - 1)))
        .and_then(|l| l.div_floor(&SymExpr::int(step)));
    let Some(len) = len else {
        infer_bail!("slice [{start}:{end}:{step}] overflows");
    };
    let len = match len.sign() {
        Sign::Negative => SymExpr::int(0),
        _ => len,
    };
    let mut s = x[0].shape.clone();
    s.0[d] = Dim::from_expr(len).unwrap_or(Dim::Known(0));
    one(x[0].dtype, s, x[0])
}

/// The length of `0..n` sliced by python's `start:end:step` (step >= 1).
pub fn slice_len(n: i64, start: i64, end: i64, step: i64) -> u64 {
    let clamp = |v: i64| if v < 0 { (v + n).max(0) } else { v.min(n) };
    let (s, e) = (clamp(start), clamp(end));
    if e <= s {
        0
    } else {
        ((e - s) as u64).div_ceil(step as u64)
    }
}

fn index_dtype(t: &TensorMeta) -> Result<(), InferError> {
    if !t.dtype.is_int() {
        infer_bail!("index must be i64 or i32, found {}", t.dtype);
    }
    Ok(())
}

/// ONNX `Gather`.
pub fn gather(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    let d = axis(a.int("dim")?, x[0].rank(), "gather dim")?;
    let mut s: Dims = x[0].shape.0[..d].into();
    s.extend(x[1].shape.0.iter().cloned());
    s.extend(x[0].shape.0[d + 1..].iter().cloned());
    one(x[0].dtype, Shape(s), x[0])
}

/// `torch.gather` / ONNX `GatherElements`: the output has the index's shape.
pub fn gather_elements(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    let d = axis(a.int("dim")?, x[0].rank().max(1), "gather_elements dim")?;
    if x[0].rank() != x[1].rank() {
        infer_bail!(
            "input {} and index {} must have the same rank",
            x[0].shape,
            x[1].shape
        );
    }
    for (i, (n, m)) in x[0].shape.0.iter().zip(&x[1].shape.0).enumerate() {
        if let (Some(n), Some(m)) = (n.known(), m.known()) {
            if i != d && m > n {
                infer_bail!(
                    "index {} is larger than input {} outside dim {d} (dim {i}: {m} > {n})",
                    x[1].shape,
                    x[0].shape
                );
            }
        }
    }
    one(x[0].dtype, x[1].shape.clone(), x[0])
}

/// ONNX `GatherND`.
pub fn gather_nd(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    let b = a.int("batch_dims")?;
    let (data, idx) = (&x[0].shape, &x[1].shape);
    if b < 0 || idx.rank() == 0 || b as usize >= idx.rank() || b as usize >= data.rank() {
        infer_bail!("gather_nd: batch_dims {b} does not fit data {data} and index {idx}");
    }
    let b = b as usize;
    let Some(k) = idx.0[idx.rank() - 1].known() else {
        infer_bail!("gather_nd: the index's last dim must be known, found {idx}");
    };
    if b + k as usize > data.rank() {
        infer_bail!(
            "gather_nd: index depth {k} + batch_dims {b} exceeds data rank {}",
            data.rank()
        );
    }
    let mut s: Dims = idx.0[..idx.rank() - 1].into();
    s.extend(data.0[b + k as usize..].iter().cloned());
    one(x[0].dtype, Shape(s), x[0])
}

/// `index_select(dim, index)` with a 1-D index.
pub fn index_select(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    if x[1].rank() != 1 {
        infer_bail!("index_select needs a 1-D index, found {}", x[1].shape);
    }
    let d = axis(a.int("dim")?, x[0].rank(), "index_select dim")?;
    let mut s = x[0].shape.clone();
    s.0[d] = x[1].shape.0[0].clone();
    one(x[0].dtype, s, x[0])
}

/// `sum`/`mean`/`amax(dims, keepdim)`; empty dims reduce all.
pub fn reduce(x: &[&TensorMeta], a: &Attrs) -> Out {
    if x[0].dtype == DType::Bool {
        infer_bail!("cannot reduce a bool tensor (cast first)");
    }
    let r = x[0].rank();
    let dims = a.ints("dims")?;
    let keep = a.bool("keepdim")?;
    let mut reduced = vec![dims.is_empty(); r];
    for &d in dims {
        reduced[axis(d, r, "reduction dim")?] = true;
    }
    let s = x[0]
        .shape
        .0
        .iter()
        .zip(&reduced)
        .filter_map(|(d, &red)| match (red, keep) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect();
    one(x[0].dtype, Shape(s), x[0])
}

/// `layer_norm`/`rms_norm(input, weight?, bias?, axis, eps)`.
pub fn norm(x: &[&TensorMeta], a: &Attrs) -> Out {
    if !x[0].dtype.is_float() {
        infer_bail!("expected a floating-point input, found {}", x[0].dtype);
    }
    let r = x[0].rank();
    let ax = axis(a.int("axis")?, r, "normalisation axis")?;
    let normalized = Shape(x[0].shape.0[ax..].into());
    for (i, p) in x.iter().enumerate().skip(1) {
        let b = broadcast_shapes(&normalized, &p.shape)?;
        if b != normalized {
            infer_bail!(
                "operand {i} ({}) does not broadcast to the normalised shape {normalized}",
                p.shape
            );
        }
    }
    Ok(vec![x[0].clone()])
}

/// `scaled_dot_product_attention(query, key, value, attn_mask?)`.
pub fn sdpa(x: &[&TensorMeta], a: &Attrs) -> Out {
    let (q, k, v) = (x[0], x[1], x[2]);
    if !q.dtype.is_float() || k.dtype != q.dtype || v.dtype != q.dtype {
        infer_bail!(
            "query, key and value must share one float dtype, found {}, {}, {}",
            q.dtype,
            k.dtype,
            v.dtype
        );
    }
    let r = q.rank();
    if r < 2 || k.rank() != r || v.rank() != r {
        infer_bail!(
            "query {}, key {} and value {} must have one rank >= 2",
            q.shape,
            k.shape,
            v.shape
        );
    }
    let (qs, ks, vs) = (&q.shape.0, &k.shape.0, &v.shape.0);
    let known_ne = |p: &Dim, q: &Dim| p.known().is_some() && q.known().is_some() && p != q;
    if known_ne(&qs[r - 1], &ks[r - 1]) {
        infer_bail!("query {} and key {} head dims differ", q.shape, k.shape);
    }
    if known_ne(&ks[r - 2], &vs[r - 2]) {
        infer_bail!(
            "key {} and value {} sequence lengths differ",
            k.shape,
            v.shape
        );
    }
    let gqa = a.bool("enable_gqa")?;
    if r >= 3 {
        match (qs[r - 3].known(), ks[r - 3].known()) {
            (Some(hq), Some(hk)) if hq != hk && !(gqa && hk > 0 && hq % hk == 0) => infer_bail!(
                "query has {hq} heads and key {hk}: equal counts, or enable_gqa with a divisor"
            ),
            _ => {}
        }
        if known_ne(&ks[r - 3], &vs[r - 3]) {
            infer_bail!("key {} and value {} head counts differ", k.shape, v.shape);
        }
    }
    if let Some(scale) = a.opt_float("scale")? {
        if !scale.is_finite() {
            infer_bail!("scale must be finite, found {scale}");
        }
    }
    let mut out = qs.clone();
    out[r - 1] = vs[r - 1].clone();
    let out = Shape(out);
    if let Some(m) = x.get(3) {
        if m.dtype != DType::Bool && m.dtype != q.dtype {
            infer_bail!("attn_mask must be bool or {}, found {}", q.dtype, m.dtype);
        }
        let mut scores = qs.clone();
        scores[r - 1] = ks[r - 2].clone();
        let scores = Shape(scores);
        let b = broadcast_shapes(&scores, &m.shape)?;
        if b != scores {
            infer_bail!(
                "attn_mask {} does not broadcast to the scores' shape {scores}",
                m.shape
            );
        }
    }
    one(q.dtype, out, q)
}

/// `scaled_dot_product_attention_backward(grad_out, query, key, value, out,
/// attn_mask?)`: the forward's checks, `grad_out` and `out` of the forward's output
/// metadata; outputs the metadata of query, key and value.
pub fn sdpa_backward(x: &[&TensorMeta], a: &Attrs) -> Out {
    let mut fwd: Vec<&TensorMeta> = vec![x[1], x[2], x[3]];
    fwd.extend(x.get(5).copied());
    let out = sdpa(&fwd, a)?.remove(0);
    for (what, m) in [("grad_out", x[0]), ("out", x[4])] {
        if m.dtype != out.dtype || m.shape != out.shape {
            infer_bail!("{what} is {m}, expected the attention output's {out}");
        }
    }
    Ok(vec![x[1].clone(), x[2].clone(), x[3].clone()])
}

/// The loss shape of `cross_entropy(input, target)` after checking both.
fn cross_entropy_loss(x: &[&TensorMeta], a: &Attrs) -> Result<TensorMeta, InferError> {
    let (input, target) = (x[0], x[1]);
    if !input.dtype.is_float() || input.rank() == 0 {
        infer_bail!("input must be float logits [.., C], found {input}");
    }
    if target.dtype != DType::I64 {
        infer_bail!("target must be i64 class indices, found {}", target.dtype);
    }
    let rows = Shape(input.shape.0[..input.rank() - 1].into());
    if target.shape != rows {
        infer_bail!(
            "target {} must have the input's shape without the class dim, {rows}",
            target.shape
        );
    }
    let ls = a.float("label_smoothing")?;
    if !(0.0..=1.0).contains(&ls) {
        infer_bail!("label_smoothing must be in [0, 1], found {ls}");
    }
    a.int("ignore_index")?;
    Ok(match a.str("reduction")? {
        "none" => TensorMeta {
            dtype: input.dtype,
            shape: rows,
            device: input.device,
        },
        "mean" | "sum" => TensorMeta {
            dtype: input.dtype,
            shape: Shape::default(),
            device: input.device,
        },
        other => infer_bail!("reduction must be \"mean\", \"sum\" or \"none\", found {other:?}"),
    })
}

/// `cross_entropy(input, target)`: a scalar, or one loss per row with `reduction="none"`.
pub fn cross_entropy(x: &[&TensorMeta], a: &Attrs) -> Out {
    Ok(vec![cross_entropy_loss(x, a)?])
}

/// `cross_entropy_backward(grad_out, input, target)`: the input's metadata.
pub fn cross_entropy_backward(x: &[&TensorMeta], a: &Attrs) -> Out {
    let loss = cross_entropy_loss(&x[1..], a)?;
    if x[0].dtype != loss.dtype || x[0].shape != loss.shape {
        infer_bail!("grad_out is {}, expected the loss's {loss}", x[0]);
    }
    Ok(vec![x[1].clone()])
}

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
    if !index.dtype().is_int() {
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
