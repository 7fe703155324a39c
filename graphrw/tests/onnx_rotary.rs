//! `fused.rotary_embedding` is written as the standard ONNX `RotaryEmbedding` (opset 23)
//! when its caches provably have equal halves (HF's `cat((freqs, freqs), -1)`), and as
//! a function call of its decomposition otherwise. The written model loads back with
//! the same outputs and, where onnxruntime is installed, onnxruntime runs it with them
//! too, at two shapes (it says SKIPPED without onnxruntime, except under `CI=true`).

use std::path::Path;
use std::process::Command;

use graphrw::exec::run_reference;
use graphrw::onnx::{load_bytes, to_bytes, to_model, FUNCTION_DOMAIN};
use graphrw::{rules, Builder, DType, Dim, Graph, Tensor, TensorMeta};
use graphrw_kernels::testing::compare;

const HEADS: usize = 2;
const D: usize = 8;

fn meta(dims: Vec<Dim>) -> TensorMeta {
    TensorMeta::new(DType::F32, dims)
}

/// `q * cos + rotate_half(q) * sin` as HF Llama writes it; with `derived`, `cos`/`sin`
/// come from `cat((pos * inv_freq, pos * inv_freq), -1)` (inputs `q`, `pos`), else they
/// are inputs themselves (`q`, `cos`, `sin`).
fn llama_rope(derived: bool) -> Graph {
    let g = Builder::new();
    let (b, s) = (Dim::sym("batch"), Dim::sym("seq"));
    let q = g.input(
        "q",
        meta(vec![
            b,
            Dim::Known(HEADS as u64),
            s.clone(),
            Dim::Known(D as u64),
        ]),
    );
    let (cos, sin) = if derived {
        let pos = g.input("pos", meta(vec![Dim::Known(1), s, Dim::Known(1)]));
        let inv: Vec<f32> = (0..D / 2)
            .map(|i| 10000f32.powf(-2.0 * i as f32 / D as f32))
            .collect();
        let inv = g.constant(Tensor::from_vec(vec![D / 2], inv).unwrap());
        let freqs = pos.mul(inv).unwrap().value();
        let emb = g.var(g.concat_with(&[freqs, freqs], -1).unwrap());
        (
            emb.cos().unwrap().unsqueeze(1).unwrap(),
            emb.sin().unwrap().unsqueeze(1).unwrap(),
        )
    } else {
        let m = || {
            meta(vec![
                Dim::Known(1),
                Dim::Known(1),
                s.clone(),
                Dim::Known(D as u64),
            ])
        };
        (g.input("cos", m()), g.input("sin", m()))
    };
    let lo = g.slice_with(q.value(), 3, 0, D as i64 / 2, 1).unwrap();
    let hi = g
        .slice_with(q.value(), 3, D as i64 / 2, D as i64, 1)
        .unwrap();
    let rot = g.var(g.concat_with(&[g.neg(hi).unwrap(), lo], -1).unwrap());
    let y = q.mul(cos).unwrap().add(rot.mul(sin).unwrap()).unwrap();
    g.output(&[y]).unwrap();
    g.finish()
}

fn values(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (((i + seed) * 7919 % 101) as f32 - 50.0) / 25.0)
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap()
}

/// Inputs at `(batch, seq)`: `q`, then `pos` (positions 0..seq) or `cos`/`sin` tables.
fn inputs(derived: bool, batch: usize, seq: usize) -> Vec<Tensor> {
    let q = values(&[batch, HEADS, seq, D], 1);
    if derived {
        let pos: Vec<f32> = (0..seq).map(|i| i as f32).collect();
        vec![q, Tensor::from_vec(vec![1, seq, 1], pos).unwrap()]
    } else {
        vec![q, values(&[1, 1, seq, D], 2), values(&[1, 1, seq, D], 3)]
    }
}

fn optimized(derived: bool) -> (Graph, Graph) {
    let original = llama_rope(derived);
    let mut graph = original.clone();
    let done = rules::optimize(&mut graph).unwrap();
    assert_eq!(
        done.fused_nodes.get("fused.rotary_embedding"),
        Some(&1),
        "{done}"
    );
    (original, graph)
}

#[test]
fn rotary_with_equal_halves_is_written_as_rotary_embedding() {
    let (original, graph) = optimized(true);
    let m = to_model(&graph).unwrap();
    let nodes = &m.graph.as_ref().unwrap().node;
    assert!(
        nodes.iter().any(|n| n.op_type == "RotaryEmbedding"),
        "{:?}",
        nodes.iter().map(|n| &n.op_type).collect::<Vec<_>>()
    );
    assert!(m.functions.is_empty(), "{:?}", m.functions);
    let opset = m.opset_import.iter().find(|o| o.domain.is_empty()).unwrap();
    assert_eq!(opset.version, graphrw::onnx::ROTARY_OPSET);
    // It loads back (as the decomposition, fused again by `optimize`) unchanged.
    let mut back = load_bytes(&to_bytes(&graph).unwrap()).unwrap();
    for (batch, seq) in [(2, 3), (1, 5)] {
        let ins = inputs(true, batch, seq);
        let want = run_reference(&original, &ins).unwrap();
        let got = run_reference(&back, &ins).unwrap();
        compare::assert_close_tensors(&want, &got, compare::Tol::new(1e-5, 0.0), "loaded back");
    }
    let again = rules::optimize(&mut back).unwrap();
    assert_eq!(
        again.fused_nodes.get("fused.rotary_embedding"),
        Some(&1),
        "{again}"
    );
}

#[test]
fn rotary_with_unproven_halves_stays_a_function() {
    let (_, graph) = optimized(false);
    let m = to_model(&graph).unwrap();
    let nodes = &m.graph.as_ref().unwrap().node;
    assert!(!nodes.iter().any(|n| n.op_type == "RotaryEmbedding"));
    assert!(nodes.iter().any(|n| n.domain == FUNCTION_DOMAIN));
}

/// A Python with onnxruntime and numpy: `GRAPHRW_PYTHON` (CI sets it), else the
/// workspace's `.venv/bin/python`, else `python3`.
fn python() -> Result<String, String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("GRAPHRW_PYTHON") {
        candidates.push(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.exists() {
        candidates.push(venv.display().to_string());
    }
    candidates.push("python3".into());
    for p in &candidates {
        let probe = Command::new(p)
            .args(["-c", "import onnxruntime, numpy"])
            .output();
        if probe.is_ok_and(|o| o.status.success()) {
            return Ok(p.clone());
        }
    }
    Err(format!(
        "no Python with onnxruntime and numpy among {candidates:?} (set GRAPHRW_PYTHON)"
    ))
}

fn write_f32(path: &Path, t: &Tensor) {
    let raw: Vec<u8> = t
        .as_slice::<f32>()
        .unwrap()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(path, raw).unwrap();
}

/// onnxruntime runs both written forms with graphrw's outputs, at two shapes.
#[test]
fn onnxruntime_runs_the_written_rotary_models() {
    let python = match python() {
        Ok(p) => p,
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true: onnxruntime is required: {why}")
        }
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("graphrw_onnx_rotary_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for derived in [true, false] {
        let (original, graph) = optimized(derived);
        let path = dir.join("model.onnx");
        std::fs::write(&path, to_bytes(&graph).unwrap()).unwrap();
        let names: Vec<&str> = if derived {
            vec!["q", "pos"]
        } else {
            vec!["q", "cos", "sin"]
        };
        for (batch, seq) in [(2, 3), (1, 5)] {
            let ins = inputs(derived, batch, seq);
            let want = run_reference(&original, &ins).unwrap();
            let mut feeds = String::new();
            for (name, t) in names.iter().zip(&ins) {
                write_f32(&dir.join(format!("{name}.bin")), t);
                feeds.push_str(&format!(
                    "'{name}': np.fromfile(d + '/{name}.bin', dtype=np.float32).reshape({:?}), ",
                    t.shape()
                ));
            }
            let script = format!(
                "import numpy as np, onnxruntime as ort\n\
                 d = {dir:?}\n\
                 s = ort.InferenceSession(d + '/model.onnx', providers=['CPUExecutionProvider'])\n\
                 y = s.run(None, {{{feeds}}})[0]\n\
                 np.asarray(y, dtype=np.float32).tofile(d + '/out.bin')\n",
                dir = dir.to_str().unwrap(),
            );
            let run = Command::new(&python)
                .args(["-c", &script])
                .output()
                .unwrap();
            assert!(
                run.status.success(),
                "derived={derived}: onnxruntime failed:\n{}",
                String::from_utf8_lossy(&run.stderr)
            );
            let bytes = std::fs::read(dir.join("out.bin")).unwrap();
            let v: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let got = vec![Tensor::from_vec(want[0].shape().to_vec(), v).unwrap()];
            let what = format!("onnxruntime, derived={derived}, batch {batch}, seq {seq}");
            compare::assert_close_tensors(&want, &got, compare::Tol::new(1e-5, 0.0), &what);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `RotaryEmbedding` models onnxruntime ran (`tests/models/rotary/make.py`: full, with
/// `position_ids`, partial `rotary_embedding_dim`) load as the decomposition, which
/// matches onnxruntime's outputs as loaded and once `optimize` fused it again.
#[test]
fn rotary_embedding_models_load_with_onnxruntime_outputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/models/rotary");
    for name in ["full", "full_pos", "partial_pos"] {
        let dir = root.join(name);
        let mut graph = graphrw::onnx::load(dir.join("model.onnx")).unwrap();
        assert!(
            !graph.op_counts().contains_key("opaque"),
            "{name}: not read\n{graph}"
        );
        let sets = graphrw::onnx::read_test_sets(&dir).unwrap();
        let ins = sets[0].inputs_for(&graph).unwrap();
        let want: Vec<Tensor> = sets[0].outputs.iter().map(|(_, t)| t.clone()).collect();
        let got = run_reference(&graph, &ins).unwrap();
        compare::assert_close_tensors(&want, &got, compare::Tol::new(1e-5, 0.0), name);
        let done = rules::optimize(&mut graph).unwrap();
        assert_eq!(
            done.fused_nodes.get("fused.rotary_embedding"),
            Some(&1),
            "{name}: {done}"
        );
        let got = run_reference(&graph, &ins).unwrap();
        compare::assert_close_tensors(&want, &got, compare::Tol::new(1e-5, 0.0), name);
    }
}
