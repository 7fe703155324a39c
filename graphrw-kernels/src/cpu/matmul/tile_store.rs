//! [`TileStore`]: what a GEMM does with each tile of its result as it stores it. Shared
//! by the products here and the packed-weight kernels (`cpu::packed_gemm`), so that
//! neither reads the other for it.

use super::activation::Activation;
use super::broadcast::Broadcast;
use crate::cpu::Isa;

/// What the packed-weight GEMM does as it stores each tile of its result: add the
/// product to what the result holds, add a bias per column and a residual (no
/// pass of their own: the tile is in registers), and apply an activation (while the
/// tile is in L1).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TileStore<'a, T> {
    /// Add the product to what `c` holds (a residual written first) instead of
    /// overwriting it.
    pub(crate) accumulate: bool,
    /// Added to each row, as the first depth block's tiles are stored (instead of
    /// written into the result beforehand): a value per column of the product (its
    /// column count or more).
    pub(crate) bias: Option<&'a [T]>,
    /// Added as the first depth block's tiles are stored: a tensor laid out as the
    /// result (a residual connection), not with `accumulate`.
    pub(crate) residual: Option<&'a [T]>,
    /// Applied to each tile as its last depth block is stored (after the bias and
    /// residual), with the generated kernels' instruction set read on the calling
    /// thread ([`Gemm::activate`](super::gemm::Gemm::activate)).
    pub(crate) activation: Option<(Activation, Isa)>,
    /// How the packed AVX-512 kernel broadcasts the left operand.
    pub(crate) broadcast: Broadcast,
}
