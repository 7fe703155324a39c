//! The rewriter: fixed point, reports, safety (escaping interior values), atomic
//! patches (a failing replacement leaves the graph as it was), the ping-pong guard,
//! and numerics preserved (checked by running before and after).

use graphrw::exec::run_reference;
use graphrw::rewrite::{RewriteError, Rewriter};
use graphrw::{rule_set, verify, Builder, DType, Graph, Shape, Tensor, TensorMeta};

rule_set! {
    /// Small algebraic canonicalisations.
    pub static ALGEBRA;

    rule div_to_mul(x: Tensor, s: f64) -> Tensor where s != 0.0 {
        x.div(s)
    } => {
        x.mul(1.0 / s)?
    }

    #[priority(10)]
    rule neg_neg(x: Tensor) -> Tensor {
        x.neg().neg()
    } => {
        x
    }

    #[verify(skip = "exact only for positive `x`: `log` of a negative is NaN, and the rewrite gives `x`")]
    rule exp_log(x: Tensor) -> Tensor {
        x.log().exp()
    } => {
        x
    }
}

rule_set! {
    /// Two rules that undo each other.
    pub static PING_PONG;

    rule mul_to_div(x: Tensor, s: f64) -> Tensor where s != 0.0 {
        x.mul(s)
    } => {
        x.div(1.0 / s)?
    }

    rule div_to_mul_again(x: Tensor, s: f64) -> Tensor where s != 0.0 {
        x.div(s)
    } => {
        x.mul(1.0 / s)?
    }
}

rule_set! {
    /// A replacement that builds something of the wrong shape.
    pub static BROKEN;

    #[verify(skip = "broken on purpose: the tests check that the rewriter refuses its replacement")]
    rule sum_instead(x: Tensor) -> Tensor {
        x.relu().relu()
    } => {
        x.sum()?
    }
}

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

fn input() -> Tensor {
    Tensor::from_vec(vec![2, 3], vec![0.5f32, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap()
}

fn run(g: &Graph) -> Vec<f64> {
    run_reference(g, &[input()]).unwrap()[0].to_f64_vec()
}

#[test]
fn rewrites_to_a_fixed_point_and_keeps_the_numbers() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = x
        .div(4.0)
        .unwrap()
        .neg()
        .unwrap()
        .neg()
        .unwrap()
        .log()
        .unwrap()
        .exp()
        .unwrap();
    let z = y.div(2.0).unwrap();
    b.output(&[z]).unwrap();
    let mut g = b.finish();
    let before = run(&g);
    let report = Rewriter::new(&[&ALGEBRA]).run(&mut g).unwrap();
    verify(&g).unwrap();
    let counts = report.counts();
    assert_eq!(counts.get("div_to_mul"), Some(&2), "{report}");
    assert_eq!(counts.get("neg_neg"), Some(&1), "{report}");
    assert_eq!(counts.get("exp_log"), Some(&1), "{report}");
    let text = g.to_string();
    assert!(
        !text.contains("div(") && !text.contains("neg(") && !text.contains("exp("),
        "{text}"
    );
    assert_eq!(text.matches("= mul(").count(), 2, "{text}");
    let after = run(&g);
    for (a, b) in before.iter().zip(&after) {
        assert!(
            (a - b).abs() <= 1e-6 * a.abs().max(1.0),
            "{before:?} vs {after:?}"
        );
    }
    // A second run finds nothing to do.
    let again = Rewriter::new(&[&ALGEBRA]).run(&mut g).unwrap();
    assert_eq!(again.total(), 0);
}

#[test]
fn a_match_whose_interior_escapes_is_not_applied() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let n1 = x.neg().unwrap();
    let n2 = n1.neg().unwrap();
    // n1 is also an output: replacing neg(neg(x)) by x would leave n1's user dangling.
    b.output(&[n2, n1]).unwrap();
    let mut g = b.finish();
    let report = Rewriter::new(&[&ALGEBRA]).run(&mut g).unwrap();
    assert_eq!(report.total(), 0, "{report}");
    assert_eq!(report.rejected_unsafe.get("neg_neg"), Some(&1));
    assert_eq!(g.nodes_with_op("neg").count(), 2);
}

#[test]
fn a_failing_replacement_is_rolled_back_skipped_and_reported() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = x.relu().unwrap().relu().unwrap();
    b.output(&[y]).unwrap();
    let mut g = b.finish();
    let printed = g.to_string();
    let report = Rewriter::new(&[&BROKEN]).run(&mut g).unwrap();
    assert_eq!(report.total(), 0, "{report}");
    assert_eq!(report.skipped.len(), 1, "{report}");
    let skip = &report.skipped[0];
    assert_eq!(skip.rule, "sum_instead");
    assert!(skip.at.contains("relu"), "{skip}");
    assert!(
        skip.reason.contains("f32[2, 3]") && skip.reason.contains("f32[]"),
        "{skip}"
    );
    assert!(report.to_string().contains("sum_instead"), "{report}");
    assert_eq!(g.to_string(), printed);
    verify(&g).unwrap();
}

#[test]
fn a_strict_rewriter_reports_a_failing_replacement_as_an_error() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = x.relu().unwrap().relu().unwrap();
    b.output(&[y]).unwrap();
    let mut g = b.finish();
    let printed = g.to_string();
    let err = Rewriter::new(&[&BROKEN])
        .with_strict(true)
        .run(&mut g)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            RewriteError::Replacement {
                rule: "sum_instead",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("f32[2, 3]") && msg.contains("f32[]"), "{msg}");
    assert_eq!(g.to_string(), printed);
    verify(&g).unwrap();
}

#[test]
fn rules_that_undo_each_other_hit_the_iteration_guard() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = x.mul(2.0).unwrap();
    b.output(&[y]).unwrap();
    let mut g = b.finish();
    let err = Rewriter::new(&[&PING_PONG])
        .with_iteration_limit(50)
        .run(&mut g)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, RewriteError::IterationLimit { limit: 50, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("mul_to_div") && msg.contains("div_to_mul_again"),
        "{msg}"
    );
}

#[test]
fn many_identical_siblings_are_each_rewritten_once() {
    // FX's matcher blows up on identical sibling anchors; here each is one rewrite.
    let b = Builder::new();
    let x = b.input("x", f32s(&[4]));
    let outs: Vec<_> = (0..200).map(|_| x.neg().unwrap().neg().unwrap()).collect();
    let mut acc = outs[0];
    for o in &outs[1..] {
        acc = acc.add(*o).unwrap();
    }
    b.output(&[acc]).unwrap();
    let mut g = b.finish();
    let report = Rewriter::new(&[&ALGEBRA])
        .with_verify_each(false)
        .run(&mut g)
        .unwrap();
    assert_eq!(report.counts().get("neg_neg"), Some(&200));
    assert_eq!(g.nodes_with_op("neg").count(), 0);
    verify(&g).unwrap();
}

#[test]
fn a_patch_takes_away_what_only_the_match_used() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = x.neg().unwrap().neg().unwrap().div(4.0).unwrap();
    b.output(&[y]).unwrap();
    let mut g = b.finish();
    let before = run(&g);
    let report = Rewriter::new(&[&ALGEBRA]).run(&mut g).unwrap();
    verify(&g).unwrap();
    assert_eq!(report.counts().get("neg_neg"), Some(&1), "{report}");
    assert_eq!(report.counts().get("div_to_mul"), Some(&1), "{report}");
    // The divisor 4.0, used by the div alone, went with the div's replacement: the
    // final sweep found nothing left.
    assert_eq!(report.dead_removed, 0, "{report}");
    let text = g.to_string();
    assert_eq!(g.node_count(), 3, "x, the constant 0.25, mul: {text}");
    assert!(!text.contains("4.0") && !text.contains("neg("), "{text}");
    assert!(text.contains("0.25"), "{text}");
    assert_eq!(run(&g), before);
}
