//! Matrix multiplication with `torch.matmul` rules, on a strided GEMM: the `gemm`
//! crate (runtime-dispatched AVX2/FMA and AVX-512 micro-kernels) by default, or
//! `matrixmultiply` where it was measured to win (see [`GemmBackend::Auto`]); plus the
//! matmul with a fused epilogue (bias accumulated by the GEMM, then an activation) that
//! the planner's epilogue executor runs.

mod activation;
mod broadcast;
mod gemm;
mod product;
mod shapes;
#[cfg(test)]
mod tests;
mod tile_store;

pub(crate) use activation::activate_tile_f32;
pub use activation::Activation;
pub use broadcast::Broadcast;
pub(crate) use gemm::Gemm;
pub use gemm::GemmBackend;
use product::{float_matmul, int_matmul};
use shapes::{shapes, shapes_of};
pub(crate) use tile_store::TileStore;

use crate::cpu::util::same_dtype;
use crate::cpu::PackedWeight;
use crate::macros::dispatch_float;
use crate::{DType, KernelError, Tensor};

/// The matrix product with `torch.matmul` rules.
///
/// 1-D operands are promoted to a row (left) or column (right) and the added dim is
/// removed from the result; dims before the last two are batch dims and broadcast.
/// Both operands must share a float or integer dtype. f16/bf16 are multiplied in f32
/// with f32 accumulation; integers accumulate in i64 and wrap.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    matmul_with(a, b, GemmBackend::Auto)
}

/// [`matmul`] on a chosen GEMM backend (for benchmarks and tests; integer products
/// ignore it).
pub fn matmul_with(a: &Tensor, b: &Tensor, backend: GemmBackend) -> Result<Tensor, KernelError> {
    let p = shapes(a, b)?;
    match p.dtype {
        DType::I64 => Ok(Tensor::from_data(
            p.out_shape,
            int_matmul::<i64>(&p.plan, a, b),
        )),
        DType::I32 => Ok(Tensor::from_data(
            p.out_shape,
            int_matmul::<i32>(&p.plan, a, b),
        )),
        dt => dispatch_float!(dt, "matmul", |T| Ok(Tensor::from_data(
            p.out_shape,
            float_matmul::<T>(&p.plan, a, b, &Epilogue::default(), backend)?
        ))),
    }
}

/// `act(a @ b + bias)` in one kernel: without an activation the bias (shape `[N]`,
/// broadcast over rows) is written into the result first and the GEMM accumulates onto
/// it; with one, the bias is added in the activation's pass, which runs in place over
/// the result in parallel row blocks. On the packed-weight GEMM
/// ([`Epilogue::packed`]) both are applied as each tile is stored instead. No
/// intermediate tensor is allocated. Float dtypes only; `bias` must share `a`'s dtype.
/// Shapes follow [`matmul`]; `b` must have rank 2 or more (the bias runs along its
/// columns).
/// [`matmul_epilogue_with`] also takes a column range and a residual.
pub fn matmul_epilogue(
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    act: Activation,
    backend: GemmBackend,
) -> Result<Tensor, KernelError> {
    let epilogue = Epilogue {
        bias,
        activation: act,
        ..Epilogue::default()
    };
    matmul_epilogue_with(a, b, &epilogue, backend)
}

/// What [`matmul_epilogue_with`] does around the product `a @ b` (`Default`: nothing,
/// a plain product).
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    /// Added along the columns: shape `[N]` (or `[1, .., N]`) for `N` columns of `b`
    /// (all of them, even when [`columns`](Self::columns) picks some).
    pub bias: Option<&'a Tensor>,
    /// Applied last, elementwise.
    pub activation: Activation,
    /// Only the columns `start..end` of `b` (and of `bias`): the product with
    /// `b[.., start..end]`, read in place. A linear layer whose output is split along
    /// its last dim (a fused QKV projection) runs as one product per piece, writing
    /// each piece without a copy.
    pub columns: Option<(usize, usize)>,
    /// Added to the product (after the bias, before an activation, so only with
    /// [`Activation::Identity`]): a tensor of the result's shape and dtype. The
    /// residual connection after a projection, written into the result before the
    /// GEMM accumulates onto it instead of added by a pass of its own.
    pub residual: Option<&'a Tensor>,
    /// Write the result head-major: for `a` of shape `[.., S, K]` and `N` columns
    /// (after [`columns`](Self::columns)), the result is `[.., H, S, N / H]`, the
    /// layout `reshape(., [.., S, H, N / H]).transpose(-3, -2)` gives, which attention
    /// reads its queries, keys and values in. Each head is its own product with `N / H`
    /// columns of `b`, written in place: no transpose is copied. `b` must be a matrix
    /// (rank 2), `H` must divide `N`, and there is no residual.
    pub heads: Option<usize>,
    /// The weight `b` (with [`columns`](Self::columns)) packed beforehand
    /// ([`PackedWeight::new`]): an f32 product then runs on the packed-weight GEMM,
    /// which does not pack `b` again. Ignored where it does not pack this `b` and
    /// these columns ([`PackedWeight::packs`]) and for a batch of weights. Used for any
    /// number of rows: callers pack for products of [`PackedWeight::MIN_ROWS`] rows and
    /// more.
    pub packed: Option<&'a PackedWeight>,
    /// `b` is stored transposed: a matrix `[N, K]` whose transpose is the right
    /// operand, the product `a @ b^T` (what `matmul(a, transpose(w))` of a tied
    /// embedding asks). The GEMM reads it in place through its strides, and a packed
    /// weight must pack the transpose ([`PackedWeight::new_transposed`]); columns,
    /// heads and the bias are those of the product (rows of `b`). `b` must have rank 2.
    pub transposed: bool,
    /// How the packed AVX-512 kernel broadcasts the left operand (see [`Broadcast`]),
    /// where it runs the product.
    pub broadcast: Broadcast,
}

/// `act(a @ b[.., columns] + bias[columns] + residual)` in one kernel (see
/// [`Epilogue`]): the bias and residual are written into the result first and the
/// GEMM accumulates onto them (before an activation, the bias is added in its pass),
/// then the activation runs in place. Shapes follow
/// [`matmul`] with `b` of rank 2 or more; errors, never panics, on a bias that does not
/// run along `b`'s columns, a column range outside them, a residual of another shape
/// or dtype, or a residual with an activation.
pub fn matmul_epilogue_with(
    a: &Tensor,
    b: &Tensor,
    epilogue: &Epilogue<'_>,
    backend: GemmBackend,
) -> Result<Tensor, KernelError> {
    let op = "matmul_epilogue";
    let mut p = shapes_of(a, b, epilogue.transposed)?;
    if !p.dtype.is_float() {
        return Err(KernelError::UnsupportedDType {
            op,
            dtype: p.dtype,
            expected: "f32, f64, f16 or bf16",
        });
    }
    if let Some(bias) = epilogue.bias {
        same_dtype(op, a, bias)?;
        if b.rank() < 2
            || bias.numel() != p.plan.n
            || bias.shape().iter().rev().skip(1).any(|&d| d != 1)
        {
            return Err(KernelError::shape(
                op,
                format!(
                    "bias {:?} does not run along the {} columns of {:?} @ {:?}",
                    bias.shape(),
                    p.plan.n,
                    a.shape(),
                    b.shape()
                ),
            ));
        }
    }
    if let Some((start, end)) = epilogue.columns {
        if b.rank() < 2 || start >= end || end > p.plan.n {
            return Err(KernelError::shape(
                op,
                format!(
                    "columns {start}..{end} are not a range of the {} columns of {:?}",
                    p.plan.n,
                    b.shape()
                ),
            ));
        }
        p.plan.col0 = start;
        p.plan.n = end - start;
        if let Some(last) = p.out_shape.last_mut() {
            *last = end - start;
        }
    }
    if let Some(r) = epilogue.residual {
        same_dtype(op, a, r)?;
        if r.shape() != p.out_shape.as_slice() || epilogue.activation != Activation::Identity {
            return Err(KernelError::shape(
                op,
                format!(
                    "a residual {:?} needs the result's shape {:?} and no activation ({:?})",
                    r.shape(),
                    p.out_shape,
                    epilogue.activation
                ),
            ));
        }
    }
    if let Some(heads) = epilogue.heads {
        let n = p.plan.n;
        if heads == 0
            || !n.is_multiple_of(heads)
            || b.rank() != 2
            || a.rank() < 2
            || epilogue.residual.is_some()
        {
            return Err(KernelError::shape(
                op,
                format!(
                    "{heads} heads of the {n} columns of {:?} @ {:?} (needs a matrix `b`, \
                     `a` of rank 2 or more, heads dividing the columns, no residual)",
                    a.shape(),
                    b.shape()
                ),
            ));
        }
        let rows = a.shape()[a.rank() - 2];
        p.plan.heads = Some((heads, rows));
        let lead = a.rank() - 2;
        p.out_shape.truncate(lead);
        p.out_shape.extend([heads, rows, n / heads]);
    }
    dispatch_float!(p.dtype, op, |T| Ok(Tensor::from_data(
        p.out_shape,
        float_matmul::<T>(&p.plan, a, b, epilogue, backend)?
    )))
}
