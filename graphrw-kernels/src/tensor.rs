//! The [`Tensor`]: dtype-tagged, contiguous, row-major storage shared through an `Arc`.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::macros::dispatch;
use crate::mapped::{FileRange, MappedElements, MappedFile};
use crate::{DType, Element, KernelError, Storage};

mod exchange;

pub use exchange::ExportedElements;

/// An n-dimensional array: a shape and contiguous row-major elements of one [`DType`].
///
/// The storage sits behind an `Arc`, so `clone()`, [`reshape`](crate::cpu::reshape),
/// `squeeze` and `unsqueeze` are cheap and share elements (see
/// [`Tensor::shares_storage_with`]). A tensor may be a contiguous window (an offset)
/// into a larger storage; [`Tensor::as_slice`] returns just that window. Tensors are
/// immutable: kernels return new tensors.
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    offset: usize,
    shape: Vec<usize>,
}

/// The element count of `shape`, or an error when it overflows `usize`.
pub(crate) fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize, KernelError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| KernelError::shape(op, format!("shape {shape:?} has too many elements")))
}

impl Tensor {
    /// A tensor of `shape` holding `data` in row-major order.
    ///
    /// Errors when `data.len()` is not the element count of `shape`.
    pub fn from_vec<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Result<Tensor, KernelError> {
        let expected = checked_numel("from_vec", &shape)?;
        if expected != data.len() {
            return Err(KernelError::NumelMismatch {
                op: "from_vec",
                shape,
                expected,
                got: data.len(),
            });
        }
        Ok(Tensor::from_parts(shape, T::into_storage(data)))
    }

    /// Builds a tensor whose storage length is known to match `shape`.
    pub(crate) fn from_parts(shape: Vec<usize>, storage: Storage) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), storage.len());
        Tensor {
            storage: Arc::new(storage),
            offset: 0,
            shape,
        }
    }

    /// Builds a tensor from a vector whose length is known to match `shape`.
    pub(crate) fn from_data<T: Element>(shape: Vec<usize>, data: Vec<T>) -> Tensor {
        Tensor::from_parts(shape, T::into_storage(data))
    }

    /// A 0-dimensional tensor holding `v`.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        Tensor::from_data(Vec::new(), vec![v])
    }

    /// A tensor of `shape` filled with zeros (`false` for bool).
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        Tensor::full(dtype, shape, 0.0)
    }

    /// A tensor of `shape` filled with `value` converted to `dtype` (integers truncate
    /// toward zero, bool is `value != 0`).
    pub fn full(dtype: DType, shape: &[usize], value: f64) -> Tensor {
        let n: usize = shape.iter().product();
        dispatch!(dtype, |T| Tensor::from_data(
            shape.to_vec(),
            vec![T::from_f64(value); n]
        ))
    }

    /// A tensor of `dtype` and `shape` from `f64` values (converted like [`Tensor::full`]).
    ///
    /// Errors when `data.len()` is not the element count of `shape`.
    pub fn from_f64_slice(
        dtype: DType,
        shape: &[usize],
        data: &[f64],
    ) -> Result<Tensor, KernelError> {
        dispatch!(dtype, |T| Tensor::from_vec(
            shape.to_vec(),
            data.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>()
        ))
    }

    /// A tensor from little-endian bytes (as stored in ONNX `raw_data`); bool is one byte
    /// per element, nonzero meaning true.
    ///
    /// Errors when `bytes.len()` is not `numel * dtype.size_in_bytes()`.
    pub fn from_raw_bytes(
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<Tensor, KernelError> {
        let n = checked_numel("from_raw_bytes", shape)?;
        let width = dtype.size_in_bytes();
        let expected = n.checked_mul(width).ok_or_else(|| {
            KernelError::shape(
                "from_raw_bytes",
                format!("shape {shape:?} has too many bytes"),
            )
        })?;
        if bytes.len() != expected {
            return Err(KernelError::NumelMismatch {
                op: "from_raw_bytes",
                shape: shape.to_vec(),
                expected,
                got: bytes.len(),
            });
        }
        Ok(dispatch!(dtype, |T| Tensor::from_data(
            shape.to_vec(),
            bytes
                .chunks_exact(width)
                .map(T::read_le)
                .collect::<Vec<T>>()
        )))
    }

    /// A tensor of `dtype` and `shape` whose little-endian elements start at byte
    /// `offset` of a mapped file, viewed in place: nothing is read or copied until the
    /// elements are used, and [`Tensor::file_range`] gives the range back to writers.
    ///
    /// Falls back to a copy (through [`Tensor::from_raw_bytes`]) where the file's bytes
    /// cannot be viewed as elements: `bool` (only 0 and 1 are valid), an offset not
    /// aligned for the dtype, or a big-endian host.
    ///
    /// Errors when the range lies beyond the end of the file as it was mapped, or the
    /// shape's size overflows. The file must not be changed while the tensor lives (see
    /// [`crate::mapped`]).
    pub fn from_mapped(
        file: &Arc<MappedFile>,
        offset: u64,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor, KernelError> {
        let op = "from_mapped";
        let n = checked_numel(op, shape)?;
        let nbytes = n
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| KernelError::shape(op, format!("shape {shape:?} has too many bytes")))?;
        let end = offset.checked_add(nbytes as u64);
        let start = usize::try_from(offset)
            .ok()
            .filter(|_| end.is_some_and(|e| e <= file.len()));
        let Some(start) = start else {
            return Err(KernelError::invalid(
                op,
                format!(
                    "bytes {offset}..{} lie beyond the end of `{}` ({} bytes)",
                    end.map_or_else(|| "overflow".to_string(), |e| e.to_string()),
                    file.path().display(),
                    file.len()
                ),
            ));
        };
        match MappedElements::new(file, start, n, dtype) {
            Some(m) => Ok(Tensor::from_parts(shape.to_vec(), Storage::Mapped(m))),
            None => {
                let bytes = file.bytes(start, nbytes).ok_or_else(|| {
                    KernelError::invalid(op, "the range lies beyond the mapped bytes")
                })?;
                Tensor::from_raw_bytes(dtype, shape, bytes)
            }
        }
    }

    /// A weak handle on this tensor's storage (see [`crate::cpu::PackedWeight`]).
    pub(crate) fn storage_handle(&self) -> std::sync::Weak<Storage> {
        Arc::downgrade(&self.storage)
    }

    /// The address of this tensor's storage (its identity while it lives).
    pub(crate) fn storage_ptr(&self) -> *const Storage {
        Arc::as_ptr(&self.storage)
    }

    /// Where this tensor's window starts in its storage, in elements.
    pub(crate) fn storage_offset(&self) -> usize {
        self.offset
    }

    /// The bytes of the file this tensor's elements are mapped from (just this
    /// tensor's window of the storage), or `None` for elements held in memory.
    pub fn file_range(&self) -> Option<FileRange> {
        match &*self.storage {
            Storage::Mapped(m) => {
                let width = self.dtype().size_in_bytes() as u64;
                Some(FileRange {
                    file: Arc::clone(m.file()),
                    offset: m.byte_offset() + self.offset as u64 * width,
                    len: self.nbytes() as u64,
                })
            }
            _ => None,
        }
    }

    /// The elements as little-endian bytes (the inverse of [`Tensor::from_raw_bytes`]).
    pub fn to_raw_bytes(&self) -> Vec<u8> {
        // Mapped elements are their file's little-endian bytes: read through the file,
        // they neither touch the map's pages nor make an aligned copy.
        if let Some(bytes) = self.file_range().and_then(|r| r.read().ok()) {
            return bytes;
        }
        let mut out = Vec::with_capacity(self.nbytes());
        dispatch!(self.dtype(), |T| {
            for &v in self.slice_of::<T>() {
                v.write_le(&mut out);
            }
        });
        out
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// The size of each dimension.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The number of bytes the elements take.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype().size_in_bytes()
    }

    /// The elements in row-major order, when `T` is the tensor's element type.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], KernelError> {
        match T::storage_slice(&self.storage) {
            Some(all) => Ok(&all[self.offset..self.offset + self.numel()]),
            None => Err(KernelError::DTypeMismatch {
                op: "as_slice",
                lhs: T::DTYPE,
                rhs: self.dtype(),
            }),
        }
    }

    /// The elements, for a `T` already checked to be the tensor's element type.
    pub(crate) fn slice_of<T: Element>(&self) -> &[T] {
        match T::storage_slice(&self.storage) {
            Some(all) => &all[self.offset..self.offset + self.numel()],
            None => &[],
        }
    }

    /// The elements converted to `f64`.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        dispatch!(self.dtype(), |T| self
            .slice_of::<T>()
            .iter()
            .map(|v| v.to_f64())
            .collect())
    }

    /// The elements converted to `f64` one by one, read in place: for comparing or
    /// summarising a large tensor without a second copy of it (as [`Self::to_f64_vec`]
    /// makes).
    pub fn iter_f64(&self) -> Box<dyn Iterator<Item = f64> + '_> {
        dispatch!(self.dtype(), |T| Box::new(
            self.slice_of::<T>().iter().map(|v| v.to_f64())
        ))
    }

    /// The only element converted to `f64`, for a tensor holding exactly one element
    /// (`None` otherwise); reads it in place, without building a vector.
    pub fn scalar_f64(&self) -> Option<f64> {
        if self.numel() != 1 {
            return None;
        }
        dispatch!(self.dtype(), |T| self
            .slice_of::<T>()
            .first()
            .map(|v| v.to_f64()))
    }

    /// The elements converted to `i64` (floats truncate toward zero); for index and
    /// shape tensors.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        dispatch!(self.dtype(), |T| self
            .slice_of::<T>()
            .iter()
            .map(|v| v.to_i64())
            .collect())
    }

    /// The elements as `f32`, borrowed when the tensor already holds `f32`.
    pub fn to_f32_cow(&self) -> Cow<'_, [f32]> {
        match self.dtype() {
            DType::F32 => Cow::Borrowed(self.slice_of::<f32>()),
            dt => dispatch!(dt, |T| Cow::Owned(
                self.slice_of::<T>().iter().map(|v| v.to_f32()).collect()
            )),
        }
    }

    /// The elements converted to their compute type `T::Acc` (f32 for f32/f16/bf16,
    /// f64 for f64), borrowed when no conversion is needed.
    pub(crate) fn acc_cow<T: Element>(&self) -> Cow<'_, [T::Acc]> {
        // f32 and f64 are their own compute types: borrow them instead of copying.
        if let Some(same) = <T::Acc as Element>::storage_slice(&self.storage) {
            return Cow::Borrowed(&same[self.offset..self.offset + self.numel()]);
        }
        Cow::Owned(self.slice_of::<T>().iter().map(|v| v.to_acc()).collect())
    }

    /// True when both tensors view the same storage allocation.
    pub fn shares_storage_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The whole storage, when this tensor is its only holder (no clone, view or
    /// window shares it); `None` otherwise. For buffer reuse
    /// ([`crate::cpu::BufferPool`]).
    pub fn into_unique_storage(self) -> Option<Storage> {
        Arc::try_unwrap(self.storage).ok()
    }

    /// The whole storage, writable, when this tensor starts at its first element, is
    /// its only holder and holds its elements in memory; `None` otherwise (a shared
    /// storage stays immutable, and mapped or external elements are read-only).
    pub(crate) fn unique_storage_mut(&mut self) -> Option<&mut Storage> {
        if self.offset != 0 {
            return None;
        }
        Arc::get_mut(&mut self.storage)
            .filter(|s| !matches!(s, Storage::Mapped(_) | Storage::External(_)))
    }

    /// The storage.
    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The storage, this tensor's offset in it and its shape, when this tensor is the
    /// storage's only holder and the elements are in memory; the tensor back otherwise.
    pub(crate) fn into_exclusive(self) -> Result<(Storage, usize, Vec<usize>), Tensor> {
        if matches!(*self.storage, Storage::Mapped(_) | Storage::External(_)) {
            return Err(self);
        }
        let Tensor {
            storage,
            offset,
            shape,
        } = self;
        match Arc::try_unwrap(storage) {
            Ok(s) => Ok((s, offset, shape)),
            Err(storage) => Err(Tensor {
                storage,
                offset,
                shape,
            }),
        }
    }

    /// A copy converted to `dtype` (PyTorch casting: float to integer truncates toward
    /// zero with NaN becoming 0, anything to bool is `!= 0`); a cheap clone when the
    /// dtype already matches.
    pub fn cast(&self, dtype: DType) -> Tensor {
        let src = self.dtype();
        if src == dtype {
            return self.clone();
        }
        let exact_ints = !src.is_float() && !dtype.is_float();
        dispatch!(src, |S| {
            let data = self.slice_of::<S>();
            dispatch!(dtype, |D| {
                let out: Vec<D> = if exact_ints {
                    data.iter().map(|v| D::from_i64(v.to_i64())).collect()
                } else {
                    data.iter().map(|v| D::from_f64(v.to_f64())).collect()
                };
                Tensor::from_data(self.shape.clone(), out)
            })
        })
    }

    /// The same elements under another shape of equal element count (no copy).
    pub(crate) fn with_shape(&self, shape: Vec<usize>) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), self.numel());
        Tensor {
            storage: Arc::clone(&self.storage),
            offset: self.offset,
            shape,
        }
    }

    /// A contiguous window of this tensor's elements, `[start, start + numel(shape))`,
    /// sharing storage.
    pub(crate) fn window(&self, start: usize, shape: Vec<usize>) -> Tensor {
        Tensor {
            storage: Arc::clone(&self.storage),
            offset: self.offset + start,
            shape,
        }
    }

    /// A copy of the elements in fresh storage.
    pub(crate) fn deep_copy(&self) -> Tensor {
        dispatch!(self.dtype(), |T| Tensor::from_data(
            self.shape.clone(),
            self.slice_of::<T>().to_vec()
        ))
    }
}

const DEBUG_VALUES: usize = 8;

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}{:?}, [", self.dtype(), self.shape)?;
        dispatch!(self.dtype(), |T| {
            let data = self.slice_of::<T>();
            for (i, v) in data.iter().take(DEBUG_VALUES).enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{v:?}")?;
            }
            if data.len() > DEBUG_VALUES {
                write!(f, ", ... ({} more)", data.len() - DEBUG_VALUES)?;
            }
        });
        f.write_str("])")
    }
}
