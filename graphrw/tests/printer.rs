//! Golden test of the printer on a two-layer attention block, and DOT export.

use std::collections::BTreeSet;

use graphrw::{verify, Builder, DType, GraphError, Shape, TensorMeta, Var};

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

/// One attention layer: q/k/v projections, heads split, scaled scores, softmax,
/// weighted values, heads merged, output projection and residual.
fn attention_layer<'b>(b: &'b Builder, x: Var<'b>, layer: usize) -> Result<Var<'b>, GraphError> {
    let w = |name: &str| b.input(&format!("l{layer}_{name}"), f32s(&[32, 32]));
    let heads = |t: Var<'b>| t.reshape(&[1, 8, 4, 8])?.transpose(1, 2);
    let q = heads(x.matmul(w("wq"))?)?;
    let k = heads(x.matmul(w("wk"))?)?;
    let v = heads(x.matmul(w("wv"))?)?;
    let scores = q.matmul(k.transpose(-2, -1)?)?.div(8f64.sqrt())?;
    let attn = scores.softmax(-1)?.matmul(v)?;
    let merged = attn.transpose(1, 2)?.reshape(&[1, 8, 32])?;
    merged.matmul(w("wo"))?.add(x)
}

fn two_layers() -> graphrw::Graph {
    let b = Builder::new();
    let x = b.input("x", f32s(&[1, 8, 32]));
    let h = attention_layer(&b, x, 0).unwrap();
    let out = attention_layer(&b, h, 1).unwrap();
    b.output(&[out]).unwrap();
    b.finish()
}

const GOLDEN: &str = "\
graph(x: f32[1, 8, 32], l0_wq: f32[32, 32], l0_wk: f32[32, 32], l0_wv: f32[32, 32], l0_wo: f32[32, 32], l1_wq: f32[32, 32], l1_wk: f32[32, 32], l1_wv: f32[32, 32], l1_wo: f32[32, 32]) {
  t0 = matmul(x, l0_wq)  # f32[1, 8, 32]
  t1 = reshape(t0, shape=[1, 8, 4, 8])  # f32[1, 8, 4, 8]
  t2 = transpose(t1, dim0=1, dim1=2)  # f32[1, 4, 8, 8]
  t3 = matmul(x, l0_wk)  # f32[1, 8, 32]
  t4 = reshape(t3, shape=[1, 8, 4, 8])  # f32[1, 8, 4, 8]
  t5 = transpose(t4, dim0=1, dim1=2)  # f32[1, 4, 8, 8]
  t6 = matmul(x, l0_wv)  # f32[1, 8, 32]
  t7 = reshape(t6, shape=[1, 8, 4, 8])  # f32[1, 8, 4, 8]
  t8 = transpose(t7, dim0=1, dim1=2)  # f32[1, 4, 8, 8]
  t9 = transpose(t5, dim0=-2, dim1=-1)  # f32[1, 4, 8, 8]
  t10 = matmul(t2, t9)  # f32[1, 4, 8, 8]
  c0 = constant(2.828427)  # f32[]
  t11 = div(t10, c0)  # f32[1, 4, 8, 8]
  t12 = softmax(t11, dim=-1)  # f32[1, 4, 8, 8]
  t13 = matmul(t12, t8)  # f32[1, 4, 8, 8]
  t14 = transpose(t13, dim0=1, dim1=2)  # f32[1, 8, 4, 8]
  t15 = reshape(t14, shape=[1, 8, 32])  # f32[1, 8, 32]
  t16 = matmul(t15, l0_wo)  # f32[1, 8, 32]
  t17 = add(t16, x)  # f32[1, 8, 32]
  t18 = matmul(t17, l1_wq)  # f32[1, 8, 32]
  t19 = reshape(t18, shape=[1, 8, 4, 8])  # f32[1, 8, 4, 8]
  t20 = transpose(t19, dim0=1, dim1=2)  # f32[1, 4, 8, 8]
  t21 = matmul(t17, l1_wk)  # f32[1, 8, 32]
  t22 = reshape(t21, shape=[1, 8, 4, 8])  # f32[1, 8, 4, 8]
  t23 = transpose(t22, dim0=1, dim1=2)  # f32[1, 4, 8, 8]
  t24 = matmul(t17, l1_wv)  # f32[1, 8, 32]
  t25 = reshape(t24, shape=[1, 8, 4, 8])  # f32[1, 8, 4, 8]
  t26 = transpose(t25, dim0=1, dim1=2)  # f32[1, 4, 8, 8]
  t27 = transpose(t23, dim0=-2, dim1=-1)  # f32[1, 4, 8, 8]
  t28 = matmul(t20, t27)  # f32[1, 4, 8, 8]
  c1 = constant(2.828427)  # f32[]
  t29 = div(t28, c1)  # f32[1, 4, 8, 8]
  t30 = softmax(t29, dim=-1)  # f32[1, 4, 8, 8]
  t31 = matmul(t30, t26)  # f32[1, 4, 8, 8]
  t32 = transpose(t31, dim0=1, dim1=2)  # f32[1, 8, 4, 8]
  t33 = reshape(t32, shape=[1, 8, 32])  # f32[1, 8, 32]
  t34 = matmul(t33, l1_wo)  # f32[1, 8, 32]
  t35 = add(t34, t17)  # f32[1, 8, 32]
  return t35
}
";

#[test]
fn prints_a_two_layer_attention_block() {
    let g = two_layers();
    verify(&g).unwrap();
    let text = g.to_string();
    if text != GOLDEN {
        panic!("printer output changed:\n{text}");
    }
}

#[test]
fn dot_highlights_nodes() {
    let g = two_layers();
    let softmax: BTreeSet<_> = g.nodes_with_op("softmax").collect();
    assert_eq!(softmax.len(), 2);
    let dot = graphrw::dot::to_dot(&g, &softmax);
    assert!(dot.starts_with("digraph graphrw {"));
    assert_eq!(dot.matches("fillcolor=orange").count(), 2);
    assert!(dot.contains("softmax"));
}

/// A constant prints as its dtype writes it (`1` for an i64, `true` for a bool, an f32
/// at f32 precision), and a float attribute that is an f32 widened at f32 precision.
#[test]
fn constants_and_float_attributes_print_at_their_own_precision() {
    use graphrw::ops::AttrValue;
    use graphrw::Tensor;
    let b = Builder::new();
    let x = b.input("x", f32s(&[2]));
    let one = b.constant(Tensor::full(DType::I64, &[], 1.0));
    let yes = b.constant(Tensor::full(DType::Bool, &[], 1.0));
    let k = b.constant(Tensor::full(DType::F32, &[], f64::from(1.702f32)));
    let wide = b.constant(Tensor::full(DType::F64, &[], 0.1));
    let y = x.mul(k).unwrap();
    let mask = b.input("mask", TensorMeta::new(DType::Bool, Shape::known(&[2])));
    let filled = b
        .apply(
            &graphrw::ops::builtin::MASKED_FILL,
            &[y.value(), mask.value()],
            &[("value", AttrValue::Float(f64::from(-3.4028235e38f32)))],
        )
        .unwrap();
    b.output(&[b.var(filled[0]), one, yes, wide]).unwrap();
    let text = b.finish().to_string();
    for want in [
        "= constant(1)  # i64[]",
        "= constant(true)  # bool[]",
        "= constant(1.702)  # f32[]",
        "= constant(0.1)  # f64[]",
        "masked_fill(t0, mask, value=-3.4028235e38)",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
}
