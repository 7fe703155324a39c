//! What an expression's value is under a binding, what is known of its sign for every
//! binding (symbols are sizes, never negative), comparisons that follow from it, and
//! substitution of symbols. A `broadcast` whose sizes do not broadcast has no value
//! ([`EvalError::Broadcast`]).

use std::cmp::Ordering;

use super::{Atom, EvalError, Sign, SymExpr};

impl SymExpr {
    /// How `self` compares with `other` for every binding that meets the bounds in
    /// force ([`super::in_force`]), when that is decided (`Less` covers "at most" only
    /// when equal is impossible; see [`SymExpr::sign`]).
    pub fn compare(&self, other: &SymExpr) -> Option<Ordering> {
        if self == other {
            return Some(Ordering::Equal);
        }
        match self.sub(other)?.sign_within(&super::in_force::current()) {
            Sign::Zero => Some(Ordering::Equal),
            Sign::Positive => Some(Ordering::Greater),
            Sign::Negative => Some(Ordering::Less),
            _ => None,
        }
    }

    /// Whether `self == other` for every binding (`Some(true)`), for none
    /// (`Some(false)`), or depends (`None`).
    pub fn equals(&self, other: &SymExpr) -> Option<bool> {
        match self.compare(other) {
            Some(Ordering::Equal) => Some(true),
            Some(_) => Some(false),
            None => None,
        }
    }

    /// What is known of the sign, given that every symbol is at least zero.
    pub fn sign(&self) -> Sign {
        let c = self.constant_term();
        let vars = self.terms.iter().filter(|t| !t.factors.is_empty());
        let mut all_nonneg = true;
        let mut all_nonpos = true;
        let mut any = false;
        for t in vars {
            any = true;
            let atoms_nonneg = t.factors.iter().all(Atom::nonneg);
            all_nonneg &= atoms_nonneg && t.coeff > 0;
            all_nonpos &= atoms_nonneg && t.coeff < 0;
        }
        if !any {
            return match c.cmp(&0) {
                Ordering::Equal => Sign::Zero,
                Ordering::Greater => Sign::Positive,
                Ordering::Less => Sign::Negative,
            };
        }
        match (all_nonneg, all_nonpos) {
            (true, _) if c > 0 => Sign::Positive,
            (true, _) if c == 0 => Sign::NonNegative,
            (_, true) if c < 0 => Sign::Negative,
            (_, true) if c == 0 => Sign::NonPositive,
            _ => Sign::Unknown,
        }
    }

    /// The value under a binding of the symbols.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
        let mut sum: i64 = 0;
        for t in &self.terms {
            let mut v = t.coeff;
            for a in &t.factors {
                v = v.checked_mul(a.eval(env)?).ok_or(EvalError::Overflow)?;
            }
            sum = sum.checked_add(v).ok_or(EvalError::Overflow)?;
        }
        Ok(sum)
    }

    /// Replaces symbols by expressions (`None` from `f` keeps the symbol).
    pub fn substitute(&self, f: &dyn Fn(&str) -> Option<SymExpr>) -> Option<SymExpr> {
        let mut sum = SymExpr::int(0);
        for t in &self.terms {
            let mut p = SymExpr::int(t.coeff);
            for a in &t.factors {
                let v = match a {
                    Atom::Sym(s) => f(s).unwrap_or_else(|| SymExpr::sym_arc(s.clone())),
                    Atom::FloorDiv(e, d) => e.substitute(f)?.div_const(*d)?,
                    Atom::Min(v) | Atom::Max(v) => {
                        let v = v
                            .iter()
                            .map(|e| e.substitute(f))
                            .collect::<Option<Vec<_>>>()?;
                        SymExpr::extreme_of(&v, matches!(a, Atom::Min(_)))?
                    }
                    Atom::Broadcast(v) => {
                        let v = v
                            .iter()
                            .map(|e| e.substitute(f))
                            .collect::<Option<Vec<_>>>()?;
                        SymExpr::broadcast(&v)?
                    }
                };
                p = p.mul(&v)?;
            }
            sum = sum.add(&p)?;
        }
        Some(sum)
    }
}

impl Atom {
    fn nonneg(&self) -> bool {
        match self {
            Atom::Sym(_) => true,
            Atom::FloorDiv(e, _) => {
                matches!(e.sign(), Sign::Zero | Sign::Positive | Sign::NonNegative)
            }
            Atom::Min(v) => v
                .iter()
                .all(|e| matches!(e.sign(), Sign::Zero | Sign::Positive | Sign::NonNegative)),
            Atom::Max(v) => v
                .iter()
                .any(|e| matches!(e.sign(), Sign::Zero | Sign::Positive | Sign::NonNegative)),
            // Its value, where it has one, is one of the members' (or 1).
            Atom::Broadcast(v) => v
                .iter()
                .all(|e| matches!(e.sign(), Sign::Zero | Sign::Positive | Sign::NonNegative)),
        }
    }

    fn eval(&self, env: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
        match self {
            Atom::Sym(s) => env(s).ok_or_else(|| EvalError::Unbound(s.clone())),
            Atom::FloorDiv(e, d) => Ok(e.eval(env)?.div_euclid(*d)),
            Atom::Min(v) | Atom::Max(v) => {
                let mut out: Option<i64> = None;
                for e in v {
                    let x = e.eval(env)?;
                    out = Some(match (out, self) {
                        (None, _) => x,
                        (Some(o), Atom::Min(_)) => o.min(x),
                        (Some(o), _) => o.max(x),
                    });
                }
                out.ok_or(EvalError::Overflow)
            }
            Atom::Broadcast(v) => {
                let values = v
                    .iter()
                    .map(|e| e.eval(env))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut out = 1;
                for &x in &values {
                    if x != 1 {
                        if out != 1 && out != x {
                            return Err(EvalError::Broadcast(values));
                        }
                        out = x;
                    }
                }
                Ok(out)
            }
        }
    }
}
