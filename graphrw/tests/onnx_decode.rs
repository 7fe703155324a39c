//! The loader decodes a model's graph node by node (a list sized once, each node's lists
//! trimmed) and falls back to prost's plain decoder for anything else. Both must read
//! the same model: these tests load each kind of input through `load`/`load_bytes`
//! and through `from_model` on prost's own decoding, and compare the programs. The
//! writer encodes the model field by field: its file must be the bytes `to_bytes` gives.

use std::path::{Path, PathBuf};

use graphrw::onnx::{self, proto::*};
use prost::Message;

mod onnx_support;
use onnx_support::f32_value as value_info;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus");

/// The program `bytes` load as, through the loader and through the plain decoder.
fn both_ways(bytes: &[u8], dir: Option<&Path>) -> (String, String) {
    let fast = onnx::load_bytes_in(bytes, dir).expect("the loader reads the model");
    let model = ModelProto::decode(bytes).expect("prost decodes the model");
    let plain = onnx::from_model(&model, dir).expect("from_model imports it");
    (fast.to_string(), plain.to_string())
}

fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: format!("n_{output}"),
        op_type: op.into(),
        attribute,
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// x (2, 3) -> Transpose -> Softmax -> Add(bias initialiser) -> y.
fn small_model() -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "test".into(),
        graph: Some(GraphProto {
            node: vec![
                node("Transpose", &["x"], "t", vec![ints("perm", &[1, 0])]),
                node(
                    "Softmax",
                    &["t"],
                    "s",
                    vec![AttributeProto {
                        name: "axis".into(),
                        r#type: attribute_type::INT,
                        i: -1,
                        ..Default::default()
                    }],
                ),
                node("Add", &["s", "bias"], "y", vec![]),
            ],
            name: "g".into(),
            initializer: vec![TensorProto {
                dims: vec![2],
                data_type: data_type::FLOAT,
                name: "bias".into(),
                raw_data: [1.5f32, -2.0]
                    .iter()
                    .flat_map(|f| f.to_le_bytes())
                    .collect(),
                ..Default::default()
            }],
            input: vec![value_info("x", &[2, 3])],
            output: vec![value_info("y", &[3, 2])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_plain_model_reads_the_same_both_ways() {
    let bytes = small_model().encode_to_vec();
    let (fast, plain) = both_ways(&bytes, None);
    assert!(fast.contains("softmax"), "{fast}");
    assert_eq!(fast, plain);
}

#[test]
fn corpus_models_read_the_same_both_ways() {
    for name in ["gpt2_sdpa", "bert_eager", "t5_eager"] {
        let dir = PathBuf::from(CORPUS).join(name);
        let bytes = std::fs::read(dir.join("model.onnx")).expect("corpus model");
        let (fast, plain) = both_ways(&bytes, Some(&dir));
        assert_eq!(fast, plain, "{name}");
    }
}

#[test]
fn a_graph_field_given_twice_is_merged_as_protobuf_says() {
    // Two encodings concatenated are one message whose graph is the merge of both:
    // here the second adds a node reading the first's output and a new graph output.
    let first = small_model();
    let second = ModelProto {
        graph: Some(GraphProto {
            node: vec![node("Relu", &["y"], "z", vec![])],
            output: vec![value_info("z", &[3, 2])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut bytes = first.encode_to_vec();
    bytes.extend(second.encode_to_vec());
    let (fast, plain) = both_ways(&bytes, None);
    assert!(fast.contains("relu"), "{fast}");
    assert_eq!(fast, plain);
}

#[test]
fn a_node_with_a_subgraph_reads_the_same_both_ways() {
    // An `If` whose branches read the outer `x`: the node keeps its subgraphs.
    let branch = |op: &str, out: &str| GraphProto {
        node: vec![node(op, &["x"], out, vec![])],
        name: out.into(),
        output: vec![value_info(out, &[2, 3])],
        ..Default::default()
    };
    let mut model = small_model();
    let graph = model.graph.as_mut().expect("graph");
    graph.input.push(ValueInfoProto {
        name: "cond".into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: data_type::BOOL,
                shape: Some(TensorShapeProto { dim: vec![] }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    });
    graph.node.push(NodeProto {
        input: vec!["cond".into()],
        output: vec!["w".into()],
        name: "if".into(),
        op_type: "If".into(),
        attribute: vec![
            AttributeProto {
                name: "then_branch".into(),
                r#type: attribute_type::GRAPH,
                g: Some(Box::new(branch("Relu", "a"))),
                ..Default::default()
            },
            AttributeProto {
                name: "else_branch".into(),
                r#type: attribute_type::GRAPH,
                g: Some(Box::new(branch("Neg", "b"))),
                ..Default::default()
            },
        ],
        ..Default::default()
    });
    graph.output.push(value_info("w", &[2, 3]));
    let bytes = model.encode_to_vec();
    let (fast, plain) = both_ways(&bytes, None);
    assert!(fast.contains("opaque"), "{fast}");
    assert_eq!(fast, plain);
}

#[test]
fn broken_bytes_are_still_a_decode_error() {
    let bytes = small_model().encode_to_vec();
    for cut in [1, bytes.len() / 3, bytes.len() - 1] {
        let e = onnx::load_bytes(&bytes[..cut]).expect_err("a cut model does not load");
        assert!(!e.to_string().is_empty());
        assert!(ModelProto::decode(&bytes[..cut]).is_err(), "prost agrees");
    }
}

#[test]
fn the_written_file_is_the_encoded_model() {
    let graph = onnx::load_bytes(&small_model().encode_to_vec()).expect("load");
    let dir = std::env::temp_dir().join(format!("graphrw-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("m.onnx");
    onnx::save(&graph, &path).expect("save");
    let written = std::fs::read(&path).expect("read back");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(written, onnx::to_bytes(&graph).expect("to_bytes"));
}
