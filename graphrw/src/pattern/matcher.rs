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
//! [`Pattern::match_at`] call them.
//!
//! What the matcher does not check (the rewriter's job): that interior values have no
//! users outside the match, and that a multi-output match is convex.

use std::collections::BTreeSet;

use crate::ops::AttrValue;
use crate::pattern::{
    AttrPat, Bindings, Bound, Check, CmpOp, ConstPat, Link, Match, ParamKind, PatNode, Pattern,
    Slot, Term,
};
use crate::{DType, Dim, Graph, NodeId, Value};

/// Every match of `pattern` in `graph`: at most one per anchor candidate, in anchor
/// node order.
pub fn find(pattern: &'static Pattern, graph: &Graph) -> Vec<Match> {
    let mut anchors: Vec<NodeId> = pattern
        .anchors
        .iter()
        .flat_map(|op| graph.nodes_with_op(op.name))
        .collect();
    anchors.sort_unstable();
    anchors.dedup();
    anchors
        .into_iter()
        .filter_map(|n| match_at(pattern, graph, n))
        .collect()
}

/// The first match of `pattern` whose first root is output 0 of `anchor`.
pub fn match_at(pattern: &'static Pattern, graph: &Graph, anchor: NodeId) -> Option<Match> {
    let root = pattern.roots.first()?;
    let node = graph.node(anchor)?;
    if !pattern.anchors.iter().any(|op| *op == node.op()) {
        return None;
    }
    let value = Value::new(anchor, 0);
    let mut m = Matcher {
        p: pattern,
        g: graph,
        b: Bindings::new(pattern.slots as usize),
        trail: Vec::new(),
        nodes: Vec::new(),
        roots: vec![value],
    };
    let mut goals: Vec<Goal> = (1..pattern.roots.len() as u16)
        .rev()
        .map(Goal::Root)
        .collect();
    goals.push(Goal::Match {
        pat: root.node,
        value,
        iter: 0,
    });
    if !m.solve(goals) {
        return None;
    }
    let mut seen = BTreeSet::new();
    let nodes = m.nodes.into_iter().filter(|n| seen.insert(*n)).collect();
    Some(Match {
        pattern,
        outputs: m.roots,
        nodes,
        bindings: m.b,
    })
}

/// The number a one-element `constant` node holds.
pub fn constant_scalar(graph: &Graph, v: Value) -> Option<f64> {
    let node = graph.node(v.node)?;
    if node.op_name() != "constant" || v.output != 0 {
        return None;
    }
    let t = node.payload()?;
    (t.numel() == 1).then(|| t.to_f64_vec()[0])
}

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

struct Matcher<'g> {
    p: &'static Pattern,
    g: &'g Graph,
    b: Bindings,
    trail: Vec<Slot>,
    nodes: Vec<NodeId>,
    roots: Vec<Value>,
}

type Mark = (usize, usize);

impl Matcher<'_> {
    fn mark(&self) -> Mark {
        (self.trail.len(), self.nodes.len())
    }

    fn undo(&mut self, (trail, nodes): Mark) {
        while self.trail.len() > trail {
            let s = self.trail.pop().expect("trail is longer than the mark");
            self.b.clear(s);
        }
        self.nodes.truncate(nodes);
    }

    /// Binds `slot` (or compares when bound) and runs the constraints that became ready.
    fn bind(&mut self, slot: Slot, value: Bound) -> bool {
        if let Some(old) = self.b.get(slot) {
            return *old == value;
        }
        self.b.set(slot, value);
        self.trail.push(slot);
        self.p
            .constraints
            .iter()
            .filter(|c| c.reads.contains(&slot) && c.reads.iter().all(|&s| self.b.is_bound(s)))
            .all(|c| match c.check {
                Check::Compare(l, op, r) => compare(self.g, &self.b, l, op, r),
                Check::Pred(f) => f(self.g, &self.b),
            })
    }

    fn solve(&mut self, mut goals: Vec<Goal>) -> bool {
        let Some(goal) = goals.pop() else {
            return true;
        };
        match goal {
            Goal::Match { pat, value, iter } => self.match_node(pat, value, iter, goals),
            Goal::Repeat { pat, value, count } => {
                let PatNode::Repeat(r) = &self.p.nodes[pat as usize] else {
                    unreachable!("a repeat goal names a repeat node")
                };
                if count < r.max {
                    let mut more = goals.clone();
                    more.push(Goal::Match {
                        pat: r.body,
                        value,
                        iter: count + 1,
                    });
                    if self.solve(more) {
                        return true;
                    }
                }
                if count >= r.min {
                    goals.push(Goal::Match {
                        pat: r.base,
                        value,
                        iter: 0,
                    });
                    return self.solve(goals);
                }
                false
            }
            Goal::Root(k) => self.match_root(k, goals),
        }
    }

    fn match_root(&mut self, k: u16, goals: Vec<Goal>) -> bool {
        let root = self.p.roots[k as usize];
        let mut ops = Vec::new();
        anchor_ops(self.p, root.node, &mut ops);
        let candidates: Vec<NodeId> = match root.link {
            Some(Link { slot, depth }) => {
                let Some(Bound::Value(v)) = self.b.get(slot) else {
                    return false;
                };
                let mut frontier = BTreeSet::from([v.node]);
                for _ in 0..depth {
                    frontier = frontier.iter().flat_map(|&n| self.g.consumers(n)).collect();
                }
                frontier.into_iter().collect()
            }
            None => {
                let mut all: Vec<NodeId> =
                    ops.iter().flat_map(|op| self.g.nodes_with_op(op)).collect();
                all.sort_unstable();
                all
            }
        };
        for c in candidates {
            let Some(node) = self.g.node(c) else { continue };
            let value = Value::new(c, 0);
            if !ops.contains(&node.op_name()) || self.roots.contains(&value) {
                continue;
            }
            self.roots.push(value);
            let mut more = goals.clone();
            more.push(Goal::Match {
                pat: root.node,
                value,
                iter: 0,
            });
            if self.solve(more) {
                return true;
            }
            self.roots.pop();
        }
        false
    }

    fn match_node(&mut self, pat: u16, value: Value, iter: u16, mut goals: Vec<Goal>) -> bool {
        let mark = self.mark();
        let ok = match &self.p.nodes[pat as usize] {
            PatNode::Any => return self.solve(goals),
            PatNode::Tensor(slot) => self.bind(*slot, Bound::Value(value)) && self.solve(goals),
            PatNode::Const(c) => {
                let Some(x) = constant_scalar(self.g, value) else {
                    return false;
                };
                let dtype = self.g.meta(value).map(|m| m.dtype).unwrap_or(DType::F64);
                let ok = match c {
                    ConstPat::Value(want) => close(x, *want, dtype),
                    ConstPat::Param(slot) => {
                        let bound = match self.p.params[*slot as usize].kind {
                            ParamKind::Int if x.fract() == 0.0 => Bound::Int(x as i64),
                            ParamKind::Int => return false,
                            _ => Bound::Float(x),
                        };
                        self.bind(*slot, bound)
                    }
                };
                self.nodes.push(value.node);
                ok && self.solve(goals)
            }
            PatNode::Op(o) => {
                let Some(node) = self.g.node(value.node) else {
                    return false;
                };
                if value.output != 0 || node.op() != o.op {
                    return false;
                }
                if let Some(Bound::Value(v)) = o.slot.and_then(|s| self.b.get(s)) {
                    // A shared (`let`) node matched already.
                    return *v == value && self.solve(goals);
                }
                let n = node.operands().len();
                if n < o.operands.len() || (!o.more_operands && n != o.operands.len()) {
                    return false;
                }
                let attrs = node.attr_values();
                for a in o.attrs {
                    let Some(v) = attrs.get(a.index) else {
                        return false;
                    };
                    if !self.match_attr(&a.pat, v) {
                        self.undo(mark);
                        return false;
                    }
                }
                if o.slot.is_some_and(|s| !self.bind(s, Bound::Value(value))) {
                    self.undo(mark);
                    return false;
                }
                self.nodes.push(value.node);
                let operands = node.operands();
                let swap = o.op.commutative && o.operands.len() >= 2;
                for order in 0..1 + usize::from(swap) {
                    let mut more = goals.clone();
                    for (i, &sub) in o.operands.iter().enumerate().rev() {
                        let j = match (order, i) {
                            (1, 0) => 1,
                            (1, 1) => 0,
                            _ => i,
                        };
                        more.push(Goal::Match {
                            pat: sub,
                            value: operands[j],
                            iter,
                        });
                    }
                    if self.solve(more) {
                        return true;
                    }
                }
                false
            }
            PatNode::Alt(branches) => {
                for &b in *branches {
                    let mut more = goals.clone();
                    more.push(Goal::Match {
                        pat: b,
                        value,
                        iter,
                    });
                    if self.solve(more) {
                        return true;
                    }
                }
                false
            }
            PatNode::Repeat(_) => {
                goals.push(Goal::Repeat {
                    pat,
                    value,
                    count: 0,
                });
                self.solve(goals)
            }
            PatNode::Hole(rep) => {
                goals.push(Goal::Repeat {
                    pat: *rep,
                    value,
                    count: iter,
                });
                self.solve(goals)
            }
        };
        if !ok {
            self.undo(mark);
        }
        ok
    }

    fn match_attr(&mut self, pat: &AttrPat, v: &AttrValue) -> bool {
        match (pat, v) {
            (AttrPat::Int(a), AttrValue::Int(b)) => a == b,
            (AttrPat::Float(a), AttrValue::Float(b)) => a == b,
            (AttrPat::Bool(a), AttrValue::Bool(b)) => a == b,
            (AttrPat::Ints(a), AttrValue::Ints(b)) => *a == b.as_slice(),
            (AttrPat::Str(a), AttrValue::Str(b)) => *a == b,
            (AttrPat::DType(a), AttrValue::DType(b)) => a == b,
            (AttrPat::Null, AttrValue::Null) => true,
            (AttrPat::OneOf(alts), v) => alts.iter().any(|a| self.match_attr(a, v)),
            (AttrPat::Param(slot), v) => {
                let bound = match v {
                    AttrValue::Int(x) => Bound::Int(*x),
                    AttrValue::Float(x) => Bound::Float(*x),
                    AttrValue::Bool(x) => Bound::Bool(*x),
                    AttrValue::Ints(x) => Bound::Ints(x.clone()),
                    AttrValue::Str(x) => Bound::Str(x.clone()),
                    AttrValue::DType(x) => Bound::DType(*x),
                    AttrValue::Null => return false,
                };
                self.bind(*slot, bound)
            }
            _ => false,
        }
    }
}

/// The op names a pattern node can match at its top.
fn anchor_ops(p: &Pattern, node: u16, out: &mut Vec<&'static str>) {
    match &p.nodes[node as usize] {
        PatNode::Op(o) => out.push(o.op.name),
        PatNode::Alt(bs) => bs.iter().for_each(|&b| anchor_ops(p, b, out)),
        PatNode::Repeat(r) => {
            anchor_ops(p, r.body, out);
            if r.min == 0 {
                anchor_ops(p, r.base, out);
            }
        }
        PatNode::Const(_) => out.push("constant"),
        PatNode::Any | PatNode::Tensor(_) | PatNode::Hole(_) => {}
    }
}

fn close(x: f64, want: f64, dtype: DType) -> bool {
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

fn compare(g: &Graph, b: &Bindings, l: Term, op: CmpOp, r: Term) -> bool {
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
