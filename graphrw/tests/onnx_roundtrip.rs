//! Export and re-import: `load(save(g))` prints the same program as `g` for every
//! corpus model and for graphs using the ops that map one-to-one; every exportable op
//! survives a round trip with the same values; and the written model has the
//! versions and the `Attention` form that onnxruntime expects.

use std::path::PathBuf;

use graphrw::onnx::{self, proto::ModelProto};
use graphrw::ops::{self, AttrValue};
use graphrw::{Builder, DType, Graph, Tensor, TensorMeta, Value};
use prost::Message;

mod onnx_support;
use onnx_support::{CORPUS, CORPUS_MODELS as MODELS};

fn input_names(g: &Graph) -> Vec<String> {
    g.inputs()
        .iter()
        .map(|&id| g.node(id).and_then(|n| n.name()).unwrap_or("").to_string())
        .collect()
}

#[test]
fn corpus_models_round_trip_to_the_same_program() {
    for name in MODELS {
        let path = PathBuf::from(CORPUS).join(name).join("model.onnx");
        let g1 = onnx::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let bytes = onnx::to_bytes(&g1).unwrap_or_else(|e| panic!("{name}: save: {e}"));
        let g2 = onnx::load_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: reload: {e}"));
        assert_eq!(
            g1.to_string(),
            g2.to_string(),
            "{name}: printed program changed"
        );
        assert_eq!(input_names(&g1), input_names(&g2), "{name}: input names");
        assert_eq!(g1.output_names(), g2.output_names(), "{name}: output names");
        // And once more: the written form is a fixed point.
        let again = onnx::to_bytes(&g2).expect("save again");
        assert_eq!(bytes, again, "{name}: save is deterministic");
        let model = ModelProto::decode(bytes.as_slice()).expect("decode");
        assert_eq!(model.ir_version, 10);
        assert_eq!(
            model.opset_import[0].version, 18,
            "{name}: no op needs more than opset 18"
        );
    }
}

#[test]
fn save_and_load_through_a_file() {
    let path = PathBuf::from(CORPUS).join("llama_sdpa").join("model.onnx");
    let g1 = onnx::load(&path).expect("load");
    let dir = std::env::temp_dir().join(format!("graphrw-onnx-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tempdir");
    let out = dir.join("copy.onnx");
    onnx::save(&g1, &out).expect("save");
    let g2 = onnx::load(&out).expect("reload");
    assert_eq!(g1.to_string(), g2.to_string());
    let _ = std::fs::remove_dir_all(&dir);
}

struct G {
    b: Builder,
}

impl G {
    fn new() -> G {
        G { b: Builder::new() }
    }
    fn input(&self, name: &str, dtype: DType, shape: &[usize]) -> Value {
        self.b
            .input(
                name,
                TensorMeta::new(
                    dtype,
                    shape
                        .iter()
                        .copied()
                        .map(graphrw::Dim::from)
                        .collect::<Vec<_>>(),
                ),
            )
            .value()
    }
    fn constant(&self, t: Tensor) -> Value {
        self.b.constant(t).value()
    }
    fn op(&self, name: &str, operands: &[Value], attrs: &[(&str, AttrValue)]) -> Value {
        self.ops(name, operands, attrs)[0]
    }
    fn ops(&self, name: &str, operands: &[Value], attrs: &[(&str, AttrValue)]) -> Vec<Value> {
        let op = ops::lookup(name).unwrap_or_else(|| panic!("op {name}"));
        self.b
            .apply(op, operands, attrs)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }
    fn finish(self, outputs: Vec<(&str, Value)>) -> Graph {
        let mut g = self.b.finish();
        g.set_named_outputs(
            outputs
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
        )
        .expect("outputs");
        graphrw::verify(&g).expect("verify");
        g
    }
}

fn i(v: i64) -> AttrValue {
    AttrValue::Int(v)
}
fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}
fn f(v: f64) -> AttrValue {
    AttrValue::Float(v)
}

/// An attention block written with ops that map one-to-one onto ONNX.
fn exact_graph() -> Graph {
    let g = G::new();
    let x = g.input("x", DType::F32, &[1, 16, 32]);
    let mask = g.input("mask", DType::Bool, &[1, 1, 1, 16]);
    // Constants are made right before their first use: the importer places them there.
    let gamma = g.constant(Tensor::full(DType::F32, &[32], 1.0));
    let beta = g.constant(Tensor::full(DType::F32, &[32], 0.0));
    let h = g.op(
        "layer_norm",
        &[x, gamma, beta],
        &[("axis", i(-1)), ("eps", f(0.0078125))],
    );
    let w = g.constant(
        Tensor::from_vec(
            vec![32, 96],
            (0..32 * 96).map(|k| (k % 7) as f32 * 0.01).collect(),
        )
        .expect("w"),
    );
    let qkv = g.op("matmul", &[h, w], &[]);
    let parts = g.ops(
        "split",
        &[qkv],
        &[("split_sizes", ints(&[32, 32, 32])), ("dim", i(2))],
    );
    let heads = |v: Value| {
        let r = g.op("reshape", &[v], &[("shape", ints(&[1, 16, 4, 8]))]);
        g.op("permute", &[r], &[("dims", ints(&[0, 2, 1, 3]))])
    };
    let (q, k, v) = (heads(parts[0]), heads(parts[1]), heads(parts[2]));
    let a = g.op(
        "scaled_dot_product_attention",
        &[q, k, v, mask],
        &[("scale", f(0.125)), ("is_causal", AttrValue::Bool(false))],
    );
    let a = g.op("permute", &[a], &[("dims", ints(&[0, 2, 1, 3]))]);
    let a = g.op("reshape", &[a], &[("shape", ints(&[1, 16, 32]))]);
    let a = g.op(
        "gelu",
        &[a],
        &[("approximate", AttrValue::Str("tanh".into()))],
    );
    let s = g.op(
        "slice",
        &[a],
        &[
            ("dim", i(2)),
            ("start", i(0)),
            ("end", i(16)),
            ("step", i(2)),
        ],
    );
    let u = g.op("unsqueeze", &[s], &[("dim", i(1))]);
    let e = g.op("expand", &[u], &[("size", ints(&[-1, 3, -1, -1]))]);
    let m = g.op(
        "mean",
        &[e],
        &[("dims", ints(&[1])), ("keepdim", AttrValue::Bool(true))],
    );
    let sq = g.op("squeeze", &[m], &[("dims", ints(&[1]))]);
    let c = g.op("concat", &[sq, sq], &[("dim", i(-1))]);
    let sm = g.op("softmax", &[c], &[("dim", i(-1))]);
    let mx = g.op(
        "amax",
        &[sm],
        &[("dims", ints(&[-1])), ("keepdim", AttrValue::Bool(false))],
    );
    let tot = g.op(
        "sum",
        &[sm],
        &[("dims", ints(&[])), ("keepdim", AttrValue::Bool(false))],
    );
    let ar = g.op(
        "arange",
        &[],
        &[
            ("start", f(0.0)),
            ("end", f(16.0)),
            ("step", f(1.0)),
            ("dtype", AttrValue::DType(DType::I64)),
        ],
    );
    let ar = g.op("cast", &[ar], &[("dtype", AttrValue::DType(DType::F32))]);
    let full = g.op(
        "full",
        &[],
        &[
            ("size", ints(&[1, 16])),
            ("value", f(0.5)),
            ("dtype", AttrValue::DType(DType::F32)),
        ],
    );
    let mxa = g.op("add", &[mx, ar], &[]);
    let mxa = g.op("mul", &[mxa, full], &[]);
    let tri = g.op("triu", &[sm], &[("diagonal", i(1))]);
    let gate = g.op("gt", &[tri, full], &[]);
    let wh = g.op("where", &[gate, tri, sm], &[]);
    let idx = g.constant(Tensor::from_vec(vec![3], vec![0i64, 5, 2]).expect("idx"));
    let ga = g.op("gather", &[wh, idx], &[("dim", i(2))]);
    let cs = g.op("cumsum", &[ga], &[("dim", i(-1))]);
    let two = g.constant(Tensor::full(DType::F32, &[], 2.0));
    let pw = g.op("pow", &[cs, two], &[]);
    g.finish(vec![("y", pw), ("mx", mxa), ("total", tot)])
}

#[test]
fn one_to_one_ops_round_trip_exactly() {
    let g0 = exact_graph();
    let bytes = onnx::to_bytes(&g0).expect("save");
    let g1 = onnx::load_bytes(&bytes).unwrap_or_else(|e| panic!("reload: {e}\n{g0}"));
    assert_eq!(g0.to_string(), g1.to_string());
    assert_eq!(g1.output_names(), ["y", "mx", "total"]);
}

#[test]
fn attention_is_written_as_onnx_attention_with_a_full_query_mask() {
    let bytes = onnx::to_bytes(&exact_graph()).expect("save");
    let model = ModelProto::decode(bytes.as_slice()).expect("decode");
    assert_eq!(model.ir_version, 10, "ir_version stays 10");
    assert_eq!(model.opset_import.len(), 1);
    assert_eq!(
        model.opset_import[0].version, 23,
        "Attention needs opset 23"
    );
    let graph = model.graph.expect("graph");
    let attn = graph
        .node
        .iter()
        .find(|n| n.op_type == "Attention")
        .expect("an Attention node");
    assert_eq!(attn.input.len(), 4);
    let expand = graph
        .node
        .iter()
        .find(|n| n.output.first() == attn.input.get(3))
        .expect("the mask is computed");
    assert_eq!(expand.op_type, "Expand");
    assert_eq!(expand.name, format!("{}/mask_expand", attn.name));
    let shape = graph
        .initializer
        .iter()
        .find(|t| Some(&t.name) == expand.input.get(1))
        .expect("shape");
    let dims: Vec<i64> = shape
        .raw_data
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    assert_eq!(dims, [1, 1, 16, 16], "mask expanded to its full query dim");
    let scale = attn
        .attribute
        .iter()
        .find(|a| a.name == "scale")
        .expect("scale");
    assert_eq!(scale.f, 0.125);
}

/// Ops whose ONNX form is a different spelling: they survive a round trip with the
/// same values, and a second round trip changes nothing.
fn respelled_graph() -> Graph {
    let g = G::new();
    let x = g.input("x", DType::F32, &[2, 3, 8]);
    let y = g.input("y", DType::F32, &[2, 3, 8]);
    let t = g.op("transpose", &[x], &[("dim0", i(-2)), ("dim1", i(-1))]);
    let t = g.op("transpose", &[t], &[("dim0", i(-2)), ("dim1", i(-1))]);
    let ne = g.op("ne", &[t, y], &[]);
    let mf = g.op("masked_fill", &[t, ne], &[("value", f(-1.5))]);
    let rs = g.op("rsqrt", &[g.op("abs", &[mf], &[])], &[]);
    let rs = g.op("minimum", &[rs, y], &[]);
    let si = g.op("silu", &[rs], &[]);
    let rn = g.op("rms_norm", &[si], &[("axis", i(-1)), ("eps", f(0.0078125))]);
    let ln = g.op(
        "layer_norm",
        &[rn],
        &[("axis", i(-1)), ("eps", f(0.0078125))],
    );
    let idx = g.constant(Tensor::from_vec(vec![2], vec![1i64, 0]).expect("idx"));
    let is = g.op("index_select", &[ln, idx], &[("dim", i(0))]);
    let dr = g.op("dropout", &[is], &[]);
    let co = g.op("contiguous", &[dr], &[]);
    let lsm = g.op("log_softmax", &[co], &[("dim", i(1))]);
    let z = g.op("zeros", &[], &[("size", ints(&[2, 3, 8]))]);
    let o = g.op("ones", &[], &[("size", ints(&[2, 3, 8]))]);
    let zo = g.op("add", &[z, o], &[]);
    let out = g.op("sub", &[lsm, zo], &[]);
    g.finish(vec![("out", out), ("x_again", x), ("out2", out)])
}

fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Vec<f64>> {
    graphrw::exec::run_reference(g, inputs)
        .unwrap_or_else(|e| panic!("run: {e}\n{g}"))
        .iter()
        .map(|t| t.to_f64_vec())
        .collect()
}

#[test]
fn respelled_ops_keep_their_values() {
    let g0 = respelled_graph();
    let g1 = onnx::load_bytes(&onnx::to_bytes(&g0).expect("save"))
        .unwrap_or_else(|e| panic!("reload: {e}"));
    let g2 = onnx::load_bytes(&onnx::to_bytes(&g1).expect("save 2")).expect("reload 2");
    assert_eq!(
        g1.to_string(),
        g2.to_string(),
        "a second round trip changes nothing"
    );
    assert_eq!(g1.output_names(), ["out", "x_again", "out2"]);
    let data = |k: usize| {
        (0..48)
            .map(|j| ((j * 7 + k * 3) % 11) as f32 * 0.25 - 1.0)
            .collect::<Vec<f32>>()
    };
    let inputs = [
        Tensor::from_vec(vec![2, 3, 8], data(1)).expect("x"),
        Tensor::from_vec(vec![2, 3, 8], data(2)).expect("y"),
    ];
    let (a, b) = (run(&g0, &inputs), run(&g1, &inputs));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        for (p, q) in x.iter().zip(y) {
            assert!((p - q).abs() <= 1e-5 * (1.0 + p.abs()), "{p} vs {q}");
        }
    }
}

#[test]
fn exact_graph_keeps_its_values() {
    let g0 = exact_graph();
    let g1 = onnx::load_bytes(&onnx::to_bytes(&g0).expect("save")).expect("reload");
    let x = Tensor::from_vec(
        vec![1, 16, 32],
        (0..512)
            .map(|j| ((j * 13) % 17) as f32 * 0.1 - 0.8)
            .collect(),
    )
    .expect("x");
    let mask = Tensor::from_vec(
        vec![1, 1, 1, 16],
        (0..16).map(|j| j < 12).collect::<Vec<bool>>(),
    )
    .expect("mask");
    let inputs = [x, mask];
    assert_eq!(run(&g0, &inputs), run(&g1, &inputs));
}
