//! How a pattern's literals and constraint terms meet a graph: literal attributes,
//! constants compared within their dtype's tolerance, and the terms of `where`
//! constraints (`x.dim(-1) == 64`), evaluated, compared and shown.

use crate::ops::AttrValue;
use crate::pattern::{AttrPat, Bindings, Bound, CmpOp, Slot, Term};
use crate::{DType, Dim, Graph};

/// Whether an attribute literal of a pattern (anything but a parameter) accepts `v`.
pub(crate) fn attr_literal_matches(pat: &AttrPat, v: &AttrValue) -> bool {
    match (pat, v) {
        (AttrPat::Int(a), AttrValue::Int(b)) => a == b,
        (AttrPat::Float(a), AttrValue::Float(b)) => a == b,
        (AttrPat::Bool(a), AttrValue::Bool(b)) => a == b,
        (AttrPat::Ints(a), AttrValue::Ints(b)) => *a == b.as_slice(),
        (AttrPat::Str(a), AttrValue::Str(b)) => *a == b,
        (AttrPat::DType(a), AttrValue::DType(b)) => a == b,
        (AttrPat::Null, AttrValue::Null) => true,
        (AttrPat::OneOf(alts), v) => alts.iter().any(|a| attr_literal_matches(a, v)),
        _ => false,
    }
}

pub(super) fn close(x: f64, want: f64, dtype: DType) -> bool {
    let tol = match dtype {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F32 => 1e-6,
        _ => 1e-12,
    };
    x == want || (x - want).abs() <= tol * want.abs().max(x.abs())
}

#[derive(Debug, PartialEq)]
enum TermValue {
    Num(f64),
    Dim(Dim),
    DType(DType),
    Bool(bool),
    Other(Bound),
}

fn eval(g: &Graph, b: &Bindings, t: Term) -> Option<TermValue> {
    let meta = |s: Slot| match b.get(s) {
        Some(Bound::Value(v)) => g.meta(*v).ok(),
        _ => None,
    };
    Some(match t {
        Term::Rank(s) => TermValue::Num(meta(s)?.shape.rank() as f64),
        Term::DType(s) => TermValue::DType(meta(s)?.dtype),
        Term::Dim(s, i) => {
            let shape = &meta(s)?.shape;
            TermValue::Dim(shape.dims()[shape.axis(i)?].clone())
        }
        Term::Users(s) => match b.get(s) {
            Some(Bound::Value(v)) => {
                TermValue::Num((g.use_count(*v) + usize::from(g.is_output(*v))) as f64)
            }
            _ => return None,
        },
        Term::Param(s) => match b.get(s)? {
            Bound::Int(x) => TermValue::Num(*x as f64),
            Bound::Float(x) => TermValue::Num(*x),
            Bound::Bool(x) => TermValue::Bool(*x),
            Bound::DType(x) => TermValue::DType(*x),
            other => TermValue::Other(other.clone()),
        },
        Term::Int(x) => TermValue::Num(x as f64),
        Term::Float(x) => TermValue::Num(x),
        Term::DTypeLit(x) => TermValue::DType(x),
        Term::Bool(x) => TermValue::Bool(x),
    })
}

pub(super) fn compare(g: &Graph, b: &Bindings, l: Term, op: CmpOp, r: Term) -> bool {
    let (Some(l), Some(r)) = (eval(g, b, l), eval(g, b, r)) else {
        return false;
    };
    let num = |v: &TermValue| match v {
        TermValue::Num(x) => Some(*x),
        TermValue::Dim(d) => d.known().map(|n| n as f64),
        _ => None,
    };
    if let (Some(x), Some(y)) = (num(&l), num(&r)) {
        return match op {
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
        };
    }
    match op {
        CmpOp::Eq => l == r,
        CmpOp::Ne => l != r,
        _ => false,
    }
}

/// The value of a constraint term, for explanations.
pub(super) fn show(g: &Graph, b: &Bindings, t: Term) -> String {
    match eval(g, b, t) {
        Some(TermValue::Num(x)) if x.fract() == 0.0 => format!("{}", x as i64),
        Some(TermValue::Num(x)) => format!("{x:?}"),
        Some(TermValue::Dim(d)) => format!("{d}"),
        Some(TermValue::DType(d)) => format!("{d}"),
        Some(TermValue::Bool(x)) => format!("{x}"),
        Some(TermValue::Other(o)) => format!("{o:?}"),
        None => "unknown".to_string(),
    }
}
