//! Matcher and rewriter throughput on synthetic L-layer transformer graphs (attention
//! block + MLP per layer, built with `Builder`), from about 1 k to about 1 M nodes.
//!
//! Measurements per size, all reported per node (criterion's `Throughput::Elements` is
//! the node count, so criterion prints elements/s; ns/node is its inverse):
//! - `find_sdpa`: one SDPA pattern's `Pattern::find` over the whole graph;
//! - `match_1rule` / `match_{N}rules`: a matching pass without rewriting
//!   (`Dispatch::first_matches`: every node, the first rule that matches there) with the
//!   one SDPA rule, and with the 34 rules of `rules::{CANONICAL, ATTENTION}` plus the
//!   bench-only Inductor-style set `EXTRA` below;
//! - `rewrite_1rule` / `rewrite_{N}rules`: a `Rewriter` over the same rules (match +
//!   rewrite + dead-code removal) on a fresh clone of the graph per iteration.
//!
//! `cargo bench -p graphrw --bench matcher` runs the sizes up to ~100 k nodes; set
//! `GRAPHRW_BENCH_BIG=1` to add the ~1 M node graph, or `GRAPHRW_BENCH_LAYERS=30,30000`
//! to choose the layer counts (37 nodes per layer). On a busy machine, set
//! `GRAPHRW_BENCH_MIN=N` to print first a table of the fastest of N interleaved runs of
//! each measurement at each size, in ns/node (the minimum is what load disturbs least).
//!
//! The two kinds of figure answer different questions. Criterion's are warm: the same
//! pass over the same graph again and again, so a 1 k-node graph sits in the L1/L2
//! caches and a 1 M-node one (~200 MB) never does; their growth with size is mostly the
//! memory hierarchy. The `GRAPHRW_BENCH_MIN` table runs each pass once per round, the
//! sizes interleaved, so every size starts with cold caches.
//!
//! In a full run, the warm rewrite figures at ~111 k nodes can come out about twice
//! what the same benches give alone (`GRAPHRW_BENCH_LAYERS=3000 cargo bench -p graphrw
//! --bench matcher -- rewrite`): the allocator's state after the earlier benches, not
//! the rewriter, is what differs.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use graphrw::pattern::dispatch::Dispatch;
use graphrw::pattern::MatchOptions;
use graphrw::rewrite::Rewriter;
use graphrw::rules::{ATTENTION, CANONICAL};
use graphrw::{pattern, rule_set, Builder, DType, Graph, RuleSet, Tensor, TensorMeta, Var};

pattern! {
    /// Inductor's first SDPA pattern: `q @ kᵀ / s`, softmax, `@ v`.
    pub fn sdpa(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    }
}

rule_set! {
    /// The one-rule pass: Inductor's first SDPA pattern, fused.
    pub static ONE;
    rule sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    } => {
        query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(1.0 / inv_scale), false)?
    }
}

rule_set! {
    /// Bench-only rules in the style of Inductor's SDPA patterns and simple algebra, on
    /// top of the 22 built-in rules (34 in all): they anchor at the same ops as the
    /// graph's nodes (`matmul`, `add`, `mul`) but mostly cannot match there.
    pub static EXTRA;

    rule sfdp_2(query: Tensor, key: Tensor, value: Tensor, s: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).mul(s).softmax(-1).matmul(value)
    } => {
        query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(s), false)?
    }
    rule sfdp_3(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64, p: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).dropout(p, false).matmul(value)
    } => {
        query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(1.0 / inv_scale), false)?
    }
    rule sfdp_4(query: Tensor, key: Tensor, value: Tensor, s: f64, p: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).mul(s).softmax(-1).dropout(p, false).matmul(value)
    } => {
        query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(s), false)?
    }
    rule sfdp_5(query: Tensor, key: Tensor, value: Tensor, mask: Tensor, d: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(d).add(mask).softmax(-1).matmul(value)
    } => {
        query.scaled_dot_product_attention_with(key, value, Some(mask), 0.0, false, Some(1.0 / d), false)?
    }
    rule sfdp_11(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        q.matmul(k.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(v)
    } => {
        let q = query.permute(&[0, 2, 1, 3])?;
        let k = key.permute(&[0, 2, 1, 3])?;
        let v = value.permute(&[0, 2, 1, 3])?;
        q.scaled_dot_product_attention_with(k, v, None, 0.0, false, Some(1.0 / inv_scale), false)?
    }
    rule sfdp_13(query: Tensor, key: Tensor, value: Tensor, p: f64) -> Tensor
    where rank(query) == 3
    {
        query.matmul(key.permute([0, 2, 1])).softmax(-1).dropout(p, false).matmul(value)
    } => {
        query.scaled_dot_product_attention(key, value, None)?
    }
    rule add_zero(x: Tensor) -> Tensor { x.add(0.0) } => { x }
    rule mul_one(x: Tensor) -> Tensor { x.mul(1.0) } => { x }
    rule silu(x: Tensor) -> Tensor { x.mul(x.sigmoid()) } => { x.silu()? }
    rule gelu_erf(x: Tensor) -> Tensor {
        x.mul(0.5).mul(x.mul(0.7071067811865476).erf().add(1.0))
    } => {
        x.gelu()?
    }
    rule relu_relu(x: Tensor) -> Tensor { x.relu().relu() } => { x.relu()? }
    rule exp_log(x: Tensor) -> Tensor { x.log().exp() } => { x }
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
    let h = x.add(attn).and_then(|h| h.layer_norm(None, None)).unwrap();
    // MLP block.
    let m = h
        .matmul(c(&w.up))
        .and_then(|m| m.add(c(&w.bias_hidden)))
        .and_then(|m| m.gelu())
        .and_then(|m| m.matmul(c(&w.down)))
        .and_then(|m| m.add(c(&w.bias_model)))
        .unwrap();
    h.add(m).and_then(|y| y.layer_norm(None, None)).unwrap()
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
    if let Ok(layers) = std::env::var("GRAPHRW_BENCH_LAYERS") {
        return layers
            .split(',')
            .map(|l| {
                l.trim()
                    .parse()
                    .expect("GRAPHRW_BENCH_LAYERS: layer counts, comma-separated")
            })
            .collect();
    }
    // ~1.1 k, ~16 k and ~111 k nodes (and ~1.1 M).
    let mut s = vec![30, 440, 3_000];
    if std::env::var("GRAPHRW_BENCH_BIG").is_ok_and(|v| v == "1") {
        s.push(30_000);
    }
    s
}

/// The many-rule pass (34 rules when this was written; the bench ids count them).
const MANY: [&RuleSet; 3] = [&CANONICAL, &ATTENTION, &EXTRA];

/// How many rules [`MANY`] holds: the `N` of the `match_{N}rules` ids.
fn many_rules() -> usize {
    MANY.iter().map(|s| s.rules.len()).sum()
}

/// Seconds of the fastest of `rounds` runs of each measurement, sizes interleaved.
fn min_table(rounds: usize) {
    let graphs: Vec<(usize, Graph)> = sizes().into_iter().map(|l| (l, transformer(l))).collect();
    let options = MatchOptions::new();
    let (one, many) = (Dispatch::for_sets(&[&ONE]), Dispatch::for_sets(&MANY));
    let n = many_rules();
    let names = [
        "find_sdpa".to_string(),
        "match_1rule".to_string(),
        format!("match_{n}rules"),
        "rewrite_1rule".to_string(),
        format!("rewrite_{n}rules"),
    ];
    let mut best = vec![[f64::INFINITY; 5]; graphs.len()];
    let time = |f: &mut dyn FnMut() -> usize| {
        let t = Instant::now();
        std::hint::black_box(f());
        t.elapsed().as_secs_f64()
    };
    for _ in 0..rounds {
        for (i, (_, g)) in graphs.iter().enumerate() {
            let t = [
                time(&mut || sdpa::PATTERN.find(g).len()),
                time(&mut || one.first_matches(g, &options).len()),
                time(&mut || many.first_matches(g, &options).len()),
                {
                    let mut c = g.clone();
                    let r = Rewriter::new(&[&ONE]).with_verify_each(false);
                    time(&mut || r.run(&mut c).unwrap().total())
                },
                {
                    let mut c = g.clone();
                    let r = Rewriter::new(&MANY).with_verify_each(false);
                    time(&mut || r.run(&mut c).unwrap().total())
                },
            ];
            for k in 0..5 {
                best[i][k] = best[i][k].min(t[k]);
            }
        }
    }
    eprintln!("fastest of {rounds} runs, ns/node:");
    eprintln!(
        "{:>10} {}",
        "nodes",
        names.iter().map(|n| format!("{n:>16}")).collect::<String>()
    );
    for ((_, g), b) in graphs.iter().zip(&best) {
        let n = g.node_count() as f64;
        let cells: String = b.iter().map(|t| format!("{:>16.1}", t * 1e9 / n)).collect();
        eprintln!("{:>10} {cells}", g.node_count());
    }
}

fn bench(c: &mut Criterion) {
    if let Some(rounds) = std::env::var("GRAPHRW_BENCH_MIN")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        min_table(rounds);
    }
    let mut group = c.benchmark_group("matcher");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let rules = many_rules();
    assert!(rules >= 30, "{rules} rules");
    let (match_many, rewrite_many) = (
        format!("match_{rules}rules"),
        format!("rewrite_{rules}rules"),
    );
    let options = MatchOptions::new();
    for layers in sizes() {
        let graph = transformer(layers);
        let nodes = graph.node_count();
        group.throughput(Throughput::Elements(nodes as u64));
        let id = format!("L{layers}_{nodes}nodes");
        assert_eq!(sdpa::PATTERN.find(&graph).len(), layers);
        group.bench_with_input(BenchmarkId::new("find_sdpa", &id), &graph, |bch, g| {
            bch.iter(|| sdpa::PATTERN.find(g).len())
        });
        let one = Dispatch::for_sets(&[&ONE]);
        let many = Dispatch::for_sets(&MANY);
        assert_eq!(one.first_matches(&graph, &options).len(), layers);
        eprintln!(
            "{id}: {} rules, {} first matches",
            many.rules().len(),
            many.first_matches(&graph, &options).len()
        );
        group.bench_with_input(BenchmarkId::new("match_1rule", &id), &graph, |bch, g| {
            bch.iter(|| one.first_matches(g, &options).len())
        });
        group.bench_with_input(
            BenchmarkId::new(match_many.as_str(), &id),
            &graph,
            |bch, g| bch.iter(|| many.first_matches(g, &options).len()),
        );
        for (name, sets) in [
            ("rewrite_1rule", &[&ONE][..]),
            (rewrite_many.as_str(), &MANY[..]),
        ] {
            let rewriter = Rewriter::new(sets).with_verify_each(false);
            let mut fused = graph.clone();
            let report = rewriter.run(&mut fused).unwrap();
            let sdpa_nodes = fused.nodes_with_op("scaled_dot_product_attention").count();
            assert_eq!(sdpa_nodes, layers);
            eprintln!(
                "{id} {name}: {} rewrites, {} match attempts, {sdpa_nodes} attention nodes fused, {} nodes after",
                report.total(),
                report.attempts,
                fused.node_count()
            );
            group.bench_with_input(BenchmarkId::new(name, &id), &graph, |bch, g| {
                bch.iter_batched(
                    || g.clone(),
                    // The graph is returned so that dropping it is not timed.
                    |mut g| {
                        rewriter.run(&mut g).unwrap();
                        g
                    },
                    BatchSize::LargeInput,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
