//! Hostile ONNX files: truncated and corrupt bytes, forged lengths, external data that
//! escapes the model's folder or lies beyond its file, huge and negative dims, deep
//! nesting, cycles, undefined values, unknown ops and impossible shapes. Each is an
//! `Err` naming the problem, never a panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use graphrw::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, ValueInfoProto,
};
use graphrw::onnx::{self, OnnxError};
use graphrw::Graph;
use prost::Message;

mod onnx_support;
use onnx_support::f32_value as f32_input;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus");

/// Loads without letting a panic escape: a panic fails the test with the case's name.
fn load(case: &str, bytes: &[u8], dir: Option<&Path>) -> Result<Graph, OnnxError> {
    match catch_unwind(AssertUnwindSafe(|| onnx::load_bytes_in(bytes, dir))) {
        Ok(r) => r,
        Err(_) => panic!("{case}: the loader panicked"),
    }
}

fn expect_err(case: &str, bytes: &[u8], dir: Option<&Path>, needle: &str) -> String {
    match load(case, bytes, dir) {
        Ok(_) => panic!("{case}: loaded, expected an error containing `{needle}`"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(needle),
                "{case}: error `{msg}` should contain `{needle}`"
            );
            msg
        }
    }
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphrw-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tempdir");
    d
}

fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        ..Default::default()
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

fn model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 10,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 18,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// `y = x + w` with `w` an initialiser.
fn add_model(w: TensorProto) -> Vec<u8> {
    model(GraphProto {
        node: vec![node("Add", "add0", &["x", "w"], &["y"])],
        initializer: vec![w],
        input: vec![f32_input("x", &[4])],
        output: vec![output("y")],
        ..Default::default()
    })
}

fn external(location: &str, offset: u64, length: u64) -> TensorProto {
    let kv = |k: &str, v: String| StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    TensorProto {
        name: "w".into(),
        dims: vec![4],
        data_type: 1,
        data_location: 1,
        external_data: vec![
            kv("location", location.into()),
            kv("offset", offset.to_string()),
            kv("length", length.to_string()),
        ],
        ..Default::default()
    }
}

#[test]
fn a_valid_hand_made_model_loads() {
    let w = TensorProto {
        name: "w".into(),
        dims: vec![4],
        data_type: 1,
        float_data: vec![1.0, 2.0, 3.0, 4.0],
        ..Default::default()
    };
    let g = load("valid", &add_model(w), None).expect("a valid model loads");
    assert_eq!(g.op_counts().get("add"), Some(&1));
}

#[test]
fn truncated_model_at_every_cut_point_is_an_error() {
    let path = PathBuf::from(CORPUS).join("bert_eager/model.onnx");
    let bytes = std::fs::read(&path).expect("corpus model");
    let dir = path.parent().expect("dir");
    let mut cuts: Vec<usize> = (0..128).collect();
    cuts.extend((0..400).map(|k| k * bytes.len() / 400));
    cuts.extend(bytes.len() - 64..bytes.len());
    for cut in cuts {
        assert!(
            load(&format!("cut at {cut}"), &bytes[..cut], Some(dir)).is_err(),
            "cut at {cut} loaded"
        );
    }
    assert!(load("whole", &bytes, Some(dir)).is_ok());
}

#[test]
fn corrupt_bytes_never_panic() {
    let path = PathBuf::from(CORPUS).join("gpt2_eager/model.onnx");
    let bytes = std::fs::read(&path).expect("corpus model");
    let dir = path.parent().expect("dir");
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..300 {
        let mut b = bytes.clone();
        for _ in 0..1 + round % 4 {
            let at = (next() as usize) % b.len();
            b[at] = next() as u8;
        }
        let _ = load(&format!("mutation {round}"), &b, Some(dir));
    }
    for len in [0usize, 1, 2, 7, 64, 1000] {
        let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let _ = load(&format!("junk {len}"), &junk, None);
    }
}

#[test]
fn forged_lengths_are_errors() {
    // Field 7 (graph), length-delimited, claiming 4 GiB that are not there.
    expect_err(
        "forged graph length",
        &[0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00],
        None,
        "not a valid ONNX protobuf",
    );
    // A varint that never ends.
    expect_err(
        "endless varint",
        &[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
        None,
        "not a valid",
    );
    // raw_data shorter than the dims say.
    let w = TensorProto {
        name: "w".into(),
        dims: vec![4],
        data_type: 1,
        raw_data: vec![0; 12],
        ..Default::default()
    };
    expect_err(
        "short raw_data",
        &add_model(w),
        None,
        "raw_data holds 12 bytes",
    );
    // Typed data of the wrong count.
    let w = TensorProto {
        name: "w".into(),
        dims: vec![4],
        data_type: 1,
        float_data: vec![1.0; 3],
        ..Default::default()
    };
    expect_err(
        "short float_data",
        &add_model(w),
        None,
        "float_data holds 3 elements",
    );
}

#[test]
fn huge_and_negative_dims_are_errors_without_allocation() {
    for (case, dims, needle) in [
        ("huge", vec![1i64 << 20, 1 << 20], "raw_data holds 16 bytes"),
        ("overflow", vec![1 << 47, 1 << 47, 1 << 47], "overflow"),
        ("too big", vec![i64::MAX], "larger than graphrw accepts"),
        ("negative", vec![-4], "negative dim"),
    ] {
        let w = TensorProto {
            name: "w".into(),
            dims,
            data_type: 1,
            raw_data: vec![0; 16],
            ..Default::default()
        };
        expect_err(case, &add_model(w), None, needle);
    }
    // Huge typed data claim: dims say 2^40 floats, float_data holds 4.
    let w = TensorProto {
        name: "w".into(),
        dims: vec![1 << 40],
        data_type: 1,
        float_data: vec![0.0; 4],
        ..Default::default()
    };
    expect_err(
        "huge typed",
        &add_model(w),
        None,
        "float_data holds 4 elements",
    );
    // Graph input dims.
    for (case, dim, needle) in [
        ("negative input dim", -1i64, "negative"),
        ("huge input dim", 1 << 60, "larger than"),
    ] {
        let bytes = model(GraphProto {
            node: vec![node("Relu", "r", &["x"], &["y"])],
            input: vec![f32_input("x", &[2, dim])],
            output: vec![output("y")],
            ..Default::default()
        });
        expect_err(case, &bytes, None, needle);
    }
}

/// Runs `f` on another thread and fails the test if it does not return within 20 s (a
/// FIFO without a writer blocks `open` forever).
#[cfg(unix)]
fn within_20s<T: Send + 'static>(case: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{case}: blocked (or panicked) instead of refusing"))
}

#[test]
#[cfg(unix)]
fn fifos_and_devices_in_the_model_folder_are_refused_without_blocking() {
    let dir = tempdir("fifo");
    let fifo = |name: &str| {
        let ok = std::process::Command::new("mkfifo")
            .arg(dir.join(name))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mkfifo {name}");
    };
    // External data: a FIFO named by the tensor, inside the folder.
    fifo("pipe.bin");
    let d = dir.clone();
    let msg = within_20s("external data FIFO", move || {
        onnx::load_bytes_in(&add_model(external("pipe.bin", 0, 16)), Some(&d)).map(|_| ())
    })
    .expect_err("a FIFO as external data loaded");
    assert!(msg.to_string().contains("not a regular file"), "{msg}");
    // Test data: a FIFO, and a link to an endless device.
    fifo("input_0.pb");
    let p = dir.join("input_0.pb");
    let msg = within_20s("test data FIFO", move || {
        onnx::read_tensor_pb(&p).map(|_| ())
    })
    .expect_err("a FIFO as test data was read");
    assert!(msg.to_string().contains("not a regular file"), "{msg}");
    std::os::unix::fs::symlink("/dev/zero", dir.join("input_1.pb")).expect("symlink");
    let p = dir.join("input_1.pb");
    let msg = within_20s("test data /dev/zero", move || {
        onnx::read_tensor_pb(&p).map(|_| ())
    })
    .expect_err("/dev/zero as test data was read");
    assert!(msg.to_string().contains("not a regular file"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn external_data_must_stay_in_the_model_folder() {
    let root = tempdir("ext");
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("w.bin"), [0u8; 16]).expect("data");
    std::fs::write(root.join("secret.bin"), [0u8; 16]).expect("secret");
    // Positive control.
    assert!(load("ext ok", &add_model(external("w.bin", 0, 16)), Some(&dir)).is_ok());
    expect_err(
        "dot-dot",
        &add_model(external("../secret.bin", 0, 16)),
        Some(&dir),
        "escapes the model's folder",
    );
    expect_err(
        "nested dot-dot",
        &add_model(external("sub/../../secret.bin", 0, 16)),
        Some(&dir),
        "escapes",
    );
    let abs = root.join("secret.bin").display().to_string();
    expect_err(
        "absolute",
        &add_model(external(&abs, 0, 16)),
        Some(&dir),
        "escapes the model's folder",
    );
    expect_err(
        "missing file",
        &add_model(external("nope.bin", 0, 16)),
        Some(&dir),
        "cannot be opened",
    );
    expect_err(
        "beyond the end",
        &add_model(external("w.bin", 8, 16)),
        Some(&dir),
        "beyond the end",
    );
    expect_err(
        "offset overflow",
        &add_model(external("w.bin", u64::MAX - 2, 16)),
        Some(&dir),
        "overflow",
    );
    expect_err(
        "wrong length",
        &add_model(external("w.bin", 0, 1 << 40)),
        Some(&dir),
        "does not match",
    );
    expect_err(
        "no folder",
        &add_model(external("w.bin", 0, 16)),
        None,
        "no folder",
    );
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(root.join("secret.bin"), dir.join("link.bin")).expect("symlink");
        expect_err(
            "symlink out",
            &add_model(external("link.bin", 0, 16)),
            Some(&dir),
            "outside the model's folder",
        );
    }
    // Through `load(path)` the folder is the model's.
    std::fs::write(
        dir.join("m.onnx"),
        add_model(external("../secret.bin", 0, 16)),
    )
    .expect("model");
    let e = onnx::load(dir.join("m.onnx")).expect_err("escapes");
    assert!(e.to_string().contains("tensor `w`"), "{e}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn deep_nesting_is_an_error() {
    // Graph > Node > Attribute > Graph > ... far past the decoder's recursion limit.
    let mut g = GraphProto::default();
    for _ in 0..200 {
        let mut n = node("If", "deep", &[], &[]);
        n.attribute.push(AttributeProto {
            name: "then_branch".into(),
            r#type: 5,
            g: Some(Box::new(g)),
            ..Default::default()
        });
        g = GraphProto {
            node: vec![n],
            ..Default::default()
        };
    }
    let bytes = model(g);
    let msg = expect_err("deep nesting", &bytes, None, "nested 201 deep");
    assert!(msg.len() <= 200, "{msg}");
}

#[test]
fn graph_structure_errors_name_the_node() {
    let cycle = model(GraphProto {
        node: vec![
            node("Relu", "a", &["y"], &["x1"]),
            node("Relu", "b", &["x1"], &["y"]),
        ],
        input: vec![f32_input("x", &[2])],
        output: vec![output("y")],
        ..Default::default()
    });
    expect_err("cycle", &cycle, None, "cycle through node a");

    let undefined = model(GraphProto {
        node: vec![node("Relu", "r0", &["nope"], &["y"])],
        input: vec![f32_input("x", &[2])],
        output: vec![output("y")],
        ..Default::default()
    });
    expect_err(
        "undefined",
        &undefined,
        None,
        "node r0 uses `nope`, which is not defined",
    );

    let undefined_output = model(GraphProto {
        node: vec![node("Relu", "r0", &["x"], &["y"])],
        input: vec![f32_input("x", &[2])],
        output: vec![output("z")],
        ..Default::default()
    });
    expect_err("undefined output", &undefined_output, None, "`z`");

    let twice = model(GraphProto {
        node: vec![
            node("Relu", "r0", &["x"], &["y"]),
            node("Relu", "r1", &["x"], &["y"]),
        ],
        input: vec![f32_input("x", &[2])],
        output: vec![output("y")],
        ..Default::default()
    });
    expect_err("defined twice", &twice, None, "defined more than once");

    let unknown = model(GraphProto {
        node: vec![node("Foo", "", &["x"], &["y"])],
        input: vec![f32_input("x", &[2])],
        output: vec![output("y")],
        ..Default::default()
    });
    // An op graphrw does not model passes through as an opaque node.
    let g = load("unknown op", &unknown, None).expect("unknown op loads");
    assert_eq!(g.op_counts().get("opaque"), Some(&1));

    let bad_shapes = model(GraphProto {
        node: vec![node("MatMul", "mm", &["a", "b"], &["y"])],
        input: vec![f32_input("a", &[2, 3]), f32_input("b", &[4, 5])],
        output: vec![output("y")],
        ..Default::default()
    });
    let msg = expect_err("bad shapes", &bad_shapes, None, "MatMul mm");
    assert!(msg.contains("inner dimensions"), "{msg}");

    let runtime_shape = model(GraphProto {
        // A Reshape to a computed shape is carried opaque.
        node: vec![
            node("Relu", "r", &["s"], &["s2"]),
            node("Reshape", "node_view", &["x", "s2"], &["y"]),
        ],
        input: vec![f32_input("x", &[2, 3]), f32_input("s", &[2])],
        output: vec![output("y")],
        ..Default::default()
    });
    let g = load("runtime shape", &runtime_shape, None).expect("loads");
    assert!(g.to_string().contains(r#"op_type="Reshape""#), "{g}");

    let mut old = ModelProto::decode(cycle.as_slice()).expect("decode");
    old.opset_import[0].version = 30;
    expect_err("new opset", &old.encode_to_vec(), None, "opset 30");
    old.opset_import.clear();
    expect_err("no opset", &old.encode_to_vec(), None, "no default-domain");
    expect_err(
        "no graph",
        &ModelProto {
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 18,
            }],
            ..Default::default()
        }
        .encode_to_vec(),
        None,
        "no graph",
    );
}

#[test]
fn unsupported_attributes_and_types_are_named() {
    let mut n = node("Softmax", "sm", &["x"], &["y"]);
    n.attribute.push(AttributeProto {
        name: "mystery".into(),
        r#type: 2,
        i: 1,
        ..Default::default()
    });
    let bytes = model(GraphProto {
        node: vec![n],
        input: vec![f32_input("x", &[2])],
        output: vec![output("y")],
        ..Default::default()
    });
    // An attribute graphrw does not read might change the meaning: the node stays opaque.
    let g = load("unknown attribute", &bytes, None).expect("loads");
    assert!(g.to_string().contains(r#"op_type="Softmax""#), "{g}");

    let mut cast = node("Cast", "c", &["x"], &["y"]);
    cast.attribute.push(AttributeProto {
        name: "to".into(),
        r#type: 2,
        i: 8,
        ..Default::default()
    });
    let bytes = model(GraphProto {
        node: vec![cast],
        input: vec![f32_input("x", &[2])],
        output: vec![output("y")],
        ..Default::default()
    });
    // A cast to strings: opaque, with unknown output metadata.
    let g = load("string cast", &bytes, None).expect("loads");
    assert!(g.to_string().contains(r#"op_type="Cast""#), "{g}");
}

#[test]
fn tensor_files_are_checked_too() {
    let dir = tempdir("pb");
    std::fs::write(dir.join("bad.pb"), [0x0a, 0xff, 0xff]).expect("write");
    assert!(onnx::read_tensor_pb(dir.join("bad.pb")).is_err());
    assert!(onnx::read_tensor_pb(dir.join("missing.pb")).is_err());
    let t = graphrw::Tensor::from_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).expect("t");
    onnx::write_tensor_pb(dir.join("ok.pb"), "t", &t).expect("write pb");
    let (name, back) = onnx::read_tensor_pb(dir.join("ok.pb")).expect("read pb");
    assert_eq!(name, "t");
    assert_eq!(back.to_f64_vec(), t.to_f64_vec());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Saving onto a path that is a folder or a FIFO is refused and leaves it as it was
/// (the staged file would be renamed over it: `-o /dev/null` run as root replaced the
/// device).
#[test]
#[cfg(unix)]
fn saving_over_what_is_not_a_regular_file_is_refused() {
    let dir = tempdir("save-over");
    let b = graphrw::Builder::new();
    let x = b.input("x", graphrw::TensorMeta::new(graphrw::DType::F32, [2usize]));
    b.output(&[x.relu().expect("relu")]).expect("output");
    let g = b.finish();
    let folder = dir.join("a_folder");
    std::fs::create_dir(&folder).expect("mkdir");
    let fifo = dir.join("a_fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo");
    for path in [&folder, &fifo] {
        let err = onnx::save(&g, path).expect_err("saved over it");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
    assert!(folder.is_dir());
    assert!(std::fs::metadata(&fifo).is_ok_and(|m| !m.is_file() && !m.is_dir()));
    let _ = std::fs::remove_dir_all(&dir);
}
