//! A node of an op graphrw knows that breaks the ONNX spec is refused at load with one
//! line naming the node, the op and what is wrong (`OnnxError::Malformed`); a valid form
//! graphrw does not read, and an op it does not know, pass through as opaque nodes.
//! One case of each kind of `graphrw/src/onnx/MALFORMED.md`.

use graphrw::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TypeProto,
    TypeProtoTensor, ValueInfoProto,
};
use graphrw::onnx::{self, OnnxError};
use prost::Message;

mod onnx_support;
use onnx_support::{f32_value, named_node as node};

const INT: i32 = 2;
const STRING: i32 = 3;

fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: INT,
        i,
        ..Default::default()
    }
}

fn attr_str(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: STRING,
        s: s.as_bytes().to_vec(),
        ..Default::default()
    }
}

fn i64_init(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 7,
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

fn f32_init(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        float_data: values.to_vec(),
        ..Default::default()
    }
}

/// A model at `opset` of `nodes` over the f32 inputs `x` (shape `x`) and, when given,
/// `x2` (shape `x2`), its output `y`.
fn model_at(
    opset: i64,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: 10,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: inits,
            input: inputs,
            output: vec![ValueInfoProto {
                name: "y".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// One node over `x` of shape `dims`, at opset 18.
fn model(n: NodeProto, inits: Vec<TensorProto>, dims: &[i64]) -> Vec<u8> {
    model_at(18, vec![n], inits, vec![f32_value("x", dims)])
}

/// Loads `bytes`; expects a malformed-node refusal whose one line is short and names
/// the node, the op and each needle.
fn malformed(case: &str, bytes: &[u8], node: &str, op: &str, needles: &[&str]) {
    let e = match std::panic::catch_unwind(|| onnx::load_bytes(bytes)) {
        Err(_) => panic!("{case}: the loader panicked"),
        Ok(Ok(g)) => panic!("{case}: loaded, expected a refusal:\n{g}"),
        Ok(Err(e)) => e,
    };
    let msg = e.to_string();
    assert!(
        matches!(e, OnnxError::Malformed { .. }),
        "{case}: not a malformed-node error: {msg}"
    );
    assert_eq!(msg.lines().count(), 1, "{case}: {msg}");
    assert!(msg.chars().count() <= 200, "{case}: {msg}");
    assert!(
        msg.starts_with(&format!("malformed {op} node {node}: ")),
        "{case}: {msg}"
    );
    for n in needles {
        assert!(msg.contains(n), "{case}: `{msg}` lacks `{n}`");
    }
}

/// Loads `bytes`; expects the node `name` to pass through as an opaque node of `op`.
fn opaque(case: &str, bytes: &[u8], op: &str) -> String {
    let g = onnx::load_bytes(bytes).unwrap_or_else(|e| panic!("{case}: {e}"));
    let text = g.to_string();
    assert!(
        text.contains("opaque(") && text.contains(&format!("op_type=\"{op}\"")),
        "{case}: not opaque:\n{text}"
    );
    text
}

#[test]
fn an_attribute_of_the_wrong_kind_is_malformed() {
    let bytes = model(
        node("Softmax", "sm", &["x"], vec![attr_str("axis", "1")]),
        vec![],
        &[2, 3],
    );
    malformed(
        "string axis",
        &bytes,
        "sm",
        "Softmax",
        &["`axis`", "an int"],
    );
    // Before opset 13 (the special case) too.
    let old = model_at(
        11,
        vec![node("Softmax", "sm", &["x"], vec![attr_str("axis", "1")])],
        vec![],
        vec![f32_value("x", &[2, 3])],
    );
    malformed("string axis, opset 11", &old, "sm", "Softmax", &["`axis`"]);
}

#[test]
fn an_undefined_element_type_is_malformed_and_an_unsupported_one_opaque() {
    let cast = |to| {
        model(
            node("Cast", "c", &["x"], vec![attr_int("to", to)]),
            vec![],
            &[2],
        )
    };
    malformed("cast to 99", &cast(99), "c", "Cast", &["`to`", "99"]);
    malformed("cast to UNDEFINED", &cast(0), "c", "Cast", &["`to`"]);
    // STRING is an ONNX type graphrw has no dtype for: valid, carried as is.
    opaque("cast to STRING", &cast(8), "Cast");
}

#[test]
fn a_graph_input_of_undefined_element_type_is_refused() {
    for (code, needle) in [(0, "UNDEFINED"), (99, "99")] {
        let x = ValueInfoProto {
            name: "x".into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor {
                    elem_type: code,
                    shape: None,
                }),
                ..Default::default()
            }),
            doc_string: String::new(),
        };
        let bytes = model_at(18, vec![node("Relu", "r", &["x"], vec![])], vec![], vec![x]);
        let e = onnx::load_bytes(&bytes).expect_err("an undefined element type");
        let msg = e.to_string();
        assert!(matches!(e, OnnxError::Input { .. }), "{msg}");
        assert!(
            msg.contains("graph input `x`") && msg.contains(needle),
            "{msg}"
        );
    }
}

#[test]
fn input_counts_and_required_arguments() {
    let relu = model(node("Relu", "r", &["x", "x"], vec![]), vec![], &[2]);
    malformed(
        "relu of two",
        &relu,
        "r",
        "Relu",
        &["takes 1 inputs, found 2"],
    );
    let concat = model(node("Concat", "cat", &["x", "x"], vec![]), vec![], &[2]);
    malformed(
        "concat without axis",
        &concat,
        "cat",
        "Concat",
        &["`axis`", "required"],
    );
    let reshape = model(node("Reshape", "rs", &["x"], vec![]), vec![], &[2]);
    malformed(
        "reshape of one",
        &reshape,
        "rs",
        "Reshape",
        &["takes 2 inputs"],
    );
    let constant = model_at(18, vec![node("Constant", "k", &[], vec![])], vec![], vec![]);
    malformed(
        "constant without value",
        &constant,
        "k",
        "Constant",
        &["no value"],
    );
}

#[test]
fn out_of_range_axes_are_malformed() {
    let unsq = model(
        node("Unsqueeze", "u", &["x", "axes"], vec![]),
        vec![i64_init("axes", &[1], &[5])],
        &[2, 3],
    );
    malformed(
        "unsqueeze axis 5",
        &unsq,
        "u",
        "Unsqueeze",
        &["axis 5", "out of range"],
    );
    let flat = model(
        node("Flatten", "f", &["x"], vec![attr_int("axis", 4)]),
        vec![],
        &[2],
    );
    malformed("flatten axis 4", &flat, "f", "Flatten", &["axis 4"]);
    let squeeze = model(
        node("Squeeze", "sq", &["x", "axes"], vec![]),
        vec![i64_init("axes", &[1], &[-3])],
        &[1, 2],
    );
    malformed("squeeze axis -3", &squeeze, "sq", "Squeeze", &["axis -3"]);
    let split = model(
        node("Split", "sp", &["x", "s"], vec![attr_int("axis", 0)]),
        vec![i64_init("s", &[1], &[3])],
        &[4],
    );
    malformed(
        "split of 3 from 4",
        &split,
        "sp",
        "Split",
        &["do not add up"],
    );
}

#[test]
fn zero_steps_and_negative_sizes_are_malformed_negative_steps_opaque() {
    let slice = |step| {
        model(
            node("Slice", "sl", &["x", "b", "e", "a", "s"], vec![]),
            vec![
                i64_init("b", &[1], &[0]),
                i64_init("e", &[1], &[4]),
                i64_init("a", &[1], &[0]),
                i64_init("s", &[1], &[step]),
            ],
            &[4],
        )
    };
    malformed("slice step 0", &slice(0), "sl", "Slice", &["step 0"]);
    opaque("slice step -1", &slice(-1), "Slice");
    let expand = model(
        node("Expand", "ex", &["x", "shape"], vec![]),
        vec![i64_init("shape", &[2], &[-2, 4])],
        &[1, 4],
    );
    malformed(
        "expand to -2",
        &expand,
        "ex",
        "Expand",
        &["negative size -2"],
    );
    let conv = model(
        node("Conv", "cv", &["x", "w"], vec![attr_int("group", 0)]),
        vec![f32_init("w", &[1, 1, 1, 1], &[1.0])],
        &[1, 1, 2, 2],
    );
    malformed("conv group 0", &conv, "cv", "Conv", &["group 0"]);
}

#[test]
fn impossible_equations_are_malformed_unlowered_ones_opaque() {
    let einsum = |eq: &str, inputs: &[&str]| {
        model_at(
            18,
            vec![node("Einsum", "es", inputs, vec![attr_str("equation", eq)])],
            vec![],
            vec![f32_value("x", &[2, 3]), f32_value("x2", &[3, 4])],
        )
    };
    malformed(
        "letter in no operand",
        &einsum("ij,jk->iz", &["x", "x2"]),
        "es",
        "Einsum",
        &["`z`"],
    );
    malformed(
        "a term too few",
        &einsum("ij->i", &["x", "x2"]),
        "es",
        "Einsum",
        &["1 operand terms for 2 inputs"],
    );
    malformed(
        "ranks",
        &einsum("ijk,jk->ik", &["x", "x2"]),
        "es",
        "Einsum",
        &["do not fit ranks"],
    );
    // Valid but not a batched matrix product: carried as is.
    opaque("implicit mode", &einsum("ij,jk", &["x", "x2"]), "Einsum");
    // A letter summed out of one operand alone (`k`): not a matrix product. (The
    // batched outer product `ij,jk->ijk` is one over a contracted dim of 1, lowered.)
    opaque("one-sided sum", &einsum("ij,jk->i", &["x", "x2"]), "Einsum");
}

#[test]
fn shapes_that_contradict_the_spec_are_malformed() {
    let gemm = model_at(
        18,
        vec![node("Gemm", "gm", &["x", "x2"], vec![])],
        vec![],
        vec![f32_value("x", &[1, 2, 3]), f32_value("x2", &[3, 4])],
    );
    malformed("gemm of 3-D", &gemm, "gm", "Gemm", &["A must be 2-D"]);
    let clip = model(
        node("Clip", "cl", &["x", "lo"], vec![]),
        vec![f32_init("lo", &[2], &[0.0, 1.0])],
        &[2],
    );
    malformed(
        "clip of two bounds",
        &clip,
        "cl",
        "Clip",
        &["min must be a scalar"],
    );
    let range = model_at(
        18,
        vec![node("Range", "rg", &["a", "b"], vec![])],
        vec![i64_init("a", &[], &[0]), i64_init("b", &[], &[4])],
        vec![],
    );
    malformed(
        "range of two",
        &range,
        "rg",
        "Range",
        &["input 2 (delta) is required"],
    );
}

#[test]
fn value_errors_caught_by_inference_are_refused_too() {
    // A zero delta and a negative ConstantOfShape size: inference refuses them.
    let range = model_at(
        18,
        vec![node("Range", "rg", &["a", "b", "d"], vec![])],
        vec![
            i64_init("a", &[], &[0]),
            i64_init("b", &[], &[4]),
            i64_init("d", &[], &[0]),
        ],
        vec![],
    );
    let e = onnx::load_bytes(&range).expect_err("delta 0");
    assert!(e.to_string().contains("rg"), "{e}");
    let cos = model_at(
        18,
        vec![node("ConstantOfShape", "cs", &["s"], vec![])],
        vec![i64_init("s", &[2], &[2, -1])],
        vec![],
    );
    let e = onnx::load_bytes(&cos).expect_err("size -1");
    assert!(e.to_string().contains("cs"), "{e}");
}

#[test]
fn unknown_ops_and_unsupported_forms_pass_through_with_unknown_metadata() {
    let unknown = model(node("FooBar", "fb", &["x"], vec![]), vec![], &[2]);
    let text = opaque("unknown op", &unknown, "FooBar");
    // No declared type for `y`: its metadata is unknown, not invented.
    assert!(text.contains("# ?"), "{text}");
    let cumsum = model(
        node("CumSum", "cs", &["x", "ax"], vec![attr_int("exclusive", 1)]),
        vec![i64_init("ax", &[], &[0])],
        &[3],
    );
    opaque("cumsum exclusive", &cumsum, "CumSum");
    let gelu = model(
        node("Gelu", "ge", &["x"], vec![attr_str("approximate", "erf")]),
        vec![],
        &[3],
    );
    opaque("gelu approximate erf", &gelu, "Gelu");
}
