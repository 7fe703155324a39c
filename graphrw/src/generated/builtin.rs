//! The built-in fused kernels, chosen from what exported transformers compute in
//! decomposed form. Each body lists, as `|` alternatives, the orderings exporters and
//! model authors write (checked at compile time to be the same function); `#[matches]`
//! adds forms built from composite ops (`layer_norm`, `softmax`).
//!
//! Rotary position embedding (`fused.rotary_embedding`) uses the one non-elementwise
//! read of the language, `x.rotate_half()` (`concat([neg(x[.., d/2:]), x[.., :d/2]], -1)`
//! over the last dimension `d`): its kernel runs a row at a time and reads `x` at
//! positions rotated by half a row, for even `d` with `x` spanning the row (other nodes
//! run their decomposition); its rule matches the `slice`/`neg`/`concat` chain as
//! exporters write it (axis `-1` or `rank - 1`, any bound spelling).

use crate::fused_kernel;

use super::FusedKernel;

fused_kernel! {
    /// GELU, erf form: `x * 0.5 * (1 + erf(x / sqrt(2)))`.
    #[op = "fused.gelu_erf"]
    #[grad]
    pub fn gelu_erf(x: Tensor) -> Tensor {
        let e = (x.div(1.4142135623730951) | x.mul(0.7071067811865476)).erf().add(1.0);
        x.mul(0.5).mul(e) | x.mul(e.mul(0.5)) | x.mul(e).mul(0.5)
    }

    /// GELU, tanh form: `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`.
    #[op = "fused.gelu_tanh"]
    #[grad]
    pub fn gelu_tanh(x: Tensor) -> Tensor {
        let inner = x.add((x.pow(3.0) | x.mul(x).mul(x)).mul(0.044715)).mul(0.7978845608028654);
        let t = inner.tanh().add(1.0);
        x.mul(0.5).mul(t) | x.mul(t.mul(0.5)) | x.mul(t).mul(0.5)
    }

    /// Bias + GELU (erf form): `gelu(x + bias)`.
    #[op = "fused.bias_gelu"]
    #[grad]
    pub fn bias_gelu(x: Tensor, bias: Tensor) -> Tensor {
        let h = x.add(bias);
        let e = (h.div(1.4142135623730951) | h.mul(0.7071067811865476)).erf().add(1.0);
        h.mul(0.5).mul(e) | h.mul(e.mul(0.5)) | h.mul(e).mul(0.5)
    }

    /// SwiGLU: `silu(gate) * up`.
    #[op = "fused.swiglu"]
    #[grad]
    pub fn swiglu(gate: Tensor, up: Tensor) -> Tensor {
        (gate.mul(gate.sigmoid()) | gate.silu()).mul(up)
    }

    /// RMSNorm over the last dimension: `weight * x / sqrt(mean(x^2) + eps)`.
    #[op = "fused.rms_norm"]
    #[grad]
    pub fn rms_norm(x: Tensor, weight: Tensor, eps: f64) -> Tensor {
        let ms = (x.pow(2.0) | x.mul(x)).mean(dims = [-1], keepdim = true).add(eps);
        let r = ms.sqrt().reciprocal() | ms.rsqrt();
        x.mul(r).mul(weight) | x.div(ms.sqrt()).mul(weight)
    }

    /// LayerNorm over the last dimension with weight and bias.
    #[op = "fused.layer_norm"]
    #[grad]
    #[matches(x.layer_norm(weight, bias, axis = -1, eps = eps))]
    pub fn layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: f64) -> Tensor {
        let d = x.sub(x.mean(dims = [-1], keepdim = true));
        let var = (d.pow(2.0) | d.mul(d)).mean(dims = [-1], keepdim = true).add(eps);
        (d.mul(var.rsqrt()) | d.div(var.sqrt())).mul(weight).add(bias)
    }

    /// Softmax over the last dimension of `x * scale + mask` (an additive mask).
    #[op = "fused.softmax_scale_mask"]
    #[grad]
    #[matches(x.mul(scale).add(mask).softmax(dim = -1))]
    pub fn softmax_scale_mask(x: Tensor, mask: Tensor, scale: f64) -> Tensor {
        let y = x.mul(scale).add(mask);
        let e = y.sub(y.amax(dims = [-1], keepdim = true)).exp();
        e.div(e.sum(dims = [-1], keepdim = true))
    }

    /// Rotary position embedding, rotate-half form (Llama, GPT-NeoX):
    /// `x * cos + rotate_half(x) * sin` over the last dimension (`cos`/`sin` broadcast,
    /// e.g. `[1, 1, S, D]` against `x` of `[B, H, S, D]`).
    #[op = "fused.rotary_embedding"]
    #[grad]
    pub fn rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor {
        x.mul(cos).add(x.rotate_half().mul(sin))
    }

    /// Residual add + RMSNorm: `rms_norm(x + residual)` (the sum must have no other user).
    #[op = "fused.add_rms_norm"]
    #[grad]
    pub fn add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: f64) -> Tensor {
        let h = x.add(residual);
        let ms = (h.pow(2.0) | h.mul(h)).mean(dims = [-1], keepdim = true).add(eps);
        let r = ms.sqrt().reciprocal() | ms.rsqrt();
        h.mul(r).mul(weight) | h.div(ms.sqrt()).mul(weight)
    }

    /// Residual add + LayerNorm: `layer_norm(x + residual)` (the sum must have no other user).
    #[op = "fused.add_layer_norm"]
    #[grad]
    #[matches(x.add(residual).layer_norm(weight, bias, axis = -1, eps = eps))]
    pub fn add_layer_norm(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: f64) -> Tensor {
        let h = x.add(residual);
        let d = h.sub(h.mean(dims = [-1], keepdim = true));
        let var = (d.pow(2.0) | d.mul(d)).mean(dims = [-1], keepdim = true).add(eps);
        (d.mul(var.rsqrt()) | d.div(var.sqrt())).mul(weight).add(bias)
    }
}

/// Every built-in kernel.
pub static ALL: &[&FusedKernel] = &[
    &gelu_erf::KERNEL,
    &gelu_tanh::KERNEL,
    &bias_gelu::KERNEL,
    &swiglu::KERNEL,
    &rms_norm::KERNEL,
    &layer_norm::KERNEL,
    &softmax_scale_mask::KERNEL,
    &add_rms_norm::KERNEL,
    &add_layer_norm::KERNEL,
    &rotary_embedding::KERNEL,
];
