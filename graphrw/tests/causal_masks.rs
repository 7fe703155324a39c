//! Causal masks to `is_causal` (`rules::causal::mark_causal`) on hand-built graphs, one
//! per way models write the triangle: each converted graph must compute what the
//! original did (reference executor and fused kernel), and the forms that are not
//! exactly a top-left triangle must be left alone.

use graphrw::exec::{default_stack, plan, run_reference};
use graphrw::rules::causal::{mark_causal, CausalReport};
use graphrw::{verify, Builder, DType, Graph, Tensor, TensorMeta, Var};
use graphrw_kernels::testing::compare;

const H: usize = 2;
const D: usize = 8;

/// Deterministic inputs in [-2, 2).
fn data(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let vals: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 4000) as f32 / 1000.0 - 2.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), vals).unwrap()
}

/// A padding mask over `skv` keys: key 0 padded too (so some rows are fully masked).
fn padding(skv: usize) -> Tensor {
    let v: Vec<bool> = (0..skv).map(|j| j % 3 != 0 || j == 3).collect();
    Tensor::from_vec(vec![1, 1, 1, skv], v).unwrap()
}

/// One attention node over `q [1, H, sq, D]`, `k`/`v [1, H, skv, D]` and a `pad`
/// input, with the mask `make` builds.
fn graph(
    sq: usize,
    skv: usize,
    make: impl for<'a> FnOnce(&'a Builder, Var<'a>) -> Var<'a>,
) -> Graph {
    let g = Builder::new();
    let q = g.input("q", TensorMeta::new(DType::F32, [1, H, sq, D]));
    let k = g.input("k", TensorMeta::new(DType::F32, [1, H, skv, D]));
    let v = g.input("v", TensorMeta::new(DType::F32, [1, H, skv, D]));
    let pad = g.input("pad", TensorMeta::new(DType::Bool, [1usize, 1, 1, skv]));
    let mask = make(&g, pad);
    let out = q.scaled_dot_product_attention(k, v, Some(mask)).unwrap();
    g.output(&[out]).unwrap();
    g.finish()
}

fn inputs(sq: usize, skv: usize) -> Vec<Tensor> {
    vec![
        data(&[1, H, sq, D], 1),
        data(&[1, H, skv, D], 2),
        data(&[1, H, skv, D], 3),
        padding(skv),
    ]
}

fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    compare::assert_close_tensor(got, want, compare::Tol::new(1e-5, 1e-5), what);
}

/// The attention node's `is_causal` and whether it still has a mask.
fn attention_state(g: &Graph) -> (bool, bool) {
    let id = g
        .nodes_with_op("scaled_dot_product_attention")
        .next()
        .expect("an attention node");
    let node = g.node(id).unwrap();
    (
        node.attrs().bool("is_causal").unwrap(),
        node.operands().len() == 4,
    )
}

/// Converts, checks the report and the node, and checks the outputs did not change
/// (reference executor before and after, fused kernel after).
fn check(
    sq: usize,
    skv: usize,
    make: impl for<'a> FnOnce(&'a Builder, Var<'a>) -> Var<'a>,
    expect: Option<bool>,
) {
    let mut g = graph(sq, skv, make);
    let x = inputs(sq, skv);
    let before = run_reference(&g, &x).unwrap();
    let report = mark_causal(&mut g).unwrap();
    verify(&g).unwrap();
    let (causal, has_mask) = attention_state(&g);
    match expect {
        None => {
            assert_eq!(
                report,
                CausalReport {
                    converted: 0,
                    with_remainder: 0,
                    unchanged: 1
                }
            );
            assert!(!causal && has_mask);
        }
        Some(remainder) => {
            assert_eq!(
                report,
                CausalReport {
                    converted: 1,
                    with_remainder: usize::from(remainder),
                    unchanged: 0
                },
                "{g}"
            );
            assert!(causal);
            assert_eq!(has_mask, remainder, "{g}");
            // No constant as large as the triangle is left in the graph.
            assert!(g.nodes_with_op("tril").next().is_none());
            assert!(g.nodes_with_op("triu").next().is_none());
        }
    }
    let after = run_reference(&g, &x).unwrap();
    assert_close(&after[0], &before[0], "reference executor");
    let fused = plan(&g, &default_stack()).unwrap().run(&x).unwrap().0;
    assert_close(&fused[0], &before[0], "fused kernel");
}

/// `where(cond, 0, hide)` in f32.
fn additive<'b>(g: &'b Builder, cond: Var<'b>, hide: f64) -> Var<'b> {
    cond.where_(g.scalar(0.0, DType::F32), g.scalar(hide, DType::F32))
        .unwrap()
}

fn tril_bool(g: &Builder, sq: usize, skv: usize) -> Var<'_> {
    let ones = g.ones_with(&[sq as i64, skv as i64], DType::Bool).unwrap();
    g.var(g.tril(ones).unwrap())
}

#[test]
fn tril_of_ones_bool() {
    check(6, 6, |g, _| tril_bool(g, 6, 6), Some(false));
}

#[test]
fn triu_of_full_neg_inf_additive() {
    // torch.triu(torch.full((S, S), -inf), 1)
    check(
        7,
        7,
        |g, _| {
            let full = g.full(&[7, 7], f64::NEG_INFINITY).unwrap();
            g.var(g.triu_with(full, 1).unwrap())
        },
        Some(false),
    );
}

#[test]
fn arange_comparisons() {
    // arange(S).unsqueeze(-1) >= arange(S), and the hidden side written with gt.
    check(
        5,
        5,
        |g, _| {
            let i = g.var(g.arange(5.0).unwrap());
            let j = g.var(g.arange(5.0).unwrap());
            i.unsqueeze(-1).unwrap().ge(j).unwrap()
        },
        Some(false),
    );
    check(
        5,
        5,
        |g, _| {
            let i = g.var(g.arange(5.0).unwrap());
            let j = g.var(g.arange(5.0).unwrap());
            let hidden = j.gt(i.reshape(&[5, 1]).unwrap()).unwrap();
            hidden
                .where_(
                    g.scalar(f64::NEG_INFINITY, DType::F32),
                    g.scalar(0.0, DType::F32),
                )
                .unwrap()
        },
        Some(false),
    );
}

#[test]
fn gpt2_bias_buffer_sliced() {
    // A [1, 1, 16, 16] lower-triangular bool buffer, sliced to [:, :, :Sq, :Skv].
    check(
        9,
        9,
        |g, _| {
            let n = 16;
            let v: Vec<bool> = (0..n * n).map(|x| x % n <= x / n).collect();
            let bias = g.constant(Tensor::from_vec(vec![1, 1, n, n], v).unwrap());
            bias.slice_with(2, 0, 9, 1)
                .unwrap()
                .slice_with(3, 0, 9, 1)
                .unwrap()
        },
        Some(false),
    );
}

#[test]
fn llama_prepare_4d_causal_mask_finite_min() {
    // full((S, S), finfo.min), then 0 where arange < (arange + 1).view(S, 1).
    check(
        8,
        8,
        |g, _| {
            let full = g.var(g.full(&[8, 8], f32::MIN as f64).unwrap());
            let c = g.var(g.arange(8.0).unwrap());
            let cond = c.lt(c.add(1.0).unwrap().reshape(&[8, 1]).unwrap()).unwrap();
            cond.where_(0.0, full)
                .unwrap()
                .unsqueeze(0)
                .unwrap()
                .unsqueeze(0)
                .unwrap()
        },
        Some(false),
    );
}

#[test]
fn where_of_causal_and_padding_keeps_the_padding() {
    // The corpus form: where(and(triangle, padding), 0, -inf).
    check(
        6,
        6,
        |g, pad| {
            let both = tril_bool(g, 6, 6).and(pad).unwrap();
            additive(g, both, f64::NEG_INFINITY)
        },
        Some(true),
    );
    // The padding first, the triangle second.
    check(
        6,
        6,
        |g, pad| pad.and(tril_bool(g, 6, 6)).unwrap(),
        Some(true),
    );
}

#[test]
fn additive_triangle_plus_padding() {
    check(
        7,
        7,
        |g, pad| {
            let tri = additive(g, tril_bool(g, 7, 7), f64::NEG_INFINITY);
            let pad = additive(g, pad, f64::NEG_INFINITY);
            tri.add(pad).unwrap()
        },
        Some(true),
    );
    // Combined with `minimum` (the padding term is provably <= 0).
    check(
        7,
        7,
        |g, pad| {
            let tri = additive(g, tril_bool(g, 7, 7), f64::NEG_INFINITY);
            let pad = additive(g, pad, f32::MIN as f64);
            pad.minimum(tri).unwrap()
        },
        Some(true),
    );
}

#[test]
fn finite_min_triangle_with_padding_is_left_alone() {
    // finfo.min with a padding mask: fully padded rows would change (module docs).
    check(
        6,
        6,
        |g, pad| {
            let both = tril_bool(g, 6, 6).and(pad).unwrap();
            additive(g, both, f32::MIN as f64)
        },
        None,
    );
}

#[test]
fn query_and_key_lengths_differ() {
    // Top-left aligned (what is_causal means): converted.
    check(4, 9, |g, _| tril_bool(g, 4, 9), Some(false));
    check(9, 4, |g, _| tril_bool(g, 9, 4), Some(false));
    // Bottom-right aligned (a KV cache): not is_causal, left alone.
    check(
        4,
        9,
        |g, _| {
            let ones = g.ones_with(&[4, 9], DType::Bool).unwrap();
            g.var(g.tril_with(ones, 5).unwrap())
        },
        None,
    );
}

#[test]
fn masks_that_are_not_the_triangle_are_left_alone() {
    // A band (sliding window) and a strict triangle (the diagonal hidden too).
    check(
        6,
        6,
        |g, _| {
            let ones = g.ones_with(&[6, 6], DType::Bool).unwrap();
            let band = g.triu_with(g.tril(ones).unwrap(), -2).unwrap();
            g.var(band)
        },
        None,
    );
    check(
        6,
        6,
        |g, _| {
            let ones = g.ones_with(&[6, 6], DType::Bool).unwrap();
            g.var(g.tril_with(ones, -1).unwrap())
        },
        None,
    );
    // A dynamic mask alone.
    check(6, 6, |_, pad| pad, None);
}

#[test]
fn shared_masks_are_split_once() {
    // Two attention nodes reading one mask: both become causal, sharing the remainder.
    let g = Builder::new();
    let q = g.input("q", TensorMeta::new(DType::F32, [1usize, H, 6, D]));
    let pad = g.input("pad", TensorMeta::new(DType::Bool, [1usize, 1, 1, 6]));
    let mask = tril_bool(&g, 6, 6).and(pad).unwrap();
    let a = q.scaled_dot_product_attention(q, q, Some(mask)).unwrap();
    let b = a.scaled_dot_product_attention(a, a, Some(mask)).unwrap();
    g.output(&[b]).unwrap();
    let mut graph = g.finish();
    let x = vec![data(&[1, H, 6, D], 5), padding(6)];
    let before = run_reference(&graph, &x).unwrap();
    let report = mark_causal(&mut graph).unwrap();
    verify(&graph).unwrap();
    assert_eq!(report.converted, 2);
    assert_eq!(graph.nodes_with_op("and").count(), 0, "{graph}");
    let after = run_reference(&graph, &x).unwrap();
    assert_close(&after[0], &before[0], "two layers");
}

#[test]
fn a_triangle_that_depends_on_a_graph_input_stays_a_mask() {
    // `pos.unsqueeze(-1) >= arange(S)` with the query positions a graph input (a cache
    // offset, as decoders write it): a top-left triangle only when pos == arange(S), so
    // it must stay a mask.
    let g = Builder::new();
    let q = g.input("q", TensorMeta::new(DType::F32, [1usize, H, 5, D]));
    let pos = g.input("pos", TensorMeta::new(DType::I64, [5usize]));
    let j = g.var(g.arange(5.0).unwrap());
    let mask = pos.unsqueeze(-1).unwrap().ge(j).unwrap();
    let out = q.scaled_dot_product_attention(q, q, Some(mask)).unwrap();
    g.output(&[out]).unwrap();
    let mut graph = g.finish();
    // Positions shifted by 2: every query sees keys 0..=pos, not the top-left triangle.
    let x = vec![
        data(&[1, H, 5, D], 9),
        Tensor::from_vec(vec![5], vec![2i64, 3, 4, 5, 6]).unwrap(),
    ];
    let before = run_reference(&graph, &x).unwrap();
    let report = mark_causal(&mut graph).unwrap();
    verify(&graph).unwrap();
    assert_eq!(
        report,
        CausalReport {
            converted: 0,
            with_remainder: 0,
            unchanged: 1
        },
        "{graph}"
    );
    let (causal, has_mask) = attention_state(&graph);
    assert!(!causal && has_mask, "{graph}");
    let after = run_reference(&graph, &x).unwrap();
    assert_close(&after[0], &before[0], "input-dependent triangle");
}
