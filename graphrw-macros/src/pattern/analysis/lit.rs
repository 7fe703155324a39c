//! Literals and signature text: number and attribute literals, `a..=b` bounds, attribute
//! defaults, and an op's signature as errors quote it.

use super::*;

pub(super) fn is_upper(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_uppercase()) && !s.chars().any(|c| c.is_ascii_lowercase())
}

pub(super) fn flatten_or<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Binary(b) if matches!(b.op, BinOp::BitOr(_)) => {
            flatten_or(&b.left, out);
            flatten_or(&b.right, out);
        }
        Expr::Paren(p) if matches!(&*p.expr, Expr::Binary(b) if matches!(b.op, BinOp::BitOr(_))) => {
            flatten_or(&p.expr, out)
        }
        e => out.push(e),
    }
}

pub(super) fn number(l: &SynLit) -> Option<f64> {
    match l {
        SynLit::Int(i) => i.base10_parse::<f64>().ok(),
        SynLit::Float(f) => f.base10_parse::<f64>().ok(),
        _ => None,
    }
}

/// A literal: numbers (possibly negated), bools, strings, int lists.
pub fn literal(e: &Expr) -> Option<Lit> {
    match e {
        Expr::Paren(p) => literal(&p.expr),
        Expr::Lit(l) => match &l.lit {
            SynLit::Int(i) => i.base10_parse::<i64>().ok().map(Lit::Int),
            SynLit::Float(f) => f.base10_parse::<f64>().ok().map(Lit::Float),
            SynLit::Bool(b) => Some(Lit::Bool(b.value)),
            SynLit::Str(s) => Some(Lit::Str(s.value())),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match literal(&u.expr)? {
            Lit::Int(v) => Some(Lit::Int(-v)),
            Lit::Float(v) => Some(Lit::Float(-v)),
            _ => None,
        },
        Expr::Array(a) => a
            .elems
            .iter()
            .map(|x| match literal(x) {
                Some(Lit::Int(v)) => Some(v),
                _ => None,
            })
            .collect::<Option<Vec<i64>>>()
            .map(Lit::Ints),
        _ => None,
    }
}

pub(super) fn range_bounds(e: &Expr) -> Option<(u16, u16)> {
    let int = |e: &Expr| match literal(e) {
        Some(Lit::Int(v)) if (0..u16::MAX as i64).contains(&v) => Some(v as u16),
        _ => None,
    };
    match e {
        Expr::Range(r) => {
            let min = match &r.start {
                Some(s) => int(s)?,
                None => 0,
            };
            let max = match (&r.end, &r.limits) {
                (None, _) => u16::MAX,
                (Some(x), syn::RangeLimits::Closed(_)) => int(x)?,
                (Some(x), syn::RangeLimits::HalfOpen(_)) => int(x)?.checked_sub(1)?,
            };
            Some((min, max))
        }
        e => int(e).map(|n| (n, n)),
    }
}

pub(super) fn default_lit(d: DefaultValue) -> Option<Lit> {
    Some(match d {
        DefaultValue::Required => return None,
        DefaultValue::Null => Lit::Null,
        DefaultValue::Int(v) => Lit::Int(v),
        DefaultValue::Float(v) => Lit::Float(v),
        DefaultValue::Bool(v) => Lit::Bool(v),
        DefaultValue::Ints(v) => Lit::Ints(v.to_vec()),
        DefaultValue::Str(v) => Lit::Str(v.to_string()),
        DefaultValue::DType(v) => {
            Lit::DType(DTYPES.iter().find(|d| **d == v).copied().unwrap_or("f32"))
        }
    })
}

/// "2 operands (input, other) and attributes dim0, dim1" for messages.
pub fn signature(op: &OpSpec) -> String {
    let ops: Vec<String> = op
        .operands
        .iter()
        .map(|o| match o.arity {
            Arity::Required => o.name.to_string(),
            Arity::Optional => format!("{}?", o.name),
            Arity::Variadic => format!("[{}..]", o.name),
        })
        .collect();
    let n = op.operands.len();
    let mut s = format!(
        "{n} operand{} ({})",
        if n == 1 { "" } else { "s" },
        ops.join(", ")
    );
    if op.attrs.is_empty() {
        s.push_str(" and no attributes");
    } else {
        let attrs: Vec<String> = op
            .attrs
            .iter()
            .map(|a| match a.default {
                DefaultValue::Required => a.name.to_string(),
                _ => format!("{}?", a.name),
            })
            .collect();
        s.push_str(&format!(" then attributes {}", attrs.join(", ")));
    }
    s
}

/// Token text made readable: `rank (q) == 4` -> `rank(q) == 4`.
pub fn tidy(s: &str) -> String {
    s.replace(" (", "(")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(" ,", ",")
        .replace("- ", "-")
        .replace("| ", "|")
        .replace(" . ", ".")
}
