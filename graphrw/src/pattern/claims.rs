//! Claims: a rule of higher priority takes a match away from a smaller rule nested
//! inside it, whatever order the rewriter visits nodes in.
//!
//! Priority orders the rules tried at one node. A larger pattern is anchored further
//! down the graph than a smaller one it contains (`swiglu_mlp`, `silu(x @ wg) * (x @
//! wu)`, is anchored at the outer `mul`; `silu`, `x * sigmoid(x)`, at the inner one), so
//! a rewriter visiting nodes in id order would reach the smaller rule's anchor first, and
//! its rewrite would destroy the larger match. Hence, before a rule `S` fires at node
//! `n`, every rule `L` of higher priority whose pattern has one of `S`'s anchor ops below
//! its own anchor (found once per rule list, from the static trees: [`Claims::new`]) is
//! tried at the users of `n` that many levels up. The first `L` that matches there, with
//! `n` inside its match, safely and through the options' filters, fires instead of `S`;
//! its own claimants are asked in turn (priorities only grow, so this ends).
//!
//! What is searched is bounded: users up to [`MAX_DEPTH`] levels and
//! [`MAX_VISITED`] nodes above `n`. Only a pattern's first root is searched from (a
//! multi-output pattern containing `S` elsewhere does not claim), and an op inside a
//! repeated chain counts at any depth up to the bound.

use std::collections::HashMap;

use crate::pattern::matcher::{self, Scratch};
use crate::pattern::safety::{safe_interior_verdict, Interior};
use crate::pattern::{Match, MatchOptions, PatNode, Pattern, Rule};
use crate::{Graph, NodeId};

/// Users are searched at most this many levels above a match's anchor.
pub(crate) const MAX_DEPTH: u16 = 8;
/// At most this many users are looked at per claim search.
pub(crate) const MAX_VISITED: usize = 64;

/// A rule that may claim another's match: its anchor lies `min..=max` levels of users
/// above the other's.
#[derive(Clone, Copy, Debug)]
struct Claim {
    rule: &'static Rule,
    min: u16,
    max: u16,
}

/// For each rule of a list, the rules of higher priority that may claim its matches.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    /// By the rule's address.
    by_rule: HashMap<usize, Vec<Claim>>,
}

/// A claimant's match: the rule, the match and its interior (what the rewriter replaces).
pub(crate) struct Claimed {
    pub(crate) rule: &'static Rule,
    pub(crate) m: Match,
    pub(crate) inside: Interior,
}

fn key(rule: &'static Rule) -> usize {
    rule as *const Rule as usize
}

impl Claims {
    /// The claims among `rules`: `L` may claim `S`'s matches when `L`'s priority is
    /// higher and one of `S`'s anchor ops occurs in `L`'s pattern below `L`'s anchor.
    pub(crate) fn new(rules: &[&'static Rule]) -> Claims {
        let below: Vec<Vec<(&'static str, u16, u16)>> =
            rules.iter().map(|r| ops_below_anchor(r.pattern)).collect();
        let mut by_rule: HashMap<usize, Vec<Claim>> = HashMap::new();
        for small in rules {
            for (large, ops) in rules.iter().zip(&below) {
                if large.priority <= small.priority || std::ptr::eq(*large, *small) {
                    continue;
                }
                let depths = ops
                    .iter()
                    .filter(|(op, _, _)| small.pattern.anchors.iter().any(|a| a.name == *op));
                let (min, max) =
                    depths.fold((u16::MAX, 0), |(lo, hi), &(_, a, b)| (lo.min(a), hi.max(b)));
                if min <= max {
                    by_rule.entry(key(small)).or_default().push(Claim {
                        rule: large,
                        min,
                        max: max.min(MAX_DEPTH),
                    });
                }
            }
        }
        // Highest priority first (the list is built in the rules' order, which is by
        // priority already; kept explicit).
        for claims in by_rule.values_mut() {
            claims.sort_by_key(|c| std::cmp::Reverse(c.rule.priority));
        }
        Claims { by_rule }
    }

    /// Whether no rule may claim another's match (then [`Claims::claimant`] is never
    /// worth asking).
    pub(crate) fn is_empty(&self) -> bool {
        self.by_rule.is_empty()
    }

    /// The match of higher priority that takes `rule`'s match `m` at `anchor` away, if
    /// any (the highest of a chain of claims). `skip(rule, anchor)` passes over rules
    /// the caller no longer tries at an anchor.
    pub(crate) fn claimant(
        &self,
        graph: &Graph,
        rule: &'static Rule,
        anchor: NodeId,
        options: &MatchOptions,
        scratch: &mut Scratch,
        mut skip: impl FnMut(&'static Rule, NodeId) -> bool,
    ) -> Option<Claimed> {
        let mut best: Option<Claimed> = None;
        let (mut rule, mut anchor) = (rule, anchor);
        while let Some(c) = self.claim_once(graph, rule, anchor, options, scratch, &mut skip) {
            rule = c.rule;
            anchor = c.m.outputs.first().map_or(anchor, |v| v.node);
            best = Some(c);
        }
        best
    }

    fn claim_once(
        &self,
        graph: &Graph,
        rule: &'static Rule,
        anchor: NodeId,
        options: &MatchOptions,
        scratch: &mut Scratch,
        skip: &mut impl FnMut(&'static Rule, NodeId) -> bool,
    ) -> Option<Claimed> {
        let claims = self.by_rule.get(&key(rule))?;
        let deepest = claims.iter().map(|c| c.max).max().unwrap_or(0);
        // The users of `anchor`, level by level, each with its level (a node reached
        // by two paths keeps its first, lowest level and is tried at that one only
        // once, but every claim whose range holds any of its levels tries it).
        let mut levels: Vec<(NodeId, u16)> = vec![(anchor, 0)];
        let mut at = 0;
        while at < levels.len() && levels.len() < MAX_VISITED {
            let (n, level) = levels[at];
            at += 1;
            if level >= deepest {
                continue;
            }
            for &(user, _) in graph.node_uses(n) {
                if levels.len() >= MAX_VISITED {
                    break;
                }
                if !levels.iter().any(|&(m, _)| m == user) {
                    levels.push((user, level + 1));
                }
            }
        }
        for c in claims {
            for &(candidate, level) in &levels[1..] {
                if level < c.min || level > c.max || skip(c.rule, candidate) {
                    continue;
                }
                let Some(node) = graph.node(candidate) else {
                    continue;
                };
                if !c.rule.pattern.anchors.iter().any(|a| *a == node.op()) {
                    continue;
                }
                let mut found = None;
                if matcher::run_into::<false>(
                    c.rule.pattern,
                    graph,
                    candidate,
                    options.flags,
                    scratch,
                    &mut found,
                )
                .is_err()
                {
                    continue;
                }
                let Some(m) = found.filter(|m| m.nodes.contains(&anchor)) else {
                    continue;
                };
                if !options.accepts(graph, &m) {
                    continue;
                }
                if let Some(inside) = safe_interior_verdict(graph, &m) {
                    return Some(Claimed {
                        rule: c.rule,
                        m,
                        inside,
                    });
                }
            }
        }
        None
    }
}

/// The ops of `p` below its anchor (its first root), each with the fewest and most
/// levels of operands between it and the anchor (an op inside a repeated chain: any
/// level up to [`MAX_DEPTH`]).
fn ops_below_anchor(p: &'static Pattern) -> Vec<(&'static str, u16, u16)> {
    let mut out = Vec::new();
    if let Some(root) = p.roots.first() {
        walk(p, root.node, 0, false, &mut out, 0);
    }
    out
}

fn walk(
    p: &'static Pattern,
    node: u16,
    depth: u16,
    repeated: bool,
    out: &mut Vec<(&'static str, u16, u16)>,
    steps: usize,
) {
    // A pattern is a small tree (or a DAG through `let`); the bound keeps a
    // hand-written static from looping.
    if steps > 4 * p.nodes.len() + 16 || depth > MAX_DEPTH {
        return;
    }
    match p.nodes.get(node as usize) {
        Some(PatNode::Op(o)) => {
            if depth > 0 {
                let max = if repeated { MAX_DEPTH } else { depth };
                out.push((o.op.name, depth, max));
            }
            for &operand in o.operands {
                walk(p, operand, depth + 1, repeated, out, steps + 1);
            }
        }
        Some(PatNode::Alt(alts)) => {
            for &a in *alts {
                walk(p, a, depth, repeated, out, steps + 1);
            }
        }
        Some(PatNode::Repeat(r)) => {
            walk(p, r.body, depth, true, out, steps + 1);
            walk(p, r.base, depth, true, out, steps + 1);
        }
        _ => {}
    }
}
