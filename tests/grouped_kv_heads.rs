//! The `grouped_kv_heads` rules: transformers' `repeat_kv` (unsqueeze, expand, reshape
//! of k and v) in front of a fused attention becomes `enable_gqa` on the node, which then
//! reads the kv heads unrepeated. Checked on the llama corpus models (8 query heads over
//! fewer kv heads), on the KV-cache decoders of `tests/models/decoders` (batch, new
//! tokens and cache length symbolic; both exporters) and on planted graphs at fixed and
//! at symbolic shapes, with the outputs unchanged; the decoders saved as ONNX are one
//! `Attention` with `kv_num_heads`, which onnxruntime runs at two shapes.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

use graphrw::exec::{default_stack, plan, run_reference};
use graphrw::meta::SymExpr;
use graphrw::ops::builtin::{EXPAND, RESHAPE};
use graphrw::ops::AttrValue;
use graphrw::{onnx, rules, verify, Builder, DType, Dim, Graph, Shape, Tensor, TensorMeta, Var};
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

fn decoders() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/decoders")
}

fn tensors(dir: &Path, prefix: &str) -> Vec<Tensor> {
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.exists())
        .map(|p| onnx::read_tensor_pb(&p).expect("tensor").1)
        .collect()
}

/// The KV-cache decoder steps with 2 kv heads under 4 query heads, batch, new tokens
/// and cache length symbolic (`tools/models/export_decoders.py`, both exporters): the
/// `repeat_kv` of k and v is absorbed into `enable_gqa` at symbolic shapes, nothing is
/// expanded, and one plan runs both test sets (other shapes than the export's) and a
/// decode step and a chunk over a 1023-token cache (against the model as loaded).
#[test]
fn decoder_gqa_reads_unrepeated_kv_heads_at_symbolic_shapes() {
    for model in ["gqa_torchscript", "gqa_dynamo"] {
        let dir = decoders().join(model);
        let loaded = onnx::load(dir.join("model.onnx")).expect("load");
        let mut g = onnx::load(dir.join("model.onnx")).expect("load");
        rules::optimize(&mut g).unwrap_or_else(|e| panic!("{model}: {e}"));
        verify(&g).expect("verified");
        assert_eq!(gqa_nodes(&g), (1, 1, 1), "{model}: grouped heads\n{g}");
        assert_eq!(
            g.nodes_with_op("expand").count(),
            0,
            "{model}: expands left\n{g}"
        );
        let p = plan(&g, &default_stack()).expect("plan");
        for set in ["test_data_set_0", "test_data_set_1"] {
            let (out, _) = p.run(&tensors(&dir.join(set), "input")).expect("run");
            let want = tensors(&dir.join(set), "output");
            assert_eq!(out.len(), want.len(), "{model} {set}: outputs");
            for (i, (got, want)) in out.iter().zip(&want).enumerate() {
                assert_close_tensor(
                    got,
                    want,
                    Tol::new(1e-4, 1e-3),
                    &format!("{model} {set} output {i}"),
                );
            }
        }
        for (batch, seq, past) in [(1usize, 1usize, 1023usize), (2, 7, 1016)] {
            let x = vec![
                data(&[batch, seq, 64], 5),
                data(&[batch, 2, past, 16], 6),
                data(&[batch, 2, past, 16], 7),
            ];
            let want = run_reference(&loaded, &x).expect("as loaded");
            let (out, _) = p.run(&x).expect("run");
            for (i, (got, want)) in out.iter().zip(&want).enumerate() {
                let what = format!("{model} batch {batch} seq {seq} past {past} output {i}");
                assert_close_tensor(got, want, Tol::new(1e-4, 1e-3), &what);
            }
        }
    }
}

/// How a planted graph at symbolic shapes repeats its kv heads.
#[derive(Clone, Copy, Debug)]
enum Spelling {
    /// `repeat_kv` with the targets as shape arithmetic: `expand([b, hk, r, t, d])`,
    /// `reshape([b, hq, t, d])` with `b` and `t` symbolic.
    Exact,
    /// `-1` for the kept dims of the expand and for the heads of the reshape, the
    /// unsqueeze counted from the end (`unsqueeze(-3)`).
    Inferred,
    /// The new dim after the sequence (`[b, hk, t, r, d]`), merged into the heads by
    /// the reshape: not `repeat_kv` (kv heads would be interleaved with positions), so
    /// it must stay.
    NotRepeatKv,
    /// One kv head, not repeated: the `matmul`s broadcast it over the query heads
    /// (multi-query attention).
    Broadcast,
}

impl Spelling {
    fn kv_heads(self) -> usize {
        match self {
            Spelling::Broadcast => 1,
            _ => 2,
        }
    }
}

/// `b` and `t` symbolic; 8 query heads over 2 kv heads (1 for `Broadcast`) of 4; `s`
/// query positions.
fn planted_symbolic(spelling: Spelling, masked: bool) -> Graph {
    let (hq, hk, d, s) = (8i64, spelling.kv_heads() as i64, 4i64, 3usize);
    let rep = hq / hk;
    let g = Builder::new();
    let shape = |dims: [Dim; 4]| dims.into_iter().collect::<Shape>();
    let (b, t) = (Dim::sym("b"), Dim::sym("t"));
    let n = |x: i64| Dim::from(x as usize);
    let q = g.input(
        "q",
        TensorMeta::new(DType::F32, shape([b.clone(), n(hq), Dim::from(s), n(d)])),
    );
    let k = g.input(
        "k",
        TensorMeta::new(DType::F32, shape([b.clone(), n(hk), t.clone(), n(d)])),
    );
    let v = g.input(
        "v",
        TensorMeta::new(DType::F32, shape([b.clone(), n(hk), t.clone(), n(d)])),
    );
    let mask = g.input(
        "mask",
        TensorMeta::new(DType::F32, shape([n(1), n(1), Dim::from(s), t.clone()])),
    );
    let (be, te, c) = (b.to_expr(), t.to_expr(), SymExpr::int);
    let apply = |op, x: Var<'_>, attr: &str, dims: Vec<SymExpr>| {
        let out = g
            .apply(op, &[x.value()], &[(attr, AttrValue::sym_ints(dims))])
            .expect("symbolic layout op");
        g.var(out[0])
    };
    let repeat = |x: Var<'_>| match spelling {
        Spelling::Exact => {
            let x = x.unsqueeze(2).expect("unsqueeze");
            let x = apply(
                &EXPAND,
                x,
                "size",
                vec![be.clone(), c(hk), c(rep), te.clone(), c(d)],
            );
            apply(
                &RESHAPE,
                x,
                "shape",
                vec![be.clone(), c(hq), te.clone(), c(d)],
            )
        }
        Spelling::Inferred => {
            let x = x.unsqueeze(-3).expect("unsqueeze");
            let x = apply(&EXPAND, x, "size", vec![c(-1), c(-1), c(rep), c(-1), c(-1)]);
            apply(
                &RESHAPE,
                x,
                "shape",
                vec![be.clone(), c(-1), te.clone(), c(d)],
            )
        }
        Spelling::NotRepeatKv => {
            let x = x.unsqueeze(3).expect("unsqueeze");
            let x = apply(
                &EXPAND,
                x,
                "size",
                vec![be.clone(), c(hk), te.clone(), c(rep), c(d)],
            );
            apply(
                &RESHAPE,
                x,
                "shape",
                vec![be.clone(), c(hq), te.clone(), c(d)],
            )
        }
        Spelling::Broadcast => g.var(x.value()),
    };
    let (kr, vr) = (repeat(k), repeat(v));
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

/// The planted `repeat_kv` at symbolic batch and cache length becomes `enable_gqa`
/// with nothing expanded, for each spelling (and so does one broadcast kv head), and one
/// graph computes what it did at two bindings of the symbols; the look-alike that is
/// not `repeat_kv` stays as it is.
#[test]
fn planted_repeat_kv_at_symbolic_shapes_becomes_enable_gqa() {
    let spellings = [
        Spelling::Exact,
        Spelling::Inferred,
        Spelling::NotRepeatKv,
        Spelling::Broadcast,
    ];
    for spelling in spellings {
        for masked in [false, true] {
            let what = format!("{spelling:?}, masked {masked}");
            let before = planted_symbolic(spelling, masked);
            let mut g = planted_symbolic(spelling, masked);
            rules::fuse_attention(&mut g).unwrap_or_else(|e| panic!("{what}: {e}"));
            verify(&g).expect("verified");
            let grouped = !matches!(spelling, Spelling::NotRepeatKv);
            let want = if grouped { (1, 1, 1) } else { (1, 0, 0) };
            assert_eq!(gqa_nodes(&g), want, "{what}:\n{g}");
            assert_eq!(
                g.nodes_with_op("expand").count(),
                if matches!(spelling, Spelling::NotRepeatKv) {
                    2
                } else {
                    0
                },
                "{what}:\n{g}"
            );
            let p = plan(&g, &default_stack()).expect("plan");
            for (b, t) in [(1usize, 5usize), (2, 9)] {
                let x = vec![
                    data(&[b, 8, 3, 4], 1),
                    data(&[b, spelling.kv_heads(), t, 4], 2),
                    data(&[b, spelling.kv_heads(), t, 4], 3),
                    data(&[1, 1, 3, t], 4),
                ];
                let want = run_reference(&before, &x).expect("before");
                let got = p.run(&x).expect("run").0;
                assert_close_tensor(
                    &got[0],
                    &want[0],
                    Tol::new(1e-5, 0.0),
                    &format!("{what}, b {b}, t {t}"),
                );
            }
        }
    }
}

/// `scaled_dot_product_attention` built with the default scale (unset: 1/sqrt(4)) on
/// kv heads repeated at symbolic shapes, with and without a mask: the repetition is
/// absorbed the same way, and the scale stays unset.
#[test]
fn repeat_kv_before_sdpa_with_the_default_scale_becomes_enable_gqa() {
    for masked in [false, true] {
        let build = || {
            let g = Builder::new();
            let meta =
                |dims: [Dim; 4]| TensorMeta::new(DType::F32, dims.into_iter().collect::<Shape>());
            let (b, t, n) = (Dim::sym("b"), Dim::sym("t"), |x: usize| Dim::from(x));
            let q = g.input("q", meta([b.clone(), n(8), n(3), n(4)]));
            let k = g.input("k", meta([b.clone(), n(2), t.clone(), n(4)]));
            let v = g.input("v", meta([b.clone(), n(2), t.clone(), n(4)]));
            let mask = g.input("mask", meta([n(1), n(1), n(3), t.clone()]));
            let repeat = |x: Var<'_>| {
                let x = x
                    .unsqueeze(2)
                    .and_then(|x| x.expand(&[-1, -1, 4, -1, -1]))
                    .expect("expand");
                let shape = vec![b.to_expr(), SymExpr::int(8), t.to_expr(), SymExpr::int(4)];
                let out = g
                    .apply(
                        &RESHAPE,
                        &[x.value()],
                        &[("shape", AttrValue::sym_ints(shape))],
                    )
                    .expect("reshape");
                g.var(out[0])
            };
            let out = q
                .scaled_dot_product_attention(repeat(k), repeat(v), masked.then_some(mask))
                .expect("sdpa");
            g.output(&[out]).expect("output");
            g.finish()
        };
        let before = build();
        let mut g = build();
        rules::fuse_attention(&mut g).expect("fusion");
        verify(&g).expect("verified");
        assert_eq!(gqa_nodes(&g), (1, 1, 1), "masked {masked}:\n{g}");
        assert_eq!(g.nodes_with_op("expand").count(), 0, "{g}");
        let sdpa = g.nodes_with_op("scaled_dot_product_attention").next();
        let node = g.node(sdpa.expect("sdpa")).expect("node");
        assert_eq!(node.attrs().opt_float("scale").expect("scale"), None, "{g}");
        let x = vec![
            data(&[2, 8, 3, 4], 1),
            data(&[2, 2, 7, 4], 2),
            data(&[2, 2, 7, 4], 3),
            data(&[1, 1, 3, 7], 4),
        ];
        let want = run_reference(&before, &x).expect("before");
        let got = plan(&g, &default_stack())
            .expect("plan")
            .run(&x)
            .expect("run")
            .0;
        assert_close_tensor(
            &got[0],
            &want[0],
            Tol::new(1e-5, 0.0),
            &format!("masked {masked}"),
        );
    }
}

/// Checks a written decoder (one ONNX `Attention` with `q_num_heads` 4 and
/// `kv_num_heads` 2, no `Expand` or `Tile` left to repeat the kv heads), then runs it in
/// onnxruntime on every test set given, comparing every output within 1e-4 + 1e-3 ·
/// max|y|; exits with the reason on the first failure.
const ORT_SCRIPT: &str = r#"
import os, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, numpy_helper
path, sets = sys.argv[1], sys.argv[2:]
model = onnx.load(path)
ops = [n.op_type for n in model.graph.node]
att = [n for n in model.graph.node if n.op_type == "Attention"]
if len(att) != 1:
    sys.exit("%d Attention nodes, expected 1: %s" % (len(att), ops))
heads = {a.name: helper.get_attribute_value(a) for a in att[0].attribute}
if heads.get("q_num_heads") != 4 or heads.get("kv_num_heads") != 2:
    sys.exit("Attention attributes %s, expected q_num_heads 4, kv_num_heads 2" % heads)
for op in ("Expand", "Tile"):
    if op in ops:
        sys.exit("%s left in %s" % (op, ops))
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
def read(p):
    t = onnx.TensorProto()
    with open(p, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)
for data in sets:
    feeds = {i.name: read(os.path.join(data, "input_%d.pb" % k)) for k, i in enumerate(s.get_inputs())}
    for k, got in enumerate(s.run(None, feeds)):
        want = read(os.path.join(data, "output_%d.pb" % k))
        if got.shape != want.shape:
            sys.exit("%s output %d: shape %s, expected %s" % (data, k, got.shape, want.shape))
        err = float(np.abs(got - want).max())
        tol = 1e-4 + 1e-3 * float(np.abs(want).max())
        if not err <= tol:
            sys.exit("%s output %d: max error %g > tolerance %g" % (data, k, err, tol))
        print(os.path.basename(data), k, got.shape, err)
"#;

/// What graphrw writes for the optimised gqa decoders is one ONNX `Attention` (opset
/// 23) reading the 2 kv heads as they are, with `q_num_heads` and `kv_num_heads`, and
/// onnxruntime runs it at both test sets' shapes (skipped without onnxruntime, failed
/// under `CI=true`).
#[test]
fn onnxruntime_runs_the_written_gqa_decoders_reading_kv_heads_once() {
    let Some(python) = support::python_or_skip() else {
        return;
    };
    let scratch = std::env::temp_dir().join(format!("graphrw_gqa_{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let mut failures = Vec::new();
    for model in ["gqa_torchscript", "gqa_dynamo"] {
        let dir = decoders().join(model);
        let mut g = onnx::load(dir.join("model.onnx")).expect("load");
        rules::optimize(&mut g).unwrap_or_else(|e| panic!("{model}: {e}"));
        let path = scratch.join(format!("{model}.onnx"));
        onnx::save(&g, &path).unwrap_or_else(|e| panic!("{model}: save: {e}"));
        let run = Command::new(&python)
            .args(["-c", ORT_SCRIPT])
            .arg(&path)
            .args(["test_data_set_0", "test_data_set_1"].map(|s| dir.join(s)))
            .output()
            .expect("python runs");
        if run.status.success() {
            let out = String::from_utf8_lossy(&run.stdout);
            println!("{model}: onnxruntime {}", out.trim().replace('\n', "; "));
        } else {
            let err = String::from_utf8_lossy(&run.stderr);
            failures.push(format!("{model}: {}", err.lines().last().unwrap_or("")));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
