//! Matrix multiplication with `torch.matmul` rules, on `matrixmultiply`'s strided GEMM.

use rayon::prelude::*;

use crate::broadcast::{broadcast_shapes, broadcast_strides, Odometer};
use crate::cpu::util::{prod, same_dtype};
use crate::macros::dispatch_float;
use crate::{DType, Element, IntElement, KernelError, Real, Tensor};

/// Per-matrix work (`m * k * n`) below which a batched matmul runs its matrices in
/// parallel with rayon rather than relying on matrixmultiply's own threading.
const SMALL_GEMM: usize = 1 << 21;

/// A float type with a strided GEMM: `c = a @ b` for row-major contiguous `c` (`m x n`)
/// and `a` (`m x k`), `b` (`k x n`) read through element strides, so transposed
/// operands need no copy.
pub(crate) trait Gemm: Real {
    /// `c[i * n + j] = sum_p a[i * rsa + p * csa] * b[p * rsb + j * csb]`.
    ///
    /// Panics (an internal bug, never input-dependent) when a stride walks outside a slice.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: &[Self],
        rsa: usize,
        csa: usize,
        b: &[Self],
        rsb: usize,
        csb: usize,
        c: &mut [Self],
    );
}

/// Checks that the strided `rows x cols` view fits in `len` elements.
fn fits(len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < len
}

macro_rules! impl_gemm {
    ($t:ty, $f:path) => {
        impl Gemm for $t {
            fn gemm(
                m: usize,
                k: usize,
                n: usize,
                a: &[Self],
                rsa: usize,
                csa: usize,
                b: &[Self],
                rsb: usize,
                csb: usize,
                c: &mut [Self],
            ) {
                assert!(
                    fits(a.len(), m, k, rsa, csa)
                        && fits(b.len(), k, n, rsb, csb)
                        && c.len() >= m * n
                );
                if m == 0 || n == 0 {
                    return;
                }
                if k == 0 {
                    c[..m * n].fill(0.0);
                    return;
                }
                // SAFETY: the assert above bounds every element the strides reach inside
                // `a`, `b` (read) and `c` (written, exclusively borrowed); strides are
                // small enough to be `isize` since they index live slices.
                unsafe {
                    $f(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        rsa as isize,
                        csa as isize,
                        b.as_ptr(),
                        rsb as isize,
                        csb as isize,
                        0.0,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                }
            }
        }
    };
}

impl_gemm!(f32, matrixmultiply::sgemm);
impl_gemm!(f64, matrixmultiply::dgemm);

/// The matrix product with `torch.matmul` rules.
///
/// 1-D operands are promoted to a row (left) or column (right) and the added dim is
/// removed from the result; dims before the last two are batch dims and broadcast.
/// Both operands must share a float or integer dtype. f16/bf16 are multiplied in f32
/// with f32 accumulation; integers accumulate in i64 and wrap.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
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
    let plan = Plan {
        m,
        k,
        n,
        offsets: batch_offsets(&batch, a_batch, b_batch, m * k, k * n),
    };
    let mut out_shape = batch.clone();
    if a.rank() > 1 {
        out_shape.push(m);
    }
    if b.rank() > 1 {
        out_shape.push(n);
    }
    match dtype {
        DType::I64 => Ok(Tensor::from_data(out_shape, int_matmul::<i64>(&plan, a, b))),
        DType::I32 => Ok(Tensor::from_data(out_shape, int_matmul::<i32>(&plan, a, b))),
        dt => dispatch_float!(dt, "matmul", |T| Ok(Tensor::from_data(
            out_shape,
            float_matmul::<T>(&plan, a, b)
        ))),
    }
}

/// The matrices of one batched product.
struct Plan {
    m: usize,
    k: usize,
    n: usize,
    /// Element offsets of each batch entry's `a` and `b` matrices.
    offsets: Vec<[usize; 2]>,
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

fn float_matmul<T: Element>(plan: &Plan, a: &Tensor, b: &Tensor) -> Vec<T>
where
    T::Acc: Gemm,
{
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let a = a.acc_cow::<T>();
    let b = b.acc_cow::<T>();
    let mut out = vec![T::Acc::ZERO; plan.offsets.len() * m * n];
    if m * n > 0 {
        let one = |c: &mut [T::Acc], &[oa, ob]: &[usize; 2]| {
            T::Acc::gemm(m, k, n, &a[oa..], k, 1, &b[ob..], n, 1, c);
        };
        if plan.offsets.len() > 1 && m * k * n <= SMALL_GEMM {
            out.par_chunks_mut(m * n)
                .zip(&plan.offsets)
                .for_each(|(c, o)| one(c, o));
        } else {
            out.chunks_mut(m * n)
                .zip(&plan.offsets)
                .for_each(|(c, o)| one(c, o));
        }
    }
    out.into_iter().map(T::from_acc).collect()
}

fn int_matmul<T: IntElement>(plan: &Plan, a: &Tensor, b: &Tensor) -> Vec<T> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let (a, b) = (a.slice_of::<T>(), b.slice_of::<T>());
    let mut out = Vec::with_capacity(plan.offsets.len() * m * n);
    let mut row = vec![0i64; n];
    for &[oa, ob] in &plan.offsets {
        for i in 0..m {
            row.fill(0);
            for p in 0..k {
                let x = a[oa + i * k + p].to_i64();
                for (r, y) in row.iter_mut().zip(&b[ob + p * n..ob + (p + 1) * n]) {
                    *r = r.wrapping_add(x.wrapping_mul(y.to_i64()));
                }
            }
            out.extend(row.iter().map(|&v| T::from_i64(v)));
        }
    }
    out
}
