//! Layout ops on the GPU: permute/transpose, expand, slice, split, concat and contiguous
//! as strided copies (the `copy_strided` kernel of `layout.cu`, by element size), and
//! windows of the same buffer where no copy is needed.

use cudarc::driver::PushKernelArg;

use super::launch::{flat, norm_dim, Layout};
use super::{cuda_err, kernels, CudaTensor};
use crate::broadcast::contiguous_strides;
use crate::KernelError;

#[allow(clippy::too_many_arguments)]
/// Copies `x` read with `in_strides` from element `in_off` over `shape` into `out`
/// written with `out_strides` from element `out_off`.
fn copy_into(
    op: &'static str,
    out: &CudaTensor,
    out_strides: &[usize],
    out_off: usize,
    x: &CudaTensor,
    shape: &[usize],
    in_strides: &[usize],
    in_off: usize,
) -> Result<(), KernelError> {
    let layout = Layout::new(op, shape, [out_strides, in_strides], [out_off, in_off])?;
    if layout.numel() == 0 {
        return Ok(());
    }
    let dev = x.device();
    let esz = x.dtype().size_in_bytes().to_string();
    let f = dev.function(
        "layout.cu",
        kernels::LAYOUT,
        &[("ESZ", esz), ("IDX_DT", "3".into())],
        "copy_strided",
    )?;
    let (ov, iv) = (out.view(), x.view());
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov).arg(&iv).arg(&layout);
    // SAFETY: `copy_strided(word_t*, const word_t*, Layout)` with word_t of the dtype's
    // size; callers pass strides and offsets that stay inside `out` and `x` over `shape`.
    unsafe { args.launch(flat(layout.numel())) }.map_err(|e| cuda_err(op, e))?;
    Ok(())
}

/// A new contiguous tensor of `shape` holding `x` read with `strides` from `offset`.
fn strided_copy(
    op: &'static str,
    x: &CudaTensor,
    shape: Vec<usize>,
    strides: &[usize],
    offset: usize,
) -> Result<CudaTensor, KernelError> {
    let out = x.device().zeros(x.dtype(), &shape)?;
    copy_into(
        op,
        &out,
        &contiguous_strides(&shape),
        0,
        x,
        &shape,
        strides,
        offset,
    )?;
    Ok(out)
}

/// Reorders dims: result dim `i` is `x`'s dim `dims[i]`.
pub fn permute(x: &CudaTensor, dims: &[i64]) -> Result<CudaTensor, KernelError> {
    let op = "permute";
    let rank = x.rank();
    if dims.len() != rank {
        return Err(KernelError::invalid(
            op,
            format!(
                "{dims:?} has {} dims but the tensor {:?} has rank {rank}",
                dims.len(),
                x.shape()
            ),
        ));
    }
    let mut seen = vec![false; rank];
    let mut perm = Vec::with_capacity(rank);
    for &d in dims {
        let p = norm_dim(op, d, rank)?;
        if std::mem::replace(&mut seen[p], true) {
            return Err(KernelError::invalid(
                op,
                format!("dim {d} appears twice in {dims:?}"),
            ));
        }
        perm.push(p);
    }
    let st = contiguous_strides(x.shape());
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let pst: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    strided_copy(op, x, shape, &pst, 0)
}

/// Swaps two dims.
pub fn transpose(x: &CudaTensor, dim0: i64, dim1: i64) -> Result<CudaTensor, KernelError> {
    let rank = x.rank();
    let d0 = norm_dim("transpose", dim0, rank)?;
    let d1 = norm_dim("transpose", dim1, rank)?;
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(d0, d1);
    permute(x, &perm)
}

/// Broadcasts to `sizes` (`-1` keeps a dim; new leading dims allowed), as a copy.
pub fn expand(x: &CudaTensor, sizes: &[i64]) -> Result<CudaTensor, KernelError> {
    let op = "expand";
    let rank = x.rank();
    let bad = || KernelError::shape(op, format!("cannot expand {:?} to {sizes:?}", x.shape()));
    if sizes.len() < rank {
        return Err(bad());
    }
    let lead = sizes.len() - rank;
    let own = contiguous_strides(x.shape());
    let mut shape = Vec::with_capacity(sizes.len());
    let mut strides = Vec::with_capacity(sizes.len());
    for (i, &s) in sizes.iter().enumerate() {
        if i < lead {
            if s < 0 {
                return Err(bad());
            }
            shape.push(s as usize);
            strides.push(0);
            continue;
        }
        let d = x.shape()[i - lead];
        if s == -1 || (s >= 0 && s as usize == d) {
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
    crate::budget::check_alloc(op, &shape, x.dtype())?;
    strided_copy(op, x, shape, &strides, 0)
}

/// Elements `start..` of dim `d` taken every `step`, `len` of them.
fn narrow(
    op: &'static str,
    x: &CudaTensor,
    d: usize,
    start: usize,
    len: usize,
    step: usize,
) -> Result<CudaTensor, KernelError> {
    let mut shape = x.shape().to_vec();
    shape[d] = len;
    let mut st = contiguous_strides(x.shape());
    let offset = if len == 0 { 0 } else { start * st[d] };
    if step == 1 && x.shape()[..d].iter().product::<usize>() <= 1 {
        return Ok(x.window(offset, shape));
    }
    st[d] *= step;
    strided_copy(op, x, shape, &st, offset)
}

/// `x[.., start:end:step, ..]` along `dim` (negative bounds count from the end and are
/// clamped; `step` positive).
pub fn slice(
    x: &CudaTensor,
    dim: i64,
    start: i64,
    end: i64,
    step: i64,
) -> Result<CudaTensor, KernelError> {
    let op = "slice";
    let d = norm_dim(op, dim, x.rank())?;
    if step <= 0 {
        return Err(KernelError::invalid(
            op,
            format!("step must be positive, got {step}"),
        ));
    }
    let size = x.shape()[d] as i128;
    let clamp = |v: i64| {
        let v = v as i128;
        (if v < 0 { v + size } else { v }).clamp(0, size)
    };
    let (s, e) = (clamp(start), clamp(end));
    let len = if e > s {
        (e - s + step as i128 - 1) / step as i128
    } else {
        0
    };
    narrow(op, x, d, s as usize, len as usize, step as usize)
}

/// Splits `dim` into pieces of `sizes` (which must sum to its size).
pub fn split(x: &CudaTensor, sizes: &[i64], dim: i64) -> Result<Vec<CudaTensor>, KernelError> {
    let op = "split";
    let d = norm_dim(op, dim, x.rank())?;
    let total = x.shape()[d];
    if sizes.iter().any(|&s| s < 0) || sizes.iter().sum::<i64>() != total as i64 {
        return Err(KernelError::invalid(
            op,
            format!(
                "sizes {sizes:?} do not sum to {total}, the size of dim {dim} of {:?}",
                x.shape()
            ),
        ));
    }
    let mut start = 0usize;
    let mut out = Vec::with_capacity(sizes.len());
    for &s in sizes {
        out.push(narrow(op, x, d, start, s as usize, 1)?);
        start += s as usize;
    }
    Ok(out)
}

/// Concatenates along `dim` (same dtype, same sizes elsewhere).
pub fn concat(tensors: &[&CudaTensor], dim: i64) -> Result<CudaTensor, KernelError> {
    let op = "concat";
    let first = tensors
        .first()
        .ok_or_else(|| KernelError::invalid(op, "no tensors to concatenate"))?;
    let rank = first.rank();
    let d = norm_dim(op, dim, rank)?;
    let mut shape = first.shape().to_vec();
    shape[d] = 0;
    for t in tensors {
        if t.dtype() != first.dtype() {
            return Err(KernelError::DTypeMismatch {
                op,
                lhs: first.dtype(),
                rhs: t.dtype(),
            });
        }
        if t.device().ordinal() != first.device().ordinal() {
            return Err(KernelError::invalid(op, "operands on different devices"));
        }
        let fits =
            t.rank() == rank && (0..rank).all(|i| i == d || t.shape()[i] == first.shape()[i]);
        if !fits {
            return Err(KernelError::shape(
                op,
                format!(
                    "shapes {:?} and {:?} differ outside dim {dim}",
                    first.shape(),
                    t.shape()
                ),
            ));
        }
        shape[d] += t.shape()[d];
    }
    let out = first.device().zeros(first.dtype(), &shape)?;
    let out_st = contiguous_strides(&shape);
    let mut at = 0usize;
    for t in tensors {
        let st = contiguous_strides(t.shape());
        copy_into(op, &out, &out_st, at * out_st[d], t, t.shape(), &st, 0)?;
        at += t.shape()[d];
    }
    Ok(out)
}

/// A copy of `x` in a new buffer.
pub fn contiguous(x: &CudaTensor) -> Result<CudaTensor, KernelError> {
    let st = contiguous_strides(x.shape());
    strided_copy("contiguous", x, x.shape().to_vec(), &st, 0)
}
