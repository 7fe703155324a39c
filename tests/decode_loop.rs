//! The generation loop (`graphrw::exec::DecodeLoop`) on the KV-cache decoder steps of
//! `tests/models/decoders` (both exporters; one query head per kv head, and grouped
//! heads): a prompt, one-token steps and chunks, batch 2, with each step's presents
//! fed back as the next step's pasts, gives bit for bit what running each step through
//! `Plan::run` with the presents passed back by hand gives, while its caches grow in
//! place (their capacity the next power of two of their length, so they were appended
//! to, not rebuilt every step). At each instruction set cap (the CPU's best, AVX2+FMA,
//! the portable loops), so the AVX2 and baseline paths run on an AVX-512 machine too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphrw::exec::{default_stack, plan, plan_with, CachePair, DecodeLoop, KernelOptions};
use graphrw::{onnx, rules, Tensor};
use graphrw_kernels::cpu::row_cache::capacity_for;
use graphrw_kernels::cpu::Isa;

fn decoders() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/decoders")
}

/// Deterministic values in [-1, 1).
fn data(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn the_loop_gives_the_steps_run_one_by_one_bit_for_bit() {
    let steps = [5usize, 1, 1, 1, 9, 1, 3, 1, 1, 1, 1, 1, 1, 12, 1];
    let caps = [None, Some(Isa::Avx2Fma), Some(Isa::Baseline)];
    let models = [
        "gqa_dynamo",
        "gqa_torchscript",
        "step_dynamo",
        "step_torchscript",
        "chunk_dynamo",
        "chunk_torchscript",
    ];
    for (model, cap) in models.iter().flat_map(|m| caps.map(|c| (*m, c))) {
        let dir = decoders().join(model);
        let mut g = onnx::load(dir.join("model.onnx")).expect("load");
        rules::optimize(&mut g).unwrap_or_else(|e| panic!("{model}: {e}"));
        let options = match cap {
            Some(isa) => KernelOptions::default().with_max_isa(isa),
            None => KernelOptions::default(),
        };
        let p = Arc::new(plan_with(&g, &default_stack(), options).expect("plan"));
        let model = format!("{model} (cap {cap:?})");
        let pairs = CachePair::by_name(p.graph());
        assert_eq!(
            pairs,
            vec![
                CachePair {
                    past: 1,
                    present: 1,
                    axis: Some(2)
                },
                CachePair {
                    past: 2,
                    present: 2,
                    axis: Some(2)
                },
            ],
            "{model}: the caches found"
        );
        // The widths from the model's test data: x [b, s, W], past [b, H, p, D].
        let sample: Vec<Tensor> = (0..3)
            .map(|i| {
                let path = dir.join(format!("test_data_set_0/input_{i}.pb"));
                onnx::read_tensor_pb(&path).expect("tensor").1
            })
            .collect();
        let width = sample[0].shape()[2];
        let (heads, head_dim) = (sample[1].shape()[1], sample[1].shape()[3]);
        let empty = Tensor::zeros(sample[1].dtype(), &[2, heads, 0, head_dim]);

        let mut lp = DecodeLoop::new(Arc::clone(&p)).expect("loop");
        lp.start(&[empty.clone(), empty.clone()]).expect("start");
        let (mut past_k, mut past_v) = (empty.clone(), empty);
        let mut len = 0;
        // Views bound afresh by the run of the first step, which binds every one.
        let mut all_views = 0;
        for (i, &n) in steps.iter().enumerate() {
            let x = data(&[2, n, width], 100 + i as u64);
            let (want, run) = p
                .run(&[x.clone(), past_k.clone(), past_v.clone()])
                .unwrap_or_else(|e| panic!("{model} step {i}: {e}"));
            let (got, step) = lp
                .step(&[x])
                .unwrap_or_else(|e| panic!("{model} loop step {i}: {e}"));
            // The loop's step binds what the run before it bound at the same sizes.
            assert_eq!(step.bound_views, 0, "{model} step {i}: views bound again");
            match i {
                0 => all_views = run.bound_views,
                // Only the cache length changed: the nodes that read the new tokens and
                // the batch alone keep their views.
                _ if steps[i - 1] == n => assert!(
                    run.bound_views < all_views,
                    "{model} step {i}: {} of {all_views} views bound again",
                    run.bound_views
                ),
                _ => {}
            }
            len += n;
            assert_eq!(got.len(), 1, "{model}: only y comes out of the loop");
            assert_eq!(got[0].shape(), want[0].shape(), "{model} step {i}");
            assert!(
                bits(&got[0]) == bits(&want[0]),
                "{model} step {i}: y differs"
            );
            assert_eq!(lp.cache_len(0), Some(len), "{model} step {i}");
            (past_k, past_v) = (want[1].clone(), want[2].clone());
        }
        for (k, want) in [(0, &past_k), (1, &past_v)] {
            let cache = lp.cache(k).expect("cache");
            assert_eq!(cache.shape(), want.shape(), "{model} cache {k}");
            assert!(bits(&cache) == bits(want), "{model}: cache {k} differs");
        }
        assert_eq!(
            capacity_for(len),
            64,
            "{model}: {len} rows fit a capacity of 64"
        );
        // Restarting begins again from the given caches.
        let short = Tensor::zeros(past_k.dtype(), &[2, heads, 3, head_dim]);
        lp.start(&[short.clone(), short]).expect("restart");
        lp.step(&[data(&[2, 1, width], 7)])
            .expect("step after restart");
        assert_eq!(lp.cache_len(1), Some(4), "{model}: restarted");
    }
}

#[test]
fn a_loop_needs_started_caches_and_the_right_feeds() {
    let dir = decoders().join("gqa_dynamo");
    let mut g = onnx::load(dir.join("model.onnx")).expect("load");
    rules::optimize(&mut g).expect("optimize");
    let p = Arc::new(plan(&g, &default_stack()).expect("plan"));
    let mut lp = DecodeLoop::new(Arc::clone(&p)).expect("loop");
    let x = data(&[1, 1, 64], 1);
    let err = lp.step(std::slice::from_ref(&x)).unwrap_err().to_string();
    assert!(err.contains("not started"), "{err}");
    let err = lp
        .start(&[Tensor::zeros(x.dtype(), &[1, 2, 0, 16])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("1 caches given for 2 pairs"), "{err}");
    let empty = Tensor::zeros(x.dtype(), &[1, 2, 0, 16]);
    lp.start(&[empty.clone(), empty]).expect("start");
    let err = lp.step(&[x.clone(), x.clone()]).unwrap_err().to_string();
    assert!(
        err.contains("takes 1 inputs") && err.contains("2 given"),
        "{err}"
    );
    // A cache of the wrong width is refused by the plan's input check, naming it.
    let wide = Tensor::zeros(x.dtype(), &[1, 2, 0, 17]);
    lp.start(&[wide.clone(), wide]).expect("start");
    let err = lp.step(&[x]).unwrap_err().to_string();
    assert!(err.contains("past_key"), "{err}");
    // A graph without presents has no pairs to find.
    let mut plain = graphrw::Graph::new();
    let v = plain.add_input("x", graphrw::TensorMeta::new(graphrw::DType::F32, [2usize]));
    plain.set_outputs(vec![v]).unwrap();
    let pp = Arc::new(plan(&plain, &default_stack()).unwrap());
    let err = DecodeLoop::new(pp).err().expect("no pairs").to_string();
    assert!(err.contains("present"), "{err}");
}
