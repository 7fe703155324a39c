//! `rules::prepare` builds the pipeline's decision trees ahead of the passes, on other
//! threads while a pass may be building the same trees (as `graphrw optimize` runs it,
//! beside the load). Its own process, so the trees start unbuilt: the pipeline run
//! while two threads prepare must fuse what the pipeline fuses with the trees built,
//! with the same outputs.

use graphrw::exec::run_reference;
use graphrw::{rules, Builder, DType, Graph, TensorMeta};

mod values;
use values::{causal_mask, f32s};

/// `layers` pre-norm layers (batch 2, 4 tokens, 8 features): LayerNorm, single-head
/// causal attention spelled with a mask, tanh-GELU MLP.
fn layers(layers: usize) -> Graph {
    let g = Builder::new();
    let mut h = g.input("x", TensorMeta::new(DType::F32, [2usize, 4, 8]));
    let mask = g.constant(causal_mask(4));
    for l in 0..layers {
        let w = |shape: &[usize], s: usize| g.constant(f32s(shape, 10 * l + s));
        let n = h
            .layer_norm(Some(w(&[8], 1)), Some(w(&[8], 2)))
            .expect("layer_norm");
        let (q, k, v) = (
            n.matmul(w(&[8, 8], 3)).expect("q"),
            n.matmul(w(&[8, 8], 4)).expect("k"),
            n.matmul(w(&[8, 8], 5)).expect("v"),
        );
        let p = k
            .transpose(-2, -1)
            .and_then(|kt| q.matmul(kt))
            .and_then(|s| s.mul(0.35355339))
            .and_then(|s| s.add(mask))
            .and_then(|s| s.softmax(-1))
            .expect("scores");
        let h1 = p.matmul(v).and_then(|o| h.add(o)).expect("residual");
        let f = h1.matmul(w(&[8, 16], 6)).expect("fc1");
        let inner = f
            .pow(3.0)
            .and_then(|c| c.mul(0.044715))
            .and_then(|c| c.add(f))
            .and_then(|c| c.mul(0.7978845608028654))
            .and_then(|c| c.tanh())
            .and_then(|t| t.add(1.0))
            .expect("gelu inner");
        let gelu = f.mul(0.5).and_then(|x| x.mul(inner)).expect("gelu");
        h = gelu
            .matmul(w(&[16, 8], 7))
            .and_then(|o| h1.add(o))
            .expect("fc2");
    }
    g.output(&[h]).expect("output");
    g.finish()
}

#[test]
fn the_pipeline_run_while_other_threads_prepare_fuses_as_with_prepared_trees() {
    let x = f32s(&[2, 4, 8], 11);
    let mut racing = layers(3);
    let want = run_reference(&racing, std::slice::from_ref(&x)).expect("run before");

    let preparers: Vec<_> = (0..2).map(|_| std::thread::spawn(rules::prepare)).collect();
    let raced = rules::optimize(&mut racing).expect("optimize while preparing");
    for p in preparers {
        p.join().expect("prepare panicked");
    }
    // Every tree is built now: the same pipeline on a fresh copy.
    let mut prepared = layers(3);
    let settled = rules::optimize(&mut prepared).expect("optimize prepared");

    assert_eq!(raced.fused_nodes, settled.fused_nodes);
    assert_eq!(raced.nodes_after, settled.nodes_after);
    assert_eq!(
        raced.fused_nodes.get("scaled_dot_product_attention"),
        Some(&3),
        "{raced}"
    );
    assert_eq!(raced.causal.converted, 3, "{raced}");
    assert_eq!(
        raced.fused_nodes.get("fused.gelu_tanh"),
        Some(&3),
        "{raced}"
    );
    for graph in [&racing, &prepared] {
        let got = run_reference(graph, std::slice::from_ref(&x)).expect("run after");
        let (a, b) = (want[0].to_f64_vec(), got[0].to_f64_vec());
        assert_eq!(a.len(), b.len());
        for (p, q) in a.iter().zip(&b) {
            assert!(
                (p - q).abs() <= 1e-4 * (1.0 + p.abs()),
                "{p} before, {q} after"
            );
        }
    }
}
