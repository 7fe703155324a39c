//! Importer unit tests: attribute readers, routes, malformed nodes.

use super::*;
use crate::onnx::proto::{AttributeProto, DimensionValue, TensorProto, ValueInfoProto};
use std::path::PathBuf;

fn model(attribute: Vec<AttributeProto>) -> ModelProto {
    let node = |op: &str, input: &str, output: &str| NodeProto {
        input: vec![input.into()],
        output: vec![output.into()],
        op_type: op.into(),
        attribute: attribute.clone(),
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        producer_name: "test".into(),
        graph: Some(GraphProto {
            node: vec![node("Relu", "x", "y"), node("Neg", "y", "z")],
            name: "g".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn int_attr(name: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: crate::onnx::proto::attribute_type::INT,
        i: 3,
        ..Default::default()
    }
}

#[test]
fn node_by_node_decoding_gives_the_plain_decoders_model_with_tight_lists() {
    let bytes = model(vec![int_attr("a")]).encode_to_vec();
    let fast = decode_by_node(&bytes)
        .expect("decodes")
        .expect("a plain model takes the node-by-node path");
    assert_eq!(
        Some(&fast),
        ModelProto::decode(bytes.as_slice()).ok().as_ref()
    );
    let nodes = &fast.graph.as_ref().expect("graph").node;
    assert_eq!(nodes.capacity(), 2);
    assert!(nodes.iter().all(|n| n.attribute.capacity() == 1));
}

/// The program a model file loads as by the fast route (which must take it) and by
/// the plain route (prost's decoder and `from_model`).
fn both_routes(path: &Path) -> (String, String) {
    let dir = path.parent().expect("folder");
    let file = MappedFile::open_model(path).expect("map");
    let fast = load_fast(file.as_bytes(), Some(dir), Some(&file))
        .unwrap_or_else(|| panic!("{}: the fast route refused it", path.display()));
    // Decoded on a second thread in batches of 3 nodes: the same graph.
    let threaded = load_fast_with(file.as_bytes(), Some(dir), Some(&file), 0, 3)
        .unwrap_or_else(|| panic!("{}: the threaded fast route refused it", path.display()));
    assert_eq!(fast.to_string(), threaded.to_string(), "{}", path.display());
    let model = ModelProto::decode(file.as_bytes()).expect("prost decodes it");
    let plain = from_model(&model, Some(dir)).expect("the plain route loads it");
    (fast.to_string(), plain.to_string())
}

#[test]
fn corpus_models_load_the_same_by_both_routes() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
    let mut models: Vec<_> = std::fs::read_dir(&corpus)
        .expect("the corpus")
        .filter_map(Result::ok)
        .map(|e| e.path().join("model.onnx"))
        .filter(|p| p.exists())
        .collect();
    models.sort();
    assert_eq!(models.len(), 8, "{models:?}");
    for m in models {
        let (fast, plain) = both_routes(&m);
        assert_eq!(fast, plain, "{}", m.display());
    }
}

/// The ONNX backend test models (found through `$GRAPHRW_PYTHON` or `python3`, as
/// by `tests/onnx_backend_suite.rs`; skipped without the `onnx` package, except
/// under `CI=true`): every one the fast route takes loads as by the plain route,
/// and the fast route takes all but those with subgraphs or functions.
#[test]
fn backend_suite_models_load_the_same_by_both_routes() {
    let python = std::env::var("GRAPHRW_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
            .args(["-c", "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data'))"])
            .output();
    let dir = out
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.is_dir());
    let Some(dir) = dir else {
        assert!(std::env::var("CI").is_err(), "CI needs the onnx package");
        eprintln!("skipped: no onnx package");
        return;
    };
    let (mut fast_count, mut total) = (0, 0);
    for kind in std::fs::read_dir(&dir)
        .expect("suite")
        .filter_map(Result::ok)
    {
        for case in std::fs::read_dir(kind.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = case.path().join("model.onnx");
            if !path.exists() {
                continue;
            }
            total += 1;
            let file = MappedFile::open_model(&path).expect("map");
            let model = ModelProto::decode(file.as_bytes()).expect("decode");
            let Some(fast) = load_fast(file.as_bytes(), path.parent(), Some(&file)) else {
                continue;
            };
            fast_count += 1;
            // One node per batch, decoded on a second thread: the same graph.
            let threaded = load_fast_with(file.as_bytes(), path.parent(), Some(&file), 0, 1)
                .expect("the threaded fast route reads what the fast route reads");
            assert_eq!(fast.to_string(), threaded.to_string(), "{}", path.display());
            let plain = from_model(&model, path.parent()).expect("plain route");
            assert_eq!(fast.to_string(), plain.to_string(), "{}", path.display());
        }
    }
    eprintln!("fast route: {fast_count} of {total} backend models");
    assert!(
        total > 0 && fast_count * 10 >= total * 9,
        "{fast_count} of {total}"
    );
}

/// A chain of `Relu`s from graph input `x`, node `i` reading `inputs[i]` and
/// writing `outputs[i]`; graph output `last`, initialiser `w` (one float).
fn chain(inputs: &[&str], outputs: &[&str], last: &str) -> Vec<u8> {
    use crate::onnx::proto::{
        data_type, Dimension, OperatorSetIdProto, TensorShapeProto, TypeProto, TypeProtoTensor,
    };
    let info = |name: &str| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: data_type::FLOAT,
                shape: Some(TensorShapeProto {
                    dim: vec![Dimension {
                        value: Some(DimensionValue::DimValue(1)),
                        denotation: String::new(),
                    }],
                }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    };
    let node = inputs
        .iter()
        .zip(outputs)
        .map(|(i, o)| NodeProto {
            input: vec![i.to_string()],
            output: vec![o.to_string()],
            op_type: "Relu".into(),
            ..Default::default()
        })
        .collect();
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node,
            input: vec![info("x")],
            output: vec![info(last)],
            initializer: vec![TensorProto {
                name: "w".into(),
                dims: vec![1],
                data_type: data_type::FLOAT,
                float_data: vec![1.0],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Decoding on a second thread (every batch size) reads what decoding on this one
/// reads, and refuses what it refuses: inputs read before they are defined, outputs
/// defined twice or over a graph input or an initialiser.
#[test]
fn the_threaded_fast_route_takes_and_refuses_what_the_fast_route_does() {
    let cases: [(&[&str], &[&str], &str, bool); 7] = [
        (&["x", "a", "b"], &["a", "b", "c"], "c", true),
        (&["x", "w", "a"], &["a", "b", "c"], "c", true),
        (&["a", "x", "b"], &["b", "a", "c"], "c", false),
        (&["x", "a", "x"], &["a", "b", "a"], "b", false),
        (&["x", "a", "b"], &["a", "x", "c"], "c", false),
        (&["x", "a", "b"], &["a", "w", "c"], "c", false),
        (&["x", "a", "q"], &["a", "b", "c"], "c", false),
    ];
    for (inputs, outputs, last, takes) in cases {
        let bytes = chain(inputs, outputs, last);
        let single = load_fast_with(&bytes, None, None, usize::MAX, 2).map(|g| g.to_string());
        assert_eq!(single.is_some(), takes, "{inputs:?} -> {outputs:?}");
        for batch in 1..4 {
            let threaded = load_fast_with(&bytes, None, None, 0, batch).map(|g| g.to_string());
            assert_eq!(
                single, threaded,
                "{inputs:?} -> {outputs:?}, batches of {batch}"
            );
        }
        // The plain route reads what the fast route reads, and says what is wrong
        // with the rest.
        let plain = load_bytes(&bytes);
        match &single {
            Some(g) => assert_eq!(&plain.expect("plain").to_string(), g),
            None if inputs[0] == "a" => assert!(plain.is_ok()),
            None => assert!(plain.is_err(), "{inputs:?} -> {outputs:?}"),
        }
    }
}

#[test]
fn other_inputs_take_the_plain_decoder() {
    // A subgraph (its nesting is counted from the model down).
    let sub = AttributeProto {
        name: "body".into(),
        r#type: crate::onnx::proto::attribute_type::GRAPH,
        g: Some(Box::new(GraphProto::default())),
        ..Default::default()
    };
    assert!(matches!(
        decode_by_node(&model(vec![sub]).encode_to_vec()),
        Ok(None)
    ));
    // The graph field twice (protobuf merges them).
    let mut twice = model(vec![]).encode_to_vec();
    twice.extend(model(vec![]).encode_to_vec());
    assert!(matches!(decode_by_node(&twice), Ok(None)));
    // A group (wire type 3), a cut varint, a length past the end.
    assert!(matches!(decode_by_node(&[0x0b]), Ok(None)));
    assert!(matches!(decode_by_node(&[0x08, 0x80]), Ok(None)));
    assert!(matches!(decode_by_node(&[0x3a, 0x05, 0x00]), Ok(None)));
    // No graph at all.
    assert!(matches!(decode_by_node(&[0x08, 0x07]), Ok(None)));
}

/// Nodes without an op, or more of them than the run budget can decode, are errors on
/// the node-by-node path, before the rest is decoded (not left to the plain decoder,
/// which would decode them all).
#[test]
fn empty_nodes_and_node_counts_past_the_budget_are_refused() {
    let mut empty = model(vec![]);
    if let Some(g) = empty.graph.as_mut() {
        g.node.insert(0, NodeProto::default());
    }
    let err = decode_by_node(&empty.encode_to_vec()).expect_err("an empty node decoded");
    assert!(err.to_string().contains("has no op_type"), "{err}");
    let node = std::mem::size_of::<NodeProto>();
    assert!(nodes_within(1000, 1000 * node as u64).is_ok());
    let err = nodes_within(1001, 1000 * node as u64).expect_err("past the budget");
    assert!(err.to_string().contains("past the run budget"), "{err}");
    assert!(nodes_within(usize::MAX, u64::MAX - 1).is_err());
}
