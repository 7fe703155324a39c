//! Layout kernels: shape changes, permutations, concatenation, slicing, triangles.

use crate::broadcast::{contiguous_strides, strided_collect};
use crate::cpu::util::{norm_dim, norm_dims, prod};
use crate::macros::dispatch;
use crate::{KernelError, Tensor};

/// Reorders dimensions: output dim `i` is input dim `dims[i]` (a copy).
pub fn permute(x: &Tensor, dims: &[i64]) -> Result<Tensor, KernelError> {
    let rank = x.rank();
    if dims.len() != rank {
        return Err(KernelError::invalid(
            "permute",
            format!(
                "{dims:?} has {} dims but the tensor {:?} has rank {rank}",
                dims.len(),
                x.shape()
            ),
        ));
    }
    let perm = norm_dims("permute", dims, rank)?;
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    let strides = contiguous_strides(x.shape());
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let pstrides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    Ok(strided_copy(x, shape, &pstrides, 0))
}

/// A new contiguous tensor from the strided view (`shape`, `strides`, `offset`) of the
/// elements of `x`.
fn strided_copy(x: &Tensor, shape: Vec<usize>, strides: &[usize], offset: usize) -> Tensor {
    dispatch!(x.dtype(), |T| {
        let data = strided_collect(x.slice_of::<T>(), offset, &shape, strides);
        Tensor::from_data(shape, data)
    })
}

/// Swaps two dimensions (a copy).
pub fn transpose(x: &Tensor, dim0: i64, dim1: i64) -> Result<Tensor, KernelError> {
    let rank = x.rank();
    let d0 = norm_dim("transpose", dim0, rank)?;
    let d1 = norm_dim("transpose", dim1, rank)?;
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(d0, d1);
    permute(x, &perm)
}

/// A new shape for the same elements, sharing storage (no copy). One entry may be -1,
/// inferred from the others; 0 is a literal size 0 (PyTorch, not ONNX).
pub fn reshape(x: &Tensor, shape: &[i64]) -> Result<Tensor, KernelError> {
    let numel = x.numel();
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        if d == -1 {
            if infer.replace(i).is_some() {
                return Err(KernelError::invalid(
                    "reshape",
                    format!("more than one -1 in {shape:?}"),
                ));
            }
        } else if d < 0 {
            return Err(KernelError::invalid(
                "reshape",
                format!("invalid size {d} in {shape:?}"),
            ));
        } else {
            known = known.checked_mul(d as usize).ok_or_else(|| {
                KernelError::shape("reshape", format!("shape {shape:?} has too many elements"))
            })?;
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if numel.checked_rem(known) != Some(0) {
            return Err(KernelError::shape(
                "reshape",
                format!(
                    "cannot reshape {:?} ({numel} elements) into {shape:?}",
                    x.shape()
                ),
            ));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(KernelError::shape(
            "reshape",
            format!(
                "cannot reshape {:?} ({numel} elements) into {shape:?}",
                x.shape()
            ),
        ));
    }
    Ok(x.with_shape(out))
}

/// Broadcasts `x` to `sizes` (a copy unless the shape is unchanged): -1 keeps a
/// dimension, size-1 dimensions repeat, new leading dimensions may be added.
/// Errors past the run budget ([`crate::budget`]) before allocating.
pub fn expand(x: &Tensor, sizes: &[i64]) -> Result<Tensor, KernelError> {
    let rank = x.rank();
    if sizes.len() < rank {
        return Err(KernelError::shape(
            "expand",
            format!("cannot expand {:?} to fewer dims {sizes:?}", x.shape()),
        ));
    }
    let lead = sizes.len() - rank;
    let own = contiguous_strides(x.shape());
    let mut shape = Vec::with_capacity(sizes.len());
    let mut strides = Vec::with_capacity(sizes.len());
    for (i, &s) in sizes.iter().enumerate() {
        let bad = || {
            KernelError::shape(
                "expand",
                format!("cannot expand {:?} to {sizes:?}", x.shape()),
            )
        };
        if i < lead {
            if s < 0 {
                return Err(bad());
            }
            shape.push(s as usize);
            strides.push(0);
            continue;
        }
        let d = x.shape()[i - lead];
        if s == -1 || s as usize == d && s >= 0 {
            shape.push(d);
            strides.push(own[i - lead]);
        } else if d == 1 && s >= 0 {
            shape.push(s as usize);
            strides.push(0);
        } else {
            return Err(bad());
        }
    }
    if shape == x.shape() {
        return Ok(x.clone());
    }
    crate::budget::check_alloc("expand", &shape, x.dtype())?;
    Ok(strided_copy(x, shape, &strides, 0))
}

/// Inserts a size-1 dimension at `dim` (in `-(rank+1)..=rank`), sharing storage.
pub fn unsqueeze(x: &Tensor, dim: i64) -> Result<Tensor, KernelError> {
    let d = norm_dim("unsqueeze", dim, x.rank() + 1)?;
    let mut shape = x.shape().to_vec();
    shape.insert(d, 1);
    Ok(x.with_shape(shape))
}

/// Removes size-1 dimensions, sharing storage: those listed in `dims`, or all of them
/// when `dims` is empty. A listed dimension whose size is not 1 is kept (PyTorch).
pub fn squeeze(x: &Tensor, dims: &[i64]) -> Result<Tensor, KernelError> {
    let rank = x.rank();
    let listed = norm_dims("squeeze", dims, rank)?;
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .filter(|&(i, &s)| !(s == 1 && (dims.is_empty() || listed.contains(&i))))
        .map(|(_, &s)| s)
        .collect();
    Ok(x.with_shape(shape))
}

/// Concatenates tensors of one dtype and rank along `dim`; the other dimensions must agree.
pub fn concat(tensors: &[&Tensor], dim: i64) -> Result<Tensor, KernelError> {
    let first = tensors
        .first()
        .ok_or_else(|| KernelError::invalid("concat", "no tensors to concatenate"))?;
    let rank = first.rank();
    let d = norm_dim("concat", dim, rank)?;
    let mut shape = first.shape().to_vec();
    shape[d] = 0;
    for t in tensors {
        if t.dtype() != first.dtype() {
            return Err(KernelError::DTypeMismatch {
                op: "concat",
                lhs: first.dtype(),
                rhs: t.dtype(),
            });
        }
        let compatible =
            t.rank() == rank && (0..rank).all(|i| i == d || t.shape()[i] == first.shape()[i]);
        if !compatible {
            return Err(KernelError::shape(
                "concat",
                format!(
                    "shapes {:?} and {:?} differ outside dim {dim}",
                    first.shape(),
                    t.shape()
                ),
            ));
        }
        shape[d] += t.shape()[d];
    }
    let outer = prod(&first.shape()[..d]);
    let inner = prod(&first.shape()[d + 1..]);
    Ok(dispatch!(first.dtype(), |T| {
        let mut out: Vec<T> = Vec::with_capacity(prod(&shape));
        for o in 0..outer {
            for t in tensors {
                let chunk = t.shape()[d] * inner;
                out.extend_from_slice(&t.slice_of::<T>()[o * chunk..(o + 1) * chunk]);
            }
        }
        Tensor::from_data(shape, out)
    }))
}

/// Splits `x` along `dim` into pieces of the given `sizes`, which must be non-negative
/// and sum to the size of `dim`. Pieces of a leading dimension share storage.
pub fn split(x: &Tensor, sizes: &[i64], dim: i64) -> Result<Vec<Tensor>, KernelError> {
    let d = norm_dim("split", dim, x.rank())?;
    let total = x.shape()[d];
    if sizes.iter().any(|&s| s < 0) || sizes.iter().sum::<i64>() != total as i64 {
        return Err(KernelError::invalid(
            "split",
            format!(
                "sizes {sizes:?} do not sum to {total}, the size of dim {dim} of {:?}",
                x.shape()
            ),
        ));
    }
    let mut start = 0usize;
    let mut out = Vec::with_capacity(sizes.len());
    for &s in sizes {
        out.push(narrow(x, d, start, s as usize, 1));
        start += s as usize;
    }
    Ok(out)
}

/// `len` elements of dim `d` from `start` with `step` (all already in range).
fn narrow(x: &Tensor, d: usize, start: usize, len: usize, step: usize) -> Tensor {
    let mut shape = x.shape().to_vec();
    shape[d] = len;
    let strides = contiguous_strides(x.shape());
    // An empty result (or input) reads nothing: no offset past the end of the storage.
    let offset = if len == 0 || x.numel() == 0 {
        0
    } else {
        start * strides[d]
    };
    if step == 1 && prod(&x.shape()[..d]) <= 1 {
        return x.window(offset, shape);
    }
    let mut st = strides;
    st[d] *= step;
    strided_copy(x, shape, &st, offset)
}

/// `x[start:end:step]` along `dim` with Python semantics: negative `start`/`end` count
/// from the end, both are clamped to the dimension; `step` must be at least 1.
pub fn slice(x: &Tensor, dim: i64, start: i64, end: i64, step: i64) -> Result<Tensor, KernelError> {
    let d = norm_dim("slice", dim, x.rank())?;
    if step <= 0 {
        return Err(KernelError::invalid(
            "slice",
            format!("step must be positive, got {step}"),
        ));
    }
    let size = x.shape()[d] as i128;
    let clamp = |v: i64| {
        let v = v as i128;
        let v = if v < 0 { v + size } else { v };
        v.clamp(0, size)
    };
    let (s, e) = (clamp(start), clamp(end));
    let len = if e > s {
        (e - s + step as i128 - 1) / step as i128
    } else {
        0
    };
    Ok(narrow(x, d, s as usize, len as usize, step as usize))
}

fn triangle(
    op: &'static str,
    x: &Tensor,
    keep: impl Fn(i64) -> bool + Copy,
) -> Result<Tensor, KernelError> {
    let rank = x.rank();
    if rank < 2 {
        return Err(KernelError::shape(
            op,
            format!("needs at least 2 dims, got {:?}", x.shape()),
        ));
    }
    let rows = x.shape()[rank - 2];
    let cols = x.shape()[rank - 1];
    Ok(dispatch!(x.dtype(), |T| {
        let mut out = x.slice_of::<T>().to_vec();
        if cols > 0 {
            for (k, row) in out.chunks_mut(cols).enumerate() {
                let i = (k % rows.max(1)) as i64;
                for (j, v) in row.iter_mut().enumerate() {
                    if !keep(j as i64 - i) {
                        *v = <T as Default>::default();
                    }
                }
            }
        }
        Tensor::from_data(x.shape().to_vec(), out)
    }))
}

/// The lower triangle of the last two dims: keeps `(i, j)` with `j - i <= diagonal`.
pub fn tril(x: &Tensor, diagonal: i64) -> Result<Tensor, KernelError> {
    triangle("tril", x, move |off| off <= diagonal)
}

/// The upper triangle of the last two dims: keeps `(i, j)` with `j - i >= diagonal`.
pub fn triu(x: &Tensor, diagonal: i64) -> Result<Tensor, KernelError> {
    triangle("triu", x, move |off| off >= diagonal)
}

/// A copy of `x` in fresh storage.
pub fn contiguous(x: &Tensor) -> Result<Tensor, KernelError> {
    Ok(x.deep_copy())
}
