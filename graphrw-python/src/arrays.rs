//! numpy arrays across the boundary without copies: a fed array read in place as a
//! tensor ([`tensor_of`]), and a run's output handed to numpy as an array over
//! graphrw's own buffer ([`Array`], through numpy's `__array_interface__`, which the
//! abi3-py39 limited API allows where the buffer protocol does not).

use std::sync::Arc;

use graphrw::kernels::ExportedElements;
use graphrw::{DType, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::{from_numpy_name, numpy_name, Failure, Kind};

/// A value as Python feeds it: numpy dtype name, shape, the address of its first
/// element, and the array itself (C-contiguous, aligned or not, native little-endian:
/// `graphrw._session` makes it so), kept alive while graphrw reads it.
///
/// This crate's one `unsafe` block reads it ([`tensor_of`]): the address comes from
/// Python, so only its caller can vouch for it; the view itself is graphrw-kernels'
/// (`Tensor::from_external`).
pub(crate) type Feed = (String, Vec<usize>, usize, Py<PyAny>);

/// The tensor of `feed`, viewing the array's memory in place (copied where it cannot
/// be viewed: bool, a misaligned address), converted to bf16 where the plan takes
/// bf16 and numpy gives float32; `input` names it in errors. With `owned` the elements
/// are copied (for what graphrw keeps past the call, such as a loop's caches).
pub(crate) fn tensor_of(
    py: Python<'_>,
    feed: &Feed,
    want: Option<DType>,
    input: &str,
    owned: bool,
) -> PyResult<Tensor> {
    let (dtype, shape, address, array) = feed;
    let bad = |m: String| Failure::new(Kind::InvalidArgument, m).into_pyerr(py);
    let dt = from_numpy_name(dtype)
        .ok_or_else(|| bad(format!("input `{input}`: unsupported dtype {dtype}")))?;
    let owner: graphrw::kernels::external::Owner = Arc::new(array.clone_ref(py));
    // SAFETY: `graphrw._session` passes a C-contiguous numpy array of `dtype` and
    // `shape` with `address` its first element (`_address`: through ctypes' buffer
    // protocol, or numpy's `__array_interface__`), and `owner`
    // holds a reference to that array, so numpy keeps its memory allocated (it refuses
    // to resize an array others reference) while any tensor over it lives. Nothing in
    // graphrw writes external elements, and no such tensor outlives the call that made
    // it: outputs and kept values are copied out of them (`Tensor::export`,
    // `Tensor::into_owned`) before the call returns. What the caller must not do is
    // write the array from another thread while the run reads it with the GIL
    // released, as with onnxruntime (the README says so).
    let mut t = unsafe { Tensor::from_external(owner, *address, dt, shape) }
        .map_err(|e| bad(format!("input `{input}`: {e}")))?;
    // numpy has no bfloat16 without ml_dtypes: a float32 array feeds a bf16 input,
    // rounded to it.
    if dt == DType::F32 && want == Some(DType::BF16) {
        t = t.cast(DType::BF16);
    }
    Ok(if owned { t.into_owned() } else { t })
}

/// numpy's type string of a dtype, as `__array_interface__` gives it (bf16 as its
/// 16-bit pattern: numpy has no bfloat16; `graphrw._session` views or widens it).
fn typestr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
    }
}

/// What an [`Array`] holds.
enum Held {
    /// An output handed over: nothing else in graphrw holds it; writable.
    Exported(ExportedElements),
    /// A value graphrw still holds (an `IOBinding`'s kept output): read-only, and its
    /// buffer stays out of the session's pool while this lives.
    Shared(Tensor),
}

/// A tensor's memory as numpy reads it: `numpy.asarray(array)` is an ndarray over it
/// (no copy) whose `base` is this object, which keeps the memory alive.
#[pyclass(module = "graphrw._native", frozen)]
pub(crate) struct Array {
    held: Held,
}

impl Array {
    /// An output handed over to Python, writable (copied first where graphrw still
    /// shares its storage, see `Tensor::export`).
    pub(crate) fn exported(t: Tensor) -> Array {
        Array {
            held: Held::Exported(t.export().0),
        }
    }

    /// A read-only view of a tensor graphrw keeps.
    pub(crate) fn shared(t: Tensor) -> Array {
        Array {
            held: Held::Shared(t),
        }
    }

    fn dtype_of(&self) -> DType {
        match &self.held {
            Held::Exported(e) => e.dtype(),
            Held::Shared(t) => t.dtype(),
        }
    }
}

#[pymethods]
impl Array {
    /// numpy's array interface (version 3): shape, type string, and the data's address
    /// with its read-only flag.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (shape, address, readonly) = match &self.held {
            Held::Exported(e) => (e.shape(), e.address(), false),
            Held::Shared(t) => (t.shape(), t.address(), true),
        };
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, shape)?)?;
        d.set_item("typestr", typestr(self.dtype_of()))?;
        d.set_item("data", (address, readonly))?;
        Ok(d)
    }

    /// The numpy dtype name (`bfloat16` for bf16, whose array interface gives its bits
    /// as `uint16`).
    #[getter]
    fn dtype(&self) -> &'static str {
        numpy_name(self.dtype_of())
    }
}
