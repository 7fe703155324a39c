//! The differential test of a pass that is not a rule ([`check_pass`]): the same
//! comparison as a rule's, on graphs from a generator of the pass's own.

use super::compare::{self, Outcome};
use super::{Config, Failure, RuleReport};
use crate::Graph;

/// A pass over whole graphs: how many places it changed, or why it failed.
pub type PassFn = fn(&mut Graph) -> Result<usize, String>;

/// Verifies a pass that is not a rule the way [`check_rule`](super::check_rule) verifies a rule: graphs
/// from `generate` (seeds as for a rule named `name`), each run before and after
/// `pass` on the same random inputs and compared. Graphs the pass leaves unchanged are
/// counted as refused; `cfg.graphs` changed ones are compared. `location` names the
/// pass in messages (`file:line`).
pub fn check_pass(
    name: &'static str,
    location: &'static str,
    generate: crate::pattern::GenFn,
    pass: PassFn,
    cfg: &Config,
) -> Result<RuleReport, Failure> {
    let mut report = RuleReport {
        rule: name,
        location,
        graphs: 0,
        rejected: 0,
        rolled_back: 0,
        rolled_back_example: None,
        max_error: 0.0,
        choices: 0,
        skipped: None,
    };
    let want = cfg.graphs.max(1);
    let budget = want.saturating_mul(cfg.tries.max(1));
    let mut last_reason = String::from("nothing drawn");
    let mut drawn = 0u32;
    let fail = |message: String, graph: &Graph| Failure::Rewrite {
        rule: name,
        location,
        message,
        graph: graph.to_string(),
    };
    while report.graphs < want {
        if drawn >= budget {
            return Err(Failure::CouldNotGenerate {
                rule: name,
                location,
                graphs: report.graphs,
                tries: drawn,
                last_reason,
            });
        }
        let seed = cfg.seed ^ (u64::from(drawn) << 32) ^ name.len() as u64;
        drawn += 1;
        let graph = match generate(seed) {
            Ok(Some(g)) => g,
            Ok(None) => {
                report.rejected += 1;
                last_reason = "the generator gave no graph".into();
                continue;
            }
            Err(e) => {
                report.rejected += 1;
                last_reason = format!("the generator failed: {e}");
                continue;
            }
        };
        let mut after = graph.clone();
        let changed =
            pass(&mut after).map_err(|e| fail(format!("the pass failed: {e}"), &graph))?;
        if changed == 0 {
            report.rejected += 1;
            last_reason = "the pass left the graph unchanged".into();
            continue;
        }
        match compare::compare(&graph, &after, seed, None) {
            Outcome::Same(err) => {
                report.graphs += 1;
                report.max_error = report.max_error.max(err);
            }
            Outcome::BeforeFails(why) => {
                report.rejected += 1;
                last_reason = format!("the generated graph does not run: {why}");
            }
            Outcome::AfterFails(e) => {
                return Err(fail(
                    format!("the changed graph does not run ({e}); after:\n{after}"),
                    &graph,
                ))
            }
            Outcome::Differs(counterexample) => {
                return Err(Failure::Mismatch {
                    rule: name,
                    location,
                    counterexample,
                })
            }
        }
    }
    Ok(report)
}
