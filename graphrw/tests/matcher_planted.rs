//! Property tests with planted pattern instances: random graphs of filler ops with
//! instances of several patterns (commutative, with a constant, with a name used twice,
//! multi-output) planted in random operand orders.
//!
//! - every planted instance is found (a match anchored at its anchor);
//! - every reported match is valid, checked by an independent checker that rebuilds the
//!   pattern's term from the match's bindings and compares it with the graph node by node;
//! - the merged decision trees never drop a rule that matches (every rule that matches
//!   at a node is among the node's dispatch candidates);
//! - rewriting to a fixed point keeps `verify` happy, leaves no safe match of any rule,
//!   and keeps the outputs of the reference interpreter.

use std::collections::BTreeSet;

use graphrw::exec::run_reference;
use graphrw::pattern::dispatch::Dispatch;
use graphrw::pattern::{Bound, Match};
use graphrw::rewrite::{check_safe, Rewriter};
use graphrw::{rule_set, verify, Builder, DType, Graph, NodeId, Shape, Tensor, TensorMeta, Value};
use proptest::prelude::*;

rule_set! {
    /// The planted patterns, each with a replacement that keeps the numbers and does
    /// not match again.
    pub static PLANTED;

    // Commutative twice over.
    rule mul_add(x: Tensor, y: Tensor, z: Tensor) -> Tensor {
        x.mul(y).add(z)
    } => {
        x.mul(y)?.sub(z.neg()?)?
    }

    // A scalar parameter bound to a constant operand.
    rule div_softmax(x: Tensor, s: f64) -> Tensor where s != 0.0 {
        x.div(s).softmax(-1)
    } => {
        x.mul(1.0 / s)?.softmax(-1)?
    }

    // A name used twice.
    rule sub_sigmoid(x: Tensor) -> Tensor {
        x.sub(x.sigmoid())
    } => {
        x.add(x.sigmoid()?.neg()?)?
    }

    // Two outputs sharing an interior value.
    rule tanh_pair(x: Tensor) -> (Tensor, Tensor) {
        let t = x.tanh();
        (t.exp(), t.neg())
    } => {
        let t = x.tanh()?;
        (t.exp()?, t.mul(-1.0)?)
    }
}

const N: u64 = 3;

#[derive(Clone, Debug)]
enum Step {
    /// A filler op on earlier values.
    Filler(u8, usize, usize),
    /// A planted instance: which pattern, its inputs, and operand orders (bits).
    Plant(u8, usize, usize, usize, u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..7, any::<usize>(), any::<usize>()).prop_map(|(o, a, b)| Step::Filler(o, a, b)),
        1 => (0u8..4, any::<usize>(), any::<usize>(), any::<usize>(), any::<u8>())
            .prop_map(|(k, a, b, c, o)| Step::Plant(k, a, b, c, o)),
    ]
}

/// A planted instance: the pattern's index in `PLANTED.rules` order of declaration
/// (by rule name) and its anchor.
#[derive(Clone, Debug)]
struct Planted {
    rule: &'static str,
    anchor: NodeId,
}

fn build(inputs: usize, steps: &[Step]) -> (Graph, Vec<Planted>) {
    let b = Builder::new();
    let meta = TensorMeta::new(DType::F32, Shape::known(&[N, N]));
    let mut vals: Vec<Value> = (0..inputs)
        .map(|i| b.input(&format!("x{i}"), meta.clone()).value())
        .collect();
    let mut planted = Vec::new();
    for s in steps {
        let pick = |i: usize| vals[i % vals.len()];
        match *s {
            Step::Filler(o, a, c) => {
                let v = match o {
                    0 => b.neg(pick(a)),
                    1 => b.relu(pick(a)),
                    2 => b.sigmoid(pick(a)),
                    3 => b.tanh(pick(a)),
                    4 => b.add(pick(a), pick(c)),
                    5 => b.sub(pick(a), pick(c)),
                    _ => b.mul(pick(a), pick(c)),
                };
                vals.push(v.expect("filler ops are well typed"));
            }
            Step::Plant(k, a, c, d, order) => {
                let swap = |bit: u8, p: Value, q: Value| {
                    if order & (1 << bit) != 0 {
                        (q, p)
                    } else {
                        (p, q)
                    }
                };
                let (x, y, z) = (pick(a), pick(c), pick(d));
                match k {
                    0 => {
                        let (p, q) = swap(0, x, y);
                        let m = b.mul(p, q).unwrap();
                        let (l, r) = swap(1, m, z);
                        let out = b.add(l, r).unwrap();
                        planted.push(Planted {
                            rule: "mul_add",
                            anchor: out.node,
                        });
                        vals.push(out);
                    }
                    1 => {
                        let scale = [2.0, 0.5, 8.0][order as usize % 3];
                        let out = b.softmax(b.div(x, scale).unwrap(), -1).unwrap();
                        planted.push(Planted {
                            rule: "div_softmax",
                            anchor: out.node,
                        });
                        vals.push(out);
                    }
                    2 => {
                        let out = b.sub(x, b.sigmoid(x).unwrap()).unwrap();
                        planted.push(Planted {
                            rule: "sub_sigmoid",
                            anchor: out.node,
                        });
                        vals.push(out);
                    }
                    _ => {
                        let t = b.tanh(x).unwrap();
                        let (e, n) = if order & 1 != 0 {
                            let n = b.neg(t).unwrap();
                            (b.exp(t).unwrap(), n)
                        } else {
                            (b.exp(t).unwrap(), b.neg(t).unwrap())
                        };
                        planted.push(Planted {
                            rule: "tanh_pair",
                            anchor: e.node,
                        });
                        vals.push(e);
                        vals.push(n);
                    }
                }
            }
        }
    }
    // Every value nobody uses is an output, so that nothing planted is dead code.
    let g = b.finish();
    let mut outs: Vec<Value> = vals
        .iter()
        .copied()
        .filter(|&v| g.use_count(v) == 0)
        .collect();
    outs.dedup();
    let mut g = g;
    g.set_outputs(outs).unwrap();
    (g, planted)
}

/// A term of a pattern, as the independent checker reads it.
enum T {
    /// A tensor parameter.
    Var(&'static str),
    /// A constant equal to the float parameter.
    Scalar(&'static str),
    /// An op (with its commutativity) applied to terms.
    Op(&'static str, bool, Vec<T>),
}

fn op(name: &'static str, args: Vec<T>) -> T {
    T::Op(name, matches!(name, "add" | "mul"), args)
}

/// The terms of each rule's outputs, written from the rule's text.
fn terms(rule: &str) -> Vec<T> {
    use T::*;
    match rule {
        "mul_add" => vec![op(
            "add",
            vec![op("mul", vec![Var("x"), Var("y")]), Var("z")],
        )],
        "div_softmax" => vec![op("softmax", vec![op("div", vec![Var("x"), Scalar("s")])])],
        "sub_sigmoid" => vec![op("sub", vec![Var("x"), op("sigmoid", vec![Var("x")])])],
        "tanh_pair" => vec![
            op("exp", vec![op("tanh", vec![Var("x")])]),
            op("neg", vec![op("tanh", vec![Var("x")])]),
        ],
        other => panic!("no term for {other}"),
    }
}

/// Does `value` compute `term` under the match's bindings? Records the op nodes seen.
fn holds(g: &Graph, m: &Match, term: &T, value: Value, seen: &mut BTreeSet<NodeId>) -> bool {
    match term {
        T::Var(name) => m.get(name) == Some(&Bound::Value(value)),
        T::Scalar(name) => {
            let node = g.node(value.node).unwrap();
            let Some(Bound::Float(s)) = m.get(name) else {
                return false;
            };
            seen.insert(value.node);
            node.op_name() == "constant"
                && node
                    .payload()
                    .is_some_and(|t| t.numel() == 1 && t.to_f64_vec()[0] == *s)
        }
        T::Op(name, commutative, args) => {
            let node = g.node(value.node).unwrap();
            if node.op_name() != *name || value.output != 0 || node.operands().len() != args.len() {
                return false;
            }
            let ops = node.operands();
            let try_order = |order: &[usize], seen: &mut BTreeSet<NodeId>| {
                let mut local = seen.clone();
                let ok = args
                    .iter()
                    .zip(order)
                    .all(|(a, &i)| holds(g, m, a, ops[i], &mut local));
                if ok {
                    *seen = local;
                }
                ok
            };
            let ok = try_order(&[0, 1][..args.len().min(2)], seen)
                || (*commutative && args.len() == 2 && try_order(&[1, 0], seen));
            if ok {
                seen.insert(value.node);
            }
            ok
        }
    }
}

/// The independent validity check of a reported match of `rule`.
fn valid(g: &Graph, rule: &str, m: &Match) -> Result<(), String> {
    let terms = terms(rule);
    if terms.len() != m.outputs.len() {
        return Err(format!(
            "{} outputs, expected {}",
            m.outputs.len(),
            terms.len()
        ));
    }
    let distinct: BTreeSet<Value> = m.outputs.iter().copied().collect();
    if distinct.len() != m.outputs.len() {
        return Err("two outputs bound to one value".into());
    }
    let mut seen = BTreeSet::new();
    for (t, &v) in terms.iter().zip(&m.outputs) {
        if !holds(g, m, t, v, &mut seen) {
            return Err(format!("output {v:?} does not compute the pattern"));
        }
    }
    let nodes: BTreeSet<NodeId> = m.nodes.iter().copied().collect();
    if nodes != seen {
        return Err(format!("match nodes {nodes:?}, checker saw {seen:?}"));
    }
    Ok(())
}

/// Deterministic inputs in [-2, 2).
fn inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut s = seed | 1;
    g.inputs()
        .iter()
        .map(|_| {
            let data = (0..(N * N) as usize)
                .map(|_| {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((s >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0
                })
                .collect();
            Tensor::from_vec(vec![N as usize, N as usize], data).unwrap()
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (!a.is_finite() && !b.is_finite()) || (a - b).abs() <= 1e-4 * (1.0 + a.abs().max(b.abs()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn planted_instances_are_found_and_matches_are_valid(
        inputs_n in 1usize..4,
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let (g, planted) = build(inputs_n, &steps);
        prop_assert!(verify(&g).is_ok(), "{:?}", verify(&g));
        for rule in PLANTED.rules {
            let found = rule.pattern.find(&g);
            for m in &found {
                if let Err(e) = valid(&g, rule.name, m) {
                    return Err(TestCaseError::fail(format!("{}: {e}\n{g}", rule.name)));
                }
            }
            let anchors: BTreeSet<NodeId> = found.iter().map(|m| m.outputs[0].node).collect();
            for p in planted.iter().filter(|p| p.rule == rule.name) {
                prop_assert!(anchors.contains(&p.anchor), "{} planted at {:?} not found\n{g}", p.rule, p.anchor);
            }
        }
        // The decision trees keep every rule that matches.
        let dispatch = Dispatch::for_sets(&[&PLANTED]);
        let mut cands = Vec::new();
        for id in g.node_ids() {
            dispatch.candidates(&g, id, false, &mut cands);
            for rule in PLANTED.rules {
                if rule.pattern.match_at(&g, id).is_some() {
                    prop_assert!(cands.iter().any(|r| r.name == rule.name),
                        "{} matches at {:?} but dispatch dropped it", rule.name, id);
                }
            }
        }
    }

    #[test]
    fn rewriting_planted_graphs_keeps_outputs(
        inputs_n in 1usize..4,
        steps in proptest::collection::vec(step(), 1..40),
        seed in any::<u64>(),
    ) {
        let (g, planted) = build(inputs_n, &steps);
        let mut r = g.clone();
        let report = Rewriter::new(&[&PLANTED]).with_verify_each(true).run(&mut r).unwrap();
        prop_assert!(verify(&r).is_ok(), "{:?}", verify(&r));
        if !planted.is_empty() {
            // Some planted instance may have been made unsafe by filler users, but a
            // planted `sub_sigmoid` or `div_softmax` whose interior has no other user is
            // always rewritten.
            let all_unsafe = planted.iter().all(|p| {
                rule_named(p.rule)
                    .pattern
                    .match_at(&g, p.anchor)
                    .is_none_or(|m| check_safe(&g, &m).is_err())
            });
            prop_assert!(report.total() > 0 || all_unsafe);
        }
        // A fixed point: no rule has a safe match left.
        for rule in PLANTED.rules {
            for m in rule.pattern.find(&r) {
                prop_assert!(check_safe(&r, &m).is_err(), "{} still matches safely\n{r}", rule.name);
            }
        }
        let ins = inputs(&g, seed);
        let before = run_reference(&g, &ins).unwrap();
        let after = run_reference(&r, &ins).unwrap();
        prop_assert_eq!(before.len(), after.len());
        for (x, y) in before.iter().zip(&after) {
            prop_assert_eq!(x.shape(), y.shape());
            for (p, q) in x.to_f64_vec().into_iter().zip(y.to_f64_vec()) {
                prop_assert!(close(p, q), "{p} vs {q}");
            }
        }
    }
}

fn rule_named(name: &str) -> &'static graphrw::Rule {
    PLANTED.rule(name).unwrap()
}
