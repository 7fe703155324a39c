//! Indexing kernels: ONNX `Gather`, `GatherElements`, `GatherND` and `index_select`.
//!
//! Index tensors may be I64 or I32. Every index is validated before any copying.

use crate::broadcast::{contiguous_strides, Odometer};
use crate::cpu::util::{index_values, norm_dim, prod, resolve_index};
use crate::macros::dispatch;
use crate::{KernelError, Tensor};

/// Copies, for every outer position, the `inner`-element chunks selected by `idx`
/// along an axis of `axis` entries.
fn take_chunks(
    x: &Tensor,
    outer: usize,
    axis: usize,
    inner: usize,
    idx: &[usize],
    shape: Vec<usize>,
) -> Tensor {
    dispatch!(x.dtype(), |T| {
        let src = x.slice_of::<T>();
        // Every element is written below, chunk by chunk; from the plan's buffer pool
        // when one is installed (an embedding lookup's output is fresh pages each run
        // otherwise: 190 page faults a run of GPT-2 small at S = 128).
        let mut out = crate::cpu::pool::buffer::<T>(outer * idx.len() * inner);
        let mut chunks = out.chunks_exact_mut(inner.max(1));
        for o in 0..outer {
            for (&i, dst) in idx.iter().zip(&mut chunks) {
                let start = (o * axis + i) * inner;
                dst.copy_from_slice(&src[start..start + inner]);
            }
        }
        Tensor::from_data(shape, out)
    })
}

fn gather_along(
    op: &'static str,
    x: &Tensor,
    index: &Tensor,
    dim: i64,
    wrap: bool,
) -> Result<Tensor, KernelError> {
    let d = norm_dim(op, dim, x.rank())?;
    let axis = x.shape()[d];
    let idx = index_values(op, index)?
        .into_iter()
        .map(|i| resolve_index(op, i, axis, wrap))
        .collect::<Result<Vec<_>, _>>()?;
    let mut shape = x.shape()[..d].to_vec();
    shape.extend_from_slice(index.shape());
    shape.extend_from_slice(&x.shape()[d + 1..]);
    let outer = prod(&x.shape()[..d]);
    let inner = prod(&x.shape()[d + 1..]);
    Ok(take_chunks(x, outer, axis, inner, &idx, shape))
}

/// ONNX `Gather`: picks entries of `x` along `dim` with `index` of any shape.
///
/// The result has shape `x.shape[..dim] + index.shape + x.shape[dim+1..]`; negative
/// indices count from the end; an index out of range is an error.
pub fn gather(x: &Tensor, index: &Tensor, dim: i64) -> Result<Tensor, KernelError> {
    gather_along("gather", x, index, dim, true)
}

/// `torch.index_select`: picks entries of `x` along `dim` with a 1-D (or 0-d) index;
/// the result keeps `x`'s rank. Negative indices are errors, as in PyTorch.
pub fn index_select(x: &Tensor, dim: i64, index: &Tensor) -> Result<Tensor, KernelError> {
    if index.rank() > 1 {
        return Err(KernelError::shape(
            "index_select",
            format!("index must be 1-D, got shape {:?}", index.shape()),
        ));
    }
    let flat = crate::cpu::reshape(index, &[-1])?;
    gather_along("index_select", x, &flat, dim, false)
}

/// `torch.gather` / ONNX `GatherElements`: `out[i][j][k] = x[index[i][j][k]][j][k]`
/// for `dim = 0` (and likewise for other dims).
///
/// `index` has the rank of `x` and, outside `dim`, sizes no larger than `x`'s; the
/// result has `index`'s shape. Negative indices count from the end.
pub fn gather_elements(x: &Tensor, index: &Tensor, dim: i64) -> Result<Tensor, KernelError> {
    let op = "gather_elements";
    let rank = x.rank();
    let d = norm_dim(op, dim, rank.max(1))?;
    let fits =
        index.rank() == rank && (0..rank).all(|i| i == d || index.shape()[i] <= x.shape()[i]);
    if !fits {
        return Err(KernelError::shape(
            op,
            format!(
                "index shape {:?} does not fit data shape {:?} along dim {dim}",
                index.shape(),
                x.shape()
            ),
        ));
    }
    let idx = index_values(op, index)?;
    let shape = index.shape().to_vec();
    if rank == 0 {
        let i = resolve_index(op, idx[0], 1, true)?;
        return Ok(take_chunks(x, 1, 1, 1, &[i], shape));
    }
    let axis = x.shape()[d];
    let xs = contiguous_strides(x.shape());
    let mut st: Vec<[usize; 1]> = xs.iter().map(|&s| [s]).collect();
    st[d] = [0];
    let mut odo = Odometer::new(&shape, &st, [0], 0);
    let mut offsets = Vec::with_capacity(idx.len());
    for &i in &idx {
        let i = resolve_index(op, i, axis, true)?;
        offsets.push(odo.offsets[0] + i * xs[d]);
        odo.advance();
    }
    Ok(dispatch!(x.dtype(), |T| {
        let src = x.slice_of::<T>();
        Tensor::from_data(shape, offsets.iter().map(|&o| src[o]).collect::<Vec<T>>())
    }))
}

/// The shapes of a `gather_nd` (ONNX GatherND with `batch_dims`), checked once for the
/// CPU and the CUDA kernels.
pub(crate) struct GatherNdShape {
    /// The batch dims (`batch_dims`): leading dims data and index share.
    pub b: usize,
    /// Entries per index tuple (the index's last dim).
    pub k: usize,
    /// The output shape: the index's dims but the last, then the data's past `b + k`.
    pub out: Vec<usize>,
    /// The number of batches (the product of the first `b` dims).
    pub nbatch: usize,
    /// Index tuples per batch (the product of the index's dims between `b` and the last).
    pub per_batch: usize,
}

/// Checks the shapes of `gather_nd` on data of shape `data` and indices of shape
/// `index`: `batch_dims` below both ranks, the batch dims equal, tuples no longer than
/// the data's remaining rank.
pub(crate) fn gather_nd_shape(
    data: &[usize],
    index: &[usize],
    batch_dims: i64,
) -> Result<GatherNdShape, KernelError> {
    let op = "gather_nd";
    let (r, q) = (data.len(), index.len());
    if batch_dims < 0 || q == 0 || r == 0 || batch_dims as usize >= q.min(r) {
        return Err(KernelError::shape(
            op,
            format!("bad batch_dims {batch_dims} for data {data:?} and index {index:?}"),
        ));
    }
    let b = batch_dims as usize;
    let k = index[q - 1];
    if data[..b] != index[..b] || k > r - b {
        return Err(KernelError::shape(
            op,
            format!("index {index:?} does not fit data {data:?} with batch_dims {b}"),
        ));
    }
    let mut out = index[..q - 1].to_vec();
    out.extend_from_slice(&data[b + k..]);
    Ok(GatherNdShape {
        b,
        k,
        out,
        nbatch: prod(&data[..b]),
        per_batch: prod(&index[b..q - 1]),
    })
}

/// ONNX `GatherND`: `index` has shape `[b..., q..., k]`; each `k`-tuple indexes the
/// dims `batch_dims..batch_dims+k` of `x` within its batch entry.
///
/// The first `batch_dims` dims of `x` and `index` must agree; the result has shape
/// `index.shape[..-1] + x.shape[batch_dims + k..]`. Negative indices count from the end.
pub fn gather_nd(x: &Tensor, index: &Tensor, batch_dims: i64) -> Result<Tensor, KernelError> {
    let op = "gather_nd";
    let GatherNdShape {
        b,
        k,
        out: shape,
        nbatch,
        per_batch,
    } = gather_nd_shape(x.shape(), index.shape(), batch_dims)?;
    let idx = index_values(op, index)?;
    let x_batch = prod(&x.shape()[b..]);
    let inner = prod(&x.shape()[b + k..]);
    let xs = contiguous_strides(x.shape());
    let tuples_per_batch = if nbatch == 0 { 0 } else { per_batch };
    let mut starts = Vec::with_capacity(nbatch * tuples_per_batch);
    for (t, tuple) in idx
        .chunks(k.max(1))
        .enumerate()
        .take(nbatch * tuples_per_batch)
    {
        let mut off = (t / tuples_per_batch.max(1)) * x_batch;
        if k > 0 {
            for (j, &i) in tuple.iter().enumerate() {
                off += resolve_index(op, i, x.shape()[b + j], true)? * xs[b + j];
            }
        }
        starts.push(off);
    }
    if k == 0 {
        // Every "tuple" is empty: one whole batch slice per index position.
        starts = (0..nbatch * tuples_per_batch)
            .map(|t| (t / tuples_per_batch.max(1)) * x_batch)
            .collect();
    }
    Ok(dispatch!(x.dtype(), |T| {
        let src = x.slice_of::<T>();
        let mut out: Vec<T> = Vec::with_capacity(starts.len() * inner);
        for &s in &starts {
            out.extend_from_slice(&src[s..s + inner]);
        }
        Tensor::from_data(shape, out)
    }))
}
