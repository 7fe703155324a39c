//! The built-in rule library: canonicalisation and attention fusion, written with
//! `rule_set!`, and the pass that runs them in order.

pub mod attention;
pub mod canonical;
pub mod causal;
pub mod coverage;
mod generators;
mod kernels;
pub mod norms;
mod pipeline;

pub use attention::ATTENTION;
pub use canonical::CANONICAL;
pub use coverage::{coverage, coverage_of, Coverage, NearMiss, Site};
pub use kernels::Kernels;
pub use norms::{NORM_SPELLINGS, UNWEIGHTED_RMS_NORM};
pub use pipeline::{
    fusions, optimize, optimize_observed, optimize_with, prepare, rewrite_passes, run_until,
    OptimizeError, Optimized, PassDone, RewritePass,
};

use crate::rewrite::{Report, RewriteError, Rewriter, Verify};

/// The largest tensor, in bytes, that a rule evaluates while rewriting (the constant
/// evaluation of input-independent mask parts in [`causal`]): 64 MiB. A value, or any
/// value it is computed from, past this stays unevaluated and its nodes unchanged.
pub const FOLD_MAX_TENSOR_BYTES: u64 = 64 << 20;
use crate::Graph;

/// Canonicalises, then fuses attention blocks with canonicalisation still on (it folds
/// the transposes the fusion introduces, after which grouped kv heads are recognised on
/// the fused nodes). Returns the reports of the two passes.
pub fn fuse_attention(graph: &mut Graph) -> Result<Vec<Report>, RewriteError> {
    fuse_attention_with(graph, Verify::default())
}

/// [`fuse_attention`], verifying as `verify` says ([`Verify`]).
pub fn fuse_attention_with(graph: &mut Graph, verify: Verify) -> Result<Vec<Report>, RewriteError> {
    let [canonicalise, fuse] = ATTENTION_PASSES;
    Ok(vec![
        Rewriter::new(canonicalise).with_verify(verify).run(graph)?,
        Rewriter::new(fuse).with_verify(verify).run(graph)?,
    ])
}

/// The rule sets of [`fuse_attention`]'s two passes (also what [`prepare`] builds).
const ATTENTION_PASSES: [&[&crate::RuleSet]; 2] = [&[&CANONICAL], &[&CANONICAL, &ATTENTION]];

/// The named rule sets the command line offers (`--rules NAME`).
pub fn rule_set(name: &str) -> Option<&'static crate::RuleSet> {
    match name {
        "canonical" => Some(&CANONICAL),
        "attention" => Some(&ATTENTION),
        "norms" => Some(&NORM_SPELLINGS),
        kernel => crate::generated::builtin::ALL
            .iter()
            .find(|k| k.op.name.strip_prefix("fused.") == Some(kernel))
            .map(|k| k.rules),
    }
}
