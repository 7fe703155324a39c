//! Debug builds verify what each rewrite touched, not the whole graph per rewrite, so
//! `optimize` stays linear in the graph's size. Counted in checked nodes
//! ([`Report::verified`](graphrw::rewrite::Report::verified)), not in seconds.

use graphrw::rewrite::Verify;
use graphrw::rules::{optimize, optimize_with};
use graphrw::{Builder, DType, Graph, TensorMeta};

/// A chain of tanh-form GELUs (as GPT-2 writes them), each one fused by `optimize`,
/// with at least `nodes` nodes.
fn gelu_chain(nodes: usize) -> Graph {
    let b = Builder::new();
    let mut x = b.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
    while b.with_graph(Graph::node_count) < nodes {
        let inner = x
            .pow(3.0)
            .unwrap()
            .mul(0.044715)
            .unwrap()
            .add(x)
            .unwrap()
            .mul(0.797_884_560_802_865_4)
            .unwrap()
            .tanh()
            .unwrap();
        x = x.mul(0.5).unwrap().mul(inner.add(1.0).unwrap()).unwrap();
    }
    b.output(&[x]).unwrap();
    b.finish()
}

/// Checked nodes per node of the graph given, and the number of GELUs fused.
fn verified_per_node(nodes: usize, verify: Verify) -> (f64, usize) {
    let mut g = gelu_chain(nodes);
    let n = g.node_count();
    let done = optimize_with(&mut g, verify).unwrap();
    let fused = done
        .fused_nodes
        .get("fused.gelu_tanh")
        .copied()
        .unwrap_or(0);
    (done.verified() as f64 / n as f64, fused)
}

#[test]
fn debug_builds_verify_locally_by_default() {
    let want = if cfg!(debug_assertions) {
        Verify::Local
    } else {
        Verify::Off
    };
    assert_eq!(Verify::default(), want);
}

#[test]
fn optimize_of_100k_nodes_verifies_a_constant_amount_per_node() {
    // What `optimize` does in this build (`cargo test` has debug assertions on).
    let mut small = gelu_chain(25_000);
    let mut big = gelu_chain(100_000);
    let (n_small, n_big) = (small.node_count(), big.node_count());
    let done_small = optimize(&mut small).unwrap();
    let done_big = optimize(&mut big).unwrap();
    let fused_big = done_big.fused_nodes.get("fused.gelu_tanh").copied();
    assert!(
        fused_big.is_some_and(|f| f * 10 > n_big / 2),
        "the chain is rewritten all along: {done_big}"
    );
    if Verify::default() == Verify::Off {
        // A release build checks nothing.
        assert_eq!(done_big.verified(), 0);
        return;
    }
    let per_small = done_small.verified() as f64 / n_small as f64;
    let per_big = done_big.verified() as f64 / n_big as f64;
    // A whole-graph check per rewrite would make the big graph's cost per node about
    // four times the small one's; a local check keeps it the same.
    assert!(
        per_big <= 2.0 * per_small,
        "checked nodes per node: {per_small:.1} at {n_small} nodes, {per_big:.1} at {n_big}"
    );
}

#[test]
fn the_counter_sees_a_quadratic_check() {
    // The same measure on `Verify::Full` grows with the graph: the test above could fail.
    let (small, fused_small) = verified_per_node(500, Verify::Full);
    let (big, fused_big) = verified_per_node(2_000, Verify::Full);
    assert!(
        fused_big > 3 * fused_small,
        "{fused_small} then {fused_big} fused"
    );
    assert!(
        big > 3.0 * small,
        "{small:.1} then {big:.1} checked nodes per node"
    );
    // And the local check does much less at that size.
    let (local, _) = verified_per_node(2_000, Verify::Local);
    assert!(local * 5.0 < big, "local {local:.1}, full {big:.1}");
    let (off, _) = verified_per_node(2_000, Verify::Off);
    assert_eq!(off, 0.0);
}
