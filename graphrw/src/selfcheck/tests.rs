//! The check catches wrong rules (a wrong scale, swapped operands), takes every choice
//! of a pattern, reports a generator that cannot meet a constraint without panicking,
//! and honours `skip` and a stated generator.

use super::{check_rule, test_rule, Config, Failure};
use crate::meta::{DType, TensorMeta};
use crate::{rule_set, Builder, Graph, GraphError};

// `#[overlap]`: the fixtures are checked one at a time; which fires first in a set
// does not matter.
rule_set! {
    static FIXTURES;

    /// Wrong: the scale is not inverted.
    #[verify(skip = "wrong on purpose: the check must catch it")]
    #[overlap]
    rule wrong_scale(x: Tensor, s: f64) -> Tensor where s != 0.0, s != 1.0, s != -1.0 {
        x.div(s)
    } => {
        x.mul(s)?
    }

    /// Wrong: `-(x - y)` is `y - x`; the operands are swapped.
    #[verify(skip = "wrong on purpose: the check must catch it")]
    #[overlap]
    rule swapped_operands(x: Tensor, y: Tensor) -> Tensor {
        x.sub(y).neg()
    } => {
        x.sub(y)?
    }

    /// Right, with an alternative, an optional part and a repeated chain.
    #[overlap]
    rule choices(x: Tensor, s: Option<f64>) -> Tensor {
        let y = x.neg().neg() | x.mul(1.0);
        repeat(y.mul(s?), |t| t.relu(), 1..=4)
    } => {
        let y = match s {
            Some(s) => x.mul(s)?,
            None => x,
        };
        y.relu()?
    }

    /// A constraint no generated graph meets.
    #[verify(skip = "its constraint cannot be met: the check must say so")]
    #[overlap]
    rule unreachable(x: Tensor) -> Tensor where check(|x| x.rank() > 40) {
        x.tanh()
    } => {
        x.tanh()?
    }

    /// An alternative no graph can take (`not` of a float does not build).
    #[verify(skip = "one alternative cannot be built: the check must say which")]
    #[overlap]
    rule dead_alternative(x: Tensor) -> Tensor {
        (x.exp() | x.isnan()).not()
    } => {
        x.eq(x)?
    }

    /// Right, with its own generator.
    #[verify(generator = own_graph, graphs = 3)]
    #[overlap]
    rule with_generator(x: Tensor) -> Tensor {
        x.sigmoid().mul(x)
    } => {
        x.silu()?
    }
}

/// `x * sigmoid(x)` over a `[2, seed % 3 + 1]` input.
fn own_graph(seed: u64) -> Result<Option<Graph>, GraphError> {
    let g = Builder::new();
    let x = g.input(
        "x",
        TensorMeta::new(DType::F32, [2usize, seed as usize % 3 + 1]),
    );
    let y = x.sigmoid()?.mul(x)?;
    g.output(&[y])?;
    Ok(Some(g.finish()))
}

fn rule(name: &str) -> &'static crate::Rule {
    FIXTURES.rule(name).expect("a fixture rule")
}

/// Runs a rule's check as if it were not skipped.
fn check_unskipped(name: &str) -> Result<super::RuleReport, Failure> {
    let r = rule(name);
    let unskipped: &'static crate::Rule = Box::leak(Box::new(crate::Rule {
        verify: crate::pattern::VerifySpec {
            skip: None,
            ..r.verify
        },
        ..*r
    }));
    check_rule(unskipped, &Config::default())
}

#[test]
fn a_wrong_scale_is_caught_with_its_line_and_a_counterexample() {
    let failure = check_unskipped("wrong_scale").unwrap_err();
    let text = failure.to_string();
    println!("{text}");
    assert!(matches!(failure, Failure::Mismatch { .. }), "{text}");
    assert!(
        text.starts_with("rule `wrong_scale` (graphrw/src/selfcheck/tests.rs:"),
        "{text}"
    );
    for part in [
        "is wrong",
        "differs after the rewrite",
        "inputs: x: ",
        "before:",
        "after:",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}

#[test]
fn swapped_operands_are_caught() {
    let failure = check_unskipped("swapped_operands").unwrap_err();
    let text = failure.to_string();
    assert!(matches!(failure, Failure::Mismatch { .. }), "{text}");
    assert!(text.contains("element "), "{text}");
}

#[test]
#[should_panic(expected = "rule `swapped_operands` (graphrw/src/selfcheck/tests.rs:")]
fn the_generated_test_fails_on_a_wrong_rule() {
    let r = rule("swapped_operands");
    let unskipped: &'static crate::Rule = Box::leak(Box::new(crate::Rule {
        verify: crate::pattern::VerifySpec::DEFAULT,
        ..*r
    }));
    test_rule(unskipped);
}

#[test]
fn every_alternative_optional_part_and_repetition_count_is_taken() {
    let report = check_rule(rule("choices"), &Config::default()).unwrap();
    // Two alternatives, the scale present and absent, one to three repetitions.
    assert_eq!(report.choices, 2 + 2 + 3, "{report}");
    assert!(report.graphs >= 8, "{report}");
    assert!(report.max_error < 1e-6, "{report}");
}

#[test]
fn an_unreachable_constraint_is_reported_not_panicked() {
    let failure = check_unskipped("unreachable").unwrap_err();
    let text = failure.to_string();
    assert!(
        matches!(failure, Failure::CouldNotGenerate { .. }),
        "{text}"
    );
    assert!(
        text.contains("could not generate a graph it matches"),
        "{text}"
    );
    assert!(text.contains("rank() > 40"), "{text}");
}

#[test]
fn a_skipped_rule_runs_nothing_and_says_why() {
    let report = check_rule(rule("wrong_scale"), &Config::default()).unwrap();
    assert_eq!(report.graphs, 0);
    assert_eq!(
        report.skipped,
        Some("wrong on purpose: the check must catch it")
    );
}

#[test]
fn a_stated_generator_is_used() {
    let report = check_rule(rule("with_generator"), &Config::default()).unwrap();
    assert_eq!(report.graphs, 3, "{report}");
    assert_eq!(report.rejected, 0, "{report}");
}

#[test]
fn an_alternative_never_taken_is_named() {
    let failure = check_unskipped("dead_alternative").unwrap_err();
    let text = failure.to_string();
    assert!(
        matches!(failure, Failure::CouldNotGenerate { .. }),
        "{text}"
    );
    assert!(
        text.contains("the alternative `exp(x)` never taken"),
        "{text}"
    );
}
