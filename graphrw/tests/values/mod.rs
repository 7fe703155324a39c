//! Deterministic test tensors shared by the integration tests that build models.

use graphrw::Tensor;

/// An f32 tensor of `shape` with values in `[-0.5, 0.5]`, a fixed pattern per `seed`.
pub fn f32s(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| (((i + seed) * 7919 % 97) as f32 - 48.0) / 96.0)
        .collect();
    Tensor::from_vec(shape.to_vec(), data).expect("tensor")
}

/// The additive causal mask of `s` tokens, `[s, s]`: 0 on and below the diagonal,
/// -inf above.
pub fn causal_mask(s: usize) -> Tensor {
    let mask: Vec<f32> = (0..s * s)
        .map(|i| {
            if i % s > i / s {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(vec![s, s], mask).expect("mask")
}
