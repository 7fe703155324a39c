//! Rules that check themselves: a differential test of a rule, from its pattern.
//!
//! For each rule, [`check_rule`] builds small random graphs its pattern matches (from
//! the compiled pattern tree: a graph input per tensor parameter, drawn values for
//! scalar parameters and free attributes, every alternative and optional part taken
//! and left out, repeated chains one to three times; see `instantiate`), rewrites each
//! with that rule alone, runs both graphs with the reference executor on the same
//! random inputs, and compares them with the NaN-safe helper
//! ([`graphrw_kernels::testing::compare`]). Constraints the generator does not meet by
//! construction (`check(..)` closures, comparisons of scalars) are met by rejection: a
//! graph the pattern refuses is drawn again, at most [`Config::tries`] times per graph.
//! A rule whose pattern no generator can satisfy states its own generator
//! (`#[verify(generator = path)]`, a [`GenFn`](crate::pattern::GenFn)).
//!
//! `rule_set!` emits, for every rule not marked `#[verify(skip = "why")]`, a test
//! `verify_<rule>` under the crate's `cfg(test)` that calls [`test_rule`]: a wrong
//! replacement fails `cargo test` with the rule's `file:line` and a counterexample
//! (shapes, dtypes, both graphs and the first differing element). See the guide's
//! chapter [Rules that check themselves](crate::guide::_09_rules_that_check_themselves).
//!
//! A pass that is not a rule (one that evaluates, say) is checked the same way from a
//! generator of its own ([`check_pass`]).
//!
//! ```
//! use graphrw::rule_set;
//! use graphrw::selfcheck::{check_rule, Config, Failure};
//!
//! rule_set! {
//!     static SCALES;
//!
//!     rule div_to_mul(x: Tensor, s: f64) -> Tensor where s != 0.0 {
//!         x.div(s)
//!     } => {
//!         x.mul(1.0 / s)?
//!     }
//! }
//!
//! rule_set! {
//!     static WRONG;
//!
//!     // Wrong: the scale is not inverted.
//!     rule div_to_mul_wrong(x: Tensor, s: f64) -> Tensor where s != 0.0, s != 1.0, s != -1.0 {
//!         x.div(s)
//!     } => {
//!         x.mul(s)?
//!     }
//! }
//!
//! let cfg = Config::default();
//! let report = check_rule(SCALES.rule("div_to_mul").unwrap(), &cfg).unwrap();
//! assert!(report.graphs >= cfg.graphs && report.max_error < 1e-4, "{report}");
//! let caught = check_rule(WRONG.rule("div_to_mul_wrong").unwrap(), &cfg).unwrap_err();
//! assert!(matches!(caught, Failure::Mismatch { .. }), "{caught}");
//! ```

mod compare;
mod instantiate;
mod pass;
mod rng;
mod sample;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};

pub use compare::Counterexample;
pub use pass::{check_pass, PassFn};
pub use rng::Rng;

use crate::rewrite::Rewriter;
use crate::{Graph, Rule, RuleSet};
use compare::Outcome;
use instantiate::Coverage;

/// How many graphs, how many tries, which seed.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Graphs to compare per rule (at least; more until every alternative was taken).
    /// Default 8, or `GRAPHRW_VERIFY_GRAPHS` with [`Config::from_env`].
    pub graphs: u32,
    /// Graphs drawn per graph compared before giving up ("could not generate").
    pub tries: u32,
    /// The first seed (`GRAPHRW_VERIFY_SEED`); graph `i` uses a seed derived from it.
    pub seed: u64,
    /// Graphs in f16 and bf16 too (`GRAPHRW_VERIFY_HALF=1`; default off). For
    /// exploring: the reference rounds at every op of a decomposed graph where a fused
    /// kernel rounds once, so normalisations may disagree past any useful bound (the
    /// decomposition's variance underflows to an infinite `rsqrt` where the kernel's
    /// does not), and the half types' tolerance is loose (0.1).
    pub half: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            graphs: 8,
            tries: 100,
            seed: 0x0067_7261_7068_7277,
            half: false,
        }
    }
}

impl Config {
    /// The defaults, with `GRAPHRW_VERIFY_GRAPHS`, `GRAPHRW_VERIFY_SEED` and
    /// `GRAPHRW_VERIFY_HALF` from the environment when set (for a longer run than CI's).
    pub fn from_env() -> Config {
        let mut cfg = Config::default();
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = var("GRAPHRW_VERIFY_GRAPHS") {
            cfg.graphs = n.clamp(1, u64::from(u32::MAX)) as u32;
        }
        if let Some(s) = var("GRAPHRW_VERIFY_SEED") {
            cfg.seed = s;
        }
        cfg.half = var("GRAPHRW_VERIFY_HALF").is_some_and(|h| h != 0);
        cfg
    }
}

/// What verifying one rule found.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleReport {
    /// The rule.
    pub rule: &'static str,
    /// Where its pattern is written (`file:line`).
    pub location: &'static str,
    /// Graphs compared (each one the rule rewrote).
    pub graphs: u32,
    /// Graphs drawn and refused by the pattern (or by an op) on the way.
    pub rejected: u32,
    /// Graphs the pattern matched but whose replacement failed (the rewriter rolls
    /// such a match back and leaves the graph as it was: safe, but the rule's
    /// constraints admit more than its replacement builds). The first reason is in
    /// `rolled_back_example`.
    pub rolled_back: u32,
    /// Why the first rolled-back replacement failed.
    pub rolled_back_example: Option<String>,
    /// The largest error, `|after - before| / (1 + |before|)`.
    pub max_error: f64,
    /// Branches of the pattern's choices (each alternative, each optional part present
    /// and absent, each repetition count from 1 to 3) taken by compared graphs: all of
    /// them, or the check fails.
    pub choices: u32,
    /// `Some(why)` when the rule is marked `#[verify(skip = "why")]` (nothing was run).
    pub skipped: Option<&'static str>,
}

impl fmt::Display for RuleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.skipped {
            Some(why) => write!(
                f,
                "rule `{}` ({}): skipped: {why}",
                self.rule, self.location
            ),
            None => {
                write!(
                    f,
                    "rule `{}` ({}): {} graphs rewritten and compared ({} drawn and refused), largest error {:.3e}",
                    self.rule, self.location, self.graphs, self.rejected, self.max_error
                )?;
                if self.choices > 0 {
                    write!(f, "; all {} branches of its choices taken", self.choices)?;
                }
                if let Some(why) = &self.rolled_back_example {
                    write!(
                        f,
                        "; {} matches whose replacement failed and was rolled back, the first: {why}",
                        self.rolled_back
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Why a rule failed its check.
#[derive(Clone, Debug)]
pub enum Failure {
    /// The rewrite changed the numbers.
    Mismatch {
        /// The rule.
        rule: &'static str,
        /// Its `file:line`.
        location: &'static str,
        /// The graph, its inputs and the first differing element.
        counterexample: Box<Counterexample>,
    },
    /// No graph the pattern matches was found in the tries allowed (the generator cannot
    /// meet the rule's constraints: state a generator, `#[verify(generator = path)]`).
    CouldNotGenerate {
        /// The rule.
        rule: &'static str,
        /// Its `file:line`.
        location: &'static str,
        /// Graphs compared before the tries ran out.
        graphs: u32,
        /// Graphs drawn.
        tries: u32,
        /// Why the last one was refused.
        last_reason: String,
    },
    /// The pattern matched a generated graph but the rewrite did not happen, failed, or
    /// the rewritten graph does not run.
    Rewrite {
        /// The rule.
        rule: &'static str,
        /// Its `file:line`.
        location: &'static str,
        /// What happened.
        message: String,
        /// The graph.
        graph: String,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Mismatch {
                rule,
                location,
                counterexample,
            } => write!(
                f,
                "rule `{rule}` ({location}) is wrong: {counterexample}"
            ),
            Failure::CouldNotGenerate {
                rule,
                location,
                graphs,
                tries,
                last_reason,
            } => write!(
                f,
                "rule `{rule}` ({location}): could not generate a graph it matches ({graphs} compared, {tries} drawn); the last was refused: {last_reason}. Give the rule a generator with `#[verify(generator = path)]`, or `#[verify(skip = \"why\")]`"
            ),
            Failure::Rewrite {
                rule,
                location,
                message,
                graph,
            } => write!(f, "rule `{rule}` ({location}): {message}; graph:\n{graph}"),
        }
    }
}

impl std::error::Error for Failure {}

/// A set holding `rule` alone (one per rule, made once: the rewriter takes sets).
fn alone(rule: &'static Rule) -> &'static RuleSet {
    static SETS: OnceLock<Mutex<HashMap<usize, &'static RuleSet>>> = OnceLock::new();
    let key = rule as *const Rule as usize;
    let mut sets = SETS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    sets.entry(key).or_insert_with(|| {
        let rules: &'static [&'static Rule] = Box::leak(Box::new([rule]));
        Box::leak(Box::new(RuleSet {
            name: rule.name,
            rules,
        }))
    })
}

/// A seed for graph `i` of a rule.
fn seed_of(cfg: &Config, rule: &Rule, i: u32) -> u64 {
    let mut h = cfg.seed ^ (u64::from(i) << 32);
    for b in rule.name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Verifies `rule` (see the module docs): `Ok` with the report when every graph kept
/// its numbers (or the rule is skipped), else the first failure. Never panics on a
/// generator failure: that is [`Failure::CouldNotGenerate`].
pub fn check_rule(rule: &'static Rule, cfg: &Config) -> Result<RuleReport, Failure> {
    let pattern = rule.pattern;
    let mut report = RuleReport {
        rule: rule.name,
        location: pattern.location,
        graphs: 0,
        rejected: 0,
        rolled_back: 0,
        rolled_back_example: None,
        max_error: 0.0,
        choices: 0,
        skipped: rule.verify.skip,
    };
    if report.skipped.is_some() {
        return Ok(report);
    }
    let want = rule.verify.graphs.unwrap_or(cfg.graphs).max(1);
    let budget = want.saturating_mul(cfg.tries.max(1));
    let set = alone(rule);
    let mut coverage = Coverage::default();
    let mut last_reason = String::from("nothing drawn");
    let mut drawn = 0u32;
    let enough = |report: &RuleReport, coverage: &Coverage| {
        report.graphs >= want
            && (rule.verify.generator.is_some() || coverage.missing(pattern).is_empty())
    };
    while !enough(&report, &coverage) {
        if drawn >= budget {
            if report.graphs >= want {
                // Every graph asked for was compared; some choice was never taken.
                last_reason = format!(
                    "{} never taken; the last refusal: {last_reason}",
                    describe_missing(pattern, &coverage.missing(pattern))
                );
            }
            return Err(Failure::CouldNotGenerate {
                rule: rule.name,
                location: pattern.location,
                graphs: report.graphs,
                tries: drawn,
                last_reason,
            });
        }
        let seed = seed_of(cfg, rule, drawn);
        drawn += 1;
        let (graph, trail) = match draw(rule, seed, &coverage, cfg.half) {
            Ok(drawn) => drawn,
            Err(why) => {
                report.rejected += 1;
                last_reason = why;
                continue;
            }
        };
        let compared = match differential(rule, set, &graph, seed) {
            Err(failure @ Failure::Mismatch { .. }) => {
                return Err(smaller(rule, set, cfg, &coverage, failure))
            }
            other => other?,
        };
        match compared {
            Compared::Same(err) => {
                report.graphs += 1;
                report.max_error = report.max_error.max(err);
                coverage.commit(&trail);
            }
            Compared::RolledBack(why) => {
                report.rolled_back += 1;
                report.rolled_back_example.get_or_insert(why.clone());
                last_reason = format!("the replacement failed and was rolled back: {why}");
            }
            Compared::DoesNotRun(why) => {
                report.rejected += 1;
                last_reason = format!("the generated graph does not run: {why}");
            }
        }
    }
    report.choices = pattern
        .nodes
        .iter()
        .map(|n| instantiate::branches(n) as u32)
        .sum();
    Ok(report)
}

/// The choices no compared graph took, in the pattern's own words.
fn describe_missing(pattern: &crate::Pattern, missing: &[(u16, usize)]) -> String {
    use crate::pattern::PatNode;
    let parts: Vec<String> = missing
        .iter()
        .map(|&(node, branch)| match &pattern.nodes[usize::from(node)] {
            PatNode::Alt(list) => {
                let mut text = String::new();
                let _ = pattern.write_node(&mut text, list[branch]);
                format!("the alternative `{text}`")
            }
            PatNode::Repeat(r) => {
                format!(
                    "{} repetitions of a chain",
                    usize::from(r.min.max(1)) + branch
                )
            }
            _ => format!("choice {branch} of pattern node {node}"),
        })
        .collect();
    parts.join(", ")
}

/// A graph for `seed` that the rule's pattern matches at its first output, and the
/// choices taken, or why there is none.
fn draw(
    rule: &'static Rule,
    seed: u64,
    coverage: &Coverage,
    half: bool,
) -> Result<(Graph, instantiate::Trail), String> {
    let pattern = rule.pattern;
    let (graph, trail) = match rule.verify.generator {
        Some(generate) => match generate(seed) {
            Ok(Some(g)) => (g, Vec::new()),
            Ok(None) => return Err("the rule's generator gave no graph".into()),
            Err(e) => return Err(format!("the rule's generator failed: {e}")),
        },
        None => {
            let i = instantiate::instantiate(pattern, &mut Rng::new(seed), coverage, half)?;
            (i.graph, i.trail)
        }
    };
    let root = graph
        .outputs()
        .first()
        .map(|v| v.node)
        .ok_or("a generated graph without outputs")?;
    if pattern.match_at(&graph, root).is_none() {
        return Err(pattern.explain(&graph, root).to_string());
    }
    Ok((graph, trail))
}

/// Graphs drawn after a mismatch in search of a smaller counterexample.
const SHRINK_TRIES: u32 = 64;

/// How big a mismatch's counterexample is: graphs with inputs first (one of only
/// constants shows less), then the fewest input elements.
fn size(failure: &Failure) -> (bool, usize) {
    match failure {
        Failure::Mismatch { counterexample, .. } => (
            counterexample.inputs.is_empty(),
            counterexample
                .inputs
                .iter()
                .map(|(_, _, s)| s.iter().product::<usize>())
                .sum(),
        ),
        _ => (true, usize::MAX),
    }
}

/// `failure`, or a mismatch on a graph with fewer input elements among
/// [`SHRINK_TRIES`] more drawn: the counterexample to read.
fn smaller(
    rule: &'static Rule,
    set: &'static RuleSet,
    cfg: &Config,
    coverage: &Coverage,
    failure: Failure,
) -> Failure {
    let mut best = failure;
    for i in 0..SHRINK_TRIES {
        let seed = seed_of(cfg, rule, u32::MAX - i);
        let Ok((graph, _)) = draw(rule, seed, coverage, cfg.half) else {
            continue;
        };
        if let Err(f @ Failure::Mismatch { .. }) = differential(rule, set, &graph, seed) {
            if size(&f) < size(&best) {
                best = f;
            }
        }
    }
    best
}

/// What [`differential`] found when nothing was wrong.
enum Compared {
    /// The numbers agree; the largest error.
    Same(f64),
    /// The replacement failed and the rewriter rolled the match back.
    RolledBack(String),
    /// The generated graph itself does not run.
    DoesNotRun(String),
}

/// Rewrites `graph` with `set` (the rule alone) and compares.
fn differential(
    rule: &'static Rule,
    set: &'static RuleSet,
    graph: &Graph,
    seed: u64,
) -> Result<Compared, Failure> {
    let fail = |message: String| Failure::Rewrite {
        rule: rule.name,
        location: rule.pattern.location,
        message,
        graph: graph.to_string(),
    };
    let mut after = graph.clone();
    let done = Rewriter::new(&[set])
        .run(&mut after)
        .map_err(|e| fail(format!("the rewrite failed: {e}")))?;
    if let (0, Some(skip)) = (done.total(), done.skipped.first()) {
        return Ok(Compared::RolledBack(skip.reason.clone()));
    }
    if done.total() == 0 {
        return Err(fail(format!(
            "the pattern matches at the output but the rule did not fire ({})",
            done.to_string().trim_end()
        )));
    }
    match compare::compare(graph, &after, seed, rule.verify.tol) {
        Outcome::Same(err) => Ok(Compared::Same(err)),
        Outcome::BeforeFails(why) => Ok(Compared::DoesNotRun(why)),
        Outcome::AfterFails(e) => Err(fail(format!(
            "the rewritten graph does not run ({e}); after:\n{after}"
        ))),
        Outcome::Differs(counterexample) => Err(Failure::Mismatch {
            rule: rule.name,
            location: rule.pattern.location,
            counterexample,
        }),
    }
}

/// [`check_rule`] over every rule of `set`, in its order.
pub fn check_set(set: &RuleSet, cfg: &Config) -> Vec<Result<RuleReport, Failure>> {
    set.rules.iter().map(|&r| check_rule(r, cfg)).collect()
}

/// What the test `rule_set!` emits for a rule calls: [`check_rule`] with
/// [`Config::from_env`], printing the report, and failing the test with the failure's
/// message (the rule's `file:line` and a counterexample).
pub fn test_rule(rule: &'static Rule) {
    match check_rule(rule, &Config::from_env()) {
        Ok(report) => println!("{report}"),
        Err(failure) => panic!("{failure}"),
    }
}
