//! The merged decision trees (`pattern::dispatch`) and backtracking hygiene: rules that
//! cannot match a node are never tried there (counted by `Report::attempts`, not
//! timed), the trees keep every rule that can match, constraints run as soon as their
//! bindings exist, and a failed branch leaves no binding behind.

use std::sync::Mutex;

use graphrw::pattern::dispatch::Dispatch;
use graphrw::rewrite::Rewriter;
use graphrw::{pattern, rule_set, Builder, DType, Graph, Tensor, TensorMeta};

rule_set! {
    /// One rule that fires.
    pub static ONE;
    rule neg_neg(x: Tensor) -> Tensor { x.neg().neg() } => { x }
}

rule_set! {
    /// Rules anchored at the graph's ops but needing other operand ops or attributes:
    /// none can match the test graph.
    pub static CANNOT_MATCH;
    rule neg_of_exp(x: Tensor) -> Tensor { x.exp().neg() } => { x.exp()?.mul(-1.0)? }
    rule neg_of_tanh(x: Tensor) -> Tensor { x.tanh().neg() } => { x.tanh()?.mul(-1.0)? }
    rule neg_of_log(x: Tensor) -> Tensor { x.log().neg() } => { x.log()?.mul(-1.0)? }
    rule neg_of_abs(x: Tensor) -> Tensor { x.abs().neg() } => { x.abs()?.mul(-1.0)? }
    rule add_of_exps(x: Tensor, y: Tensor) -> Tensor { x.exp().add(y.exp()) } => {
        x.exp()?.sub(y.exp()?.neg()?)?
    }
    rule add_of_tanh(x: Tensor, y: Tensor) -> Tensor { x.tanh().add(y) } => {
        x.tanh()?.sub(y.neg()?)?
    }
    #[overlap]
    rule add_of_log(x: Tensor, y: Tensor) -> Tensor { x.log().add(y) } => {
        x.log()?.sub(y.neg()?)?
    }
    #[verify(skip = "a matcher fixture: its replacement matches its pattern again, so rewriting never ends (the tests only match)")]
    rule softmax_dim0(x: Tensor) -> Tensor { x.softmax(0) } => { x.softmax(0)? }
    #[verify(skip = "a matcher fixture: its replacement matches its pattern again, so rewriting never ends (the tests only match)")]
    rule softmax_of_exp(x: Tensor) -> Tensor { x.exp().softmax(-1) } => {
        x.exp()?.softmax(-1)?
    }
    rule relu_of_exp(x: Tensor) -> Tensor { x.exp().relu() } => { x.exp()? }
    rule relu_of_sigmoid(x: Tensor) -> Tensor { x.sigmoid().relu() } => { x.sigmoid()? }
    rule relu_of_relu(x: Tensor) -> Tensor { x.relu().relu() } => { x.relu()? }
}

fn meta() -> TensorMeta {
    TensorMeta::new(DType::F32, [2usize, 3])
}

/// Layers of `neg(neg(x)) + relu(x)` then `softmax(-1)`.
fn graph(layers: usize) -> Graph {
    let b = Builder::new();
    let mut x = b.input("x", meta());
    for _ in 0..layers {
        let n = x.neg().unwrap().neg().unwrap();
        x = n.add(x.relu().unwrap()).unwrap().softmax(-1).unwrap();
    }
    b.output(&[x]).unwrap();
    b.finish()
}

#[test]
fn rules_that_cannot_match_are_never_tried() {
    let (mut a, mut b) = (graph(20), graph(20));
    let one = Rewriter::new(&[&ONE]).run(&mut a).unwrap();
    let more = Rewriter::new(&[&ONE, &CANNOT_MATCH]).run(&mut b).unwrap();
    assert_eq!(one.total(), 20);
    assert_eq!(more.total(), 20);
    assert_eq!(a.to_string(), b.to_string());
    // The twelve extra rules, anchored at `neg`, `add`, `softmax` and `relu` like the
    // graph's nodes, cost not one match attempt.
    assert_eq!(more.attempts, one.attempts);
    assert_eq!(more.visited, one.visited);
}

#[test]
fn dispatch_keeps_every_rule_that_matches() {
    // A graph where each extra rule matches once.
    let b = Builder::new();
    let x = b.input("x", meta());
    let outs = [
        x.exp().unwrap().neg().unwrap(),
        x.tanh().unwrap().neg().unwrap(),
        x.abs().unwrap().neg().unwrap(),
        x.exp().unwrap().add(x.exp().unwrap()).unwrap(),
        x.relu().unwrap().add(x.tanh().unwrap()).unwrap(), // commutative: tanh second
        x.softmax(0).unwrap(),
        x.exp().unwrap().softmax(-1).unwrap(),
        x.sigmoid().unwrap().relu().unwrap(),
    ];
    b.output(&outs).unwrap();
    let g = b.finish();
    let dispatch = Dispatch::for_sets(&[&ONE, &CANNOT_MATCH]);
    let mut cands = Vec::new();
    let mut matched = 0;
    for id in g.node_ids() {
        dispatch.candidates(&g, id, false, &mut cands);
        for rule in dispatch.rules() {
            let m = rule.pattern.match_at(&g, id).is_some();
            matched += usize::from(m);
            let listed = cands.iter().any(|r| r.name == rule.name);
            assert!(
                !m || listed,
                "{} matches at {id:?} but was dropped",
                rule.name
            );
        }
        // Candidates come in the order rules are tried.
        let order: Vec<usize> = cands
            .iter()
            .map(|c| {
                dispatch
                    .rules()
                    .iter()
                    .position(|r| r.name == c.name)
                    .unwrap()
            })
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }
    assert!(matched >= 8, "{matched}");
    // The softmax(-1) node of `exp().softmax(-1)` is no candidate of `softmax_dim0`.
    let sm = g.nodes_with_op("softmax").collect::<Vec<_>>();
    let mut names = Vec::new();
    for id in sm {
        dispatch.candidates(&g, id, false, &mut cands);
        names.push(cands.iter().map(|r| r.name).collect::<Vec<_>>());
    }
    names.sort();
    assert_eq!(names, vec![vec!["softmax_dim0"], vec!["softmax_of_exp"]]);
    // With literals ignored, the attribute check is skipped.
    let id = g.nodes_with_op("softmax").last().unwrap();
    dispatch.candidates(&g, id, true, &mut cands);
    assert!(cands.iter().any(|r| r.name == "softmax_dim0"));
}

pattern! {
    /// The first branch binds `x`, the op slots of `relu` and `add`, then fails at
    /// `y.neg()`; the second must start from clean bindings.
    fn leaky(x: Tensor, y: Tensor) -> Tensor { x.relu().add(y.neg()) | x.add(y) }
}

/// What the constraints of `early` saw, in order.
static SEEN: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

fn saw(what: &'static str, ok: bool) -> bool {
    SEEN.lock().unwrap().push(what);
    ok
}

pattern! {
    /// The check of `x` fails; it must run as soon as `x` is bound, so the check of `y`
    /// (bound later) never runs.
    fn early(x: Tensor, y: Tensor) -> Tensor
    where
        check(|y| saw("y", y.rank() > 0)),
        check(|x| saw("x", x.rank() == 7)),
    {
        x.relu().add(y.exp())
    }
}

#[test]
fn constraints_run_as_soon_as_their_bindings_exist() {
    let b = Builder::new();
    let (a, c) = (b.input("a", meta()), b.input("c", meta()));
    b.output(&[a.relu().unwrap().add(c.exp().unwrap()).unwrap()])
        .unwrap();
    let g = b.finish();
    assert!(early::PATTERN.find(&g).is_empty());
    assert_eq!(*SEEN.lock().unwrap(), vec!["x"]);
}

#[test]
fn a_failed_branch_leaves_no_binding() {
    let b = Builder::new();
    let (a, c) = (b.input("a", meta()), b.input("c", meta()));
    let r = a.relu().unwrap();
    b.output(&[r.add(c).unwrap()]).unwrap();
    let (r, c) = (r.value(), c.value());
    let g = b.finish();
    let m = leaky::PATTERN.find(&g).remove(0);
    // x binds the relu (second branch), not `a` (what the first branch bound).
    assert_eq!(m.get("x"), Some(&graphrw::pattern::Bound::Value(r)));
    assert_eq!(m.get("y"), Some(&graphrw::pattern::Bound::Value(c)));
    assert_eq!(
        m.nodes.len(),
        1,
        "only the add of the second branch: {:?}",
        m.nodes
    );
    let bound: Vec<usize> = (0..m.bindings.len())
        .filter(|&s| m.bindings.get(s as u16).is_some())
        .collect();
    // x, y and the second branch's add; nothing of the first branch.
    assert_eq!(bound.len(), 3, "{:?}", m.bindings);
}

rule_set! {
    /// Rules that agree on their anchor's operands and differ below them, or ask for a
    /// literal where the graph has a tensor constant.
    pub static DEEP;
    rule neg_exp_of_abs(x: Tensor) -> Tensor { x.abs().exp().neg() } => { x.abs()?.exp()?.mul(-1.0)? }
    rule neg_exp_of_tanh(x: Tensor) -> Tensor { x.tanh().exp().neg() } => { x.tanh()?.exp()?.mul(-1.0)? }
    // Below a commutative op the operand order is free: never pruned on it.
    rule neg_of_sum_with_abs(x: Tensor, y: Tensor) -> Tensor { x.abs().add(y).neg() } => {
        x.abs()?.add(y)?.mul(-1.0)?
    }
    rule add_zero(x: Tensor) -> Tensor { x.add(0.0) } => { x }
}

#[test]
fn operands_of_operands_and_literal_constants_prune_the_candidates() {
    let b = Builder::new();
    let x = b.input("x", meta());
    let bias = b.constant(Tensor::zeros(DType::F32, &[2, 3]));
    let zero = b.constant(Tensor::zeros(DType::F32, &[]));
    let outs = [
        x.abs().unwrap().exp().unwrap().neg().unwrap(), // neg_exp_of_abs only
        x.relu().unwrap().exp().unwrap().neg().unwrap(), // neither neg_exp rule
        x.relu()
            .unwrap()
            .add(x.abs().unwrap())
            .unwrap()
            .neg()
            .unwrap(), // abs second
        x.add(bias).unwrap(),                           // a [2, 3] constant: no literal
        zero.add(x).unwrap(),                           // a one-element constant, first
    ];
    b.output(&outs).unwrap();
    let g = b.finish();
    let dispatch = Dispatch::for_sets(&[&DEEP]);
    let mut cands = Vec::new();
    let mut tried = Vec::new();
    for (i, out) in g.outputs().iter().enumerate() {
        let id = out.node;
        dispatch.candidates(&g, id, false, &mut cands);
        let names: Vec<&str> = cands.iter().map(|r| r.name).collect();
        // Every rule that matches is kept.
        for rule in dispatch.rules() {
            if rule.pattern.match_at(&g, id).is_some() {
                assert!(
                    names.contains(&rule.name),
                    "output {i}: {} dropped",
                    rule.name
                );
            }
        }
        tried.push(names);
    }
    assert_eq!(tried[0], ["neg_exp_of_abs"]);
    assert!(
        tried[1].iter().all(|n| !n.starts_with("neg_exp")),
        "{:?}",
        tried[1]
    );
    assert!(tried[2].contains(&"neg_of_sum_with_abs"), "{:?}", tried[2]);
    assert!(tried[3].is_empty(), "{:?}", tried[3]);
    assert_eq!(tried[4], ["add_zero"]);
    assert!(DEEP.rules[3]
        .pattern
        .match_at(&g, g.outputs()[4].node)
        .is_some());
}

rule_set! {
    /// Rules that differ only in a literal attribute of an operand's op.
    pub static OPERAND_LITERALS;
    rule matmul_of_swapped(a: Tensor, b: Tensor) -> Tensor {
        a.matmul(b.permute([1, 0]))
    } => {
        a.matmul(b.transpose(0, 1)?)?
    }
    rule softmax_last_then_neg(x: Tensor) -> Tensor { x.softmax(-1).neg() } => {
        x.softmax(-1)?.mul(-1.0)?
    }
    rule softmax_first_then_neg(x: Tensor) -> Tensor { x.softmax(0).neg() } => {
        x.softmax(0)?.mul(-1.0)?
    }
}

#[test]
fn literal_attributes_of_operand_ops_prune_the_candidates() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [3usize, 3]));
    let outs = [
        x.matmul(x.permute(&[1, 0]).unwrap()).unwrap(), // swapped: matches
        x.matmul(x.permute(&[0, 1]).unwrap()).unwrap(), // identity permute: cannot
        x.softmax(-1).unwrap().neg().unwrap(),
        x.softmax(0).unwrap().neg().unwrap(),
        x.softmax(1).unwrap().neg().unwrap(), // neither literal (the matcher does not normalise dims)
    ];
    b.output(&outs).unwrap();
    let g = b.finish();
    let dispatch = Dispatch::for_sets(&[&OPERAND_LITERALS]);
    let mut cands = Vec::new();
    let tried: Vec<Vec<&str>> = g
        .outputs()
        .iter()
        .map(|out| {
            dispatch.candidates(&g, out.node, false, &mut cands);
            cands.iter().map(|r| r.name).collect()
        })
        .collect();
    // What the dispatch keeps is exactly what matches.
    for (out, names) in g.outputs().iter().zip(&tried) {
        let matching: Vec<&str> = dispatch
            .rules()
            .iter()
            .filter(|r| r.pattern.match_at(&g, out.node).is_some())
            .map(|r| r.name)
            .collect();
        assert_eq!(names, &matching);
    }
    assert_eq!(tried[0], ["matmul_of_swapped"]);
    assert!(tried[1].is_empty(), "{:?}", tried[1]);
    assert_eq!(tried[2], ["softmax_last_then_neg"]);
    assert_eq!(tried[3], ["softmax_first_then_neg"]);
    // With `ignore_literals`, every rule whose ops fit stays.
    dispatch.candidates(&g, g.outputs()[1].node, true, &mut cands);
    assert_eq!(cands.len(), 1);
}

rule_set! {
    /// Rules whose second operand is a literal or a scalar parameter: only a constant of
    /// one element can be there.
    pub static SCALAR_OPERANDS;
    rule mul_by_two(x: Tensor) -> Tensor { x.mul(2.0) } => { x.add(x)? }
    rule div_by_scalar_param(x: Tensor, s: f64) -> Tensor { x.div(s) } => { x.mul(1.0 / s)? }
}

#[test]
fn the_dispatch_tells_scalar_constants_from_tensor_constants() {
    let b = Builder::new();
    let x = b.input("x", meta());
    let twos = b.constant(Tensor::full(DType::F32, &[2, 3], 2.0));
    let one_two = b.constant(Tensor::full(DType::F32, &[1], 2.0));
    let outs = [
        x.mul(2.0).unwrap(),     // scalar constant: matches
        x.mul(twos).unwrap(),    // tensor constant: cannot
        x.mul(one_two).unwrap(), // a constant of one element, of rank 1: matches
        x.div(3.0).unwrap(),     // scalar parameter: matches
        x.div(twos).unwrap(),    // tensor constant: cannot
        x.div(x).unwrap(),       // not a constant: cannot
    ];
    b.output(&outs).unwrap();
    let g = b.finish();
    let dispatch = Dispatch::for_sets(&[&SCALAR_OPERANDS]);
    let mut cands = Vec::new();
    let kept: Vec<usize> = g
        .outputs()
        .iter()
        .map(|out| {
            dispatch.candidates(&g, out.node, false, &mut cands);
            // Whatever the dispatch keeps, it keeps every rule that matches.
            for rule in dispatch.rules() {
                if rule.pattern.match_at(&g, out.node).is_some() {
                    assert!(cands.iter().any(|r| r.name == rule.name), "{}", rule.name);
                }
            }
            cands.len()
        })
        .collect();
    assert_eq!(kept, [1, 0, 1, 1, 0, 0]);
    let matches = dispatch.first_matches(&g, &Default::default());
    let anchors: Vec<_> = matches.iter().map(|(_, m)| m.outputs[0]).collect();
    assert_eq!(anchors, [g.outputs()[0], g.outputs()[2], g.outputs()[3]]);
}

rule_set! {
    /// The first rule brings an op the graph did not have (`silu`); the second is
    /// anchored below it, so it can fire only once the dispatch sees the new op.
    pub static NEW_OP_CHAIN;
    rule silu_from_parts(x: Tensor) -> Tensor { x.mul(x.sigmoid()) } => { x.silu()? }
    rule neg_of_silu(x: Tensor) -> Tensor { x.silu().neg() } => { x.silu()?.mul(-1.0)? }
}

#[test]
fn rules_fire_on_ops_a_rewrite_brought_into_the_graph() {
    let b = Builder::new();
    let x = b.input("x", meta());
    let y = x.mul(x.sigmoid().unwrap()).unwrap().neg().unwrap();
    b.output(&[y]).unwrap();
    let mut g = b.finish();
    assert!(g.nodes_with_op("silu").next().is_none());
    let report = Rewriter::new(&[&NEW_OP_CHAIN]).run(&mut g).unwrap();
    assert_eq!(report.counts().get("silu_from_parts"), Some(&1));
    assert_eq!(report.counts().get("neg_of_silu"), Some(&1));
    assert_eq!(g.nodes_with_op("neg").count(), 0);
    assert_eq!(g.nodes_with_op("silu").count(), 1);
}
