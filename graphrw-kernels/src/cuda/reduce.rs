//! Row-wise ops on the GPU (`reduce.cu`, one block per row, f32 arithmetic): softmax and
//! log-softmax along any dim, layer_norm and rms_norm over trailing dims, and sum / mean
//! / amax over any set of dims. Float dtypes (f32, f16, bf16).

use cudarc::driver::PushKernelArg;

use super::launch::{dtype_id, i64_of, norm_dim, rows, Layout};
use super::{cuda_err, kernels, CudaTensor};
use crate::broadcast::contiguous_strides;
use crate::cpu::ReduceOp;
use crate::{DType, KernelError};

fn expect_float(op: &'static str, d: DType) -> Result<(), KernelError> {
    if matches!(d, DType::F32 | DType::F16 | DType::BF16) {
        Ok(())
    } else {
        Err(KernelError::UnsupportedDType {
            op,
            dtype: d,
            expected: "f32, f16 or bf16",
        })
    }
}

fn softmax_impl(
    op: &'static str,
    x: &CudaTensor,
    dim: i64,
    log: bool,
) -> Result<CudaTensor, KernelError> {
    expect_float(op, x.dtype())?;
    let d = norm_dim(op, dim, x.rank().max(1))?;
    let shape = x.shape();
    let (len, inner) = if shape.is_empty() {
        (1, 1)
    } else {
        (shape[d], shape[d + 1..].iter().product::<usize>())
    };
    let dev = x.device().clone();
    let out = dev.zeros(x.dtype(), shape)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let nrows = x.numel() / len;
    let defines = vec![
        ("DT", dtype_id(x.dtype())?.to_string()),
        ("LOG", (log as u8).to_string()),
    ];
    let f = dev.function("reduce.cu", kernels::REDUCE, &defines, "softmax")?;
    let (len_i, inner_i) = (i64_of(op, len)?, i64_of(op, inner)?);
    let (ov, xv) = (out.view(), x.view());
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov).arg(&xv).arg(&len_i).arg(&inner_i);
    // SAFETY: `softmax(void*, const void*, i64, i64)`; one block per row of the
    // [outer, len, inner] view, so every offset is below outer*len*inner = numel.
    unsafe { args.launch(rows(op, nrows, len)?) }.map_err(|e| cuda_err(op, e))?;
    Ok(out)
}

/// Softmax along `dim` (a lane of all `-inf` gives NaN).
pub fn softmax(x: &CudaTensor, dim: i64) -> Result<CudaTensor, KernelError> {
    softmax_impl("softmax", x, dim, false)
}

/// Log-softmax along `dim`.
pub fn log_softmax(x: &CudaTensor, dim: i64) -> Result<CudaTensor, KernelError> {
    softmax_impl("log_softmax", x, dim, true)
}

/// `weight`/`bias` as a tensor of exactly `shape` (broadcast copies when smaller).
fn affine(
    op: &'static str,
    what: &str,
    x: &CudaTensor,
    t: Option<&CudaTensor>,
    shape: &[usize],
) -> Result<Option<CudaTensor>, KernelError> {
    let Some(t) = t else { return Ok(None) };
    if t.dtype() != x.dtype() {
        return Err(KernelError::DTypeMismatch {
            op,
            lhs: x.dtype(),
            rhs: t.dtype(),
        });
    }
    if t.shape() == shape {
        return Ok(Some(t.clone()));
    }
    let sizes: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
    super::expand(t, &sizes).map(Some).map_err(|_| {
        KernelError::shape(
            op,
            format!("{what} {:?} does not broadcast to {shape:?}", t.shape()),
        )
    })
}

fn norm_impl(
    op: &'static str,
    x: &CudaTensor,
    weight: Option<&CudaTensor>,
    bias: Option<&CudaTensor>,
    axis: i64,
    eps: f64,
    rms: bool,
) -> Result<CudaTensor, KernelError> {
    expect_float(op, x.dtype())?;
    let d = norm_dim(op, axis, x.rank())?;
    let norm_shape = &x.shape()[d..];
    let len: usize = norm_shape.iter().product();
    let w = affine(op, "weight", x, weight, norm_shape)?;
    let b = affine(op, "bias", x, bias, norm_shape)?;
    let dev = x.device().clone();
    let out = dev.zeros(x.dtype(), x.shape())?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let defines = vec![
        ("DT", dtype_id(x.dtype())?.to_string()),
        ("HAS_W", (w.is_some() as u8).to_string()),
        ("HAS_B", (b.is_some() as u8).to_string()),
        ("RMS", (rms as u8).to_string()),
    ];
    let f = dev.function("reduce.cu", kernels::REDUCE, &defines, "norm_rows")?;
    let (ov, xv) = (out.view(), x.view());
    let wv = w.as_ref().unwrap_or(x).view();
    let bv = b.as_ref().unwrap_or(x).view();
    let len_i = i64_of(op, len)?;
    let eps32 = eps as f32;
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov)
        .arg(&xv)
        .arg(&wv)
        .arg(&bv)
        .arg(&len_i)
        .arg(&eps32);
    // SAFETY: `norm(void*, const void*, const void*, const void*, i64, float)`; one block
    // per contiguous row of `len` elements; weight and bias (when read) have `len`.
    unsafe { args.launch(rows(op, x.numel() / len, len)?) }.map_err(|e| cuda_err(op, e))?;
    Ok(out)
}

/// Layer normalisation over dims `axis..` (biased variance), with optional weight and
/// bias of `x`'s dtype broadcasting to `x.shape[axis..]`.
pub fn layer_norm(
    x: &CudaTensor,
    weight: Option<&CudaTensor>,
    bias: Option<&CudaTensor>,
    axis: i64,
    eps: f64,
) -> Result<CudaTensor, KernelError> {
    norm_impl("layer_norm", x, weight, bias, axis, eps, false)
}

/// RMS normalisation over dims `axis..`: `x / sqrt(mean(x^2) + eps) * weight`.
pub fn rms_norm(
    x: &CudaTensor,
    weight: Option<&CudaTensor>,
    axis: i64,
    eps: f64,
) -> Result<CudaTensor, KernelError> {
    norm_impl("rms_norm", x, weight, None, axis, eps, true)
}

/// Sum, mean or amax over `dims` (all when empty), keeping them as size 1 with
/// `keepdim`. Float dtypes; amax propagates NaN and errors on zero elements.
pub fn reduce(
    op: ReduceOp,
    x: &CudaTensor,
    dims: &[i64],
    keepdim: bool,
) -> Result<CudaTensor, KernelError> {
    let name = op.name();
    expect_float(name, x.dtype())?;
    let rank = x.rank();
    let mut reduced = vec![dims.is_empty(); rank];
    for &d in dims {
        let d = norm_dim(name, d, rank.max(1))?;
        if rank > 0 {
            reduced[d] = true;
        }
    }
    let st = contiguous_strides(x.shape());
    let (mut kshape, mut kst, mut rshape, mut rst) = (vec![], vec![], vec![], vec![]);
    let mut out_shape = vec![];
    for i in 0..rank {
        if reduced[i] {
            rshape.push(x.shape()[i]);
            rst.push(st[i]);
            if keepdim {
                out_shape.push(1);
            }
        } else {
            kshape.push(x.shape()[i]);
            kst.push(st[i]);
            out_shape.push(x.shape()[i]);
        }
    }
    let red_n: usize = rshape.iter().product();
    let out_n: usize = kshape.iter().product();
    if op == ReduceOp::Amax && red_n == 0 && out_n > 0 {
        return Err(KernelError::shape(
            name,
            format!(
                "cannot reduce over zero elements: shape {:?}, dims {dims:?}",
                x.shape()
            ),
        ));
    }
    let dev = x.device().clone();
    if op == ReduceOp::Mean && red_n == 0 && out_n > 0 {
        // The mean of nothing is 0 / 0, as on the CPU.
        return dev.upload(&crate::cpu::full(
            &dims_i64(&out_shape),
            f64::NAN,
            x.dtype(),
        )?);
    }
    let out = dev.zeros(x.dtype(), &out_shape)?;
    if out_n == 0 || red_n == 0 {
        return Ok(out); // sums of nothing are 0
    }
    let k = Layout::new(name, &kshape, [&kst], [0])?;
    let r = Layout::new(name, &rshape, [&rst], [0])?;
    let red = match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Amax => 2,
    };
    let defines = vec![
        ("DT", dtype_id(x.dtype())?.to_string()),
        ("RED", red.to_string()),
    ];
    let f = dev.function("reduce.cu", kernels::REDUCE, &defines, "reduce")?;
    let (ov, xv) = (out.view(), x.view());
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov).arg(&xv).arg(&k).arg(&r);
    // SAFETY: `reduce(void*, const void*, Layout, Layout)`; one block per output element
    // (out_n of them, the kept layout's size); kept and reduced offsets add up to an
    // element of x since both layouts use x's contiguous strides over disjoint dims.
    unsafe { args.launch(rows(name, out_n, red_n)?) }.map_err(|e| cuda_err(name, e))?;
    Ok(out)
}

fn dims_i64(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}
