//! Gathers by index on the GPU: `gather` (ONNX Gather) / `index_select`,
//! `gather_elements` and `gather_nd`, as in [`crate::cpu`]. Indices are i64 or i32;
//! negative ones count from the end. A bad index is an error, found by the kernel (which
//! never reads outside the data) and reported after it ran.

use std::sync::Arc;

use cudarc::driver::PushKernelArg;

use super::launch::{error_flag, flat, i64_of, norm_dim, read_flag, Layout, NdDims, MAXR};
use super::{cuda_err, kernels, CudaDevice, CudaTensor};
use crate::broadcast::contiguous_strides;
use crate::cpu::{gather_nd_shape, GatherNdShape};
use crate::{DType, KernelError};

fn check_index(op: &'static str, x: &CudaTensor, index: &CudaTensor) -> Result<(), KernelError> {
    if !matches!(index.dtype(), DType::I64 | DType::I32) {
        return Err(KernelError::UnsupportedDType {
            op,
            dtype: index.dtype(),
            expected: "i64 or i32 indices",
        });
    }
    if x.device().ordinal() != index.device().ordinal() {
        return Err(KernelError::invalid(op, "operands on different devices"));
    }
    Ok(())
}

fn defines(x: &CudaTensor, index: &CudaTensor) -> Vec<(&'static str, String)> {
    vec![
        ("ESZ", x.dtype().size_in_bytes().to_string()),
        (
            "IDX_DT",
            if index.dtype() == DType::I64 {
                "3"
            } else {
                "4"
            }
            .to_string(),
        ),
    ]
}

/// Turns the kernel's error flag into an error naming the offending index.
fn finish(
    op: &'static str,
    dev: &Arc<CudaDevice>,
    flag: &cudarc::driver::CudaSlice<i32>,
    index: &CudaTensor,
    size_of: impl Fn(usize) -> usize,
) -> Result<(), KernelError> {
    if let Some(pos) = read_flag(dev, flag)? {
        let host = index.to_host()?;
        let value = host.to_f64_vec().get(pos).map_or(0, |&v| v as i64);
        return Err(KernelError::IndexOutOfRange {
            op,
            index: value,
            size: size_of(pos),
        });
    }
    Ok(())
}

fn gather_along(
    op: &'static str,
    x: &CudaTensor,
    index: &CudaTensor,
    dim: i64,
) -> Result<CudaTensor, KernelError> {
    check_index(op, x, index)?;
    let d = norm_dim(op, dim, x.rank())?;
    let axis = x.shape()[d];
    let mut shape = x.shape()[..d].to_vec();
    shape.extend_from_slice(index.shape());
    shape.extend_from_slice(&x.shape()[d + 1..]);
    let dev = x.device().clone();
    let out = dev.zeros(x.dtype(), &shape)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let outer = i64_of(op, x.shape()[..d].iter().product())?;
    let inner = i64_of(op, x.shape()[d + 1..].iter().product())?;
    let (axis_i, nidx) = (i64_of(op, axis)?, i64_of(op, index.numel())?);
    let flag = error_flag(&dev)?;
    let f = dev.function(
        "layout.cu",
        kernels::LAYOUT,
        &defines(x, index),
        "gather_axis",
    )?;
    let (ov, xv, iv) = (out.view(), x.view(), index.view());
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov)
        .arg(&xv)
        .arg(&iv)
        .arg(&outer)
        .arg(&axis_i)
        .arg(&inner)
        .arg(&nidx)
        .arg(&flag);
    // SAFETY: `gather_axis(word_t*, const word_t*, const void*, i64 x4, int*)`; out has
    // outer*nidx*inner elements, x outer*axis*inner, index nidx of IDX_DT; resolved
    // indices are checked against `axis` before x is read.
    unsafe { args.launch(flat(out.numel())) }.map_err(|e| cuda_err(op, e))?;
    finish(op, &dev, &flag, index, |_| axis)?;
    Ok(out)
}

/// `gather(x, index, dim)` as ONNX Gather: the result is `x.shape[..dim] ++ index.shape ++
/// x.shape[dim + 1..]`.
pub fn gather(x: &CudaTensor, index: &CudaTensor, dim: i64) -> Result<CudaTensor, KernelError> {
    gather_along("gather", x, index, dim)
}

/// `index_select(x, dim, index)` with a 1-D (or 0-D) index. Unlike the CPU kernel,
/// negative indices count from the end here.
pub fn index_select(
    x: &CudaTensor,
    dim: i64,
    index: &CudaTensor,
) -> Result<CudaTensor, KernelError> {
    if index.rank() > 1 {
        return Err(KernelError::shape(
            "index_select",
            format!("index must be 1-D, got shape {:?}", index.shape()),
        ));
    }
    let flat = index.reshape(vec![index.numel()])?;
    gather_along("index_select", x, &flat, dim)
}

/// ONNX GatherElements: `out[i..] = x[i.. with dim replaced by index[i..]]`; `index` has
/// `x`'s rank and no larger sizes outside `dim`.
pub fn gather_elements(
    x: &CudaTensor,
    index: &CudaTensor,
    dim: i64,
) -> Result<CudaTensor, KernelError> {
    let op = "gather_elements";
    check_index(op, x, index)?;
    let rank = x.rank();
    if rank == 0 {
        return gather_along(op, &x.reshape(vec![1])?, index, 0);
    }
    let d = norm_dim(op, dim, rank)?;
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
    let shape = index.shape().to_vec();
    let dev = x.device().clone();
    let out = dev.zeros(x.dtype(), &shape)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let xs = contiguous_strides(x.shape());
    let mut st = xs.clone();
    st[d] = 0;
    let layout = Layout::new(op, &shape, [&st], [0])?;
    let (dim_stride, axis) = (i64_of(op, xs[d])?, i64_of(op, x.shape()[d])?);
    let flag = error_flag(&dev)?;
    let f = dev.function(
        "layout.cu",
        kernels::LAYOUT,
        &defines(x, index),
        "gather_elements",
    )?;
    let (ov, xv, iv) = (out.view(), x.view(), index.view());
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov)
        .arg(&xv)
        .arg(&iv)
        .arg(&layout)
        .arg(&dim_stride)
        .arg(&axis)
        .arg(&flag);
    // SAFETY: `gather_elements(word_t*, const word_t*, const void*, Layout, i64, i64,
    // int*)`; the layout walks index's shape (no larger than x's outside dim d) with x's
    // strides and dim d zeroed, and the gathered index is checked against x's size there.
    unsafe { args.launch(flat(out.numel())) }.map_err(|e| cuda_err(op, e))?;
    let size = x.shape()[d];
    finish(op, &dev, &flag, index, |_| size)?;
    Ok(out)
}

/// ONNX GatherND with `batch_dims`.
pub fn gather_nd(
    x: &CudaTensor,
    index: &CudaTensor,
    batch_dims: i64,
) -> Result<CudaTensor, KernelError> {
    let op = "gather_nd";
    check_index(op, x, index)?;
    let GatherNdShape {
        b,
        k,
        out: shape,
        nbatch,
        per_batch,
    } = gather_nd_shape(x.shape(), index.shape(), batch_dims)?;
    if k > MAXR {
        return Err(KernelError::Unsupported {
            op,
            msg: format!("index tuples of {k} entries (at most {MAXR})"),
        });
    }
    let dev = x.device().clone();
    let out = dev.zeros(x.dtype(), &shape)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let xs = contiguous_strides(x.shape());
    let mut dims = NdDims::default();
    for j in 0..k {
        dims.sizes[j] = i64_of(op, x.shape()[b + j])?;
        dims.strides[j] = i64_of(op, xs[b + j])?;
    }
    let tuples = i64_of(op, nbatch * per_batch)?;
    let k_i = k as i64;
    let per_batch_i = i64_of(op, per_batch.max(1))?;
    let batch_elems = i64_of(op, x.shape()[b..].iter().product())?;
    let inner = i64_of(op, x.shape()[b + k..].iter().product())?;
    let flag = error_flag(&dev)?;
    let f = dev.function(
        "layout.cu",
        kernels::LAYOUT,
        &defines(x, index),
        "gather_nd",
    )?;
    let (ov, xv, iv) = (out.view(), x.view(), index.view());
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov)
        .arg(&xv)
        .arg(&iv)
        .arg(&tuples)
        .arg(&k_i)
        .arg(&per_batch_i)
        .arg(&batch_elems)
        .arg(&inner)
        .arg(&dims)
        .arg(&flag);
    // SAFETY: `gather_nd(word_t*, const word_t*, const void*, i64 x5, NdDims, int*)`; out
    // has tuples*inner elements, index tuples*k entries; every tuple entry is checked
    // against its dim's size before x is read.
    unsafe { args.launch(flat(out.numel())) }.map_err(|e| cuda_err(op, e))?;
    let sizes: Vec<usize> = (0..k).map(|j| x.shape()[b + j]).collect();
    finish(op, &dev, &flag, index, |pos| {
        sizes.get(pos % k.max(1)).copied().unwrap_or(0)
    })?;
    Ok(out)
}
