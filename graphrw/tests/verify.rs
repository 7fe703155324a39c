//! The verifier rejects cycles, dangling uses, wrong metadata and wrong attribute
//! kinds, naming the node as the printer shows it.

use graphrw::ops::{builtin, AttrValue};
use graphrw::{verify, Builder, DType, Graph, GraphError, Shape, TensorMeta, Value};

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

fn small() -> (Graph, Value, Value) {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = x.relu().unwrap();
    let z = y.exp().unwrap();
    b.output(&[z]).unwrap();
    let (y, z) = (y.value(), z.value());
    (b.finish(), y, z)
}

fn message(e: GraphError) -> String {
    e.to_string()
}

#[test]
fn accepts_a_well_built_graph() {
    let (g, _, _) = small();
    verify(&g).unwrap();
}

#[test]
fn rejects_a_cycle() {
    let (mut g, y, z) = small();
    // relu now reads exp's output, which reads relu: a cycle.
    g.set_operand(y.node, 0, z).unwrap();
    let m = message(verify(&g).unwrap_err());
    assert!(m.contains("cycle"), "{m}");
    assert!(
        m.contains("relu") || m.contains("exp"),
        "names the node: {m}"
    );
}

#[test]
fn rejects_a_dangling_use() {
    let (mut g, y, _) = small();
    let ghost = Value::new(graphrw::NodeId::new(999), 0);
    g.add_node_unchecked(&builtin::NEG, vec![ghost], vec![], vec![f32s(&[2, 3])]);
    let _ = y;
    let m = message(verify(&g).unwrap_err());
    assert!(m.contains("dangling") && m.contains("neg"), "{m}");
}

#[test]
fn rejects_wrong_metadata() {
    let (mut g, y, _) = small();
    g.node_mut(y.node)
        .unwrap()
        .set_output_meta(0, f32s(&[3, 2]));
    let m = message(verify(&g).unwrap_err());
    assert!(
        m.contains("relu") && m.contains("f32[2, 3]") && m.contains("disagrees"),
        "{m}"
    );
}

#[test]
fn rejects_wrong_attribute_kind() {
    let (mut g, y, _) = small();
    g.add_node_unchecked(
        &builtin::SOFTMAX,
        vec![y],
        vec![AttrValue::Float(1.0)],
        vec![f32s(&[2, 3])],
    );
    let m = message(verify(&g).unwrap_err());
    assert!(
        m.contains("softmax") && m.contains("`dim` should be int"),
        "{m}"
    );
}

#[test]
fn rejects_wrong_operand_count() {
    let (mut g, y, _) = small();
    g.add_node_unchecked(&builtin::MATMUL, vec![y], vec![], vec![f32s(&[2, 3])]);
    let m = message(verify(&g).unwrap_err());
    assert!(
        m.contains("matmul") && m.contains("takes 2 operands"),
        "{m}"
    );
}

#[test]
fn rejects_constant_metadata_that_lies() {
    let b = Builder::new();
    let c = b.constant(graphrw::Tensor::zeros(DType::F32, &[4]));
    b.output(&[c]).unwrap();
    let c = c.value();
    let mut g = b.finish();
    g.node_mut(c.node).unwrap().set_output_meta(0, f32s(&[5]));
    let m = message(verify(&g).unwrap_err());
    assert!(m.contains("constant") && m.contains("f32[4]"), "{m}");
}

#[test]
fn remove_node_refuses_used_nodes_and_dce_removes_dead_ones() {
    let (mut g, y, z) = small();
    assert!(matches!(
        g.remove_node(y.node),
        Err(GraphError::StillUsed { .. })
    ));
    assert!(matches!(
        g.remove_node(z.node),
        Err(GraphError::IsOutput { .. })
    ));
    // Route the output around exp: exp becomes dead.
    g.set_outputs(vec![y]).unwrap();
    assert_eq!(g.remove_dead(), 1);
    verify(&g).unwrap();
    assert_eq!(g.nodes_with_op("exp").count(), 0);
}

#[test]
fn use_counts_follow_every_mutation_and_dce_cascades() {
    // x -> relu -> exp (output); x -> neg -> tanh -> neg2 (dead chain), and neg2 uses
    // tanh twice through an add.
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = x.relu().unwrap();
    let z = y.exp().unwrap();
    let n = x.neg().unwrap();
    let t = n.tanh().unwrap();
    let d = t.add(t).unwrap();
    b.output(&[z]).unwrap();
    let (x, y, z, n, t, d) = (
        x.value(),
        y.value(),
        z.value(),
        n.value(),
        t.value(),
        d.value(),
    );
    let mut g = b.finish();
    let count = |g: &Graph, v: Value| g.node_use_count(v.node);
    assert_eq!(
        [
            count(&g, x),
            count(&g, y),
            count(&g, z),
            count(&g, t),
            count(&g, d)
        ],
        [2, 1, 0, 2, 0]
    );
    verify(&g).unwrap();
    // Per value, the same counts as the edges give.
    for v in [x, y, z, t, d] {
        assert_eq!(g.use_count(v), g.uses(v).count());
        assert_eq!(g.use_count(v), count(&g, v));
    }
    // Rewiring moves a use from one producer to another.
    g.set_operand(z.node, 0, n).unwrap();
    assert_eq!([count(&g, y), count(&g, n)], [0, 2]);
    verify(&g).unwrap();
    // Removing a node releases its operands' uses.
    g.remove_node(y.node).unwrap();
    assert_eq!(count(&g, x), 1);
    verify(&g).unwrap();
    // DCE removes the dead chain add <- tanh (tanh was used twice by the add), keeps
    // neg (now read by exp) and the input, and the counts stay right.
    assert_eq!(g.remove_dead(), 2);
    assert_eq!(g.node_count(), 3);
    assert_eq!([count(&g, x), count(&g, n), count(&g, t)], [1, 1, 0]);
    verify(&g).unwrap();
    // A dead input is kept; nothing is left to remove.
    g.set_outputs(vec![x]).unwrap();
    assert_eq!(g.remove_dead(), 2);
    assert_eq!(g.node_count(), 1);
    assert_eq!(g.remove_dead(), 0);
    verify(&g).unwrap();
}
