//! Register-blocked AVX2+FMA micro-kernels for the two products of a tile, in f32:
//! the scores `S^T = K Q^T` and the values `O = alpha * O + P V`.
//!
//! Both are the broadcast-and-FMA kernels of BLIS-style GEMMs: a `6 x 16` block of the
//! result lives in 12 `ymm` accumulators for the whole contraction, each step loads two
//! vectors (16 contiguous floats) and broadcasts six scalars, and does 12 FMAs. With two
//! more registers for the loaded vectors and one for the broadcast, that is 15 of the 16
//! `ymm` registers, so nothing spills (the auto-vectorised version of the same tile,
//! written with arrays, did spill: see the module docs of `super`).
//!
//! The tile functions check every slice length once, at entry, with real assertions;
//! the micro-kernels then read through raw pointers within those bounds.
//!
//! Modules: `inplace` (the tiles of the in-place path), `packed` (the packed path's),
//! `softmax` (the online-softmax step and its exponentials).

mod inplace;
mod packed;
mod softmax;
#[cfg(test)]
pub(super) mod tests;

pub(super) use inplace::{scores_tile, values_tile};
pub(super) use packed::{scores_packed, scores_softmax_packed, values_packed};
pub(super) use softmax::{exp8, exp8_shifted, softmax_update};
#[cfg(test)]
use std::arch::x86_64::*;
// The siblings' helpers, for one another (and the tests).
#[allow(unused_imports)]
use {inplace::*, packed::*, softmax::*};

/// Rows of a micro-tile (keys for the scores, query rows for the values).
pub(super) const MR: usize = 6;
/// Columns of a micro-tile: two 8-lane vectors.
pub(super) const NR: usize = 16;
