//! Inductor's scaled-dot-product-attention patterns (`torch/_inductor/fx_passes/
//! fuse_attention.py`), written anew in graphrw's pattern language as a test of the
//! DSL's reach: each pattern matches a graph built the way its Python function
//! computes, exactly once, and not the graphs of its neighbours; several are replaced by
//! one fused node and the numbers are checked by running both graphs.

use graphrw::exec::run_reference;
use graphrw::{pattern, replacement, Builder, DType, Graph, Shape, Tensor, TensorMeta, Var};

pattern! {
    /// `q @ kᵀ / inv_scale`, softmax, `@ v`.
    pub fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    }

    /// `q @ kᵀ * scale_factor`, softmax, `@ v`.
    pub fn sfdp_2(query: Tensor, key: Tensor, value: Tensor, scale_factor: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).mul(scale_factor).softmax(-1).matmul(value)
    }

    /// 1 with dropout on the probabilities.
    pub fn sfdp_3(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64, p: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).dropout(p, _).matmul(value)
    }

    /// 2 with dropout.
    pub fn sfdp_4(query: Tensor, key: Tensor, value: Tensor, scale_factor: f64, p: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).mul(scale_factor).softmax(-1).dropout(p, _).matmul(value)
    }

    /// Scaled by `sqrt(head_dim)`, plus an additive mask.
    pub fn sfdp_5(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor, d: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(d).add(attn_mask).softmax(-1).matmul(value)
    }

    /// 5 with dropout.
    pub fn sfdp_6(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor, d: f64, p: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(d).add(attn_mask).softmax(-1).dropout(p, _).matmul(value)
    }

    /// Inputs in `[b, s, h, d]`, softmax in f32, probabilities back to f16, dropout.
    pub fn sfdp_7(query: Tensor, key: Tensor, value: Tensor, d: f64, p: f64) -> Tensor {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        q.matmul(k.transpose(-2, -1)).div(d).cast(f32).softmax(-1).dropout(p, _).cast(f16).matmul(v)
    }

    /// 7 without dropout.
    pub fn sfdp_8(query: Tensor, key: Tensor, value: Tensor, d: f64) -> Tensor {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        q.matmul(k.transpose(-2, -1)).div(d).cast(f32).softmax(-1).cast(f16).matmul(v)
    }

    /// The scale applied to q before the product, f32 softmax, no dropout.
    pub fn sfdp_10(query: Tensor, key: Tensor, value: Tensor, d: f64) -> Tensor {
        let q = query.permute([0, 2, 1, 3]).div(d);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        q.matmul(k.transpose(-2, -1)).cast(f32).softmax(-1).cast(f16).matmul(v)
    }

    /// `[b, s, h, d]` inputs, `/ inv_scale`.
    pub fn sfdp_11(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        q.matmul(k.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(v)
    }

    /// Batched 3-D `bmm` with the key permuted, dropout.
    pub fn sfdp_13(query: Tensor, key: Tensor, value: Tensor, p: f64) -> Tensor
    where rank(query) == 3
    {
        query.matmul(key.permute([0, 2, 1])).softmax(-1).dropout(p, _).matmul(value)
    }

    /// `[b, s, h, d]` inputs, `/ inv_scale`, additive mask.
    pub fn sfdp_14(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor, inv_scale: f64) -> Tensor {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        q.matmul(k.transpose(-2, -1)).div(inv_scale).add(attn_mask).softmax(-1).matmul(v)
    }

    /// A padding mask `attn_mask == 0` filled with -inf (`masked_fill`).
    pub fn sfdp_15(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor, inv_scale: f64, shape: Vec<i64>, size: Vec<i64>, fill_value: f64) -> Tensor
    where check(|fill_value| fill_value == f64::NEG_INFINITY)
    {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        let scores = q.matmul(k.transpose(-2, -1)).div(inv_scale);
        let fill = attn_mask.eq(0.0).reshape(shape).expand(size);
        scores.masked_fill(fill, fill_value).softmax(-1).matmul(v)
    }

    /// GPT-2: a boolean causal mask selects scores or the dtype's minimum; the permuted
    /// key and value are outputs too (they are the layer's cache).
    pub fn sfdp_18(query: Tensor, key: Tensor, value: Tensor, causal_mask: Tensor, d: f64, min: f64) -> (Tensor, Tensor, Tensor) {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        let w = q.matmul(k.transpose(-2, -1)).div(d);
        (causal_mask.where_(w, min).softmax(-1).matmul(v), k, v)
    }

    /// 18 plus an additive mask, single output.
    pub fn sfdp_19(query: Tensor, key: Tensor, value: Tensor, causal_mask: Tensor, attn_mask: Tensor, d: f64, min: f64) -> Tensor {
        let q = query.permute([0, 2, 1, 3]);
        let k = key.permute([0, 2, 1, 3]);
        let v = value.permute([0, 2, 1, 3]);
        let w = q.matmul(k.transpose(-2, -1)).div(d);
        causal_mask.where_(w, min).add(attn_mask).softmax(-1).matmul(v)
    }
}

replacement! {
    /// sfdp_1 as one node.
    pub fn sfdp_1_fused(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor for sfdp_1 {
        query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(1.0 / inv_scale), false)?
    }
}

replacement! {
    /// sfdp_5 as one node (the mask carried along).
    pub fn sfdp_5_fused(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor, d: f64) -> Tensor for sfdp_5 {
        query.scaled_dot_product_attention_with(key, value, Some(attn_mask), 0.0, false, Some(1.0 / d), false)?
    }
}

const B: u64 = 2;
const H: u64 = 3;
const S: u64 = 5;
const D: u64 = 4;

fn meta(dtype: DType, dims: &[u64]) -> TensorMeta {
    TensorMeta::new(dtype, Shape::known(dims))
}

/// Three inputs in `[b, h, s, d]` (or `[b, s, h, d]` when `bshd`).
fn qkv(b: &Builder, dtype: DType, bshd: bool) -> (Var<'_>, Var<'_>, Var<'_>) {
    let dims = if bshd { [B, S, H, D] } else { [B, H, S, D] };
    (
        b.input("query", meta(dtype, &dims)),
        b.input("key", meta(dtype, &dims)),
        b.input("value", meta(dtype, &dims)),
    )
}

fn heads(t: Var<'_>) -> Var<'_> {
    t.permute(&[0, 2, 1, 3]).unwrap()
}

/// Each graph computes what one of Inductor's pattern functions computes.
fn graphs() -> Vec<(&'static str, Graph)> {
    let sqrt_d = (D as f64).sqrt();
    let mut out = Vec::new();
    let mut add = |name: &'static str, build: &dyn Fn(&Builder)| {
        let b = Builder::new();
        build(&b);
        out.push((name, b.finish()));
    };
    add("sfdp_1", &|b| {
        let (q, k, v) = qkv(b, DType::F32, false);
        let o = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .div(2.0)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .matmul(v)
            .unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_2", &|b| {
        let (q, k, v) = qkv(b, DType::F32, false);
        let o = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .mul(0.5)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .matmul(v)
            .unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_3", &|b| {
        let (q, k, v) = qkv(b, DType::F32, false);
        let p = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .div(2.0)
            .unwrap()
            .softmax(-1)
            .unwrap();
        let o = p.dropout_with(0.1, false).unwrap().matmul(v).unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_4", &|b| {
        let (q, k, v) = qkv(b, DType::F32, false);
        let p = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .mul(0.5)
            .unwrap()
            .softmax(-1)
            .unwrap();
        let o = p.dropout_with(0.1, false).unwrap().matmul(v).unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_6", &|b| {
        let (q, k, v) = qkv(b, DType::F32, false);
        let mask = b.input("attn_mask", meta(DType::F32, &[B, 1, 1, S]));
        let s = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .div(sqrt_d)
            .unwrap();
        let p = s.add(mask).unwrap().softmax(-1).unwrap();
        let o = p.dropout_with(0.1, false).unwrap().matmul(v).unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_7", &|b| {
        let (q, k, v) = qkv(b, DType::F16, true);
        let s = heads(q)
            .matmul(heads(k).transpose(-2, -1).unwrap())
            .unwrap()
            .div(sqrt_d)
            .unwrap();
        let p = s
            .cast(DType::F32)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .dropout_with(0.1, false)
            .unwrap()
            .cast(DType::F16)
            .unwrap();
        b.output(&[p.matmul(heads(v)).unwrap()]).unwrap();
    });
    add("sfdp_14", &|b| {
        let (q, k, v) = qkv(b, DType::F32, true);
        let mask = b.input("attn_mask", meta(DType::F32, &[B, 1, 1, S]));
        let s = heads(q)
            .matmul(heads(k).transpose(-2, -1).unwrap())
            .unwrap()
            .div(2.0)
            .unwrap();
        let o = s
            .add(mask)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .matmul(heads(v))
            .unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_5", &|b| {
        let (q, k, v) = qkv(b, DType::F32, false);
        let mask = b.input("attn_mask", meta(DType::F32, &[B, 1, 1, S]));
        let s = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .div(sqrt_d)
            .unwrap();
        let o = s.add(mask).unwrap().softmax(-1).unwrap().matmul(v).unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_8", &|b| {
        let (q, k, v) = qkv(b, DType::F16, true);
        let s = heads(q)
            .matmul(heads(k).transpose(-2, -1).unwrap())
            .unwrap()
            .div(sqrt_d)
            .unwrap();
        let p = s
            .cast(DType::F32)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .cast(DType::F16)
            .unwrap();
        b.output(&[p.matmul(heads(v)).unwrap()]).unwrap();
    });
    add("sfdp_10", &|b| {
        let (q, k, v) = qkv(b, DType::F16, true);
        let q = heads(q).div(sqrt_d).unwrap();
        let s = q.matmul(heads(k).transpose(-2, -1).unwrap()).unwrap();
        let p = s
            .cast(DType::F32)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .cast(DType::F16)
            .unwrap();
        b.output(&[p.matmul(heads(v)).unwrap()]).unwrap();
    });
    add("sfdp_11", &|b| {
        let (q, k, v) = qkv(b, DType::F32, true);
        let s = heads(q)
            .matmul(heads(k).transpose(-2, -1).unwrap())
            .unwrap()
            .div(2.0)
            .unwrap();
        b.output(&[s.softmax(-1).unwrap().matmul(heads(v)).unwrap()])
            .unwrap();
    });
    add("sfdp_13", &|b| {
        let m = meta(DType::F32, &[B * H, S, D]);
        let (q, k, v) = (
            b.input("query", m.clone()),
            b.input("key", m.clone()),
            b.input("value", m),
        );
        let p = q
            .matmul(k.permute(&[0, 2, 1]).unwrap())
            .unwrap()
            .softmax(-1)
            .unwrap();
        b.output(&[p.dropout_with(0.1, false).unwrap().matmul(v).unwrap()])
            .unwrap();
    });
    add("sfdp_15", &|b| {
        let (q, k, v) = qkv(b, DType::F32, true);
        let mask = b.input("attn_mask", meta(DType::F32, &[B, S]));
        let scores = heads(q)
            .matmul(heads(k).transpose(-2, -1).unwrap())
            .unwrap()
            .div(2.0)
            .unwrap();
        let fill = mask
            .eq(0.0)
            .unwrap()
            .reshape(&[B as i64, 1, 1, S as i64])
            .unwrap();
        let fill = fill
            .expand(&[B as i64, H as i64, S as i64, S as i64])
            .unwrap();
        let o = scores
            .masked_fill(fill, f64::NEG_INFINITY)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .matmul(heads(v))
            .unwrap();
        b.output(&[o]).unwrap();
    });
    add("sfdp_18", &|b| {
        let (q, k, v) = qkv(b, DType::F32, true);
        let causal = b.input("causal_mask", meta(DType::Bool, &[1, 1, S, S]));
        let (k, v) = (heads(k), heads(v));
        let w = heads(q)
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .div(sqrt_d)
            .unwrap();
        let o = causal
            .where_(w, f32::MIN as f64)
            .unwrap()
            .softmax(-1)
            .unwrap()
            .matmul(v)
            .unwrap();
        b.output(&[o, k, v]).unwrap();
    });
    add("sfdp_19", &|b| {
        let (q, k, v) = qkv(b, DType::F32, true);
        let causal = b.input("causal_mask", meta(DType::Bool, &[1, 1, S, S]));
        let mask = b.input("attn_mask", meta(DType::F32, &[B, 1, 1, S]));
        let w = heads(q)
            .matmul(heads(k).transpose(-2, -1).unwrap())
            .unwrap()
            .div(sqrt_d)
            .unwrap();
        let w = causal
            .where_(w, f32::MIN as f64)
            .unwrap()
            .add(mask)
            .unwrap();
        b.output(&[w.softmax(-1).unwrap().matmul(heads(v)).unwrap()])
            .unwrap();
    });
    out
}

fn count(p: &'static graphrw::Pattern, g: &Graph) -> usize {
    p.find(g).len()
}

#[test]
fn each_pattern_matches_its_own_graph_once() {
    let gs = graphs();
    let get = |name: &str| &gs.iter().find(|(n, _)| *n == name).expect("graph").1;
    assert_eq!(count(&sfdp_1::PATTERN, get("sfdp_1")), 1);
    assert_eq!(count(&sfdp_2::PATTERN, get("sfdp_2")), 1);
    assert_eq!(count(&sfdp_3::PATTERN, get("sfdp_3")), 1);
    assert_eq!(count(&sfdp_4::PATTERN, get("sfdp_4")), 1);
    assert_eq!(count(&sfdp_5::PATTERN, get("sfdp_5")), 1);
    assert_eq!(count(&sfdp_6::PATTERN, get("sfdp_6")), 1);
    assert_eq!(count(&sfdp_7::PATTERN, get("sfdp_7")), 1);
    assert_eq!(count(&sfdp_8::PATTERN, get("sfdp_8")), 1);
    assert_eq!(count(&sfdp_10::PATTERN, get("sfdp_10")), 1);
    assert_eq!(count(&sfdp_11::PATTERN, get("sfdp_11")), 1);
    assert_eq!(count(&sfdp_14::PATTERN, get("sfdp_14")), 1);
    assert_eq!(count(&sfdp_13::PATTERN, get("sfdp_13")), 1);
    assert_eq!(count(&sfdp_15::PATTERN, get("sfdp_15")), 1);
    assert_eq!(count(&sfdp_18::PATTERN, get("sfdp_18")), 1);
    assert_eq!(count(&sfdp_19::PATTERN, get("sfdp_19")), 1);
}

#[test]
fn patterns_do_not_match_their_neighbours() {
    let gs = graphs();
    let get = |name: &str| &gs.iter().find(|(n, _)| *n == name).expect("graph").1;
    // Division is not multiplication, dropout and masks are not optional, layouts differ.
    assert_eq!(count(&sfdp_1::PATTERN, get("sfdp_2")), 0);
    assert_eq!(count(&sfdp_2::PATTERN, get("sfdp_1")), 0);
    assert_eq!(count(&sfdp_1::PATTERN, get("sfdp_3")), 0);
    assert_eq!(count(&sfdp_3::PATTERN, get("sfdp_1")), 0);
    assert_eq!(count(&sfdp_5::PATTERN, get("sfdp_1")), 0);
    assert_eq!(count(&sfdp_8::PATTERN, get("sfdp_10")), 0);
    assert_eq!(count(&sfdp_10::PATTERN, get("sfdp_8")), 0);
    assert_eq!(count(&sfdp_11::PATTERN, get("sfdp_1")), 0);
    assert_eq!(count(&sfdp_13::PATTERN, get("sfdp_3")), 0);
    assert_eq!(count(&sfdp_18::PATTERN, get("sfdp_19")), 0);
    assert_eq!(count(&sfdp_19::PATTERN, get("sfdp_18")), 0);
    // The f16 patterns cannot match f32 graphs' missing casts.
    assert_eq!(count(&sfdp_7::PATTERN, get("sfdp_11")), 0);
    assert_eq!(count(&sfdp_4::PATTERN, get("sfdp_2")), 0);
    assert_eq!(count(&sfdp_6::PATTERN, get("sfdp_5")), 0);
    assert_eq!(count(&sfdp_14::PATTERN, get("sfdp_11")), 0);
    // Dropout and masks are not optional the other way round either.
    assert_eq!(count(&sfdp_2::PATTERN, get("sfdp_4")), 0);
    assert_eq!(count(&sfdp_5::PATTERN, get("sfdp_6")), 0);
    assert_eq!(count(&sfdp_8::PATTERN, get("sfdp_7")), 0);
    assert_eq!(count(&sfdp_11::PATTERN, get("sfdp_14")), 0);
}

#[test]
fn the_multi_output_pattern_binds_the_cache_values() {
    let gs = graphs();
    let g = &gs.iter().find(|(n, _)| *n == "sfdp_18").unwrap().1;
    let m = sfdp_18::PATTERN.find(g).remove(0);
    assert_eq!(m.outputs.len(), 3);
    assert_eq!(&m.outputs[..], g.outputs());
}

fn inputs_for(g: &Graph) -> Vec<Tensor> {
    let mut seed = 7u32;
    g.inputs()
        .iter()
        .map(|&id| {
            let m = &g.node(id).unwrap().outputs()[0];
            let shape: Vec<usize> = m
                .shape
                .as_known()
                .unwrap()
                .iter()
                .map(|&d| d as usize)
                .collect();
            let n = shape.iter().product();
            let data: Vec<f32> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (seed >> 16) as f32 / 65_536.0 - 0.5
                })
                .collect();
            Tensor::from_vec(shape, data).unwrap()
        })
        .collect()
}

#[test]
fn replacements_compute_the_same() {
    for (name, rule) in [
        (
            "sfdp_1",
            graphrw::Rule::new("sfdp_1", &sfdp_1::PATTERN, sfdp_1_fused),
        ),
        (
            "sfdp_5",
            graphrw::Rule::new("sfdp_5", &sfdp_5::PATTERN, sfdp_5_fused),
        ),
    ] {
        let gs = graphs();
        let g = &gs.iter().find(|(n, _)| *n == name).unwrap().1;
        let x = inputs_for(g);
        let before = run_reference(g, &x).unwrap()[0].to_f64_vec();
        let mut fused = g.clone();
        let m = rule.pattern.find(&fused).remove(0);
        graphrw::rewrite::apply::apply(&mut fused, &m, rule.replace).unwrap();
        assert_eq!(
            fused.nodes_with_op("scaled_dot_product_attention").count(),
            1,
            "{name}"
        );
        assert_eq!(fused.nodes_with_op("softmax").count(), 0, "{name}");
        let after = run_reference(&fused, &x).unwrap()[0].to_f64_vec();
        for (a, b) in before.iter().zip(&after) {
            assert!((a - b).abs() < 1e-5, "{name}: {a} vs {b}");
        }
    }
}
