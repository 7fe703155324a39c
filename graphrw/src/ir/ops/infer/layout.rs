//! Inference of the layout ops: transposes, reshapes (symbolic ones included),
//! `expand`, `squeeze`/`unsqueeze`, `concat`, `split` and `slice`.

use super::*;
use crate::ir::sym::bounds::Bounds;
use crate::ir::sym::in_force;

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
        (None, Some(i)) => {
            let others: Vec<SymExpr> = target
                .iter()
                .filter(|&&d| d != -1)
                .map(|&d| SymExpr::int(d))
                .collect();
            out[i] = inferred_dim(&x[0].shape, &others, &SymExpr::int(known as i64))?
        }
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

/// The `-1` of a reshape of `shape` whose other entries are `others` (multiplying to
/// `rest`): the exact quotient where there is one (a symbolic divisor divides only
/// where it is at least 1, which the reshape itself proves for the whole graph: it
/// fails at run time with a `-1` beside a product of 0, see [`Bounds::divisor`] and
/// [`in_force::prove`]), a floor division by a constant, else
/// a fresh symbol (bound from the tensor at run time). Entries equal to a dim of
/// `shape` cancel first, so that merging or splitting dims around a symbolic one
/// (`[b, 32, past + new, 64]` to `[-1, past + new, 64]`) gives the product of the rest
/// (`32 b`), which dividing the expanded element counts cannot.
fn inferred_dim(shape: &Shape, others: &[SymExpr], rest: &SymExpr) -> Result<Dim, InferError> {
    if rest.as_const() == Some(0) {
        infer_bail!("cannot reshape {shape} to a shape with a 0 and a -1");
    }
    // Every run the reshape does not fail has `rest >= 1`: the model proves it.
    in_force::prove(&Bounds::divisor(rest));
    let quotient = cancelled_quotient(shape, others).or_else(|| {
        let n = shape.numel_expr()?;
        n.div_floor_within(rest, &in_force::current().merge(&Bounds::divisor(rest)))
    });
    Ok(quotient
        .and_then(Dim::from_expr)
        .unwrap_or_else(|| Dim::sym(&format!("{shape}/{rest}"))))
}

/// The product of `shape`'s dims over that of `others`, after cancelling each entry of
/// `others` against an equal dim of `shape`; `None` where what is left does not divide
/// exactly.
fn cancelled_quotient(shape: &Shape, others: &[SymExpr]) -> Option<SymExpr> {
    let mut left: Vec<SymExpr> = shape.0.iter().map(Dim::to_expr).collect();
    let mut divisor = SymExpr::int(1);
    for e in others {
        match left.iter().position(|d| d == e) {
            Some(i) => {
                left.swap_remove(i);
            }
            None => divisor = divisor.mul(e)?,
        }
    }
    let numerator = left.iter().try_fold(SymExpr::int(1), |acc, d| acc.mul(d))?;
    // The divisor is part of `rest`, which `inferred_dim` proved at least 1.
    let bounds = in_force::current().merge(&Bounds::divisor(&divisor));
    let q = numerator.div_floor_within(&divisor, &bounds)?;
    // Exact only: the quotient times the divisor gives the numerator back.
    (q.mul(&divisor)? == numerator).then_some(q)
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
        Some(i) => {
            let others: Vec<SymExpr> = target
                .iter()
                .filter(|e| e.as_const() != Some(-1))
                .cloned()
                .collect();
            out[i] = inferred_dim(&x[0].shape, &others, &rest)?
        }
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
            if j != d && !dims_agree(q, p) {
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
    let len = match len.sign_within(&in_force::current()) {
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
