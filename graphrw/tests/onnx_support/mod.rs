//! Shared helpers of the ONNX tests: the small protobuf messages hand-made models are
//! built from.
#![allow(dead_code)]

use graphrw::onnx::proto::{
    AttributeProto, Dimension, DimensionValue, NodeProto, TensorShapeProto, TypeProto,
    TypeProtoTensor, ValueInfoProto,
};

/// A value of f32 elements (ONNX `elem_type` 1) with fixed `dims`.
pub fn f32_value(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
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
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

/// A default-domain node named after its first output, with no attributes.
pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("n_{}", outputs.first().copied().unwrap_or("x")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// The real corpus beside the checkout (`../shared/corpus`).
pub const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus");

/// The corpus's model folders (its `manifest.json` lists the same eight).
pub const CORPUS_MODELS: [&str; 8] = [
    "bart_sdpa",
    "bert_eager",
    "bert_sdpa",
    "gpt2_eager",
    "gpt2_sdpa",
    "llama_eager",
    "llama_sdpa",
    "t5_eager",
];

/// A node named `name` reading `inputs` and writing `y`.
pub fn named_node(op: &str, name: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec!["y".into()],
        attribute: attrs,
        ..Default::default()
    }
}
