//! `explain` and `near_misses`: why a pattern does not match, in words.

use graphrw::pattern::{explain, explain_rules, near_misses};
use graphrw::printer::Names;
use graphrw::{pattern, rule_set, Builder, DType, GraphError, TensorMeta};

rule_set! {
    /// Rules that start at `softmax`, and one that does not.
    static SOFTMAX_RULES;

    #[verify(skip = "an explain fixture: drops the `exp` on purpose")]
    #[priority(5)]
    rule softmax_of_exp(x: Tensor) -> Tensor {
        x.exp().softmax(-1)
    } => {
        x.softmax(-1)?
    }

    #[verify(skip = "a matcher fixture: its replacement matches its pattern again, so rewriting never ends (the tests only match)")]
    #[overlap]
    rule rank4_softmax_rule(x: Tensor) -> Tensor where rank(x) == 4 {
        x.softmax(-1)
    } => {
        x.softmax(-1)?
    }

    rule neg_neg(x: Tensor) -> Tensor {
        x.neg().neg()
    } => {
        x
    }
}

pattern! {
    fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    }

    fn softmax_last(x: Tensor) -> Tensor {
        softmax(x, dim = -1)
    }

    fn rank4_softmax(x: Tensor) -> Tensor
    where
        rank(x) == 4,
    {
        x.softmax(-1)
    }

    fn square(x: Tensor) -> Tensor {
        x.mul(x)
    }
}

fn meta(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(
        DType::F32,
        shape
            .iter()
            .map(|&d| graphrw::Dim::from(d))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn op_mismatch_names_operand_and_node() -> Result<(), GraphError> {
    let g = Builder::new();
    let m = meta(&[1, 4, 16, 16]);
    let (q, k, v) = (
        g.input("q", m.clone()),
        g.input("k", m.clone()),
        g.input("v", m),
    );
    // `mul` where the pattern wants `matmul` under the `div`.
    let s = q.mul(k.transpose(-2, -1)?)?.div(8.0)?;
    let out = s.softmax(-1)?.matmul(v)?;
    g.output(&[out])?;
    let anchor = out.value().node;
    let graph = g.finish();
    let e = explain(&sfdp_1::PATTERN, &graph, anchor);
    let names = Names::new(&graph);
    let mul = graph.nodes_with_op("mul").next().unwrap();
    let mul_name = names.get(graphrw::Value::from(mul));
    assert!(!e.matched);
    assert_eq!(e.node, Some(mul));
    assert_eq!(e.depth, 3, "{e}");
    assert_eq!(e.position, "operand 0 of `div`");
    assert_eq!(
        e.to_string(),
        format!("operand 0 of `div`: expected `matmul`, found `mul` {mul_name}")
    );
    Ok(())
}

#[test]
fn attribute_mismatch_shows_both_values() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 3]));
    let s = x.softmax(0)?;
    g.output(&[s])?;
    let sn = s.value().node;
    let graph = g.finish();
    let e = explain(&softmax_last::PATTERN, &graph, sn);
    assert!(!e.matched);
    let text = e.to_string();
    println!("{text}");
    assert!(text.contains("dim=0"), "{text}");
    assert!(text.contains("expected dim=-1"), "{text}");
    assert!(text.starts_with("the root: `softmax` t0"), "{text}");
    Ok(())
}

#[test]
fn constraint_failure_shows_its_text() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 3]));
    let s = x.softmax(-1)?;
    g.output(&[s])?;
    let sn = s.value().node;
    let graph = g.finish();
    let e = explain(&rank4_softmax::PATTERN, &graph, sn);
    assert!(!e.matched);
    let text = e.to_string();
    println!("{text}");
    assert!(text.contains("constraint `rank(x) == 4` failed"), "{text}");
    assert!(text.contains("(2 vs 4)"), "{text}");
    assert!(text.contains("binding `x` to x"), "{text}");
    Ok(())
}

#[test]
fn repeated_name_bound_elsewhere() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[4]));
    let y = g.input("y", meta(&[4]));
    let p = x.mul(y)?;
    g.output(&[p])?;
    let pn = p.value().node;
    let graph = g.finish();
    let e = explain(&square::PATTERN, &graph, pn);
    let text = e.to_string();
    assert!(text.contains("`x` is already bound to"), "{text}");
    Ok(())
}

#[test]
fn a_match_explains_as_a_match() -> Result<(), GraphError> {
    let g = Builder::new();
    let m = meta(&[1, 4, 16, 8]);
    let (q, k, v) = (
        g.input("q", m.clone()),
        g.input("k", m.clone()),
        g.input("v", m),
    );
    let out = q
        .matmul(k.transpose(-2, -1)?)?
        .div(8.0)?
        .softmax(-1)?
        .matmul(v)?;
    g.output(&[out])?;
    let on = out.value().node;
    let graph = g.finish();
    let e = sfdp_1::PATTERN.explain(&graph, on);
    assert!(e.matched);
    assert_eq!(e.node, None);
    assert_eq!(e.to_string(), "matches");
    // The inner `matmul` is an anchor candidate too, and misses.
    assert_eq!(near_misses(&sfdp_1::PATTERN, &graph).len(), 1);
    Ok(())
}

#[test]
fn near_misses_deepest_first() -> Result<(), GraphError> {
    let g = Builder::new();
    let m = meta(&[1, 4, 16, 16]);
    let (q, k, v) = (
        g.input("q", m.clone()),
        g.input("k", m.clone()),
        g.input("v", m),
    );
    // Shallow miss: a matmul of two inputs (fails at operand 0, depth 1).
    let shallow = q.matmul(v)?;
    // Deep miss: everything but the innermost matmul.
    let deep = q
        .mul(k.transpose(-2, -1)?)?
        .div(8.0)?
        .softmax(-1)?
        .matmul(v)?;
    // Middle: softmax over the wrong dim (fails at depth 1 on the attribute, but
    // after the root matmul: depth 1 too), so use a softmax-less chain instead.
    let middle = q.div(8.0)?.matmul(v)?;
    g.output(&[shallow, deep, middle])?;
    let (shallow, deep, middle) = (shallow.value(), deep.value(), middle.value());
    let graph = g.finish();
    let misses = near_misses(&sfdp_1::PATTERN, &graph);
    let ids: Vec<_> = misses.iter().map(|e| e.anchor).collect();
    assert_eq!(ids[0], deep.node, "{misses:?}");
    let progress: Vec<usize> = misses.iter().map(|e| e.progress).collect();
    assert!(progress.windows(2).all(|w| w[0] >= w[1]), "{progress:?}");
    assert_eq!(misses[0].depth, 3);
    assert!(ids.contains(&shallow.node) && ids.contains(&middle.node));
    Ok(())
}

/// `explain_rules`: every rule that can start at the node, in the order the rewriter
/// tries them, each with where its pattern failed; the node named as the printer names
/// it, and the explanations' `Debug` naming nodes the same way.
#[test]
fn why_no_rule_of_a_set_fired_at_a_node() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 8]));
    let out = x.relu()?.softmax(-1)?;
    g.output(&[out])?;
    let node = out.value().node;
    let graph = g.finish();
    let why = explain_rules(&[&SOFTMAX_RULES], &graph, node);
    let text = why.to_string();
    assert!(text.starts_with("at t1 = softmax(t0, dim=-1)"), "{text}");
    let rules: Vec<&str> = why.rules.iter().map(|(r, _)| *r).collect();
    assert_eq!(rules, ["softmax_of_exp", "rank4_softmax_rule"], "{text}");
    assert_eq!(why.not_anchored, 1, "{text}");
    assert_eq!(why.matching().count(), 0, "{text}");
    let (_, exp) = &why.rules[0];
    assert!(
        exp.message.contains("expected `exp`") && exp.message.contains("relu"),
        "{text}"
    );
    let (_, rank) = &why.rules[1];
    assert!(rank.message.contains("rank(x) == 4"), "{text}");
    assert!(text.contains("rule `rank4_softmax_rule`: "), "{text}");
    let debug = format!("{exp:?}");
    assert!(
        debug.contains("anchor: t1") && debug.contains("node: t0"),
        "{debug}"
    );
    assert!(!debug.contains("NodeIndex"), "{debug}");
    Ok(())
}

mod mlp {
    graphrw::pattern! {
        /// A SwiGLU MLP written the long way.
        pub fn swiglu_mlp(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu))
        }
    }
}

/// The user's case: an MLP whose gate another rule already turned into `silu`, after
/// a norm of two `mul`s. The MLP comes first among the near misses (its up projection
/// and inputs are there), not the norm (whose two `mul`s only share the pattern's
/// outer ops); a value the pattern shares (`h`) is placed at the op that reads it in
/// the graph (`operand 0 of `mul``, never `of `sigmoid`` in a graph without one); the
/// candidates are named as the printer names them.
#[test]
fn near_misses_rank_the_deepest_partial_match_first() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 8]));
    let w = g.input("w", meta(&[8]));
    let wg = g.input("wg", meta(&[8, 8]));
    let wu = g.input("wu", meta(&[8, 8]));
    let norm = x.mul(x.rsqrt()?)?.mul(w)?;
    let mlp = norm.matmul(wg)?.silu()?.mul(norm.matmul(wu)?)?;
    g.output(&[mlp])?;
    let (norm, mlp) = (norm.value().node, mlp.value().node);
    let graph = g.finish();
    let names = graphrw::printer::Names::new(&graph);
    let misses = near_misses(&mlp::swiglu_mlp::PATTERN, &graph);
    assert_eq!(misses.len(), 3, "{misses:#?}");
    let first = &misses[0];
    assert_eq!(first.anchor, mlp, "{misses:#?}");
    assert_eq!(first.anchor_name, names.get(graphrw::Value::new(mlp, 0)));
    let silu = names.get(graph.node(mlp).unwrap().operands()[0]);
    assert_eq!(
        first.message,
        format!("operand 0 of `mul`: expected `mul`, found `silu` {silu}"),
        "{misses:#?}"
    );
    // Its outer `mul`, its up projection and that one's two parameters are there; the
    // norm has the two `mul`s only.
    assert_eq!(first.progress, 4, "{misses:#?}");
    let second = &misses[1];
    assert_eq!(second.anchor, norm, "{misses:#?}");
    assert!(second.progress < first.progress);
    assert!(
        second.message.contains("expected `matmul`, found") && !second.message.contains("sigmoid"),
        "{}",
        second.message
    );
    Ok(())
}

/// A graph without the pattern's anchor op has no candidate at all.
#[test]
fn near_misses_without_the_anchor_op_are_empty() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 8]));
    let wg = g.input("wg", meta(&[8, 8]));
    g.output(&[x.matmul(wg)?.sigmoid()?])?;
    let graph = g.finish();
    assert!(near_misses(&mlp::swiglu_mlp::PATTERN, &graph).is_empty());
    // Explaining a node of another op says which op the pattern starts at.
    let any = graph.outputs()[0].node;
    let why = mlp::swiglu_mlp::PATTERN.explain(&graph, any);
    assert!(!why.matched);
    assert!(
        why.message
            .starts_with("the root: expected `mul`, found `sigmoid`"),
        "{why}"
    );
    Ok(())
}
