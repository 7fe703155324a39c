//! The tile executor: random elementwise chains give the reference executor's outputs
//! (f32/f16/bf16, broadcasting, empty and odd sizes, sizes over a tile, NaN and inf),
//! groups never swallow a value used outside, never form a cycle, lower peak memory,
//! and leave what they cannot take to the next executor.

use std::sync::Arc;

use graphrw::exec::tile::program::Program;
use graphrw::exec::tile::{ELEMENTWISE_GROUP, MAX_GROUP, TILE};
use graphrw::exec::{
    default_stack, plan, reference_stack, tile_executor, Executor, ReferenceCpu, TILE_CPU,
};
use graphrw::ops::{AttrValue, Attrs};
use graphrw::{verify, Builder, DType, Graph, Shape, Tensor, TensorMeta, Value};
use proptest::prelude::*;

fn tile_stack() -> Vec<Arc<dyn Executor>> {
    vec![tile_executor(), Arc::new(ReferenceCpu)]
}

fn groups(g: &Graph) -> usize {
    g.op_counts()
        .get(ELEMENTWISE_GROUP.name)
        .copied()
        .unwrap_or(0)
}

/// Runs `g` on both stacks; the outputs must be equal bit for bit (NaNs equal), since
/// the tile computes each op with the reference formulas and rounds each result to its
/// dtype. Returns the tile plan's graph.
fn same_as_reference(g: &Graph, inputs: &[Tensor]) -> Graph {
    verify(g).unwrap();
    let (want, _) = plan(g, &reference_stack()).unwrap().run(inputs).unwrap();
    let p = plan(g, &tile_stack()).unwrap();
    verify(p.graph()).unwrap();
    let (got, _) = p.run(inputs).unwrap();
    assert_eq!(want.len(), got.len());
    for (i, (w, o)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w.dtype(), o.dtype(), "output {i}");
        assert_eq!(w.shape(), o.shape(), "output {i}");
        let (w, o) = (w.to_f64_vec(), o.to_f64_vec());
        for (j, (a, b)) in w.iter().zip(&o).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "output {i} element {j}: reference {a}, tile {b}\n{p}"
            );
        }
    }
    p.graph().clone()
}

/// Values spread over a wide range with NaN, infinities, zeros and negatives.
fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            match (s >> 3) % 23 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => 0.0,
                _ => (u - 0.5) * 8.0 + (i % 3) as f64 * 0.25,
            }
        })
        .collect()
}

fn tensor(dt: DType, shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f64_slice(dt, shape, &data(n, seed)).unwrap()
}

#[derive(Clone, Debug)]
enum Step {
    Unary(u8, usize),
    Binary(u8, usize, usize),
    Scalar(u8, usize, i8),
    WhereCmp(u8, usize, usize, usize),
    CastRoundTrip(usize),
    MaskNan(usize, usize),
    BoolLogic(u8, usize, usize, usize),
}

fn step() -> impl Strategy<Value = Step> {
    let i = || any::<usize>();
    prop_oneof![
        (0u8..16, i()).prop_map(|(o, a)| Step::Unary(o, a)),
        (0u8..7, i(), i()).prop_map(|(o, a, b)| Step::Binary(o, a, b)),
        (0u8..4, i(), -4i8..5).prop_map(|(o, a, c)| Step::Scalar(o, a, c)),
        (0u8..6, i(), i(), i()).prop_map(|(o, a, b, c)| Step::WhereCmp(o, a, b, c)),
        i().prop_map(Step::CastRoundTrip),
        (i(), i()).prop_map(|(a, b)| Step::MaskNan(a, b)),
        (0u8..3, i(), i(), i()).prop_map(|(o, a, b, c)| Step::BoolLogic(o, a, b, c)),
    ]
}

/// A random chain over inputs `x: [m, n]`, `r: [n]` (a row, broadcast) and
/// `c: [m, 1]` (a column); some intermediate values are outputs too.
fn chain(dt: DType, m: usize, n: usize, steps: &[Step], extra_out: &[usize]) -> Graph {
    let b = Builder::new();
    let meta = |s: &[u64]| TensorMeta::new(dt, Shape::known(s));
    let (mu, nu) = (m as u64, n as u64);
    let mut vals: Vec<Value> = vec![
        b.input("x", meta(&[mu, nu])).value(),
        b.input("r", meta(&[nu])).value(),
        b.input("c", meta(&[mu, 1])).value(),
    ];
    let other = if dt == DType::F32 {
        DType::F16
    } else {
        DType::F32
    };
    for s in steps {
        let p = |i: usize| vals[i % vals.len()];
        let v = match *s {
            Step::Unary(o, a) => {
                let a = p(a);
                match o {
                    0 => b.exp(a),
                    1 => b.tanh(a),
                    2 => b.neg(a),
                    3 => b.relu(a),
                    4 => b.sigmoid(a),
                    5 => b.gelu_with(a, "tanh"),
                    6 => b.gelu(a),
                    7 => b.silu(a),
                    8 => b.abs(a),
                    9 => b.sqrt(a),
                    10 => b.log(a),
                    11 => b.reciprocal(a),
                    12 => b.sin(a),
                    13 => b.erf(a),
                    14 => b.rsqrt(a),
                    _ => b.dropout_with(a, 0.1, false),
                }
            }
            Step::Binary(o, a, c) => {
                let (a, c) = (p(a), p(c));
                match o {
                    0 => b.add(a, c),
                    1 => b.sub(a, c),
                    2 => b.mul(a, c),
                    3 => b.div(a, c),
                    4 => b.maximum(a, c),
                    5 => b.minimum(a, c),
                    _ => b.pow(a, c),
                }
            }
            Step::Scalar(o, a, k) => {
                let (a, k) = (p(a), k as f64 * 0.75);
                match o {
                    0 => b.mul(a, k),
                    1 => b.add(a, k),
                    2 => b.div(a, k),
                    _ => b.pow(a, 2.0),
                }
            }
            Step::WhereCmp(o, a, x, y) => {
                let (a, x, y) = (p(a), p(x), p(y));
                let cond = match o {
                    0 => b.gt(a, x),
                    1 => b.lt(a, 0.5),
                    2 => b.ge(a, y),
                    3 => b.le(x, y),
                    4 => b.eq(a, a),
                    _ => b.ne(a, x),
                };
                cond.and_then(|c| b.where_(c, x, y))
            }
            Step::CastRoundTrip(a) => b.cast(p(a), other).and_then(|v| b.cast(v, dt)),
            Step::MaskNan(a, m) => {
                let sum = b.add(p(a), p(m)).unwrap();
                b.isnan(p(m))
                    .and_then(|mask| b.masked_fill(sum, mask, -2.5))
            }
            Step::BoolLogic(o, a, x, y) => {
                let (a, x, y) = (p(a), p(x), p(y));
                let c1 = b.gt(a, 0.0).unwrap();
                let c2 = b.lt(x, 1.0).unwrap();
                let c = match o {
                    0 => b.and(c1, c2),
                    1 => b.or(c1, c2),
                    _ => b.not(c1),
                }
                .unwrap();
                let f = b.cast(c, dt).unwrap();
                b.where_(c, y, f)
            }
        };
        vals.push(v.expect("every step is well typed"));
    }
    let mut outs: Vec<Value> = vec![*vals.last().unwrap()];
    for &e in extra_out {
        let v = vals[3 + e % (vals.len() - 3).max(1)];
        if !outs.contains(&v) && v.node.index() >= 3 {
            outs.push(v);
        }
    }
    let vars: Vec<_> = outs.iter().map(|&v| b.var(v)).collect();
    b.output(&vars).unwrap();
    b.finish()
}

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F32), Just(DType::F16), Just(DType::BF16)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn random_chains_match_the_reference(
        dt in dtype(),
        m in prop_oneof![Just(0usize), Just(1), Just(3), 1usize..9],
        n in prop_oneof![Just(1usize), Just(7), Just(TILE + 3), 1usize..40],
        steps in proptest::collection::vec(step(), 1..14),
        extra in proptest::collection::vec(any::<usize>(), 0..3),
        seed in any::<u64>(),
    ) {
        let g = chain(dt, m, n, &steps, &extra);
        let inputs = [tensor(dt, &[m, n], seed), tensor(dt, &[n], seed ^ 1), tensor(dt, &[m, 1], seed ^ 2)];
        let planned = same_as_reference(&g, &inputs);
        // Every group takes at least two nodes.
        for id in planned.nodes_with_op(ELEMENTWISE_GROUP.name) {
            let node = planned.try_node(id).unwrap();
            let p = Program::from_attrs(&node.attrs(), node.operands().len()).unwrap();
            prop_assert!(p.instrs.len() >= 2);
        }
    }
}

#[test]
fn a_long_chain_over_many_tiles_runs_in_parallel_and_matches() {
    // 300 x 257 elements: above the parallel threshold, not a multiple of a tile.
    let steps = [
        Step::Binary(0, 0, 1),
        Step::Unary(5, 3),
        Step::Binary(2, 4, 2),
        Step::WhereCmp(1, 5, 5, 0),
        Step::Unary(4, 6),
    ];
    for dt in [DType::F32, DType::BF16] {
        let g = chain(dt, 300, 257, &steps, &[1]);
        let inputs = [
            tensor(dt, &[300, 257], 7),
            tensor(dt, &[257], 8),
            tensor(dt, &[300, 1], 9),
        ];
        let planned = same_as_reference(&g, &inputs);
        assert_eq!(groups(&planned), 1, "{planned}");
    }
}

#[test]
fn values_used_outside_become_group_outputs() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [8usize, 8]));
    let a = x.exp().unwrap();
    let t = a.tanh().unwrap().mul(3.0).unwrap();
    // `a` is also read by a matmul outside the group.
    let m = a.matmul(x).unwrap();
    let out = t.add(m).unwrap();
    b.output(&[out]).unwrap();
    let g = b.finish();
    let planned = same_as_reference(&g, &[tensor(DType::F32, &[8, 8], 3)]);
    // exp, tanh, mul form one group with two outputs (a and t); add, after the matmul,
    // cannot join it (that would make a cycle), so it stays alone on the reference.
    let ids: Vec<_> = planned.nodes_with_op(ELEMENTWISE_GROUP.name).collect();
    assert_eq!(ids.len(), 1, "{planned}");
    let node = planned.try_node(ids[0]).unwrap();
    assert_eq!(node.outputs().len(), 2, "{planned}");
    let mm = planned.nodes_with_op("matmul").next().unwrap();
    assert_eq!(planned.try_node(mm).unwrap().operands()[0].node, ids[0]);
    assert_eq!(planned.op_counts().get("add"), Some(&1), "{planned}");
}

#[test]
fn a_group_that_would_make_a_cycle_is_not_formed() {
    // a = exp(x); s = matmul(a, x); y = add(a, s): {exp, add} is connected but not convex.
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [4usize, 4]));
    let a = x.exp().unwrap();
    let s = a.matmul(x).unwrap();
    let y = a.add(s).unwrap();
    b.output(&[y]).unwrap();
    let g = b.finish();
    let planned = same_as_reference(&g, &[tensor(DType::F32, &[4, 4], 5)]);
    assert_eq!(groups(&planned), 0, "{planned}");
    assert_eq!(planned.op_counts().get("exp"), Some(&1));
    assert_eq!(planned.op_counts().get("add"), Some(&1));
}

#[test]
fn a_chain_longer_than_a_group_is_cut_into_groups() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [4usize, 4]));
    let mut v = x;
    for i in 0..5 * MAX_GROUP + 3 {
        v = match i % 3 {
            0 => v.tanh().unwrap(),
            1 => v.mul(1.5).unwrap(),
            _ => v.add(x).unwrap(),
        };
    }
    b.output(&[v]).unwrap();
    let g = b.finish();
    let planned = same_as_reference(&g, &[tensor(DType::F32, &[4, 4], 11)]);
    // Groups of MAX_GROUP nodes and one of the 3 left.
    assert_eq!(groups(&planned), 6, "{planned}");
}

#[test]
fn two_groups_that_would_make_a_cycle_together_are_not_both_formed() {
    // a2 = a1 + matmul(b1, x) and b2 = b1 + matmul(a1, x): {a1, a2} and {b1, b2} are each
    // convex, but collapsed together each would feed the other.
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [4usize, 4]));
    let a1 = x.exp().unwrap();
    let b1 = x.tanh().unwrap();
    let a2 = a1.add(b1.matmul(x).unwrap()).unwrap();
    let b2 = b1.add(a1.matmul(x).unwrap()).unwrap();
    b.output(&[a2, b2]).unwrap();
    let g = b.finish();
    let planned = same_as_reference(&g, &[tensor(DType::F32, &[4, 4], 13)]);
    assert_eq!(groups(&planned), 1, "{planned}");
}

#[test]
fn peak_live_bytes_fall() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [256usize, 256]));
    let y = x
        .mul(0.5)
        .and_then(|v| v.add(1.0))
        .and_then(|v| v.tanh())
        .and_then(|v| v.mul(v))
        .and_then(|v| v.sigmoid())
        .unwrap();
    b.output(&[y]).unwrap();
    let g = b.finish();
    let input = [tensor(DType::F32, &[256, 256], 11)];
    let (_, unfused) = plan(&g, &reference_stack()).unwrap().run(&input).unwrap();
    let (_, tiled) = plan(&g, &tile_stack()).unwrap().run(&input).unwrap();
    let one = 256 * 256 * 4;
    assert_eq!(tiled.peak_live_bytes, one);
    assert!(unfused.peak_live_bytes >= 2 * one, "{unfused}");
}

#[test]
fn the_default_stack_runs_chains_on_the_tile_executor() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F16, [3usize, 5]));
    let y = x.neg().and_then(|v| v.exp()).unwrap();
    b.output(&[y]).unwrap();
    let p = plan(&b.finish(), &default_stack()).unwrap();
    let id = p
        .graph()
        .nodes_with_op(ELEMENTWISE_GROUP.name)
        .next()
        .unwrap();
    assert_eq!(p.executor_of(id), Some(TILE_CPU));
}

#[test]
fn what_it_cannot_take_goes_to_the_next_executor_unchanged() {
    // Integer values, a single elementwise node, and f64 values stay as they are.
    for dt in [DType::I64, DType::F64] {
        let b = Builder::new();
        let x = b.input("x", TensorMeta::new(dt, [4usize]));
        let y = x
            .add(x)
            .and_then(|v| v.mul(v))
            .and_then(|v| v.neg())
            .unwrap();
        b.output(&[y]).unwrap();
        let g = b.finish();
        let p = plan(&g, &tile_stack()).unwrap();
        assert_eq!(groups(p.graph()), 0, "{p}");
        assert_eq!(p.graph().to_string(), g.to_string());
    }
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [4usize]));
    let y = x.exp().and_then(|v| v.sum()).unwrap();
    b.output(&[y]).unwrap();
    let p = plan(&b.finish(), &tile_stack()).unwrap();
    assert_eq!(groups(p.graph()), 0, "{p}");
}

/// A group node written by hand: its program must round-trip, run on the tile executor,
/// and through its decomposition on a stack without it, with the same outputs.
#[test]
fn a_group_node_runs_and_decomposes() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
    let r = b.input("r", TensorMeta::new(DType::F32, [3usize]));
    let program = "%0 = add(in0, in1); %1 = gelu(%0, approximate=\"tanh\"); %2 = gt(%1, in1)";
    let outs = b
        .apply(
            &ELEMENTWISE_GROUP,
            &[x.value(), r.value()],
            &[
                ("program", AttrValue::Str(program.into())),
                ("outputs", AttrValue::Ints(vec![1, 2])),
            ],
        )
        .unwrap();
    assert_eq!(b.meta(outs[1]).unwrap().dtype, DType::Bool);
    b.output(&[b.var(outs[0]), b.var(outs[1])]).unwrap();
    let g = b.finish();
    let inputs = [tensor(DType::F32, &[2, 3], 1), tensor(DType::F32, &[3], 2)];
    let (tiled, _) = plan(&g, &tile_stack()).unwrap().run(&inputs).unwrap();
    let p = plan(&g, &reference_stack()).unwrap();
    assert_eq!(
        groups(p.graph()),
        0,
        "the reference stack decomposes it: {p}"
    );
    let (reference, _) = p.run(&inputs).unwrap();
    for (t, r) in tiled.iter().zip(&reference) {
        let (t, r) = (t.to_f64_vec(), r.to_f64_vec());
        assert!(t
            .iter()
            .zip(&r)
            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())));
    }
    // The text form reads back to the same program.
    let node = g.nodes_with_op(ELEMENTWISE_GROUP.name).next().unwrap();
    let node = g.try_node(node).unwrap();
    let parsed = Program::from_attrs(&node.attrs(), 2).unwrap();
    assert_eq!(parsed.text(), program);
}

#[test]
fn bad_programs_are_clear_errors() {
    let specs = ELEMENTWISE_GROUP.attrs;
    let cases: [(&str, Vec<i64>, &str); 5] = [
        (
            "%0 = matmul(in0, in0)",
            vec![0],
            "not a built-in elementwise op",
        ),
        (
            "%0 = exp(in3)",
            vec![0],
            "`in3` but the node has 1 operands",
        ),
        ("%0 = exp(%0)", vec![0], "not an earlier result"),
        ("%0 = exp(in0)", vec![4], "output 4 names no instruction"),
        (
            "%0 = gelu(in0, approx=\"tanh\")",
            vec![0],
            "has no attribute `approx`",
        ),
    ];
    for (text, outs, want) in cases {
        let values = [AttrValue::Str(text.into()), AttrValue::Ints(outs)];
        let err = Program::from_attrs(&Attrs::new(specs, &values), 1).unwrap_err();
        assert!(err.0.contains(want), "{text}: {err}");
    }
    // Through the builder: the node is refused with the op named.
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [2usize]));
    let err = b
        .apply(
            &ELEMENTWISE_GROUP,
            &[x.value()],
            &[
                ("program", AttrValue::Str("%0 = exp(in0) %1".into())),
                ("outputs", AttrValue::Ints(vec![0])),
            ],
        )
        .unwrap_err();
    assert!(err.to_string().contains("fused.elementwise_group"), "{err}");
}

/// A group's outputs come from the plan's buffer pool (holding the values of an earlier
/// run's freed intermediates, not zeros) and must be written in full: two groups around
/// a transpose, `[131, 259]` (odd, over a tile, every value at least the pool's 64 KiB
/// in f16 too), one plan run three times on new inputs, bit for bit against the
/// reference; the later runs reuse pooled bytes.
#[test]
fn pooled_group_outputs_are_overwritten() {
    let (m, n) = (131usize, 259usize);
    for dt in [DType::F32, DType::F16] {
        let b = Builder::new();
        let x = b.input(
            "x",
            TensorMeta::new(dt, Shape::known(&[m as u64, n as u64])),
        );
        let r = b.input("r", TensorMeta::new(dt, Shape::known(&[n as u64])));
        let y = x
            .add(r)
            .unwrap()
            .gelu_with("tanh")
            .unwrap()
            .mul(2.0)
            .unwrap();
        let z = y
            .transpose(0, 1)
            .unwrap()
            .mul(0.5)
            .unwrap()
            .add(1.5)
            .unwrap();
        b.output(&[z]).unwrap();
        let g = b.finish();
        let want_plan = plan(&g, &reference_stack()).unwrap();
        let p = plan(&g, &tile_stack()).unwrap();
        assert_eq!(groups(p.graph()), 2, "{p}");
        let mut reused = 0;
        for seed in 0..3u64 {
            let inputs = [
                tensor(dt, &[m, n], 2 * seed + 1),
                tensor(dt, &[n], 2 * seed + 2),
            ];
            let (want, _) = want_plan.run(&inputs).unwrap();
            let (got, report) = p.run(&inputs).unwrap();
            reused += report.reused_bytes;
            let (w, o) = (want[0].to_f64_vec(), got[0].to_f64_vec());
            assert_eq!(w.len(), o.len());
            for (j, (a, b)) in w.iter().zip(&o).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{dt:?} run {seed} element {j}: reference {a}, tile {b}"
                );
            }
        }
        assert!(reused > 0, "{dt:?}: no run drew from the pool");
    }
}
