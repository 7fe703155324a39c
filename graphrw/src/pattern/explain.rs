//! Why a pattern does not match: [`explain`] runs the matcher in explain mode at one
//! node and reports the deepest point it reached, in words that name the pattern
//! position and the graph node; [`near_misses`] does so for every anchor candidate.
//!
//! ```text
//! operand 0 of `div`: expected `matmul`, found `bmm` t41
//! the root: `softmax` t3 has dim=0, expected dim=-1
//! the root: constraint `rank(x) == 4` failed (3 vs 4) binding x to t1
//! ```
//!
//! The normal matcher ([`find`](crate::pattern::matcher::find),
//! [`match_at`](crate::pattern::matcher::match_at)) records nothing: explain mode is a
//! separate instantiation of it.

use std::fmt;

use crate::ops::AttrValue;
use crate::pattern::matcher::{self, Failure, Why};
use crate::pattern::{AttrPat, Bound, PatNode, Pattern};
use crate::printer::Names;
use crate::{Graph, NodeId, Value};

/// The result of [`explain`]: a match, or where and why matching stopped.
///
/// Its `Debug` form names nodes as the printer does (`t8`), not by index.
#[derive(Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The pattern's name.
    pub pattern: &'static str,
    /// The node the match was anchored at.
    pub anchor: NodeId,
    /// The anchor as the printer names it (`t8`, an input's name).
    pub anchor_name: String,
    /// True when the pattern matches at `anchor`.
    pub matched: bool,
    /// Graph nodes matched before matching stopped (how far it got); for a match, the
    /// number of nodes it covers.
    pub depth: usize,
    /// Pattern parameters bound before matching stopped.
    pub bound: usize,
    /// How much of the pattern the graph around the anchor has, the failing parts
    /// skipped: the ops of the pattern found at their places (each failing operand
    /// passed over, so that parts after it still count) plus the parameters they reach
    /// ([`near_misses`] ranks by it). Constraints are not checked here.
    pub progress: usize,
    /// The graph node where matching stopped (`None` for a match).
    pub node: Option<NodeId>,
    /// That node as the printer names it.
    pub node_name: Option<String>,
    /// The pattern position where it stopped (`operand 0 of `div``, `the root`).
    pub position: String,
    /// The failure sentence, or `matches`.
    pub message: String,
    /// The check that failed, in words that name no graph value (``operand 0 of `div`:
    /// expected `matmul` ``, ``the root: constraint `rank(x) == 4` ``), so that misses
    /// at different nodes for one reason read the same; `matches` for a match.
    pub check: String,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Explanation")
            .field("pattern", &self.pattern)
            .field("anchor", &format_args!("{}", self.anchor_name))
            .field("matched", &self.matched)
            .field("depth", &self.depth)
            .field("bound", &self.bound)
            .field("progress", &self.progress)
            .field(
                "node",
                &format_args!("{}", self.node_name.as_deref().unwrap_or("None")),
            )
            .field("position", &self.position)
            .field("message", &self.message)
            .field("check", &self.check)
            .finish()
    }
}

/// Why no rule of a list of rule sets rewrites one node ([`explain_rules`]): each
/// rule that could start there, in the order the rewriter tries them, with its
/// explanation (where its pattern first failed, or `matches`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesExplanation {
    /// The node, as the printer names it.
    pub node: String,
    /// Each rule and its explanation, in priority order.
    pub rules: Vec<(&'static str, Explanation)>,
    /// Rules whose pattern cannot start at this node's op (not tried).
    pub not_anchored: usize,
}

impl RulesExplanation {
    /// The rules whose pattern matches at the node (a rule then did not fire only
    /// because its match was unsafe or its replacement failed).
    pub fn matching(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.rules
            .iter()
            .filter(|(_, e)| e.matched)
            .map(|(rule, _)| *rule)
    }
}

impl fmt::Display for RulesExplanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at {}: {} rule(s) could start here",
            self.node,
            self.rules.len()
        )?;
        if self.not_anchored > 0 {
            write!(f, " ({} other(s) start at other ops)", self.not_anchored)?;
        }
        for (rule, e) in &self.rules {
            write!(f, "\n  rule `{rule}`: {e}")?;
        }
        Ok(())
    }
}

/// Why no rule of `sets` fired at `node`: every rule whose pattern can start at the
/// node's op, in the order the rewriter tries them (priority, then set order, then
/// declaration order), each with [`explain`]'s answer (the first step of its pattern
/// that failed, or `matches`).
pub fn explain_rules(
    sets: &[&'static crate::RuleSet],
    graph: &Graph,
    node: NodeId,
) -> RulesExplanation {
    let names = Names::new(graph);
    let op = graph.node(node).map(|n| n.op().id());
    let rules = crate::pattern::dispatch::Dispatch::for_sets(sets)
        .rules()
        .to_vec();
    let mut out = RulesExplanation {
        node: match graph.node(node) {
            Some(_) => crate::printer::node_line(graph, &names, node),
            None => format!("{} (not a node of the graph)", names.get(Value::from(node))),
        },
        rules: Vec::new(),
        not_anchored: 0,
    };
    for rule in rules {
        let anchored = rule.pattern.anchors.is_empty()
            || op.is_some_and(|op| rule.pattern.anchors.iter().any(|a| a.id() == op));
        if anchored {
            out.rules
                .push((rule.name, explain_named(rule.pattern, graph, node, &names)));
        } else {
            out.not_anchored += 1;
        }
    }
    out
}

/// Why `pattern` does or does not match with its first root at output 0 of `node`.
pub fn explain(pattern: &'static Pattern, graph: &Graph, node: NodeId) -> Explanation {
    explain_named(pattern, graph, node, &Names::new(graph))
}

/// Every anchor candidate of `pattern` in `graph` (a node with one of the ops the
/// pattern can start at) where the pattern does not match, with its explanation; each
/// names its candidate as the printer does ([`Explanation::anchor_name`], `t4`) beside
/// its id ([`Explanation::anchor`]).
///
/// The deepest partial match comes first: ranked by [`Explanation::progress`] (how many
/// of the pattern's ops and parameters the graph has at their places, the failing
/// parts skipped: an MLP whose gate was already rewritten still has its up projection
/// and inputs, where some other block only shares its outer op), then by nodes matched
/// before the first failure, ties in node order. Only nodes of the pattern's anchor ops are candidates: where the
/// graph has none, the list is empty.
pub fn near_misses(pattern: &'static Pattern, graph: &Graph) -> Vec<Explanation> {
    let names = Names::new(graph);
    let mut anchors: Vec<NodeId> = pattern
        .anchors
        .iter()
        .flat_map(|&op| graph.nodes_of(op))
        .collect();
    anchors.sort_unstable();
    anchors.dedup();
    let mut out: Vec<Explanation> = anchors
        .into_iter()
        .map(|n| explain_named(pattern, graph, n, &names))
        .filter(|e| !e.matched)
        .collect();
    out.sort_by_key(|e| {
        (
            std::cmp::Reverse(e.progress),
            std::cmp::Reverse(e.depth),
            e.anchor,
        )
    });
    out
}

/// [`explain`] with the graph's names already computed.
pub fn explain_named(
    pattern: &'static Pattern,
    graph: &Graph,
    node: NodeId,
    names: &Names,
) -> Explanation {
    let mut e = Explanation {
        pattern: pattern.name,
        anchor: node,
        anchor_name: names.get(Value::from(node)),
        matched: false,
        depth: 0,
        bound: 0,
        progress: 0,
        node: Some(node),
        node_name: Some(names.get(Value::from(node))),
        position: "the root".into(),
        message: String::new(),
        check: String::new(),
    };
    if let Some(root) = pattern.roots.first() {
        e.progress = partial(pattern, graph, root.node, Value::new(node, 0), 0);
    }
    match matcher::run::<true>(pattern, graph, node) {
        Ok(m) => {
            e.matched = true;
            e.depth = m.nodes.len();
            e.node = None;
            e.node_name = None;
            e.message = "matches".into();
            e.check = "matches".into();
        }
        Err(None) => {
            e.message = match graph.node(node) {
                None => format!(
                    "{} is not a node of the graph",
                    names.get(Value::from(node))
                ),
                Some(_) => format!("`{}` has no roots", pattern.name),
            };
            e.check = e.message.clone();
        }
        Err(Some(f)) => {
            e.depth = f.depth;
            e.bound = f.bound;
            e.node = Some(f.value.node);
            e.node_name = Some(names.get(Value::from(f.value.node)));
            e.position = match f.pat {
                Some(p) => position(pattern, graph, p, f.value),
                None => "the root".into(),
            };
            e.message = sentence(pattern, graph, names, &e.position, &f);
            e.check = check(pattern, &e.position, &f);
        }
    }
    e
}

/// How much of the pattern below pattern node `n` the graph has below `value`: each op
/// found at its place counts one, each tensor or scalar parameter reached one; a part
/// that fails counts nothing, and its siblings are still counted. Commutative ops of
/// two operands take the better order. No binding is kept (a name used twice is not
/// checked) and constraints are not run: a ranking, not a match.
fn partial(p: &Pattern, graph: &Graph, n: u16, value: Value, level: usize) -> usize {
    if level > p.nodes.len() + 1 {
        return 0;
    }
    let Some(node) = graph.node(value.node) else {
        return 0;
    };
    match p.nodes.get(n as usize) {
        Some(PatNode::Tensor(_)) => 1,
        Some(PatNode::Const(_)) => usize::from(node.is_scalar_constant()),
        Some(PatNode::Op(o)) => {
            if o.op.id() != node.op().id() || value.output != 0 {
                return 0;
            }
            let operands = node.operands();
            let score = |order: &[usize]| -> usize {
                o.operands
                    .iter()
                    .zip(order)
                    .filter_map(|(&pn, &i)| operands.get(i).map(|&v| (pn, v)))
                    .map(|(pn, v)| partial(p, graph, pn, v, level + 1))
                    .sum()
            };
            let straight = score(&[0, 1, 2, 3, 4, 5, 6, 7][..o.operands.len().min(8)]);
            let swapped = if o.op.commutative && o.operands.len() == 2 {
                score(&[1, 0])
            } else {
                0
            };
            1 + straight.max(swapped)
        }
        Some(PatNode::Alt(alts)) => alts
            .iter()
            .map(|&a| partial(p, graph, a, value, level + 1))
            .max()
            .unwrap_or(0),
        _ => 0,
    }
}

/// Where pattern node `n`, matched against graph value `value`, sits: `the root`,
/// `output 1`, `operand 0 of `div``. A node the pattern shares (`let h = ..; h.mul(h
/// .sigmoid())`) has several places: the one named is an operand of an op that some
/// user of `value` has, so that the words name the graph's node (`operand 0 of `mul``
/// for a value a `mul` reads, not `of `sigmoid`` when the graph has none).
fn position(p: &Pattern, graph: &Graph, n: u16, value: Value) -> String {
    let user_ops: Vec<&str> = graph
        .uses(value)
        .filter_map(|(u, _)| graph.node(u).map(|u| u.op_name()))
        .collect();
    let parents = p.nodes.iter().filter_map(|node| match node {
        PatNode::Op(o) => o
            .operands
            .iter()
            .position(|&x| x == n)
            .map(|j| (j, o.op.name)),
        _ => None,
    });
    for (j, op) in parents {
        if user_ops.contains(&op) {
            return format!("operand {j} of `{op}`");
        }
    }
    position_depth(p, n, 0)
}

fn position_depth(p: &Pattern, n: u16, guard: usize) -> String {
    if let Some(k) = p.roots.iter().position(|r| r.node == n) {
        return if p.roots.len() == 1 {
            "the root".into()
        } else {
            format!("output {k}")
        };
    }
    if guard > p.nodes.len() {
        return format!("pattern node {n}");
    }
    for (i, node) in p.nodes.iter().enumerate() {
        let i = i as u16;
        match node {
            PatNode::Op(o) => {
                if let Some(j) = o.operands.iter().position(|&x| x == n) {
                    return format!("operand {j} of `{}`", o.op.name);
                }
            }
            PatNode::Alt(bs) if bs.contains(&n) => return position_depth(p, i, guard + 1),
            PatNode::Repeat(r) if r.body == n => return position_depth(p, i, guard + 1),
            PatNode::Repeat(r) if r.base == n => {
                return format!(
                    "the base of the repetition at {}",
                    position_depth(p, i, guard + 1)
                )
            }
            _ => {}
        }
    }
    format!("pattern node {n}")
}

fn sentence(p: &Pattern, g: &Graph, names: &Names, pos: &str, f: &Failure) -> String {
    let name = names.get(f.value);
    let op = g.node(f.value.node).map_or("<removed>", |n| n.op_name());
    let found = format!("`{op}` {name}");
    let slot_name = |s: u16| {
        p.params
            .get(s as usize)
            .map_or_else(|| format!("%{s}"), |x| x.name.to_string())
    };
    let bound = |b: &Bound| match b {
        Bound::Value(v) => names.get(*v),
        Bound::Int(x) => x.to_string(),
        Bound::Float(x) => format!("{x:?}"),
        Bound::Bool(x) => x.to_string(),
        Bound::Ints(x) => format!("{x:?}"),
        Bound::Str(x) => format!("{x:?}"),
        Bound::DType(x) => x.to_string(),
    };
    match &f.why {
        Why::Anchor => {
            let ops: Vec<String> = p.anchors.iter().map(|o| format!("`{}`", o.name)).collect();
            format!("{pos}: expected {}, found {found}", ops.join(" or "))
        }
        Why::Op { expected } => {
            let ops: Vec<String> = expected.iter().map(|o| format!("`{o}`")).collect();
            format!("{pos}: expected {}, found {found}", ops.join(" or "))
        }
        Why::Output => format!(
            "{pos}: expected output 0 of `{op}`, found output {} ({name})",
            f.value.output
        ),
        Why::Operands { want, more, found } => format!(
            "{pos}: `{op}` {name} has {found} operand(s), expected {want}{}",
            if *more { " or more" } else { "" }
        ),
        Why::Attr {
            name: attr,
            index,
            attr: k,
        } => {
            let have = g
                .node(f.value.node)
                .and_then(|n| n.attr_values().get(*index))
                .map_or_else(|| "<none>".to_string(), show_attr);
            let want = match p.nodes.get(f.pat.unwrap_or(u16::MAX) as usize) {
                Some(PatNode::Op(o)) => attr_pat(p, &o.attrs[*k].pat),
                _ => "?".into(),
            };
            format!("{pos}: {found} has {attr}={have}, expected {attr}={want}")
        }
        Why::NotConst => format!("{pos}: expected a one-element constant, found {found}"),
        Why::ConstValue { want, found: x } => {
            format!("{pos}: expected the constant {want:?}, found {name} = {x:?}")
        }
        Why::NotInt { found: x } => {
            format!("{pos}: expected an integral constant, found {name} = {x:?}")
        }
        Why::Rebound { slot, old, new } => format!(
            "{pos}: `{}` is already bound to {}, found {}",
            slot_name(*slot),
            bound(old),
            bound(new)
        ),
        Why::Shared { old } => format!(
            "{pos}: the shared (`let`) node already matched {}, found {name}",
            names.get(*old)
        ),
        Why::Constraint { index, detail } => {
            let c = &p.constraints[*index];
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(" ({detail})")
            };
            let what = match f.pat.and_then(|n| p.nodes.get(n as usize)) {
                Some(PatNode::Tensor(s)) => format!("binding `{}` to {name}", slot_name(*s)),
                _ => format!("at {found}"),
            };
            format!("{pos}: constraint `{}` failed{detail} {what}", c.text)
        }
        Why::NoRoot { root } => {
            format!("output {root}: no consumer matches (the other outputs matched from {name})")
        }
    }
}

/// The failed check of `f` at `pos`, without the graph's names and values.
fn check(p: &Pattern, pos: &str, f: &Failure) -> String {
    let slot_name = |s: u16| {
        p.params
            .get(s as usize)
            .map_or_else(|| format!("%{s}"), |x| x.name.to_string())
    };
    let ops = |ops: &mut dyn Iterator<Item = &str>| -> String {
        ops.map(|o| format!("`{o}`"))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    match &f.why {
        Why::Anchor => format!(
            "{pos}: expected {}",
            ops(&mut p.anchors.iter().map(|o| o.name))
        ),
        Why::Op { expected } => {
            format!("{pos}: expected {}", ops(&mut expected.iter().copied()))
        }
        Why::Output => format!("{pos}: expected output 0"),
        Why::Operands { want, more, .. } => format!(
            "{pos}: expected {want}{} operand(s)",
            if *more { " or more" } else { "" }
        ),
        Why::Attr { name, attr: k, .. } => {
            let want = match p.nodes.get(f.pat.unwrap_or(u16::MAX) as usize) {
                Some(PatNode::Op(o)) => attr_pat(p, &o.attrs[*k].pat),
                _ => "?".into(),
            };
            format!("{pos}: expected {name}={want}")
        }
        Why::NotConst => format!("{pos}: expected a one-element constant"),
        Why::ConstValue { want, .. } => format!("{pos}: expected the constant {want:?}"),
        Why::NotInt { .. } => format!("{pos}: expected an integral constant"),
        Why::Rebound { slot, .. } => {
            format!(
                "{pos}: `{}` bound to two different values",
                slot_name(*slot)
            )
        }
        Why::Shared { .. } => format!("{pos}: the shared (`let`) node matched twice"),
        Why::Constraint { index, .. } => {
            format!("{pos}: constraint `{}`", p.constraints[*index].text)
        }
        Why::NoRoot { root } => format!("output {root}: no consumer matches"),
    }
}

fn show_attr(v: &AttrValue) -> String {
    match v {
        AttrValue::Null => "None".into(),
        v => v.to_string(),
    }
}

fn attr_pat(p: &Pattern, a: &AttrPat) -> String {
    match a {
        AttrPat::Int(v) => v.to_string(),
        AttrPat::Float(v) => format!("{v:?}"),
        AttrPat::Bool(v) => v.to_string(),
        AttrPat::Ints(v) => format!("{v:?}"),
        AttrPat::Str(v) => format!("{v:?}"),
        AttrPat::DType(v) => v.to_string(),
        AttrPat::Null => "None".into(),
        AttrPat::Param(s) => p
            .params
            .get(*s as usize)
            .map_or_else(|| format!("%{s}"), |x| x.name.to_string()),
        AttrPat::OneOf(alts) => {
            let v: Vec<String> = alts.iter().map(|x| attr_pat(p, x)).collect();
            v.join(" | ")
        }
    }
}
