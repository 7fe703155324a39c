//! Models as they come: ONNX ops graphrw does not model load as `opaque` nodes, print,
//! save back with their attributes byte for byte, and refuse to run naming the op;
//! older opsets read with each op's meaning at its version; hostile files refused in
//! one short line.

use graphrw::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto,
};
use graphrw::onnx::{self, OnnxError};
use graphrw::{Graph, Tensor};
use prost::Message;

mod onnx_support;
use onnx_support::{f32_value, node};

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 2,
        i,
        ..Default::default()
    }
}

/// `mode = "reflect"`: a `Pad` graphrw does not lower, so it stays opaque.
fn reflect() -> AttributeProto {
    AttributeProto {
        name: "mode".into(),
        r#type: 3,
        s: b"reflect".to_vec(),
        ..Default::default()
    }
}

fn ints_attr(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 7,
        ints: ints.to_vec(),
        ..Default::default()
    }
}

fn model(opset: i64, graph: GraphProto, extra: &[(&str, i64)]) -> ModelProto {
    let mut opset_import = vec![OperatorSetIdProto {
        domain: String::new(),
        version: opset,
    }];
    for (d, v) in extra {
        opset_import.push(OperatorSetIdProto {
            domain: d.to_string(),
            version: *v,
        });
    }
    ModelProto {
        ir_version: 8,
        opset_import,
        graph: Some(graph),
        ..Default::default()
    }
}

fn load(m: &ModelProto) -> Result<Graph, OnnxError> {
    onnx::load_bytes(&m.encode_to_vec())
}

/// A custom-domain op with int, float list, string and subgraph attributes between two
/// known ops; `typed` gives its output a `value_info`.
fn custom_op_model(typed: bool) -> ModelProto {
    let mut custom = node("Foo", &["r"], &["f"]);
    custom.domain = "com.example".into();
    custom.attribute = vec![
        int_attr("count", 3),
        AttributeProto {
            name: "weights".into(),
            r#type: 6,
            floats: vec![0.5, -1.25],
            ..Default::default()
        },
        AttributeProto {
            name: "mode".into(),
            r#type: 3,
            s: b"fast".to_vec(),
            ..Default::default()
        },
        AttributeProto {
            name: "body".into(),
            r#type: 5,
            g: Some(Box::new(GraphProto {
                node: vec![node("Relu", &["x"], &["inner"])],
                output: vec![f32_value("inner", &[2, 3])],
                ..Default::default()
            })),
            ..Default::default()
        },
    ];
    model(
        17,
        GraphProto {
            node: vec![
                node("Relu", &["x"], &["r"]),
                custom,
                node("Neg", &["f"], &["y"]),
            ],
            input: vec![f32_value("x", &[2, 3])],
            output: vec![f32_value("y", &[2, 3])],
            value_info: if typed {
                vec![f32_value("f", &[2, 3])]
            } else {
                vec![]
            },
            ..Default::default()
        },
        &[("com.example", 2)],
    )
}

#[test]
fn unknown_op_loads_prints_and_saves_back_byte_for_byte() {
    let m = custom_op_model(true);
    let g = load(&m).expect("a model with an unknown op loads");
    assert_eq!(g.op_counts().get("opaque"), Some(&1));
    // The op after it reads known metadata, so it is mapped as usual.
    assert_eq!(g.op_counts().get("neg"), Some(&1));
    let text = g.to_string();
    assert!(text.contains(r#"opaque("#), "{text}");
    assert!(text.contains(r#"op_type="Foo""#), "{text}");
    assert!(text.contains(r#"domain="com.example""#), "{text}");

    let saved = onnx::to_model(&g).expect("save");
    let out = saved.graph.as_ref().expect("graph");
    let custom = out
        .node
        .iter()
        .find(|n| n.op_type == "Foo")
        .expect("Foo written back");
    let original = &m.graph.as_ref().expect("graph").node[1];
    assert_eq!(custom.domain, "com.example");
    let bytes =
        |n: &NodeProto| -> Vec<Vec<u8>> { n.attribute.iter().map(|a| a.encode_to_vec()).collect() };
    assert_eq!(bytes(custom), bytes(original), "attributes byte for byte");
    assert!(saved
        .opset_import
        .iter()
        .any(|o| o.domain == "com.example" && o.version == 2));
    // And it loads again to the same program.
    let again = onnx::load_bytes(&saved.encode_to_vec()).expect("reload");
    assert_eq!(again.to_string(), text);
}

#[test]
fn unknown_metadata_is_printed_as_unknown_and_spreads_opacity_downstream() {
    let g = load(&custom_op_model(false)).expect("loads without value_info");
    let text = g.to_string();
    assert!(text.contains("# ?"), "{text}");
    // Neg reads a value of unknown shape: it stays opaque rather than guessing.
    assert_eq!(g.op_counts().get("opaque"), Some(&2), "{text}");
    assert!(text.contains(r#"op_type="Neg""#), "{text}");
    let saved = onnx::to_model(&g).expect("save");
    let out = saved.graph.expect("graph");
    assert_eq!(out.output.len(), 1);
    assert_eq!(out.output[0], f32_value("y", &[2, 3]), "output type kept");
    assert!(out.node.iter().any(|n| n.op_type == "Neg"));
}

#[test]
fn running_an_opaque_node_names_the_op() {
    let g = load(&custom_op_model(true)).expect("load");
    let x = Tensor::from_vec(vec![2, 3], vec![1.0f32; 6]).expect("tensor");
    let err = graphrw::exec::run_reference(&g, &[x])
        .expect_err("no kernel for Foo")
        .to_string();
    assert!(err.contains("no kernel for ONNX op `Foo`"), "{err}");
    assert!(err.contains("com.example"), "{err}");
}

#[test]
fn subgraph_reads_of_outer_values_are_kept() {
    // An If whose branches read `r`, an outer value.
    let branch = |op: &str| GraphProto {
        node: vec![node(op, &["r"], &["b"])],
        output: vec![f32_value("b", &[2, 3])],
        ..Default::default()
    };
    let mut iff = node("If", &["c"], &["y"]);
    iff.attribute = vec![
        AttributeProto {
            name: "then_branch".into(),
            r#type: 5,
            g: Some(Box::new(branch("Relu"))),
            ..Default::default()
        },
        AttributeProto {
            name: "else_branch".into(),
            r#type: 5,
            g: Some(Box::new(branch("Neg"))),
            ..Default::default()
        },
    ];
    let mut c = f32_value("c", &[]);
    if let Some(t) = c.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
        t.elem_type = 9;
    }
    let m = model(
        17,
        GraphProto {
            node: vec![node("Sigmoid", &["x"], &["r"]), iff],
            input: vec![f32_value("x", &[2, 3]), c],
            output: vec![f32_value("y", &[2, 3])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("load");
    let opaque = g.nodes_with_op("opaque").next().expect("If is opaque");
    // Its operands: the condition, then the captured outer value.
    assert_eq!(g.node(opaque).expect("node").operands().len(), 2);
    let saved = onnx::to_model(&g).expect("save");
    let out = saved.graph.expect("graph");
    // `r` is still defined under its name before the If reads it.
    let iff = out.node.iter().position(|n| n.op_type == "If").expect("If");
    assert!(
        out.node[..iff]
            .iter()
            .any(|n| n.output.contains(&"r".to_string())),
        "{:?}",
        out.node
    );
}

#[test]
fn old_opsets_read_each_op_at_its_version() {
    // Opset 11: Softmax flattens to 2-D from axis 1; Unsqueeze/Squeeze take attributes.
    let mut sm = node("Softmax", &["x"], &["s"]);
    sm.attribute = vec![int_attr("axis", 1)];
    let mut un = node("Unsqueeze", &["s"], &["u"]);
    un.attribute = vec![ints_attr("axes", &[0])];
    let mut sq = node("Squeeze", &["u"], &["y"]);
    sq.attribute = vec![ints_attr("axes", &[0])];
    let m = model(
        11,
        GraphProto {
            node: vec![sm, un, sq],
            input: vec![f32_value("x", &[2, 3, 5])],
            output: vec![f32_value("y", &[2, 3, 5])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("opset 11 loads");
    assert_eq!(g.op_counts().get("opaque"), None, "{g}");
    let data: Vec<f32> = (0..30).map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.0).collect();
    let x = Tensor::from_vec(vec![2, 3, 5], data.clone()).expect("tensor");
    let y = graphrw::exec::run_reference(&g, &[x]).expect("runs");
    let got = y[0].to_f64_vec();
    // Softmax-11 over axis 1 of [2, 3, 5]: each batch row of 15 values is one softmax.
    for b in 0..2 {
        let row = &data[b * 15..(b + 1) * 15];
        let max = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        for (i, &v) in row.iter().enumerate() {
            let want = (v as f64 - max).exp() / sum;
            assert!((got[b * 15 + i] - want).abs() < 1e-5, "{b} {i}");
        }
    }
    // Saved at graphrw's opset, read back to the same program.
    let again = onnx::load_bytes(&onnx::to_bytes(&g).expect("save")).expect("reload");
    assert_eq!(again.to_string(), g.to_string());
}

#[test]
fn old_opaque_ops_are_upgraded_or_refused_at_save_not_load() {
    // Pad-2 takes its pads as an attribute, Pad-11 as an input: upgraded on save. (In
    // `reflect` mode, which graphrw carries as an opaque node.)
    let mut pad = node("Pad", &["x"], &["y"]);
    pad.attribute = vec![ints_attr("pads", &[0, 1, 0, 1]), reflect()];
    let m = model(
        9,
        GraphProto {
            node: vec![pad],
            input: vec![f32_value("x", &[2, 3])],
            output: vec![f32_value("y", &[2, 5])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads (Pad is opaque)");
    assert_eq!(g.op_counts().get("opaque"), Some(&1));
    let saved = onnx::to_model(&g).expect("Pad-2 upgrades");
    let out = saved.graph.expect("graph");
    let pad = out.node.iter().find(|n| n.op_type == "Pad").expect("Pad");
    assert!(pad.attribute.iter().all(|a| a.name != "pads"), "{pad:?}");
    let pads = out
        .initializer
        .iter()
        .find(|t| pad.input.get(1) == Some(&t.name))
        .expect("pads initialiser");
    assert_eq!(pads.dims, vec![4]);

    // Upsample is gone by opset 10: refused when saving, with the way out.
    let mut up = node("Upsample", &["x"], &["y"]);
    up.attribute = vec![AttributeProto {
        name: "scales".into(),
        r#type: 6,
        floats: vec![1.0, 2.0],
        ..Default::default()
    }];
    let m = model(
        7,
        GraphProto {
            node: vec![up],
            input: vec![f32_value("x", &[2, 3])],
            output: vec![f32_value("y", &[2, 6])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads (Upsample is opaque)");
    let e = onnx::to_model(&g).expect_err("Upsample cannot be written at opset 18");
    assert!(e.to_string().contains("version_converter"), "{e}");
}

#[test]
fn split_1_upgrades_unless_its_sizes_are_an_input() {
    // Split-1 with one input splits equally, as Split-2 does: written at graphrw's
    // opset with `num_outputs` once (a fuzzer found a node that already had it), and
    // read back to the same program.
    let mut split = node("Split", &["x"], &["a", "b"]);
    split.attribute = vec![int_attr("axis", 1), int_attr("num_outputs", 2)];
    let m = model(
        1,
        GraphProto {
            node: vec![split],
            input: vec![f32_value("x", &[2, 4])],
            output: vec![f32_value("a", &[2, 2]), f32_value("b", &[2, 2])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads");
    let saved = onnx::to_model(&g).expect("Split-1 upgrades");
    let out = saved.graph.as_ref().expect("graph");
    let split = out
        .node
        .iter()
        .find(|n| n.op_type == "Split")
        .expect("Split");
    let counts = split
        .attribute
        .iter()
        .filter(|a| a.name == "num_outputs")
        .count();
    assert_eq!(counts, 1, "{split:?}");
    let again = onnx::load_bytes(&onnx::to_bytes(&g).expect("save")).expect("reload");
    graphrw::verify(&again).expect("reloaded graph verifies");

    // Split-1 given its sizes as a second input, computed at run time (a graph input):
    // carried as opaque, and Split-2 has no such input, so it is refused at save with
    // the way out. (Constant sizes that do not add up to the dim are malformed: see
    // `tests/onnx_malformed.rs`.)
    let mut split = node("Split", &["x", "sizes"], &["a", "b"]);
    split.attribute = vec![int_attr("axis", 1)];
    let mut sizes = f32_value("sizes", &[2]);
    if let Some(t) = sizes.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
        t.elem_type = 7;
    }
    let m = model(
        1,
        GraphProto {
            node: vec![split],
            input: vec![f32_value("x", &[2, 4]), sizes],
            output: vec![f32_value("a", &[2, 1]), f32_value("b", &[2, 3])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads");
    let e = onnx::to_model(&g).expect_err("sizes as an input cannot be written");
    assert!(e.to_string().contains("version_converter"), "{e}");
}

#[test]
fn an_old_op_with_an_input_its_opset_lacks_is_refused_not_upgraded_into_meaning() {
    // Unsqueeze-1 takes its axes as an attribute only. A node giving them as an input
    // (not valid at opset 9) must not become Unsqueeze-13 reading that input: the
    // saved model would mean something the input never did (a fuzzer found one whose
    // upgraded shape no longer fit the Expand after it).
    let un = node("Unsqueeze", &["x", "axes"], &["y"]);
    let m = model(
        9,
        GraphProto {
            node: vec![un],
            input: vec![f32_value("x", &[2, 4])],
            output: vec![f32_value("y", &[1, 2, 4])],
            initializer: vec![TensorProto {
                name: "axes".into(),
                dims: vec![1],
                data_type: 7,
                int64_data: vec![0],
                ..Default::default()
            }],
            ..Default::default()
        },
        &[],
    );
    // Such a node is malformed: refused at load, naming the node and the op.
    let e = load(&m).expect_err("Unsqueeze-9 takes one input");
    assert!(matches!(e, OnnxError::Malformed { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("Unsqueeze") && msg.contains("n_y") && msg.contains("takes 1"),
        "{msg}"
    );
}

#[test]
fn legacy_broadcast_reads_as_numpy_broadcast() {
    let mut add = node("Add", &["a", "b"], &["y"]);
    add.attribute = vec![int_attr("broadcast", 1), int_attr("axis", 1)];
    let m = model(
        6,
        GraphProto {
            node: vec![add],
            input: vec![f32_value("a", &[2, 3, 4]), f32_value("b", &[3])],
            output: vec![f32_value("y", &[2, 3, 4])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads");
    assert_eq!(g.op_counts().get("opaque"), None, "{g}");
    let a = Tensor::from_vec(vec![2, 3, 4], vec![0.0f32; 24]).expect("a");
    let b = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).expect("b");
    let y = graphrw::exec::run_reference(&g, &[a, b]).expect("runs")[0].to_f64_vec();
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, ((i / 4) % 3 + 1) as f64, "element {i}");
    }
}

#[test]
fn a_graph_without_outputs_is_refused() {
    let m = model(
        17,
        GraphProto {
            node: vec![node("Relu", &["x"], &["y"])],
            input: vec![f32_value("x", &[2])],
            ..Default::default()
        },
        &[],
    );
    let e = load(&m).expect_err("no outputs").to_string();
    assert!(e.contains("declares no outputs"), "{e}");
}

#[test]
fn deep_nesting_is_one_short_line_with_depth_and_limit() {
    let mut g = GraphProto::default();
    for _ in 0..3000 {
        let mut n = node("If", &[], &[]);
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
    // Encoding recurses too; give it a big stack.
    let bytes = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || model(17, g, &[]).encode_to_vec())
        .expect("thread")
        .join()
        .expect("encode");
    let e = onnx::load_bytes(&bytes).expect_err("too deep").to_string();
    let first = e.lines().next().unwrap_or("");
    assert!(first.len() <= 200, "{} chars: {first}", first.len());
    assert!(first.contains("3001 deep"), "{first}");
    assert!(first.contains("at most 33"), "{first}");
}

fn float_attr(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: 1,
        f,
        ..Default::default()
    }
}

/// Runs a one-node model on `x` (and `extra` inputs), before and after a save.
fn run_one(
    opset: i64,
    n: NodeProto,
    dims: &[i64],
    inputs: Vec<(ValueInfoProto, Tensor)>,
) -> Vec<f64> {
    let mut vis = Vec::new();
    let mut ts = Vec::new();
    for (vi, t) in inputs {
        vis.push(vi);
        ts.push(t);
    }
    let m = model(
        opset,
        GraphProto {
            node: vec![n],
            input: vis,
            output: vec![f32_value("y", dims)],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads");
    assert_eq!(g.op_counts().get("opaque"), None, "{g}");
    let y = graphrw::exec::run_reference(&g, &ts).expect("runs")[0].to_f64_vec();
    let again = onnx::load_bytes(&onnx::to_bytes(&g).expect("save")).expect("reload");
    let y2 = graphrw::exec::run_reference(&again, &ts).expect("runs again")[0].to_f64_vec();
    assert_eq!(y, y2, "saved model computes the same");
    y
}

#[test]
fn activations_match_a_plain_reference_on_many_shapes() {
    let shapes: &[&[i64]] = &[&[1], &[7], &[2, 3, 5], &[1, 1, 1], &[3, 1, 4]];
    for &dims in shapes {
        let n: usize = dims.iter().product::<i64>() as usize;
        let data: Vec<f32> = (0..n).map(|i| (i as f32 * 0.77).sin() * 3.0).collect();
        let x = || {
            Tensor::from_vec(dims.iter().map(|&d| d as usize).collect(), data.clone()).expect("x")
        };
        type Case = (&'static str, Vec<AttributeProto>, fn(f64) -> f64);
        let cases: Vec<Case> = vec![
            ("LeakyRelu", vec![float_attr("alpha", 0.2)], |v| {
                if v < 0.0 {
                    0.2 * v
                } else {
                    v
                }
            }),
            ("Elu", vec![float_attr("alpha", 0.5)], |v| {
                if v > 0.0 {
                    v
                } else {
                    0.5 * (v.exp() - 1.0)
                }
            }),
            ("Selu", vec![], |v| {
                1.050_701
                    * if v > 0.0 {
                        v
                    } else {
                        1.673_263_2 * (v.exp() - 1.0)
                    }
            }),
            ("Softplus", vec![], |v| (v.exp() + 1.0).ln()),
        ];
        for (op, attrs, f) in cases {
            let mut nd = node(op, &["x"], &["y"]);
            nd.attribute = attrs;
            let y = run_one(17, nd, dims, vec![(f32_value("x", dims), x())]);
            for (i, (&g, &v)) in y.iter().zip(&data).enumerate() {
                let want = f(v as f64);
                assert!(
                    (g - want).abs() < 1e-5 * (1.0 + want.abs()),
                    "{op} {dims:?} [{i}]: {g} vs {want}"
                );
            }
        }
    }
}

#[test]
fn prelu_slope_is_per_channel_before_opset_7_and_numpy_broadcast_after() {
    let dims = [2i64, 3, 5];
    let data: Vec<f32> = (0..30).map(|i| i as f32 - 15.0).collect();
    let x = Tensor::from_vec(vec![2, 3, 5], data.clone()).expect("x");
    // Opset 6: a slope of 3 values applies along dim 1.
    let slope = Tensor::from_vec(vec![3], vec![0.1f32, 0.2, 0.3]).expect("slope");
    let y = run_one(
        6,
        node("PRelu", &["x", "s"], &["y"]),
        &dims,
        vec![
            (f32_value("x", &dims), x.clone()),
            (f32_value("s", &[3]), slope),
        ],
    );
    for (i, (&g, &v)) in y.iter().zip(&data).enumerate() {
        let s = [0.1, 0.2, 0.3][(i / 5) % 3];
        let want = if v < 0.0 { s * v as f64 } else { v as f64 };
        assert!((g - want).abs() < 1e-5, "[{i}] {g} vs {want}");
    }
    // Opset 9: a slope of 5 values broadcasts along the last dim.
    let slope = Tensor::from_vec(vec![5], vec![0.1f32, 0.2, 0.3, 0.4, 0.5]).expect("slope");
    let y = run_one(
        9,
        node("PRelu", &["x", "s"], &["y"]),
        &dims,
        vec![(f32_value("x", &dims), x), (f32_value("s", &[5]), slope)],
    );
    for (i, (&g, &v)) in y.iter().zip(&data).enumerate() {
        let s = [0.1, 0.2, 0.3, 0.4, 0.5][i % 5];
        let want = if v < 0.0 { s * v as f64 } else { v as f64 };
        assert!((g - want).abs() < 1e-5, "[{i}] {g} vs {want}");
    }
}

/// A plain einsum of two operands (explicit output, no `...`, no repeated letters).
fn einsum_ref(eq: &str, a: (&[usize], &[f32]), b: (&[usize], &[f32])) -> (Vec<usize>, Vec<f64>) {
    let (lhs, out) = eq.split_once("->").expect("->");
    let (ta, tb) = lhs.split_once(',').expect(",");
    let mut size = std::collections::BTreeMap::new();
    for (t, dims) in [(ta, a.0), (tb, b.0)] {
        for (c, &d) in t.chars().zip(dims) {
            size.insert(c, d);
        }
    }
    let letters: Vec<char> = size.keys().copied().collect();
    let out_dims: Vec<usize> = out.chars().map(|c| size[&c]).collect();
    let mut y = vec![0.0f64; out_dims.iter().product()];
    let total: usize = letters.iter().map(|c| size[c]).product();
    let flat = |t: &str, dims: &[usize], idx: &std::collections::BTreeMap<char, usize>| {
        t.chars()
            .zip(dims)
            .fold(0, |acc, (c, &d)| acc * d + idx[&c])
    };
    for k in 0..total {
        let mut rem = k;
        let mut idx = std::collections::BTreeMap::new();
        for c in letters.iter().rev() {
            idx.insert(*c, rem % size[c]);
            rem /= size[c];
        }
        let va = a.1[flat(ta, a.0, &idx)] as f64;
        let vb = b.1[flat(tb, b.0, &idx)] as f64;
        y[flat(out, &out_dims, &idx)] += va * vb;
    }
    (out_dims, y)
}

#[test]
fn einsum_batched_contractions_lower_to_matmul_and_match_a_plain_einsum() {
    // (equation as written, the same without `...`, shapes of a and b)
    let cases: &[(&str, &str, &[usize], &[usize])] = &[
        (
            "bhqd,bhkd->bhqk",
            "bhqd,bhkd->bhqk",
            &[2, 3, 5, 4],
            &[2, 3, 7, 4],
        ),
        (
            "bhqk,bhkd->bhqd",
            "bhqk,bhkd->bhqd",
            &[1, 2, 3, 5],
            &[1, 2, 5, 1],
        ),
        ("bqd,bkd->bqk", "bqd,bkd->bqk", &[3, 1, 5], &[3, 7, 5]),
        (
            "...id,...jd->...ij",
            "xyid,xyjd->xyij",
            &[2, 1, 3, 5],
            &[2, 1, 4, 5],
        ),
        ("ij,jk->ik", "ij,jk->ik", &[3, 5], &[5, 1]),
        (
            "bhqd,bhkd->bhkq",
            "bhqd,bhkd->bhkq",
            &[1, 1, 2, 3],
            &[1, 1, 5, 3],
        ),
    ];
    for &(eq, plain, sa, sb) in cases {
        let data = |n: usize, seed: f32| -> Vec<f32> {
            (0..n).map(|i| ((i as f32 + seed) * 0.37).sin()).collect()
        };
        let (da, db) = (
            data(sa.iter().product(), 0.5),
            data(sb.iter().product(), 1.5),
        );
        let (out_dims, want) = einsum_ref(plain, (sa, &da), (sb, &db));
        let mut n = node("Einsum", &["a", "b"], &["y"]);
        n.attribute = vec![AttributeProto {
            name: "equation".into(),
            r#type: 3,
            s: eq.as_bytes().to_vec(),
            ..Default::default()
        }];
        let dims = |s: &[usize]| s.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let y = run_one(
            17,
            n,
            &dims(&out_dims),
            vec![
                (
                    f32_value("a", &dims(sa)),
                    Tensor::from_vec(sa.to_vec(), da).expect("a"),
                ),
                (
                    f32_value("b", &dims(sb)),
                    Tensor::from_vec(sb.to_vec(), db).expect("b"),
                ),
            ],
        );
        assert_eq!(y.len(), want.len(), "{eq}");
        for (i, (g, w)) in y.iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-5, "{eq} [{i}]: {g} vs {w}");
        }
    }
    // Other equations stay opaque (here a sum over a letter of one operand only).
    let mut n = node("Einsum", &["a", "b"], &["y"]);
    n.attribute = vec![AttributeProto {
        name: "equation".into(),
        r#type: 3,
        s: b"ij,kl->ik".to_vec(),
        ..Default::default()
    }];
    let m = model(
        17,
        GraphProto {
            node: vec![n],
            input: vec![f32_value("a", &[2, 3]), f32_value("b", &[4, 5])],
            output: vec![f32_value("y", &[2, 4])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads");
    assert_eq!(g.op_counts().get("opaque"), Some(&1), "{g}");
}

#[test]
fn a_value_listed_twice_as_graph_output_saves_and_reloads() {
    // ONNX (checker and onnxruntime) accept one value listed twice among the graph
    // outputs; graphrw keeps both entries through save and load (a fuzzer found save
    // refusing what load accepted).
    let relu = node("Relu", &["x"], &["y"]);
    let m = model(
        17,
        GraphProto {
            node: vec![relu],
            input: vec![f32_value("x", &[2, 3])],
            output: vec![f32_value("y", &[2, 3]), f32_value("y", &[2, 3])],
            ..Default::default()
        },
        &[],
    );
    let g = load(&m).expect("loads");
    assert_eq!(g.outputs().len(), 2);
    let saved = onnx::to_model(&g).expect("saves");
    let names: Vec<&str> = saved
        .graph
        .as_ref()
        .expect("graph")
        .output
        .iter()
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(names, ["y", "y"]);
    let again = onnx::load_bytes(&onnx::to_bytes(&g).expect("save")).expect("reload");
    assert_eq!(again.to_string(), g.to_string());
}
