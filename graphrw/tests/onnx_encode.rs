//! The writers' fast path (`save`, `to_bytes`: nodes encoded straight from the graph)
//! gives the bytes prost gives for the model `to_model` builds, on the corpus models as
//! loaded and as optimized, on the attention spelling models after fusion, and on
//! graphs with opaque nodes (custom domains, and default-domain nodes read at an old
//! opset that are upgraded when the model is finished).

use std::path::PathBuf;

use graphrw::onnx::proto::{AttributeProto, GraphProto, ModelProto, OperatorSetIdProto};
use graphrw::onnx::{self, FUNCTION_DOMAIN};
use graphrw::Graph;
use prost::Message;

mod onnx_support;
use onnx_support::{f32_value, node, CORPUS, CORPUS_MODELS};

const ATTENTION: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/models/attention");

/// Asserts that both paths give the same bytes; returns the model.
fn same_both_ways(g: &Graph, what: &str) -> ModelProto {
    let model = onnx::to_model(g).unwrap_or_else(|e| panic!("{what}: to_model: {e}"));
    let fast = onnx::to_bytes(g).unwrap_or_else(|e| panic!("{what}: to_bytes: {e}"));
    let plain = model.encode_to_vec();
    assert!(
        fast == plain,
        "{what}: the fast path wrote {} bytes, prost {} (first difference at byte {:?})",
        fast.len(),
        plain.len(),
        fast.iter().zip(&plain).position(|(a, b)| a != b)
    );
    model
}

fn node_count(m: &ModelProto) -> usize {
    m.graph.as_ref().map_or(0, |g| g.node.len())
}

#[test]
fn corpus_models_encode_the_same_both_ways_as_loaded_and_optimized() {
    let mut functions = 0;
    let mut attention = 0;
    for name in CORPUS_MODELS {
        let path = PathBuf::from(CORPUS).join(name).join("model.onnx");
        let mut g = onnx::load(&path).unwrap_or_else(|e| panic!("{name}: load: {e}"));
        let m = same_both_ways(&g, name);
        assert!(node_count(&m) > 10, "{name}: {} nodes", node_count(&m));
        graphrw::rules::optimize(&mut g).unwrap_or_else(|e| panic!("{name}: optimize: {e}"));
        let m = same_both_ways(&g, &format!("{name} optimized"));
        let nodes = m.graph.as_ref().map(|g| g.node.as_slice()).unwrap_or(&[]);
        functions += nodes.iter().filter(|n| n.domain == FUNCTION_DOMAIN).count();
        attention += nodes.iter().filter(|n| n.op_type == "Attention").count();
    }
    // The optimized corpus takes the writers' rarer paths too.
    assert!(functions > 0, "no model-local function call was written");
    assert!(attention > 0, "no Attention node was written");
}

#[test]
fn attention_models_encode_the_same_both_ways_after_fusion() {
    let mut seen = 0;
    let dir = std::fs::read_dir(ATTENTION).expect("attention models");
    let mut paths: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    paths.sort();
    for path in paths {
        let what = path.display().to_string();
        let mut g = onnx::load(&path).unwrap_or_else(|e| panic!("{what}: load: {e}"));
        graphrw::rules::optimize(&mut g).unwrap_or_else(|e| panic!("{what}: optimize: {e}"));
        same_both_ways(&g, &what);
        seen += 1;
    }
    assert!(seen >= 20, "only {seen} attention models");
}

#[test]
fn opaque_nodes_encode_the_same_both_ways() {
    // Relu, then Pad-2 in `reflect` mode (opaque, default domain, upgraded to an input
    // at save: held until the model's opset is known), a custom-domain op with a
    // negative int list, another Pad, and a known op after it.
    let mut pad = node("Pad", &["r"], &["p"]);
    pad.attribute = vec![
        AttributeProto {
            name: "pads".into(),
            r#type: 7,
            ints: vec![0, 1, 0, 1],
            ..Default::default()
        },
        AttributeProto {
            name: "mode".into(),
            r#type: 3,
            s: b"reflect".to_vec(),
            ..Default::default()
        },
    ];
    let mut custom = node("Foo", &["p"], &["f"]);
    custom.domain = "com.example".into();
    custom.attribute = vec![AttributeProto {
        name: "axes".into(),
        r#type: 7,
        ints: vec![-1, 300, -70000],
        ..Default::default()
    }];
    let mut pad2 = node("Pad", &["f"], &["q"]);
    pad2.attribute = pad.attribute.clone();
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![
            OperatorSetIdProto {
                domain: String::new(),
                version: 9,
            },
            OperatorSetIdProto {
                domain: "com.example".into(),
                version: 1,
            },
        ],
        graph: Some(GraphProto {
            node: vec![
                node("Relu", &["x"], &["r"]),
                pad,
                custom,
                pad2,
                node("Neg", &["q"], &["y"]),
            ],
            input: vec![f32_value("x", &[2, 3])],
            output: vec![f32_value("y", &[2, 7])],
            value_info: vec![f32_value("f", &[2, 5])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let g = onnx::load_bytes(&m.encode_to_vec()).expect("loads");
    // The Neg reads the second Pad's untyped output, so it is opaque too.
    assert_eq!(g.op_counts().get("opaque"), Some(&4));
    let saved = same_both_ways(&g, "opaque");
    let nodes = &saved.graph.as_ref().expect("graph").node;
    let ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["Relu", "Pad", "Foo", "Pad", "Neg"]);
    // The Pads were upgraded (pads as an input) in the bytes written too.
    for pad in nodes.iter().filter(|n| n.op_type == "Pad") {
        assert!(pad.attribute.iter().all(|a| a.name != "pads"), "{pad:?}");
        assert_eq!(pad.input.len(), 2, "{pad:?}");
    }
}

/// `x -> neg -> neg -> neg -> rsqrt (two ONNX nodes) -> neg`, nodes named `names`.
fn named_chain(names: [&str; 5]) -> Graph {
    use graphrw::{DType, TensorMeta, Value};
    let mut g = Graph::new();
    let mut v = g.add_input("x", TensorMeta::new(DType::F32, [4usize]));
    for (op, name) in ["neg", "neg", "neg", "rsqrt", "neg"].into_iter().zip(names) {
        let op = graphrw::ops::lookup(op).expect("op");
        let id = g.add_op(op, &[v], &[]).expect("node");
        g.set_name(id, name);
        v = Value::from(id);
    }
    g.set_named_outputs(vec![("y".into(), v)]).expect("output");
    g
}

/// Node names stay unique as they were checked one by one: a name two graph nodes
/// ask for, or one node's two ONNX nodes, takes `_k` (the exporter first checks the
/// names of a whole graph at once, and on a repeat writes it again name by name).
#[test]
fn repeated_node_names_get_suffixes_both_ways() {
    let names = |g: &Graph| -> Vec<String> {
        let m = same_both_ways(g, "named chain");
        m.graph
            .expect("graph")
            .node
            .into_iter()
            .map(|n| n.name)
            .collect()
    };
    let repeated = named_chain(["dup", "dup", "dup_1", "r", "r_1"]);
    assert_eq!(
        names(&repeated),
        ["dup", "dup_1", "dup_1_1", "r", "r_1", "r_1_1"]
    );
    let distinct = named_chain(["a", "b", "c", "r", "s"]);
    assert_eq!(names(&distinct), ["a", "b", "c", "r", "r_1", "s"]);
}
