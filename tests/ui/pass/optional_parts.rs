//! Optional parts: `x.op(a?)` and `opt(x, |t| ..)` bind `Option<..>`, and a replacement
//! sees `Option<Var>` / `Option<f64>`.
use graphrw::{pattern, replacement, rule_set, Builder, DType, TensorMeta};

pattern! {
    fn attn(q: Tensor, kt: Tensor, v: Tensor, s: Option<f64>, mask: Option<Tensor>) -> Tensor {
        let p = q.matmul(kt).mul(s?).add(mask?).softmax(-1);
        opt(p, |p| p.isnan().where_(0.0, p)).matmul(v)
    }
}

replacement! {
    fn fused(q: Tensor, kt: Tensor, v: Tensor, s: Option<f64>, mask: Option<Tensor>) -> Tensor for attn {
        q.scaled_dot_product_attention_with(kt.transpose(-2, -1)?, v, mask, 0.0, false, s, false)?
    }
}

rule_set! {
    static RULES;

    rule scaled(x: Tensor, s: Option<f64>) -> Tensor {
        x.relu().mul(s?).neg()
    } => {
        x.relu()?.mul(s.unwrap_or(1.0))?.neg()?
    }
}

fn main() {
    let g = Builder::new();
    let m = TensorMeta::new(DType::F32, vec![graphrw::Dim::from(2usize), graphrw::Dim::from(2usize)]);
    let x = g.input("x", m);
    let y = x.relu().unwrap().neg().unwrap();
    g.output(&[y]).unwrap();
    let graph = g.finish();
    let ms = scaled::PATTERN.find(&graph);
    assert_eq!(ms.len(), 1);
    let m: scaled::Match = ms[0].typed();
    assert_eq!(m.s, None);
    let m: Option<attn::Match> = None;
    let _: Option<Option<graphrw::Value>> = m.map(|m| m.mask);
    let _ = (fused, &RULES);
}
