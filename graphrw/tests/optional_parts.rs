//! Optional parts of patterns (`x.mul(s?)`, `opt(x, |t| ..)`): one pattern matches every
//! form, binds `None`/`Some` for what is absent/present, and explains a mismatch in the
//! optional part.

use graphrw::pattern::explain;
use graphrw::{pattern, rule_set, Builder, DType, GraphError, TensorMeta, Value, Var};

pattern! {
    /// Attention with an optional scale, mask and NaN guard.
    fn attn(q: Tensor, kt: Tensor, v: Tensor, s: Option<f64>, mask: Option<Tensor>) -> Tensor {
        let p = q.matmul(kt).mul(s?).add(mask?).softmax(-1);
        opt(p, |p| p.isnan().where_(0.0, p)).matmul(v)
    }

    /// An optional operand in function syntax, with a constraint on it.
    fn shifted(x: Tensor, b: Option<f64>) -> Tensor
    where
        b > 0.0,
    {
        add(x.relu(), b?).neg()
    }
}

rule_set! {
    /// The replacement sees `Option<Var>` and `Option<f64>`.
    static FUSE;

    #[verify(skip = "a fixture of `Option` plumbing: with no scale it leaves the fused node sdpa's default 1/sqrt(d), not 1 (the built-in `attention` rule passes `s.unwrap_or(1.0)`)")]
    rule fuse(q: Tensor, kt: Tensor, v: Tensor, s: Option<f64>, mask: Option<Tensor>) -> Tensor {
        let p = q.matmul(kt).mul(s?).add(mask?).softmax(-1);
        opt(p, |p| p.isnan().where_(0.0, p)).matmul(v)
    } => {
        let k: Var = kt.transpose(-2, -1)?;
        q.scaled_dot_product_attention_with(k, v, mask, 0.0, false, s, false)?
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

/// One attention block; returns the builder's graph, the anchor, and the mask input.
struct Form {
    scale: bool,
    mask: bool,
    guard: bool,
}

fn build(f: &Form) -> Result<(graphrw::Graph, Value, Value), GraphError> {
    let g = Builder::new();
    let m = meta(&[1, 2, 4, 8]);
    let q = g.input("q", m.clone());
    let kt = g.input("kt", meta(&[1, 2, 8, 4]));
    let v = g.input("v", meta(&[1, 2, 4, 8]));
    let mask = g.input("mask", meta(&[1, 1, 4, 4]));
    let mut p = q.matmul(kt)?;
    if f.scale {
        p = p.mul(0.125)?;
    }
    if f.mask {
        p = p.add(mask)?;
    }
    let mut p = p.softmax(-1)?;
    if f.guard {
        p = p.isnan()?.where_(0.0, p)?;
    }
    let out = p.matmul(v)?;
    g.output(&[out])?;
    let (out, mask) = (out.value(), mask.value());
    Ok((g.finish(), out, mask))
}

fn forms() -> Vec<Form> {
    let mut out = Vec::new();
    for bits in 0..8u8 {
        out.push(Form {
            scale: bits & 1 != 0,
            mask: bits & 2 != 0,
            guard: bits & 4 != 0,
        });
    }
    out
}

#[test]
fn one_pattern_matches_every_form_and_binds_what_is_present() -> Result<(), GraphError> {
    for f in forms() {
        let (graph, out, mask) = build(&f)?;
        let ms = attn::PATTERN.find(&graph);
        assert_eq!(
            ms.len(),
            1,
            "scale {} mask {} guard {}",
            f.scale,
            f.mask,
            f.guard
        );
        assert_eq!(ms[0].outputs, vec![out]);
        let m: attn::Match = ms[0].typed();
        assert_eq!(m.s, f.scale.then_some(0.125));
        assert_eq!(m.mask, f.mask.then_some(mask));
        // matmul, softmax, matmul; the scale's mul and its constant; the add; isnan,
        // where and its 0.
        let nodes = 3 + 2 * usize::from(f.scale) + usize::from(f.mask) + 3 * usize::from(f.guard);
        assert_eq!(ms[0].nodes.len(), nodes, "{:?}", ms[0].nodes);
    }
    Ok(())
}

#[test]
fn the_replacement_gets_none_and_some() -> Result<(), GraphError> {
    for f in forms() {
        let (graph, _, mask) = build(&f)?;
        let ms = fuse::PATTERN.find(&graph);
        assert_eq!(ms.len(), 1);
        let b = Builder::from_graph(graph);
        let out = (fuse::RULE.replace)(&b, &ms[0].bindings)?;
        let graph = b.finish();
        let node = graph.node(out[0].node).expect("the fused node");
        assert_eq!(node.op_name(), "scaled_dot_product_attention");
        let operands = node.operands();
        assert_eq!(operands.get(3).copied(), f.mask.then_some(mask));
        let scale = format!("{:?}", node.attr_values());
        assert_eq!(
            scale.contains("0.125"),
            f.scale,
            "scale attribute {scale} (form with scale: {})",
            f.scale
        );
    }
    Ok(())
}

#[test]
fn an_absent_part_is_not_a_wildcard() -> Result<(), GraphError> {
    // A `mul` by a tensor (not a constant) is neither the scale nor absent.
    let g = Builder::new();
    let m = meta(&[1, 2, 4, 4]);
    let (q, kt, v, t) = (
        g.input("q", m.clone()),
        g.input("kt", m.clone()),
        g.input("v", m.clone()),
        g.input("t", m),
    );
    let out = q.matmul(kt)?.mul(t)?.softmax(-1)?.matmul(v)?;
    g.output(&[out])?;
    let anchor = out.value().node;
    let graph = g.finish();
    assert!(attn::PATTERN.find(&graph).is_empty());
    // Explain names the optional part's mismatch: the scale operand is not a constant.
    let e = explain(&attn::PATTERN, &graph, anchor);
    assert!(!e.matched);
    let text = e.to_string();
    assert!(text.contains("mul"), "{text}");
    assert!(text.contains("constant"), "{text}");
    Ok(())
}

#[test]
fn optional_operand_in_function_syntax_and_constraints_run_only_when_present(
) -> Result<(), GraphError> {
    for (shift, expect) in [(None, true), (Some(2.0), true), (Some(-1.0), false)] {
        let g = Builder::new();
        let x = g.input("x", meta(&[3]));
        let mut y = x.relu()?;
        if let Some(b) = shift {
            y = y.add(b)?;
        }
        let out = y.neg()?;
        g.output(&[out])?;
        let graph = g.finish();
        let ms = shifted::PATTERN.find(&graph);
        assert_eq!(ms.len(), usize::from(expect), "shift {shift:?}");
        if let Some(m) = ms.first() {
            let m: shifted::Match = m.typed();
            assert_eq!(m.b, shift);
        }
    }
    Ok(())
}
