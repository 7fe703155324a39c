//! Which sites of a model fused, and why the others did not: [`coverage`] runs the
//! pipeline of [`optimize`](super::optimize) on a copy of the graph and reports, for
//! every *site* (a node where a fusion would start: every `softmax`, every
//! normalisation's mean of squares and every `layer_norm`, every GELU's `erf` or `tanh`,
//! every `sigmoid` or `silu`, every rotation's `neg`), the rule that fused it, or the
//! nearest fusing rule and the first check of it that failed, in the printer's names
//! (`t8`).
//!
//! Each site is looked at on the graph as the pipeline has it when its rules run: a
//! softmax as the attention pass sees it (after canonicalisation), a norm as the kernels'
//! pass sees it (after the normalisation spellings), never the raw import. A site is
//! found at the start of the first pass that has a rule holding its op, and followed
//! through the later passes (a softmax the attention rule leaves may still fuse as a
//! kernel's scaled, masked softmax).
//!
//! [`coverage_of`] does the same for rule sets of your own, after canonicalisation:
//! every node of one of their rules' anchor ops is a site.
//!
//! ```
//! use graphrw::{rules, Builder, DType, TensorMeta};
//!
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
//! let gelu = x.mul(0.5)?.mul(x.div(1.4142135623730951)?.erf()?.add(1.0)?)?;
//! g.output(&[gelu.softmax(0)?])?;
//! let graph = g.finish();
//! let report = rules::coverage(&graph)?;
//! assert_eq!(report.sites.len(), 2);
//! assert_eq!(report.fused(), 1); // the GELU's erf
//! // Found pass by pass: the softmax by the attention pass, the erf by the kernels'.
//! let softmax = &report.sites[0];
//! assert_eq!((softmax.op, softmax.pass), ("softmax", "attention"));
//! assert_eq!(softmax.fused_by, None);
//! println!("{report}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;

use super::pipeline::{run_pipeline, RewritePass, Step};
use super::OptimizeError;
use crate::ops::{Op, OpId};
use crate::pattern::{explain_named, Explanation, PatNode, Rule, RuleSet};
use crate::printer::Names;
use crate::rewrite::{Report, Rewriter, Verify};
use crate::{Graph, NodeId, Value};

/// What [`coverage`] found: every site, in the order found (pass by pass, node order
/// within a pass).
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    /// The sites.
    pub sites: Vec<Site>,
}

/// One site: a node where a fusing rule could start, and what became of it.
#[derive(Clone, Debug)]
pub struct Site {
    /// The node as the printer names it in the graph of the pass where it was found
    /// ([`Site::pass`]).
    pub node: String,
    /// Its ONNX node name, when the model gave one.
    pub onnx_name: Option<String>,
    /// Its op.
    pub op: &'static str,
    /// The pass whose graph it was found in (`attention`, `kernels`, ...).
    pub pass: &'static str,
    /// The fusing rule that replaced it.
    pub fused_by: Option<&'static str>,
    /// A rule that does not fuse which replaced it first (it then fused no more).
    pub rewritten_by: Option<&'static str>,
    /// For a site not fused: the nearest fusing rule and why it did not match there
    /// (`None` when no rule holding the site's op could start near it).
    pub nearest: Option<NearMiss>,
}

/// The nearest fusing rule at a site that did not fuse.
#[derive(Clone, Debug)]
pub struct NearMiss {
    /// The rule.
    pub rule: &'static str,
    /// The pass it runs in; the names of [`NearMiss::why`] are those of the graph that
    /// pass sees.
    pub pass: &'static str,
    /// Where its pattern stopped and why (its anchor is `why.anchor_name`).
    pub why: Explanation,
}

impl Site {
    /// True when a fusing rule replaced it.
    pub fn is_fused(&self) -> bool {
        self.fused_by.is_some()
    }

    /// Why it did not fuse, in words that name no graph value (the same for every
    /// site that missed for the same reason); `None` for a fused site.
    pub fn reason(&self) -> Option<String> {
        if self.is_fused() {
            return None;
        }
        Some(match (self.rewritten_by, &self.nearest) {
            (Some(rule), _) => format!("rewritten by `{rule}`, which does not fuse"),
            (None, Some(n)) if n.why.matched => format!(
                "`{}` matches but was not applied (an unsafe match, or a rule that took part of it first)",
                n.rule
            ),
            (None, Some(n)) => format!("`{}`: {}", n.rule, n.why.check),
            (None, None) => "no fusing rule can start near it".into(),
        })
    }
}

impl Coverage {
    /// Sites a fusing rule replaced.
    pub fn fused(&self) -> usize {
        self.sites.iter().filter(|s| s.is_fused()).count()
    }

    /// Sites fused, per rule.
    pub fn fused_by_rule(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for rule in self.sites.iter().filter_map(|s| s.fused_by) {
            *out.entry(rule).or_default() += 1;
        }
        out
    }

    /// Sites not fused, per reason ([`Site::reason`]).
    pub fn not_fused_by_reason(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for reason in self.sites.iter().filter_map(Site::reason) {
            *out.entry(reason).or_default() += 1;
        }
        out
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.op, self.node)?;
        if let Some(name) = &self.onnx_name {
            write!(f, " ({name})")?;
        }
        match (self.fused_by, self.rewritten_by, &self.nearest) {
            (Some(rule), ..) => write!(f, ": fused by `{rule}`"),
            (None, Some(rule), _) => write!(f, ": rewritten by `{rule}`, not fused"),
            (None, None, Some(n)) => write!(
                f,
                ": not fused; nearest `{}` at {} ({} pass): {}",
                n.rule, n.why.anchor_name, n.pass, n.why
            ),
            (None, None, None) => write!(f, ": not fused; no fusing rule can start near it"),
        }
    }
}

impl fmt::Display for Coverage {
    /// One line per site under a line per pass (a site's name is the printer's in the
    /// graph that pass sees), then the summary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut pass = "";
        for site in &self.sites {
            if site.pass != pass {
                pass = site.pass;
                writeln!(
                    f,
                    "sites of the `{pass}` pass (named as in the graph it sees):"
                )?;
            }
            writeln!(f, "  {site}")?;
        }
        let fused = self.fused();
        write!(
            f,
            "{} site(s): {fused} fused, {} not fused",
            self.sites.len(),
            self.sites.len() - fused
        )?;
        for (rule, n) in self.fused_by_rule() {
            write!(f, "\n  fused by `{rule}`: {n}")?;
        }
        for (reason, n) in self.not_fused_by_reason() {
            write!(f, "\n  not fused, {reason}: {n}")?;
        }
        Ok(())
    }
}

/// Which nodes are sites: an op, and a test of the node.
type SiteOp = (OpId, fn(&Graph, NodeId) -> bool);

/// The sites of the built-in fusions (see the module docs).
const BUILTIN_SITES: &[SiteOp] = &[
    (OpId::of(Op::Softmax), any),
    (OpId::of(Op::Mean), mean_of_square),
    (OpId::of(Op::LayerNorm), any),
    (OpId::of(Op::Erf), any),
    (OpId::of(Op::Tanh), any),
    (OpId::of(Op::Sigmoid), any),
    (OpId::of(Op::Silu), any),
    (OpId::of(Op::Neg), any),
];

fn any(_: &Graph, _: NodeId) -> bool {
    true
}

/// A `mean` of `a * a`: an RMS norm's mean square or a layer norm's variance (the
/// layer norm's other mean, of `x`, is not a second site).
fn mean_of_square(graph: &Graph, id: NodeId) -> bool {
    let operand = graph
        .node(id)
        .and_then(|n| n.operands().first().copied())
        .and_then(|v| graph.node(v.node));
    operand.is_some_and(|m| {
        m.op().is(Op::Mul) && m.operands().len() == 2 && m.operands()[0] == m.operands()[1]
    })
}

/// The report of [`optimize`](super::optimize)'s fusions on a copy of `graph` (see the
/// module docs).
pub fn coverage(graph: &Graph) -> Result<Coverage, OptimizeError> {
    let mut graph = graph.clone();
    let mut tracker = Tracker::new(BUILTIN_SITES.to_vec(), super::fusions());
    run_pipeline(
        &mut graph,
        Verify::default(),
        &mut |_| {},
        &mut |g, step| {
            match step {
                Step::Before(pass) => tracker.before(g, pass),
                Step::After(report) => tracker.after(g, report),
            }
            ControlFlow::Continue(())
        },
    )?;
    Ok(tracker.finish())
}

/// The coverage of rule sets of your own on a copy of `graph`, after the built-in
/// canonicalisation: every node of an op one of their rules can start at is a site;
/// the sets run in one [`Rewriter`] pass, named `rules`.
pub fn coverage_of(graph: &Graph, sets: &[&'static RuleSet]) -> Result<Coverage, OptimizeError> {
    let mut graph = graph.clone();
    Rewriter::new(&[&super::CANONICAL]).run(&mut graph)?;
    let rules: Vec<&'static Rule> = sets.iter().flat_map(|s| s.rules.iter().copied()).collect();
    let mut ops: Vec<SiteOp> = Vec::new();
    for op in rules.iter().flat_map(|r| r.pattern.anchors) {
        if !ops.iter().any(|(o, _)| *o == op.id()) {
            ops.push((op.id(), any));
        }
    }
    let pass = RewritePass {
        name: "rules",
        sets: sets.to_vec(),
    };
    let mut tracker = Tracker::new(ops, sets.to_vec());
    tracker.before(&graph, &pass);
    let report = Rewriter::new(sets).run(&mut graph)?;
    tracker.after(&graph, &report);
    Ok(tracker.finish())
}

/// A site being followed through the passes.
struct Open {
    id: NodeId,
    /// Its op.
    op: OpId,
    /// The order it was found in.
    seq: usize,
    site: Site,
}

/// Follows the sites through the passes: finds them before a pass, explains the
/// nearest candidate rule there, and closes them as the pass's rewrites replace them.
struct Tracker {
    site_ops: Vec<SiteOp>,
    /// Every fusing rule.
    fusing: Vec<&'static Rule>,
    open: Vec<Open>,
    closed: Vec<(usize, Site)>,
    found: usize,
}

impl Tracker {
    fn new(site_ops: Vec<SiteOp>, fusing_sets: Vec<&'static RuleSet>) -> Tracker {
        Tracker {
            site_ops,
            fusing: fusing_sets
                .iter()
                .flat_map(|s| s.rules.iter().copied())
                .collect(),
            open: Vec::new(),
            closed: Vec::new(),
            found: 0,
        }
    }

    fn is_fusing(&self, rule: &str) -> bool {
        self.fusing.iter().any(|r| r.name == rule)
    }

    /// Before `pass`: new sites of the ops its fusing rules hold, and for every open
    /// site such a rule holds, its nearest miss on this graph.
    fn before(&mut self, graph: &Graph, pass: &RewritePass) {
        let candidates: Vec<&'static Rule> = pass
            .sets
            .iter()
            .flat_map(|s| s.rules.iter().copied())
            .filter(|r| self.fusing.iter().any(|f| std::ptr::eq(*f, *r)))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let names = Names::new(graph);
        for &(op, is_site) in &self.site_ops {
            if !candidates.iter().any(|r| holds_op(r, op)) {
                continue;
            }
            for id in graph.nodes_of(op).collect::<Vec<_>>() {
                if self.open.iter().any(|o| o.id == id) || !is_site(graph, id) {
                    continue;
                }
                let node = graph.node(id);
                self.found += 1;
                self.open.push(Open {
                    id,
                    op,
                    seq: self.found,
                    site: Site {
                        node: names.get(Value::from(id)),
                        onnx_name: node.and_then(|n| n.name()).map(str::to_string),
                        op: op.name(),
                        pass: pass.name,
                        fused_by: None,
                        rewritten_by: None,
                        nearest: None,
                    },
                });
            }
        }
        for open in &mut self.open {
            let rules = candidates.iter().filter(|r| holds_op(r, open.op));
            for rule in rules {
                let Some(why) = nearest(rule, graph, open.id, &names) else {
                    continue;
                };
                let better = open
                    .site
                    .nearest
                    .as_ref()
                    .is_none_or(|n| rank(&why) >= rank(&n.why));
                if better {
                    open.site.nearest = Some(NearMiss {
                        rule: rule.name,
                        pass: pass.name,
                        why,
                    });
                }
            }
        }
    }

    /// After `pass`: closes the sites its rewrites replaced (the first rewrite that
    /// replaced a site's node is the one that took it), and those dead-code removal took.
    fn after(&mut self, graph: &Graph, report: &Report) {
        for firing in &report.firings {
            let fusing = self.is_fusing(firing.rule);
            let mut k = 0;
            while k < self.open.len() {
                if firing.replaced.binary_search(&self.open[k].id).is_ok() {
                    let mut open = self.open.remove(k);
                    if fusing {
                        open.site.fused_by = Some(firing.rule);
                        open.site.nearest = None;
                    } else {
                        open.site.rewritten_by = Some(firing.rule);
                    }
                    self.closed.push((open.seq, open.site));
                } else {
                    k += 1;
                }
            }
        }
        // A site no rewrite took whose node is gone (or is another node now).
        let (kept, gone): (Vec<Open>, Vec<Open>) = std::mem::take(&mut self.open)
            .into_iter()
            .partition(|o| graph.node(o.id).is_some_and(|n| n.op().id() == o.op));
        self.open = kept;
        self.closed
            .extend(gone.into_iter().map(|o| (o.seq, o.site)));
    }

    /// Every site, in the order found.
    fn finish(mut self) -> Coverage {
        self.closed
            .extend(self.open.drain(..).map(|o| (o.seq, o.site)));
        self.closed.sort_by_key(|(seq, _)| *seq);
        Coverage {
            sites: self.closed.into_iter().map(|(_, s)| s).collect(),
        }
    }
}

/// True when `rule`'s pattern has a node of op `op`.
fn holds_op(rule: &Rule, op: OpId) -> bool {
    rule.pattern
        .nodes
        .iter()
        .any(|n| matches!(n, PatNode::Op(o) if o.op.id() == op))
}

/// How near a miss is: the pattern's parts the graph has, then the nodes matched.
fn rank(e: &Explanation) -> (usize, usize) {
    (e.progress, e.depth)
}

/// The most nodes looked at below a site for a rule's anchors.
const REACH_MAX: usize = 256;

/// `rule`'s explanation at the anchor nearest `site`: the anchors are the site and the
/// nodes below it (its users, theirs, ... as deep as the pattern has ops), and the one
/// whose partial match goes furthest ([`Explanation::progress`], then depth) is taken;
/// an anchor where the rule matches counts only when its match holds the site.
fn nearest(rule: &'static Rule, graph: &Graph, site: NodeId, names: &Names) -> Option<Explanation> {
    let p = rule.pattern;
    let mut reach = vec![site];
    let mut level = vec![site];
    for _ in 0..p.op_count {
        let mut next = Vec::new();
        for &n in &level {
            let outs = graph.node(n).map_or(0, |n| n.outputs().len());
            for o in 0..outs as u32 {
                for (user, _) in graph.uses(Value::new(n, o)) {
                    if reach.len() < REACH_MAX && !reach.contains(&user) {
                        reach.push(user);
                        next.push(user);
                    }
                }
            }
        }
        level = next;
    }
    reach
        .into_iter()
        .filter(|&a| {
            let op = graph.node(a).map(|n| n.op_name());
            p.anchors.iter().any(|o| Some(o.name) == op)
        })
        .map(|a| explain_named(p, graph, a, names))
        .filter(|e| {
            !e.matched
                || p.match_at(graph, e.anchor)
                    .is_some_and(|m| m.nodes.contains(&site))
        })
        .max_by_key(|e| (rank(e), std::cmp::Reverse(e.anchor)))
}
