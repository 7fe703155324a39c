//! Inference of the source ops: `full`/`zeros`/`ones`, `arange`, `sym_ints` (sizes that
//! may be symbolic).

use super::*;

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
pub(super) fn negative(e: &SymExpr) -> bool {
    matches!(
        e.sign_within(&crate::ir::sym::in_force::current()),
        Sign::Negative | Sign::NonPositive
    ) && e.as_const() != Some(0)
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
    let n = match n.sign_within(&crate::ir::sym::in_force::current()) {
        Sign::Negative => SymExpr::int(0),
        _ => n,
    };
    let Some(d) = Dim::from_expr(n) else {
        infer_bail!("arange({start}, {end}, {step}) has a negative length");
    };
    cpu(a.dtype("dtype")?, Shape(smallvec![d]))
}
