//! onnxruntime's contrib attentions and embeddings (`Attention`, `MultiHeadAttention`,
//! `GroupQueryAttention`, `RotaryEmbedding`, `EmbedLayerNormalization`; issue #56) load
//! as graphrw's own ops and run, on the reference stack and optimised on the default
//! stack, as onnxruntime runs the same model: each at two shapes, with the masks, pasts
//! and optional inputs the optimizers write (outputs within onnxruntime's tolerance in
//! `ort_support::same`: `1e-4` plus `1e-3` of the largest magnitude; `SKIPPED` without
//! onnxruntime, a failure under `CI=true`). A malformed node is refused in one line
//! naming it; a form graphrw does not read passes through unread.

mod onnx_support;
mod ort_support;

use graphrw::onnx::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};
use graphrw::onnx::{encode_tensor_pb, load_bytes};
use graphrw::{DType, Tensor};
use onnx_support::{contrib_model, float_attr, int_attr, ints_attr, value_of};
use prost::Message;

/// One input of the node.
enum In {
    /// A graph input, fed.
    Fed(&'static str, Tensor),
    /// An initialiser.
    Weight(&'static str, Tensor),
    /// An absent optional input.
    Absent,
}

/// One contrib node with its inputs, and its outputs' element types.
struct Case {
    name: String,
    op: &'static str,
    inputs: Vec<In>,
    /// `(name, dtype)`; an empty name is an output left out.
    outputs: Vec<(&'static str, DType)>,
    attrs: Vec<AttributeProto>,
    /// Where onnxruntime's CPU provider has no kernel for this form (packed QKV or
    /// KV in `MultiHeadAttention`): the same attention with separate inputs, which
    /// onnxruntime runs instead.
    twin: Option<Box<Case>>,
}

fn values(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (((i * 37 + seed * 11) % 101) as f32 / 50.0 - 1.0) * (1.0 + seed as f32 * 0.1))
        .collect();
    Tensor::from_vec(shape.to_vec(), v).expect("tensor")
}

fn ints(shape: &[usize], v: Vec<i32>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v).expect("tensor")
}

impl Case {
    fn new(name: impl Into<String>, op: &'static str) -> Case {
        Case {
            name: name.into(),
            op,
            inputs: Vec::new(),
            outputs: vec![("y", DType::F32)],
            attrs: Vec::new(),
            twin: None,
        }
    }

    /// The model's bytes and its fed inputs, in order.
    fn model(&self) -> (Vec<u8>, Vec<Tensor>) {
        let mut graph = GraphProto {
            name: self.name.clone(),
            ..Default::default()
        };
        let mut fed = Vec::new();
        let mut names = Vec::new();
        for i in &self.inputs {
            match i {
                In::Fed(name, t) => {
                    graph.input.push(value_of(name, t.dtype(), Some(t.shape())));
                    fed.push(t.clone());
                    names.push(name.to_string());
                }
                In::Weight(name, t) => {
                    let bytes = encode_tensor_pb(name, t);
                    graph
                        .initializer
                        .push(TensorProto::decode(bytes.as_slice()).expect("tensor proto"));
                    names.push(name.to_string());
                }
                In::Absent => names.push(String::new()),
            }
        }
        while names.last().is_some_and(String::is_empty) {
            names.pop();
        }
        graph.node.push(NodeProto {
            op_type: self.op.into(),
            domain: "com.microsoft".into(),
            name: format!("{}_node", self.op),
            input: names,
            output: self.outputs.iter().map(|(n, _)| n.to_string()).collect(),
            attribute: self.attrs.clone(),
            ..Default::default()
        });
        for (out, dtype) in self.outputs.iter().filter(|(o, _)| !o.is_empty()) {
            graph.output.push(value_of(out, *dtype, None));
        }
        (contrib_model(graph), fed)
    }
}

/// `Attention` at `(B, S, input hidden, heads, hidden)` shapes.
fn attention_cases(all: &mut Vec<Case>) {
    for (b, s, hin, n, h) in [(2usize, 5usize, 16usize, 2i64, 16usize), (1, 7, 12, 3, 24)] {
        let base = |name: &str| {
            let mut c = Case::new(format!("Attention {name} b{b} s{s} n{n}"), "Attention");
            c.attrs.push(int_attr("num_heads", n));
            c.inputs = vec![
                In::Fed("x", values(&[b, s, hin], 1)),
                In::Weight("w", values(&[hin, 3 * h], 2)),
                In::Weight("bias", values(&[3 * h], 3)),
            ];
            c
        };
        all.push(base("plain"));
        let keep: Vec<i32> = (0..b * s)
            .map(|i| i32::from(i % s < s - 1 - i / s))
            .collect();
        let mut c = base("2-D mask");
        c.inputs.push(In::Fed("mask", ints(&[b, s], keep.clone())));
        all.push(c);
        let mut c = base("2-D mask unidirectional");
        c.inputs.push(In::Fed("mask", ints(&[b, s], keep)));
        c.attrs.push(int_attr("unidirectional", 1));
        all.push(c);
        let lens: Vec<i32> = (0..b).map(|i| (s - i) as i32).collect();
        let mut c = base("lengths");
        c.inputs.push(In::Fed("mask", ints(&[b], lens.clone())));
        all.push(c);
        let mut ends_starts = lens.clone();
        ends_starts.extend((0..b).map(|i| i as i32));
        let mut c = base("ends and starts");
        c.inputs.push(In::Fed("mask", ints(&[2 * b], ends_starts)));
        c.attrs.push(float_attr("mask_filter_value", -1e4));
        all.push(c);
        let mut c = base("qkv_hidden_sizes and scale");
        c.inputs[1] = In::Weight("w", values(&[hin, 2 * h + h / 2], 2));
        c.inputs[2] = In::Weight("bias", values(&[2 * h + h / 2], 3));
        c.attrs.push(ints_attr(
            "qkv_hidden_sizes",
            &[h as i64, h as i64, h as i64 / 2],
        ));
        c.attrs.push(float_attr("scale", 0.3));
        all.push(c);
        let d = h / n as usize;
        let mut c = base("past unidirectional");
        c.inputs.push(In::Absent);
        c.inputs
            .push(In::Fed("past", values(&[2, b, n as usize, 3, d], 4)));
        c.attrs.push(int_attr("unidirectional", 1));
        c.outputs.push(("present", DType::F32));
        all.push(c);
        let mut c = base("past, mask");
        let keep: Vec<i32> = (0..b * (s + 3)).map(|i| i32::from(i % 4 != 1)).collect();
        c.inputs.push(In::Fed("mask", ints(&[b, s + 3], keep)));
        c.inputs
            .push(In::Fed("past", values(&[2, b, n as usize, 3, d], 4)));
        c.outputs.push(("present", DType::F32));
        all.push(c);
        // onnxruntime takes no attention_bias beside a past.
        let mut c = base("attention_bias unidirectional");
        c.inputs.push(In::Absent);
        c.inputs.push(In::Absent);
        c.inputs
            .push(In::Fed("attn_bias", values(&[1, n as usize, s, s], 5)));
        c.attrs.push(int_attr("unidirectional", 1));
        all.push(c);
    }
}

/// Part `j` of a packed `[B, S, N, parts, D]` tensor, as `[B, S, N * D]`.
fn part(x: &Tensor, j: usize) -> Tensor {
    let [b, s, n, parts, d] = x.shape().try_into().expect("5-D");
    let v = x.to_f64_vec();
    let mut out = Vec::with_capacity(b * s * n * d);
    for row in 0..b * s * n {
        let at = (row * parts + j) * d;
        out.extend(v[at..at + d].iter().map(|&x| x as f32));
    }
    Tensor::from_vec(vec![b, s, n * d], out).expect("tensor")
}

/// `MultiHeadAttention` at two shapes.
fn mha_cases(all: &mut Vec<Case>) {
    for (b, s, l, n, d) in [(2usize, 5usize, 5usize, 2usize, 8usize), (1, 4, 6, 3, 4)] {
        let h = n * d;
        let name = |what: &str| format!("MultiHeadAttention {what} b{b} s{s} l{l} n{n}");
        let sep = |what: &str| {
            let mut c = Case::new(name(what), "MultiHeadAttention");
            c.attrs.push(int_attr("num_heads", n as i64));
            c.inputs = vec![
                In::Fed("q", values(&[b, s, h], 1)),
                In::Fed("k", values(&[b, l, h], 2)),
                In::Fed("v", values(&[b, l, h], 3)),
            ];
            c
        };
        let mut c = sep("bias, 2-D mask");
        c.inputs.push(In::Weight("bias", values(&[3 * h], 4)));
        let keep: Vec<i32> = (0..b * l).map(|i| i32::from(i % l != 1)).collect();
        c.inputs.push(In::Fed("mask", ints(&[b, l], keep)));
        all.push(c);
        let mut c = sep("lengths, attention_bias");
        c.inputs.push(In::Absent);
        let lens: Vec<i32> = (0..b).map(|i| (l - i) as i32).collect();
        c.inputs.push(In::Fed("mask", ints(&[b], lens)));
        c.inputs.push(In::Fed("ab", values(&[b, n, s, l], 5)));
        all.push(c);
        let qkv = values(&[b, s, n, 3, d], 1);
        let mut twin = sep("packed QKV, unpacked");
        twin.inputs = (0..3)
            .map(|j| In::Fed(["q", "k", "v"][j], part(&qkv, j)))
            .collect();
        let mut c = Case::new(name("packed QKV"), "MultiHeadAttention");
        c.attrs.push(int_attr("num_heads", n as i64));
        c.inputs = vec![In::Fed("qkv", qkv)];
        c.twin = Some(Box::new(twin));
        all.push(c);
        let kv = values(&[b, l, n, 2, d], 2);
        let mut twin = sep("packed KV, unpacked");
        twin.inputs[1] = In::Fed("k", part(&kv, 0));
        twin.inputs[2] = In::Fed("v", part(&kv, 1));
        let mut c = Case::new(name("packed KV"), "MultiHeadAttention");
        c.attrs.push(int_attr("num_heads", n as i64));
        c.inputs = vec![In::Fed("q", values(&[b, s, h], 1)), In::Fed("kv", kv)];
        c.twin = Some(Box::new(twin));
        all.push(c);
        let mut c = Case::new(name("BNSH key and value"), "MultiHeadAttention");
        c.attrs.push(int_attr("num_heads", n as i64));
        c.inputs = vec![
            In::Fed("q", values(&[b, s, h], 1)),
            In::Fed("k", values(&[b, n, l, d], 2)),
            In::Fed("v", values(&[b, n, l, d], 3)),
        ];
        all.push(c);
        // Self attention with a cache, as a decoder runs it.
        let mut c = Case::new(name("past unidirectional"), "MultiHeadAttention");
        c.attrs.push(int_attr("num_heads", n as i64));
        c.attrs.push(int_attr("unidirectional", 1));
        c.inputs = vec![
            In::Fed("q", values(&[b, s, h], 1)),
            In::Fed("k", values(&[b, s, h], 2)),
            In::Fed("v", values(&[b, s, h], 3)),
            In::Weight("bias", values(&[3 * h], 4)),
            In::Absent,
            In::Absent,
            In::Fed("past_key", values(&[b, n, l, d], 5)),
            In::Fed("past_value", values(&[b, n, l, d], 6)),
        ];
        c.outputs = vec![
            ("y", DType::F32),
            ("present_key", DType::F32),
            ("present_value", DType::F32),
        ];
        all.push(c);
    }
}

/// `GroupQueryAttention` at two head layouts: prompt, decode, ragged decode, rotary.
fn gqa_cases(all: &mut Vec<Case>) {
    for (n, nkv, d) in [(4usize, 2usize, 16usize), (6, 1, 16)] {
        let name = |what: &str| format!("GroupQueryAttention {what} n{n} kv{nkv}");
        let step = |what: &str, b: usize, s: usize, p: usize, seqlens: Vec<i32>| {
            let total = seqlens.iter().max().copied().unwrap_or(0) + 1;
            let mut c = Case::new(name(what), "GroupQueryAttention");
            c.attrs.push(int_attr("num_heads", n as i64));
            c.attrs.push(int_attr("kv_num_heads", nkv as i64));
            c.inputs = vec![
                In::Fed("q", values(&[b, s, n * d], 1)),
                In::Fed("k", values(&[b, s, nkv * d], 2)),
                In::Fed("v", values(&[b, s, nkv * d], 3)),
                In::Fed("past_key", values(&[b, nkv, p, d], 4)),
                In::Fed("past_value", values(&[b, nkv, p, d], 5)),
                In::Fed("seqlens_k", ints(&[b], seqlens)),
                In::Fed("total", ints(&[], vec![total])),
            ];
            c.outputs = vec![
                ("y", DType::F32),
                ("present_key", DType::F32),
                ("present_value", DType::F32),
            ];
            c
        };
        all.push(step("prompt", 2, 5, 0, vec![4, 4]));
        all.push(step("decode", 2, 1, 6, vec![6, 6]));
        all.push(step("ragged decode", 2, 1, 6, vec![6, 3]));
        all.push(step("subsequent prompt", 1, 3, 4, vec![6]));
        let mut c = step("local window", 1, 1, 6, vec![6]);
        c.attrs.push(int_attr("local_window_size", 3));
        all.push(c);
        for interleaved in [0, 1] {
            for (what, s, p, lens) in [("prompt", 4, 0, vec![3, 3]), ("decode", 1, 5, vec![5, 4])] {
                let mut c = step(
                    &format!("rotary {what} interleaved={interleaved}"),
                    2,
                    s,
                    p,
                    lens,
                );
                c.attrs.push(int_attr("do_rotary", 1));
                c.attrs.push(int_attr("rotary_interleaved", interleaved));
                c.inputs.push(In::Weight("cos", values(&[16, d / 2], 6)));
                c.inputs.push(In::Weight("sin", values(&[16, d / 2], 7)));
                all.push(c);
            }
        }
        let mut c = step("packed", 2, 1, 3, vec![3, 2]);
        c.inputs[0] = In::Fed("qkv", values(&[2, 1, (n + 2 * nkv) * d], 1));
        c.inputs[1] = In::Absent;
        c.inputs[2] = In::Absent;
        all.push(c);
    }
}

/// `RotaryEmbedding` on 3-D and 4-D inputs, both layouts, both position forms.
fn rotary_cases(all: &mut Vec<Case>) {
    for (b, s, n, d) in [(2usize, 5usize, 2usize, 8usize), (1, 3, 3, 4)] {
        for interleaved in [0, 1] {
            let pos2 = Tensor::from_vec(
                vec![b, s],
                (0..b * s)
                    .map(|i| ((i * 3) % 11) as i64)
                    .collect::<Vec<_>>(),
            )
            .expect("tensor");
            let pos1 = Tensor::from_vec(vec![1], vec![2i64]).expect("tensor");
            for (what, x, pos, heads, rd) in [
                ("3-D", values(&[b, s, n * d], 1), pos2.clone(), 0, 0),
                ("4-D", values(&[b, n, s, d], 1), pos1.clone(), 0, 0),
                (
                    "3-D partial",
                    values(&[b, s, n * d], 1),
                    pos1,
                    n as i64,
                    d / 2,
                ),
            ] {
                let mut c = Case::new(
                    format!("RotaryEmbedding {what} interleaved={interleaved} b{b} s{s} n{n}"),
                    "RotaryEmbedding",
                );
                let half = if rd == 0 { d / 2 } else { rd / 2 };
                c.inputs = vec![
                    In::Fed("x", x),
                    In::Fed("pos", pos),
                    In::Weight("cos", values(&[16, half], 6)),
                    In::Weight("sin", values(&[16, half], 7)),
                ];
                c.attrs.push(int_attr("interleaved", interleaved));
                if heads > 0 {
                    c.attrs.push(int_attr("num_heads", heads));
                    c.attrs.push(int_attr("rotary_embedding_dim", rd as i64));
                }
                all.push(c);
            }
        }
    }
}

/// `EmbedLayerNormalization` with and without segments, mask and positions.
fn embed_cases(all: &mut Vec<Case>) {
    for (b, s, h) in [(2usize, 5usize, 16usize), (1, 7, 8)] {
        let ids: Vec<i32> = (0..b * s).map(|i| ((i * 7) % 20) as i32).collect();
        let seg: Vec<i32> = (0..b * s).map(|i| i32::from(i % s >= s / 2)).collect();
        let mask: Vec<i32> = (0..b * s).map(|i| i32::from(i % s < s - i / s)).collect();
        for (what, segments, with_mask, positions) in [
            ("segments, mask", true, true, false),
            ("no segments", false, false, false),
            ("position_ids", true, true, true),
        ] {
            let mut c = Case::new(
                format!("EmbedLayerNormalization {what} b{b} s{s}"),
                "EmbedLayerNormalization",
            );
            c.attrs.push(float_attr("epsilon", 1e-5));
            c.inputs = vec![
                In::Fed("ids", ints(&[b, s], ids.clone())),
                if segments {
                    In::Fed("seg", ints(&[b, s], seg.clone()))
                } else {
                    In::Absent
                },
                In::Weight("word", values(&[20, h], 1)),
                In::Weight("pos", values(&[16, h], 2)),
                if segments {
                    In::Weight("segemb", values(&[2, h], 3))
                } else {
                    In::Absent
                },
                In::Weight("gamma", values(&[h], 4)),
                In::Weight("beta", values(&[h], 5)),
                if with_mask {
                    In::Fed("mask", ints(&[b, s], mask.clone()))
                } else {
                    In::Absent
                },
            ];
            if positions {
                let p: Vec<i32> = (0..s).map(|i| (s - i) as i32).collect();
                c.inputs.push(In::Fed("position_ids", ints(&[1, s], p)));
            }
            c.outputs = vec![
                ("y", DType::F32),
                ("mask_index", DType::I32),
                ("embedding_sum", DType::F32),
            ];
            all.push(c);
        }
    }
}

fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    attention_cases(&mut all);
    mha_cases(&mut all);
    gqa_cases(&mut all);
    rotary_cases(&mut all);
    embed_cases(&mut all);
    all
}

#[test]
fn contrib_attentions_load_and_run_as_onnxruntime_runs_them() {
    let cases = cases();
    let mut ort_cases = Vec::new();
    let mut ours = Vec::new();
    for c in &cases {
        let (bytes, fed) = c.model();
        let (optimised, reference) = ort_support::load_and_run_both_ways(&c.name, &bytes, &fed);
        // The attentions run as graphrw's fused attention, rotations in halves as its
        // fused rotary embedding.
        let fused = match c.op {
            "Attention" | "MultiHeadAttention" | "GroupQueryAttention" => {
                Some("scaled_dot_product_attention")
            }
            "RotaryEmbedding" if !c.name.contains("interleaved=1") => {
                Some("fused.rotary_embedding")
            }
            _ => None,
        };
        if let Some(op) = fused {
            assert!(
                optimised.op_counts().contains_key(op),
                "{}: no {op} once optimised: {:?}",
                c.name,
                optimised.op_counts()
            );
        }
        ours.push(reference);
        let (model, inputs) = match &c.twin {
            Some(twin) => twin.model(),
            None => (bytes, fed),
        };
        ort_cases.push(ort_support::Case {
            name: c.name.clone(),
            model,
            inputs,
        });
    }
    let Some(python) =
        ort_support::python_or_skip("contrib attentions are not compared to onnxruntime")
    else {
        return;
    };
    let mut failures = Vec::new();
    for ((c, got), want) in cases
        .iter()
        .zip(&ours)
        .zip(ort_support::run_all(&python, &ort_cases))
    {
        let checked = want.and_then(|want| ort_support::same_all(got, &want));
        if let Err(e) = checked {
            failures.push(format!("{}: {e}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from onnxruntime:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The message of loading `c`, which must be refused.
fn refused(c: &Case) -> String {
    let (bytes, _) = c.model();
    let msg = load_bytes(&bytes)
        .map(|_| ())
        .expect_err(&c.name)
        .to_string();
    assert_eq!(msg.lines().count(), 1, "{msg}");
    msg
}

#[test]
fn a_malformed_contrib_attention_is_refused_naming_it() {
    let mut c = Case::new("heads that do not divide", "Attention");
    c.attrs.push(int_attr("num_heads", 5));
    c.inputs = vec![
        In::Fed("x", values(&[1, 4, 8], 1)),
        In::Weight("w", values(&[8, 24], 2)),
    ];
    let msg = refused(&c);
    assert!(
        msg.contains("Attention_node") && msg.contains("qkv_hidden_sizes"),
        "{msg}"
    );

    let mut c = Case::new("no num_heads", "MultiHeadAttention");
    c.inputs = vec![In::Fed("qkv", values(&[1, 4, 2, 3, 4], 1))];
    let msg = refused(&c);
    assert!(
        msg.contains("MultiHeadAttention_node") && msg.contains("`num_heads` is required"),
        "{msg}"
    );

    let mut c = Case::new("kv heads", "GroupQueryAttention");
    c.attrs.push(int_attr("num_heads", 4));
    c.attrs.push(int_attr("kv_num_heads", 3));
    c.inputs = vec![
        In::Fed("q", values(&[1, 2, 16], 1)),
        In::Fed("k", values(&[1, 2, 12], 2)),
        In::Fed("v", values(&[1, 2, 12], 3)),
        In::Absent,
        In::Absent,
        In::Fed("seqlens_k", ints(&[1], vec![1])),
        In::Fed("total", ints(&[], vec![2])),
    ];
    let msg = refused(&c);
    assert!(
        msg.contains("GroupQueryAttention_node") && msg.contains("not a multiple of kv_num_heads"),
        "{msg}"
    );

    let mut c = Case::new("too few inputs", "EmbedLayerNormalization");
    c.inputs = vec![In::Fed("ids", ints(&[1, 2], vec![0, 1]))];
    let msg = refused(&c);
    assert!(
        msg.contains("EmbedLayerNormalization_node") && msg.contains("takes 7 to 9 inputs"),
        "{msg}"
    );

    let mut c = Case::new("cache width", "RotaryEmbedding");
    c.inputs = vec![
        In::Fed("x", values(&[1, 2, 2, 8], 1)),
        In::Fed("pos", ints(&[1, 2], vec![0, 1])),
        In::Weight("cos", values(&[4, 3], 2)),
        In::Weight("sin", values(&[4, 3], 3)),
    ];
    let msg = refused(&c);
    assert!(
        msg.contains("RotaryEmbedding_node") && msg.contains("cache width 3"),
        "{msg}"
    );
}

#[test]
fn an_unread_contrib_attention_form_passes_through() {
    let mut c = Case::new("rotary inside", "Attention");
    c.attrs.push(int_attr("num_heads", 2));
    c.attrs.push(int_attr("do_rotary", 1));
    c.inputs = vec![
        In::Fed("x", values(&[1, 4, 8], 1)),
        In::Weight("w", values(&[8, 24], 2)),
    ];
    let (bytes, _) = c.model();
    let g = load_bytes(&bytes).expect("loads, the node unread");
    assert_eq!(g.op_counts().get("opaque"), Some(&1), "{:?}", g.op_counts());
}
