//! The matcher table of PyTorch FX's `test/test_fx_passes.py` (as described in
//! `shared/peers/fx_suite.md`), written anew in graphrw's DSL: every column (FF, TF, FT,
//! TT = match_output, match_placeholder off/on) through [`find_with`] and
//! [`MatchOptions`], with FX's `fully_contained` and `remove_overlapping_matches`
//! where FX's table sets them.
//!
//! graphrw reports at most one match per anchor node, so where FX counts permutations
//! of identical sibling anchors (MultipleOutputsMultipleOverlappingMatches without
//! overlap removal: FX 4) graphrw counts anchors (2); MultipleOutputsIdenticalAnchor's
//! FF is the right 1 (FX: 2, a known FIXME in FX's table).

use graphrw::pattern::{find_with, MatchOptions};
use graphrw::rewrite::apply::{check_safe, Unsafe};
use graphrw::{pattern, Builder, DType, Graph, Pattern, TensorMeta};

fn meta() -> TensorMeta {
    TensorMeta::new(DType::F32, [2usize, 2])
}

fn build(f: impl FnOnce(&Builder)) -> Graph {
    let b = Builder::new();
    f(&b);
    b.finish()
}

/// Matches under FX's default options plus `match_output` and `match_placeholder`.
fn count(pattern: &'static Pattern, g: &Graph, output: bool, placeholder: bool) -> usize {
    let o = MatchOptions::new()
        .match_output(output)
        .match_placeholder(placeholder);
    find_with(pattern, g, &o).len()
}

/// The FF, TF, FT and TT counts.
fn table(pattern: &'static Pattern, g: &Graph) -> [usize; 4] {
    [
        count(pattern, g, false, false),
        count(pattern, g, true, false),
        count(pattern, g, false, true),
        count(pattern, g, true, true),
    ]
}

/// FF with FX's `fully_contained` and `remove_overlapping_matches` set.
fn ff(pattern: &'static Pattern, g: &Graph, contained: bool, remove_overlapping: bool) -> usize {
    let o = MatchOptions::new()
        .fully_contained(contained)
        .remove_overlapping_matches(remove_overlapping);
    find_with(pattern, g, &o).len()
}

pattern! {
    fn single_neg(x: Tensor) -> Tensor { x.neg() }
    fn sum_cat(a: Tensor, b: Tensor) -> Tensor { concat([a, b], 0).sum(..) }
    fn neg_add_self(x: Tensor) -> Tensor { let a = x.neg(); a.add(a) }
    fn diamond(x: Tensor) -> Tensor { let r = x.relu(); r.sigmoid().add(r.relu()) }
    fn mm_cat_cat(b1: Tensor, w1: Tensor, w2: Tensor, x: Tensor, b2: Tensor) -> Tensor {
        concat([w1, w2], 0).matmul(concat([x, b2], 0).transpose(0, 1)).add(b1)
    }
    fn sigmoid2(x: Tensor) -> Tensor { x.sigmoid().sigmoid() }
    fn quantization(x: Tensor) -> Tensor { x.abs().sigmoid().cast(f16) }
    fn with_dependency(a: Tensor) -> (Tensor, Tensor) {
        let b = a.relu();
        (b, b.sigmoid())
    }
    fn relu_sigmoid_sum(a: Tensor) -> (Tensor, Tensor) {
        let r = a.relu();
        (r.sigmoid(), r.sum(..))
    }
    fn identical_anchor(a: Tensor) -> (Tensor, Tensor) {
        let r = a.relu();
        (r.sigmoid(), r.sigmoid())
    }
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
    // neg(x); add(v, v) vs neg(a).
    let g = build(|b| {
        let v = b.input("x", meta()).neg().unwrap();
        b.output(&[v.add(v).unwrap()]).unwrap();
    });
    assert_eq!(table(&single_neg::PATTERN, &g), [1, 0, 1, 0]);
}

#[test]
fn matcher_table_simple_pattern() {
    // m1 = sum(cat([w1, w2])); m2 = sum(cat([w2, w1])); m3 = sum(cat([m1, m2]));
    // x + max(m1) + max(m2) + m3 (FX's torch.max of a scalar is `amax` here).
    let g = build(|b| {
        let x = b.input("x", meta());
        let (w1, w2) = (b.input("w1", meta()).value(), b.input("w2", meta()).value());
        let sum_cat = |a, c| {
            // keepdim, so that m1 and m2 can be concatenated again.
            b.var(b.concat(&[a, c]).unwrap())
                .sum_with(&[], true)
                .unwrap()
        };
        let m1 = sum_cat(w1, w2);
        let m2 = sum_cat(w2, w1);
        let m3 = sum_cat(m1.value(), m2.value());
        let y = x
            .add(m1.amax().unwrap())
            .unwrap()
            .add(m2.amax().unwrap())
            .unwrap()
            .add(m3)
            .unwrap();
        b.output(&[y]).unwrap();
    });
    assert_eq!(table(&sum_cat::PATTERN, &g), [3, 0, 2, 0]);
}

#[test]
fn matcher_table_simple_full_graph_matching() {
    let g = build(|b| {
        let a = b.input("x", meta()).neg().unwrap();
        b.output(&[a.add(a).unwrap()]).unwrap();
    });
    assert_eq!(table(&neg_add_self::PATTERN, &g), [1, 1, 1, 1]);
}

#[test]
fn matcher_table_diamond_shape() {
    let g = build(|b| {
        let r = b.input("x", meta()).neg().unwrap().relu().unwrap();
        b.output(&[r.sigmoid().unwrap().add(r.relu().unwrap()).unwrap()])
            .unwrap();
    });
    assert_eq!(table(&diamond::PATTERN, &g), [1, 1, 0, 0]);
}

#[test]
fn matcher_table_non_fully_contained_matches() {
    // t0 = addmm(b1, cat([w1, w2]), cat([x, b2]).t()); t1 the same with fresh cats, whose
    // first cat m3 also feeds sum(m3); the graph returns (sum(t0), sum(m3)).
    let g = build(|b| {
        let m = TensorMeta::new(DType::F32, [2usize, 3]);
        let ins: Vec<_> = ["w1", "w2", "x", "b2"]
            .iter()
            .map(|n| b.input(n, m.clone()).value())
            .collect();
        let b1 = b.input("b1", TensorMeta::new(DType::F32, [4usize, 4]));
        let site = || {
            let c1 = b.var(b.concat(&ins[..2]).unwrap());
            let c2 = b.var(b.concat(&ins[2..]).unwrap());
            let t = c1
                .matmul(c2.transpose(0, 1).unwrap())
                .unwrap()
                .add(b1)
                .unwrap();
            (c1, t)
        };
        let (_, t0) = site();
        let (m3, _t1) = site();
        b.output(&[t0.sum().unwrap(), m3.sum().unwrap()]).unwrap();
    });
    let p = &mm_cat_cat::PATTERN;
    assert_eq!(ff(p, &g, true, true), 1);
    assert_eq!(ff(p, &g, false, true), 2);
    assert_eq!(count(p, &g, true, false), 0);
    // FT: the leaked use of a placeholder is not a leak.
    let ft = |contained| {
        let o = MatchOptions::new()
            .match_placeholder(true)
            .fully_contained(contained);
        find_with(p, &g, &o).len()
    };
    assert_eq!((ft(true), ft(false)), (1, 2));
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
    assert_eq!(ff(&sigmoid2::PATTERN, &g, true, false), 3);
    assert_eq!(table(&sigmoid2::PATTERN, &g), [2, 1, 1, 0]);
}

#[test]
fn matcher_table_quantization_model() {
    // x + 3, then the pattern's chain (FX: dequantize → sigmoid → to(f16); here abs →
    // sigmoid → cast(f16)): the pattern's input binds the add, not a graph input.
    let g = build(|b| {
        let y = b
            .input("x", meta())
            .add(3.0)
            .unwrap()
            .abs()
            .unwrap()
            .sigmoid()
            .unwrap()
            .cast(DType::F16)
            .unwrap();
        b.output(&[y]).unwrap();
    });
    assert_eq!(table(&quantization::PATTERN, &g), [1, 1, 0, 0]);
}

#[test]
fn matcher_table_multiple_outputs_with_dependency() {
    // y = relu(x); z = sigmoid(y); return (z, y) vs (b, c) = (relu(a), sigmoid(b)): with
    // match_output the outputs are in the other order, so no match.
    let g = build(|b| {
        let y = b.input("x", meta()).relu().unwrap();
        let z = y.sigmoid().unwrap();
        b.output(&[z, y]).unwrap();
    });
    assert_eq!(table(&with_dependency::PATTERN, &g), [1, 0, 1, 0]);
    // The same graph returning (y, z) matches with match_output.
    let g = build(|b| {
        let y = b.input("x", meta()).relu().unwrap();
        let z = y.sigmoid().unwrap();
        b.output(&[y, z]).unwrap();
    });
    assert_eq!(table(&with_dependency::PATTERN, &g), [1, 1, 1, 1]);
}

#[test]
fn matcher_table_multiple_outputs_without_dependency() {
    // x = relu(x + 1); z = sum(x); y = sigmoid(x); return sigmoid(y) + sum(z).
    let g = build(|b| {
        let x = b.input("x", meta()).add(1.0).unwrap().relu().unwrap();
        let z = x.sum().unwrap();
        let y = x.sigmoid().unwrap();
        b.output(&[y.sigmoid().unwrap().add(z.sum().unwrap()).unwrap()])
            .unwrap();
    });
    assert_eq!(table(&relu_sigmoid_sum::PATTERN, &g), [1, 0, 0, 0]);
}

#[test]
fn matcher_table_multiple_outputs_multiple_overlapping_matches() {
    // relu(x + 1) feeds two sums and two sigmoids; every match leaves relu used outside.
    let g = build(|b| {
        let x = b.input("x", meta()).add(1.0).unwrap().relu().unwrap();
        let (z, z1) = (x.sum().unwrap(), x.sum().unwrap());
        let (y, y1) = (x.sigmoid().unwrap(), x.sigmoid().unwrap());
        let out = z.add(z1).unwrap().add(y).unwrap().add(y1).unwrap();
        b.output(&[out]).unwrap();
    });
    let p = &relu_sigmoid_sum::PATTERN;
    assert_eq!(ff(p, &g, true, true), 0);
    // FX: 4 (every sigmoid × sum pairing); graphrw: one per anchor.
    assert_eq!(ff(p, &g, false, false), 2);
    assert_eq!(ff(p, &g, false, true), 1);
}

#[test]
fn matcher_table_multiple_outputs_multiple_non_overlapping_matches() {
    // Two relu → (sum, sigmoid) groups, the first relu also feeding the second.
    let g = build(|b| {
        let x = b.input("x", meta()).add(1.0).unwrap().relu().unwrap();
        let (z, y) = (x.sum().unwrap(), x.sigmoid().unwrap());
        let x = x.relu().unwrap();
        let (z1, y1) = (x.sum().unwrap(), x.sigmoid().unwrap());
        let out = z.add(z1).unwrap().add(y).unwrap().add(y1).unwrap();
        b.output(&[out]).unwrap();
    });
    let p = &relu_sigmoid_sum::PATTERN;
    assert_eq!(ff(p, &g, false, true), 2);
    assert_eq!(ff(p, &g, true, true), 1);
}

#[test]
fn matcher_table_multiple_outputs_identical_anchor() {
    // x = relu(x + 1); return (sigmoid(x), sigmoid(x)).
    let g = build(|b| {
        let x = b.input("x", meta()).add(1.0).unwrap().relu().unwrap();
        b.output(&[x.sigmoid().unwrap(), x.sigmoid().unwrap()])
            .unwrap();
    });
    let p = &identical_anchor::PATTERN;
    for m in find_with(
        p,
        &g,
        &MatchOptions::new().remove_overlapping_matches(false),
    ) {
        assert_ne!(m.outputs[0], m.outputs[1], "both outputs bound to one node");
    }
    // FX's FF is 2 (the swapped-anchor duplicate, a FIXME in FX); the right answer is 1.
    assert_eq!(table(p, &g)[..3], [1, 1, 0]);
}

#[test]
fn matcher_table_multiple_outputs_horizontal_pattern() {
    let g = build(|b| {
        let (x, y) = (b.input("x", meta()), b.input("y", meta()));
        b.output(&[x.add(y).unwrap(), x.sub(y).unwrap()]).unwrap();
    });
    assert_eq!(table(&horizontal::PATTERN, &g), [1, 1, 1, 1]);
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
    assert_eq!(table(&lin_mul::PATTERN, &g), [0, 0, 0, 0]);
}

#[test]
fn matcher_table_fp8_pattern() {
    // One scalar wildcard binds the literal 0 twice (two constant nodes, same value).
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.maximum(0.0).unwrap().minimum(0.0).unwrap()])
            .unwrap();
    });
    assert_eq!(count(&fp8::PATTERN, &g, false, false), 1);
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.maximum(0.0).unwrap().minimum(1.0).unwrap()])
            .unwrap();
    });
    assert_eq!(count(&fp8::PATTERN, &g, false, false), 0);
}

#[test]
fn matcher_table_no_anchor_found() {
    let g = build(|b| {
        let x = b.input("x", meta());
        b.output(&[x.relu().unwrap()]).unwrap();
    });
    assert_eq!(no_anchor::PATTERN.find(&g).len(), 0);
    assert_eq!(table(&no_anchor::PATTERN, &g), [0, 0, 0, 0]);
}
