//! Lower bounds on symbols: what a size is known to be at least, beyond the `>= 0` every
//! symbol has.
//!
//! The algebra alone knows that sizes are never negative ([`SymExpr::sign`]), which
//! decides `max(past, 0) = past` and `min(s, s + 1) = s`. Some facts need more: a
//! sequence length the exporter (or an op) says is at least 1 makes `(b*s) // s = b`
//! a division by a nonzero value, and `max(s - 1, 0) = s - 1`. [`Bounds`] holds such
//! facts, one lower bound per symbol, and the `*_within` operations use them: each
//! decides only what follows from the bounds for every binding that meets them, and
//! otherwise falls back to what the algebra decides alone (or to "not decided").

use super::{Atom, Sign, SymExpr, Symbol};

/// A lower bound per symbol (`seq >= 1`); a symbol not listed is `>= 0`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    lower: Vec<(Symbol, i64)>,
}

impl Bounds {
    /// No bound beyond `>= 0`.
    pub fn new() -> Bounds {
        Bounds::default()
    }

    /// These bounds and `name >= n` (the larger bound where one is already known; a
    /// bound under 0 says nothing new).
    pub fn at_least(mut self, name: &str, n: i64) -> Bounds {
        match self.lower.iter_mut().find(|(s, _)| &***s == name) {
            Some((_, b)) => *b = (*b).max(n),
            None if n > 0 => self.lower.push((super::symbol(name), n)),
            None => {}
        }
        self
    }

    /// These bounds and `other`'s (the larger bound of each symbol).
    pub fn merge(&self, other: &Bounds) -> Bounds {
        let mut out = self.clone();
        for (s, n) in &other.lower {
            match out.lower.iter_mut().find(|(x, _)| x == s) {
                Some((_, b)) => *b = (*b).max(*n),
                None => out.lower.push((s.clone(), *n)),
            }
        }
        out
    }

    /// True when no symbol has a bound beyond `>= 0`.
    pub fn is_empty(&self) -> bool {
        self.lower.is_empty()
    }

    /// True when every binding that meets `self` meets `other` (each of `other`'s
    /// bounds is at most `self`'s).
    pub fn implies(&self, other: &Bounds) -> bool {
        other.lower.iter().all(|(s, n)| self.lower(s) >= *n)
    }

    /// Each symbol with a bound, and the bound, in the order they were given.
    pub fn iter(&self) -> impl Iterator<Item = (&Symbol, i64)> + '_ {
        self.lower.iter().map(|(s, n)| (s, *n))
    }

    /// Reads bounds written as [`Bounds`]' `Display` writes them, or as a user types
    /// them: `seq>=1, past>=0`, separated by commas (spaces anywhere). An error names
    /// the part that is not `name >= integer`.
    pub fn parse(text: &str) -> Result<Bounds, String> {
        let mut out = Bounds::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("`{part}` is not a bound `symbol>=n` (as in `seq>=1`)");
            let (name, n) = part.split_once(">=").ok_or_else(bad)?;
            let name = name.trim();
            let n: i64 = n.trim().parse().map_err(|_| bad())?;
            let named = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '-'))
                && !name.starts_with(|c: char| c.is_ascii_digit() || c == '-');
            if !named {
                return Err(bad());
            }
            out = out.at_least(name, n);
        }
        Ok(out)
    }

    /// The lower bound of `name` (0 where none is known).
    pub fn lower(&self, name: &str) -> i64 {
        self.lower
            .iter()
            .find(|(s, _)| &***s == name)
            .map_or(0, |(_, b)| (*b).max(0))
    }

    /// What a divisor's use says: an op that divides by `e` (a reshape's `-1` beside
    /// entries multiplying to `e`; ONNX and torch refuse a `-1` beside a product of 0)
    /// runs only where `e >= 1`. Where `e` is one term `c*s*t..` with `c >= 1`, that
    /// is each of its symbols at least 1 (sizes are never negative); otherwise nothing.
    pub fn divisor(e: &SymExpr) -> Bounds {
        let mut out = Bounds::new();
        if let [t] = e.terms.as_slice() {
            if t.coeff >= 1 {
                for a in &t.factors {
                    if let Atom::Sym(s) = a {
                        out = out.at_least(s, 1);
                    }
                }
            }
        }
        out
    }

    /// True when the binding `env` meets every bound (an unbound symbol meets it).
    pub fn hold(&self, env: &dyn Fn(&str) -> Option<i64>) -> bool {
        self.lower
            .iter()
            .all(|(s, b)| env(s).is_none_or(|v| v >= *b))
    }
}

impl std::fmt::Display for Bounds {
    /// `seq>=1, past>=2` (what [`Bounds::parse`] reads back).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (s, n)) in self.lower.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{s}>={n}")?;
        }
        Ok(())
    }
}

impl SymExpr {
    /// A value the expression is at least for every binding within `bounds`, where the
    /// terms give one: a term with a positive coefficient over atoms with lower bounds
    /// is at least their product; a negative coefficient needs an upper bound, which
    /// nothing gives (`None`). `None` also on overflow.
    pub fn lower_bound(&self, bounds: &Bounds) -> Option<i64> {
        let mut sum = 0i64;
        for t in &self.terms {
            if t.factors.is_empty() {
                sum = sum.checked_add(t.coeff)?;
                continue;
            }
            if t.coeff < 0 {
                return None;
            }
            let mut p = t.coeff;
            for a in &t.factors {
                p = p.checked_mul(a.lower_bound(bounds)?)?;
            }
            sum = sum.checked_add(p)?;
        }
        Some(sum)
    }

    /// [`SymExpr::sign`], knowing `bounds`.
    pub fn sign_within(&self, bounds: &Bounds) -> Sign {
        match (self.lower_bound(bounds), self.sign()) {
            (_, s @ (Sign::Zero | Sign::Positive | Sign::Negative)) => s,
            (Some(lb), _) if lb > 0 => Sign::Positive,
            (Some(0), Sign::NonPositive) => Sign::Zero,
            (Some(0), _) => Sign::NonNegative,
            (_, s) => s,
        }
    }

    /// `floor(self / other)` as [`SymExpr::div_floor`] gives it, except that a symbolic
    /// divisor dividing every term exactly (`(b*s) // s = b`) is taken only where
    /// `bounds` make it at least 1: a divisor that may be 0 has no quotient.
    pub fn div_floor_within(&self, other: &SymExpr, bounds: &Bounds) -> Option<SymExpr> {
        if other.as_const().is_some() {
            return self.div_floor(other);
        }
        if other.lower_bound(bounds)? < 1 {
            return None;
        }
        self.div_exact(other)
    }

    /// [`SymExpr::extreme_of`], dropping the members `bounds` show another beats
    /// (`max(s - 1, 0) = s - 1` where `s >= 1`).
    pub fn extreme_within(exprs: &[SymExpr], min: bool, bounds: &Bounds) -> Option<SymExpr> {
        SymExpr::extreme_by(exprs, min, &|e| e.sign_within(bounds))
    }
}

impl Atom {
    fn lower_bound(&self, bounds: &Bounds) -> Option<i64> {
        match self {
            Atom::Sym(s) => Some(bounds.lower(s)),
            Atom::FloorDiv(e, d) => Some(e.lower_bound(bounds)?.div_euclid(*d)),
            Atom::Min(v) => v.iter().map(|e| e.lower_bound(bounds)).min()?,
            Atom::Max(v) => v.iter().filter_map(|e| e.lower_bound(bounds)).max(),
            // Where it has a value it is one of the members' (or 1, where all are 1):
            // at least the smallest member's bound, and at least 1 where each is.
            Atom::Broadcast(v) => v.iter().map(|e| e.lower_bound(bounds)).min()?,
        }
        // A product of atoms needs each at least 0 to be bounded below by the product of
        // their bounds.
        .filter(|b| *b >= 0)
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
    fn a_divisor_at_least_one_divides_exactly_and_one_that_may_be_zero_does_not() {
        let bs = s("b").mul(&s("s")).unwrap();
        let none = Bounds::new();
        let seq = Bounds::new().at_least("s", 1);
        assert_eq!(bs.div_floor_within(&s("s"), &seq), Some(s("b")));
        assert_eq!(bs.div_floor_within(&s("s"), &none), None, "s may be 0");
        // A divisor that does not divide every term stays undecided either way.
        let bs1 = bs.add(&k(1)).unwrap();
        assert_eq!(bs1.div_floor_within(&s("s"), &seq), None);
        // A divisor of one term with a coefficient: `(b*s*6) // (s*2) = b*3`.
        let six = bs.scale(6).unwrap();
        let two_s = s("s").scale(2).unwrap();
        assert_eq!(six.div_floor_within(&two_s, &seq), s("b").scale(3));
        assert_eq!(six.div_floor_within(&two_s, &none), None);
        // Constants divide as before.
        assert_eq!(
            s("s").scale(4).unwrap().div_floor_within(&k(2), &none),
            s("s").scale(2)
        );
    }

    #[test]
    fn a_divisor_bounds_each_symbol_of_its_one_term() {
        let d = s("b").mul(&s("s")).unwrap().scale(4).unwrap();
        let b = Bounds::divisor(&d);
        assert_eq!((b.lower("b"), b.lower("s"), b.lower("t")), (1, 1, 0));
        assert_eq!(d.lower_bound(&b), Some(4));
        // A sum says nothing of each symbol (s + t >= 1 holds at s = 0).
        assert_eq!(
            Bounds::divisor(&s("s").add(&s("t")).unwrap()),
            Bounds::new()
        );
        assert_eq!(Bounds::divisor(&s("s").neg().unwrap()), Bounds::new());
        // What the use justifies: (b*s*h) // (s*h) = b, refused without it.
        let sh = s("s").mul(&s("h")).unwrap();
        let bsh = s("b").mul(&sh).unwrap();
        assert_eq!(
            bsh.div_floor_within(&sh, &Bounds::divisor(&sh)),
            Some(s("b"))
        );
        assert_eq!(bsh.div_floor_within(&sh, &Bounds::new()), None);
    }

    #[test]
    fn bounds_decide_min_and_max_the_algebra_alone_cannot() {
        let seq = Bounds::new().at_least("s", 1);
        let none = Bounds::new();
        let s_1 = s("s").sub(&k(1)).unwrap();
        assert_eq!(
            SymExpr::extreme_within(&[s_1.clone(), k(0)], false, &seq),
            Some(s_1.clone())
        );
        let undecided = SymExpr::extreme_within(&[s_1.clone(), k(0)], false, &none).unwrap();
        assert_eq!(undecided, s_1.maximum(&k(0)).unwrap());
        assert_ne!(undecided, s_1);
        assert_eq!(
            SymExpr::extreme_within(&[s("s"), k(1)], true, &seq),
            Some(k(1))
        );
        // What sizes alone decide holds with no bound: max(past, 0) = past.
        assert_eq!(
            SymExpr::extreme_within(&[s("past"), k(0)], false, &none),
            Some(s("past"))
        );
    }

    #[test]
    fn lower_bounds_follow_the_terms_and_signs_use_them() {
        let b = Bounds::new()
            .at_least("s", 2)
            .at_least("t", 1)
            .at_least("s", 1);
        assert_eq!(b.lower("s"), 2, "the larger bound stays");
        assert_eq!(b.lower("u"), 0);
        let e = s("s")
            .mul(&s("t"))
            .unwrap()
            .scale(3)
            .unwrap()
            .add(&k(-5))
            .unwrap();
        assert_eq!(e.lower_bound(&b), Some(1));
        assert_eq!(e.sign_within(&b), Sign::Positive);
        assert_eq!(e.sign(), Sign::Unknown);
        assert_eq!(s("s").neg().unwrap().lower_bound(&b), None);
        let half = s("s").add(&k(1)).unwrap().div_floor(&k(2)).unwrap();
        assert_eq!(half.lower_bound(&b), Some(1));
        let m = s("s").minimum(&s("u")).unwrap();
        assert_eq!(m.lower_bound(&b), Some(0));
        assert!(b.hold(&|n| Some(if n == "s" { 2 } else { 1 })));
        assert!(!b.hold(&|_| Some(1)), "s = 1 is under its bound");
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn expr() -> impl Strategy<Value = SymExpr> {
        let leaf = prop_oneof![
            (-6i64..7).prop_map(SymExpr::int),
            Just(SymExpr::sym("a")),
            Just(SymExpr::sym("b")),
        ];
        leaf.prop_recursive(3, 16, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.add(&y)),
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.mul(&y)),
                (inner.clone(), -3i64..4).prop_filter_map("limits", |(x, c)| x.scale(c)),
                (inner.clone(), 1i64..5)
                    .prop_filter_map("limits", |(x, d)| x.div_floor(&SymExpr::int(d))),
                (inner.clone(), inner.clone()).prop_filter_map("limits", |(x, y)| x.minimum(&y)),
                (inner.clone(), inner).prop_filter_map("limits", |(x, y)| x.maximum(&y)),
            ]
        })
    }

    proptest! {
        /// At every binding that meets the bounds: the lower bound holds, and min, max
        /// and division decided within the bounds keep their values.
        #[test]
        fn what_bounds_decide_holds_at_every_binding_that_meets_them(
            x in expr(), y in expr(), la in 0i64..4, lb in 0i64..4, da in 0i64..30, db in 0i64..30
        ) {
            let bounds = Bounds::new().at_least("a", la).at_least("b", lb);
            let (va, vb) = (la + da, lb + db);
            let env = |s: &str| match s { "a" => Some(va), "b" => Some(vb), _ => None };
            if let (Some(l), Ok(v)) = (x.lower_bound(&bounds), x.eval(&env)) {
                prop_assert!(v >= l, "{} = {} below its bound {}", x, v, l);
            }
            for min in [true, false] {
                let e = SymExpr::extreme_within(&[x.clone(), y.clone()], min, &bounds);
                if let (Some(e), Ok(vx), Ok(vy)) = (e, x.eval(&env), y.eval(&env)) {
                    let want = if min { vx.min(vy) } else { vx.max(vy) };
                    prop_assert_eq!(e.eval(&env), Ok(want));
                }
            }
            // The same decisions through the one entry point the graph uses: the
            // plain operations in a scope with the bounds in force, and their
            // comparisons.
            let ((mx, mn, q, ord), _) = super::super::in_force::with(&bounds, || {
                (x.maximum(&y), x.minimum(&y), x.div_floor(&y), x.compare(&y))
            });
            if let (Ok(vx), Ok(vy)) = (x.eval(&env), y.eval(&env)) {
                if let Some(mx) = mx {
                    prop_assert_eq!(mx.eval(&env), Ok(vx.max(vy)));
                }
                if let Some(mn) = mn {
                    prop_assert_eq!(mn.eval(&env), Ok(vx.min(vy)));
                }
                if let Some(q) = q {
                    prop_assert!(vy != 0, "{} // {} taken in scope where {} is 0", x, y, y);
                    let floor = vx.div_euclid(vy) - i64::from(vy < 0 && vx.rem_euclid(vy) != 0);
                    prop_assert_eq!(q.eval(&env), Ok(floor));
                }
                if let Some(o) = ord {
                    prop_assert_eq!(vx.cmp(&vy), o, "{} vs {}", x, y);
                }
            }
            if let (Some(q), Ok(vx), Ok(vy)) = (x.div_floor_within(&y, &bounds), x.eval(&env), y.eval(&env)) {
                prop_assert!(vy != 0, "{} // {} taken where {} is 0", x, y, y);
                // Floor division (toward minus infinity), as `SymExpr::div_floor`; not
                // Euclidean division, which differs for a negative divisor.
                let floor = vx.div_euclid(vy) - i64::from(vy < 0 && vx.rem_euclid(vy) != 0);
                prop_assert_eq!(q.eval(&env), Ok(floor));
            }
        }
    }
}
