//! Whatever the attention rules make, `save` writes (issue #19): a fused
//! `scaled_dot_product_attention` of every form the rules produce (3-D with the heads
//! folded into the batch, 4-D, 5-D grouped queries, grouped kv heads, causal, bool and
//! additive masks of every rank, cross-attention) is saved, loads back with the same
//! outputs on graphrw's reference executor, and, where onnxruntime is installed
//! (`$GRAPHRW_PYTHON`, default `python3`), runs in onnxruntime with the same outputs.
//! Under `CI=true` a missing onnxruntime is a failure.

use std::process::Command;

use graphrw::exec::run_reference;
use graphrw::onnx::{load_bytes, to_bytes};
use graphrw::{Builder, DType, Graph, Tensor};
use graphrw_kernels::testing::compare;

/// Deterministic values in [-1, 1).
fn values(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let data: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), data).expect("tensor")
}

enum Mask {
    None,
    /// Additive f32 mask of this shape.
    Additive(Vec<usize>),
    /// Bool padding mask of this shape (key 0 always visible).
    Bool(Vec<usize>),
}

struct Case {
    name: &'static str,
    q: Vec<usize>,
    k: Vec<usize>,
    mask: Mask,
    causal: bool,
    gqa: bool,
}

fn build(c: &Case) -> Graph {
    let b = Builder::new();
    let mut v_shape = c.k.clone();
    let last = v_shape.len() - 1;
    v_shape[last] = 6; // a value head dim unlike the query's
    let q = b.constant(values(&c.q, 1));
    let k = b.constant(values(&c.k, 2));
    let v = b.constant(values(&v_shape, 3));
    let mask = match &c.mask {
        Mask::None => None,
        Mask::Additive(s) => Some(b.constant(values(s, 4))),
        Mask::Bool(s) => {
            let n: usize = s.iter().product();
            let last = *s.last().expect("rank >= 1");
            let data: Vec<bool> = (0..n).map(|i| i % last == 0 || (i * 7) % 3 != 0).collect();
            Some(b.constant(Tensor::from_vec(s.clone(), data).expect("mask")))
        }
    };
    let out = q
        .scaled_dot_product_attention_with(k, v, mask, 0.0, c.causal, Some(0.3), c.gqa)
        .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    b.output(&[out]).expect("output");
    b.finish()
}

fn cases() -> Vec<Case> {
    let c = |name, q: &[usize], k: &[usize], mask, causal, gqa| Case {
        name,
        q: q.to_vec(),
        k: k.to_vec(),
        mask,
        causal,
        gqa,
    };
    vec![
        c("3d", &[6, 5, 8], &[6, 5, 8], Mask::None, false, false),
        c(
            "3d_mask3",
            &[6, 5, 8],
            &[6, 5, 8],
            Mask::Additive(vec![6, 1, 5]),
            false,
            false,
        ),
        c(
            "3d_mask2_causal",
            &[6, 5, 8],
            &[6, 5, 8],
            Mask::Additive(vec![5, 5]),
            true,
            false,
        ),
        c(
            "3d_cross_bool",
            &[6, 3, 8],
            &[6, 7, 8],
            Mask::Bool(vec![6, 3, 7]),
            false,
            false,
        ),
        c("4d", &[2, 3, 5, 8], &[2, 3, 5, 8], Mask::None, false, false),
        c(
            "4d_padding",
            &[2, 3, 5, 8],
            &[2, 3, 5, 8],
            Mask::Bool(vec![2, 1, 1, 5]),
            false,
            false,
        ),
        c(
            "4d_gqa_causal",
            &[2, 4, 5, 8],
            &[2, 2, 5, 8],
            Mask::None,
            true,
            true,
        ),
        c(
            "4d_mqa_mask",
            &[2, 4, 5, 8],
            &[2, 1, 5, 8],
            Mask::Additive(vec![2, 1, 5, 5]),
            false,
            true,
        ),
        c(
            "4d_cross",
            &[2, 3, 3, 8],
            &[2, 3, 7, 8],
            Mask::Additive(vec![2, 1, 1, 7]),
            false,
            false,
        ),
        c(
            "5d_grouped",
            &[2, 2, 3, 5, 8],
            &[2, 2, 1, 5, 8],
            Mask::None,
            false,
            true,
        ),
        c(
            "5d_mask5",
            &[2, 2, 3, 5, 8],
            &[2, 2, 3, 5, 8],
            Mask::Additive(vec![2, 1, 1, 1, 5]),
            false,
            false,
        ),
        c(
            "5d_mask2_causal",
            &[2, 2, 3, 5, 8],
            &[2, 2, 1, 5, 8],
            Mask::Bool(vec![5, 5]),
            true,
            true,
        ),
    ]
}

fn close(a: &[f64], b: &[f64]) -> Result<(), String> {
    let scale = a
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    compare::check_close(b, a, compare::Tol::new(1e-4 + 1e-3 * scale, 0.0))
}

fn python() -> String {
    std::env::var("GRAPHRW_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn have_onnxruntime() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import onnxruntime, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `{} -c 'import onnxruntime, numpy'` fails",
            python()
        );
        println!(
            "SKIPPED: {} has no onnxruntime and numpy: saved attention models are not run in onnxruntime",
            python()
        );
    }
    ok
}

/// Runs a saved model (no inputs) in onnxruntime; its first output, flattened.
fn onnxruntime_output(bytes: &[u8], name: &str) -> Result<Vec<f64>, String> {
    let path = std::env::temp_dir().join(format!(
        "graphrw-attention-save-{}-{name}.onnx",
        std::process::id()
    ));
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    let script = "import sys, onnxruntime as ort\n\
                  o = ort.SessionOptions()\n\
                  o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL\n\
                  s = ort.InferenceSession(sys.argv[1], o, providers=['CPUExecutionProvider'])\n\
                  print(' '.join(repr(float(x)) for x in s.run(None, {})[0].ravel()))\n";
    let out = Command::new(python())
        .args(["-c", script])
        .arg(&path)
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "onnxruntime failed: {}",
            err.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|x| x.parse::<f64>().map_err(|e| format!("{x:?}: {e}")))
        .collect()
}

#[test]
fn every_fused_attention_form_saves_loads_back_and_runs_in_onnxruntime() {
    let ort = have_onnxruntime();
    let mut failures = Vec::new();
    for c in cases() {
        let g = build(&c);
        let want = run_reference(&g, &[]).expect("reference run")[0].to_f64_vec();
        let result = (|| -> Result<(), String> {
            let bytes = to_bytes(&g).map_err(|e| format!("save: {e}"))?;
            let back = load_bytes(&bytes).map_err(|e| format!("load: {e}"))?;
            let got = run_reference(&back, &[]).map_err(|e| format!("run: {e}"))?[0].to_f64_vec();
            close(&want, &got).map_err(|e| format!("loaded back: {e}"))?;
            if ort {
                let got = onnxruntime_output(&bytes, c.name)?;
                close(&want, &got).map_err(|e| format!("onnxruntime: {e}"))?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => println!(
                "{:<18} saved, loaded back{}",
                c.name,
                if ort { ", ran in onnxruntime" } else { "" }
            ),
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dtype_of_saved_fused_attention_is_kept() {
    // f16 attention saves as f16 (the Attention op is typed by its inputs).
    let b = Builder::new();
    let q = b.constant(values(&[1, 2, 3, 4], 7).cast(DType::F16));
    let out = q.scaled_dot_product_attention(q, q, None).expect("sdpa");
    b.output(&[out]).expect("output");
    let g = b.finish();
    let back = load_bytes(&to_bytes(&g).expect("save")).expect("load");
    let outs = back.outputs().to_vec();
    assert_eq!(back.meta(outs[0]).expect("meta").dtype, DType::F16);
}

/// The failing case: `attention_scale` matched q with 4 heads over k with one
/// head (a broadcasting `matmul`), and its replacement failed. Now the rule's checks see
/// the grouping (the fused node gets `enable_gqa`), and a batch that only broadcasts
/// (q batch 2, k batch 1) is refused by the checks: nothing fails, nothing is skipped.
#[test]
fn broadcast_kv_heads_fuse_with_grouping_and_broadcast_batches_are_refused() {
    use graphrw::{rules, TensorMeta};
    let build = |kb: usize, kh: usize| {
        let b = Builder::new();
        let q = b.input("q", TensorMeta::new(DType::F32, [2usize, 4, 16, 16]));
        let k = b.input("k", TensorMeta::new(DType::F32, [kb, kh, 16, 16]));
        let v = b.input("v", TensorMeta::new(DType::F32, [kb, kh, 16, 16]));
        let s = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .mul(0.25)
            .unwrap();
        let out = s.softmax(-1).unwrap().matmul(v).unwrap();
        b.output(&[out]).unwrap();
        b.finish()
    };
    let mut g = build(2, 1);
    let done = rules::optimize(&mut g).expect("optimize");
    assert_eq!(done.skipped().count(), 0, "{done}");
    let fused: Vec<_> = g.nodes_with_op("scaled_dot_product_attention").collect();
    assert_eq!(fused.len(), 1, "{g}");
    let node = g.node(fused[0]).expect("node");
    assert!(node.attrs().bool("enable_gqa").expect("attr"), "{g}");

    let mut g = build(1, 4);
    let done = rules::optimize(&mut g).expect("optimize");
    assert_eq!(done.skipped().count(), 0, "{done}");
    assert_eq!(
        g.nodes_with_op("scaled_dot_product_attention").count(),
        0,
        "{g}"
    );
}
