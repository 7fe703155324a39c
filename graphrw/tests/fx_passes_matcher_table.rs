//! The matcher table of PyTorch FX's `test/test_fx_passes.py` (as described in
//! `shared/peers/fx_suite.md`), written anew in graphrw's DSL. graphrw patterns are
//! always "FF" (no match_output / match_placeholder), so only the FF column is ported.
//! The FF count here is what a rewrite could apply: matches that are safe
//! (`check_safe`: no escaping interior value, convex) and, greedily in discovery order,
//! share no op node with a match already kept (FX's remove_overlapping_matches).
//! graphrw's `find` returns at most one match per anchor node, so its raw counts are
//! never FX's permutation counts.
//!
//! Skipped: MultipleOutputsMultipleNonOverlappingMatches (the description gives only
//! "relu1 also feeds relu2 so it leaks"; the leak case is covered by
//! NonFullyContainedMatches).

use std::collections::HashSet;

use graphrw::rewrite::apply::{check_safe, Unsafe};
use graphrw::{pattern, Builder, DType, Graph, NodeId, Pattern, TensorMeta};

fn meta() -> TensorMeta {
    TensorMeta::new(DType::F32, [2usize, 2])
}

fn build(f: impl FnOnce(&Builder)) -> Graph {
    let b = Builder::new();
    f(&b);
    b.finish()
}

/// Safe matches, greedily without overlap.
fn ff(pattern: &'static Pattern, g: &Graph) -> usize {
    let mut taken: HashSet<NodeId> = HashSet::new();
    let mut n = 0;
    for m in pattern.find(g) {
        if check_safe(g, &m).is_err() {
            continue;
        }
        let ops: Vec<NodeId> = m
            .nodes
            .iter()
            .copied()
            .filter(|&id| !g.node(id).unwrap().op().is_source_leaf())
            .collect();
        if ops.iter().any(|id| taken.contains(id)) {
            continue;
        }
        taken.extend(ops);
        n += 1;
    }
    n
}

pattern! {
    fn single_neg(x: Tensor) -> Tensor { x.neg() }
    fn sum_cat(a: Tensor, b: Tensor) -> Tensor { concat([a, b], 0).sum(..) }
    fn full_graph(x: Tensor) -> Tensor { x.relu().sigmoid() }
    fn diamond(x: Tensor) -> Tensor { let r = x.relu(); r.sigmoid().add(r.relu()) }
    fn mm_cat_cat(b1: Tensor, w1: Tensor, w2: Tensor, x: Tensor, b2: Tensor) -> Tensor {
        concat([w1, w2], 0).matmul(concat([x, b2], 0).transpose(0, 1)).add(b1)
    }
    fn sigmoid2(x: Tensor) -> Tensor { x.sigmoid().sigmoid() }
    fn with_dependency(x: Tensor) -> (Tensor, Tensor) {
        let b = x.relu().sigmoid();
        (b.neg(), b)
    }
    fn without_dependency(x: Tensor) -> (Tensor, Tensor) { (x.relu(), x.sigmoid()) }
    fn relu_sigmoid_sum(x: Tensor) -> (Tensor, Tensor, Tensor) {
        let r = x.relu();
        (r.sigmoid(), r.sum(..), r)
    }
    fn identical_anchor(x: Tensor) -> (Tensor, Tensor) { (x.relu(), x.relu()) }
    fn horizontal(x: Tensor, y: Tensor) -> (Tensor, Tensor) { (x.add(y), x.sub(y)) }
    fn lin_mul(a: Tensor, w: Tensor, b: Tensor, c: Tensor) -> (Tensor, Tensor) {
        let lin = a.matmul(w).add(b);
        (lin.mul(c), lin)
    }
    fn fp8(x: Tensor, z: f64) -> Tensor { x.maximum(z).minimum(z) }
    fn no_anchor(x: Tensor) -> Tensor { x.tanh() }
}

#[test]
fn matcher_table_single_node_pattern() {
    let g = build(|b| {
        let v = b.input("x", meta()).neg().unwrap();
        b.output(&[v.add(v).unwrap()]).unwrap();
    });
    assert_eq!(ff(&single_neg::PATTERN, &g), 1);
}

#[test]
fn matcher_table_simple_pattern() {
    let g = build(|b| {
        let (w1, w2) = (b.input("w1", meta()).value(), b.input("w2", meta()).value());
        let s1 = b
            .var(b.concat(&[w1, w2], 0).unwrap())
            .sum(&[], false)
            .unwrap();
        let s2 = b
            .var(b.concat(&[w2, w1], 0).unwrap())
            .sum(&[], false)
            .unwrap();
        let (m1, m2) = (b.var(w1).relu().unwrap(), b.var(w2).neg().unwrap());
        let s3 = b
            .var(b.concat(&[m1.value(), m2.value()], 0).unwrap())
            .sum(&[], false)
            .unwrap();
        b.output(&[s1.add(s2).unwrap().add(s3).unwrap()]).unwrap();
    });
    assert_eq!(ff(&sum_cat::PATTERN, &g), 3);
}

#[test]
fn matcher_table_simple_full_graph_matching() {
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.relu().unwrap().sigmoid().unwrap()]).unwrap();
    });
    assert_eq!(ff(&full_graph::PATTERN, &g), 1);
}

#[test]
fn matcher_table_diamond_shape() {
    let g = build(|b| {
        let r = b.input("x", meta()).neg().unwrap().relu().unwrap();
        b.output(&[r.sigmoid().unwrap().add(r.relu().unwrap()).unwrap()])
            .unwrap();
    });
    assert_eq!(ff(&diamond::PATTERN, &g), 1);
}

#[test]
fn matcher_table_non_fully_contained_matches() {
    // Two addmm(cat, t(cat)) sites; in the second, the first cat also feeds a relu.
    let g = build(|b| {
        let m = TensorMeta::new(DType::F32, [2usize, 3]);
        let bias = TensorMeta::new(DType::F32, [4usize, 4]);
        let ins: Vec<_> = ["w1", "w2", "x", "b2"]
            .iter()
            .map(|n| b.input(n, m.clone()).value())
            .collect();
        let b1 = b.input("b1", bias);
        let site = |leak: bool| {
            let c1 = b.var(b.concat(&ins[..2], 0).unwrap());
            let c2 = b.var(b.concat(&ins[2..], 0).unwrap());
            let a = c1
                .matmul(c2.transpose(0, 1).unwrap())
                .unwrap()
                .add(b1)
                .unwrap();
            if leak {
                a.add(c1.relu().unwrap().sum(&[], false).unwrap()).unwrap()
            } else {
                a
            }
        };
        let (a1, a2) = (site(false), site(true));
        b.output(&[a1.add(a2).unwrap()]).unwrap();
    });
    assert_eq!(mm_cat_cat::PATTERN.find(&g).len(), 2);
    assert_eq!(ff(&mm_cat_cat::PATTERN, &g), 1);
}

#[test]
fn matcher_table_chain_repeated_pattern() {
    let g = build(|b| {
        let mut y = b.input("x", meta());
        for _ in 0..4 {
            y = y.sigmoid().unwrap();
        }
        b.output(&[y]).unwrap();
    });
    assert_eq!(sigmoid2::PATTERN.find(&g).len(), 3); // FX: FF3 without overlap removal
    assert_eq!(ff(&sigmoid2::PATTERN, &g), 2);
}

#[test]
fn matcher_table_multiple_outputs_with_dependency() {
    let g = build(|b| {
        let y = b.input("x", meta()).relu().unwrap().sigmoid().unwrap();
        let z = y.neg().unwrap();
        b.output(&[z, y]).unwrap();
    });
    assert_eq!(ff(&with_dependency::PATTERN, &g), 1);
}

#[test]
fn matcher_table_multiple_outputs_without_dependency() {
    let g = build(|b| {
        let x = b.input("x", meta());
        let (r, s) = (x.relu().unwrap(), x.sigmoid().unwrap());
        b.output(&[r.add(s).unwrap()]).unwrap();
    });
    assert_eq!(ff(&without_dependency::PATTERN, &g), 1);
}

#[test]
fn matcher_table_multiple_outputs_multiple_overlapping_matches() {
    let g = build(|b| {
        let r = b.input("x", meta()).relu().unwrap();
        let (s1, s2) = (r.sigmoid().unwrap(), r.sigmoid().unwrap());
        let (u1, u2) = (r.sum(&[], false).unwrap(), r.sum(&[], false).unwrap());
        b.output(&[s1, s2, u1, u2]).unwrap();
    });
    // FX: 4 raw matches (every sigmoid × sum pairing); graphrw: one per anchor (2).
    assert_eq!(relu_sigmoid_sum::PATTERN.find(&g).len(), 2);
    assert_eq!(ff(&relu_sigmoid_sum::PATTERN, &g), 1);
}

#[test]
fn matcher_table_multiple_outputs_identical_anchor() {
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.relu().unwrap(), x.relu().unwrap()]).unwrap();
    });
    // FX gives 2 without overlap removal (the swapped-anchor duplicate); the right
    // answer is 1, and no match may bind one node to both outputs.
    for m in identical_anchor::PATTERN.find(&g) {
        assert_ne!(m.outputs[0], m.outputs[1], "both outputs bound to one node");
    }
    assert_eq!(ff(&identical_anchor::PATTERN, &g), 1);
}

#[test]
fn matcher_table_multiple_outputs_horizontal_pattern() {
    let g = build(|b| {
        let (x, y) = (b.input("x", meta()), b.input("y", meta()));
        b.output(&[x.add(y).unwrap(), x.sub(y).unwrap()]).unwrap();
    });
    assert_eq!(ff(&horizontal::PATTERN, &g), 1);
}

#[test]
fn matcher_table_multi_output_with_invalid_matches() {
    // r0 = linear; r1 = sigmoid(r0); r0 * r1 vs (lin * c, lin): c binds r1, which
    // depends on lin through sigmoid outside the match: fusing would make a cycle.
    let g = build(|b| {
        let (a, w, bias) = (
            b.input("a", meta()),
            b.input("w", meta()),
            b.input("b", meta()),
        );
        let r0 = a.matmul(w).unwrap().add(bias).unwrap();
        let r1 = r0.sigmoid().unwrap();
        b.output(&[r0.mul(r1).unwrap()]).unwrap();
    });
    let found = lin_mul::PATTERN.find(&g);
    assert_eq!(found.len(), 1);
    assert!(matches!(
        check_safe(&g, &found[0]),
        Err(Unsafe::NotConvex { .. })
    ));
    assert_eq!(ff(&lin_mul::PATTERN, &g), 0);
}

#[test]
fn matcher_table_fp8_pattern() {
    // One scalar wildcard binds the literal 0 twice (two constant nodes, same value).
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.maximum(0.0).unwrap().minimum(0.0).unwrap()])
            .unwrap();
    });
    assert_eq!(ff(&fp8::PATTERN, &g), 1);
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.maximum(0.0).unwrap().minimum(1.0).unwrap()])
            .unwrap();
    });
    assert_eq!(ff(&fp8::PATTERN, &g), 0);
}

#[test]
fn matcher_table_no_anchor_found() {
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.relu().unwrap()]).unwrap();
    });
    assert_eq!(no_anchor::PATTERN.find(&g).len(), 0);
    assert_eq!(ff(&no_anchor::PATTERN, &g), 0);
}
