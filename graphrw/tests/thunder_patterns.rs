//! The examples of Lightning Thunder's pattern-matching tutorial, written anew in
//! graphrw's DSL: a multi-output pattern over the same inputs (add then sub), greedy
//! repetition, a match across unrelated ops in between, and an op that cannot join a
//! match because it depends on the match through an op outside it.

use graphrw::exec::run_reference;
use graphrw::rewrite::apply::{check_safe, Unsafe};
use graphrw::rewrite::Rewriter;
use graphrw::{pattern, rule_set, Builder, DType, Graph, Tensor, TensorMeta};

fn meta() -> TensorMeta {
    TensorMeta::new(DType::F32, [4usize])
}

fn build(f: impl FnOnce(&Builder)) -> Graph {
    let b = Builder::new();
    f(&b);
    b.finish()
}

fn numbers(g: &Graph) -> Vec<Vec<f64>> {
    let ins: Vec<Tensor> = (0..g.inputs().len())
        .map(|i| {
            let data = (0..4).map(|j| (i * 4 + j) as f32 * 0.37 - 1.5).collect();
            Tensor::from_vec(vec![4], data).unwrap()
        })
        .collect();
    run_reference(g, &ins)
        .unwrap()
        .iter()
        .map(|t| t.to_f64_vec())
        .collect()
}

pattern! {
    fn add_sub(x: Tensor, y: Tensor) -> (Tensor, Tensor) { (x.add(y), x.sub(y)) }
    fn adds(x: Tensor) -> Tensor { repeat(x, |t| t.add(_), 1..) }
    fn add_mul(x: Tensor, y: Tensor, z: Tensor) -> (Tensor, Tensor) { (x.add(y), x.mul(z)) }
}

rule_set! {
    pub static ADD_SUB;
    // Same values, computed as (x + y, x + y - 2y): enough to see the fusion happen.
    rule add_sub_pair(x: Tensor, y: Tensor) -> (Tensor, Tensor) { (x.add(y), x.sub(y)) } => {
        let s = x.add(y)?;
        (s, s.sub(y.mul(2.0)?)?)
    }
}

#[test]
fn thunder_add_then_sub_on_the_same_inputs() {
    let graph = || {
        build(|b| {
            let (x, y) = (b.input("x", meta()), b.input("y", meta()));
            b.output(&[x.add(y).unwrap(), x.sub(y).unwrap()]).unwrap();
        })
    };
    let original = graph();
    assert_eq!(add_sub::PATTERN.find(&original).len(), 1);
    // Not on different inputs.
    let other = build(|b| {
        let (x, y, z) = (
            b.input("x", meta()),
            b.input("y", meta()),
            b.input("z", meta()),
        );
        b.output(&[x.add(y).unwrap(), x.sub(z).unwrap()]).unwrap();
    });
    assert_eq!(add_sub::PATTERN.find(&other).len(), 0);
    let mut g = graph();
    let report = Rewriter::new(&[&ADD_SUB]).run(&mut g).unwrap();
    assert_eq!(report.total(), 1);
    let ops = g.op_counts();
    assert_eq!(
        (ops.get("add"), ops.get("mul"), ops.get("sub")),
        (Some(&1), Some(&1), Some(&1))
    );
    let (a, e) = (numbers(&g), numbers(&original));
    for (p, q) in a.iter().flatten().zip(e.iter().flatten()) {
        assert!((p - q).abs() < 1e-5, "{p} vs {q}");
    }
}

#[test]
fn thunder_greedy_repetition_of_adds() {
    let g = build(|b| {
        let mut y = b.input("x", meta());
        for i in 0..4 {
            y = y.add(i as f64).unwrap();
        }
        b.output(&[y]).unwrap();
    });
    // Anchored at the last add, the repetition takes all four (longest first).
    let found = adds::PATTERN.find(&g);
    let last = g.outputs()[0].node;
    let m = found.iter().find(|m| m.outputs[0].node == last).unwrap();
    assert_eq!(m.nodes.len(), 4);
    let x: adds::Match = m.typed();
    assert_eq!(x.x, g.inputs()[0].into());
}

#[test]
fn thunder_match_across_unrelated_ops_in_between() {
    // add, then unrelated ops, then sub: matching follows dataflow, not program order.
    let g = build(|b| {
        let (x, y, z) = (
            b.input("x", meta()),
            b.input("y", meta()),
            b.input("z", meta()),
        );
        let a = x.add(y).unwrap();
        let u = z.relu().unwrap().exp().unwrap().neg().unwrap();
        let s = x.sub(y).unwrap();
        b.output(&[a, u, s]).unwrap();
    });
    let found = add_sub::PATTERN.find(&g);
    assert_eq!(found.len(), 1);
    assert!(check_safe(&g, &found[0]).is_ok());
}

#[test]
fn thunder_op_depending_on_the_match_through_an_outside_op() {
    // `a = x + y; r = relu(a); m = x * r`: the pattern (x + y, x * z) matches with z = r,
    // but `m` cannot join the match: it depends on `a` through `relu`, outside the match,
    // so fusing the two would make a cycle.
    let mut g = build(|b| {
        let (x, y) = (b.input("x", meta()), b.input("y", meta()));
        let a = x.add(y).unwrap();
        let r = a.relu().unwrap();
        b.output(&[x.mul(r).unwrap()]).unwrap();
    });
    let found = add_mul::PATTERN.find(&g);
    assert_eq!(found.len(), 1);
    assert!(matches!(
        check_safe(&g, &found[0]),
        Err(Unsafe::NotConvex { .. })
    ));
    rule_set! {
        pub static ADD_MUL;
        rule add_mul_pair(x: Tensor, y: Tensor, z: Tensor) -> (Tensor, Tensor) {
            (x.add(y), x.mul(z))
        } => {
            (x.add(y)?, x.mul(z)?)
        }
    }
    let report = Rewriter::new(&[&ADD_MUL]).run(&mut g).unwrap();
    assert_eq!(report.total(), 0);
    assert_eq!(report.rejected_unsafe.get("add_mul_pair"), Some(&1));
}
