//! Save verifies big graphs on a second thread while it writes them (above a few
//! thousand nodes): a broken graph must still be refused with the verifier's own first
//! error, wherever the problem sits (first node, middle, last node, the graph's
//! outputs), whatever each public mutation broke; a sound one is written with the
//! bytes of the one-thread path.

use graphrw::onnx::{to_bytes, to_model, OnnxError};
use graphrw::ops::{builtin, AttrValue};
use graphrw::{verify, Builder, DType, Graph, Shape, TensorMeta, Value};
use prost::Message;

/// Layers of the chain: 4 nodes each, so the graph is well above the size at which
/// save checks on a second thread.
const LAYERS: usize = 2_000;

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

/// A long chain `x -> (reshape, relu, softmax, exp)*`: ops written through the table,
/// with constant inputs (reshape) and attributes (softmax); returns the graph and
/// every relu value in order.
fn chain() -> (Graph, Vec<Value>) {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 6]));
    let mut h = x;
    let mut relus = Vec::new();
    for i in 0..LAYERS {
        let shape: &[i64] = if i % 2 == 0 { &[3, 4] } else { &[2, 6] };
        let r = h.reshape(shape).unwrap().relu().unwrap();
        relus.push(r.value());
        h = r.softmax(-1).unwrap().exp().unwrap();
    }
    b.output(&[h]).unwrap();
    (b.finish(), relus)
}

/// A number for each temporary folder of this process (tests run side by side).
fn next_dir() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Save's error for `g` is the verifier's first error, and the file is not written.
fn refused_as_verify_says(g: &Graph, what: &str) {
    let want = verify(g).expect_err(what).to_string();
    let got = to_bytes(g).expect_err(what);
    assert!(matches!(got, OnnxError::Verify(_)), "{what}: {got}");
    assert_eq!(
        got.to_string(),
        format!("the graph is invalid: {want}"),
        "{what}"
    );
    let dir = std::env::temp_dir().join(format!(
        "graphrw-save-verify-{}-{}",
        std::process::id(),
        next_dir()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.onnx");
    let saved = graphrw::onnx::save(g, &path).expect_err(what);
    assert_eq!(saved.to_string(), got.to_string(), "{what}");
    assert!(!path.exists(), "{what}: nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sound_big_graph_is_written_as_the_one_thread_path_writes_it() {
    let (g, _) = chain();
    assert!(g.node_count() > 8_000);
    verify(&g).unwrap();
    let bytes = to_bytes(&g).unwrap();
    // `to_model` builds prost messages from the same exporter; the bytes agree.
    assert_eq!(bytes, to_model(&g).unwrap().encode_to_vec());
    // Deterministic whatever the threads' timing.
    for _ in 0..3 {
        assert_eq!(to_bytes(&g).unwrap(), bytes);
    }
    let back = graphrw::onnx::load_bytes(&bytes).unwrap();
    assert_eq!(back.node_count(), g.node_count());
}

#[test]
fn wrong_metadata_anywhere_is_the_verifiers_error() {
    let (g0, relus) = chain();
    for (what, at) in [("first", 0), ("middle", LAYERS / 2), ("last", LAYERS - 1)] {
        let mut g = g0.clone();
        let v = relus[at];
        let shape = g.meta(v).unwrap().shape.clone();
        let lie = if shape == Shape::known(&[3, 4]) {
            f32s(&[4, 3])
        } else {
            f32s(&[6, 2])
        };
        g.node_mut(v.node).unwrap().set_output_meta(0, lie);
        refused_as_verify_says(&g, what);
    }
}

#[test]
fn an_operand_replaced_by_one_of_another_shape_is_the_verifiers_error() {
    let (g0, relus) = chain();
    // relu k reads a value of shape [3, 4] or [2, 6]; give it one of the other shape.
    for at in [1, LAYERS / 2 + 1, LAYERS - 1] {
        let mut g = g0.clone();
        let relu = relus[at].node;
        let other = relus[at - 1];
        assert_ne!(g.meta(other).unwrap(), g.meta(relus[at]).unwrap());
        g.set_operand(relu, 0, other).unwrap();
        refused_as_verify_says(&g, &format!("set_operand at {at}"));
        let mut g = g0.clone();
        let old = g.node(relu).unwrap().operands()[0];
        g.replace_all_uses(old, other).unwrap();
        refused_as_verify_says(&g, &format!("replace_all_uses at {at}"));
    }
}

#[test]
fn a_cycle_is_the_verifiers_error() {
    let (mut g, relus) = chain();
    let (early, late) = (relus[10], relus[LAYERS - 10]);
    let reshape = g.node(early.node).unwrap().operands()[0].node;
    // The early reshape now reads a late value, which depends on it.
    g.set_operand(reshape, 0, late).unwrap();
    refused_as_verify_says(&g, "cycle");
}

#[test]
fn nodes_the_exporter_cannot_read_are_the_verifiers_error() {
    let (g0, relus) = chain();
    for at in [0, LAYERS / 2, LAYERS - 1] {
        let y = relus[at];
        // A matmul with one operand: the exporter would read a second one.
        let mut g = g0.clone();
        g.add_node_unchecked(&builtin::MATMUL, vec![y], vec![], vec![f32s(&[2, 3])]);
        refused_as_verify_says(&g, "operand count");
        // A softmax whose dim is a float.
        let mut g = g0.clone();
        g.add_node_unchecked(
            &builtin::SOFTMAX,
            vec![y],
            vec![AttrValue::Float(1.0)],
            vec![g0.meta(y).unwrap().clone()],
        );
        refused_as_verify_says(&g, "attribute kind");
        // A use of a node that does not exist.
        let mut g = g0.clone();
        let ghost = Value::new(graphrw::NodeId::new(999_999), 0);
        g.add_node_unchecked(&builtin::NEG, vec![ghost], vec![], vec![f32s(&[2, 3])]);
        refused_as_verify_says(&g, "dangling");
        // Two outputs where relu makes one.
        let mut g = g0.clone();
        let m = g0.meta(y).unwrap().clone();
        g.add_node_unchecked(&builtin::RELU, vec![y], vec![], vec![m.clone(), m]);
        refused_as_verify_says(&g, "output count");
    }
}
