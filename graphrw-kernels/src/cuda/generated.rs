//! Launching the kernels that `graphrw::fused_kernel!` generates: their CUDA C (from
//! the user's crate) is compiled by NVRTC after [`kernels::GENERATED_PRELUDE`] at first
//! use, once per kernel, dtype and device, and launched on device tensors.
//!
//! The convention of the generated source (its header says it in full): arguments
//! `(out, in0.., const float* scalars, const i64* meta, i64 count)` with every operand
//! and the output stored as `DTYPE_ID` (0 f32, 1 f16, 2 bf16); `meta = [rank, out
//! shape, then per operand its element strides over the out shape (0 = broadcast)]`.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::launch::{dtype_id, flat, i64_of};
use super::{cuda_err, kernels, CudaTensor};
use crate::broadcast::{broadcast_shapes, broadcast_strides};
use crate::{DType, KernelError};

/// How a generated kernel is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeneratedLaunch {
    /// Grid-stride over every output element, `count` = the number of elements.
    Elementwise,
    /// One block of 256 threads per row of the last dimension, `count` = the rows.
    Rows,
}

/// One generated kernel: a name that identifies it in the cache (unique per source),
/// its source without the prelude, its entry point and launch shape.
#[derive(Clone, Copy, Debug)]
pub struct GeneratedKernel<'a> {
    /// The cache name (e.g. the op name, `fused.rms_norm.vjp_x`).
    pub name: &'a str,
    /// The source as `fused_kernel!` emits it (no prelude).
    pub source: &'a str,
    /// The `extern "C"` entry point.
    pub entry: &'a str,
    /// The launch shape.
    pub launch: GeneratedLaunch,
}

/// The full source NVRTC compiles for a generated kernel: the prelude, then `body`.
pub fn generated_source(body: &str) -> String {
    let mut s = String::with_capacity(kernels::GENERATED_PRELUDE.len() + body.len());
    s.push_str(kernels::GENERATED_PRELUDE);
    s.push_str(body);
    s
}

/// Threads per block of a row launch (`__shared__ float sh[256]` in the source).
const ROW_THREADS: u32 = 256;

/// Runs `k` on `inputs` (all of `dtype`, f32, f16 or bf16, on one device, broadcasting
/// to a common shape) with float `scalars` in declaration order; the output has the
/// broadcast shape and `dtype`. Errors, never panics, on operands that do not fit.
pub fn run_generated(
    k: &GeneratedKernel<'_>,
    inputs: &[&CudaTensor],
    scalars: &[f64],
    dtype: DType,
) -> Result<CudaTensor, KernelError> {
    let op = "cuda generated kernel";
    let Some(first) = inputs.first() else {
        return Err(KernelError::invalid(
            op,
            format!("`{}` has no operand", k.name),
        ));
    };
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(KernelError::invalid(
            op,
            format!(
                "`{}`: dtype {dtype}, the kernel stores f32, f16 or bf16",
                k.name
            ),
        ));
    }
    let dev = first.device().clone();
    for (i, t) in inputs.iter().enumerate() {
        if t.dtype() != dtype {
            return Err(KernelError::invalid(
                op,
                format!(
                    "`{}`: operand {i} is {}, the kernel reads {dtype}",
                    k.name,
                    t.dtype()
                ),
            ));
        }
        if t.device().ordinal() != dev.ordinal() {
            return Err(KernelError::invalid(
                op,
                format!("`{}`: operands on different devices", k.name),
            ));
        }
    }
    let mut shape = first.shape().to_vec();
    for t in &inputs[1..] {
        shape = broadcast_shapes(&shape, t.shape()).ok_or_else(|| {
            KernelError::invalid(
                op,
                format!(
                    "`{}`: operand shapes {:?} do not broadcast",
                    k.name,
                    inputs.iter().map(|t| t.shape()).collect::<Vec<_>>()
                ),
            )
        })?;
    }
    let out = dev.zeros(dtype, &shape)?;
    let numel = out.numel();
    if numel == 0 {
        return Ok(out);
    }
    let rank = shape.len();
    let mut meta = Vec::with_capacity(1 + rank * (inputs.len() + 1));
    meta.push(i64_of(op, rank)?);
    for &d in &shape {
        meta.push(i64_of(op, d)?);
    }
    for t in inputs {
        for s in broadcast_strides(t.shape(), &shape) {
            meta.push(i64_of(op, s)?);
        }
    }
    let (count, cfg) = match k.launch {
        GeneratedLaunch::Elementwise => (numel, flat(numel)),
        GeneratedLaunch::Rows => {
            let n = shape.last().copied().unwrap_or(1);
            let rows = numel / n;
            let blocks = u32::try_from(rows)
                .ok()
                .filter(|&b| b <= i32::MAX as u32)
                .ok_or_else(|| {
                    KernelError::invalid(op, format!("{rows} rows is over the grid limit"))
                })?;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (ROW_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            (rows, cfg)
        }
    };
    let count = i64_of(op, count)?;
    let scal: Vec<f32> = scalars.iter().map(|&v| v as f32).collect();
    let stream = dev.stream().clone();
    let sc = if scal.is_empty() {
        stream.alloc_zeros::<f32>(1)
    } else {
        stream.clone_htod(&scal)
    }
    .map_err(|e| cuda_err("upload", e))?;
    let meta = dev.upload_i64(&meta)?;
    let name = format!("{}@{:x}", k.name, k.source.as_ptr() as usize);
    let defines = [("DTYPE_ID", dtype_id(dtype)?.to_string())];
    let f = dev.function_with(&name, || generated_source(k.source), &defines, k.entry)?;
    let ov = out.view();
    let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov);
    for v in &views {
        args.arg(v);
    }
    args.arg(&sc).arg(&meta).arg(&count);
    // SAFETY: the generated entry takes `(elem_t* out, const elem_t* in0.., const float*
    // sc, const i64* meta, i64 count)` in this order, with elem_t the storage of
    // DTYPE_ID, which every buffer has (checked above). `meta` holds the rank, the
    // output shape and each operand's broadcast strides over it, so every offset the
    // kernel forms is inside its operand; the output is contiguous of that shape. A row
    // launch has 256 threads, the size of the kernel's static shared array, and `count`
    // rows of `n` (the last dim) elements; an elementwise launch walks `count` = numel.
    unsafe { args.launch(cfg) }.map_err(|e| cuda_err(op, e))?;
    Ok(out)
}
