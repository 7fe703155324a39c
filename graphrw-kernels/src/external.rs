//! Memory that crosses the crate's edge without a copy, both ways:
//! [`ExternalElements`], a caller's buffer viewed in place as a tensor's storage while an
//! owner the caller hands over keeps it alive (a host language's array fed to a run), and
//! [`ExportedElements`], a tensor's elements handed over to a caller who reads and writes
//! them in place (a run's output given back as an array).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::macros::dispatch;
use crate::mapped::Plain;
use crate::tensor::checked_numel;
use crate::{DType, Element, KernelError, Storage, Tensor};

/// What keeps an external buffer allocated: anything the caller hands over (a host
/// language's reference to its array). Dropped when the last tensor viewing the buffer
/// is.
pub type Owner = Arc<dyn Any + Send + Sync>;

/// Little-endian elements of one dtype (not `bool`) in a buffer graphrw did not
/// allocate, viewed in place: the storage of a tensor made by
/// [`Tensor::from_external`]. Read-only: nothing in graphrw writes to them (a kernel
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
        // SAFETY: `Tensor::from_external` built `self` only for a nonzero address
        // aligned for the dtype, on a little-endian host, over `len` elements that its
        // caller promised stay allocated, readable and unwritten until the last clone of
        // `_owner` is dropped; `self` holds a clone for as long as the slice borrows it.
        // `T: Plain` accepts every bit pattern in little-endian layout, and `T` is the
        // dtype the address was checked for. Nothing writes through this slice.
        Some(unsafe { std::slice::from_raw_parts(self.address as *const T, self.len) })
    }
}

/// A tensor's elements handed over to a caller ([`Tensor::export`]): a buffer held by
/// nothing else, freed when this is dropped. The caller may read and write
/// [`ExportedElements::nbytes`] bytes at [`ExportedElements::address`] while it holds
/// this; graphrw never reads them again (there is no accessor), so whatever is written
/// there is never read back as Rust values.
pub struct ExportedElements {
    /// Keeps the elements allocated; never read after the export.
    _storage: Storage,
    address: usize,
    nbytes: usize,
    dtype: DType,
    shape: Vec<usize>,
}

impl fmt::Debug for ExportedElements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ExportedElements({}{:?} at {:#x})",
            self.dtype, self.shape, self.address
        )
    }
}

impl ExportedElements {
    /// The address of the first element, writable (for a zero-sized tensor, a nonzero
    /// dangling address that must not be read).
    pub fn address(&self) -> usize {
        self.address
    }

    /// The size of the elements in bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The dtype of the elements (`bool` as one byte each, 0 or 1 when exported).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape of the tensor exported.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
}

/// The writable address of element `offset` of an in-memory storage (`None` for mapped
/// or external elements, which graphrw does not own).
fn address_mut(storage: &mut Storage, offset: usize) -> Option<usize> {
    fn at<T>(v: &mut [T], offset: usize) -> usize {
        v.as_mut_ptr().wrapping_add(offset) as usize
    }
    Some(match storage {
        Storage::F32(v) => at(v, offset),
        Storage::F64(v) => at(v, offset),
        Storage::F16(v) => at(v, offset),
        Storage::BF16(v) => at(v, offset),
        Storage::I64(v) => at(v, offset),
        Storage::I32(v) => at(v, offset),
        Storage::Bool(v) => at(v, offset),
        Storage::U8(v) => at(v, offset),
        Storage::I8(v) => at(v, offset),
        Storage::I16(v) => at(v, offset),
        Storage::U16(v) => at(v, offset),
        Storage::U32(v) => at(v, offset),
        Storage::U64(v) => at(v, offset),
        Storage::Mapped(_) | Storage::External(_) => return None,
    })
}

impl Tensor {
    /// A tensor of `dtype` and `shape` over the little-endian elements at `address`,
    /// read in place: `owner` (a host language's reference to its array) is kept, in
    /// every tensor sharing the storage, until the last of them is dropped.
    ///
    /// Falls back to a copy (through [`Tensor::from_raw_bytes`]) where the bytes cannot
    /// be viewed as elements: `bool` (only 0 and 1 are valid), an address not aligned
    /// for the dtype, or a big-endian host; no elements need no address.
    ///
    /// Errors when the shape's size overflows.
    ///
    /// # Safety
    /// Unless the shape has no elements, `address` must be the start of
    /// `numel(shape) * dtype.size_in_bytes()` bytes that stay allocated and readable,
    /// and that nothing writes, until the last tensor sharing this storage (each holds a
    /// clone of `owner`) is dropped: the caller keeps such tensors from outliving its
    /// promise (copying what it keeps, see [`Tensor::into_owned`]).
    pub unsafe fn from_external(
        owner: Owner,
        address: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor, KernelError> {
        let op = "from_external";
        let n = checked_numel(op, shape)?;
        let nbytes = n
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| KernelError::shape(op, format!("shape {shape:?} has too many bytes")))?;
        if n == 0 {
            return Ok(Tensor::zeros(dtype, shape));
        }
        if address == 0 {
            return Err(KernelError::invalid(op, "null address"));
        }
        let viewable = dtype != DType::Bool
            && cfg!(target_endian = "little")
            && address.is_multiple_of(dtype.size_in_bytes());
        if viewable {
            let elements = ExternalElements {
                _owner: owner,
                address,
                len: n,
                dtype,
            };
            return Ok(Tensor::from_parts(
                shape.to_vec(),
                Storage::External(elements),
            ));
        }
        // SAFETY: the caller promises `nbytes` readable bytes at `address` (nonzero,
        // checked above) that nothing writes while `owner` lives, and `owner` lives to
        // the end of this function; any byte is a valid `u8`, whatever its alignment.
        let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, nbytes) };
        let copy = Tensor::from_raw_bytes(dtype, shape, bytes);
        drop(owner);
        copy
    }

    /// True when the elements are a caller's buffer viewed in place
    /// ([`Tensor::from_external`]).
    pub fn is_external(&self) -> bool {
        matches!(self.storage(), Storage::External(_))
    }

    /// This tensor with elements graphrw holds: a copy of external elements (so that
    /// nothing kept past the caller's promise views its buffer), itself otherwise.
    pub fn into_owned(self) -> Tensor {
        if self.is_external() {
            self.deep_copy()
        } else {
            self
        }
    }

    /// The address of the first element as it is read in place (for a caller that
    /// views the elements, read-only, while it holds this tensor or a clone of it).
    pub fn address(&self) -> usize {
        dispatch!(self.dtype(), |T| self.slice_of::<T>().as_ptr() as usize)
    }

    /// The elements handed over to a caller who may write them in place: this tensor's
    /// own buffer where no other tensor, view or window shares its storage and graphrw
    /// allocated it (a weak handle on it, such as a packed weight's, can no longer be
    /// upgraded); otherwise a copy (mapped or external elements, a storage shared with a
    /// weight or with another output). The flag is true when a copy was made.
    pub fn export(self) -> (ExportedElements, bool) {
        let dtype = self.dtype();
        let nbytes = self.nbytes();
        let (mut storage, offset, shape, copied) = match self.into_exclusive() {
            Ok((storage, offset, shape)) => (storage, offset, shape, false),
            Err(shared) => {
                let storage =
                    dispatch!(dtype, |T| T::into_storage(shared.slice_of::<T>().to_vec()));
                (storage, 0, shared.shape().to_vec(), true)
            }
        };
        let address = address_mut(&mut storage, offset).unwrap_or(0);
        (
            ExportedElements {
                _storage: storage,
                address,
                nbytes,
                dtype,
                shape,
            },
            copied,
        )
    }
}
