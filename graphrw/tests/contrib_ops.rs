//! onnxruntime's contrib ops that its transformer optimizer and onnxscript's
//! `optimize_for_ort` write (`SkipLayerNormalization`, `FastGelu`, ...; issue #56) load
//! as their decompositions and run on graphrw's reference stack and, optimised, on its
//! default stack, with onnxruntime's outputs on the same model (`SKIPPED` without
//! onnxruntime, a failure under `CI=true`). Each op is built with its optional inputs
//! present and absent, its weights as initialisers (as the optimizers write them), at
//! two ranks, and with its training statistics read and named but unread. A malformed
//! node is refused naming it.

mod onnx_support;
mod ort_support;

use graphrw::onnx::load_bytes;
use graphrw::onnx::proto::{
    data_type, AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto,
};
use graphrw::{DType, Tensor};
use onnx_support::{contrib_model, float_attr, int_attr, value_of};
use prost::Message;

/// One contrib node with its inputs: graph inputs (fed) or initialisers (weights).
struct Case {
    name: String,
    op: &'static str,
    domain: &'static str,
    /// `(name, tensor, is_weight)`; an empty name is an absent optional input.
    inputs: Vec<(String, Option<Tensor>, bool)>,
    outputs: Vec<&'static str>,
    attrs: Vec<AttributeProto>,
    /// False where onnxruntime's CPU provider has no kernel for the op (`BiasAdd` is
    /// CUDA only): checked against its formula instead.
    in_onnxruntime: bool,
}

fn values(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (((i * 37 + seed * 11) % 101) as f32 / 25.0 - 2.0) * (1.0 + seed as f32 * 0.1))
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("tensor")
}

fn present(name: &str, t: Tensor, weight: bool) -> (String, Option<Tensor>, bool) {
    (name.to_string(), Some(t), weight)
}

fn absent() -> (String, Option<Tensor>, bool) {
    (String::new(), None, false)
}

fn initializer(name: &str, t: &Tensor) -> TensorProto {
    let raw: Vec<u8> = t
        .to_f64_vec()
        .iter()
        .flat_map(|&v| (v as f32).to_le_bytes())
        .collect();
    TensorProto {
        name: name.into(),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: data_type::FLOAT,
        raw_data: raw,
        ..Default::default()
    }
}

impl Case {
    /// The model's bytes and its fed inputs, in order.
    fn model(&self) -> (Vec<u8>, Vec<Tensor>) {
        let mut graph = GraphProto {
            name: self.name.clone(),
            ..Default::default()
        };
        let mut fed = Vec::new();
        for (name, t, weight) in &self.inputs {
            let Some(t) = t else { continue };
            if *weight {
                graph.initializer.push(initializer(name, t));
            } else {
                graph.input.push(value_of(name, t.dtype(), Some(t.shape())));
                fed.push(t.clone());
            }
        }
        graph.node.push(NodeProto {
            op_type: self.op.into(),
            domain: self.domain.into(),
            name: format!("{}_node", self.op),
            input: self.inputs.iter().map(|(n, _, _)| n.clone()).collect(),
            output: self.outputs.iter().map(|s| s.to_string()).collect(),
            attribute: self.attrs.clone(),
            ..Default::default()
        });
        for out in self.outputs.iter().filter(|o| !o.is_empty()) {
            graph.output.push(value_of(out, DType::F32, None));
        }
        (contrib_model(graph), fed)
    }
}

/// Every op, with optional inputs present and absent, at ranks 3 and 2.
fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    for shape in [vec![2, 5, 16], vec![7, 24]] {
        let h = *shape.last().expect("hidden");
        let rank = shape.len();
        let x = || values(&shape, 1);
        let skip = || values(&shape, 2);
        let vec_h = |seed| values(&[h], seed);
        let eps = float_attr("epsilon", 1e-5);
        for (beta, bias, sum) in [
            (true, true, true),
            (false, true, false),
            (true, false, true),
            (false, false, false),
        ] {
            let mut inputs = vec![
                present("x", x(), false),
                present("skip", skip(), false),
                present("gamma", vec_h(3), true),
            ];
            inputs.push(if beta {
                present("beta", vec_h(4), true)
            } else {
                absent()
            });
            if bias {
                inputs.push(present("bias", vec_h(5), true));
            }
            all.push(Case {
                name: format!("SkipLayerNormalization r{rank} beta={beta} bias={bias} sum={sum}"),
                op: "SkipLayerNormalization",
                domain: "com.microsoft",
                inputs,
                outputs: if sum {
                    vec!["y", "", "", "s"]
                } else {
                    vec!["y"]
                },
                attrs: vec![eps.clone()],
                in_onnxruntime: true,
            });
        }
        for bias in [true, false] {
            let mut inputs = vec![
                present("x", x(), false),
                present("skip", skip(), false),
                present("gamma", vec_h(3), true),
            ];
            if bias {
                inputs.push(present("bias", vec_h(5), true));
            }
            all.push(Case {
                name: format!("SkipSimplifiedLayerNormalization r{rank} bias={bias}"),
                op: "SkipSimplifiedLayerNormalization",
                domain: "com.microsoft",
                inputs,
                outputs: vec!["y", "", "", "s"],
                attrs: vec![eps.clone()],
                in_onnxruntime: true,
            });
        }
        // The training statistics, read: onnxruntime computes them too.
        for op in ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"] {
            all.push(Case {
                name: format!("{op} r{rank} statistics"),
                op,
                domain: "com.microsoft",
                inputs: vec![
                    present("x", x(), false),
                    present("skip", skip(), false),
                    present("gamma", vec_h(3), true),
                ],
                outputs: vec!["y", "mean", "inv_std_var", "s"],
                attrs: vec![eps.clone()],
                in_onnxruntime: true,
            });
        }
        all.push(Case {
            name: format!("SimplifiedLayerNormalization r{rank} statistics"),
            op: "SimplifiedLayerNormalization",
            domain: "",
            inputs: vec![present("x", x(), false), present("scale", vec_h(3), true)],
            outputs: vec!["y", "inv_std_var"],
            attrs: vec![int_attr("axis", -1), eps.clone()],
            in_onnxruntime: true,
        });
        all.push(Case {
            name: format!("SimplifiedLayerNormalization r{rank}"),
            op: "SimplifiedLayerNormalization",
            domain: "",
            inputs: vec![present("x", x(), false), present("scale", vec_h(3), true)],
            outputs: vec!["y"],
            attrs: vec![int_attr("axis", -1), eps.clone()],
            in_onnxruntime: true,
        });
        for (op, with_bias) in [("FastGelu", true), ("FastGelu", false), ("BiasGelu", true)] {
            let mut inputs = vec![present("x", x(), false)];
            if with_bias {
                inputs.push(present("bias", vec_h(5), true));
            }
            all.push(Case {
                name: format!("{op} r{rank} bias={with_bias}"),
                op,
                domain: "com.microsoft",
                inputs,
                outputs: vec!["y"],
                attrs: vec![],
                in_onnxruntime: true,
            });
        }
        all.push(Case {
            name: format!("Gelu r{rank}"),
            op: "Gelu",
            domain: "com.microsoft",
            inputs: vec![present("x", x(), false)],
            outputs: vec!["y"],
            attrs: vec![],
            in_onnxruntime: true,
        });
        for alpha in [None, Some(1.5f32)] {
            all.push(Case {
                name: format!("QuickGelu r{rank} alpha={alpha:?}"),
                op: "QuickGelu",
                domain: "com.microsoft",
                inputs: vec![present("x", x(), false)],
                outputs: vec!["y"],
                attrs: alpha.map(|a| float_attr("alpha", a)).into_iter().collect(),
                in_onnxruntime: true,
            });
        }
        if rank == 3 {
            all.push(Case {
                name: "BiasAdd".into(),
                op: "BiasAdd",
                domain: "com.microsoft",
                inputs: vec![
                    present("x", x(), false),
                    present("bias", vec_h(5), true),
                    present("skip", skip(), false),
                ],
                outputs: vec!["y"],
                attrs: vec![],
                in_onnxruntime: false,
            });
        }
    }
    for (name, a, b, attrs) in [
        ("plain", vec![5, 8], vec![8, 3], vec![]),
        (
            "transB alpha",
            vec![2, 3, 5, 8],
            vec![2, 3, 6, 8],
            vec![int_attr("transB", 1), float_attr("alpha", 0.25)],
        ),
        (
            "transA",
            vec![4, 8, 5],
            vec![8, 6],
            vec![int_attr("transA", 1)],
        ),
        (
            "both, weight broadcast",
            vec![2, 8, 5],
            vec![6, 8],
            vec![int_attr("transA", 1), int_attr("transB", 1)],
        ),
    ] {
        all.push(Case {
            name: format!("FusedMatMul {name}"),
            op: "FusedMatMul",
            domain: "com.microsoft",
            inputs: vec![
                present("a", values(&a, 1), false),
                present("b", values(&b, 2), true),
            ],
            outputs: vec!["y"],
            attrs,
            in_onnxruntime: true,
        });
    }
    all
}

/// `x + bias + skip` elementwise (`bias` along the last dim).
fn bias_add(x: &Tensor, bias: &Tensor, skip: &Tensor) -> Tensor {
    let shape = x.shape();
    let (x, b, s) = (x.to_f64_vec(), bias.to_f64_vec(), skip.to_f64_vec());
    let out: Vec<f32> = x
        .iter()
        .zip(&s)
        .enumerate()
        .map(|(i, (x, s))| (x + b[i % b.len()] + s) as f32)
        .collect();
    Tensor::from_vec(shape.to_vec(), out).expect("tensor")
}

#[test]
fn contrib_ops_load_and_run_as_onnxruntime_runs_them() {
    let cases = cases();
    let mut ort_cases = Vec::new();
    let mut ours = Vec::new();
    for c in &cases {
        let (bytes, fed) = c.model();
        let (_, reference) = ort_support::load_and_run_both_ways(&c.name, &bytes, &fed);
        if !c.in_onnxruntime {
            let want = bias_add(&fed[0], &values(&[fed[0].shape()[2]], 5), &fed[1]);
            ort_support::same_all(&reference, &[want])
                .unwrap_or_else(|e| panic!("{}: against x + bias + skip: {e}", c.name));
            continue;
        }
        ours.push(reference);
        ort_cases.push(ort_support::Case {
            name: c.name.clone(),
            model: bytes,
            inputs: fed,
        });
    }
    let Some(python) = ort_support::python_or_skip("contrib ops are not compared to onnxruntime")
    else {
        return;
    };
    for ((c, got), want) in cases
        .iter()
        .filter(|c| c.in_onnxruntime)
        .zip(&ours)
        .zip(ort_support::run_all(&python, &ort_cases))
    {
        let want = want.unwrap_or_else(|e| panic!("{}: onnxruntime: {e}", c.name));
        ort_support::same_all(got, &want)
            .unwrap_or_else(|e| panic!("{}: against onnxruntime: {e}", c.name));
    }
}

#[test]
fn a_malformed_contrib_node_is_refused_naming_it() {
    let c = Case {
        name: "int skip".into(),
        op: "SkipLayerNormalization",
        domain: "com.microsoft",
        inputs: vec![
            present("x", values(&[2, 8], 1), false),
            present(
                "skip",
                Tensor::from_vec(vec![2, 8], vec![1i64; 16]).expect("tensor"),
                false,
            ),
            present("gamma", values(&[8], 3), true),
        ],
        outputs: vec!["y"],
        attrs: vec![],
        in_onnxruntime: true,
    };
    let (bytes, _) = c.model();
    let err = load_bytes(&bytes).expect_err("an int64 skip is malformed");
    let msg = err.to_string();
    assert!(
        msg.contains("SkipLayerNormalization_node") && msg.contains("input 1 is i64"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1, "{msg}");
}

#[test]
fn statistics_outputs_named_but_unread_do_not_stop_the_node() {
    // onnxscript's `optimize_for_ort` names the statistics (`val_0`, `val_1`) and
    // reads neither: the node still maps, and nothing of it is opaque.
    let c = Case {
        name: "unread statistics".into(),
        op: "SkipSimplifiedLayerNormalization",
        domain: "com.microsoft",
        inputs: vec![
            present("x", values(&[2, 8], 1), false),
            present("skip", values(&[2, 8], 2), false),
            present("gamma", values(&[8], 3), true),
        ],
        outputs: vec!["y", "val_0", "val_1", "s"],
        attrs: vec![],
        in_onnxruntime: true,
    };
    let (mut bytes, _) = c.model();
    let mut model = ModelProto::decode(&bytes[..]).expect("decodes");
    let graph = model.graph.as_mut().expect("graph");
    graph.output.retain(|o| o.name == "y" || o.name == "s");
    bytes = model.encode_to_vec();
    let g = load_bytes(&bytes).expect("loads");
    assert_eq!(g.op_counts().get("opaque"), None, "{:?}", g.op_counts());
}
