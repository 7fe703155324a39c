//! AVX-512 micro-kernels of the packed path (`packed512.rs`): the scores `S^T = K Q^T`
//! and the values `O = alpha * O + P V`, in f32 (AVX-512F FMAs) and in bf16 (AVX-512
//! BF16 `vdpbf16ps`: two bf16 products per f32 lane, accumulated in f32), and the
//! online-softmax step on 16 columns at a time.
//!
//! With 32 `zmm` registers a micro-tile holds `8 x 48` f32 results (24 accumulators):
//! each step of the scores loads up to three 16-column query vectors and broadcasts 8
//! key elements, each step of the values loads up to three 16-column value vectors and
//! broadcasts 8 probabilities.
//! Rows are always full: keys come in panels of [`MR`] = 8 (the key block is a
//! multiple of 8), query rows in the 16-padded block; only the width (1 to 3 vectors)
//! varies.
//!
//! The bf16 layouts hold pairs along the reduction dimension, so each 32-bit lane is one
//! pair: keys `[Skv/8][D/2][8][2]` (broadcast operand), queries `[Bq/16][D/2][16][2]`,
//! values `[Dv/16][Skv/2][16][2]`, probabilities `[Bk/2][Bq][2]` (broadcast operand).
//! An odd last pair has a zero second element (keys, queries) or, for the values,
//! is loaded with its second half masked to zero, so a value past the block (which
//! the padded probability 0 multiplies) never matters even if it is not finite.
//!
//! The tile functions check every slice length once, at entry, with real assertions;
//! the micro-kernels then read through raw pointers within those bounds.
//!
//! The depth loops come in two forms, chosen by measurement (`choice.rs`): the
//! intrinsics, whose broadcasts LLVM places (rustc 1.95 folds them into the FMA as an
//! embedded `{1to16}` where one FMA reads each, one vector wide, and broadcasts into a
//! register where two or three do), and `in_register`'s `asm`, each broadcast into a
//! register once at every width, two steps a pass.
//!
//! Modules: `scores` (score micro-kernels and the fused softmax pass), `values` (value
//! micro-kernels), `in_register` (the register-broadcast depth loops), `pairs` (bf16
//! pair packing), `exp` (16-lane exponentials).

pub(crate) mod exp;
mod in_register;
mod pairs;
mod scores;
#[cfg(test)]
mod tests;
mod values;

#[cfg(test)]
use std::arch::x86_64::*;
// The siblings' helpers, for one another (and the tests).
pub(super) use pairs::{pack_row_pairs, pack_value_pairs, probs_to_pairs};
pub(super) use scores::{scores, scores_softmax, Operands};
pub(super) use values::{values, ValueOperands};
#[allow(unused_imports)]
use {exp::*, in_register::*, pairs::*, scores::*, values::*};

/// Keys per key panel (rows of a score micro-tile) and query rows per value
/// micro-tile.
pub(super) const MR: usize = 8;
/// Columns per panel: one 16-lane vector.
pub(super) const NR: usize = 16;
/// Whether the CPU has the target features every function here is compiled with,
/// and so needs: AVX-512F, AVX-512BW and AVX-512 BF16. The f32 kernels use only
/// AVX-512F, but one set keeps the contract simple (Zen 4, Sapphire Rapids and Cooper
/// Lake have all three; Skylake-X and Ice Lake, without BF16, run the AVX2 path).
pub(super) fn available() -> bool {
    let f = crate::cpu::CpuFeatures::get();
    f.avx512f && f.avx512bw && f.avx512bf16
}
/// Most 16-column vectors a micro-tile spans (24 accumulators with 8 rows).
pub(super) const MAXW: usize = 3;

/// Splits `n` panels into groups of at most [`MAXW`], as even as possible (4 panels:
/// 2 + 2, not 3 + 1, so no group runs the narrowest micro-tile when it need not):
/// yields `(first panel, panels)`.
pub(super) fn groups(n: usize) -> impl Iterator<Item = (usize, usize)> {
    let count = n.div_ceil(MAXW);
    (0..count).map(move |g| {
        // Group `g` starts after `g` groups of the even split.
        let start = g * n / count;
        (start, (g + 1) * n / count - start)
    })
}
