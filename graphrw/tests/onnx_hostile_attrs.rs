//! Attributes that cannot hold for their operands are refused at load, by inference,
//! with one short line naming the node, the op and what was wrong: an axis beyond the
//! rank, a constant index beyond its dim, a GELU form that does not exist. The same
//! checks apply to graphs built in Rust.

use graphrw::onnx;
use graphrw::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto,
};
use graphrw::ops::{self, AttrValue};
use graphrw::{Builder, DType, Tensor, TensorMeta};
use prost::Message;

mod onnx_support;
use onnx_support::{f32_value as f32_input, named_node as node};

fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        ..Default::default()
    }
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 2,
        i,
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

fn model(n: NodeProto, inits: Vec<TensorProto>, x: &[i64]) -> Vec<u8> {
    ModelProto {
        ir_version: 10,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 18,
        }],
        graph: Some(GraphProto {
            node: vec![n],
            initializer: inits,
            input: vec![f32_input("x", x)],
            output: vec![output("y")],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Loads `bytes`, expects an error whose first line is short and holds every needle.
fn refused(case: &str, bytes: &[u8], needles: &[&str]) -> String {
    let msg = match std::panic::catch_unwind(|| onnx::load_bytes(bytes)) {
        Err(_) => panic!("{case}: the loader panicked"),
        Ok(Ok(g)) => panic!("{case}: loaded, expected a refusal:\n{g}"),
        Ok(Err(e)) => e.to_string(),
    };
    let first = msg.lines().next().unwrap_or("");
    assert!(
        first.chars().count() <= 200,
        "{case}: first line of {} chars: {first}",
        first.chars().count()
    );
    for n in needles {
        assert!(msg.contains(n), "{case}: `{msg}` lacks `{n}`");
    }
    msg
}

#[test]
fn softmax_axis_beyond_the_rank_is_refused_at_load() {
    let bytes = model(
        node("Softmax", "sm", &["x"], vec![int_attr("axis", 7)]),
        vec![],
        &[1, 2, 3, 4],
    );
    refused("softmax axis 7", &bytes, &["sm", "softmax", "7", "rank 4"]);
    // In range, positive and negative: loads.
    for axis in [3, -4] {
        let ok = model(
            node("Softmax", "sm", &["x"], vec![int_attr("axis", axis)]),
            vec![],
            &[1, 2, 3, 4],
        );
        onnx::load_bytes(&ok).unwrap_or_else(|e| panic!("axis {axis}: {e}"));
    }
}

#[test]
fn constant_gather_index_beyond_the_dim_is_refused_at_load() {
    let bytes = model(
        node("Gather", "g0", &["x", "idx"], vec![int_attr("axis", 1)]),
        vec![i64_init("idx", &[2], &[0, 1000])],
        &[3, 4],
    );
    refused(
        "gather index 1000",
        &bytes,
        &["g0", "gather", "1000", "-4..4"],
    );
    let negative = model(
        node("Gather", "g0", &["x", "idx"], vec![int_attr("axis", 0)]),
        vec![i64_init("idx", &[1], &[-4])],
        &[3, 4],
    );
    refused("gather index -4 on 3", &negative, &["g0", "-4", "-3..3"]);
    // Negative indices within range load (they count from the end).
    let ok = model(
        node("Gather", "g0", &["x", "idx"], vec![int_attr("axis", 1)]),
        vec![i64_init("idx", &[3], &[-4, 0, 3])],
        &[3, 4],
    );
    onnx::load_bytes(&ok).expect("indices within -4..4 load");
}

#[test]
fn constant_gather_elements_index_and_its_shape_are_checked() {
    let bytes = model(
        node(
            "GatherElements",
            "ge",
            &["x", "idx"],
            vec![int_attr("axis", 1)],
        ),
        vec![i64_init("idx", &[2, 2], &[0, 1, 2, 9])],
        &[2, 3],
    );
    refused("gather_elements index 9", &bytes, &["ge", "9", "-3..3"]);
    let too_big = model(
        node(
            "GatherElements",
            "ge",
            &["x", "idx"],
            vec![int_attr("axis", 1)],
        ),
        vec![i64_init("idx", &[5, 1], &[0, 0, 0, 0, 0])],
        &[2, 3],
    );
    refused(
        "gather_elements index too large",
        &too_big,
        &["ge", "5 > 2"],
    );
}

#[test]
fn built_graphs_get_the_same_checks() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 4]));
    let err = b.softmax(x.value(), 2).unwrap_err().to_string();
    assert!(err.contains("softmax dim 2 is out of range"), "{err}");
    let err = b
        .apply(
            ops::lookup("cumsum").expect("cumsum"),
            &[x.value()],
            &[("dim", AttrValue::Int(-3))],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("cumsum dim -3"), "{err}");
    let err = b.gelu_with(x.value(), "quadratic").unwrap_err().to_string();
    assert!(err.contains("\"quadratic\""), "{err}");
    let idx = b.constant(Tensor::from_vec(vec![2], vec![1i64, 4]).expect("index"));
    let err = b
        .apply(
            ops::lookup("index_select").expect("index_select"),
            &[x.value(), idx.value()],
            &[("dim", AttrValue::Int(1))],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("constant index 4 (element 1)"), "{err}");
    assert!(err.contains("0..4"), "{err}");
    // Within range: accepted.
    let idx = b.constant(Tensor::from_vec(vec![2], vec![0i64, 3]).expect("index"));
    b.apply(
        ops::lookup("index_select").expect("index_select"),
        &[x.value(), idx.value()],
        &[("dim", AttrValue::Int(1))],
    )
    .expect("indices 0 and 3 of 4");
    b.softmax(x.value(), -2).expect("softmax dim -2 of rank 2");
}
