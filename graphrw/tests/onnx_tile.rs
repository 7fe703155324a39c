//! ONNX `Tile` that repeats only dims of size 1 reads as `expand`: it is how the
//! TorchScript exporter writes `repeat_interleave(k, r, dim=1)` (unsqueeze, tile,
//! flatten), and the kv heads it repeats in front of attention are then absorbed into
//! `enable_gqa` like transformers' `repeat_kv`, at symbolic batch and cache length. A
//! `Tile` of any other dim stays opaque, as before.

use graphrw::exec::{default_stack, plan, run_reference};
use graphrw::onnx::proto::{
    AttributeProto, Dimension, DimensionValue, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};
use graphrw::{onnx, rules, verify, Graph, Tensor};
use graphrw_kernels::testing::compare::{assert_close_tensor, Tol};
use prost::Message;

mod onnx_support;
use onnx_support::node;

/// An f32 value whose dims are sizes or, written as names, symbols.
fn value(name: &str, dims: &[&str]) -> ValueInfoProto {
    let dim = |d: &&str| Dimension {
        value: Some(match d.parse::<i64>() {
            Ok(n) => DimensionValue::DimValue(n),
            Err(_) => DimensionValue::DimParam(d.to_string()),
        }),
        denotation: String::new(),
    };
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(dim).collect(),
                }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
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

fn ints(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![v.len() as i64],
        data_type: 7,
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn scalar(name: &str, v: f32) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: 1,
        float_data: vec![v],
        ..Default::default()
    }
}

fn load(graph: GraphProto) -> Graph {
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    };
    onnx::load_bytes(&m.encode_to_vec()).expect("loads")
}

/// 4 query heads over 2 kv heads of 16, `b`, `s` and `t` symbolic: k and v repeated by
/// `repeat_interleave(x, 2, dim=1)` as TorchScript writes it, then
/// `softmax(q kᵀ · 0.25) v`.
fn decoder_attention() -> Graph {
    let mut nodes: Vec<NodeProto> = Vec::new();
    for x in ["k", "v"] {
        let (u, t, r) = (format!("{x}_u"), format!("{x}_t"), format!("{x}_r"));
        nodes.push(node("Unsqueeze", &[x, "axes"], &[&u]));
        nodes.push(node("Tile", &[&u, "repeats"], &[&t]));
        // flatten(tiled, 1, 2): the target from the tiled value's shape, as
        // TorchScript's flatten writes it at dynamic shapes.
        let (sh, lead, tail, flat) = (
            format!("{x}_shape"),
            format!("{x}_lead"),
            format!("{x}_tail"),
            format!("{x}_flat"),
        );
        nodes.push(node("Shape", &[&t], &[&sh]));
        nodes.push(node("Slice", &[&sh, "zero", "one"], &[&lead]));
        nodes.push(node("Slice", &[&sh, "three", "five"], &[&tail]));
        let mut cat = node("Concat", &[&lead, "minus_one", &tail], &[&flat]);
        cat.attribute = vec![int_attr("axis", 0)];
        nodes.push(cat);
        nodes.push(node("Reshape", &[&t, &flat], &[&r]));
    }
    let mut kt = node("Transpose", &["k_r"], &["kt"]);
    kt.attribute = vec![AttributeProto {
        name: "perm".into(),
        r#type: 7,
        ints: vec![0, 1, 3, 2],
        ..Default::default()
    }];
    nodes.extend([
        kt,
        node("MatMul", &["q", "kt"], &["scores"]),
        node("Mul", &["scores", "scale"], &["scaled"]),
        node("Softmax", &["scaled"], &["p"]),
        node("MatMul", &["p", "v_r"], &["y"]),
    ]);
    load(GraphProto {
        node: nodes,
        input: vec![
            value("q", &["b", "4", "s", "16"]),
            value("k", &["b", "2", "t", "16"]),
            value("v", &["b", "2", "t", "16"]),
        ],
        output: vec![value("y", &["b", "4", "s", "16"])],
        initializer: vec![
            ints("axes", &[2]),
            ints("repeats", &[1, 1, 2, 1, 1]),
            ints("zero", &[0]),
            ints("one", &[1]),
            ints("three", &[3]),
            ints("five", &[5]),
            ints("minus_one", &[-1]),
            scalar("scale", 0.25),
        ],
        ..Default::default()
    })
}

fn data(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 250.0 - 2.0)
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("data")
}

#[test]
fn tile_of_unit_dims_is_an_expand_and_torchscript_repeat_interleave_becomes_enable_gqa() {
    let before = decoder_attention();
    assert_eq!(before.nodes_with_op("opaque").count(), 0, "{before}");
    assert_eq!(before.nodes_with_op("expand").count(), 2, "{before}");
    let mut g = decoder_attention();
    rules::optimize(&mut g).expect("optimize");
    verify(&g).expect("verified");
    assert_eq!(g.nodes_with_op("expand").count(), 0, "{g}");
    let sdpa: Vec<_> = g.nodes_with_op("scaled_dot_product_attention").collect();
    assert_eq!(sdpa.len(), 1, "{g}");
    let node = g.node(sdpa[0]).expect("node");
    assert!(node.attrs().bool("enable_gqa").expect("attr"), "{g}");
    let k = g.meta(node.operands()[1]).expect("k");
    assert_eq!(k.shape.dims()[1].known(), Some(2), "{g}");
    let p = plan(&g, &default_stack()).expect("plan");
    for (b, s, t) in [(2usize, 3usize, 8usize), (1, 1, 10)] {
        let x = vec![
            data(&[b, 4, s, 16], 1),
            data(&[b, 2, t, 16], 2),
            data(&[b, 2, t, 16], 3),
        ];
        let want = run_reference(&before, &x).expect("before");
        let got = p.run(&x).expect("run").0;
        assert_close_tensor(
            &got[0],
            &want[0],
            Tol::new(1e-5, 1e-5),
            &format!("b {b}, s {s}, t {t}"),
        );
    }
}

#[test]
fn tile_of_a_dim_other_than_one_stays_opaque() {
    let g = load(GraphProto {
        node: vec![node("Tile", &["x", "repeats"], &["y"])],
        input: vec![value("x", &["2", "3"])],
        output: vec![value("y", &["2", "6"])],
        initializer: vec![ints("repeats", &[1, 2])],
        ..Default::default()
    });
    assert_eq!(g.nodes_with_op("opaque").count(), 1, "{g}");
    assert_eq!(g.nodes_with_op("expand").count(), 0, "{g}");
}
