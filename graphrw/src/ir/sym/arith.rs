//! The operations: sums, products, floor division and remainder by constants (kept in
//! the normal form of the module docs), exact division by a term, min and max.

use super::{Atom, Sign, SymExpr, Term, MAX_TERMS};

impl SymExpr {
    /// `self + other`.
    pub fn add(&self, other: &SymExpr) -> Option<SymExpr> {
        let terms = self.terms.iter().chain(&other.terms).cloned().collect();
        SymExpr::from_terms(terms)
    }

    /// `-self`.
    pub fn neg(&self) -> Option<SymExpr> {
        self.scale(-1)
    }

    /// `self - other`.
    pub fn sub(&self, other: &SymExpr) -> Option<SymExpr> {
        self.add(&other.neg()?)
    }

    /// `self * k`.
    pub fn scale(&self, k: i64) -> Option<SymExpr> {
        let terms = self
            .terms
            .iter()
            .map(|t| {
                Some(Term {
                    factors: t.factors.clone(),
                    coeff: t.coeff.checked_mul(k)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        SymExpr::from_terms(terms)
    }

    /// `self * other`, distributed.
    pub fn mul(&self, other: &SymExpr) -> Option<SymExpr> {
        if self.terms.len().saturating_mul(other.terms.len()) > MAX_TERMS * 4 {
            return None;
        }
        let mut terms = Vec::with_capacity(self.terms.len() * other.terms.len());
        for a in &self.terms {
            for b in &other.terms {
                let mut factors = Vec::with_capacity(a.factors.len() + b.factors.len());
                factors.extend(a.factors.iter().cloned());
                factors.extend(b.factors.iter().cloned());
                if factors.len() > MAX_TERMS {
                    return None;
                }
                factors.sort();
                terms.push(Term {
                    factors,
                    coeff: a.coeff.checked_mul(b.coeff)?,
                });
            }
        }
        SymExpr::from_terms(terms)
    }

    /// `floor(self / other)`: an atom where `other` is a positive constant; exact where
    /// `other` is one term dividing every term and the bounds in force
    /// ([`super::in_force`]) make it at least 1 (`(b*s) // s = b` needs `s >= 1`: at
    /// `s = 0` there is no quotient); `None` otherwise (including division by zero or
    /// by a negative or symbolic divisor that does not divide exactly).
    pub fn div_floor(&self, other: &SymExpr) -> Option<SymExpr> {
        if other.as_const().is_some() {
            return self.div_const(other.as_const()?);
        }
        self.div_floor_within(other, &super::in_force::current())
    }

    pub(super) fn div_const(&self, d: i64) -> Option<SymExpr> {
        if d == 0 {
            return None;
        }
        if d == 1 {
            return Some(self.clone());
        }
        if let Some(n) = self.as_const() {
            let q = n.checked_div(d)?;
            let floor = if n % d != 0 && ((n < 0) != (d < 0)) {
                q - 1
            } else {
                q
            };
            return Some(SymExpr::int(floor));
        }
        if self.terms.iter().all(|t| t.coeff % d == 0) {
            return self.div_terms(d, &[]);
        }
        if d < 0 {
            return None;
        }
        // A floor division inside, once (coefficient 1): since `e // a + t` is
        // `(e + a*t) // a` for an integer `t`, `(e // a + t) // d` is
        // `(e + a*t) // (a*d)`: `(s // 2) // 2` is `s // 4`.
        if let Some((inner, a, others)) = self.one_floor_div() {
            let flat = inner.add(&others.scale(a)?)?;
            return flat.div_const(a.checked_mul(d)?);
        }
        // Pull out of every term what `d` divides: floor((d*q + r) / d) = q + floor(r / d)
        // for integers, each coefficient split as `d*q + r` with `0 <= r < d`, so that
        // the floor division keeps coefficients below `d` only (one form: `(5s) // 4`
        // is `s + s // 4`).
        let mut whole = Vec::with_capacity(self.terms.len());
        let mut rest = Vec::with_capacity(self.terms.len());
        for t in &self.terms {
            let (q, r) = (t.coeff.div_euclid(d), t.coeff.rem_euclid(d));
            if q != 0 {
                whole.push(Term {
                    factors: t.factors.clone(),
                    coeff: q.checked_mul(d)?,
                });
            }
            if r != 0 {
                rest.push(Term {
                    factors: t.factors.clone(),
                    coeff: r,
                });
            }
        }
        let rest = SymExpr::from_terms(rest)?;
        let atom = if let Some(n) = rest.as_const() {
            SymExpr::int(n.div_euclid(d))
        } else {
            // A factor common to every coefficient and `d` cancels
            // (`(2s + 2) // 4` is `(s + 1) // 2`); more generally, a factor `g` of `d` and of every coefficient but the constant `c`'s: since
            // `(g*p + c) // (g*e)` is `((g*p + c) // g) // e`, it is `(p + c // g) // e`.
            // Again from the top: what is left may be a bare floor division.
            let g = rest
                .terms
                .iter()
                .filter(|t| !t.factors.is_empty())
                .fold(d, |g, t| gcd(g, t.coeff));
            if g > 1 {
                let c = rest.constant_term();
                let p = rest.sub(&SymExpr::int(c))?.div_terms(g, &[])?;
                p.add(&SymExpr::int(c.div_euclid(g)))?.div_const(d / g)?
            } else if rest.one_floor_div().is_some() {
                rest.div_const(d)?
            } else {
                SymExpr::atom(Atom::FloorDiv(Box::new(rest), d))
            }
        };
        SymExpr::from_terms(whole)?.div_terms(d, &[])?.add(&atom)
    }

    /// When one term is a bare floor division `e // a` (coefficient 1, no other
    /// factor): `e`, `a` and the other terms.
    fn one_floor_div(&self) -> Option<(SymExpr, i64, SymExpr)> {
        let i = self
            .terms
            .iter()
            .position(|t| t.coeff == 1 && matches!(t.factors.as_slice(), [Atom::FloorDiv(..)]))?;
        let [Atom::FloorDiv(inner, a)] = self.terms[i].factors.as_slice() else {
            return None;
        };
        let mut others = self.terms.clone();
        others.remove(i);
        Some(((**inner).clone(), *a, SymExpr::from_terms(others)?))
    }

    /// Divides every term's coefficient by `d` and removes `factors` from every term
    /// (the caller checked both divide).
    fn div_terms(&self, d: i64, factors: &[Atom]) -> Option<SymExpr> {
        let terms = self
            .terms
            .iter()
            .map(|t| {
                Some(Term {
                    factors: remove_factors(&t.factors, factors)?,
                    coeff: t.coeff.checked_div(d)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        SymExpr::from_terms(terms)
    }

    /// `self / other` where `other` is one term dividing every term of `self`.
    pub(super) fn div_exact(&self, other: &SymExpr) -> Option<SymExpr> {
        let [divisor] = other.terms.as_slice() else {
            return None;
        };
        if self.terms.iter().any(|t| {
            t.coeff % divisor.coeff != 0 || remove_factors(&t.factors, &divisor.factors).is_none()
        }) {
            return None;
        }
        self.div_terms(divisor.coeff, &divisor.factors)
    }

    /// `self mod d` for a positive constant `d` (the result has `d`'s sign, as in Python).
    pub fn rem_const(&self, d: i64) -> Option<SymExpr> {
        let q = self.div_const(d)?;
        self.sub(&q.scale(d)?)
    }

    /// The smaller of `self` and `other`.
    pub fn minimum(&self, other: &SymExpr) -> Option<SymExpr> {
        self.extreme(other, true)
    }

    /// The larger of `self` and `other`.
    pub fn maximum(&self, other: &SymExpr) -> Option<SymExpr> {
        self.extreme(other, false)
    }

    /// The smallest (`min`) or largest of any number of expressions, in the normal
    /// form of the module docs; `None` for no expression, or past the limits.
    /// A member is dropped where another beats it for every binding that meets the
    /// bounds in force ([`super::in_force`]).
    pub fn extreme_of(exprs: &[SymExpr], min: bool) -> Option<SymExpr> {
        let bounds = super::in_force::current();
        if bounds.is_empty() {
            return SymExpr::extreme_by(exprs, min, &SymExpr::sign);
        }
        SymExpr::extreme_within(exprs, min, &bounds)
    }

    /// [`SymExpr::extreme_of`], deciding which member beats another by `sign` of their
    /// difference (the bounds of [`super::bounds`] decide more than [`SymExpr::sign`]).
    pub(super) fn extreme_by(
        exprs: &[SymExpr],
        min: bool,
        sign: &dyn Fn(&SymExpr) -> Sign,
    ) -> Option<SymExpr> {
        let mut members: Vec<SymExpr> = Vec::with_capacity(exprs.len());
        for e in exprs {
            match e.as_extreme(min) {
                Some(inner) => members.extend(inner.iter().cloned()),
                None => members.push(e.clone()),
            }
        }
        if members.len() > MAX_TERMS {
            return None;
        }
        // Constants last: `min(seq, 512)`.
        members.sort_by(|a, b| (a.as_const().is_some(), a).cmp(&(b.as_const().is_some(), b)));
        members.dedup();
        // Drop every member another provably beats (ties went with `dedup`).
        let mut keep = vec![true; members.len()];
        for j in 0..members.len() {
            for i in 0..members.len() {
                if i == j || !keep[i] {
                    continue;
                }
                let diff = members[i].sub(&members[j])?;
                // What `sign` knows of the difference, or of its negation.
                let known = match sign(&diff) {
                    Sign::Unknown => match sign(&diff.neg()?) {
                        Sign::Positive => Sign::Negative,
                        Sign::Negative => Sign::Positive,
                        Sign::NonNegative => Sign::NonPositive,
                        Sign::NonPositive => Sign::NonNegative,
                        s => s,
                    },
                    s => s,
                };
                let beats = match known {
                    Sign::Zero | Sign::Negative | Sign::NonPositive => min,
                    Sign::Positive | Sign::NonNegative => !min,
                    Sign::Unknown => false,
                };
                if beats {
                    keep[j] = false;
                    break;
                }
            }
        }
        let mut kept: Vec<SymExpr> = members
            .into_iter()
            .zip(keep)
            .filter_map(|(e, k)| k.then_some(e))
            .collect();
        match kept.len() {
            0 => None,
            1 => kept.pop(),
            _ => SymExpr::atom(if min {
                Atom::Min(kept)
            } else {
                Atom::Max(kept)
            })
            .checked(),
        }
    }

    /// The size `exprs` broadcast to, numpy's rule for one dim: where every size that
    /// is not 1 is one value, that value (1 where all are 1); where two that are not 1
    /// differ, no value (an error at run time). Two unrelated symbols are never assumed
    /// equal: `broadcast(past + 1, seq)` stays an atom, bound when they are.
    ///
    /// The normal form: nested broadcasts are flattened, 1s dropped, the members
    /// sorted and distinct; a member that is a constant other than 1 is the result
    /// (every other member must be 1 or it wherever the expression has a value, as
    /// inference always took a size against a symbol); `None` for two different such
    /// constants, for no member, or past the limits.
    pub fn broadcast(exprs: &[SymExpr]) -> Option<SymExpr> {
        let mut members: Vec<SymExpr> = Vec::with_capacity(exprs.len());
        for e in exprs {
            match e.as_broadcast() {
                Some(inner) => members.extend(inner.iter().cloned()),
                None => members.push(e.clone()),
            }
        }
        if exprs.is_empty() || members.len() > MAX_TERMS {
            return None;
        }
        members.retain(|e| e.as_const() != Some(1));
        let mut constants = members.iter().filter_map(SymExpr::as_const);
        if let Some(c) = constants.next() {
            return constants.all(|d| d == c).then(|| SymExpr::int(c));
        }
        members.sort();
        members.dedup();
        match members.len() {
            0 => Some(SymExpr::int(1)),
            1 => members.pop(),
            _ => SymExpr::atom(Atom::Broadcast(members)).checked(),
        }
    }

    /// The members when the expression is exactly one `broadcast` atom.
    pub fn as_broadcast(&self) -> Option<&[SymExpr]> {
        match self.terms.as_slice() {
            [Term { factors, coeff: 1 }] => match factors.as_slice() {
                [Atom::Broadcast(v)] => Some(v),
                _ => None,
            },
            _ => None,
        }
    }

    /// The operands when the expression is exactly one `min` (or `max`) atom.
    fn as_extreme(&self, min: bool) -> Option<&[SymExpr]> {
        match self.terms.as_slice() {
            [Term { factors, coeff: 1 }] => match (factors.as_slice(), min) {
                ([Atom::Min(v)], true) | ([Atom::Max(v)], false) => Some(v),
                _ => None,
            },
            _ => None,
        }
    }

    fn extreme(&self, other: &SymExpr, min: bool) -> Option<SymExpr> {
        SymExpr::extreme_of(&[self.clone(), other.clone()], min)
    }
}

/// The greatest common divisor of `|a|` and `|b|` (`gcd(0, b) = |b|`).
fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    i64::try_from(a).unwrap_or(1)
}

/// `factors` without one occurrence of each of `remove` (both sorted), or `None` when
/// one is missing.
fn remove_factors(factors: &[Atom], remove: &[Atom]) -> Option<Vec<Atom>> {
    let mut out = factors.to_vec();
    for r in remove {
        let i = out.iter().position(|a| a == r)?;
        out.remove(i);
    }
    Some(out)
}
