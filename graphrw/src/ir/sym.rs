//! Symbolic integers: the algebra of dims that are known only at run time.
//!
//! A [`SymExpr`] is an integer expression over named symbols (`batch`, `seq`, `past`),
//! kept in one canonical form so that equal expressions compare equal:
//!
//! - a sum of terms, each an integer coefficient times a product of atoms, sorted, with no
//!   zero coefficient and no two terms over the same product (`batch*seq*12 + past + 1`);
//! - an atom is a symbol, or what a polynomial cannot say: the floor division of an
//!   expression by a positive constant (`seq // 2`), or the minimum or maximum of two or
//!   more expressions (`min(seq, 512)`), each simplified where its value is decided and
//!   kept in a normal form: a floor division's operand and divisor share no factor
//!   (`(2s + 2) // 4` is `(s + 1) // 2`) and hold no bare floor division
//!   (`(s // 2) // 2` is `s // 4`); a `min` or `max` is n-ary, its operands sorted,
//!   distinct, none itself the same extreme (`min(min(a, b), c)` is `min(a, b, c)`),
//!   none provably beyond another (`min(s, s + 1, t)` is `min(s, t)`).
//!
//! Every operation is checked: an overflow or an expression past [`MAX_TERMS`] terms or
//! [`MAX_DEPTH`] levels of nesting gives `None` rather than a wrong value or unbounded
//! work (shape arithmetic in a hostile model can be huge or deep). Symbols stand for
//! sizes, so they are never negative; that is all the sign reasoning assumes
//! ([`SymExpr::sign`]). Two different symbols are never assumed equal.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

pub mod parse;

/// A symbol's name, shared: one thin pointer (8 bytes, where `Arc<str>` takes 16), so
/// that a [`Dim`](crate::meta::Dim) stays 16 bytes and a node's metadata stays small.
pub type Symbol = Arc<Box<str>>;

/// The [`Symbol`] named `name`.
pub fn symbol(name: &str) -> Symbol {
    Arc::new(Box::from(name))
}

/// The most terms one expression may have.
pub const MAX_TERMS: usize = 64;
/// The deepest nesting of `//`, `min` and `max` one expression may have.
pub const MAX_DEPTH: usize = 8;

/// A canonical symbolic integer (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SymExpr {
    /// Sorted by factors; the constant term (no factors) first; no zero coefficient.
    terms: Vec<Term>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Term {
    /// Sorted; a repeated atom is a power.
    factors: Vec<Atom>,
    coeff: i64,
}

/// A factor of a term that is not a number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Atom {
    /// A named size.
    Sym(Symbol),
    /// `floor(e / d)`, `d > 1`.
    FloorDiv(Box<SymExpr>, i64),
    /// The smallest of two or more expressions (sorted, distinct).
    Min(Vec<SymExpr>),
    /// The largest of two or more expressions (sorted, distinct).
    Max(Vec<SymExpr>),
}

/// One factor of a term, as [`SymExpr::terms`] shows it.
#[derive(Clone, Copy, Debug)]
pub enum Factor<'a> {
    /// A symbol.
    Sym(&'a Symbol),
    /// `floor(e / d)`, `d > 1`.
    FloorDiv(&'a SymExpr, i64),
    /// The smallest of two or more expressions.
    Min(&'a [SymExpr]),
    /// The largest of two or more expressions.
    Max(&'a [SymExpr]),
}

/// Why an expression has no value under a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// A symbol with no value.
    Unbound(Symbol),
    /// The value does not fit an `i64`.
    Overflow,
    /// A size came out negative.
    Negative(i64),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Unbound(s) => write!(f, "symbol `{s}` has no value"),
            EvalError::Overflow => f.write_str("the value overflows a 64-bit integer"),
            EvalError::Negative(v) => write!(f, "a size evaluates to {v}"),
        }
    }
}

impl std::error::Error for EvalError {}

/// What is known of an expression's sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sign {
    /// Zero for every binding.
    Zero,
    /// Above zero for every binding.
    Positive,
    /// Below zero for every binding.
    Negative,
    /// At least zero for every binding.
    NonNegative,
    /// At most zero for every binding.
    NonPositive,
    /// Depends on the binding.
    Unknown,
}

impl SymExpr {
    /// The constant `n`.
    pub fn int(n: i64) -> SymExpr {
        let mut e = SymExpr::default();
        if n != 0 {
            e.terms.push(Term {
                factors: Vec::new(),
                coeff: n,
            });
        }
        e
    }

    /// The symbol `name`.
    pub fn sym(name: &str) -> SymExpr {
        SymExpr::atom(Atom::Sym(symbol(name)))
    }

    /// The expression `text` writes in the form `Display` gives (`past + 1`,
    /// `(s + 1) // 2`, `min(a, b)`), or `None` where it is not one (see [`parse`]).
    pub fn parse(text: &str) -> Option<SymExpr> {
        parse::parse(text)
    }

    /// The symbol `name`, sharing its storage.
    pub fn sym_arc(name: Symbol) -> SymExpr {
        SymExpr::atom(Atom::Sym(name))
    }

    fn atom(a: Atom) -> SymExpr {
        SymExpr {
            terms: vec![Term {
                factors: vec![a],
                coeff: 1,
            }],
        }
    }

    /// The terms, each a coefficient and its factors (none for the constant term): what
    /// an exporter needs to write the expression as arithmetic.
    pub fn terms(&self) -> impl Iterator<Item = (i64, Vec<Factor<'_>>)> + '_ {
        self.terms.iter().map(|t| {
            let factors = t
                .factors
                .iter()
                .map(|a| match a {
                    Atom::Sym(s) => Factor::Sym(s),
                    Atom::FloorDiv(e, d) => Factor::FloorDiv(e, *d),
                    Atom::Min(v) => Factor::Min(v),
                    Atom::Max(v) => Factor::Max(v),
                })
                .collect();
            (t.coeff, factors)
        })
    }

    /// The value when it does not depend on any symbol.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [t] if t.factors.is_empty() => Some(t.coeff),
            _ => None,
        }
    }

    /// The symbol's name when the expression is exactly one symbol.
    pub fn as_sym(&self) -> Option<&Symbol> {
        match self.terms.as_slice() {
            [Term { factors, coeff: 1 }] => match factors.as_slice() {
                [Atom::Sym(s)] => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// The constant term.
    pub fn constant_term(&self) -> i64 {
        match self.terms.first() {
            Some(t) if t.factors.is_empty() => t.coeff,
            _ => 0,
        }
    }

    /// Every symbol the expression reads, each once, in order of first appearance.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out
    }

    fn collect_symbols(&self, out: &mut Vec<Symbol>) {
        for t in &self.terms {
            for a in &t.factors {
                match a {
                    Atom::Sym(s) => {
                        if !out.contains(s) {
                            out.push(s.clone());
                        }
                    }
                    Atom::FloorDiv(e, _) => e.collect_symbols(out),
                    Atom::Min(v) | Atom::Max(v) => {
                        for e in v {
                            e.collect_symbols(out);
                        }
                    }
                }
            }
        }
    }

    fn depth(&self) -> usize {
        self.terms
            .iter()
            .flat_map(|t| &t.factors)
            .map(|a| match a {
                Atom::Sym(_) => 0,
                Atom::FloorDiv(e, _) => 1 + e.depth(),
                Atom::Min(v) | Atom::Max(v) => 1 + v.iter().map(SymExpr::depth).max().unwrap_or(0),
            })
            .max()
            .unwrap_or(0)
    }

    fn checked(self) -> Option<SymExpr> {
        (self.terms.len() <= MAX_TERMS && self.depth() <= MAX_DEPTH).then_some(self)
    }

    /// Builds the canonical form from terms in any order.
    fn from_terms(mut terms: Vec<Term>) -> Option<SymExpr> {
        terms.sort_by(|a, b| a.factors.cmp(&b.factors));
        let mut out: Vec<Term> = Vec::with_capacity(terms.len());
        for t in terms {
            match out.last_mut() {
                Some(last) if last.factors == t.factors => {
                    last.coeff = last.coeff.checked_add(t.coeff)?;
                }
                _ => out.push(t),
            }
        }
        out.retain(|t| t.coeff != 0);
        SymExpr { terms: out }.checked()
    }

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

    /// `floor(self / other)`: exact where `other` divides every term, an atom where it is
    /// a positive constant, `None` otherwise (including division by zero or by a
    /// negative or symbolic divisor that does not divide exactly).
    pub fn div_floor(&self, other: &SymExpr) -> Option<SymExpr> {
        if let Some(d) = other.as_const() {
            return self.div_const(d);
        }
        self.div_exact(other)
    }

    fn div_const(&self, d: i64) -> Option<SymExpr> {
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
    fn div_exact(&self, other: &SymExpr) -> Option<SymExpr> {
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
    pub fn extreme_of(exprs: &[SymExpr], min: bool) -> Option<SymExpr> {
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
                let beats = match members[i].sub(&members[j])?.sign() {
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

    /// How `self` compares with `other` for every binding, when that is decided
    /// (`Less` covers "at most" only when equal is impossible; see [`SymExpr::sign`]).
    pub fn compare(&self, other: &SymExpr) -> Option<Ordering> {
        if self == other {
            return Some(Ordering::Equal);
        }
        match self.sub(other)?.sign() {
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
                };
                p = p.mul(&v)?;
            }
            sum = sum.add(&p)?;
        }
        Some(sum)
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
        }
    }
}

impl From<i64> for SymExpr {
    fn from(n: i64) -> SymExpr {
        SymExpr::int(n)
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Sym(s) => f.write_str(s),
            // Parenthesised where `//` would otherwise read more than the operand
            // (`(s + 1) // 2`, `(-s) // 2`), so that [`parse`] reads it back.
            Atom::FloorDiv(e, d) if e.terms.len() > 1 || e.terms.iter().any(|t| t.coeff < 0) => {
                write!(f, "({e}) // {d}")
            }
            Atom::FloorDiv(e, d) => write!(f, "{e} // {d}"),
            Atom::Min(v) | Atom::Max(v) => {
                f.write_str(if matches!(self, Atom::Min(_)) {
                    "min("
                } else {
                    "max("
                })?;
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl fmt::Display for SymExpr {
    /// `batch*seq*12 + past + 1`: symbolic terms first, in canonical order, then the
    /// constant.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        let symbolic = self.terms.iter().filter(|t| !t.factors.is_empty());
        let constant = self.terms.iter().filter(|t| t.factors.is_empty());
        for (i, t) in symbolic.chain(constant).enumerate() {
            let (sign, mag) = if t.coeff < 0 {
                ("-", t.coeff.unsigned_abs())
            } else {
                ("+", t.coeff as u64)
            };
            match (i, sign) {
                (0, "-") => f.write_str("-")?,
                (0, _) => {}
                _ => write!(f, " {sign} ")?,
            }
            for (j, a) in t.factors.iter().enumerate() {
                if j > 0 {
                    f.write_str("*")?;
                }
                // `//` reads left to right at the precedence of `*`, and a leading
                // minus binds tighter: a floor division after another factor, or first
                // in a negated leading term, is parenthesised (`a*(s // 2)`,
                // `-(s // 2)`), so that [`parse`] reads the same expression back.
                let wrap = matches!(a, Atom::FloorDiv(..)) && (j > 0 || (i == 0 && t.coeff < 0));
                match wrap {
                    true => write!(f, "({a})")?,
                    false => write!(f, "{a}")?,
                }
            }
            if t.factors.is_empty() {
                write!(f, "{mag}")?;
            } else if mag != 1 {
                write!(f, "*{mag}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: &str) -> SymExpr {
        SymExpr::sym(n)
    }
    fn k(n: i64) -> SymExpr {
        SymExpr::int(n)
    }

    #[test]
    fn equal_sums_compare_equal_whatever_their_order() {
        let a = s("past").add(&s("seq")).unwrap().add(&k(1)).unwrap();
        let b = k(1).add(&s("seq")).unwrap().add(&s("past")).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "past + seq + 1");
        assert_eq!(a.sub(&s("past")).unwrap().sub(&k(1)).unwrap(), s("seq"));
        assert_eq!(a.sub(&a).unwrap().as_const(), Some(0));
    }

    #[test]
    fn products_distribute_and_divide_back() {
        let bs = s("batch").mul(&s("seq")).unwrap();
        let numel = bs.mul(&k(768)).unwrap();
        assert_eq!(numel.to_string(), "batch*seq*768");
        let part = bs.mul(&k(12)).unwrap();
        assert_eq!(numel.div_floor(&part).unwrap(), k(64));
        assert_eq!(numel.div_floor(&k(64)).unwrap(), bs.mul(&k(12)).unwrap());
        assert_eq!(
            numel.div_floor(&s("seq")).unwrap(),
            s("batch").mul(&k(768)).unwrap()
        );
        // A divisor that does not divide every term: no exact quotient.
        assert!(numel.add(&k(1)).unwrap().div_floor(&s("seq")).is_none());
        let sq = s("seq")
            .add(&k(1))
            .unwrap()
            .mul(&s("seq").add(&k(1)).unwrap())
            .unwrap();
        assert_eq!(sq.to_string(), "seq*2 + seq*seq + 1");
    }

    #[test]
    fn floor_division_by_a_constant_is_an_atom_unless_it_divides() {
        let h = s("seq").div_floor(&k(2)).unwrap();
        assert_eq!(h.to_string(), "seq // 2");
        assert_eq!(h.eval(&|_| Some(7)), Ok(3));
        let e = s("seq")
            .scale(4)
            .unwrap()
            .add(&k(6))
            .unwrap()
            .div_floor(&k(4))
            .unwrap();
        // floor((4 seq + 6) / 4) = seq + 1 (6 // 4)
        assert_eq!(e, s("seq").add(&k(1)).unwrap());
        assert_eq!(k(-7).div_floor(&k(2)).unwrap(), k(-4));
        assert_eq!(k(7).div_floor(&k(-2)).unwrap(), k(-4));
        assert!(k(7).div_floor(&k(0)).is_none());
        assert_eq!(s("seq").rem_const(2).unwrap().eval(&|_| Some(7)), Ok(1));
    }

    #[test]
    fn min_and_max_decide_what_the_signs_decide() {
        let seq = s("seq");
        let seq1 = seq.add(&k(1)).unwrap();
        assert_eq!(seq.minimum(&seq1).unwrap(), seq);
        assert_eq!(seq.maximum(&seq1).unwrap(), seq1);
        assert_eq!(seq.maximum(&k(0)).unwrap(), seq, "sizes are never negative");
        let m = seq.minimum(&k(512)).unwrap();
        assert_eq!(m.to_string(), "min(seq, 512)");
        assert_eq!(m, k(512).minimum(&seq).unwrap(), "min is symmetric");
        assert_eq!(m.eval(&|_| Some(600)), Ok(512));
        assert_eq!(seq.equals(&k(-1)), Some(false));
        assert_eq!(
            seq.equals(&s("past")),
            None,
            "two symbols are not assumed equal"
        );
    }

    #[test]
    fn nested_floor_divisions_and_common_factors_have_one_form() {
        let two_s_plus_2 = s("s").scale(2).unwrap().add(&k(2)).unwrap();
        let s_plus_1 = s("s").add(&k(1)).unwrap();
        assert_eq!(
            two_s_plus_2.div_floor(&k(4)).unwrap(),
            s_plus_1.div_floor(&k(2)).unwrap()
        );
        assert_eq!(
            two_s_plus_2.div_floor(&k(4)).unwrap().to_string(),
            "(s + 1) // 2"
        );
        let quarter = s("s").div_floor(&k(2)).unwrap().div_floor(&k(2)).unwrap();
        assert_eq!(quarter, s("s").div_floor(&k(4)).unwrap());
        // With a term beside the inner division: (s // 2 + t) // 3 = (s + 2t) // 6.
        let e = s("s").div_floor(&k(2)).unwrap().add(&s("t")).unwrap();
        let flat = s("s").add(&s("t").scale(2).unwrap()).unwrap();
        assert_eq!(e.div_floor(&k(3)).unwrap(), flat.div_floor(&k(6)).unwrap());
        // A factor of the divisor and of every coefficient but the constant's:
        // (2s + 1) // 4 is s // 2, (3s + 5) // 6 is (s + 1) // 2.
        let odd = s("s")
            .scale(2)
            .unwrap()
            .add(&k(1))
            .unwrap()
            .div_floor(&k(4));
        assert_eq!(odd.unwrap(), s("s").div_floor(&k(2)).unwrap());
        let e = s("s")
            .scale(3)
            .unwrap()
            .add(&k(5))
            .unwrap()
            .div_floor(&k(6));
        assert_eq!(e.unwrap(), s_plus_1.div_floor(&k(2)).unwrap());
        // Coefficients past the divisor come out: (5s) // 4 is s + s // 4.
        let five = s("s").scale(5).unwrap().div_floor(&k(4)).unwrap();
        assert_eq!(five.to_string(), "s + s // 4");
        // Terms with no common factor stay: (2s + t) // 4.
        let mixed = s("s")
            .scale(2)
            .unwrap()
            .add(&s("t"))
            .unwrap()
            .div_floor(&k(4));
        assert_eq!(mixed.unwrap().to_string(), "(s*2 + t) // 4");
    }

    #[test]
    fn min_and_max_are_n_ary_flat_and_sorted() {
        let (a, b, c) = (s("a"), s("b"), s("c"));
        let left = a.minimum(&b).unwrap().minimum(&c).unwrap();
        let right = a.minimum(&b.minimum(&c).unwrap()).unwrap();
        let swapped = c.minimum(&a).unwrap().minimum(&b).unwrap();
        assert_eq!(left, right);
        assert_eq!(left, swapped);
        assert_eq!(left.to_string(), "min(a, b, c)");
        // A member another provably beats goes: min(a, a + 1, b) = min(a, b).
        let a1 = a.add(&k(1)).unwrap();
        assert_eq!(
            SymExpr::extreme_of(&[a.clone(), a1.clone(), b.clone()], true).unwrap(),
            a.minimum(&b).unwrap()
        );
        assert_eq!(
            SymExpr::extreme_of(&[a.clone(), a1.clone(), b.clone()], false).unwrap(),
            a1.maximum(&b).unwrap()
        );
        // Repeats and one member.
        assert_eq!(
            SymExpr::extreme_of(&[b.clone(), b.clone()], true).unwrap(),
            b
        );
        assert!(SymExpr::extreme_of(&[], true).is_none());
        // Constants last, and only the smallest kept.
        let m = SymExpr::extreme_of(&[k(512), a.clone(), k(128)], true).unwrap();
        assert_eq!(m.to_string(), "min(a, 128)");
        let n = a.maximum(&b).unwrap().maximum(&c).unwrap();
        assert_eq!(n.eval(&|x| Some(if x == "b" { 9 } else { 2 })), Ok(9));
    }

    #[test]
    fn evaluation_binds_symbols_and_reports_what_is_missing() {
        let e = s("past").add(&s("seq").scale(3).unwrap()).unwrap();
        let env = |n: &str| match n {
            "past" => Some(5),
            "seq" => Some(2),
            _ => None,
        };
        assert_eq!(e.eval(&env), Ok(11));
        assert_eq!(s("x").eval(&env), Err(EvalError::Unbound(symbol("x"))));
        let huge = s("seq").scale(i64::MAX / 2).unwrap();
        assert_eq!(huge.eval(&|_| Some(4)), Err(EvalError::Overflow));
        assert_eq!(e.symbols().len(), 2);
    }

    #[test]
    fn overflow_and_blow_up_give_none() {
        assert!(k(i64::MAX).add(&k(1)).is_none());
        assert!(k(i64::MIN).neg().is_none());
        let mut e = s("a0");
        for i in 1..MAX_TERMS + 2 {
            match e.add(&s(&format!("a{i}"))) {
                Some(n) => e = n,
                None => return,
            }
        }
        panic!("an expression of more than {MAX_TERMS} terms was built");
    }

    #[test]
    fn substitution_simplifies() {
        let e = s("a").sub(&s("b")).unwrap().div_floor(&k(2)).unwrap();
        let b_is_a = e.substitute(&|n| (n == "b").then(|| s("a"))).unwrap();
        assert_eq!(b_is_a.as_const(), Some(0));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A small expression over `a`, `b` (sizes) built from the operations the algebra
    /// has: sums, products by constants, floor divisions, min and max.
    fn expr() -> impl Strategy<Value = SymExpr> {
        let leaf = prop_oneof![
            (-6i64..7).prop_map(SymExpr::int),
            Just(SymExpr::sym("a")),
            Just(SymExpr::sym("b")),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.add(&y)),
                (inner.clone(), -3i64..4).prop_filter_map("limits", |(x, c)| x.scale(c)),
                (inner.clone(), 1i64..7)
                    .prop_filter_map("limits", |(x, d)| x.div_floor(&SymExpr::int(d))),
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.minimum(&y)),
                (inner.clone(), inner).prop_filter_map("limits", |(x, y)| x.maximum(&y)),
            ]
        })
    }

    /// No negative coefficient and no floor division among the top-level factors.
    fn plain(e: &SymExpr) -> bool {
        e.terms()
            .all(|(k, f)| k >= 0 && !f.iter().any(|f| matches!(f, Factor::FloorDiv(..))))
    }

    fn at(e: &SymExpr, a: i64, b: i64) -> Result<i64, EvalError> {
        e.eval(&|s| match s {
            "a" => Some(a),
            "b" => Some(b),
            _ => None,
        })
    }

    /// An expression over more symbols than [`expr`], with products of symbols.
    fn wide_expr() -> impl Strategy<Value = SymExpr> {
        let leaf = prop_oneof![
            (-9i64..10).prop_map(SymExpr::int),
            prop::sample::select(vec!["a", "b", "past", "seq_len", "_s0"]).prop_map(SymExpr::sym),
        ];
        leaf.prop_recursive(4, 32, 3, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.add(&y)),
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.sub(&y)),
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.mul(&y)),
                (inner.clone(), 1i64..7)
                    .prop_filter_map("limits", |(x, d)| x.div_floor(&SymExpr::int(d))),
                (inner.clone(), 2i64..5).prop_filter_map("limits", |(x, d)| x.rem_const(d)),
                prop::collection::vec(inner.clone(), 2..4)
                    .prop_filter_map("limits", |v| SymExpr::extreme_of(&v, true)),
                prop::collection::vec(inner, 2..4)
                    .prop_filter_map("limits", |v| SymExpr::extreme_of(&v, false)),
            ]
        })
    }

    fn at_wide(e: &SymExpr, vals: &[i64; 5]) -> Result<i64, EvalError> {
        e.eval(&|s| match s {
            "a" => Some(vals[0]),
            "b" => Some(vals[1]),
            "past" => Some(vals[2]),
            "seq_len" => Some(vals[3]),
            "_s0" => Some(vals[4]),
            _ => None,
        })
    }

    proptest! {
        /// What `Display` writes parses back into the same expression, with the same
        /// value at every binding.
        #[test]
        fn display_parses_back(e in wide_expr(), vals in prop::array::uniform5(0i64..50)) {
            let text = e.to_string();
            let back = SymExpr::parse(&text);
            prop_assert_eq!(back.as_ref(), Some(&e), "{}", text);
            if let (Some(back), Ok(v)) = (back, at_wide(&e, &vals)) {
                prop_assert_eq!(at_wide(&back, &vals), Ok(v), "{}", text);
            }
        }

        /// Any text: no panic, and what parses is an expression whose text parses to it
        /// again.
        #[test]
        fn any_text_parses_or_not_without_panic(text in "[-+*/%(), a-c0-9_minax]{0,40}") {
            if let Some(e) = SymExpr::parse(&text) {
                prop_assert_eq!(SymExpr::parse(&e.to_string()), Some(e));
            }
        }

        /// Floor division by a constant, in its normal form, has the value of Python's
        /// `//` at every binding.
        #[test]
        fn floor_division_keeps_its_value(e in expr(), d in 1i64..9, a in 0i64..40, b in 0i64..40) {
            if let (Some(q), Ok(v)) = (e.div_floor(&SymExpr::int(d)), at(&e, a, b)) {
                prop_assert_eq!(at(&q, a, b), Ok(v.div_euclid(d)), "{} // {}", e, d);
            }
        }

        /// Nested floor division is one division: `(e // c) // d` has the value of
        /// `e // (c*d)` at every binding, and is the same expression where `e` is
        /// [`plain`] (where `e` holds floor divisions already, as `3 * (a // 2)`, two
        /// forms of one value can remain: the normal form does not merge several
        /// floor divisions of one operand).
        #[test]
        fn nested_floor_division_is_one(e in expr(), c in 1i64..6, d in 1i64..6, a in 0i64..40, b in 0i64..40) {
            let nested = e.div_floor(&SymExpr::int(c)).and_then(|q| q.div_floor(&SymExpr::int(d)));
            let once = e.div_floor(&SymExpr::int(c * d));
            if let (Some(n), Some(o)) = (nested, once) {
                if let (Ok(vn), Ok(vo)) = (at(&n, a, b), at(&o, a, b)) {
                    prop_assert_eq!(vn, vo, "{} against {}", n, o);
                }
                if plain(&e) {
                    prop_assert_eq!(n, o);
                }
            }
        }

        /// A factor common to every coefficient and the divisor cancels:
        /// `(g*e) // (g*d) == e // d` in value, and as expressions where `e` is
        /// [`plain`].
        #[test]
        fn common_factors_cancel(e in expr(), g in 1i64..5, d in 1i64..6, a in 0i64..40, b in 0i64..40) {
            let scaled = e.scale(g).and_then(|x| x.div_floor(&SymExpr::int(g * d)));
            if let (Some(x), Some(y)) = (scaled, e.div_floor(&SymExpr::int(d))) {
                if let (Ok(vx), Ok(vy)) = (at(&x, a, b), at(&y, a, b)) {
                    prop_assert_eq!(vx, vy, "{} against {}", x, y);
                }
                if plain(&e) {
                    prop_assert_eq!(x, y);
                }
            }
        }

        /// min and max are associative and commutative as expressions, and keep the
        /// value of the smallest or largest operand.
        #[test]
        fn min_max_are_one_form(x in expr(), y in expr(), z in expr(), a in 0i64..40, b in 0i64..40) {
            for min in [true, false] {
                let f = |p: &SymExpr, q: &SymExpr| if min { p.minimum(q) } else { p.maximum(q) };
                let l = f(&x, &y).and_then(|xy| f(&xy, &z));
                let r = f(&y, &z).and_then(|yz| f(&z, &x).and(f(&x, &yz)));
                let o = SymExpr::extreme_of(&[z.clone(), y.clone(), x.clone()], min);
                if let (Some(l), Some(r), Some(o)) = (l, r, o) {
                    prop_assert_eq!(&l, &r);
                    prop_assert_eq!(&l, &o);
                    if let (Ok(vx), Ok(vy), Ok(vz)) = (at(&x, a, b), at(&y, a, b), at(&z, a, b)) {
                        let want = if min { vx.min(vy).min(vz) } else { vx.max(vy).max(vz) };
                        prop_assert_eq!(at(&l, a, b), Ok(want));
                    }
                }
            }
        }
    }
}
