//! Fused kernels: one pass over their inputs where the unfused graph would materialise
//! intermediates.
//!
//! - [`sdpa()`](fn@sdpa): scaled dot-product attention, blocked with an online softmax
//!   (flash-attention style), so its extra memory is a few tiles per thread instead of
//!   the `Sq x Skv` score matrix the reference [`crate::cpu::sdpa_reference`] builds.

pub mod sdpa;

pub use sdpa::{sdpa, FullyMaskedRows, SdpaOptions};
