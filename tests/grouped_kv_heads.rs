//! The `grouped_kv_heads` rules: transformers' `repeat_kv` (unsqueeze, expand, reshape
//! of k and v) in front of a fused attention becomes `enable_gqa` on the node, which then
//! reads the kv heads unrepeated. Checked on the llama corpus models (8 query heads over
//! fewer kv heads) and on a planted graph, with the outputs unchanged.

use std::path::{Path, PathBuf};

use graphrw::exec::{default_stack, plan, run_reference};
use graphrw::{onnx, rules, verify, Builder, DType, Graph, Tensor, TensorMeta, Var};
use graphrw_kernels::testing::compare::{assert_close_tensor, Tol};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus")
}

/// (attention nodes, of which `enable_gqa`, of which key has fewer heads than query).
fn gqa_nodes(g: &Graph) -> (usize, usize, usize) {
    let mut all = 0;
    let mut gqa = 0;
    let mut fewer = 0;
    for id in g.nodes_with_op("scaled_dot_product_attention") {
        let node = g.node(id).expect("node");
        all += 1;
        if node.attrs().bool("enable_gqa").expect("enable_gqa") {
            gqa += 1;
            let q = g.meta(node.operands()[0]).expect("query");
            let k = g.meta(node.operands()[1]).expect("key");
            let heads = |m: &TensorMeta| m.shape.0[m.rank() - 3].known();
            if let (Some(hq), Some(hk)) = (heads(q), heads(k)) {
                if hk < hq && hq % hk == 0 {
                    fewer += 1;
                }
            }
        }
    }
    (all, gqa, fewer)
}

fn inputs(dir: &Path) -> Vec<Tensor> {
    (0..)
        .map(|i| dir.join(format!("test_data_set_0/input_{i}.pb")))
        .take_while(|p| p.exists())
        .map(|p| onnx::read_tensor_pb(&p).expect("input").1)
        .collect()
}

#[test]
fn llama_corpus_attention_reads_unrepeated_kv_heads() {
    for model in ["llama_eager", "llama_sdpa"] {
        let dir = corpus().join(model);
        let mut g = onnx::load(dir.join("model.onnx")).expect("load");
        let expands = g.nodes_with_op("expand").count();
        rules::fuse_attention(&mut g).unwrap_or_else(|e| panic!("{model}: {e}"));
        verify(&g).expect("verified");
        let (all, gqa, fewer) = gqa_nodes(&g);
        assert_eq!(all, 2, "{model}: attention sites");
        assert_eq!(gqa, 2, "{model}: enable_gqa on every site\n{g}");
        assert_eq!(fewer, 2, "{model}: key heads fewer than query heads\n{g}");
        // The repeat_kv expands (one for k, one for v per layer) are gone.
        assert_eq!(
            g.nodes_with_op("expand").count(),
            expands - 4,
            "{model}: repeat_kv expands left"
        );
        let want = onnx::read_tensor_pb(dir.join("test_data_set_0/output_0.pb"))
            .expect("output")
            .1;
        let got = plan(&g, &default_stack())
            .expect("plan")
            .run(&inputs(&dir))
            .expect("run")
            .0;
        assert_close_tensor(&got[0], &want, Tol::new(1e-4, 1e-3), model);
    }
}

/// 8 query heads over 2 kv heads, `repeat_kv` written as transformers exports it, with
/// and without a mask.
fn planted(masked: bool) -> Graph {
    let (b, hq, hk, s, d) = (1usize, 8usize, 2usize, 6usize, 4usize);
    let g = Builder::new();
    let q = g.input("q", TensorMeta::new(DType::F32, [b, hq, s, d]));
    let k = g.input("k", TensorMeta::new(DType::F32, [b, hk, s, d]));
    let v = g.input("v", TensorMeta::new(DType::F32, [b, hk, s, d]));
    let mask = g.input("mask", TensorMeta::new(DType::F32, [1usize, 1, s, s]));
    let rep = hq / hk;
    fn repeat<'a>(x: Var<'a>, expand: &[i64], reshape: &[i64]) -> Var<'a> {
        x.unsqueeze(2)
            .and_then(|x| x.expand(expand))
            .and_then(|x| x.reshape(reshape))
            .expect("repeat_kv")
    }
    let expand = [b as i64, hk as i64, rep as i64, s as i64, d as i64];
    let reshape = [b as i64, hq as i64, s as i64, d as i64];
    let (kr, vr) = (repeat(k, &expand, &reshape), repeat(v, &expand, &reshape));
    let scores = q
        .matmul(kr.transpose(-2, -1).expect("kt"))
        .and_then(|x| x.div(2.0))
        .expect("scores");
    let scores = if masked {
        scores.add(mask).expect("masked")
    } else {
        scores
    };
    let out = scores
        .softmax(-1)
        .and_then(|p| p.matmul(vr))
        .expect("attention");
    g.output(&[out]).expect("output");
    g.finish()
}

fn data(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 250.0 - 2.0)
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("data")
}

#[test]
fn planted_repeat_kv_becomes_enable_gqa() {
    for masked in [false, true] {
        let mut g = planted(masked);
        let x = vec![
            data(&[1, 8, 6, 4], 1),
            data(&[1, 2, 6, 4], 2),
            data(&[1, 2, 6, 4], 3),
            data(&[1, 1, 6, 6], 4),
        ];
        let want = run_reference(&g, &x).expect("before");
        rules::fuse_attention(&mut g).expect("fusion");
        verify(&g).expect("verified");
        assert_eq!(gqa_nodes(&g), (1, 1, 1), "masked {masked}:\n{g}");
        assert_eq!(g.nodes_with_op("expand").count(), 0, "{g}");
        let node = g
            .node(
                g.nodes_with_op("scaled_dot_product_attention")
                    .next()
                    .expect("sdpa"),
            )
            .expect("node");
        assert_eq!(node.operands().len(), if masked { 4 } else { 3 });
        for (what, got) in [
            ("reference", run_reference(&g, &x).expect("after")),
            (
                "fused",
                plan(&g, &default_stack())
                    .expect("plan")
                    .run(&x)
                    .expect("run")
                    .0,
            ),
        ] {
            assert_close_tensor(
                &got[0],
                &want[0],
                Tol::new(1e-5, 0.0),
                &format!("masked {masked}, {what}"),
            );
        }
    }
}
