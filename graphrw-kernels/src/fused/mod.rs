//! Fused kernels: one pass over their inputs where the unfused graph would materialise
//! intermediates.
//!
//! - [`sdpa()`](fn@sdpa): scaled dot-product attention, blocked with an online softmax
//!   (flash-attention style), so its extra memory is a few tiles per thread instead of
//!   the `Sq x Skv` score matrix the reference [`crate::cpu::sdpa_reference`] builds.
//! - [`sdpa_backward::sdpa_backward`]: its gradients, recomputing the probabilities
//!   tile by tile from the row log-sum-exp.
//! - [`cross_entropy::cross_entropy`] and its backward: softmax cross-entropy in one
//!   pass per row.

pub mod cross_entropy;
pub mod sdpa;
pub mod sdpa_backward;

pub use sdpa::{sdpa, sdpa_prefix, FullyMaskedRows, SdpaOptions};
