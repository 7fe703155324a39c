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
//!   none provably beyond another (`min(s, s + 1, t)` is `min(s, t)`); or the size
//!   unrelated sizes broadcast to (`broadcast(past + 1, seq)`, see
//!   [`SymExpr::broadcast`]), bound when the sizes are: never an equality assumed.
//!
//! Every operation is checked: an overflow or an expression past [`MAX_TERMS`] terms or
//! [`MAX_DEPTH`] levels of nesting gives `None` rather than a wrong value or unbounded
//! work (shape arithmetic in a hostile model can be huge or deep). Symbols stand for
//! sizes, so they are never negative; that is all the sign reasoning assumes
//! ([`SymExpr::sign`]). Two different symbols are never assumed equal.
//!
//! The subsystem: this module (the types, `Display`), `arith.rs` (the operations and
//! their normal forms), `value.rs` (evaluation, signs, comparisons, substitution),
//! [`parse`] (the text `Display` writes, read back), [`bounds`] (lower bounds on
//! symbols, `seq >= 1`, and what they decide), [`in_force`] (the bounds the
//! operations decide with: a graph's, in a scope it opens) and [`assume`] (the
//! equalities inference assumes between dims).

use std::fmt;
use std::sync::Arc;

mod arith;
pub mod assume;
pub mod bounds;
pub mod in_force;
pub mod parse;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
mod value;

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
    /// The size two or more sizes broadcast to (sorted, distinct, none a constant):
    /// the one that is not 1, or 1 where all are; no value where two that are not 1
    /// differ (see [`SymExpr::broadcast`]).
    Broadcast(Vec<SymExpr>),
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
    /// What two or more sizes broadcast to (see [`SymExpr::broadcast`]).
    Broadcast(&'a [SymExpr]),
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
    /// Sizes that do not broadcast: two that are not 1 differ (`broadcast(a, b)` at
    /// `a = 3`, `b = 5`).
    Broadcast(Vec<i64>),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Unbound(s) => write!(f, "symbol `{s}` has no value"),
            EvalError::Overflow => f.write_str("the value overflows a 64-bit integer"),
            EvalError::Negative(v) => write!(f, "a size evaluates to {v}"),
            EvalError::Broadcast(v) => write!(f, "sizes {v:?} do not broadcast"),
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
                    Atom::Broadcast(v) => Factor::Broadcast(v),
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
                    Atom::Min(v) | Atom::Max(v) | Atom::Broadcast(v) => {
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
                Atom::Min(v) | Atom::Max(v) | Atom::Broadcast(v) => {
                    1 + v.iter().map(SymExpr::depth).max().unwrap_or(0)
                }
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
            Atom::Min(v) | Atom::Max(v) | Atom::Broadcast(v) => {
                f.write_str(match self {
                    Atom::Min(_) => "min(",
                    Atom::Max(_) => "max(",
                    _ => "broadcast(",
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
