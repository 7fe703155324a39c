//! ONNX ops that load as vocabulary ops rather than opaque nodes (issue #53, item 4):
//! `ReduceLogSumExp` (opset 17 with `axes` as an attribute, 18 with them as an input;
//! with and without `keepdims`, no axes, `noop_with_empty_axes`), constant `Pad` (before
//! and after opset 11, with `axes`, with a fill value) and `Einsum` outer products.
//! Each one-node model loads with no opaque node, and its reference run, the saved
//! model's run and, where onnxruntime is installed (`SKIPPED` without it), onnxruntime
//! on the original and on the saved model all agree.

mod onnx_support;
mod ort_support;

use graphrw::exec::run_reference;
use graphrw::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TypeProto,
    TypeProtoTensor, ValueInfoProto,
};
use graphrw::onnx::{load_bytes, to_bytes};
use graphrw::Tensor;
use onnx_support::f32_value;
use prost::Message;

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 7,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 2,
        i,
        ..Default::default()
    }
}

fn float(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 1,
        f,
        ..Default::default()
    }
}

fn string(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 3,
        s: s.as_bytes().to_vec(),
        ..Default::default()
    }
}

fn i64_init(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![v.len() as i64],
        data_type: 7,
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn f32_scalar(name: &str, v: f32) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: 1,
        float_data: vec![v],
        ..Default::default()
    }
}

/// `y`, f32 of any shape.
fn output() -> ValueInfoProto {
    ValueInfoProto {
        name: "y".into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
                shape: None,
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

/// One case: a one-node model over f32 inputs of `shapes`.
struct Case {
    name: &'static str,
    opset: i64,
    node: NodeProto,
    shapes: Vec<Vec<i64>>,
    inits: Vec<TensorProto>,
}

fn op(op_type: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op_type.into(),
        name: format!("the_{}", op_type.to_lowercase()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec!["y".into()],
        attribute: attrs,
        ..Default::default()
    }
}

impl Case {
    fn model(&self) -> Vec<u8> {
        let names = ["x", "z"];
        let m = ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: self.opset,
            }],
            graph: Some(GraphProto {
                name: self.name.into(),
                node: vec![self.node.clone()],
                input: self
                    .shapes
                    .iter()
                    .zip(names)
                    .map(|(s, n)| f32_value(n, s))
                    .collect(),
                output: vec![output()],
                initializer: self.inits.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        m.encode_to_vec()
    }

    fn inputs(&self) -> Vec<Tensor> {
        self.shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let shape: Vec<usize> = s.iter().map(|&d| d as usize).collect();
                let n: usize = shape.iter().product();
                let v: Vec<f32> = (0..n)
                    .map(|i| ((i * 7 + k * 3) % 11) as f32 * 0.37 - 1.5)
                    .collect();
                Tensor::from_vec(shape, v).expect("tensor")
            })
            .collect()
    }
}

fn cases() -> Vec<Case> {
    let x = vec![vec![2, 3, 4]];
    let lse = |attrs, inputs: &[&str]| op("ReduceLogSumExp", inputs, attrs);
    vec![
        Case {
            name: "logsumexp keepdims, axes attribute",
            opset: 17,
            node: lse(vec![ints("axes", &[-1]), int("keepdims", 1)], &["x"]),
            shapes: x.clone(),
            inits: vec![],
        },
        Case {
            name: "logsumexp without keepdims",
            opset: 17,
            node: lse(vec![ints("axes", &[1]), int("keepdims", 0)], &["x"]),
            shapes: x.clone(),
            inits: vec![],
        },
        Case {
            name: "logsumexp over two axes given as an input",
            opset: 18,
            node: lse(vec![int("keepdims", 0)], &["x", "axes"]),
            shapes: x.clone(),
            inits: vec![i64_init("axes", &[2, 0])],
        },
        Case {
            name: "logsumexp over every axis",
            opset: 18,
            node: lse(vec![], &["x"]),
            shapes: x.clone(),
            inits: vec![],
        },
        Case {
            name: "logsumexp with no axes as a no-op",
            opset: 18,
            node: lse(vec![int("noop_with_empty_axes", 1)], &["x"]),
            shapes: x.clone(),
            inits: vec![],
        },
        Case {
            name: "pad with a fill value",
            opset: 18,
            node: op("Pad", &["x", "pads", "value"], vec![]),
            shapes: x.clone(),
            inits: vec![
                i64_init("pads", &[0, 0, 1, 0, 2, 0]),
                f32_scalar("value", 1.5),
            ],
        },
        Case {
            name: "pad of the last axis only",
            opset: 18,
            node: op("Pad", &["x", "pads", "", "axes"], vec![]),
            shapes: x.clone(),
            inits: vec![i64_init("pads", &[1, 0]), i64_init("axes", &[-1])],
        },
        Case {
            name: "pad before opset 11",
            opset: 9,
            node: op(
                "Pad",
                &["x"],
                vec![
                    ints("pads", &[1, 0, 0, 0, 1, 2]),
                    float("value", -2.0),
                    string("mode", "constant"),
                ],
            ),
            shapes: x.clone(),
            inits: vec![],
        },
        Case {
            name: "einsum outer product",
            opset: 17,
            node: op("Einsum", &["x", "z"], vec![string("equation", "i,j->ij")]),
            shapes: vec![vec![3], vec![4]],
            inits: vec![],
        },
        Case {
            name: "einsum batched outer product, transposed",
            opset: 17,
            node: op(
                "Einsum",
                &["x", "z"],
                vec![string("equation", "bi,bj->jbi")],
            ),
            shapes: vec![vec![2, 3], vec![2, 4]],
            inits: vec![],
        },
    ]
}

#[test]
fn lowered_ops_load_without_opaque_nodes_and_match_onnxruntime() {
    let cases = cases();
    let mut ort_cases = Vec::new();
    let mut expected = Vec::new();
    for c in &cases {
        let g = load_bytes(&c.model()).unwrap_or_else(|e| panic!("{}: load: {e}", c.name));
        assert_eq!(
            g.op_counts().get("opaque"),
            None,
            "{}: loads as vocabulary ops:\n{g}",
            c.name
        );
        let got = run_reference(&g, &c.inputs()).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let saved = to_bytes(&g).unwrap_or_else(|e| panic!("{}: save: {e}", c.name));
        let back = load_bytes(&saved).unwrap_or_else(|e| panic!("{}: load back: {e}", c.name));
        let again = run_reference(&back, &c.inputs()).expect("runs");
        ort_support::same_all(&again, &got).unwrap_or_else(|e| panic!("{}: saved: {e}", c.name));
        for (what, model) in [("original", c.model()), ("saved", saved)] {
            ort_cases.push(ort_support::Case {
                name: format!("{} ({what})", c.name),
                model,
                inputs: c.inputs(),
            });
            expected.push(got.clone());
        }
    }
    let Some(python) = ort_support::python_or_skip("the lowered ops are not run in onnxruntime")
    else {
        return;
    };
    for ((c, want), got) in ort_cases
        .iter()
        .zip(&expected)
        .zip(ort_support::run_all(&python, &ort_cases))
    {
        if let Err(e) = got.and_then(|g| ort_support::same_all(&g, want)) {
            panic!("{}: onnxruntime: {e}", c.name);
        }
    }
}
