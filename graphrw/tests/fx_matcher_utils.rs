//! PyTorch FX's matcher tests (`test/fx/test_matcher_utils.py`, as described in
//! `shared/peers/fx_suite.md`), written anew in graphrw's DSL, named after their origin.
//!
//! Skipped:
//! - 06–08 name_node_map: graphrw's typed match struct exposes the pattern's
//!   parameters, not named interior (`let`) nodes; there is no name→node map yet.
//!   (`Match::nodes` lists the matched nodes in match order.)

use graphrw::pattern::{find_with, MatchOptions};
use graphrw::{pattern, Builder, DType, Graph, Tensor, TensorMeta};

fn meta(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(
        DType::F32,
        graphrw::Shape::known(&shape.iter().map(|&d| d as u64).collect::<Vec<_>>()),
    )
}

fn build(f: impl FnOnce(&Builder)) -> Graph {
    let b = Builder::new();
    f(&b);
    b.finish()
}

pattern! {
    fn add_any(x: Tensor, y: Tensor) -> Tensor { x.add(y) }
    fn reshape_any(x: Tensor, s: Ints) -> Tensor { x.reshape(s) }
    fn reshape_2x3(x: Tensor) -> Tensor { x.reshape([2, 3]) }
    fn add_one(x: Tensor) -> Tensor { x.add(1.0) }
    fn add_literal_ignored(x: Tensor) -> Tensor { x.add(_) }
    fn sum_any(x: Tensor) -> Tensor { x.sum(..) }
    fn sum_defaults(x: Tensor) -> Tensor { x.sum() }
    fn softmax_last(x: Tensor) -> Tensor { x.softmax(-1) }
    fn add_one_relu(x: Tensor) -> Tensor { x.add(1.0).relu() }
}

#[test]
fn matcher_utils_01_with_attributes() {
    // Constants of different names and shapes both match a tensor wildcard.
    let g = build(|b| {
        let x = b.input("x", meta(&[2, 3]));
        let c1 = b.constant(Tensor::full(DType::F32, &[2, 3], 1.0));
        let c2 = b.constant(Tensor::full(DType::F32, &[3], 2.0));
        b.output(&[x.add(c1).unwrap().mul(c2).unwrap()]).unwrap();
    });
    let found = add_any::PATTERN.find(&g);
    assert_eq!(found.len(), 1);
    let m: add_any::Match = found[0].typed();
    assert_eq!(g.node(m.y.node).unwrap().op_name(), "constant");
}

#[test]
fn matcher_utils_02_with_list() {
    // FX: `view(x, [5, size(y, 0)])` vs `view(x, [z, size(y, 0)])`, z binds 5. graphrw's
    // shapes are attributes: an `Ints` wildcard binds the whole list.
    let g = build(|b| {
        let x = b.input("x", meta(&[10]));
        b.output(&[x.reshape(&[5, 2]).unwrap()]).unwrap();
    });
    let found = reshape_any::PATTERN.find(&g);
    assert_eq!(found.len(), 1);
    let m: reshape_any::Match = found[0].typed();
    assert_eq!(m.s, vec![5, 2]);
}

#[test]
fn matcher_utils_03_with_list_bad() {
    // List lengths differ: no match.
    let g = build(|b| {
        let x = b.input("x", meta(&[6]));
        b.output(&[x.reshape(&[6]).unwrap()]).unwrap();
    });
    assert_eq!(reshape_2x3::PATTERN.find(&g).len(), 0);
    let g = build(|b| {
        let x = b.input("x", meta(&[6]));
        b.output(&[x.reshape(&[2, 3]).unwrap()]).unwrap();
    });
    assert_eq!(reshape_2x3::PATTERN.find(&g).len(), 1);
}

#[test]
fn matcher_utils_04_ignore_literals() {
    // `add(x, 1)` does not match `add(x, 2)`; graphrw's per-site `_` ignores one literal,
    // `MatchOptions::ignore_literals` all of them (and, unlike FX, neither leaves a
    // pattern node unmapped).
    let g = build(|b| {
        let x = b.input("x", meta(&[3]));
        b.output(&[x.add(2.0).unwrap()]).unwrap();
    });
    assert_eq!(add_one::PATTERN.find(&g).len(), 0);
    assert_eq!(add_literal_ignored::PATTERN.find(&g).len(), 1);
    // FX's option: with ignore_literals, `add(x, 1)` matches `add(x, 2)`.
    let ignore = MatchOptions::new().ignore_literals(true);
    assert_eq!(
        find_with(&add_one::PATTERN, &g, &MatchOptions::new()).len(),
        0
    );
    assert_eq!(find_with(&add_one::PATTERN, &g, &ignore).len(), 1);
}

#[test]
fn matcher_utils_04_ignore_literals_attributes_and_computed_values() {
    // Attribute literals are ignored too (`softmax(x, -1)` matches `dim=0`), but a literal
    // only ever matches a one-element constant: FX's known failure (a pattern literal
    // matching a computed node, left unmapped) cannot happen.
    let ignore = MatchOptions::new().ignore_literals(true);
    let g = build(|b| {
        let x = b.input("x", meta(&[2, 3]));
        b.output(&[x.softmax(0).unwrap()]).unwrap();
    });
    assert_eq!(
        find_with(&softmax_last::PATTERN, &g, &MatchOptions::new()).len(),
        0
    );
    assert_eq!(find_with(&softmax_last::PATTERN, &g, &ignore).len(), 1);
    let g = build(|b| {
        let x = b.input("x", meta(&[3]));
        let y = x.add(x.neg().unwrap()).unwrap().relu().unwrap();
        b.output(&[y]).unwrap();
    });
    assert_eq!(find_with(&add_one_relu::PATTERN, &g, &ignore).len(), 0);
    let g = build(|b| {
        let x = b.input("x", meta(&[3]));
        b.output(&[x.add(5.0).unwrap().relu().unwrap()]).unwrap();
    });
    let found = find_with(&add_one_relu::PATTERN, &g, &ignore);
    assert_eq!(found.len(), 1);
    // Every op and constant of the pattern is mapped.
    assert_eq!(found[0].nodes.len(), 3);
}

#[test]
fn matcher_utils_05_variadic_arg_matching() {
    // FX: a max_pool2d pattern with every argument a wildcard matches calls that omit
    // stride/padding. Here `sum(..)` matches sums with and without explicit attributes,
    // while `sum()` (defaults) matches only the default call.
    for (dims, keepdim, defaults) in [(&[][..], false, true), (&[0][..], true, false)] {
        let g = build(|b| {
            let x = b.input("x", meta(&[2, 3]));
            b.output(&[x.sum_with(dims, keepdim).unwrap()]).unwrap();
        });
        assert_eq!(sum_any::PATTERN.find(&g).len(), 1);
        assert_eq!(sum_defaults::PATTERN.find(&g).len(), usize::from(defaults));
    }
}
