//! Matcher tests on small graphs built with the builder.

use graphrw::pattern::{AttrPat, Bound, ConstPat, OpPat, PatNode};
use graphrw::{
    pattern, replacement, rule_set, Builder, DType, GraphError, PatternMatch, TensorMeta,
};

pattern! {
    /// Inductor's first SDPA pattern.
    pub fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    }

    /// Keyword attributes, function syntax and constraints.
    fn softmax_last(x: Tensor) -> Tensor
    where
        rank(x) == 4,
        dtype(x) == f32,
    {
        softmax(x, dim = -1)
    }

    /// Alternatives.
    fn scale(x: Tensor, s: f64) -> Tensor {
        x.div(s) | x.mul(s)
    }

    /// Same name, same value.
    fn square(x: Tensor) -> Tensor {
        x.mul(x)
    }

    /// Repetition.
    fn relus(x: Tensor) -> Tensor {
        repeat(x, |t| t.relu(), 2..=3).neg()
    }

    /// Multi-output.
    fn two(x: Tensor) -> (Tensor, Tensor) {
        (x.relu(), x.sigmoid())
    }

    /// Attribute params and `let`.
    fn tr(x: Tensor, a: i64, b: i64) -> Tensor
    where
        a != b,
        users(t) == 1,
    {
        let t = x.transpose(a, b);
        t.relu()
    }

    /// `check` escape hatch.
    fn big_scale(x: Tensor, s: f64) -> Tensor
    where
        check(|x, s| x.rank() >= 2 && s > 2.0),
    {
        x.mul(s)
    }

    /// dims
    fn qk(q: Tensor, k: Tensor) -> Tensor
    where
        dim(q, -1) == dim(k, -1),
    {
        q.matmul(k.transpose(_, _))
    }
}

replacement! {
    /// sfdp_1 as one node.
    pub fn sfdp_1_fused(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor for sfdp_1 {
        query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(1.0 / inv_scale), false)?
    }
}

rule_set! {
    /// A tiny set.
    pub static TINY;

    /// div by a constant becomes mul.
    rule div_const(x: Tensor, s: f64) -> Tensor where s != 0.0 {
        x.div(s)
    } => {
        x.mul(1.0 / s)?
    }

    /// double negation
    #[verify(skip = "a matcher fixture: its replacement matches its pattern again, so rewriting never ends (the tests only match)")]
    rule neg_neg(x: Tensor) -> Tensor {
        x.neg().neg()
    } => {
        x.relu()?.neg()?.neg()?
    }
}

fn meta(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(
        DType::F32,
        graphrw::Shape::known(&shape.iter().map(|&d| d as u64).collect::<Vec<_>>()),
    )
}

#[test]
fn sfdp_1_matches_builder_graph() -> Result<(), GraphError> {
    let g = Builder::new();
    let q = g.input("q", meta(&[1, 4, 16, 8]));
    let k = g.input("k", meta(&[1, 4, 16, 8]));
    let v = g.input("v", meta(&[1, 4, 16, 8]));
    let out = q
        .matmul(k.transpose(-2, -1)?)?
        .div(8f64.sqrt())?
        .softmax(-1)?
        .matmul(v)?;
    g.output(&[out])?;
    let (q, k, v, out) = (q.value(), k.value(), v.value(), out.value());
    let graph = g.finish();
    let ms = sfdp_1::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1);
    let m: sfdp_1::Match = ms[0].typed();
    assert_eq!(m.query, q);
    assert_eq!(m.key, k);
    assert_eq!(m.value, v);
    assert!((m.inv_scale - 8f64.sqrt()).abs() < 1e-6);
    assert_eq!(ms[0].outputs, vec![out]);
    assert_eq!(ms[0].nodes.len(), 6); // 5 ops + the scale constant
                                      // The replacement builds on a builder holding the graph.
    let b = Builder::from_graph(graph);
    let outs = sfdp_1_fused(&b, &ms[0].bindings)?;
    let graph = b.finish();
    assert_eq!(
        graph.node(outs[0].node).unwrap().op_name(),
        "scaled_dot_product_attention"
    );
    assert_eq!(sfdp_1::PATTERN.op_count, 5);
    Ok(())
}

#[test]
fn emitted_tree_of_sfdp_1() {
    use graphrw::ops::builtin::*;
    let nodes = sfdp_1::PATTERN.nodes;
    assert_eq!(nodes.len(), 9);
    assert_eq!(nodes[0], PatNode::Tensor(0));
    assert_eq!(nodes[1], PatNode::Tensor(1));
    assert_eq!(
        nodes[2],
        PatNode::Op(OpPat {
            op: &TRANSPOSE,
            operands: &[1],
            more_operands: false,
            attrs: &[
                graphrw::pattern::AttrCheck {
                    index: 0,
                    name: "dim0",
                    pat: AttrPat::Int(-2)
                },
                graphrw::pattern::AttrCheck {
                    index: 1,
                    name: "dim1",
                    pat: AttrPat::Int(-1)
                },
            ],
            slot: Some(4),
        })
    );
    assert_eq!(nodes[4], PatNode::Const(ConstPat::Param(3)));
    assert_eq!(sfdp_1::PATTERN.roots.len(), 1);
    assert_eq!(sfdp_1::PATTERN.anchors, &[&MATMUL]);
    assert_eq!(
        sfdp_1::PATTERN.to_string(),
        "pattern sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {\n    \
         matmul(softmax(div(matmul(query, transpose(key, dim0=-2, dim1=-1)), inv_scale), dim=-1), value)\n}"
    );
}

#[test]
fn alternatives_commutative_and_same_name() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 3]));
    let a = x.div(2.0)?;
    let b = g.mul(3.0, x)?; // constant first: commutative order
    let c = x.mul(x)?;
    let y = x.relu()?;
    let d = x.mul(y)?;
    g.output(&[a, g.var(b), c, d])?;
    let c = c.value();
    let graph = g.finish();
    let ms = scale::PATTERN.find(&graph);
    assert_eq!(ms.len(), 2);
    assert_eq!(ms[0].get("s"), Some(&Bound::Float(2.0)));
    assert_eq!(ms[1].get("s"), Some(&Bound::Float(3.0)));
    let sq = square::PATTERN.find(&graph);
    assert_eq!(sq.len(), 1);
    assert_eq!(sq[0].outputs[0], c);
    Ok(())
}

#[test]
fn constraints_and_attributes() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[1, 2, 3, 4]));
    let s1 = x.softmax(-1)?;
    let s2 = x.softmax(1)?;
    let z = g.input("z", meta(&[3, 4]));
    let s3 = z.softmax(-1)?;
    let t = x.transpose(1, 2)?.relu()?;
    let t2 = x.transpose(1, 1)?;
    let t3 = t2.relu()?;
    let t4 = t2.sigmoid()?;
    g.output(&[s1, s2, s3, t, t3, t4])?;
    let s1 = s1.value();
    let graph = g.finish();
    let ms = softmax_last::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].outputs[0], s1);
    let ms = tr::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1, "a != b, and the transpose has one user");
    let m: tr::Match = ms[0].typed();
    assert_eq!((m.a, m.b), (1, 2));
    Ok(())
}

#[test]
fn check_closure_and_dims() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2, 3]));
    let a = x.mul(3.0)?;
    let b = x.mul(1.5)?;
    let q = g.input("q", meta(&[4, 8]));
    let k = g.input("k", meta(&[5, 8]));
    let q2 = g.input("q2", meta(&[2, 4, 8]));
    let k2 = g.input("k2", meta(&[8, 8, 2]));
    let c = q.matmul(k.transpose(0, 1)?)?;
    let d = q2.matmul(k2.transpose(0, 2)?)?;
    g.output(&[a, b, c, d])?;
    let (a, c) = (a.value(), c.value());
    let graph = g.finish();
    let ms = big_scale::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].outputs[0], a);
    let ms = qk::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].outputs[0], c);
    Ok(())
}

#[test]
fn repetition_longest_first_and_bounds() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2]));
    let one = x.relu()?.neg()?;
    let two = x.relu()?.relu()?.neg()?;
    let four = x.relu()?.relu()?.relu()?.relu()?.neg()?;
    g.output(&[one, two, four])?;
    let (x, two, four) = (x.value(), two.value(), four.value());
    let graph = g.finish();
    let ms = relus::PATTERN.find(&graph);
    assert_eq!(ms.len(), 2);
    assert_eq!(ms[0].outputs[0], two);
    assert_eq!(ms[0].get("x"), Some(&Bound::Value(x)));
    // Four relus: three are taken, the base `x` binds the first relu.
    assert_eq!(ms[1].outputs[0], four);
    assert_eq!(ms[1].nodes.len(), 4);
    Ok(())
}

#[test]
fn multi_output() -> Result<(), GraphError> {
    let g = Builder::new();
    let x = g.input("x", meta(&[2]));
    let y = g.input("y", meta(&[2]));
    let r = x.relu()?;
    let s = x.sigmoid()?;
    let r2 = y.relu()?;
    g.output(&[r, s, r2])?;
    let (r, s) = (r.value(), s.value());
    let graph = g.finish();
    let ms = two::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].outputs, vec![r, s]);
    assert_eq!(two::OUTPUTS, 2);
    Ok(())
}

#[test]
fn rule_set_order_and_replacement() -> Result<(), GraphError> {
    assert_eq!(TINY.rules.len(), 2);
    assert_eq!(TINY.rules[0].name, "neg_neg");
    assert_eq!(TINY.rules[0].priority, 2);
    assert_eq!(TINY.rules[1].name, "div_const");
    let g = Builder::new();
    let x = g.input("x", meta(&[2]));
    let y = x.div(4.0)?;
    g.output(&[y])?;
    let graph = g.finish();
    let ms = div_const::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1);
    let b = Builder::from_graph(graph);
    let out = (div_const::RULE.replace)(&b, &ms[0].bindings)?;
    let graph = b.finish();
    let node = graph.node(out[0].node).unwrap();
    assert_eq!(node.op_name(), "mul");
    let c = graph.node(node.operands()[1].node).unwrap();
    assert_eq!(c.payload().unwrap().to_f64_vec(), vec![0.25]);
    assert!(sfdp_1::Match::pattern().name == "sfdp_1");
    Ok(())
}
