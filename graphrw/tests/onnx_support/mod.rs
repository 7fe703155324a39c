//! Shared helpers of the ONNX tests: the small protobuf messages hand-made models are
//! built from.
#![allow(dead_code)]

use graphrw::onnx::dtype_to_onnx;
use graphrw::onnx::proto::{
    attribute_type, AttributeProto, Dimension, DimensionValue, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};
use graphrw::DType;
use prost::Message;

/// A value of `dtype` with fixed `dims` (`None`: its shape left unsaid).
pub fn value_of(name: &str, dtype: DType, dims: Option<&[usize]>) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: dtype_to_onnx(dtype),
                shape: dims.map(|dims| TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(DimensionValue::DimValue(d as i64)),
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

/// An `INT` attribute.
pub fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

/// An `INTS` attribute.
pub fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// A `FLOAT` attribute.
pub fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::FLOAT,
        f: v,
        ..Default::default()
    }
}

/// The bytes of a model of `graph` importing the default opset 17 and `com.microsoft` 1.
pub fn contrib_model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![
            OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            },
            OperatorSetIdProto {
                domain: "com.microsoft".into(),
                version: 1,
            },
        ],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

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
