//! `matmul` on the GPU through cuBLAS (`cublasGemmStridedBatchedEx`), with torch's
//! semantics: 1-D operands are promoted and the added dim dropped, batch dims broadcast.
//! f32 (no TF32: plain f32 compute), f16 and bf16 (f32 accumulation) and f64.

use cudarc::cublas::result::gemm_strided_batched_ex;
use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t,
};
use cudarc::driver::DevicePtr;

use super::{cuda_err, CudaTensor};
use crate::broadcast::broadcast_shapes;
use crate::{DType, KernelError};

/// The batch of an operand: its own batch dims and, when it does not cover the whole
/// broadcast batch, a copy expanded to it (stride 0 when it has a single matrix).
fn batched(
    t: &CudaTensor,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> Result<(CudaTensor, i64), KernelError> {
    let own: usize = t.shape()[..t.rank() - 2].iter().product();
    let total: usize = batch.iter().product();
    let m = (rows * cols) as i64;
    if own == total {
        return Ok((t.clone(), m));
    }
    if own == 1 {
        return Ok((t.clone(), 0));
    }
    let mut sizes: Vec<i64> = batch.iter().map(|&b| b as i64).collect();
    sizes.extend([rows as i64, cols as i64]);
    Ok((super::expand(t, &sizes)?, m))
}

/// Matrix product with batch broadcasting (`[.., M, K] @ [.., K, N]`).
pub fn matmul(a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor, KernelError> {
    let op = "matmul";
    if a.dtype() != b.dtype() {
        return Err(KernelError::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    let (dt, compute) = match a.dtype() {
        DType::F32 => (
            cudaDataType_t::CUDA_R_32F,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        DType::F16 => (
            cudaDataType_t::CUDA_R_16F,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        DType::BF16 => (
            cudaDataType_t::CUDA_R_16BF,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        DType::F64 => (
            cudaDataType_t::CUDA_R_64F,
            cublasComputeType_t::CUBLAS_COMPUTE_64F,
        ),
        other => {
            return Err(KernelError::UnsupportedDType {
                op,
                dtype: other,
                expected: "f32, f16, bf16 or f64 (integer matmul runs on the CPU)",
            })
        }
    };
    if a.device().ordinal() != b.device().ordinal() {
        return Err(KernelError::invalid(op, "operands on different devices"));
    }
    if a.rank() == 0 || b.rank() == 0 {
        return Err(KernelError::shape(
            op,
            "matmul needs operands of rank 1 or more",
        ));
    }
    // Promote 1-D operands.
    let a2 = if a.rank() == 1 {
        a.reshape(vec![1, a.numel()])?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.reshape(vec![b.numel(), 1])?
    } else {
        b.clone()
    };
    let (ra, rb) = (a2.rank(), b2.rank());
    let (m, k) = (a2.shape()[ra - 2], a2.shape()[ra - 1]);
    let (k2, n) = (b2.shape()[rb - 2], b2.shape()[rb - 1]);
    if k != k2 {
        return Err(KernelError::shape(
            op,
            format!("inner dims differ: {:?} @ {:?}", a.shape(), b.shape()),
        ));
    }
    let batch =
        broadcast_shapes(&a2.shape()[..ra - 2], &b2.shape()[..rb - 2]).ok_or_else(|| {
            KernelError::Broadcast {
                op,
                lhs: a.shape().to_vec(),
                rhs: b.shape().to_vec(),
            }
        })?;
    let mut out_shape = batch.clone();
    if a.rank() > 1 {
        out_shape.push(m);
    }
    if b.rank() > 1 {
        out_shape.push(n);
    }
    let dev = a.device().clone();
    let out = dev.zeros(a.dtype(), &out_shape)?;
    let nbatch: usize = batch.iter().product();
    if nbatch == 0 || m == 0 || n == 0 || k == 0 {
        return Ok(out); // an empty product, or sums of nothing: zeros
    }
    let (a3, mut stride_a) = batched(&a2, &batch, m, k)?;
    let (b3, stride_b) = batched(&b2, &batch, k, n)?;
    // One shared right operand and a full left batch: one GEMM with M' = batch * M.
    let (mut mm, mut count) = (m, nbatch);
    if stride_b == 0 && stride_a != 0 {
        mm = m * nbatch;
        count = 1;
        stride_a = 0;
    }
    let int = |x: usize| {
        i32::try_from(x).map_err(|_| KernelError::Unsupported {
            op,
            msg: format!("size {x} is over cuBLAS's i32"),
        })
    };
    let (mi, ni, ki, ci) = (int(mm)?, int(n)?, int(k)?, int(count)?);
    let stride_c = (mm * n) as i64;
    let (alpha_f, beta_f) = (1.0f32, 0.0f32);
    let (alpha_d, beta_d) = (1.0f64, 0.0f64);
    let (alpha, beta): (*const std::ffi::c_void, *const std::ffi::c_void) =
        if a.dtype() == DType::F64 {
            (&alpha_d as *const f64 as _, &beta_d as *const f64 as _)
        } else {
            (&alpha_f as *const f32 as _, &beta_f as *const f32 as _)
        };
    gemm(
        &dev,
        &a3,
        &b3,
        &out,
        [mi, ni, ki, ci],
        [stride_a, stride_b, stride_c],
        alpha,
        beta,
        dt,
        compute,
    )?;
    Ok(out)
}

/// One strided-batched GEMM call (see [`matmul`] for the argument meanings).
#[allow(clippy::too_many_arguments)]
fn gemm(
    dev: &std::sync::Arc<super::CudaDevice>,
    a3: &CudaTensor,
    b3: &CudaTensor,
    out: &CudaTensor,
    [mi, ni, ki, ci]: [i32; 4],
    [stride_a, stride_b, stride_c]: [i64; 3],
    alpha: *const std::ffi::c_void,
    beta: *const std::ffi::c_void,
    dt: cudaDataType_t,
    compute: cublasComputeType_t,
) -> Result<(), KernelError> {
    let blas = dev.blas()?;
    let stream = dev.stream();
    let (av, bv, ov) = (a3.view(), b3.view(), out.view());
    let (pa, _ra) = av.device_ptr(stream);
    let (pb, _rb) = bv.device_ptr(stream);
    let (pc, _rc) = ov.device_ptr(stream);
    // Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T = B^T A^T: cuBLAS gets
    // (m, n, k) = (N, M', K) with B first.
    // SAFETY: the pointers are live device buffers of this stream holding `count`
    // matrices of K x N (b, stride_b apart, or one when 0), M' x K (a) and M' x N (out)
    // elements of `dt`, as the leading dims and strides passed say; alpha and beta point
    // to host scalars of the compute type that outlive the call.
    unsafe {
        gemm_strided_batched_ex(
            *blas.handle(),
            cublasOperation_t::CUBLAS_OP_N,
            cublasOperation_t::CUBLAS_OP_N,
            ni,
            mi,
            ki,
            alpha,
            pb as *const _,
            dt,
            ni,
            stride_b,
            pa as *const _,
            dt,
            ki,
            stride_a,
            beta,
            pc as *mut _,
            dt,
            ni,
            stride_c,
            ci,
            compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| cuda_err("cublas gemm", e))
}
