//! The tile executor against the unfused reference and against a plain copy.
//!
//! Chains of 3, 5 and 8 cheap elementwise ops (`mul`, `add`, `relu`, `mul x`, `sub`,
//! `neg`, `abs`, `add`: memory-bound, so fusion shows) on 1 M and 16 M f32 elements:
//! - `tile`: the plan on `[tile executor, reference]` (one group node);
//! - `unfused`: the plan on the reference stack (one pass over memory per op);
//! - `copy`: a parallel copy of the input into a new buffer (read n, write n: the same
//!   bytes a fused chain moves).
//!
//! Throughput is the bytes a fused chain must move (4 n read + 4 n written), so the
//! GB/s of `tile` over `copy` is the fraction of copy bandwidth reached.
//!
//! `cargo bench -p graphrw --bench tile_executor -- --warm-up-time 1 --measurement-time 3`

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use graphrw::exec::{plan, reference_stack, tile_executor, Executor, Plan, ReferenceCpu};
use graphrw::{Builder, DType, Tensor, TensorMeta, Var};
use rayon::prelude::*;

/// The `k`-op chain on an f32 input of `n` elements.
fn chain_plan(n: usize, k: usize, stack: &[Arc<dyn Executor>]) -> Plan {
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(DType::F32, [n]));
    let steps: [for<'a> fn(Var<'a>, Var<'a>) -> Var<'a>; 8] = [
        |v, _| v.mul(0.5).unwrap(),
        |v, _| v.add(1.0).unwrap(),
        |v, _| v.relu().unwrap(),
        |v, x| v.mul(x).unwrap(),
        |v, _| v.sub(0.25).unwrap(),
        |v, _| v.neg().unwrap(),
        |v, _| v.abs().unwrap(),
        |v, _| v.add(2.0).unwrap(),
    ];
    let mut v = x;
    for s in &steps[..k] {
        v = s(v, x);
    }
    g.output(&[v]).unwrap();
    plan(&g.finish(), stack).unwrap()
}

fn bench(c: &mut Criterion) {
    let tile_stack: Vec<Arc<dyn Executor>> = vec![tile_executor(), Arc::new(ReferenceCpu)];
    for n in [1usize << 20, 1 << 24] {
        let input =
            Tensor::from_vec(vec![n], (0..n).map(|i| (i % 97) as f32 - 48.0).collect()).unwrap();
        let inputs = [input.clone()];
        let mut group = c.benchmark_group(format!("tile_executor/{}M", n >> 20));
        group.sample_size(10);
        group.throughput(Throughput::Bytes(8 * n as u64));
        let src = input.as_slice::<f32>().unwrap();
        group.bench_function("copy", |b| {
            b.iter(|| {
                let mut dst = vec![0f32; n];
                dst.par_chunks_mut(1 << 16)
                    .zip(src.par_chunks(1 << 16))
                    .for_each(|(d, s)| d.copy_from_slice(s));
                dst
            })
        });
        for k in [3usize, 5, 8] {
            let tiled = chain_plan(n, k, &tile_stack);
            assert_eq!(
                tiled.graph().op_counts().get("fused.elementwise_group"),
                Some(&1)
            );
            let unfused = chain_plan(n, k, &reference_stack());
            group.bench_with_input(BenchmarkId::new("tile", k), &k, |b, _| {
                b.iter(|| tiled.run(&inputs).unwrap())
            });
            group.bench_with_input(BenchmarkId::new("unfused", k), &k, |b, _| {
                b.iter(|| unfused.run(&inputs).unwrap())
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
