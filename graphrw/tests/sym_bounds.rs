//! Lower bounds on symbolic dims through a real load: shape arithmetic that folds only
//! under a bound (`max(seq, 1)`), a division by a dim that proves its own bound
//! (`(b*seq) / seq`), the folded graph against onnxruntime at several shapes, the bounds
//! through save and load, and the run-time refusal of inputs that break one.

mod ort_support;

use graphrw::exec::{plan, reference_stack};
use graphrw::ir::sym::bounds::Bounds;
use graphrw::onnx::proto::{
    attribute_type, data_type, AttributeProto, Dimension, DimensionValue, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor,
    ValueInfoProto,
};
use graphrw::{Graph, Tensor};
use prost::Message;

fn node(op: &str, ins: &[&str], out: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: vec![out.to_string()],
        name: out.to_string(),
        op_type: op.to_string(),
        attribute: attrs,
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        dims: vec![v.len() as i64],
        data_type: data_type::INT64,
        int64_data: v.to_vec(),
        name: name.to_string(),
        ..Default::default()
    }
}

fn value(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d.parse::<i64>() {
                Ok(n) => DimensionValue::DimValue(n),
                Err(_) => DimensionValue::DimParam(d.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem,
                shape: Some(TensorShapeProto { dim }),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `x: f32[b, seq, 4]`; `y = x + reshape(x, [(b*seq) / seq, max(seq, 1), 4])`, the
/// target computed from `Shape(x)` as the exporters do.
fn model() -> Vec<u8> {
    let axis0 = AttributeProto {
        name: "axis".into(),
        r#type: attribute_type::INT,
        i: 0,
        ..Default::default()
    };
    let nodes = vec![
        node("Shape", &["x"], "sh", vec![]),
        node("Gather", &["sh", "i0"], "b", vec![axis0.clone()]),
        node("Gather", &["sh", "i1"], "seq", vec![axis0.clone()]),
        node("Max", &["seq", "one"], "m", vec![]),
        node("Mul", &["b", "seq"], "bs", vec![]),
        node("Div", &["bs", "seq"], "q", vec![]),
        node("Concat", &["q", "m", "four"], "target", vec![axis0]),
        node("Reshape", &["x", "target"], "r", vec![]),
        node("Add", &["x", "r"], "y", vec![]),
    ];
    let graph = GraphProto {
        node: nodes,
        name: "bounds".into(),
        initializer: vec![
            ints("i0", &[0]),
            ints("i1", &[1]),
            ints("one", &[1]),
            ints("four", &[4]),
        ],
        input: vec![value("x", data_type::FLOAT, &["b", "seq", "4"])],
        output: vec![value("y", data_type::FLOAT, &["b", "seq", "4"])],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

fn load_assuming(bytes: &[u8], bounds: &Bounds) -> Graph {
    graphrw::ir::sym::in_force::with(bounds, || graphrw::onnx::load_bytes(bytes))
        .0
        .expect("load")
}

fn ramp(b: usize, seq: usize) -> Tensor {
    let data: Vec<f32> = (0..b * seq * 4).map(|i| i as f32 * 0.25 - 3.0).collect();
    Tensor::from_vec(vec![b, seq, 4], data).expect("tensor")
}

fn reshape_target(g: &Graph) -> String {
    let id = g.nodes_with_op("reshape").next().expect("a reshape");
    let node = g.node(id).expect("node");
    let target: Vec<String> = node.attr_values().iter().map(|v| v.to_string()).collect();
    format!("{} {}", target.join(" "), node.outputs()[0])
}

#[test]
fn max_of_seq_and_1_folds_only_under_the_bound_and_the_division_proves_its_own() {
    let bytes = model();
    let plain = load_assuming(&bytes, &Bounds::new());
    // The division by `seq` in the shape arithmetic proves `seq >= 1` (the model
    // fails at 0), so `(b*seq) / seq` folds to `b`, and with it `max(seq, 1)`.
    assert_eq!(plain.bounds().lower("seq"), 1, "{plain}");
    assert!(!reshape_target(&plain).contains("max"), "{plain}");
    // Without the division, nothing proves it: the same model with `q` replaced by
    // `b` keeps `max(seq, 1)` unless the bound is given.
    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    g.node.retain(|n| n.output[0] != "bs" && n.output[0] != "q");
    for n in &mut g.node {
        for i in &mut n.input {
            if i == "q" {
                *i = "b".into();
            }
        }
    }
    let no_div = m.encode_to_vec();
    let free = load_assuming(&no_div, &Bounds::new());
    assert_eq!(free.bounds().lower("seq"), 0);
    assert!(reshape_target(&free).contains("max"), "{free}");
    let bound = load_assuming(&no_div, &Bounds::new().at_least("seq", 1));
    assert!(!reshape_target(&bound).contains("max"), "{bound}");
    assert!(bound.to_string().contains("assume seq>=1"), "{bound}");

    // Both folded graphs run and match onnxruntime at several shapes.
    let Some(python) = ort_support::python_or_skip("bounds model against onnxruntime") else {
        return;
    };
    let shapes = [(1, 1), (2, 3), (3, 7)];
    for (name, g, model) in [("div", &plain, &bytes), ("bound", &bound, &no_div)] {
        let p = plan(g, &reference_stack()).expect("plan");
        let cases: Vec<ort_support::Case> = shapes
            .iter()
            .map(|&(b, s)| ort_support::Case {
                name: format!("{name} b={b} seq={s}"),
                model: model.clone(),
                inputs: vec![ramp(b, s)],
            })
            .collect();
        let want = ort_support::run_all(&python, &cases);
        for (c, w) in cases.iter().zip(want) {
            let w = w.unwrap_or_else(|e| panic!("{}: onnxruntime: {e}", c.name));
            let (got, _) = p.run(&c.inputs).expect("run");
            ort_support::same_all(&got, &w).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        }
    }
}

#[test]
fn bounds_survive_save_and_load_and_a_run_that_breaks_one_is_refused() {
    let mut g = load_assuming(&model(), &Bounds::new().at_least("b", 2));
    g.assume_at_least("seq", 3);
    let bytes = graphrw::onnx::to_bytes(&g).expect("save");
    let back = graphrw::onnx::load_bytes(&bytes).expect("load");
    assert_eq!(back.bounds(), g.bounds(), "{back}");
    assert_eq!(
        (back.bounds().lower("b"), back.bounds().lower("seq")),
        (2, 3)
    );
    let p = plan(&back, &reference_stack()).expect("plan");
    assert!(p.run(&[ramp(2, 3)]).is_ok());
    let e = p
        .run(&[ramp(2, 2)])
        .expect_err("seq = 2 breaks seq >= 3")
        .to_string();
    assert_eq!(
        e, "input x: dim 1 is 2 (seq), but the graph assumes seq >= 3",
        "one line naming the input, the dim, the symbol and the bound"
    );
    let e = p
        .run(&[ramp(1, 5)])
        .expect_err("b = 1 breaks b >= 2")
        .to_string();
    assert!(e.contains("dim 0 is 1 (b)") && e.contains("b >= 2"), "{e}");
}
