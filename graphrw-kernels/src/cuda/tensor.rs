//! [`CudaTensor`]: a contiguous tensor in device memory.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaView};

use super::{cuda_err, CudaDevice};
use crate::{DType, KernelError, Tensor};

/// A contiguous tensor in device memory: dtype, shape and a window of a device buffer on
/// one [`CudaDevice`].
///
/// Cloning shares the buffer (like [`Tensor`]); reshapes and leading-dim windows are views
/// of the same buffer. Kernels always write fresh buffers, so shared data never changes.
#[derive(Clone)]
pub struct CudaTensor {
    dev: Arc<CudaDevice>,
    buf: Arc<CudaSlice<u8>>,
    /// Byte offset of element 0 in `buf`.
    offset: usize,
    dtype: DType,
    shape: Vec<usize>,
}

impl fmt::Debug for CudaTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaTensor({}{:?} on cuda:{})",
            self.dtype,
            self.shape,
            self.dev.ordinal()
        )
    }
}

impl CudaTensor {
    /// A tensor over a whole fresh buffer (at least `shape`'s bytes long).
    pub(crate) fn from_buffer(
        dev: Arc<CudaDevice>,
        buf: CudaSlice<u8>,
        dtype: DType,
        shape: Vec<usize>,
    ) -> CudaTensor {
        CudaTensor {
            dev,
            buf: Arc::new(buf),
            offset: 0,
            dtype,
            shape,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size of the data in bytes.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size_in_bytes()
    }

    /// The device holding the data.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }

    /// The tensor's bytes in the device buffer (one byte past the offset when empty, so
    /// a kernel argument is always a valid pointer; kernels never touch it then).
    pub(crate) fn view(&self) -> CudaView<'_, u8> {
        let end = (self.offset + self.nbytes().max(1)).min(self.buf.len());
        self.buf.slice(self.offset.min(end)..end)
    }

    /// The same data under another shape with as many elements (no copy).
    pub fn reshape(&self, shape: Vec<usize>) -> Result<CudaTensor, KernelError> {
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(self.numel()) {
            return Err(KernelError::NumelMismatch {
                op: "cuda reshape",
                shape,
                expected: self.numel(),
                got: n.unwrap_or(usize::MAX),
            });
        }
        Ok(CudaTensor {
            shape,
            ..self.clone()
        })
    }

    /// Elements `start..start + len` of the flat data, as a tensor of `shape` (no copy).
    pub(crate) fn window(&self, start: usize, shape: Vec<usize>) -> CudaTensor {
        let esz = self.dtype.size_in_bytes();
        CudaTensor {
            offset: self.offset + start * esz,
            shape,
            ..self.clone()
        }
    }

    /// Copies the data back to the host (waits for queued work on the stream).
    pub fn to_host(&self) -> Result<Tensor, KernelError> {
        let n = self.nbytes();
        let mut bytes = self
            .dev
            .stream()
            .clone_dtoh(&self.view())
            .map_err(|e| cuda_err("download", e))?;
        bytes.truncate(n);
        Tensor::from_raw_bytes(self.dtype, &self.shape, &bytes)
    }
}
