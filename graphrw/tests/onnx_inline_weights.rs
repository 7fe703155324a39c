//! A single-file model's inline weights (`raw_data` of 1 KiB or more) are memory-mapped
//! from the `.onnx` itself, not read: each is a view of its file range, whatever its
//! offset's alignment (an unaligned one is copied only when a kernel reads it). Saving
//! keeps the single-file layout by default, and the external layout copies the ranges
//! file to file.

use graphrw::onnx::proto::*;
use graphrw::onnx::{self, SaveOptions, WeightLayout};
use graphrw::{Graph, Tensor};
use prost::Message;

mod onnx_support;
use onnx_support::f32_value as value_info;

const N: usize = 600;

/// A fresh folder, removed when the guard drops (also when the test fails).
fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("graphrw-inline-{tag}-"))
        .tempdir()
        .expect("temp dir")
}

/// Weight `k`: element `i` is `k + i / 8`.
fn weight(k: usize) -> Vec<f32> {
    (0..N).map(|i| k as f32 + i as f32 / 8.0).collect()
}

/// `y = x + w1 + w2 + w3 + w4`, the weights named `w`, `wa`, `wab`, `wabc` so that their
/// `raw_data` sits at offsets of every remainder mod 4.
fn model() -> ModelProto {
    let names = ["w", "wa", "wab", "wabc"];
    let initializer = names
        .iter()
        .enumerate()
        .map(|(k, n)| TensorProto {
            dims: vec![N as i64],
            data_type: data_type::FLOAT,
            name: n.to_string(),
            raw_data: weight(k + 1).iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        })
        .collect();
    let mut node = Vec::new();
    let mut last = "x".to_string();
    for (k, n) in names.iter().enumerate() {
        let out = if k + 1 == names.len() {
            "y".to_string()
        } else {
            format!("s{k}")
        };
        node.push(NodeProto {
            input: vec![last.clone(), n.to_string()],
            output: vec![out.clone()],
            name: format!("add{k}"),
            op_type: "Add".into(),
            ..Default::default()
        });
        last = out;
    }
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node,
            name: "g".into(),
            initializer,
            input: vec![value_info("x", &[2, N as i64])],
            output: vec![value_info("y", &[2, N as i64])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn x() -> Tensor {
    Tensor::from_vec(vec![2, N], (0..2 * N).map(|i| i as f32).collect()).expect("x")
}

fn want() -> Vec<f64> {
    let w: Vec<Vec<f32>> = (1..=4).map(weight).collect();
    (0..2 * N)
        .map(|i| {
            let mut v = i as f32;
            for wk in &w {
                v += wk[i % N];
            }
            f64::from(v)
        })
        .collect()
}

fn run(g: &Graph) -> Vec<f64> {
    graphrw::exec::run_reference(g, &[x()]).expect("run")[0].to_f64_vec()
}

/// The file ranges of the graph's mapped constants.
fn ranges(g: &Graph) -> Vec<graphrw::kernels::FileRange> {
    g.node_ids()
        .filter_map(|id| g.node(id).and_then(|n| n.payload()))
        .filter_map(|t| t.file_range())
        .collect()
}

#[test]
fn inline_weights_are_views_of_the_model_file() {
    let scratch = tmp("views");
    let dir = scratch.path();
    let path = dir.join("model.onnx");
    std::fs::write(&path, model().encode_to_vec()).expect("write");
    let g = onnx::load(&path).expect("load");
    let r = ranges(&g);
    assert_eq!(r.len(), 4, "every 2400-byte weight is mapped");
    assert!(r
        .iter()
        .all(|r| r.file.holds_model() && r.len == 4 * N as u64));
    let misaligned: Vec<u64> = r.iter().map(|r| r.offset % 4).collect();
    assert!(
        misaligned.contains(&0) && misaligned.iter().any(|&m| m != 0),
        "aligned and unaligned offsets are both covered: {misaligned:?}"
    );
    // The mapped bytes are the weights, aligned or not.
    assert_eq!(run(&g), want());
    // Loaded from bytes, nothing is mapped, and the graph is the same.
    let from_bytes = onnx::load_bytes(&std::fs::read(&path).expect("read")).expect("load");
    assert!(ranges(&from_bytes).is_empty());
    assert_eq!(from_bytes.to_string(), g.to_string());
}

#[test]
fn saving_keeps_one_file_or_copies_the_ranges_out() {
    let scratch = tmp("save");
    let dir = scratch.path();
    let path = dir.join("model.onnx");
    std::fs::write(&path, model().encode_to_vec()).expect("write");
    let g = onnx::load(&path).expect("load");

    // As the weights came: one file, even over the model it was loaded from.
    let kept = onnx::save_with(&g, &path, &SaveOptions::default()).expect("save");
    assert_eq!((kept.data_file, kept.external_tensors), (None, 0));
    let back = onnx::load(&path).expect("reload");
    assert_eq!(run(&back), want());
    assert_eq!(
        run(&g),
        want(),
        "the first graph still reads its (old) file"
    );

    // The external layout copies each range file to file.
    let out = dir.join("ext.onnx");
    let options = SaveOptions {
        layout: WeightLayout::External,
        ..SaveOptions::default()
    };
    let saved = onnx::save_with(&back, &out, &options).expect("save external");
    assert_eq!(
        (saved.external_tensors, saved.copied_ranges),
        (4, 4),
        "{saved}"
    );
    let ext = onnx::load(&out).expect("reload external");
    assert!(ranges(&ext).iter().all(|r| !r.file.holds_model()));
    assert_eq!(run(&ext), want());
}
