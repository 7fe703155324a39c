//! Assumptions: equalities between symbolic dims that inference needs and cannot prove.
//!
//! An exporter may name one run-time size twice: torch's dynamo exporter with
//! `Dim.DYNAMIC` on every input gives the key cache and the value cache lengths two
//! symbols (`s15`, `s95`) though a valid run always binds them to one value. Where
//! inference needs two symbolic dims to be equal (the inner dims of a `matmul`, two
//! non-1 dims that broadcast, the dims of `concat` outside its axis, the head and
//! sequence dims of attention) and they differ as expressions, it solves the equality
//! for one symbol ([`solve`]) and records an [`Assumption`] (`s95 = s15`) instead of
//! failing. The graph ([`Graph::assumptions`](crate::graph::Graph::assumptions)) keeps
//! it, substitutes it through every node's metadata and symbolic attributes, so that
//! later inference sees one symbol, and prints it; the interpreter checks it when it
//! binds the symbols from the inputs, and a run that breaks it fails with one line
//! naming the inputs, the two dims and the node that made it.
//!
//! # When an assumption is made, and when inference fails
//!
//! Two dims `a` and `b` that must be equal:
//!
//! - equal expressions: nothing to assume;
//! - two known sizes that differ, or whose difference is a nonzero constant
//!   (`seq + 1` against `seq`): provably different, an error;
//! - a known size against a symbolic dim: left to each op's own rule, as before (a
//!   symbol against a size takes the size);
//! - two symbolic dims whose difference can be solved for one symbol `s` that occurs
//!   in it once, as `±s`, giving an expression that is not a constant
//!   (`s15 + s70` against `s70 + s95`: `s95 = s15`): an assumption. The symbol kept is
//!   the left operand's: the one eliminated is preferably a symbol only the right one
//!   reads;
//! - otherwise (`seq` against `past + seq` would force `past = 0`; `seq*2` against
//!   `seq + past*3` has no such symbol): an error naming both dims.
//!
//! # Broadcasting
//!
//! Two different symbolic dims that broadcast could each be 1 at run time (a mask
//! `[b, past + 1]` against scores `[b, seq]`), so broadcasting assumes nothing: the
//! result is the atom `broadcast(past + 1, seq)` ([`SymExpr::broadcast`]), bound when
//! the sizes are, and a run where they do not broadcast fails where it is bound. Only
//! where an op then needs that broadcast equal to a dim is anything required:
//!
//! - against one of its members (`broadcast(k, m)` against `k`: the scores' keys
//!   against the values' length), the other members must broadcast into it (`m` is 1
//!   or `k`): a [`Requirement`], checked at every run, with no symbol eliminated;
//! - against a dim none of its members is, the member nearest it (the fewest symbols
//!   in their difference) is solved against it as above (an [`Assumption`]), then the
//!   rest is a requirement.
//!
//! So an equality is assumed only where an op needs one, never where a broadcast
//! would do, and a rule that needs two dims equal reads them equal only once an
//! assumption made them one symbol.
//!
//! Inference functions stay pure functions of their operands' metadata: they ask
//! [`unify`], which records into the scope that `assuming` opens around one node's
//! inference (the graph opens it when a node is added). Outside a scope (a direct call
//! of an inference function, the verifier's re-inference of a graph whose
//! assumptions are already substituted) no assumption is made: two plain symbols are
//! taken as equal (the left one kept), as inference always did, and other symbolic
//! dims that differ are an error.

use std::cell::RefCell;
use std::fmt;

use crate::meta::{Dim, SymExpr, Symbol, TensorMeta};
use crate::ops::AttrValue;

/// An equality a node's inference assumed: `symbol = value` for every valid run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assumption {
    /// The symbol eliminated from the graph.
    pub symbol: Symbol,
    /// What it stands for (over the symbols kept).
    pub value: SymExpr,
    /// The op whose inference needed it.
    pub op: &'static str,
    /// The node's name, when it has one.
    pub node: Option<String>,
    /// The two dims inference compared, as it saw them.
    pub dims: (Dim, Dim),
    /// The graph inputs' dims that read `symbol` before it was substituted: what the
    /// run-time check binds to see whether the inputs keep the assumption.
    pub sites: Vec<InputSite>,
}

/// One dim of a graph input as it was before an assumption was substituted into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSite {
    /// The input's name.
    pub input: String,
    /// The axis.
    pub axis: usize,
    /// The dim before the substitution.
    pub dim: Dim,
}

impl Assumption {
    /// Where it was made: `` `matmul` (node n) ``.
    pub fn origin(&self) -> String {
        match &self.node {
            Some(n) => format!("`{}` (node {n})", self.op),
            None => format!("`{}`", self.op),
        }
    }
}

impl fmt::Display for Assumption {
    /// `s95 = s15  (matmul node_sdpa: s15 + s70 vs s70 + s95)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {}  ({}: {} vs {})",
            self.symbol,
            self.value,
            self.origin(),
            self.dims.0,
            self.dims.1
        )
    }
}

/// A broadcast dim an op needed equal to one of its members: `dims.0` and `dims.1` are
/// equal at every valid run, as the interpreter checks before each run (the members
/// other than `dims.1` are 1 or `dims.1`). No symbol is eliminated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The broadcast and the member it must equal.
    pub dims: (Dim, Dim),
    /// The op whose inference needed it.
    pub op: &'static str,
    /// The node's name, when it has one.
    pub node: Option<String>,
}

impl Requirement {
    /// Where it was made: `` `matmul` (node n) ``.
    pub fn origin(&self) -> String {
        match &self.node {
            Some(n) => format!("`{}` (node {n})", self.op),
            None => format!("`{}`", self.op),
        }
    }
}

impl fmt::Display for Requirement {
    /// `broadcast(k, m) = k  (`matmul` (node n))`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}  ({})", self.dims.0, self.dims.1, self.origin())
    }
}

/// An equality one node's inference asked for, before the graph records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Made {
    pub(crate) symbol: Symbol,
    pub(crate) value: SymExpr,
    pub(crate) dims: (Dim, Dim),
}

/// The substitutions in force during one node's inference.
#[derive(Default)]
struct Scope {
    /// The graph's assumptions, applied before comparing.
    known: Vec<(Symbol, SymExpr)>,
    /// Those this inference made, in order.
    made: Vec<Made>,
    /// The broadcasts it needed equal to a member: (broadcast, member).
    required: Vec<(Dim, Dim)>,
}

/// What one node's inference assumed and required (see [`assuming`]).
#[derive(Default)]
pub(crate) struct Outcome {
    pub(crate) made: Vec<Made>,
    pub(crate) required: Vec<(Dim, Dim)>,
}

thread_local! {
    static SCOPE: RefCell<Vec<Scope>> = const { RefCell::new(Vec::new()) };
}

/// Pops the scope [`assuming`] pushed, also when the inference panics.
struct Pop;

impl Drop for Pop {
    fn drop(&mut self) {
        SCOPE.with(|s| s.borrow_mut().pop());
    }
}

/// Runs one node's inference `f` in a scope where [`unify`] may assume, with the
/// graph's assumptions `known` in force; returns its result and what it assumed and
/// required.
pub(crate) fn assuming<R>(known: Vec<(Symbol, SymExpr)>, f: impl FnOnce() -> R) -> (R, Outcome) {
    SCOPE.with(|s| {
        s.borrow_mut().push(Scope {
            known,
            ..Scope::default()
        })
    });
    let pop = Pop;
    let r = f();
    let outcome = SCOPE.with(|s| {
        s.borrow_mut()
            .last_mut()
            .map(|sc| Outcome {
                made: std::mem::take(&mut sc.made),
                required: std::mem::take(&mut sc.required),
            })
            .unwrap_or_default()
    });
    drop(pop);
    (r, outcome)
}

/// The dim two symbolic dims that must be equal stand for: the left one where they are
/// equal, or under an assumption made in the current scope (see the module docs);
/// `None` where they cannot be equal or no assumption may be made. Known sizes are the
/// caller's: `unify` of two different ones is `None`.
pub fn unify(a: &Dim, b: &Dim) -> Option<Dim> {
    if a == b {
        return Some(a.clone());
    }
    if !a.is_symbolic() || !b.is_symbolic() {
        return None;
    }
    let scoped = SCOPE.with(|s| {
        let mut s = s.borrow_mut();
        let sc = s.last_mut()?;
        Some(unify_in(sc, a, b))
    });
    match scoped {
        Some(d) => d,
        // No scope: a broadcast against one of its members is that member (what the
        // scope would have required), and two plain symbols are equal (the rule
        // inference always had).
        None => member_of_broadcast(&a.to_expr(), &b.to_expr())
            .and_then(Dim::from_expr)
            .or_else(|| matches!((a, b), (Dim::Sym(_), Dim::Sym(_))).then(|| a.clone())),
    }
}

/// `b` where `a` is a broadcast with `b` among its members, or the other way round.
fn member_of_broadcast(a: &SymExpr, b: &SymExpr) -> Option<SymExpr> {
    match (a.as_broadcast(), b.as_broadcast()) {
        (Some(m), _) if m.contains(b) => Some(b.clone()),
        (_, Some(m)) if m.contains(a) => Some(a.clone()),
        _ => None,
    }
}

/// [`solve`] of a broadcast against a dim none of its members is: the member nearest
/// the dim (the fewest symbols in their difference) that can be solved against it.
fn solve_broadcast(a: &SymExpr, b: &SymExpr) -> Option<(Symbol, SymExpr)> {
    let (members, other, left) = match (a.as_broadcast(), b.as_broadcast()) {
        (Some(m), _) => (m, b, true),
        (_, Some(m)) => (m, a, false),
        _ => return None,
    };
    let mut near: Vec<(usize, &SymExpr)> = members
        .iter()
        .filter_map(|m| Some((m.sub(other)?.symbols().len(), m)))
        .collect();
    near.sort_by_key(|(n, _)| *n);
    near.into_iter().find_map(|(_, m)| match left {
        true => solve(m, other),
        false => solve(other, m),
    })
}

fn unify_in(sc: &mut Scope, a: &Dim, b: &Dim) -> Option<Dim> {
    let subst = |e: &SymExpr| -> Option<SymExpr> {
        let mut e = e.clone();
        let known = sc.known.iter().map(|(s, v)| (s, v));
        for (s, v) in known.chain(sc.made.iter().map(|m| (&m.symbol, &m.value))) {
            e = substitute_one(&e, s, v)?;
        }
        Some(e)
    };
    let (ea, eb) = (subst(&a.to_expr())?, subst(&b.to_expr())?);
    if ea == eb {
        return Dim::from_expr(ea);
    }
    if let Some(m) = member_of_broadcast(&ea, &eb) {
        return require(sc, ea, eb, m);
    }
    let (symbol, value) = solve_broadcast(&ea, &eb).or_else(|| solve(&ea, &eb))?;
    let na = substitute_one(&ea, &symbol, &value)?;
    let nb = substitute_one(&eb, &symbol, &value)?;
    let member = match na == nb {
        true => None,
        false => Some(member_of_broadcast(&na, &nb)?),
    };
    sc.made.push(Made {
        symbol,
        value,
        dims: (a.clone(), b.clone()),
    });
    match member {
        None => Dim::from_expr(na),
        Some(m) => require(sc, na, nb, m),
    }
}

/// Records that the broadcast among `a` and `b` must equal `member`, the other.
fn require(sc: &mut Scope, a: SymExpr, b: SymExpr, member: SymExpr) -> Option<Dim> {
    let broadcast = if a == member { b } else { a };
    let pair = (Dim::from_expr(broadcast)?, Dim::from_expr(member)?);
    let out = pair.1.clone();
    if !sc.required.contains(&pair) {
        sc.required.push(pair);
    }
    Some(out)
}

/// `e` with `symbol` replaced by `value`.
pub fn substitute_one(e: &SymExpr, symbol: &Symbol, value: &SymExpr) -> Option<SymExpr> {
    if !e.symbols().contains(symbol) {
        return Some(e.clone());
    }
    e.substitute(&|n| (n == &***symbol).then(|| value.clone()))
}

/// `d` with `symbol` replaced by `value`, in simplest form (`None` on overflow or where
/// the result is no size).
pub fn substitute_dim(d: &Dim, symbol: &Symbol, value: &SymExpr) -> Option<Dim> {
    match d {
        Dim::Known(_) => Some(d.clone()),
        Dim::Sym(s) if s != symbol => Some(d.clone()),
        _ => Dim::from_expr(substitute_one(&d.to_expr(), symbol, value)?),
    }
}

/// `m` with `symbol` replaced by `value` in its dims; `None` when nothing changes.
pub(crate) fn substitute_meta(
    m: &TensorMeta,
    symbol: &Symbol,
    value: &SymExpr,
) -> Option<TensorMeta> {
    if !m.shape.is_symbolic() {
        return None;
    }
    let mut out = m.clone();
    let mut changed = false;
    for d in out.shape.0.iter_mut() {
        if let Some(n) = substitute_dim(d, symbol, value) {
            if &n != d {
                *d = n;
                changed = true;
            }
        }
    }
    changed.then_some(out)
}

/// `v` with `symbol` replaced by `value`, where it is symbolic; `None` when nothing
/// changes.
pub(crate) fn substitute_attr(
    v: &AttrValue,
    symbol: &Symbol,
    value: &SymExpr,
) -> Option<AttrValue> {
    match v {
        AttrValue::Sym(e) => {
            let n = substitute_one(e, symbol, value)?;
            (&n != e).then(|| AttrValue::sym_int(n))
        }
        AttrValue::Dims(es) => {
            let n = es
                .iter()
                .map(|e| substitute_one(e, symbol, value))
                .collect::<Option<Vec<_>>>()?;
            (&n != es).then(|| AttrValue::sym_ints(n))
        }
        _ => None,
    }
}

/// Solves `a == b` for one symbol (see the module docs): `(s, value)` such that
/// substituting `value` for `s` makes them equal, or `None` where they are provably
/// different or no symbol can be solved for without forcing it to a constant.
pub fn solve(a: &SymExpr, b: &SymExpr) -> Option<(Symbol, SymExpr)> {
    let d = a.sub(b)?;
    if d.as_const().is_some() {
        return None;
    }
    let (in_a, in_b) = (a.symbols(), b.symbols());
    // Preference: a symbol only the right reads, then one the right reads, then the
    // left's.
    let mut candidates: Vec<Symbol> = in_b.iter().filter(|s| !in_a.contains(s)).cloned().collect();
    candidates.extend(in_b.iter().filter(|s| in_a.contains(s)).cloned());
    candidates.extend(in_a.iter().filter(|s| !in_b.contains(s)).cloned());
    candidates
        .into_iter()
        .find_map(|s| solve_for(&d, &s).map(|v| (s, v)))
}

/// `value` with `d == 0` exactly when `s == value`, where `s` occurs in `d` once, as a
/// term `±s`, and `value` is not a constant nor negative for every binding.
fn solve_for(d: &SymExpr, s: &Symbol) -> Option<SymExpr> {
    let coeff = d.terms().find_map(|(c, f)| match f.as_slice() {
        [crate::meta::Factor::Sym(x)] if *x == s => Some(c),
        _ => None,
    })?;
    if coeff.abs() != 1 {
        return None;
    }
    let rest = d.sub(&SymExpr::sym_arc(s.clone()).scale(coeff)?)?;
    if rest.symbols().contains(s) {
        return None;
    }
    // coeff*s + rest = 0
    let value = if coeff == 1 { rest.neg()? } else { rest };
    if value.as_const().is_some() {
        return None;
    }
    match value.sign() {
        crate::meta::Sign::Negative | crate::meta::Sign::NonPositive => None,
        _ => Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: &str) -> SymExpr {
        SymExpr::sym(n)
    }

    #[test]
    fn a_sum_of_two_cache_lengths_solves_for_the_right_ones() {
        let a = s("s15").add(&s("s70")).unwrap();
        let b = s("s70").add(&s("s95")).unwrap();
        let (sym, v) = solve(&a, &b).unwrap();
        assert_eq!(&**sym, "s95");
        assert_eq!(v, s("s15"));
    }

    #[test]
    fn provably_different_or_constant_forcing_dims_are_not_solved() {
        let seq = s("seq");
        assert!(solve(&seq.add(&SymExpr::int(1)).unwrap(), &seq).is_none());
        // seq == past + seq would force past = 0.
        assert!(solve(&seq, &s("past").add(&seq).unwrap()).is_none());
        // No symbol occurs once with coefficient 1.
        assert!(solve(&seq.scale(2).unwrap(), &s("past").scale(3).unwrap()).is_none());
    }

    #[test]
    fn unify_records_only_inside_a_scope() {
        let (a, b) = (Dim::sym("k"), Dim::sym("v"));
        assert_eq!(
            unify(&a, &b),
            Some(a.clone()),
            "the old rule outside a scope"
        );
        let e = Dim::from_expr(s("k").add(&s("seq")).unwrap()).unwrap();
        let f = Dim::from_expr(s("v").add(&s("seq")).unwrap()).unwrap();
        assert_eq!(unify(&e, &f), None);
        let (out, outcome) = assuming(Vec::new(), || (unify(&e, &f), unify(&b, &a)));
        let made = outcome.made;
        assert_eq!(out.0, Some(e.clone()));
        assert_eq!(out.1, Some(a.clone()), "the first assumption is in force");
        assert_eq!(made.len(), 1);
        assert_eq!(&**made[0].symbol, "v");
    }

    #[test]
    fn a_broadcast_against_a_member_is_required_and_against_another_dim_solved_first() {
        let b = Dim::from_expr(SymExpr::broadcast(&[s("k"), s("m")]).unwrap()).unwrap();
        let (k, v) = (Dim::sym("k"), Dim::sym("v"));
        // Outside a scope: the member, nothing recorded.
        assert_eq!(unify(&b, &k), Some(k.clone()));
        assert_eq!(unify(&k, &b), Some(k.clone()));
        let (out, o) = assuming(Vec::new(), || unify(&b, &k));
        assert_eq!(out, Some(k.clone()));
        assert!(o.made.is_empty(), "no symbol eliminated");
        assert_eq!(o.required, vec![(b.clone(), k.clone())]);
        // Against a dim no member is: the nearest member solved against it (`v = k`
        // over `v = m`: both one symbol apart, `k` first in order), then required.
        let (out, o) = assuming(Vec::new(), || unify(&b, &v));
        assert_eq!(out, Some(k.clone()));
        assert_eq!(o.made.len(), 1);
        assert_eq!(
            (&**o.made[0].symbol, o.made[0].value.to_string()),
            ("v", "k".into())
        );
        assert_eq!(o.required, vec![(b.clone(), k.clone())]);
        // A known size against it stays the caller's (`None` here).
        assert_eq!(unify(&b, &Dim::Known(4)), None);
    }
}
