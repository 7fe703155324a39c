//! Memory that crosses the crate's edge without a copy, both ways: a tensor over a
//! caller's buffer viewed in place ([`Tensor::from_external`], its storage an
//! [`ExternalElements`]) while an owner the caller hands over keeps it alive (a host
//! language's array fed to a run), and [`ExportedElements`], a tensor's elements handed
//! over to a caller who reads and writes them in place (a run's output given back as an
//! array).

use std::fmt;

use super::{checked_numel, Tensor};
use crate::external::{ExternalElements, Owner};
use crate::macros::dispatch;
use crate::{DType, Element, KernelError, Storage};

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
            // SAFETY: the address is nonzero, aligned for the dtype (not `bool`) on a
            // little-endian host (checked above), and the caller promises `nbytes`
            // readable bytes there that nothing writes while a clone of `owner` lives.
            let elements = unsafe { ExternalElements::new(owner, address, n, dtype) };
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
