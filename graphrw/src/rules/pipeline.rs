//! The whole built-in optimisation pipeline, in the order the passes depend on each
//! other: attention fusion, causal masks turned into `is_causal`, the spellings of
//! normalisations brought to one form ([`super::norms`]), then the generated fused kernels
//! on the chains that remain, then RMS norms without a weight.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::causal::{mark_causal, CausalReport};
use crate::ops::Op;
use crate::pattern::dispatch::Dispatch;
use crate::rewrite::{Report, RewriteError, Rewriter, Verify};
use crate::{Graph, GraphError};

/// Why [`optimize`] failed. The graph may be partly optimised (every finished pass left
/// it valid). A replacement that fails is not an error: it is rolled back and listed in
/// [`Optimized::skipped`].
#[derive(Debug, Error)]
pub enum OptimizeError {
    /// A rewrite pass failed.
    #[error(transparent)]
    Rewrite(#[from] RewriteError),
    /// The causal-mask analysis failed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// What [`optimize`] did.
#[derive(Debug, Clone)]
pub struct Optimized {
    /// Node count before.
    pub nodes_before: usize,
    /// Node count after.
    pub nodes_after: usize,
    /// The attention-fusion passes (canonicalise, then fuse).
    pub attention: Vec<Report>,
    /// Attention nodes whose mask became `is_causal`.
    pub causal: CausalReport,
    /// The normalisation-spelling pass ([`super::NORM_SPELLINGS`]).
    pub norms: Report,
    /// The generated-kernel pass ([`crate::generated::fuse_kernels`]).
    pub kernels: Report,
    /// The pass fusing RMS norms without a weight ([`super::UNWEIGHTED_RMS_NORM`]).
    pub unweighted: Report,
    /// Nodes per op after the pipeline, for the ops it creates
    /// (`scaled_dot_product_attention` and every `fused.*` op).
    pub fused_nodes: BTreeMap<&'static str, usize>,
    /// Each pass as it finished, in order ([`optimize_observed`] saw the same).
    pub passes: Vec<PassDone>,
}

/// One pass of the pipeline, finished: what [`optimize_observed`] reports as it goes
/// (a large model's optimisation takes seconds) and [`Optimized::passes`] keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct PassDone {
    /// The pass: `attention`, `causal masks`, `norm spellings`, `kernels` or
    /// `unweighted rms norms`.
    pub pass: &'static str,
    /// How long it took.
    pub took: Duration,
    /// Rewrites it made (for `causal masks`, masks made causal).
    pub rewrites: usize,
    /// The graph's node count after it.
    pub nodes_after: usize,
}

impl fmt::Display for PassDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pass {}: {} rewrite(s) in {:.1} ms, {} nodes",
            self.pass,
            self.rewrites,
            self.took.as_secs_f64() * 1e3,
            self.nodes_after
        )
    }
}

/// Runs the built-in pipeline on `graph`: [`super::fuse_attention`], then
/// [`mark_causal`], then [`super::NORM_SPELLINGS`], then
/// [`crate::generated::fuse_kernels`], then [`super::UNWEIGHTED_RMS_NORM`].
///
/// ```
/// use graphrw::{rules, Builder, DType, TensorMeta};
///
/// let g = Builder::new();
/// let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
/// // tanh-form GELU, as GPT-2 writes it.
/// let inner = x.pow(3.0)?.mul(0.044715)?.add(x)?.mul(0.7978845608028654)?.tanh()?;
/// let y = x.mul(0.5)?.mul(inner.add(1.0)?)?;
/// g.output(&[y])?;
/// let mut graph = g.finish();
/// let done = rules::optimize(&mut graph)?;
/// assert_eq!(done.fused_nodes.get("fused.gelu_tanh"), Some(&1));
/// assert!(done.nodes_after < done.nodes_before);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn optimize(graph: &mut Graph) -> Result<Optimized, OptimizeError> {
    optimize_with(graph, Verify::default())
}

/// [`optimize`], with each rewrite pass verifying as `verify` says ([`Verify`]; the
/// default is [`Verify::Local`] in debug builds, [`Verify::Off`] in release builds).
pub fn optimize_with(graph: &mut Graph, verify: Verify) -> Result<Optimized, OptimizeError> {
    optimize_observed(graph, verify, &mut |_| {})
}

/// [`optimize_with`], calling `observe` as each pass finishes (for progress: the
/// Python package logs each to its `graphrw` logger, `graphrw optimize` prints each on
/// a terminal).
///
/// ```
/// use graphrw::{rewrite::Verify, rules, Builder, DType, TensorMeta};
///
/// let g = Builder::new();
/// let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
/// let y = x.mul(x.sigmoid()?)?;
/// g.output(&[y])?;
/// let mut graph = g.finish();
/// let mut seen = Vec::new();
/// let done = rules::optimize_observed(&mut graph, Verify::default(), &mut |p| {
///     seen.push(p.clone())
/// })?;
/// let names: Vec<&str> = seen.iter().map(|p| p.pass).collect();
/// assert_eq!(names, ["attention", "causal masks", "norm spellings", "kernels", "unweighted rms norms"]);
/// assert_eq!(seen, done.passes);
/// assert_eq!(seen.last().map(|p| p.nodes_after), Some(done.nodes_after));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn optimize_observed(
    graph: &mut Graph,
    verify: Verify,
    observe: &mut dyn FnMut(&PassDone),
) -> Result<Optimized, OptimizeError> {
    run_pipeline(
        graph,
        verify,
        observe,
        &mut |_, _| ControlFlow::Continue(()),
    )
}

/// One rewrite pass of the pipeline ([`rewrite_passes`]): its name and its rule sets.
#[derive(Clone, Debug)]
pub struct RewritePass {
    /// `canonical`, `attention`, `norm spellings`, `kernels` or `unweighted rms norms`.
    pub name: &'static str,
    /// Its rule sets, as one [`Rewriter`] runs them.
    pub sets: Vec<&'static crate::RuleSet>,
}

impl RewritePass {
    /// True when one of the pass's sets holds the rule named `rule`.
    pub fn has_rule(&self, rule: &str) -> bool {
        self.sets.iter().any(|s| s.rule(rule).is_some())
    }
}

/// The rewrite passes of [`optimize`], in order: `canonical` and `attention` (the two
/// passes of [`super::fuse_attention`]), then, after the causal-mask analysis,
/// `norm spellings`, `kernels` and `unweighted rms norms`. Every rule name the
/// pipeline's reports print is a rule of one of them.
pub fn rewrite_passes() -> Vec<RewritePass> {
    let [canonical, attention] = super::ATTENTION_PASSES;
    vec![
        RewritePass {
            name: "canonical",
            sets: canonical.to_vec(),
        },
        RewritePass {
            name: "attention",
            sets: attention.to_vec(),
        },
        RewritePass {
            name: "norm spellings",
            sets: NORM_PASS.to_vec(),
        },
        RewritePass {
            name: "kernels",
            sets: crate::generated::builtin_rules(),
        },
        RewritePass {
            name: "unweighted rms norms",
            sets: UNWEIGHTED_PASS.to_vec(),
        },
    ]
}

/// The rule sets whose rules fuse (make `scaled_dot_product_attention` or a `fused.*`
/// node): attention, every built-in kernel's, and the unweighted RMS norm's. Give them
/// to [`Rewriter::with_later`] when your rules run before [`optimize`], and the report
/// says which of your rewrites took a region one of them would have fused.
pub fn fusions() -> Vec<&'static crate::RuleSet> {
    let mut sets = vec![&super::ATTENTION];
    sets.extend(crate::generated::builtin_rules());
    sets.extend(UNWEIGHTED_PASS);
    sets
}

/// Runs [`optimize`]'s passes on `graph` until the first rewrite pass that `stop`
/// accepts, and returns that pass without running it (`graph` is then as that pass
/// would see it); runs the whole pipeline and returns `None` when `stop` accepts none.
///
/// ```
/// use graphrw::{rules, Builder, DType, TensorMeta};
///
/// let g = Builder::new();
/// let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
/// g.output(&[x.softmax(-1)?])?;
/// let mut graph = g.finish();
/// // The graph as the attention rule sees it: after canonicalisation.
/// let pass = rules::run_until(&mut graph, |p| p.has_rule("attention"))?;
/// assert_eq!(pass.map(|p| p.name), Some("attention"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_until(
    graph: &mut Graph,
    stop: impl Fn(&RewritePass) -> bool,
) -> Result<Option<RewritePass>, OptimizeError> {
    let mut found = None;
    run_pipeline(
        graph,
        Verify::default(),
        &mut |_| {},
        &mut |_, step| match step {
            Step::Before(pass) if stop(pass) => {
                found = Some(pass.clone());
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        },
    )?;
    Ok(found)
}

/// A point of the pipeline a hook of [`run_pipeline`] sees.
pub(crate) enum Step<'a> {
    /// The pass is about to run on the graph.
    Before(&'a RewritePass),
    /// The pass has run, with this report.
    After(&'a Report),
}

/// [`optimize_observed`] with `hook` called on the graph before and after each rewrite
/// pass; when it breaks, the pipeline stops there, and the passes not run have empty
/// reports in the result.
pub(crate) fn run_pipeline(
    graph: &mut Graph,
    verify: Verify,
    observe: &mut dyn FnMut(&PassDone),
    hook: &mut dyn FnMut(&Graph, Step<'_>) -> ControlFlow<()>,
) -> Result<Optimized, OptimizeError> {
    let nodes_before = graph.node_count();
    let mut passes = Vec::new();
    let mut done = |graph: &Graph, pass: &'static str, started: Instant, rewrites: usize| {
        let p = PassDone {
            pass,
            took: started.elapsed(),
            rewrites,
            nodes_after: graph.node_count(),
        };
        observe(&p);
        passes.push(p);
    };
    let all = rewrite_passes();
    let mut reports = Vec::with_capacity(all.len());
    let mut causal = None;
    let mut started = Instant::now();
    for pass in &all {
        if pass.name == "norm spellings" {
            let t = Instant::now();
            let c = mark_causal(graph)?;
            done(graph, "causal masks", t, c.converted);
            causal = Some(c);
        }
        if pass.name != "attention" {
            started = Instant::now();
        }
        if hook(graph, Step::Before(pass)).is_break() {
            break;
        }
        let report = Rewriter::new(&pass.sets).with_verify(verify).run(graph)?;
        let stop = hook(graph, Step::After(&report)).is_break();
        match pass.name {
            "canonical" => {}
            "attention" => {
                let total = reports.iter().chain([&report]).map(Report::total).sum();
                done(graph, "attention", started, total);
            }
            name => done(graph, name, started, report.total()),
        }
        reports.push(report);
        if stop {
            break;
        }
    }
    let mut reports = reports.into_iter();
    let mut next = || reports.next().unwrap_or_default();
    let (attention0, attention1, norms, kernels, unweighted) =
        (next(), next(), next(), next(), next());
    let mut fused_nodes = BTreeMap::new();
    for op in graph
        .node_ids()
        .filter_map(|id| graph.node(id).map(|n| n.op()))
    {
        if op.is(Op::ScaledDotProductAttention) || op.name.starts_with("fused.") {
            *fused_nodes.entry(op.name).or_insert(0) += 1;
        }
    }
    Ok(Optimized {
        nodes_before,
        nodes_after: graph.node_count(),
        attention: vec![attention0, attention1],
        causal: causal.unwrap_or_default(),
        norms,
        kernels,
        unweighted,
        fused_nodes,
        passes,
    })
}

/// The rule sets of the normalisation-spelling pass.
const NORM_PASS: &[&crate::RuleSet] = &[&super::NORM_SPELLINGS];
/// The rule sets of the pass after the kernels' (RMS norms without a weight).
const UNWEIGHTED_PASS: &[&crate::RuleSet] = &[&super::UNWEIGHTED_RMS_NORM];

/// Builds now what [`optimize`]'s passes otherwise build at their first use in this
/// process: the merged decision trees of each pass's rules (`Dispatch::for_sets`,
/// cached for the life of the process), reading the rules' static tables in. Never
/// needed for correctness. `graphrw optimize` runs it on a second thread while the
/// model loads, so the passes find their trees built; a pass that gets to a tree first
/// builds it itself, and a tree being built is waited for, never built twice.
///
/// ```
/// graphrw::rules::prepare();
/// ```
pub fn prepare() {
    let kernels = crate::generated::builtin_rules();
    let dispatches: Vec<_> = super::ATTENTION_PASSES
        .into_iter()
        .chain([NORM_PASS, &kernels[..], UNWEIGHTED_PASS])
        .map(Dispatch::for_sets)
        .collect();
    for dispatch in dispatches {
        dispatch.build_trees();
    }
}

impl Optimized {
    /// Every rewrite pass's report, in the order the passes ran.
    pub fn reports(&self) -> impl Iterator<Item = &Report> + '_ {
        self.attention
            .iter()
            .chain([&self.norms, &self.kernels, &self.unweighted])
    }

    /// Nodes the verifier checked over every rewrite pass ([`Report::verified`]).
    pub fn verified(&self) -> usize {
        self.reports().map(|r| r.verified).sum()
    }

    /// Every match whose replacement failed and was rolled back, over all passes.
    pub fn skipped(&self) -> impl Iterator<Item = &crate::rewrite::Skip> + '_ {
        self.reports().flat_map(|r| r.skipped.iter())
    }
}

impl fmt::Display for Optimized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nodes: {} -> {}", self.nodes_before, self.nodes_after)?;
        for (op, n) in &self.fused_nodes {
            writeln!(f, "  {op}: {n}")?;
        }
        write!(
            f,
            "  causal masks: {} attention node(s) made causal ({} kept a padding mask), {} left with their mask",
            self.causal.converted, self.causal.with_remainder, self.causal.unchanged
        )?;
        for skip in self.skipped() {
            write!(f, "\n  skipped (replacement failed, rolled back): {skip}")?;
        }
        Ok(())
    }
}
