//! Tensors in and out of `TensorProto`: initialisers (inline, typed or external data)
//! and the ONNX test-data files (`test_data_set_0/input_0.pb`, `output_0.pb`).
//!
//! Every size is checked against the bytes actually present before anything of that
//! size is allocated: dims must be non-negative, their product must not overflow, and
//! `raw_data`, the typed data fields or the external file must hold exactly that many
//! elements.
//!
//! External data is memory-mapped, not read: a tensor views its bytes in the mapped
//! file ([`Tensor::from_mapped`]), so loading a model of many gigabytes reads only the
//! protobuf, and each tensor keeps its file range for the writer to copy
//! ([`Tensor::file_range`]). The data files must not change while a loaded graph lives
//! (see [`graphrw_kernels::mapped`]).

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use graphrw_kernels::MappedFile;

use prost::Message;

use super::proto::{data_type, TensorProto, DATA_LOCATION_EXTERNAL};
use super::OnnxError;
use crate::meta::DType;
use crate::Tensor;

/// The largest single dimension graphrw accepts from a file (2^48): larger sizes cannot
/// be real tensors, and refusing them keeps shape arithmetic far from overflow.
pub const MAX_DIM: u64 = 1 << 48;

/// Reads a `TensorProto` file (the ONNX test-data layout) as its name and tensor.
///
/// ```no_run
/// let (name, t) = graphrw::onnx::read_tensor_pb("model/test_data_set_0/input_0.pb")?;
/// println!("{name}: {:?} {:?}", t.dtype(), t.shape());
/// # Ok::<(), graphrw::onnx::OnnxError>(())
/// ```
pub fn read_tensor_pb(path: impl AsRef<Path>) -> Result<(String, Tensor), OnnxError> {
    let path = path.as_ref();
    // Mapped, not read: a FIFO or a device (`/dev/zero`) is refused instead of blocking
    // or being read without end, and a big file of garbage costs no memory to refuse.
    let file = MappedFile::open(path).map_err(|e| OnnxError::io(path, e))?;
    let proto = TensorProto::decode(file.as_bytes()).map_err(|e| OnnxError::Decode {
        what: format!("tensor file {}", path.display()),
        message: e.to_string(),
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tensor = tensor_from_proto(&proto, &proto.name, Some(dir))?;
    Ok((proto.name, tensor))
}

/// Decodes a `TensorProto` from bytes (external data is refused: there is no folder).
pub fn decode_tensor_pb(bytes: &[u8]) -> Result<(String, Tensor), OnnxError> {
    let proto = TensorProto::decode(bytes).map_err(|e| OnnxError::Decode {
        what: "tensor".into(),
        message: e.to_string(),
    })?;
    let tensor = tensor_from_proto(&proto, &proto.name, None)?;
    Ok((proto.name, tensor))
}

/// Encodes `tensor` as a `TensorProto` named `name` (little-endian `raw_data`).
pub fn encode_tensor_pb(name: &str, tensor: &Tensor) -> Vec<u8> {
    tensor_to_proto(name, tensor).encode_to_vec()
}

/// Writes `tensor` as a `TensorProto` file named `name`.
pub fn write_tensor_pb(
    path: impl AsRef<Path>,
    name: &str,
    tensor: &Tensor,
) -> Result<(), OnnxError> {
    let path = path.as_ref();
    std::fs::write(path, encode_tensor_pb(name, tensor)).map_err(|e| OnnxError::io(path, e))
}

/// The graphrw dtype of an ONNX element type, or a message naming the type.
pub fn dtype_from_onnx(elem_type: i32) -> Result<DType, String> {
    Ok(match elem_type {
        data_type::FLOAT => DType::F32,
        data_type::DOUBLE => DType::F64,
        data_type::FLOAT16 => DType::F16,
        data_type::BFLOAT16 => DType::BF16,
        data_type::INT64 => DType::I64,
        data_type::INT32 => DType::I32,
        data_type::BOOL => DType::Bool,
        data_type::UINT8 => DType::U8,
        data_type::INT8 => DType::I8,
        data_type::INT16 => DType::I16,
        data_type::UINT16 => DType::U16,
        data_type::UINT32 => DType::U32,
        data_type::UINT64 => DType::U64,
        other => {
            return Err(format!(
                "element type {} ({other}) is not supported (graphrw has f32, f64, f16, bf16, i64, i32, bool, u8, i8, i16, u16, u32, u64)",
                onnx_type_name(other)
            ))
        }
    })
}

/// The ONNX element type of a graphrw dtype.
pub fn dtype_to_onnx(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => data_type::FLOAT,
        DType::F64 => data_type::DOUBLE,
        DType::F16 => data_type::FLOAT16,
        DType::BF16 => data_type::BFLOAT16,
        DType::I64 => data_type::INT64,
        DType::I32 => data_type::INT32,
        DType::Bool => data_type::BOOL,
        DType::U8 => data_type::UINT8,
        DType::I8 => data_type::INT8,
        DType::I16 => data_type::INT16,
        DType::U16 => data_type::UINT16,
        DType::U32 => data_type::UINT32,
        DType::U64 => data_type::UINT64,
    }
}

fn onnx_type_name(t: i32) -> &'static str {
    match t {
        0 => "UNDEFINED",
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        17..=20 => "FLOAT8",
        21 => "UINT4",
        22 => "INT4",
        _ => "unknown",
    }
}

/// Checked shape of a tensor proto: non-negative dims, each at most [`MAX_DIM`], and an
/// element and byte count that fit `usize`.
pub(super) fn checked_shape(
    t: &TensorProto,
    name: &str,
    dtype: DType,
) -> Result<(Vec<usize>, usize, usize), OnnxError> {
    let mut shape = Vec::with_capacity(t.dims.len().min(64));
    let mut numel: usize = 1;
    for &d in &t.dims {
        if d < 0 {
            return Err(OnnxError::tensor(
                name,
                format!("has a negative dim {d} in {:?}", t.dims),
            ));
        }
        if d as u64 > MAX_DIM {
            return Err(OnnxError::tensor(
                name,
                format!(
                    "dim {d} in {:?} is larger than graphrw accepts (2^48)",
                    t.dims
                ),
            ));
        }
        let d = d as usize;
        numel = numel.checked_mul(d).ok_or_else(|| {
            OnnxError::tensor(
                name,
                format!("dims {:?} overflow the element count", t.dims),
            )
        })?;
        shape.push(d);
    }
    let nbytes = numel.checked_mul(dtype.size_in_bytes()).ok_or_else(|| {
        OnnxError::tensor(name, format!("dims {:?} overflow the byte count", t.dims))
    })?;
    Ok((shape, numel, nbytes))
}

/// Decodes a tensor proto; `dir` is the model's folder, for external data (`None`
/// refuses external data).
pub(crate) fn tensor_from_proto(
    t: &TensorProto,
    name: &str,
    dir: Option<&Path>,
) -> Result<Tensor, OnnxError> {
    let dtype = dtype_from_onnx(t.data_type).map_err(|m| OnnxError::tensor(name, m))?;
    let (shape, numel, nbytes) = checked_shape(t, name, dtype)?;
    let bytes: Vec<u8> = if t.data_location == DATA_LOCATION_EXTERNAL {
        return read_external(t, name, dir, dtype, &shape, nbytes);
    } else if !t.raw_data.is_empty() || numel == 0 {
        if t.raw_data.len() != nbytes {
            return Err(OnnxError::tensor(
                name,
                format!(
                    "raw_data holds {} bytes, dims {:?} of {dtype} need {nbytes}",
                    t.raw_data.len(),
                    t.dims
                ),
            ));
        }
        return Tensor::from_raw_bytes(dtype, &shape, &t.raw_data)
            .map_err(|e| OnnxError::tensor(name, e.to_string()));
    } else {
        typed_bytes(t, name, dtype, numel)?
    };
    Tensor::from_raw_bytes(dtype, &shape, &bytes)
        .map_err(|e| OnnxError::tensor(name, e.to_string()))
}

/// Decodes an initialiser whose `raw_data` was left in the model file: the `len` bytes
/// at `offset` of `file` (the memory-mapped `.onnx` itself) stand for it, and the
/// tensor views them in place ([`Tensor::from_mapped`]) instead of holding a copy. Reads
/// exactly what [`tensor_from_proto`] reads from the same message with its `raw_data`
/// (the same checks and messages).
pub(crate) fn tensor_from_file_raw(
    t: &TensorProto,
    name: &str,
    dir: Option<&Path>,
    file: &Arc<MappedFile>,
    offset: usize,
    len: usize,
) -> Result<Tensor, OnnxError> {
    if t.data_location == DATA_LOCATION_EXTERNAL {
        // External data wins over raw_data, as in `tensor_from_proto`.
        return tensor_from_proto(t, name, dir);
    }
    let dtype = dtype_from_onnx(t.data_type).map_err(|m| OnnxError::tensor(name, m))?;
    let (shape, _, nbytes) = checked_shape(t, name, dtype)?;
    if len != nbytes {
        return Err(OnnxError::tensor(
            name,
            format!(
                "raw_data holds {len} bytes, dims {:?} of {dtype} need {nbytes}",
                t.dims
            ),
        ));
    }
    Tensor::from_mapped(file, offset as u64, dtype, &shape)
        .map_err(|e| OnnxError::tensor(name, e.to_string()))
}

/// The elements of the typed data field for `dtype`, as little-endian bytes, after
/// checking their count.
fn typed_bytes(
    t: &TensorProto,
    name: &str,
    dtype: DType,
    numel: usize,
) -> Result<Vec<u8>, OnnxError> {
    let count = |field: &str, n: usize| -> Result<(), OnnxError> {
        if n == numel {
            Ok(())
        } else {
            Err(OnnxError::tensor(
                name,
                format!("{field} holds {n} elements, dims {:?} need {numel}", t.dims),
            ))
        }
    };
    Ok(match dtype {
        DType::F32 => {
            count("float_data", t.float_data.len())?;
            t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::F64 => {
            count("double_data", t.double_data.len())?;
            t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I64 => {
            count("int64_data", t.int64_data.len())?;
            t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I32 => {
            count("int32_data", t.int32_data.len())?;
            t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::Bool => {
            count("int32_data", t.int32_data.len())?;
            t.int32_data.iter().map(|&v| u8::from(v != 0)).collect()
        }
        DType::F16 | DType::BF16 | DType::U16 => {
            count("int32_data", t.int32_data.len())?;
            t.int32_data
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect()
        }
        DType::I16 => {
            count("int32_data", t.int32_data.len())?;
            t.int32_data
                .iter()
                .flat_map(|&v| (v as i16).to_le_bytes())
                .collect()
        }
        // One byte each, the low byte of the int32 (as ONNX's writers pack them).
        DType::U8 | DType::I8 => {
            count("int32_data", t.int32_data.len())?;
            t.int32_data.iter().map(|&v| v as u8).collect()
        }
        DType::U32 => {
            count("uint64_data", t.uint64_data.len())?;
            t.uint64_data
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect()
        }
        DType::U64 => {
            count("uint64_data", t.uint64_data.len())?;
            t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
    })
}

/// The mapped external data file at `path`, shared with every tensor of every live
/// graph already mapping it (same path, and the file unchanged since: same length,
/// modification time and, on Unix, inode), so a model's thousands of tensors share one
/// map.
fn mapped_file(path: &Path) -> std::io::Result<Arc<MappedFile>> {
    static OPEN: Mutex<Vec<(PathBuf, FileStamp, Weak<MappedFile>)>> = Mutex::new(Vec::new());
    let stamp = FileStamp::of(&std::fs::metadata(path)?);
    let mut open = OPEN
        .lock()
        .map_err(|_| std::io::Error::other("the external data map cache's lock was poisoned"))?;
    open.retain(|(_, _, w)| w.strong_count() > 0);
    if let Some(m) = open
        .iter()
        .find(|(p, s, _)| p == path && *s == stamp)
        .and_then(|(_, _, w)| w.upgrade())
    {
        return Ok(m);
    }
    let m = MappedFile::open(path)?;
    open.push((path.to_path_buf(), stamp, Arc::downgrade(&m)));
    Ok(m)
}

/// What identifies a file's version for [`mapped_file`].
#[derive(PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> FileStamp {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        }
    }
}

/// An external tensor, memory-mapped in place (see [`Tensor::from_mapped`]), after
/// checking the location stays inside `dir`, the file exists, and offset and length lie
/// within it.
fn read_external(
    t: &TensorProto,
    name: &str,
    dir: Option<&Path>,
    dtype: DType,
    shape: &[usize],
    nbytes: usize,
) -> Result<Tensor, OnnxError> {
    let fail = |m: String| OnnxError::ExternalData {
        name: name.to_string(),
        message: m,
    };
    let Some(dir) = dir else {
        return Err(fail("the model was read from bytes, so there is no folder to find external data in (load it from a path)".into()));
    };
    let mut location = None;
    let mut offset: u64 = 0;
    let mut length: Option<u64> = None;
    for kv in &t.external_data {
        match kv.key.as_str() {
            "location" => location = Some(kv.value.as_str()),
            "offset" => {
                offset = kv.value.parse().map_err(|_| {
                    fail(format!(
                        "offset `{}` is not a non-negative integer",
                        kv.value
                    ))
                })?
            }
            "length" => {
                length = Some(kv.value.parse().map_err(|_| {
                    fail(format!(
                        "length `{}` is not a non-negative integer",
                        kv.value
                    ))
                })?)
            }
            _ => {}
        }
    }
    let location = location.ok_or_else(|| fail("no `location` given".into()))?;
    let rel = Path::new(location);
    if location.is_empty()
        || rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(fail(format!(
            "location `{location}` escapes the model's folder (it must be a relative path without `..`)"
        )));
    }
    let path = dir.join(rel);
    let real = path
        .canonicalize()
        .map_err(|e| fail(format!("file `{}` cannot be opened: {e}", path.display())))?;
    let real_dir = dir.canonicalize().map_err(|e| {
        fail(format!(
            "model folder `{}` cannot be resolved: {e}",
            dir.display()
        ))
    })?;
    if !real.starts_with(&real_dir) {
        return Err(fail(format!(
            "location `{location}` resolves to `{}`, outside the model's folder (a symlink out)",
            real.display()
        )));
    }
    let length = length.unwrap_or(nbytes as u64);
    if length != nbytes as u64 {
        return Err(fail(format!(
            "length {length} does not match dims {:?} ({nbytes} bytes)",
            t.dims
        )));
    }
    let file = mapped_file(&real)
        .map_err(|e| fail(format!("file `{}` cannot be mapped: {e}", path.display())))?;
    let file_len = file.len();
    let end = offset
        .checked_add(length)
        .ok_or_else(|| fail(format!("offset {offset} + length {length} overflows")))?;
    if end > file_len {
        return Err(fail(format!(
            "bytes {offset}..{end} lie beyond the end of `{location}` ({file_len} bytes)"
        )));
    }
    Tensor::from_mapped(&file, offset, dtype, shape).map_err(|e| fail(e.to_string()))
}

/// A tensor as a `TensorProto` with `raw_data`.
pub(crate) fn tensor_to_proto(name: &str, tensor: &Tensor) -> TensorProto {
    TensorProto {
        dims: tensor.shape().iter().map(|&d| d as i64).collect(),
        data_type: dtype_to_onnx(tensor.dtype()),
        name: name.to_string(),
        raw_data: tensor.to_raw_bytes(),
        ..Default::default()
    }
}
