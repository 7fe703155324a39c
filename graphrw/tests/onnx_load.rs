//! Loading the real corpus: every model imports, verifies, keeps its names, and its op
//! counts agree with the ONNX file and with `manifest.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use graphrw::onnx::{self, proto::ModelProto};
use graphrw::{DType, Dim};
use prost::Message;

mod onnx_support;
use onnx_support::{CORPUS, CORPUS_MODELS};

fn model_path(name: &str) -> PathBuf {
    PathBuf::from(CORPUS).join(name).join("model.onnx")
}

/// The ONNX op types of a model file and how often each occurs.
fn onnx_op_counts(name: &str) -> (ModelProto, BTreeMap<String, usize>) {
    let bytes = std::fs::read(model_path(name)).expect("corpus model");
    let model = ModelProto::decode(bytes.as_slice()).expect("valid protobuf");
    let mut counts = BTreeMap::new();
    for n in &model.graph.as_ref().expect("graph").node {
        *counts.entry(n.op_type.clone()).or_insert(0) += 1;
    }
    (model, counts)
}

/// One entry of `manifest.json`, read without a JSON crate: the fields we check.
struct Entry {
    attention_sites: usize,
    nodes: usize,
    op_types: Vec<String>,
    inputs: Vec<String>,
}

fn manifest() -> BTreeMap<String, Entry> {
    let text =
        std::fs::read_to_string(PathBuf::from(CORPUS).join("manifest.json")).expect("manifest");
    let mut out = BTreeMap::new();
    for chunk in text.split('{').skip(1) {
        let field = |key: &str| -> String {
            let start = chunk.find(&format!("\"{key}\"")).expect(key) + key.len() + 2;
            let rest = chunk[start..].trim_start_matches([':', ' ', '\n']);
            let end = if rest.starts_with('[') {
                rest.find(']').expect("list end") + 1
            } else {
                rest.find([',', '\n', '}']).unwrap_or(rest.len())
            };
            rest[..end].to_string()
        };
        let list = |s: String| -> Vec<String> {
            s.trim_matches(['[', ']'])
                .split(',')
                .map(|x| x.trim().trim_matches('"').to_string())
                .filter(|x| !x.is_empty())
                .collect()
        };
        let model = field("model").trim_matches('"').to_string();
        out.insert(
            model,
            Entry {
                attention_sites: field("attention_sites").trim().parse().expect("int"),
                nodes: field("nodes").trim().parse().expect("int"),
                op_types: list(field("op_types")),
                inputs: list(field("inputs")),
            },
        );
    }
    out
}

#[test]
fn every_corpus_model_loads_and_matches_the_manifest() {
    let manifest = manifest();
    assert_eq!(manifest.len(), 8, "manifest lists 8 models");
    let mut softmaxes = 0;
    for name in CORPUS_MODELS {
        let entry = &manifest[name];
        let graph = onnx::load(model_path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        graphrw::verify(&graph).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (model, onnx_counts) = onnx_op_counts(name);
        let onnx_nodes: usize = onnx_counts.values().sum();
        assert_eq!(
            onnx_nodes, entry.nodes,
            "{name}: node count of the file vs manifest"
        );
        let types: Vec<&String> = onnx_counts.keys().collect();
        let mut want: Vec<&String> = entry.op_types.iter().collect();
        want.sort();
        assert_eq!(types, want, "{name}: op types");

        let counts = graph.op_counts();
        let count = |op: &str| counts.get(op).copied().unwrap_or(0);
        let onnx = |op: &str| onnx_counts.get(op).copied().unwrap_or(0);
        // One-to-one mappings keep their counts.
        for (onnx_op, op) in [
            ("Softmax", "softmax"),
            ("LayerNormalization", "layer_norm"),
            ("Transpose", "permute"),
            ("Gather", "gather"),
            ("GatherElements", "gather_elements"),
            ("GatherND", "gather_nd"),
            ("Reshape", "reshape"),
            ("Erf", "erf"),
            ("Tanh", "tanh"),
            ("Where", "where"),
            ("Cast", "cast"),
            ("IsNaN", "isnan"),
            ("And", "and"),
            ("Pow", "pow"),
            ("Concat", "concat"),
            ("Split", "split"),
            ("ReduceMean", "mean"),
            ("Expand", "expand"),
            ("Sigmoid", "sigmoid"),
            ("Relu", "relu"),
        ] {
            assert_eq!(count(op), onnx(onnx_op), "{name}: {onnx_op} -> {op}");
        }
        assert_eq!(
            count("softmax"),
            entry.attention_sites,
            "{name}: attention sites"
        );
        softmaxes += count("softmax");
        // Gemm becomes a matmul (plus an add when it has a bias).
        assert_eq!(
            count("matmul"),
            onnx("MatMul") + onnx("Gemm"),
            "{name}: matmuls"
        );
        // Every ONNX node becomes at least one op node.
        let ops: usize = counts
            .iter()
            .filter(|(op, _)| !matches!(**op, "input" | "constant"))
            .map(|(_, n)| n)
            .sum();
        assert!(
            ops >= entry.nodes && ops <= 2 * entry.nodes,
            "{name}: {ops} op nodes for {} ONNX nodes",
            entry.nodes
        );
        // Constants are initialisers (never more).
        let proto = model.graph.as_ref().expect("graph");
        assert!(
            count("constant") <= proto.initializer.len(),
            "{name}: constants"
        );
        // Names: inputs, outputs, and every ONNX node name on some graph node.
        let input_names: Vec<String> = graph
            .inputs()
            .iter()
            .map(|&id| {
                graph
                    .node(id)
                    .and_then(|n| n.name())
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        assert_eq!(input_names, entry.inputs, "{name}: inputs");
        assert_eq!(
            graph.output_names(),
            ["last_hidden_state".to_string()],
            "{name}: outputs"
        );
        let names: std::collections::HashSet<&str> = graph
            .node_ids()
            .filter_map(|id| graph.node(id)?.name())
            .collect();
        for n in &proto.node {
            assert!(
                names.contains(n.name.as_str()),
                "{name}: node name {} kept",
                n.name
            );
        }
        // Metadata: i64 inputs of known shape, f32 output of rank 3.
        for &id in graph.inputs() {
            let m = &graph.node(id).expect("input").outputs()[0];
            assert_eq!(m.dtype, DType::I64);
            assert_eq!(m.shape.rank(), 2);
        }
        let out = graph.meta(graph.outputs()[0]).expect("output meta");
        assert_eq!(out.dtype, DType::F32);
        assert_eq!(out.shape.dims().last(), Some(&Dim::Known(64)));
    }
    assert_eq!(softmaxes, 24, "24 attention sites in the 8 models");
}

#[test]
fn test_data_reads_as_tensors_matching_the_graph() {
    for name in CORPUS_MODELS {
        let graph = onnx::load(model_path(name)).expect("load");
        let dir = PathBuf::from(CORPUS).join(name).join("test_data_set_0");
        for (i, &id) in graph.inputs().iter().enumerate() {
            let (pb_name, t) =
                onnx::read_tensor_pb(dir.join(format!("input_{i}.pb"))).expect("input pb");
            let node = graph.node(id).expect("input");
            assert_eq!(
                Some(pb_name.as_str()),
                node.name(),
                "{name}: input {i} name"
            );
            let meta = &node.outputs()[0];
            assert_eq!(t.dtype(), meta.dtype);
            assert_eq!(
                Some(t.shape().iter().map(|&d| d as u64).collect()),
                meta.shape.as_known()
            );
        }
        let (_, out) = onnx::read_tensor_pb(dir.join("output_0.pb")).expect("output pb");
        let meta = graph.meta(graph.outputs()[0]).expect("meta");
        assert_eq!(out.dtype(), meta.dtype);
        assert_eq!(
            Some(out.shape().iter().map(|&d| d as u64).collect()),
            meta.shape.as_known(),
            "{name}: output shape"
        );
    }
}

#[test]
fn weights_share_one_constant_per_initialiser() {
    let graph = onnx::load(model_path("gpt2_eager")).expect("load");
    let mut names = std::collections::HashSet::new();
    for id in graph.nodes_with_op("constant") {
        let n = graph.node(id).expect("node");
        assert!(n.payload().is_some());
        assert!(
            names.insert(n.name().expect("initialiser name").to_string()),
            "one constant per initialiser"
        );
    }
    assert!(names.contains("m.wte.weight"));
}

#[test]
fn printed_program_reads_like_the_model() {
    let graph = onnx::load(model_path("llama_sdpa")).expect("load");
    let text = graph.to_string();
    assert!(
        text.starts_with("graph(input_ids: i64[1, 16], attention_mask: i64[1, 16]) {"),
        "{text}"
    );
    assert!(text.contains("softmax("), "{text}");
    assert!(text.contains("permute("), "{text}");
}
