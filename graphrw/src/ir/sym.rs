//! Symbolic integers: the algebra of dims that are known only at run time.
//!
//! A [`SymExpr`] is an integer expression over named symbols (`batch`, `seq`, `past`),
//! kept in one canonical form so that equal expressions compare equal:
//!
//! - a sum of terms, each an integer coefficient times a product of atoms, sorted, with no
//!   zero coefficient and no two terms over the same product (`batch*seq*12 + past + 1`);
//! - an atom is a symbol, or what a polynomial cannot say: the floor division of an
//!   expression by a positive constant (`seq // 2`), or the minimum or maximum of two
//!   expressions (`min(seq, 512)`), each simplified where its value is decided.
//!
//! Every operation is checked: an overflow or an expression past [`MAX_TERMS`] terms or
//! [`MAX_DEPTH`] levels of nesting gives `None` rather than a wrong value or unbounded
//! work (shape arithmetic in a hostile model can be huge or deep). Symbols stand for
//! sizes, so they are never negative; that is all the sign reasoning assumes
//! ([`SymExpr::sign`]). Two different symbols are never assumed equal.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

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
    /// The smaller of two expressions (ordered).
    Min(Box<SymExpr>, Box<SymExpr>),
    /// The larger of two expressions (ordered).
    Max(Box<SymExpr>, Box<SymExpr>),
}

/// One factor of a term, as [`SymExpr::terms`] shows it.
#[derive(Clone, Copy, Debug)]
pub enum Factor<'a> {
    /// A symbol.
    Sym(&'a Symbol),
    /// `floor(e / d)`, `d > 1`.
    FloorDiv(&'a SymExpr, i64),
    /// The smaller of two expressions.
    Min(&'a SymExpr, &'a SymExpr),
    /// The larger of two expressions.
    Max(&'a SymExpr, &'a SymExpr),
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
                    Atom::Min(a, b) => Factor::Min(a, b),
                    Atom::Max(a, b) => Factor::Max(a, b),
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
                    Atom::Min(a, b) | Atom::Max(a, b) => {
                        a.collect_symbols(out);
                        b.collect_symbols(out);
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
                Atom::Min(a, b) | Atom::Max(a, b) => 1 + a.depth().max(b.depth()),
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
        // Pull out the terms `d` divides: floor((d*q + r) / d) = q + floor(r / d).
        let (whole, rest): (Vec<Term>, Vec<Term>) =
            self.terms.iter().cloned().partition(|t| t.coeff % d == 0);
        let rest = SymExpr::from_terms(rest)?;
        let atom = if let Some(n) = rest.as_const() {
            SymExpr::int(n.div_euclid(d))
        } else {
            SymExpr::atom(Atom::FloorDiv(Box::new(rest), d))
        };
        SymExpr::from_terms(whole)?.div_terms(d, &[])?.add(&atom)
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

    fn extreme(&self, other: &SymExpr, min: bool) -> Option<SymExpr> {
        match self.sub(other)?.sign() {
            Sign::Zero | Sign::Negative | Sign::NonPositive => {
                return Some(if min { self.clone() } else { other.clone() })
            }
            Sign::Positive | Sign::NonNegative => {
                return Some(if min { other.clone() } else { self.clone() })
            }
            Sign::Unknown => {}
        }
        // Constants second: `min(seq, 512)`.
        let (a, b) = if (self.as_const().is_some(), self) <= (other.as_const().is_some(), other) {
            (self.clone(), other.clone())
        } else {
            (other.clone(), self.clone())
        };
        let atom = if min {
            Atom::Min(Box::new(a), Box::new(b))
        } else {
            Atom::Max(Box::new(a), Box::new(b))
        };
        SymExpr::atom(atom).checked()
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
                    Atom::Min(a, b) => a.substitute(f)?.minimum(&b.substitute(f)?)?,
                    Atom::Max(a, b) => a.substitute(f)?.maximum(&b.substitute(f)?)?,
                };
                p = p.mul(&v)?;
            }
            sum = sum.add(&p)?;
        }
        Some(sum)
    }
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
            Atom::Min(a, b) => [a, b]
                .iter()
                .all(|e| matches!(e.sign(), Sign::Zero | Sign::Positive | Sign::NonNegative)),
            Atom::Max(a, b) => [a, b]
                .iter()
                .any(|e| matches!(e.sign(), Sign::Zero | Sign::Positive | Sign::NonNegative)),
        }
    }

    fn eval(&self, env: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
        match self {
            Atom::Sym(s) => env(s).ok_or_else(|| EvalError::Unbound(s.clone())),
            Atom::FloorDiv(e, d) => Ok(e.eval(env)?.div_euclid(*d)),
            Atom::Min(a, b) => Ok(a.eval(env)?.min(b.eval(env)?)),
            Atom::Max(a, b) => Ok(a.eval(env)?.max(b.eval(env)?)),
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
            Atom::FloorDiv(e, d) if e.terms.len() > 1 => write!(f, "({e}) // {d}"),
            Atom::FloorDiv(e, d) => write!(f, "{e} // {d}"),
            Atom::Min(a, b) => write!(f, "min({a}, {b})"),
            Atom::Max(a, b) => write!(f, "max({a}, {b})"),
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
            let mut first = true;
            for a in &t.factors {
                if !first {
                    f.write_str("*")?;
                }
                first = false;
                write!(f, "{a}")?;
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
