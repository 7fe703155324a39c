//! Launch helpers shared by the graph-op kernels: the by-value [`Layout`] parameter,
//! dtype ids, grid sizes and the index-error flag.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig};

use super::{cuda_err, CudaDevice};
use crate::broadcast::collapse_dims;
use crate::{DType, KernelError};

/// The most dims a [`Layout`] carries (`MAXR` in `common.cuh`).
pub(crate) const MAXR: usize = 8;

/// A strided iteration space for up to 4 operands (`struct Layout` in `common.cuh`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Layout {
    n: i64,
    rank: i64,
    shape: [i64; MAXR],
    st: [[i64; MAXR]; 4],
    off: [i64; 4],
}

// SAFETY: `Layout` is `#[repr(C)]`, made only of i64s, with the field order and sizes of
// `struct Layout` in common.cuh, so the kernel reads exactly these bytes.
unsafe impl DeviceRepr for Layout {}

impl Layout {
    /// The layout of `shape` walked by `N` operands with the given element strides and
    /// base offsets; contiguous runs are merged and size-1 dims dropped first.
    pub(crate) fn new<const N: usize>(
        op: &'static str,
        shape: &[usize],
        strides: [&[usize]; N],
        offsets: [usize; N],
    ) -> Result<Layout, KernelError> {
        let (cshape, cstrides) = collapse_dims(shape, strides);
        if cshape.len() > MAXR {
            return Err(KernelError::Unsupported {
                op,
                msg: format!("{shape:?} has more than {MAXR} dims that cannot be merged"),
            });
        }
        let mut l = Layout {
            n: i64_of(op, shape.iter().product())?,
            rank: cshape.len() as i64,
            ..Layout::default()
        };
        for (d, (&s, st)) in cshape.iter().zip(&cstrides).enumerate() {
            l.shape[d] = i64_of(op, s)?;
            for (k, &s) in st.iter().enumerate() {
                l.st[k][d] = i64_of(op, s)?;
            }
        }
        for (k, &o) in offsets.iter().enumerate() {
            l.off[k] = i64_of(op, o)?;
        }
        Ok(l)
    }

    /// The number of elements walked.
    pub(crate) fn numel(&self) -> usize {
        self.n as usize
    }
}

/// Per-dim sizes and strides of gather_nd's index tuples (`struct NdDims`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NdDims {
    pub(crate) sizes: [i64; MAXR],
    pub(crate) strides: [i64; MAXR],
}

// SAFETY: `#[repr(C)]`, two arrays of i64 in the order of `struct NdDims` in layout.cu.
unsafe impl DeviceRepr for NdDims {}

/// `x` as an i64 kernel argument, or an error naming `op`.
pub(crate) fn i64_of(op: &'static str, x: usize) -> Result<i64, KernelError> {
    i64::try_from(x).map_err(|_| KernelError::Unsupported {
        op,
        msg: format!("size {x} is over i64"),
    })
}

/// The dtypes the CUDA kernels take (the narrow integers are CPU-only).
const CUDA_DTYPES: &str =
    "f32, f16, bf16, f64, i64, i32 or bool (the narrow integers run on the CPU)";

/// The dtype id the kernels use (see `common.cuh`), or an error for a dtype they lack.
pub(crate) fn dtype_id(d: DType) -> Result<u8, KernelError> {
    Ok(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I64 => 3,
        DType::I32 => 4,
        DType::Bool => 5,
        DType::F64 => 6,
        DType::U8 | DType::I8 | DType::I16 | DType::U16 | DType::U32 | DType::U64 => {
            return Err(KernelError::UnsupportedDType {
                op: "cuda",
                dtype: d,
                expected: CUDA_DTYPES,
            })
        }
    })
}

/// The arithmetic type id (`ACC`) for values of dtype `d`: 0 float, 1 double, 2 i64.
pub(crate) fn acc_id(d: DType) -> Result<u8, KernelError> {
    Ok(match d {
        DType::F32 | DType::F16 | DType::BF16 => 0,
        DType::F64 => 1,
        DType::I64 | DType::I32 | DType::Bool => 2,
        DType::U8 | DType::I8 | DType::I16 | DType::U16 | DType::U32 | DType::U64 => {
            return Err(KernelError::UnsupportedDType {
                op: "cuda",
                dtype: d,
                expected: CUDA_DTYPES,
            })
        }
    })
}

/// A grid-stride launch over `n` elements (256 threads a block).
pub(crate) fn flat(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 65536 * 8) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per row, with a power-of-two thread count (32..=1024) fitted to `len`.
pub(crate) fn rows(
    op: &'static str,
    nrows: usize,
    len: usize,
) -> Result<LaunchConfig, KernelError> {
    let threads = len.next_power_of_two().clamp(32, 1024) as u32;
    let blocks = u32::try_from(nrows).ok().filter(|&b| b <= i32::MAX as u32);
    let Some(blocks) = blocks else {
        return Err(KernelError::Unsupported {
            op,
            msg: format!("{nrows} rows is over the grid limit"),
        });
    };
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// A zeroed device flag that index kernels set to 1 + the position of a bad index.
pub(crate) fn error_flag(dev: &Arc<CudaDevice>) -> Result<CudaSlice<i32>, KernelError> {
    dev.stream()
        .alloc_zeros::<i32>(1)
        .map_err(|e| cuda_err("alloc", e))
}

/// Reads the flag back (waits for the kernel): the flat position of the first bad index.
pub(crate) fn read_flag(
    dev: &Arc<CudaDevice>,
    flag: &CudaSlice<i32>,
) -> Result<Option<usize>, KernelError> {
    let v = dev
        .stream()
        .clone_dtoh(flag)
        .map_err(|e| cuda_err("download", e))?;
    Ok(match v.first() {
        Some(&p) if p > 0 => Some(p as usize - 1),
        _ => None,
    })
}

/// Resolves a possibly negative `dim` against `rank`.
pub(crate) fn norm_dim(op: &'static str, dim: i64, rank: usize) -> Result<usize, KernelError> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(KernelError::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}
