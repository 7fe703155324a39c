//! Matcher and rewriter throughput on synthetic L-layer transformer graphs (attention
//! block + MLP per layer, built with `Builder`), from about 1 k to about 1 M nodes.
//!
//! Two measurements per size, both reported per node (criterion's `Throughput::Elements`
//! is the node count, so criterion prints elements/s; ns/node is its inverse):
//! - `find_sdpa`: one SDPA pattern's `Pattern::find` over the whole graph;
//! - `rewrite_canonical_attention`: a `Rewriter` over `rules::{CANONICAL, ATTENTION}`
//!   (match + rewrite + dead-code removal) on a fresh clone of the graph per iteration.
//!
//! `cargo bench -p graphrw --bench matcher` runs the sizes up to ~100 k nodes; set
//! `GRAPHRW_BENCH_BIG=1` to add the ~1 M node graph.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use graphrw::rewrite::Rewriter;
use graphrw::rules::{ATTENTION, CANONICAL};
use graphrw::{pattern, Builder, DType, Graph, Tensor, TensorMeta, Var};

pattern! {
    /// Inductor's first SDPA pattern: `q @ kᵀ / s`, softmax, `@ v`.
    pub fn sdpa(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    }
}

const SEQ: usize = 4;
const HEADS: usize = 2;
const HEAD_DIM: usize = 4;
const MODEL: usize = HEADS * HEAD_DIM;
const HIDDEN: usize = 2 * MODEL;

/// Weights shared by every layer (constants share storage, so a big graph stays small).
struct Weights {
    square: Tensor,
    up: Tensor,
    down: Tensor,
    bias_model: Tensor,
    bias_hidden: Tensor,
}

fn layer<'b>(b: &'b Builder, w: &Weights, x: Var<'b>) -> Var<'b> {
    let c = |t: &Tensor| b.constant(t.clone());
    let heads = |t: Var<'b>| {
        t.reshape(&[SEQ as i64, HEADS as i64, HEAD_DIM as i64])
            .and_then(|t| t.permute(&[1, 0, 2]))
            .unwrap()
    };
    // Attention block: projections, scaled dot-product attention, output projection,
    // residual and layer norm.
    let q = heads(x.matmul(c(&w.square)).unwrap());
    let k = heads(x.matmul(c(&w.square)).unwrap());
    let v = heads(x.matmul(c(&w.square)).unwrap());
    let attn = q
        .matmul(k.transpose(-2, -1).unwrap())
        .and_then(|s| s.div((HEAD_DIM as f64).sqrt()))
        .and_then(|s| s.softmax(-1))
        .and_then(|p| p.matmul(v))
        .and_then(|o| o.permute(&[1, 0, 2]))
        .and_then(|o| o.reshape(&[SEQ as i64, MODEL as i64]))
        .and_then(|o| o.matmul(c(&w.square)))
        .and_then(|o| o.add(c(&w.bias_model)))
        .unwrap();
    let h = x
        .add(attn)
        .and_then(|h| h.layer_norm(None, None, -1, 1e-5))
        .unwrap();
    // MLP block.
    let m = h
        .matmul(c(&w.up))
        .and_then(|m| m.add(c(&w.bias_hidden)))
        .and_then(|m| m.gelu("none"))
        .and_then(|m| m.matmul(c(&w.down)))
        .and_then(|m| m.add(c(&w.bias_model)))
        .unwrap();
    h.add(m)
        .and_then(|y| y.layer_norm(None, None, -1, 1e-5))
        .unwrap()
}

/// An `layers`-layer transformer graph.
fn transformer(layers: usize) -> Graph {
    let w = Weights {
        square: Tensor::full(DType::F32, &[MODEL, MODEL], 0.01),
        up: Tensor::full(DType::F32, &[MODEL, HIDDEN], 0.01),
        down: Tensor::full(DType::F32, &[HIDDEN, MODEL], 0.01),
        bias_model: Tensor::full(DType::F32, &[MODEL], 0.0),
        bias_hidden: Tensor::full(DType::F32, &[HIDDEN], 0.0),
    };
    let b = Builder::new();
    let mut x = b.input("x", TensorMeta::new(DType::F32, [SEQ, MODEL]));
    for _ in 0..layers {
        x = layer(&b, &w, x);
    }
    b.output(&[x]).unwrap();
    b.finish()
}

fn sizes() -> Vec<usize> {
    let mut s = vec![30, 300, 3_000];
    if std::env::var("GRAPHRW_BENCH_BIG").is_ok_and(|v| v == "1") {
        s.push(30_000);
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("matcher");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for layers in sizes() {
        let graph = transformer(layers);
        let nodes = graph.node_count();
        group.throughput(Throughput::Elements(nodes as u64));
        let id = format!("L{layers}_{nodes}nodes");
        assert_eq!(sdpa::PATTERN.find(&graph).len(), layers);
        group.bench_with_input(BenchmarkId::new("find_sdpa", &id), &graph, |bch, g| {
            bch.iter(|| sdpa::PATTERN.find(g).len())
        });
        let rewriter = Rewriter::new(&[&CANONICAL, &ATTENTION]);
        let mut fused = graph.clone();
        let report = rewriter.run(&mut fused).unwrap();
        let sdpa_nodes = fused.nodes_with_op("scaled_dot_product_attention").count();
        eprintln!(
            "{id}: {} rewrites, {sdpa_nodes} attention nodes fused, {} nodes after",
            report.total(),
            fused.node_count()
        );
        group.bench_with_input(
            BenchmarkId::new("rewrite_canonical_attention", &id),
            &graph,
            |bch, g| {
                bch.iter_batched(
                    || g.clone(),
                    |mut g| rewriter.run(&mut g).unwrap().total(),
                    BatchSize::LargeInput,
                )
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
