//! A model with more than 2 GiB of weights (a sparse external data file, so it costs no
//! disk) goes through `optimize`, in the library and as the `graphrw` binary: the
//! weights stay external (copied as file ranges, holes kept), the result loads in
//! graphrw and gives the expected outputs, and it loads and runs in onnx/onnxruntime
//! where a Python with them is found (required under `CI=true`, a visible skip
//! otherwise). The single-file layout is refused with a clear error, not written
//! corrupt. No timings are asserted.
//!
//! The model: `z = matmul(layer_norm(gather(W, ids) + res, gamma, beta), W2)`, with
//! `W` a 2.15 GB `f32[8_400_000, 64]` embedding table of which only the gathered rows
//! hold data; `optimize` fuses the add and the layer norm (`fused.add_layer_norm`).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use graphrw::kernels::testing::compare;
use graphrw::onnx::proto::{
    attribute_type, data_type, AttributeProto, Dimension, DimensionValue, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto,
    TypeProto, TypeProtoTensor, ValueInfoProto, DATA_LOCATION_EXTERNAL,
};
use graphrw::onnx::{SaveOptions, WeightLayout, MAX_PROTO_BYTES};
use graphrw::Tensor;
use prost::Message;

mod support;
use support::{peak_kib, tmp_dir};

const ROWS: usize = 8_400_000;
const D: usize = 64;
const W_BYTES: u64 = (ROWS * D * 4) as u64;
// The table alone is past protobuf's limit.
const _: () = assert!(W_BYTES > MAX_PROTO_BYTES);
/// The rows gathered: two hold data, one (row 17) is a hole of zeros.
const IDS: [i64; 4] = [3, 4_000_001, ROWS as i64 - 1, 17];
const EPS: f32 = 1e-5;

fn w_value(row: usize, col: usize) -> f32 {
    ((row % 97) as f32 - 48.0) * 0.02 + col as f32 * 0.01
}
fn gamma(col: usize) -> f32 {
    1.0 + col as f32 * 0.005
}
fn beta(col: usize) -> f32 {
    col as f32 * -0.003
}
fn w2(i: usize, j: usize) -> f32 {
    ((i * 7 + j * 3) % 11) as f32 * 0.05 - 0.25
}
fn res(r: usize, col: usize) -> f32 {
    (r as f32 + 1.0) * 0.1 - col as f32 * 0.002
}

fn le(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

fn external(name: &str, dims: &[i64], offset: u64, len: u64) -> TensorProto {
    let kv = |k: &str, v: String| StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        data_location: DATA_LOCATION_EXTERNAL,
        external_data: vec![
            kv("location", "model.onnx.data".into()),
            kv("offset", offset.to_string()),
            kv("length", len.to_string()),
        ],
        ..Default::default()
    }
}

fn value_info(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(DimensionValue::DimValue(d)),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            }),
            denotation: String::new(),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Writes `model.onnx` and its sparse `model.onnx.data` (as torch.onnx lays them out)
/// into `dir`.
fn write_model(dir: &Path) -> PathBuf {
    let data_path = dir.join("model.onnx.data");
    let mut data = File::create(&data_path).expect("data file");
    // W at 0: only the gathered rows are written; the rest is a hole.
    for &row in &IDS[..3] {
        let row = row as usize;
        data.seek(SeekFrom::Start((row * D * 4) as u64))
            .expect("seek");
        data.write_all(&le((0..D).map(|c| w_value(row, c))))
            .expect("row");
    }
    let gamma_at = W_BYTES;
    let beta_at = gamma_at + (D * 4) as u64;
    let w2_at = beta_at + (D * 4) as u64;
    data.seek(SeekFrom::Start(gamma_at)).expect("seek");
    data.write_all(&le((0..D).map(gamma))).expect("gamma");
    data.write_all(&le((0..D).map(beta))).expect("beta");
    data.write_all(&le((0..D * D).map(|k| w2(k / D, k % D))))
        .expect("w2");
    drop(data);

    let n = IDS.len() as i64;
    let mut ln = node("LayerNormalization", "ln", &["h", "gamma", "beta"], &["y"]);
    ln.attribute = vec![
        AttributeProto {
            name: "axis".into(),
            r#type: attribute_type::INT,
            i: -1,
            ..Default::default()
        },
        AttributeProto {
            name: "epsilon".into(),
            r#type: attribute_type::FLOAT,
            f: EPS,
            ..Default::default()
        },
    ];
    let model = ModelProto {
        ir_version: 10,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 18,
        }],
        producer_name: "huge_weights test".into(),
        graph: Some(GraphProto {
            name: "huge".into(),
            node: vec![
                node("Gather", "embed", &["W", "ids"], &["e"]),
                node("Add", "residual", &["e", "res"], &["h"]),
                ln,
                node("MatMul", "proj", &["y", "W2"], &["z"]),
            ],
            initializer: vec![
                external("W", &[ROWS as i64, D as i64], 0, W_BYTES),
                external("gamma", &[D as i64], gamma_at, (D * 4) as u64),
                external("beta", &[D as i64], beta_at, (D * 4) as u64),
                external("W2", &[D as i64, D as i64], w2_at, (D * D * 4) as u64),
            ],
            input: vec![
                value_info("ids", data_type::INT64, &[n]),
                value_info("res", data_type::FLOAT, &[n, D as i64]),
            ],
            output: vec![value_info("z", data_type::FLOAT, &[n, D as i64])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).expect("model");
    path
}

fn inputs() -> Vec<Tensor> {
    let ids = Tensor::from_vec(vec![IDS.len()], IDS.to_vec()).expect("ids");
    let r: Vec<f32> = (0..IDS.len() * D).map(|k| res(k / D, k % D)).collect();
    vec![ids, Tensor::from_vec(vec![IDS.len(), D], r).expect("res")]
}

/// The expected output, computed here in plain f64 from the generating functions.
fn expected() -> Vec<f64> {
    let mut out = Vec::new();
    for (r, &id) in IDS.iter().enumerate() {
        let row = id as usize;
        let hole = r == 3;
        let h: Vec<f64> = (0..D)
            .map(|c| {
                let w = if hole { 0.0 } else { w_value(row, c) as f64 };
                w + res(r, c) as f64
            })
            .collect();
        let mean = h.iter().sum::<f64>() / D as f64;
        let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / D as f64;
        let y: Vec<f64> = (0..D)
            .map(|c| (h[c] - mean) / (var + EPS as f64).sqrt() * gamma(c) as f64 + beta(c) as f64)
            .collect();
        for j in 0..D {
            out.push((0..D).map(|i| y[i] * w2(i, j) as f64).sum());
        }
    }
    out
}

fn assert_close(got: &Tensor, what: &str) {
    compare::assert_close(
        &got.to_f64_vec(),
        &expected(),
        compare::Tol::new(1e-4, 1e-4),
        what,
    );
}

/// Where an external initialiser's bytes are: (location, offset, length).
type Location = (String, u64, u64);

/// The external entries of each initialiser of a saved model, by name.
fn external_entries(model: &Path) -> Vec<(String, Option<Location>)> {
    let bytes = std::fs::read(model).expect("read model");
    let m = ModelProto::decode(bytes.as_slice()).expect("decode");
    let g = m.graph.expect("graph");
    g.initializer
        .iter()
        .map(|t| {
            let get = |k: &str| {
                t.external_data
                    .iter()
                    .find(|kv| kv.key == k)
                    .map(|kv| kv.value.clone())
            };
            let ext = (t.data_location == DATA_LOCATION_EXTERNAL).then(|| {
                (
                    get("location").unwrap_or_default(),
                    get("offset").and_then(|v| v.parse().ok()).unwrap_or(0),
                    get("length").and_then(|v| v.parse().ok()).unwrap_or(0),
                )
            });
            (t.name.clone(), ext)
        })
        .collect()
}

/// Checks an optimised model written to `out`: W stays external and sparse, aligned,
/// and the model loads in graphrw and computes the expected output.
fn check_output(out: &Path, what: &str) {
    let entries = external_entries(out);
    let (_, w) = entries
        .iter()
        .find(|(n, _)| n == "W")
        .unwrap_or_else(|| panic!("{what}: no initialiser W in {entries:?}"));
    let (location, offset, length) = w.clone().unwrap_or_else(|| panic!("{what}: W inline"));
    assert_eq!(length, W_BYTES, "{what}: W's length");
    assert_eq!(
        offset % 65536,
        0,
        "{what}: W's offset {offset} is not 64 KiB aligned"
    );
    let data = out.with_file_name(&location);
    let meta = std::fs::metadata(&data).expect("data file");
    assert!(meta.len() >= offset + length, "{what}: data file too short");
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let on_disk = meta.blocks() * 512;
        assert!(
            on_disk < 64 << 20,
            "{what}: the data file takes {on_disk} bytes on disk: the holes were written out"
        );
    }
    // The small protobuf is far below the limit: the weights are not inline.
    assert!(std::fs::metadata(out).expect("model").len() < 1 << 20);

    // The fused add + layer norm is written as a call of a model-local function.
    let m = ModelProto::decode(std::fs::read(out).expect("model").as_slice()).expect("decode");
    let calls = m
        .graph
        .iter()
        .flat_map(|g| &g.node)
        .filter(|n| n.op_type.contains("add_layer_norm"))
        .count();
    assert_eq!(calls, 1, "{what}: the add + layer norm were fused");

    let g = graphrw::onnx::load(out).expect("the optimised model loads in graphrw");
    let outs = graphrw::exec::run_reference(&g, &inputs()).expect("run");
    assert_close(&outs[0], what);
}

#[test]
fn library_optimize_keeps_huge_weights_external() {
    let dir = tmp_dir("lib");
    let model = write_model(&dir);
    let mut g = graphrw::onnx::load(&model).expect("load");
    let before = graphrw::exec::run_reference(&g, &inputs()).expect("run the input");
    assert_close(&before[0], "input model");
    graphrw::rules::optimize(&mut g).expect("optimize");

    // The single-file layout is refused before anything is written.
    let single = dir.join("single.onnx");
    let options = SaveOptions {
        layout: WeightLayout::SingleFile,
        ..SaveOptions::default()
    };
    let e = graphrw::onnx::save_with(&g, &single, &options).expect_err("2 GiB inline");
    assert!(e.to_string().contains("2 GiB limit"), "{e}");
    assert!(!single.exists(), "nothing is written when refused");
    assert!(graphrw::onnx::to_bytes(&g).is_err(), "to_bytes refuses too");

    // The default keeps the input's layout, and saving over the loaded model (whose
    // data is still mapped) is safe.
    let out = dir.join("out.onnx");
    let saved = graphrw::onnx::save_with(&g, &out, &SaveOptions::default()).expect("save");
    assert_eq!(
        saved.data_file.as_deref(),
        Some(dir.join("out.onnx.data").as_path())
    );
    assert_eq!(saved.copied_ranges, 4, "{saved}");
    check_output(&out, "library");
    let saved = graphrw::onnx::save(&g, &model);
    saved.expect("save over the loaded model");
    check_output(&model, "in place");
    // The graph loaded before still reads its (old, still mapped) weights.
    let again = graphrw::exec::run_reference(&g, &inputs()).expect("run after overwrite");
    assert_close(&again[0], "loaded graph after its files were replaced");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Python with onnx, onnxruntime and numpy: `GRAPHRW_PYTHON`, the active virtual
/// environment, /work/venv (the dev machines'), or `python3`.
fn python() -> Option<String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("GRAPHRW_PYTHON") {
        candidates.push(p);
    }
    if let Ok(v) = std::env::var("VIRTUAL_ENV") {
        candidates.push(format!("{v}/bin/python"));
    }
    candidates.push("/work/venv/bin/python".into());
    candidates.push("python3".into());
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import onnx, onnxruntime, numpy"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn cli_optimize_huge_weights_loads_in_onnxruntime() {
    let dir = tmp_dir("cli");
    let model = write_model(&dir);
    let out = dir.join("fused.onnx");
    let bin = env!("CARGO_BIN_EXE_graphrw");
    let timed = Path::new("/usr/bin/time").exists();
    let mut cmd = if timed {
        let mut c = Command::new("/usr/bin/time");
        c.args(["-f", "PEAK_KIB=%M", bin]);
        c
    } else {
        Command::new(bin)
    };
    let run = cmd
        .arg("optimize")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run graphrw");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "graphrw optimize failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("copied as file ranges"), "{stdout}");
    check_output(&out, "cli");
    match peak_kib(&stderr) {
        // Memory, not time: `optimize` peaks at a few MB whatever the weights (the
        // README's claim), held here under 32 MiB, a 70th of the weights; touching the
        // table (reading or copying it through memory) would pass it seventyfold.
        Some(kib) => {
            println!("graphrw optimize peaked at {kib} KiB for {W_BYTES} bytes of weights");
            assert!(
                kib * 1024 < 32 << 20,
                "graphrw optimize peaked at {kib} KiB for {W_BYTES} bytes of weights"
            )
        }
        None => println!("SKIPPED peak memory check: /usr/bin/time not available"),
    }

    // --single-file is refused, with no file left behind.
    let single = dir.join("single.onnx");
    let run = Command::new(bin)
        .arg("optimize")
        .arg(&model)
        .arg("-o")
        .arg(&single)
        .arg("--single-file")
        .output()
        .expect("run graphrw");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(stderr.contains("2 GiB limit"), "{stderr}");
    assert!(!single.exists());

    let Some(py) = python() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but no Python with onnx, onnxruntime and numpy was found (set GRAPHRW_PYTHON)");
        }
        println!("SKIPPED onnx/onnxruntime check: no Python with onnx, onnxruntime and numpy (set GRAPHRW_PYTHON)");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    let [ids, r] = &inputs()[..] else {
        unreachable!("two inputs")
    };
    std::fs::write(dir.join("ids.bin"), ids.to_raw_bytes()).expect("ids");
    std::fs::write(dir.join("res.bin"), r.to_raw_bytes()).expect("res");
    let script = format!(
        "import numpy as np, onnx, onnxruntime as ort\n\
         d = {dir:?}\n\
         onnx.checker.check_model(d + '/fused.onnx')\n\
         m = onnx.load(d + '/fused.onnx', load_external_data=False)\n\
         s = ort.InferenceSession(d + '/fused.onnx', providers=['CPUExecutionProvider'])\n\
         ids = np.fromfile(d + '/ids.bin', dtype=np.int64)\n\
         res = np.fromfile(d + '/res.bin', dtype=np.float32).reshape(ids.shape[0], {D})\n\
         (z,) = s.run(None, {{'ids': ids, 'res': res}})\n\
         np.asarray(z, dtype=np.float32).tofile(d + '/z.bin')\n",
        dir = dir.to_str().expect("utf-8 temp dir"),
    );
    let run = Command::new(&py)
        .args(["-c", &script])
        .output()
        .expect("run python");
    assert!(
        run.status.success(),
        "onnx/onnxruntime refused the optimised model:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let z: Vec<f32> = std::fs::read(dir.join("z.bin"))
        .expect("z")
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let z = Tensor::from_vec(vec![IDS.len(), D], z).expect("z tensor");
    assert_close(&z, "onnxruntime");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `graphrw run` on a model whose one projection reads all of a 256 MiB external f32
/// weight (`y = x @ Wp + bp`, 64 rows, sparse file): the weight is mapped, not copied,
/// and packed for the GEMM block of rows by block of rows, each block's mapped pages
/// given back once packed, so the run peaks at about the weights' size: at most 5%
/// over it plus 64 MiB (the binary, threads and 2 MiB activations), where a copy, or
/// a packed copy beside the mapped pages, would double it. The outputs match the test
/// data. Memory, not time.
#[test]
fn cli_run_peaks_at_about_the_weights_size() {
    const K: usize = 8192;
    const N: usize = 8192;
    const M: usize = 64;
    const WP_BYTES: u64 = (K * N * 4) as u64;
    /// The weight rows that hold data; the rest of the weight is a hole of zeros.
    const ROWS_SET: [usize; 3] = [0, K / 2, K - 1];
    let wp = |r: usize, c: usize| ((r * 5 + c * 3) % 17) as f32 * 0.1 - 0.8;
    let bp = |c: usize| (c % 13) as f32 * 0.01;
    let xv = |i: usize, r: usize| (i + 1) as f32 * 0.25 - r as f32 * 1e-5;

    let dir = tmp_dir("run-peak");
    let data_path = dir.join("model.onnx.data");
    let mut data = File::create(&data_path).expect("data file");
    for &r in &ROWS_SET {
        data.seek(SeekFrom::Start((r * N * 4) as u64))
            .expect("seek");
        data.write_all(&le((0..N).map(|c| wp(r, c)))).expect("row");
    }
    data.seek(SeekFrom::Start(WP_BYTES)).expect("seek");
    data.write_all(&le((0..N).map(bp))).expect("bias");
    drop(data);
    let model = ModelProto {
        ir_version: 10,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 18,
        }],
        producer_name: "huge_weights test".into(),
        graph: Some(GraphProto {
            name: "projection".into(),
            node: vec![
                node("MatMul", "proj", &["x", "Wp"], &["h"]),
                node("Add", "bias", &["h", "bp"], &["y"]),
            ],
            initializer: vec![
                external("Wp", &[K as i64, N as i64], 0, WP_BYTES),
                external("bp", &[N as i64], WP_BYTES, (N * 4) as u64),
            ],
            input: vec![value_info("x", data_type::FLOAT, &[M as i64, K as i64])],
            output: vec![value_info("y", data_type::FLOAT, &[M as i64, N as i64])],
            ..Default::default()
        }),
        ..Default::default()
    };
    std::fs::write(dir.join("model.onnx"), model.encode_to_vec()).expect("model");

    // Test data: x is zero but in the columns of the rows that hold data.
    let mut x = vec![0f32; M * K];
    for i in 0..M {
        for &r in &ROWS_SET {
            x[i * K + r] = xv(i, r);
        }
    }
    let y: Vec<f32> = (0..M * N)
        .map(|e| {
            let (i, c) = (e / N, e % N);
            let dot: f64 = ROWS_SET
                .iter()
                .map(|&r| xv(i, r) as f64 * wp(r, c) as f64)
                .sum();
            (dot + bp(c) as f64) as f32
        })
        .collect();
    let set = dir.join("test_data_set_0");
    std::fs::create_dir_all(&set).expect("test data dir");
    let pb = |name: &str, dims: [usize; 2], values: Vec<f32>| {
        TensorProto {
            name: name.into(),
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: data_type::FLOAT,
            raw_data: le(values),
            ..Default::default()
        }
        .encode_to_vec()
    };
    std::fs::write(set.join("input_0.pb"), pb("x", [M, K], x)).expect("input");
    std::fs::write(set.join("output_0.pb"), pb("y", [M, N], y)).expect("output");

    let bin = env!("CARGO_BIN_EXE_graphrw");
    if !Path::new("/usr/bin/time").exists() {
        println!("SKIPPED: run's peak memory check needs /usr/bin/time");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let run = Command::new("/usr/bin/time")
        .args(["-f", "PEAK_KIB=%M", bin, "run"])
        .arg(&dir)
        .output()
        .expect("run graphrw");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        run.status.success(),
        "graphrw run failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all outputs within tolerance"), "{stdout}");
    let kib = peak_kib(&stderr).unwrap_or_else(|| panic!("no peak in:\n{stderr}"));
    let limit = WP_BYTES + WP_BYTES / 20 + (64 << 20);
    println!(
        "graphrw run peaked at {:.1}% of the weights ({kib} KiB for {WP_BYTES} bytes)",
        (kib * 1024) as f64 / WP_BYTES as f64 * 100.0
    );
    assert!(
        kib * 1024 <= limit,
        "graphrw run peaked at {kib} KiB for {WP_BYTES} bytes of weights (limit {limit})"
    );
}
