//! Argument checks shared by the kernels.

use crate::{DType, KernelError, Tensor};

/// Resolves a possibly negative `dim` against `rank`.
pub(crate) fn norm_dim(op: &'static str, dim: i64, rank: usize) -> Result<usize, KernelError> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(KernelError::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}

/// Resolves a list of dims, rejecting duplicates.
pub(crate) fn norm_dims(
    op: &'static str,
    dims: &[i64],
    rank: usize,
) -> Result<Vec<usize>, KernelError> {
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(dims.len());
    for &dim in dims {
        let d = norm_dim(op, dim, rank)?;
        if seen[d] {
            return Err(KernelError::invalid(
                op,
                format!("dim {dim} appears more than once in {dims:?}"),
            ));
        }
        seen[d] = true;
        out.push(d);
    }
    Ok(out)
}

/// Errors unless `a` and `b` have the same dtype.
pub(crate) fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<DType, KernelError> {
    if a.dtype() != b.dtype() {
        return Err(KernelError::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    Ok(a.dtype())
}

/// Errors unless `t` is Bool.
pub(crate) fn expect_bool(op: &'static str, t: &Tensor) -> Result<(), KernelError> {
    if t.dtype() != DType::Bool {
        return Err(KernelError::UnsupportedDType {
            op,
            dtype: t.dtype(),
            expected: "bool",
        });
    }
    Ok(())
}

/// The values of an index tensor (I64 or I32).
pub(crate) fn index_values(op: &'static str, t: &Tensor) -> Result<Vec<i64>, KernelError> {
    match t.dtype() {
        DType::I64 | DType::I32 => Ok(t.to_i64_vec()),
        dtype => Err(KernelError::UnsupportedDType {
            op,
            dtype,
            expected: "an index dtype (i64, i32)",
        }),
    }
}

/// Resolves an index into a dimension of `size`, wrapping negatives when `wrap` is set.
pub(crate) fn resolve_index(
    op: &'static str,
    index: i64,
    size: usize,
    wrap: bool,
) -> Result<usize, KernelError> {
    let s = size as i64;
    let i = if wrap && index < 0 { index + s } else { index };
    if i < 0 || i >= s {
        return Err(KernelError::IndexOutOfRange { op, index, size });
    }
    Ok(i as usize)
}

/// Product of a shape's dims.
pub(crate) fn prod(dims: &[usize]) -> usize {
    dims.iter().product()
}
