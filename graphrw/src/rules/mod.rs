//! The built-in rule library: canonicalisation and attention fusion, written with
//! `rule_set!`, and the pass that runs them in order.

pub mod attention;
pub mod canonical;
pub mod causal;
mod kernels;
mod pipeline;

pub use attention::ATTENTION;
pub use canonical::CANONICAL;
pub use kernels::Kernels;
pub use pipeline::{optimize, OptimizeError, Optimized};

use crate::rewrite::{Report, RewriteError, Rewriter};
use crate::Graph;

/// Canonicalises, then fuses attention blocks with canonicalisation still on (it folds
/// the transposes the fusion introduces, after which grouped kv heads are recognised on
/// the fused nodes). Returns the reports of the two passes.
pub fn fuse_attention(graph: &mut Graph) -> Result<Vec<Report>, RewriteError> {
    Ok(vec![
        Rewriter::new(&[&CANONICAL]).run(graph)?,
        Rewriter::new(&[&CANONICAL, &ATTENTION]).run(graph)?,
    ])
}

/// The named rule sets the command line offers (`--rules NAME`).
pub fn rule_set(name: &str) -> Option<&'static crate::RuleSet> {
    match name {
        "canonical" => Some(&CANONICAL),
        "attention" => Some(&ATTENTION),
        kernel => crate::generated::builtin::ALL
            .iter()
            .find(|k| k.op.name.strip_prefix("fused.") == Some(kernel))
            .map(|k| k.rules),
    }
}
