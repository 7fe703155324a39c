//! External data in, external data out: every corpus model (torch.onnx exports with
//! `model.onnx.data`) loads with its weights memory-mapped, optimises, and saves with
//! its weights still external (copied as file ranges, aligned), and the saved model
//! gives the expected outputs of its test data; the single-file and external layouts
//! are honoured for graphs built in memory too.

use std::path::{Path, PathBuf};

use graphrw::onnx::proto::{ModelProto, DATA_LOCATION_EXTERNAL};
use graphrw::onnx::{self, SaveOptions, WeightLayout};
use graphrw::{Builder, DType, Graph, Tensor, TensorMeta};
use prost::Message;

mod onnx_support;
use onnx_support::{CORPUS, CORPUS_MODELS};

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphrw-external-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn decode(path: &Path) -> ModelProto {
    ModelProto::decode(std::fs::read(path).expect("read").as_slice()).expect("decode")
}

/// Runs `g` on `model_dir`'s test data and checks the outputs (abs 1e-4 + rel 1e-3).
fn check_test_data(g: &Graph, model_dir: &Path, what: &str) {
    let set = model_dir.join("test_data_set_0");
    let mut inputs = Vec::new();
    for i in 0.. {
        let p = set.join(format!("input_{i}.pb"));
        if !p.exists() {
            break;
        }
        inputs.push(onnx::read_tensor_pb(&p).expect("input").1);
    }
    let outs = graphrw::exec::run_reference(g, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (_, want) = onnx::read_tensor_pb(set.join("output_0.pb")).expect("output");
    let got = outs[0].to_f64_vec();
    let want = want.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{what}: output size");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
            "{what}: element {k}: {g} vs {w}"
        );
    }
}

#[test]
fn corpus_models_keep_external_data_through_optimize() {
    let dir = tmp("corpus");
    for name in CORPUS_MODELS {
        let src = PathBuf::from(CORPUS).join(name);
        let mut g = onnx::load(src.join("model.onnx")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mapped = g
            .node_ids()
            .filter_map(|id| g.node(id).and_then(|n| n.payload()))
            .filter(|t| t.file_range().is_some())
            .count();
        assert!(
            mapped > 0,
            "{name}: no weight was mapped from its external data"
        );
        graphrw::rules::optimize(&mut g).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = dir.join(format!("{name}.onnx"));
        let saved = onnx::save_with(&g, &out, &SaveOptions::default()).expect("save");
        let data = dir.join(format!("{name}.onnx.data"));
        assert_eq!(saved.data_file.as_deref(), Some(data.as_path()), "{name}");
        assert!(saved.copied_ranges > 0, "{name}: {saved}");
        // Every external initialiser points into the data file, aligned, within it.
        let data_len = std::fs::metadata(&data).expect("data").len();
        let model = decode(&out);
        let mut external = 0;
        for t in &model.graph.expect("graph").initializer {
            if t.data_location != DATA_LOCATION_EXTERNAL {
                assert!(!t.raw_data.is_empty() || t.dims.contains(&0) || t.dims.is_empty());
                continue;
            }
            external += 1;
            let get = |k: &str| {
                t.external_data
                    .iter()
                    .find(|e| e.key == k)
                    .map(|e| e.value.clone())
                    .unwrap_or_default()
            };
            assert_eq!(get("location"), format!("{name}.onnx.data"));
            let offset: u64 = get("offset").parse().expect("offset");
            let length: u64 = get("length").parse().expect("length");
            assert_eq!(offset % 64, 0, "{name}: `{}` at {offset}", t.name);
            if length >= 65536 {
                assert_eq!(offset % 65536, 0, "{name}: `{}` at {offset}", t.name);
            }
            assert!(
                offset + length <= data_len,
                "{name}: `{}` past the end",
                t.name
            );
        }
        assert_eq!(external, saved.external_tensors, "{name}");
        let back = onnx::load(&out).unwrap_or_else(|e| panic!("{name}: reload: {e}"));
        // (Fused ops without a standard ONNX form come back inlined, so the program may
        // differ; the outputs may not.)
        check_test_data(&back, &src, name);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn single_file_layout_writes_every_weight_inline() {
    let dir = tmp("single");
    let src = PathBuf::from(CORPUS).join("gpt2_eager");
    let g = onnx::load(src.join("model.onnx")).expect("load");
    let out = dir.join("one.onnx");
    let options = SaveOptions {
        layout: WeightLayout::SingleFile,
        ..SaveOptions::default()
    };
    let saved = onnx::save_with(&g, &out, &options).expect("save");
    assert_eq!(saved.data_file, None);
    assert!(!dir.join("one.onnx.data").exists());
    let bytes = std::fs::read(&out).expect("read");
    // No external data: it loads from bytes alone.
    let back = onnx::load_bytes(&bytes).expect("load from bytes");
    check_test_data(&back, &src, "single file");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn external_layout_moves_big_in_memory_constants_out() {
    let dir = tmp("memory");
    let b = Builder::new();
    let dims = vec![graphrw::Dim::from(2usize), graphrw::Dim::from(600usize)];
    let x = b.input("x", TensorMeta::new(DType::F32, dims)).value();
    let big: Vec<f32> = (0..600).map(|i| i as f32 * 0.25).collect();
    let w = b
        .constant(Tensor::from_vec(vec![600], big).expect("w"))
        .value();
    let s = b.constant(Tensor::scalar(2.0f32)).value();
    let op = |name: &str, args: &[graphrw::Value]| {
        let def = graphrw::ops::lookup(name).expect("op");
        b.apply(def, args, &[]).expect("apply")[0]
    };
    let y = op("mul", &[op("add", &[x, w]), s]);
    let y = b.var(y);
    b.output(&[y]).expect("output");
    let g = b.finish();
    let inputs = [Tensor::from_vec(vec![2, 600], vec![1.0f32; 1200]).expect("x")];
    let want = graphrw::exec::run_reference(&g, &inputs).expect("run");

    // Keep: nothing is mapped, so one file.
    let kept = onnx::save_with(&g, dir.join("keep.onnx"), &SaveOptions::default()).expect("save");
    assert_eq!(kept.data_file, None);

    let options = SaveOptions {
        layout: WeightLayout::External,
        data_file: Some("weights.bin".into()),
        ..SaveOptions::default()
    };
    let out = dir.join("ext.onnx");
    let saved = onnx::save_with(&g, &out, &options).expect("save");
    assert_eq!(saved.data_file, Some(dir.join("weights.bin")));
    // The 2400-byte weight goes out, the scalar stays inline; nothing was mapped.
    assert_eq!(
        (saved.external_tensors, saved.copied_ranges),
        (1, 0),
        "{saved}"
    );
    assert_eq!(
        std::fs::metadata(dir.join("weights.bin"))
            .expect("data")
            .len(),
        2400
    );
    let back = onnx::load(&out).expect("reload");
    let got = graphrw::exec::run_reference(&back, &inputs).expect("run");
    assert_eq!(got[0].to_f64_vec(), want[0].to_f64_vec());
    // Reloaded, the weight is mapped from the data file.
    assert!(back
        .node_ids()
        .filter_map(|id| back.node(id).and_then(|n| n.payload()))
        .any(|t| t.file_range().is_some()));

    // A data file name that is not a plain name is refused.
    let bad = SaveOptions {
        layout: WeightLayout::External,
        data_file: Some("../escape.bin".into()),
        ..SaveOptions::default()
    };
    let e = onnx::save_with(&g, dir.join("bad.onnx"), &bad).expect_err("escaping name");
    assert!(e.to_string().contains("plain file name"), "{e}");
    assert!(!dir.join("bad.onnx").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
