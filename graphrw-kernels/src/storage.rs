//! [`Storage`]: the elements of a tensor, one variant per dtype held in memory, or viewed
//! in place in a mapped file or a caller's buffer.

use half::{bf16, f16};

use crate::external::ExternalElements;
use crate::mapped::MappedElements;
use crate::DType;

/// The elements of a tensor: one variant per dtype holding them in memory,
/// [`Storage::Mapped`] viewing them in a memory-mapped file, or [`Storage::External`]
/// viewing them in a caller's buffer.
#[derive(Clone)]
pub enum Storage {
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
    /// `f16` elements.
    F16(Vec<f16>),
    /// `bf16` elements.
    BF16(Vec<bf16>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// Little-endian elements of any dtype but `bool`, viewed in place in a read-only
    /// file mapping (see [`Tensor::from_mapped`](crate::Tensor::from_mapped)).
    Mapped(MappedElements),
    /// Little-endian elements of any dtype but `bool`, viewed in place in a buffer a
    /// caller allocated and keeps alive (see [`Tensor::from_external`](crate::Tensor::from_external)); read-only.
    External(ExternalElements),
}

impl Storage {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::F16(_) => DType::F16,
            Storage::BF16(_) => DType::BF16,
            Storage::I64(_) => DType::I64,
            Storage::I32(_) => DType::I32,
            Storage::Bool(_) => DType::Bool,
            Storage::U8(_) => DType::U8,
            Storage::I8(_) => DType::I8,
            Storage::I16(_) => DType::I16,
            Storage::U16(_) => DType::U16,
            Storage::U32(_) => DType::U32,
            Storage::U64(_) => DType::U64,
            Storage::Mapped(m) => m.dtype(),
            Storage::External(e) => e.dtype(),
        }
    }

    /// The number of elements held.
    pub fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F64(v) => v.len(),
            Storage::F16(v) => v.len(),
            Storage::BF16(v) => v.len(),
            Storage::I64(v) => v.len(),
            Storage::I32(v) => v.len(),
            Storage::Bool(v) => v.len(),
            Storage::U8(v) => v.len(),
            Storage::I8(v) => v.len(),
            Storage::I16(v) => v.len(),
            Storage::U16(v) => v.len(),
            Storage::U32(v) => v.len(),
            Storage::U64(v) => v.len(),
            Storage::Mapped(m) => m.len(),
            Storage::External(e) => e.len(),
        }
    }

    /// True when no elements are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
