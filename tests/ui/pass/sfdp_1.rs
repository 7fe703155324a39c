//! Inductor's sfdp_1, method and function syntax, and its replacement.
use graphrw::{pattern, replacement, Builder, DType, TensorMeta};

pattern! {
    /// Inductor's first SDPA pattern.
    pub fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    }

    /// The same in function syntax with keyword attributes.
    pub fn sfdp_1_fn(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        matmul(softmax(div(matmul(query, transpose(key, dim0 = -2, dim1 = -1)), inv_scale), dim = -1), value)
    }
}

replacement! {
    /// One fused node.
    pub fn sfdp_1_fused(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor for sfdp_1 {
        query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(1.0 / inv_scale), false)?
    }
}

fn main() {
    let g = Builder::new();
    let m = TensorMeta::new(DType::F32, [1usize, 4, 16, 8]);
    let q = g.input("q", m.clone());
    let k = g.input("k", m.clone());
    let v = g.input("v", m);
    let out = q.matmul(k.transpose(-2, -1).unwrap()).unwrap().div(8.0).unwrap().softmax(-1).unwrap().matmul(v).unwrap();
    g.output(&[out]).unwrap();
    let graph = g.finish();
    assert_eq!(sfdp_1::PATTERN.find(&graph).len(), 1);
    assert_eq!(sfdp_1_fn::PATTERN.find(&graph).len(), 1);
    let _ = sfdp_1_fused;
}
