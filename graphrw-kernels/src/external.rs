//! [`ExternalElements`]: a caller's buffer viewed in place as a tensor's storage while an
//! owner the caller hands over keeps it alive (a host language's array fed to a run).
//! The tensors over such a buffer ([`Tensor::from_external`](crate::Tensor::from_external))
//! and a tensor's elements handed the other way ([`crate::ExportedElements`]) live with
//! the tensor.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::mapped::Plain;
use crate::DType;

/// What keeps an external buffer allocated: anything the caller hands over (a host
/// language's reference to its array). Dropped when the last tensor viewing the buffer
/// is.
pub type Owner = Arc<dyn Any + Send + Sync>;

/// Little-endian elements of one dtype (not `bool`) in a buffer graphrw did not
/// allocate, viewed in place: the storage of a tensor made by
/// [`Tensor::from_external`](crate::Tensor::from_external). Read-only: nothing in graphrw writes to them (a kernel
/// that writes in place, such as a cache appending rows, copies them first).
#[derive(Clone)]
pub struct ExternalElements {
    /// Keeps the buffer allocated; never read.
    _owner: Owner,
    /// The address of the first element (aligned for the dtype, nonzero).
    address: usize,
    /// Number of elements.
    len: usize,
    dtype: DType,
}

impl fmt::Debug for ExternalElements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ExternalElements({} x {} at {:#x})",
            self.len, self.dtype, self.address
        )
    }
}

impl ExternalElements {
    /// A view of `len` elements of `dtype` at `address`, kept alive by `owner`.
    ///
    /// # Safety
    /// `address` is nonzero and aligned for `dtype`, which is not `bool`, on a
    /// little-endian host, and starts `len * dtype.size_in_bytes()` bytes that stay
    /// allocated and readable, and that nothing writes, until the last clone of `owner`
    /// is dropped.
    pub(crate) unsafe fn new(owner: Owner, address: usize, len: usize, dtype: DType) -> Self {
        ExternalElements {
            _owner: owner,
            address,
            len,
            dtype,
        }
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no elements are viewed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first element.
    pub fn address(&self) -> usize {
        self.address
    }

    /// The elements as `T`, when `T` is their dtype.
    pub(crate) fn typed<T: Plain>(&self) -> Option<&[T]> {
        if T::DTYPE != self.dtype {
            return None;
        }
        // SAFETY: `ExternalElements::new` built `self` only for a nonzero address
        // aligned for the dtype, on a little-endian host, over `len` elements that its
        // caller promised stay allocated, readable and unwritten until the last clone of
        // `_owner` is dropped; `self` holds a clone for as long as the slice borrows it.
        // `T: Plain` accepts every bit pattern in little-endian layout, and `T` is the
        // dtype the address was checked for. Nothing writes through this slice.
        Some(unsafe { std::slice::from_raw_parts(self.address as *const T, self.len) })
    }
}
