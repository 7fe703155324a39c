//! A larger rule of higher priority wins over a smaller rule nested inside its match,
//! whatever the declaration order, the set order and the order the rewriter visits nodes
//! in; a smaller rule given the higher priority wins instead. The pair is the one a
//! user wrote: `silu` (`x * sigmoid(x)`) inside `swiglu_mlp` (`silu(x @ wg) * (x @ wu)`).

use graphrw::exec::run_reference;
use graphrw::rewrite::Rewriter;
use graphrw::{rule_set, Builder, DType, Graph, Shape, Tensor, TensorMeta};

mod small_first {
    use graphrw::rule_set;

    rule_set! {
        /// The smaller rule declared first.
        pub static SMALL_FIRST;

        rule silu(x: Tensor) -> Tensor {
            x.mul(x.sigmoid())
        } => {
            x.silu()?
        }

        rule swiglu_mlp(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu))
        } => {
            x.matmul(wg)?.silu()?.mul(x.matmul(wu)?)?
        }
    }
}
use small_first::SMALL_FIRST;

mod large_first {
    use graphrw::rule_set;

    rule_set! {
        /// The larger rule declared first.
        pub static LARGE_FIRST;

        rule swiglu_mlp(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu))
        } => {
            x.matmul(wg)?.silu()?.mul(x.matmul(wu)?)?
        }

        rule silu(x: Tensor) -> Tensor {
            x.mul(x.sigmoid())
        } => {
            x.silu()?
        }
    }
}
use large_first::LARGE_FIRST;

mod small_preferred {
    use graphrw::rule_set;

    rule_set! {
        /// The smaller rule given the higher priority, declared second: it must win.
        pub static SMALL_PREFERRED;

        rule swiglu_mlp(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu))
        } => {
            x.matmul(wg)?.silu()?.mul(x.matmul(wu)?)?
        }

        #[priority(20)]
        rule silu(x: Tensor) -> Tensor {
            x.mul(x.sigmoid())
        } => {
            x.silu()?
        }
    }
}
use small_preferred::SMALL_PREFERRED;

mod silu_only {
    use graphrw::rule_set;

    rule_set! {
        /// The smaller rule alone.
        pub static SILU_ONLY;

        rule silu(x: Tensor) -> Tensor {
            x.mul(x.sigmoid())
        } => {
            x.silu()?
        }
    }
}
use silu_only::SILU_ONLY;

mod mlp_only {
    use graphrw::rule_set;

    rule_set! {
        /// The larger rule alone, and one that holds `silu` two levels below its anchor.
        pub static MLP_ONLY;

        rule swiglu_mlp(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu))
        } => {
            x.matmul(wg)?.silu()?.mul(x.matmul(wu)?)?
        }
    }
}
use mlp_only::MLP_ONLY;

mod with_down {
    use graphrw::rule_set;

    rule_set! {
        /// `silu` two levels below the anchor (the down projection).
        pub static WITH_DOWN;

        rule silu(x: Tensor) -> Tensor {
            x.mul(x.sigmoid())
        } => {
            x.silu()?
        }

        rule swiglu_down(x: Tensor, wg: Tensor, wu: Tensor, wd: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu)).matmul(wd)
        } => {
            x.matmul(wg)?.silu()?.mul(x.matmul(wu)?)?.matmul(wd)?
        }
    }
}
use with_down::WITH_DOWN;

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

/// `x`, `wg`, `wu`, `wd`: an MLP written the long way, with a second, stray SiLU that no
/// larger pattern holds.
fn mlp() -> Graph {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 4]));
    let wg = b.input("wg", f32s(&[4, 3]));
    let wu = b.input("wu", f32s(&[4, 3]));
    let wd = b.input("wd", f32s(&[3, 4]));
    let h = x.matmul(wg).unwrap();
    let gate = h.mul(h.sigmoid().unwrap()).unwrap();
    let y = gate.mul(x.matmul(wu).unwrap()).unwrap();
    let down = y.matmul(wd).unwrap();
    let stray = down.mul(down.sigmoid().unwrap()).unwrap();
    b.output(&[stray]).unwrap();
    b.finish()
}

fn inputs() -> Vec<Tensor> {
    let t = |r: usize, c: usize, s: f32| {
        Tensor::from_vec(
            vec![r, c],
            (0..r * c).map(|i| s * (i as f32 - 3.0) / 7.0).collect(),
        )
        .unwrap()
    };
    vec![t(2, 4, 1.0), t(4, 3, 0.5), t(4, 3, -0.3), t(3, 4, 0.7)]
}

fn run(g: &Graph) -> Vec<f64> {
    run_reference(g, &inputs()).unwrap()[0].to_f64_vec()
}

/// Rewrites a fresh MLP with `sets` and returns the rules' counts; the numbers stay.
fn counts(sets: &[&'static graphrw::RuleSet]) -> Vec<(&'static str, usize)> {
    let mut g = mlp();
    let before = run(&g);
    let report = Rewriter::new(sets).run(&mut g).unwrap();
    let after = run(&g);
    for (a, b) in before.iter().zip(&after) {
        assert!((a - b).abs() < 1e-5, "{before:?} vs {after:?}");
    }
    report.counts().into_iter().collect()
}

#[test]
fn the_larger_rule_wins_whatever_the_declaration_order() {
    let want = vec![("silu", 1), ("swiglu_mlp", 1)];
    assert_eq!(counts(&[&SMALL_FIRST]), want);
    assert_eq!(counts(&[&LARGE_FIRST]), want);
}

#[test]
fn the_larger_rule_wins_across_sets_in_either_order() {
    let want = vec![("silu", 1), ("swiglu_mlp", 1)];
    assert_eq!(counts(&[&SILU_ONLY, &MLP_ONLY]), want);
    assert_eq!(counts(&[&MLP_ONLY, &SILU_ONLY]), want);
}

#[test]
fn a_smaller_rule_of_higher_priority_wins() {
    // Both SiLUs become `silu`; the MLP is no longer written the long way.
    assert_eq!(counts(&[&SMALL_PREFERRED]), vec![("silu", 2)]);
}

#[test]
fn a_rule_two_levels_up_claims_the_match() {
    assert_eq!(counts(&[&WITH_DOWN]), vec![("silu", 1), ("swiglu_down", 1)]);
}

#[test]
fn the_larger_rule_wins_when_its_anchor_is_visited_first() {
    // Built with the `silu` op, then unfused by a rule: the replacement's new `mul` and
    // `sigmoid` take ids above every old node, the larger rule's anchor included.
    rule_set! {
        pub static UNFUSE;

        rule unfuse(x: Tensor) -> Tensor {
            x.silu()
        } => {
            x.mul(x.sigmoid()?)?
        }
    }
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 4]));
    let wg = b.input("wg", f32s(&[4, 3]));
    let wu = b.input("wu", f32s(&[4, 3]));
    let y = x
        .matmul(wg)
        .unwrap()
        .silu()
        .unwrap()
        .mul(x.matmul(wu).unwrap())
        .unwrap();
    b.output(&[y]).unwrap();
    let mut g = b.finish();
    Rewriter::new(&[&UNFUSE]).run(&mut g).unwrap();
    // The larger rule's anchor now has a smaller id than the inner `mul`: the rewriter,
    // which visits the smallest id first, reaches it first.
    let large = LARGE_FIRST.rule("swiglu_mlp").unwrap().pattern;
    let found = large.find(&g);
    assert_eq!(found.len(), 1);
    let anchor = found[0].outputs[0].node;
    let inner = found[0]
        .nodes
        .iter()
        .copied()
        .find(|&n| n != anchor && g.node(n).is_some_and(|n| n.op_name() == "mul"))
        .unwrap();
    assert!(anchor < inner, "{anchor:?} {inner:?}");
    let inputs = &inputs()[..3];
    let before = run_reference(&g, inputs).unwrap()[0].to_f64_vec();
    for set in [&LARGE_FIRST, &SMALL_FIRST] {
        let mut g = g.clone();
        let report = Rewriter::new(&[set]).run(&mut g).unwrap();
        let got: Vec<_> = report.counts().into_iter().collect();
        assert_eq!(got, vec![("swiglu_mlp", 1)], "{report}");
        let after = run_reference(&g, inputs).unwrap()[0].to_f64_vec();
        for (a, b) in before.iter().zip(&after) {
            assert!((a - b).abs() < 1e-5);
        }
    }
}
