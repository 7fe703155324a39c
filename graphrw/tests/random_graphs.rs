//! Property test: random well-typed graphs built through the builder pass the
//! verifier, and printing is deterministic.

use std::collections::BTreeSet;

use graphrw::{verify, Builder, DType, Graph, NodeId, Shape, TensorMeta, Value};
use proptest::prelude::*;

/// One step of a random program: an op applied to earlier values (chosen by index).
#[derive(Clone, Debug)]
enum Step {
    Unary(u8, usize),
    Binary(u8, usize, usize),
    Softmax(usize),
    Transpose(usize),
    MatmulT(usize, usize),
    SumLast(usize),
    Reshape(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..6, any::<usize>()).prop_map(|(o, a)| Step::Unary(o, a)),
        (0u8..4, any::<usize>(), any::<usize>()).prop_map(|(o, a, b)| Step::Binary(o, a, b)),
        any::<usize>().prop_map(Step::Softmax),
        any::<usize>().prop_map(Step::Transpose),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Step::MatmulT(a, b)),
        any::<usize>().prop_map(Step::SumLast),
        any::<usize>().prop_map(Step::Reshape),
    ]
}

/// Builds a graph from steps over square [n, n] tensors, so every step is well typed.
fn build(n: u64, inputs: usize, steps: &[Step]) -> Graph {
    let b = Builder::new();
    let mut vals: Vec<Value> = (0..inputs)
        .map(|i| {
            b.input(
                &format!("x{i}"),
                TensorMeta::new(DType::F32, Shape::known(&[n, n])),
            )
            .value()
        })
        .collect();
    for s in steps {
        let pick = |i: usize| vals[i % vals.len()];
        let v = match *s {
            Step::Unary(o, a) => match o {
                0 => b.exp(pick(a)),
                1 => b.tanh(pick(a)),
                2 => b.neg(pick(a)),
                3 => b.relu(pick(a)),
                4 => b.sigmoid(pick(a)),
                _ => b.gelu_with(pick(a), "tanh"),
            },
            Step::Binary(o, a, c) => match o {
                0 => b.add(pick(a), pick(c)),
                1 => b.sub(pick(a), pick(c)),
                2 => b.mul(pick(a), pick(c)),
                _ => b.div(pick(a), 2.0),
            },
            Step::Softmax(a) => b.softmax(pick(a), -1),
            Step::Transpose(a) => b.transpose(pick(a), 0, 1),
            Step::MatmulT(a, c) => b.matmul(pick(a), pick(c)),
            Step::SumLast(a) => b
                .sum_with(pick(a), &[-1], true)
                .and_then(|s| b.expand(s, &[n as i64, n as i64])),
            Step::Reshape(a) => b
                .reshape(pick(a), &[-1])
                .and_then(|r| b.reshape(r, &[n as i64, n as i64])),
        };
        vals.push(v.expect("every step is well typed"));
    }
    let last = *vals.last().expect("at least one value");
    b.output(&[b.var(last)]).unwrap();
    b.finish()
}

/// The live nodes by their definition: graph inputs, and every node a graph output
/// reaches through operands.
fn reachable_from_outputs_and_inputs(g: &Graph) -> BTreeSet<NodeId> {
    let mut live = BTreeSet::new();
    let mut stack: Vec<NodeId> = g.outputs().iter().map(|v| v.node).collect();
    stack.extend(g.inputs());
    while let Some(n) = stack.pop() {
        if live.insert(n) {
            stack.extend(g.node(n).unwrap().operands().iter().map(|v| v.node));
        }
    }
    live
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_graphs_verify_and_print_deterministically(
        n in 1u64..5,
        inputs in 1usize..4,
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let g = build(n, inputs, &steps);
        prop_assert!(verify(&g).is_ok(), "{:?}", verify(&g));
        let again = build(n, inputs, &steps);
        prop_assert_eq!(g.to_string(), again.to_string());
        prop_assert_eq!(g.to_string(), g.clone().to_string());
        // Dead-code removal keeps the graph valid.
        let mut pruned = g.clone();
        let removed = pruned.remove_dead();
        prop_assert!(verify(&pruned).is_ok());
        // It keeps exactly the inputs and what the outputs depend on.
        let live = reachable_from_outputs_and_inputs(&g);
        let kept: BTreeSet<NodeId> = pruned.node_ids().collect();
        prop_assert_eq!(&kept, &live);
        prop_assert_eq!(removed, g.node_count() - live.len());
    }
}
