//! A straightforward matcher for compiled patterns.
//!
//! Anchor-based: candidates for the first root come from the graph's op index
//! ([`Graph::nodes_with_op`]); from each candidate the matcher walks operands backwards,
//! binding parameters (a name bound twice must bind the same thing), trying both operand
//! orders of commutative ops, alternatives in order and repetitions longest first,
//! checking attributes, and running each constraint as soon as the slots it reads are
//! bound. A failed branch rolls its bindings back. Further roots of a multi-output pattern
//! are found among the consumers of values the earlier roots bound ([`Link`]), so a pass
//! costs time proportional to the number of anchor candidates, not the graph squared.
//!
//! The API is two functions: [`find`] (every match, one per anchor node, in node order)
//! and [`match_at`] (the first match anchored at one node). [`Pattern::find`] and
//! [`Pattern::match_at`] call them; [`find_with`](crate::pattern::find_with) adds FX's
//! options, and [`Dispatch`](crate::pattern::dispatch::Dispatch) runs many rules at once.
//!
//! Pending work lives on one goal stack (a failed goal leaves the stack as it found it),
//! and the bindings, trail and stack are buffers reused from one candidate to the next:
//! trying a candidate allocates nothing; only a match found is copied out.
//!
//! What the matcher does not check (the rewriter's job): that interior values have no
//! users outside the match, and that a multi-output match is convex.

use std::collections::BTreeSet;

mod failure;
mod terms;

pub(crate) use failure::{Failure, Why};

pub(crate) use terms::attr_literal_matches;
use terms::{close, compare, show};

use crate::ops::{AttrValue, Op, OpId};
use crate::pattern::{
    AttrPat, Bindings, Bound, Check, ConstPat, Link, Match, ParamKind, PatNode, Pattern, Slot,
};
use crate::{DType, Graph, NodeId, Value};

/// Every match of `pattern` in `graph`: at most one per anchor candidate, in anchor
/// node order. Overlapping matches are all reported and nothing checks that a match is
/// safe to replace; [`find_with`](crate::pattern::find_with) applies FX's options.
pub fn find(pattern: &'static Pattern, graph: &Graph) -> Vec<Match> {
    let mut scratch = Scratch::default();
    anchor_candidates(pattern, graph)
        .into_iter()
        .filter_map(|n| run_in::<false>(pattern, graph, n, Flags::default(), &mut scratch).ok())
        .collect()
}

/// The first match of `pattern` whose first root is output 0 of `anchor`.
pub fn match_at(pattern: &'static Pattern, graph: &Graph, anchor: NodeId) -> Option<Match> {
    run::<false>(pattern, graph, anchor).ok()
}

/// The nodes whose op is one the pattern's anchor can have, in node order.
pub(crate) fn anchor_candidates(pattern: &Pattern, graph: &Graph) -> Vec<NodeId> {
    let mut anchors: Vec<NodeId> = pattern
        .anchors
        .iter()
        .flat_map(|&op| graph.nodes_of(op))
        .collect();
    if pattern.anchors.len() > 1 {
        anchors.sort_unstable();
        anchors.dedup();
    }
    anchors
}

/// The matching options that act inside the matcher (the others act on whole matches:
/// see [`MatchOptions`](crate::pattern::MatchOptions)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags {
    /// The pattern's outputs must be the graph's outputs, all of them, in order.
    pub match_output: bool,
    /// Tensor parameters must bind graph inputs.
    pub match_placeholder: bool,
    /// Literals of the pattern (constants and attribute values) match any value.
    pub ignore_literals: bool,
}

/// Buffers the matcher reuses from one candidate to the next, so that trying a
/// candidate allocates nothing (only a match found is copied out).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    b: Bindings,
    trail: Vec<Slot>,
    nodes: Vec<NodeId>,
    roots: Vec<Value>,
    goals: Vec<Goal>,
    ops: Vec<OpId>,
    /// Int-list buffers of unbound slots, reused by the next int-list binding (a
    /// `permute`'s dims, say), so a failed attempt does not allocate.
    int_lists: Vec<Vec<i64>>,
}

impl Scratch {
    /// Keeps `b`'s buffer for reuse when it is an int list.
    fn recycle(&mut self, b: Bound) {
        if let Bound::Ints(v) = b {
            self.int_lists.push(v);
        }
    }
}

/// Runs the matcher; in explain mode (`E`) a failure returns the deepest point reached.
pub(crate) fn run<const E: bool>(
    pattern: &'static Pattern,
    graph: &Graph,
    anchor: NodeId,
) -> Result<Match, Option<Failure>> {
    run_in::<E>(
        pattern,
        graph,
        anchor,
        Flags::default(),
        &mut Scratch::default(),
    )
}

/// [`run`] with options, in reused buffers.
pub(crate) fn run_in<const E: bool>(
    pattern: &'static Pattern,
    graph: &Graph,
    anchor: NodeId,
    flags: Flags,
    scratch: &mut Scratch,
) -> Result<Match, Option<Failure>> {
    let mut found = None;
    run_into::<E>(pattern, graph, anchor, flags, scratch, &mut found)?;
    found.ok_or(None)
}

/// [`run_in`] writing a match into `found`: into the lists of the match already there
/// when there is one (no allocation per match found once they are big enough), else a
/// new one. `found` is left as it was when there is no match.
pub(crate) fn run_into<const E: bool>(
    pattern: &'static Pattern,
    graph: &Graph,
    anchor: NodeId,
    flags: Flags,
    scratch: &mut Scratch,
    found: &mut Option<Match>,
) -> Result<(), Option<Failure>> {
    let root = pattern.roots.first().ok_or(None)?;
    let node = graph.node(anchor).ok_or(None)?;
    let value = Value::new(anchor, 0);
    if !pattern.anchors.iter().any(|op| *op == node.op()) {
        return Err(E.then_some(Failure {
            depth: 0,
            bound: 0,
            pat: Some(root.node),
            value,
            why: Why::Anchor,
        }));
    }
    if flags.match_output
        && (graph.outputs().len() != pattern.roots.len() || graph.outputs()[0] != value)
    {
        return Err(None);
    }
    let s = scratch;
    // Every binding is undone before a run ends, so the slots are all unbound here.
    s.b.resize_unbound(pattern.slots as usize);
    s.trail.clear();
    s.nodes.clear();
    s.roots.clear();
    s.roots.push(value);
    s.goals.clear();
    s.goals
        .extend((1..pattern.roots.len() as u16).rev().map(Goal::Root));
    s.goals.push(Goal::Match {
        pat: root.node,
        value,
        iter: 0,
    });
    let mut m = Matcher::<E> {
        pattern,
        graph,
        flags,
        scratch: s,
        fail: None,
        at: (Some(root.node), value),
    };
    // Constraints that read nothing run once, before anything is bound.
    let ok = m.unconditional() && m.solve();
    let result = if ok {
        let s = &*m.scratch;
        let out = match found {
            Some(out) => {
                out.pattern = pattern;
                out.outputs.clone_from(&s.roots);
                out.nodes.clear();
                out.bindings.clone_from(&s.b);
                out
            }
            None => found.insert(Match {
                pattern,
                outputs: s.roots.clone(),
                nodes: Vec::with_capacity(s.nodes.len()),
                bindings: s.b.clone(),
            }),
        };
        // Each node once, in match order (matches are small: a scan beats a set).
        for &n in &s.nodes {
            if !out.nodes.contains(&n) {
                out.nodes.push(n);
            }
        }
        Ok(())
    } else {
        Err(m.fail.take())
    };
    m.undo((0, 0));
    result
}

pub use super::bindings::constant_scalar;

#[derive(Clone, Copy, Debug)]
enum Goal {
    /// Match pattern node `pat` against `value`; `iter` is the iteration of the enclosing
    /// repetition (for its hole).
    Match { pat: u16, value: Value, iter: u16 },
    /// Repetition node `pat` at `value`, after `count` iterations.
    Repeat { pat: u16, value: Value, count: u16 },
    /// Find and match root `k`.
    Root(u16),
}

struct Matcher<'g, 's, const E: bool> {
    pattern: &'static Pattern,
    graph: &'g Graph,
    flags: Flags,
    scratch: &'s mut Scratch,
    /// Explain mode: the deepest failure so far.
    fail: Option<Failure>,
    /// Explain mode: the pattern node and value being matched (for failures of `bind`).
    at: (Option<u16>, Value),
}

type Mark = (usize, usize);

impl<const E: bool> Matcher<'_, '_, E> {
    /// Records a failure at the current depth when it is the deepest so far (explain
    /// mode only; compiled out otherwise).
    #[inline(always)]
    fn record(&mut self, pat: Option<u16>, value: Value, why: impl FnOnce(&Self) -> Why) {
        if E {
            let depth = self.scratch.nodes.len();
            let params = self.pattern.params.len();
            let bound = self
                .scratch
                .trail
                .iter()
                .filter(|&&s| (s as usize) < params)
                .count();
            if self
                .fail
                .as_ref()
                .is_none_or(|f| (depth, bound) > (f.depth, f.bound))
            {
                let why = why(self);
                self.fail = Some(Failure {
                    depth,
                    bound,
                    pat,
                    value,
                    why,
                });
            }
        }
    }

    fn mark(&self) -> Mark {
        (self.scratch.trail.len(), self.scratch.nodes.len())
    }

    /// Rolls bindings and matched nodes back to `mark`.
    fn undo(&mut self, (trail, nodes): Mark) {
        while self.scratch.trail.len() > trail {
            let s = self
                .scratch
                .trail
                .pop()
                .expect("trail is longer than the mark");
            if let Some(b) = self.scratch.b.take(s) {
                self.scratch.recycle(b);
            }
        }
        self.scratch.nodes.truncate(nodes);
    }

    /// Runs the constraints that read no slot.
    fn unconditional(&mut self) -> bool {
        self.pattern.constraints.iter().all(|c| {
            !c.reads.is_empty()
                || match c.check {
                    Check::Compare(l, op, r) => compare(self.graph, &self.scratch.b, l, op, r),
                    Check::Pred(f) => f(self.graph, &self.scratch.b),
                }
        })
    }

    /// Binds `slot` (or compares when bound) and runs the constraints that became ready.
    fn bind(&mut self, slot: Slot, value: Bound) -> bool {
        if let Some(old) = self.scratch.b.get(slot) {
            if *old == value {
                self.scratch.recycle(value);
                return true;
            }
            if E {
                let old = old.clone();
                let (pat, at) = self.at;
                self.record(pat, at, |_| Why::Rebound {
                    slot,
                    old,
                    new: value,
                });
            } else {
                self.scratch.recycle(value);
            }
            return false;
        }
        self.scratch.b.set(slot, value);
        self.scratch.trail.push(slot);
        let failed = self.pattern.constraints.iter().position(|c| {
            c.reads.contains(&slot)
                && c.reads.iter().all(|&s| self.scratch.b.is_bound(s))
                && !match c.check {
                    Check::Compare(l, op, r) => compare(self.graph, &self.scratch.b, l, op, r),
                    Check::Pred(f) => f(self.graph, &self.scratch.b),
                }
        });
        match failed {
            None => true,
            Some(index) => {
                let (pat, at) = self.at;
                self.record(pat, at, |m| Why::Constraint {
                    index,
                    detail: match m.pattern.constraints[index].check {
                        Check::Compare(l, _, r) => {
                            format!(
                                "{} vs {}",
                                show(m.graph, &m.scratch.b, l),
                                show(m.graph, &m.scratch.b, r)
                            )
                        }
                        Check::Pred(_) => String::new(),
                    },
                });
                false
            }
        }
    }

    /// Solves the goals on the stack, last first. On failure the stack is left exactly
    /// as it was, so a caller can push alternatives, fail, truncate and try the next.
    fn solve(&mut self) -> bool {
        let Some(goal) = self.scratch.goals.pop() else {
            return true;
        };
        let ok = match goal {
            Goal::Match { pat, value, iter } => self.match_node(pat, value, iter),
            Goal::Repeat { pat, value, count } => self.repeat(pat, value, count),
            Goal::Root(k) => self.match_root(k),
        };
        if !ok {
            self.scratch.goals.push(goal);
        }
        ok
    }

    /// Pushes `goal`, solves, and on failure pops it again.
    fn attempt(&mut self, goal: Goal) -> bool {
        let base = self.scratch.goals.len();
        self.scratch.goals.push(goal);
        if self.solve() {
            return true;
        }
        self.scratch.goals.truncate(base);
        false
    }

    fn repeat(&mut self, pat: u16, value: Value, count: u16) -> bool {
        let PatNode::Repeat(r) = &self.pattern.nodes[pat as usize] else {
            unreachable!("a repeat goal names a repeat node")
        };
        let more = Goal::Match {
            pat: r.body,
            value,
            iter: count + 1,
        };
        if count < r.max && self.attempt(more) {
            return true;
        }
        count >= r.min
            && self.attempt(Goal::Match {
                pat: r.base,
                value,
                iter: 0,
            })
    }

    fn match_root(&mut self, k: u16) -> bool {
        let root = self.pattern.roots[k as usize];
        let mut ops = std::mem::take(&mut self.scratch.ops);
        ops.clear();
        anchor_ops(self.pattern, root.node, &mut ops);
        let candidates: Vec<NodeId> = if self.flags.match_output {
            // The pattern's outputs are the graph's, in order: one candidate.
            let v = self.graph.outputs()[k as usize];
            if v.output == 0 {
                vec![v.node]
            } else {
                Vec::new()
            }
        } else {
            match root.link {
                Some(Link { slot, depth }) => {
                    let Some(Bound::Value(v)) = self.scratch.b.get(slot) else {
                        self.scratch.ops = ops;
                        return false;
                    };
                    let mut frontier = BTreeSet::from([v.node]);
                    for _ in 0..depth {
                        frontier = frontier
                            .iter()
                            .flat_map(|&n| self.graph.node_users(n))
                            .collect();
                    }
                    frontier.into_iter().collect()
                }
                None => {
                    let mut all: Vec<NodeId> =
                        ops.iter().flat_map(|&op| self.graph.nodes_of(op)).collect();
                    all.sort_unstable();
                    all
                }
            }
        };
        let mut found = false;
        for c in candidates {
            let Some(node) = self.graph.node(c) else {
                continue;
            };
            let value = Value::new(c, 0);
            if !ops.contains(&node.op().id()) || self.scratch.roots.contains(&value) {
                continue;
            }
            self.scratch.roots.push(value);
            if self.attempt(Goal::Match {
                pat: root.node,
                value,
                iter: 0,
            }) {
                found = true;
                break;
            }
            self.scratch.roots.pop();
        }
        self.scratch.ops = ops;
        if !found {
            let at = self.scratch.roots[0];
            self.record(None, at, |_| Why::NoRoot { root: k });
        }
        found
    }

    fn match_node(&mut self, pat: u16, value: Value, iter: u16) -> bool {
        let mark = self.mark();
        if E {
            self.at = (Some(pat), value);
        }
        let ok = match &self.pattern.nodes[pat as usize] {
            PatNode::Any => return self.solve(),
            PatNode::Tensor(slot) => {
                if self.flags.match_placeholder
                    && !self
                        .graph
                        .node(value.node)
                        .is_some_and(|n| *n.op() == crate::ops::builtin::INPUT)
                {
                    return false;
                }
                self.bind(*slot, Bound::Value(value)) && self.solve()
            }
            PatNode::Const(c) => {
                let Some(x) = constant_scalar(self.graph, value) else {
                    self.record(Some(pat), value, |_| Why::NotConst);
                    return false;
                };
                let dtype = self
                    .graph
                    .meta(value)
                    .map(|m| m.dtype)
                    .unwrap_or(DType::F64);
                let ok = match c {
                    ConstPat::Value(_) if self.flags.ignore_literals => true,
                    ConstPat::Value(want) => {
                        let ok = close(x, *want, dtype);
                        if !ok {
                            let want = *want;
                            self.record(Some(pat), value, |_| Why::ConstValue { want, found: x });
                        }
                        ok
                    }
                    ConstPat::Param(slot) => {
                        let bound = match self.pattern.params[*slot as usize].kind {
                            ParamKind::Int if x.fract() == 0.0 => Bound::Int(x as i64),
                            ParamKind::Int => {
                                self.record(Some(pat), value, |_| Why::NotInt { found: x });
                                return false;
                            }
                            _ => Bound::Float(x),
                        };
                        self.bind(*slot, bound)
                    }
                };
                self.scratch.nodes.push(value.node);
                ok && self.solve()
            }
            PatNode::Op(o) => {
                let Some(node) = self.graph.node(value.node) else {
                    return false;
                };
                if node.op() != o.op {
                    self.record(Some(pat), value, |_| Why::Op {
                        expected: vec![o.op.name],
                    });
                    return false;
                }
                if value.output != 0 {
                    self.record(Some(pat), value, |_| Why::Output);
                    return false;
                }
                if let Some(Bound::Value(v)) = o.slot.and_then(|s| self.scratch.b.get(s)) {
                    // A shared (`let`) node matched already.
                    if *v != value {
                        let old = *v;
                        self.record(Some(pat), value, |_| Why::Shared { old });
                        return false;
                    }
                    return self.solve();
                }
                let n = node.operands().len();
                if n < o.operands.len() || (!o.more_operands && n != o.operands.len()) {
                    self.record(Some(pat), value, |_| Why::Operands {
                        want: o.operands.len(),
                        more: o.more_operands,
                        found: n,
                    });
                    return false;
                }
                let attrs = node.attr_values();
                for (k, a) in o.attrs.iter().enumerate() {
                    let Some(v) = attrs.get(a.index) else {
                        return false;
                    };
                    if !self.match_attr(&a.pat, v) {
                        if !matches!(a.pat, AttrPat::Param(_)) {
                            self.record(Some(pat), value, |_| Why::Attr {
                                name: a.name,
                                index: a.index,
                                attr: k,
                            });
                        }
                        self.undo(mark);
                        return false;
                    }
                }
                if E {
                    self.at = (Some(pat), value);
                }
                if o.slot.is_some_and(|s| !self.bind(s, Bound::Value(value))) {
                    self.undo(mark);
                    return false;
                }
                self.scratch.nodes.push(value.node);
                let operands = node.operands();
                let swap = o.op.commutative && o.operands.len() >= 2;
                let base = self.scratch.goals.len();
                let mut ok = false;
                for order in 0..1 + usize::from(swap) {
                    for (i, &sub) in o.operands.iter().enumerate().rev() {
                        let j = match (order, i) {
                            (1, 0) => 1,
                            (1, 1) => 0,
                            _ => i,
                        };
                        self.scratch.goals.push(Goal::Match {
                            pat: sub,
                            value: operands[j],
                            iter,
                        });
                    }
                    if self.solve() {
                        ok = true;
                        break;
                    }
                    self.scratch.goals.truncate(base);
                }
                ok
            }
            PatNode::Alt(branches) => branches.iter().any(|&b| {
                self.attempt(Goal::Match {
                    pat: b,
                    value,
                    iter,
                })
            }),
            PatNode::Repeat(_) => self.attempt(Goal::Repeat {
                pat,
                value,
                count: 0,
            }),
            PatNode::Hole(rep) => self.attempt(Goal::Repeat {
                pat: *rep,
                value,
                count: iter,
            }),
        };
        if !ok {
            self.undo(mark);
        }
        ok
    }

    fn match_attr(&mut self, pat: &AttrPat, v: &AttrValue) -> bool {
        match (pat, v) {
            (AttrPat::Param(slot), v) => {
                let bound = match v {
                    AttrValue::Int(x) => Bound::Int(*x),
                    AttrValue::Float(x) => Bound::Float(*x),
                    AttrValue::Bool(x) => Bound::Bool(*x),
                    AttrValue::Ints(x) => {
                        let mut v = self.scratch.int_lists.pop().unwrap_or_default();
                        v.clear();
                        v.extend_from_slice(x);
                        Bound::Ints(v)
                    }
                    AttrValue::Str(x) => Bound::Str(x.clone()),
                    AttrValue::DType(x) => Bound::DType(*x),
                    // A value known only at run time binds no parameter.
                    AttrValue::Null | AttrValue::Sym(_) | AttrValue::Dims(_) => return false,
                };
                self.bind(*slot, bound)
            }
            _ if self.flags.ignore_literals => true,
            _ => attr_literal_matches(pat, v),
        }
    }
}

/// The op names a pattern node can match at its top.
fn anchor_ops(p: &Pattern, node: u16, out: &mut Vec<OpId>) {
    match &p.nodes[node as usize] {
        PatNode::Op(o) => out.push(o.op.id()),
        PatNode::Alt(bs) => bs.iter().for_each(|&b| anchor_ops(p, b, out)),
        PatNode::Repeat(r) => {
            anchor_ops(p, r.body, out);
            if r.min == 0 {
                anchor_ops(p, r.base, out);
            }
        }
        PatNode::Const(_) => out.push(Op::Constant.into()),
        PatNode::Any | PatNode::Tensor(_) | PatNode::Hole(_) => {}
    }
}
