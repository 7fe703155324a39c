//! The coverage report (`rules::coverage`, `rules::coverage_of`): every site of a
//! model's fusions, fused or with its nearest rule's failing check; and the rewriter's
//! report of a user rule that took a region a built-in fusion would have fused
//! (`Rewriter::with_later`).
//!
//! On the corpora (`../shared/corpus`, `../shared/corpus_dynamic`; skipped with a
//! `SKIPPED` line where absent): every site is accounted for, and every attention site
//! the manifest counts is reported fused by the attention rule.

use std::path::{Path, PathBuf};

use graphrw::ops::{Arity, Attrs, Infer, OpClass, OpDef, OperandSpec, OutputCount};
use graphrw::rewrite::Rewriter;
use graphrw::{onnx, rule_set, rules, Builder, DType, GraphError, TensorMeta, Value};

rule_set! {
    /// A hand-made set: SiLU at rank 4 only, and a softmax of an `exp`.
    static HAND_MADE;

    rule rank4_silu(x: Tensor) -> Tensor where rank(x) == 4 {
        x.mul(x.sigmoid())
    } => {
        x.silu()?
    }

    #[verify(skip = "a coverage fixture: drops the `exp` on purpose (the tests report sites, not values)")]
    rule softmax_of_exp(x: Tensor) -> Tensor {
        x.exp().softmax(-1)
    } => {
        x.softmax(-1)?
    }
}

fn meta(shape: &[usize]) -> TensorMeta {
    let dims: Vec<graphrw::Dim> = shape.iter().map(|&d| graphrw::Dim::from(d)).collect();
    TensorMeta::new(DType::F32, dims)
}

/// A hand-made rule set's sites: the one it rewrites is fused by its rule, the others
/// are reported with the nearest rule's failing check, in the printer's names.
#[test]
fn a_hand_made_rule_sets_near_misses_name_the_failing_check() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 3, 4, 8]));
    let y = g.input("y", meta(&[4, 8]));
    let z = g.input("z", meta(&[4, 8]));
    let silu4 = x.mul(x.sigmoid()?)?;
    let silu2 = y.mul(y.sigmoid()?)?;
    let probs = z.exp()?.softmax(-1)?;
    g.output(&[silu4, silu2, probs])?;
    let graph = g.finish();
    let report = rules::coverage_of(&graph, &[&HAND_MADE]).expect("coverage");
    println!("{report}");
    // Every `mul` and every `softmax` (the rules' anchor ops) is a site.
    assert_eq!(report.sites.len(), 3, "{report}");
    assert_eq!(report.fused(), 2, "{report}");
    assert_eq!(
        report.fused_by_rule().get("rank4_silu"),
        Some(&1),
        "{report}"
    );
    assert_eq!(
        report.fused_by_rule().get("softmax_of_exp"),
        Some(&1),
        "{report}"
    );
    let missed = report.sites.iter().find(|s| !s.is_fused()).expect("a miss");
    assert_eq!(missed.op, "mul");
    let near = missed.nearest.as_ref().expect("a nearest rule");
    assert_eq!(near.rule, "rank4_silu", "{report}");
    assert_eq!(
        near.why.check, "operand 0 of `mul`: constraint `rank(x) == 4`",
        "{report}"
    );
    // The message names the graph's values as the printer does.
    assert_eq!(
        near.why.message,
        "operand 0 of `mul`: constraint `rank(x) == 4` failed (2 vs 4) binding `x` to y",
        "{report}"
    );
    assert_eq!(
        missed.reason().as_deref(),
        Some("`rank4_silu`: operand 0 of `mul`: constraint `rank(x) == 4`")
    );
    let text = report.to_string();
    assert!(text.contains("3 site(s): 2 fused, 1 not fused"), "{text}");
    assert!(
        text.contains("not fused, `rank4_silu`: operand 0 of `mul`: constraint `rank(x) == 4`: 1"),
        "{text}"
    );
    Ok(())
}

/// The built-in pipeline's report looks at each site as its pass sees it: a softmax
/// written as log-sum-exp is canonicalised first, a `pow(x, 2)` RMS norm is spelled
/// again first; a softmax over the first dim is not fused and says why.
#[test]
fn the_pipelines_sites_are_seen_as_their_passes_see_them() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 8]));
    let w = g.input("w", meta(&[8]));
    let ms = x.pow(2.0)?.mean_with(&[-1], true)?.add(1e-6)?;
    let norm = x.div(ms.sqrt()?)?.mul(w)?;
    let s = norm.softmax(0)?;
    g.output(&[s])?;
    let graph = g.finish();
    let report = rules::coverage(&graph).expect("coverage");
    println!("{report}");
    let by_op = |op: &str| report.sites.iter().find(|s| s.op == op).expect(op);
    assert_eq!(by_op("mean").fused_by, Some("rms_norm"), "{report}");
    assert_eq!(by_op("mean").pass, "kernels");
    let softmax = by_op("softmax");
    assert!(!softmax.is_fused(), "{report}");
    assert_eq!(softmax.pass, "attention");
    let near = softmax.nearest.as_ref().expect("nearest");
    assert!(near.rule.starts_with("softmax_scale_mask"), "{report}");
    assert!(near.why.check.contains("dim=-1"), "{report}");
    assert_eq!(report.sites.len(), 2, "{report}");
    Ok(())
}

fn swiglu_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    let (x, wg, wu) = (b.var(x[0]), b.var(x[1]), b.var(x[2]));
    let h = x.matmul(wg)?;
    Ok(vec![h.mul(h.sigmoid()?)?.mul(x.matmul(wu)?)?.value()])
}

/// The user's own SwiGLU MLP op (`x`, gate and up weights), like its decomposition.
static MY_SWIGLU: OpDef = OpDef {
    name: "my.swiglu",
    doc: "silu(x @ wg) * (x @ wu).",
    operands: &[
        OperandSpec {
            name: "x",
            arity: Arity::Required,
        },
        OperandSpec {
            name: "wg",
            arity: Arity::Required,
        },
        OperandSpec {
            name: "wu",
            arity: Arity::Required,
        },
    ],
    attrs: &[],
    outputs: OutputCount::Fixed(1),
    commutative: false,
    class: OpClass::Other,
    infer: Infer::Like,
    decompose: Some(swiglu_like),
    builtin: None,
};

mod user {
    use super::MY_SWIGLU;

    graphrw::rule_set! {
        /// The user's rule: the MLP to `my.swiglu`.
        pub static USER_MLP;

        rule my_swiglu(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu))
        } => {
            b.call(&MY_SWIGLU).arg(x).arg(wg).arg(wu).build()?
        }
    }
}

/// Issue #59: the user's rule turns an MLP into `my.swiglu`; the built-in SwiGLU
/// kernel's rule would have fused that region. With the built-in fusions as later
/// rules, the report says so; without them, or where no built-in rule matched, it
/// says nothing.
#[test]
fn a_user_rule_that_took_a_builtin_fusions_region_is_reported() -> Result<(), GraphError> {
    let build = |gated: bool| -> Result<graphrw::Graph, GraphError> {
        let g = Builder::new();
        let x = g.input("x", meta(&[2, 8]));
        let wg = g.input("wg", meta(&[8, 8]));
        let wu = g.input("wu", meta(&[8, 8]));
        let h = x.matmul(wg)?;
        let y = if gated {
            h.mul(h.sigmoid()?)?.mul(x.matmul(wu)?)?
        } else {
            x.matmul(wu)?.relu()?
        };
        g.output(&[y])?;
        Ok(g.finish())
    };
    let mut graph = build(true)?;
    let report = Rewriter::new(&[&user::USER_MLP])
        .with_later(&rules::fusions())
        .run(&mut graph)
        .expect("rewrite");
    assert_eq!(report.total(), 1);
    assert_eq!(graph.nodes_with_op("my.swiglu").count(), 1);
    assert_eq!(report.preempted.len(), 1, "{report}");
    let p = &report.preempted[0];
    assert_eq!(p.rule, "my_swiglu");
    assert!(p.later.starts_with("swiglu"), "{p}");
    let text = report.to_string();
    assert!(
        text.contains("preempted: rule `my_swiglu` at ")
            && text.contains(&format!("the later rule `{}` would have fused", p.later)),
        "{text}"
    );
    // The firing names the nodes it replaced (the MLP's five ops).
    assert_eq!(report.firings[0].replaced.len(), 5, "{report:?}");

    // Without later rules: nothing reported.
    let mut graph = build(true)?;
    let report = Rewriter::new(&[&user::USER_MLP])
        .run(&mut graph)
        .expect("rewrite");
    assert!(report.preempted.is_empty());

    // A built-in rule's own rewrite is never reported against itself.
    let mut graph = build(true)?;
    let report = Rewriter::new(&rules::fusions())
        .with_later(&rules::fusions())
        .run(&mut graph)
        .expect("rewrite");
    assert_eq!(report.total(), 1, "{report}");
    assert!(report.preempted.is_empty(), "{report}");
    Ok(())
}

/// (model folder, attention sites) of a corpus manifest, or `None` after a `SKIPPED`
/// line when the corpus is absent.
fn manifest(dir: &Path) -> Option<Vec<(PathBuf, usize)>> {
    let Ok(text) = std::fs::read_to_string(dir.join("manifest.json")) else {
        println!("SKIPPED: no corpus at {}", dir.display());
        return None;
    };
    let mut out = Vec::new();
    let mut model = None;
    for line in text.lines().map(str::trim) {
        let line = line.trim_end_matches(',');
        if let Some(v) = line.strip_prefix("\"model\": ") {
            model = Some(dir.join(v.trim_matches('"')));
        }
        if let Some(v) = line.strip_prefix("\"attention_sites\": ") {
            let n = v.parse().expect("attention_sites is a number");
            out.push((model.take().expect("model before its sites"), n));
        }
    }
    assert!(!out.is_empty(), "{}: no model listed", dir.display());
    Some(out)
}

/// Every corpus model: every site accounted for (sites = fused + not fused, each
/// unfused one with a reason), the manifest's attention sites all fused by the
/// attention rule, each fused rule's count at most what the pipeline's reports count.
#[test]
fn every_site_of_every_corpus_model_is_accounted_for() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared");
    for corpus in ["corpus", "corpus_dynamic"] {
        let Some(models) = manifest(&root.join(corpus)) else {
            continue;
        };
        for (dir, attention_sites) in models {
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("?");
            let graph = onnx::load(dir.join("model.onnx")).expect("load");
            let report = rules::coverage(&graph).unwrap_or_else(|e| panic!("{name}: {e}"));
            let fused: usize = report.fused_by_rule().values().sum();
            let missed: usize = report.not_fused_by_reason().values().sum();
            assert_eq!(fused + missed, report.sites.len(), "{name}:\n{report}");
            assert_eq!(
                report.fused_by_rule().get("attention").copied(),
                Some(attention_sites),
                "{name}:\n{report}"
            );
            let mut g = graph.clone();
            let done = rules::optimize(&mut g).expect("optimize");
            let mut counts = std::collections::BTreeMap::new();
            for r in done.reports() {
                for (rule, n) in r.counts() {
                    *counts.entry(rule).or_insert(0) += n;
                }
            }
            for (rule, n) in report.fused_by_rule() {
                assert!(
                    counts.get(rule).is_some_and(|&c| c >= n),
                    "{name}: {n} site(s) fused by `{rule}`, the pipeline fired it {:?} time(s)",
                    counts.get(rule)
                );
            }
            println!(
                "{corpus}/{name}: {} site(s), {fused} fused",
                report.sites.len()
            );
        }
    }
}
