//! Checking a product's operands and laying out its batch ([`shapes`]).

use crate::broadcast::{broadcast_shapes, broadcast_strides, Odometer};
use crate::cpu::util::{prod, same_dtype};
use crate::{DType, KernelError, Tensor};

/// A checked product: its common dtype, batch plan and output shape.
pub(super) struct Shapes {
    pub(super) dtype: DType,
    pub(super) plan: Plan,
    pub(super) out_shape: Vec<usize>,
}

/// Validates the operands of a product and lays out its batch.
pub(super) fn shapes(a: &Tensor, b: &Tensor) -> Result<Shapes, KernelError> {
    shapes_of(a, b, false)
}

/// [`shapes`] of `a @ b`, or of `a @ b^T` when `b_transposed` (`b` a matrix stored
/// `[N, K]`, read in place through its strides: see [`Plan::b_strides`]).
pub(super) fn shapes_of(a: &Tensor, b: &Tensor, b_transposed: bool) -> Result<Shapes, KernelError> {
    if b_transposed && b.rank() != 2 {
        return Err(KernelError::shape(
            "matmul",
            format!(
                "a transposed right operand must be a matrix, got {:?}",
                b.shape()
            ),
        ));
    }
    if a.rank() == 0 || b.rank() == 0 {
        return Err(KernelError::shape(
            "matmul",
            format!(
                "both operands need at least 1 dim: {:?} @ {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let dtype = same_dtype("matmul", a, b)?;
    let a_shape: Vec<usize> = if a.rank() == 1 {
        vec![1, a.shape()[0]]
    } else {
        a.shape().to_vec()
    };
    let b_shape: Vec<usize> = if b.rank() == 1 {
        vec![b.shape()[0], 1]
    } else if b_transposed {
        b.shape().iter().rev().copied().collect()
    } else {
        b.shape().to_vec()
    };
    let (ar, br) = (a_shape.len(), b_shape.len());
    let (m, k) = (a_shape[ar - 2], a_shape[ar - 1]);
    let (k2, n) = (b_shape[br - 2], b_shape[br - 1]);
    if k != k2 {
        return Err(KernelError::shape(
            "matmul",
            format!("inner dimensions differ: {:?} @ {:?}", a.shape(), b.shape()),
        ));
    }
    let (a_batch, b_batch) = (&a_shape[..ar - 2], &b_shape[..br - 2]);
    let batch = broadcast_shapes(a_batch, b_batch).ok_or_else(|| {
        KernelError::shape(
            "matmul",
            format!(
                "batch dimensions do not broadcast: {:?} @ {:?}",
                a.shape(),
                b.shape()
            ),
        )
    })?;
    // A right operand without batch (a weight): the batch of `a` is folded into its
    // rows, one tall product instead of many short ones.
    let plan = if a.rank() > 1 && prod(b_batch) == 1 {
        Plan {
            m: prod(a_batch) * m,
            k,
            n,
            offsets: vec![[0, 0]],
            ldb: if b_transposed { k } else { n },
            col0: 0,
            heads: None,
            b_transposed,
        }
    } else {
        Plan {
            m,
            k,
            n,
            offsets: batch_offsets(&batch, a_batch, b_batch, m * k, k * n),
            ldb: if b_transposed { k } else { n },
            col0: 0,
            heads: None,
            b_transposed,
        }
    };
    let mut out_shape = batch.clone();
    if a.rank() > 1 {
        out_shape.push(m);
    }
    if b.rank() > 1 {
        out_shape.push(n);
    }
    Ok(Shapes {
        dtype,
        plan,
        out_shape,
    })
}

/// The matrices of one batched product.
pub(super) struct Plan {
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) n: usize,
    /// Element offsets of each batch entry's `a` and `b` matrices.
    pub(super) offsets: Vec<[usize; 2]>,
    /// The row stride of `b`'s matrices as stored: `n`, or more when the product reads
    /// only some of `b`'s columns ([`Epilogue::columns`]); `k` for a transposed `b`.
    pub(super) ldb: usize,
    /// The first column of `b` the product reads.
    pub(super) col0: usize,
    /// `(heads, rows)` when the result is written head-major ([`Epilogue::heads`]):
    /// `rows` rows of `a` per batch entry.
    pub(super) heads: Option<(usize, usize)>,
    /// `b` is stored transposed, `[N, K]` ([`Epilogue::transposed`]): a single matrix.
    pub(super) b_transposed: bool,
}

impl Plan {
    /// The element strides `(rsb, csb)` of `b` as the product reads it: `(ldb, 1)`, or
    /// `(1, ldb)` for a transposed `b` (no copy: the GEMM reads it in place).
    pub(super) fn b_strides(&self) -> (usize, usize) {
        if self.b_transposed {
            (1, self.ldb)
        } else {
            (self.ldb, 1)
        }
    }

    /// The element offset of column `j`'s first element in a matrix of `b`.
    pub(super) fn b_column(&self, j: usize) -> usize {
        if self.b_transposed {
            j * self.ldb
        } else {
            j
        }
    }
}

/// The element offsets of the `a` and `b` matrices of every entry of `batch`.
fn batch_offsets(
    batch: &[usize],
    a_batch: &[usize],
    b_batch: &[usize],
    a_mat: usize,
    b_mat: usize,
) -> Vec<[usize; 2]> {
    let nb = prod(batch);
    let sa: Vec<usize> = broadcast_strides(a_batch, batch)
        .iter()
        .map(|s| s * a_mat)
        .collect();
    let sb: Vec<usize> = broadcast_strides(b_batch, batch)
        .iter()
        .map(|s| s * b_mat)
        .collect();
    let strides: Vec<[usize; 2]> = sa.iter().zip(&sb).map(|(&x, &y)| [x, y]).collect();
    let mut odo = Odometer::new(batch, &strides, [0, 0], 0);
    let mut out = Vec::with_capacity(nb);
    for _ in 0..nb {
        out.push(odo.offsets);
        odo.advance();
    }
    out
}
