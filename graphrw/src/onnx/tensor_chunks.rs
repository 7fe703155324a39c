//! A `TensorProto` file read a chunk at a time ([`open_tensor_pb`]): the reference
//! outputs of a test set are as large as the model's outputs (GPT-2's logits at 512
//! tokens are 103 MB), and a check that holds them whole holds that much more than the
//! model needs. The file is memory-mapped, its `raw_data` read in chunks of
//! [`CHUNK_BYTES`], and each chunk's pages given back once it has been used.

use std::path::Path;
use std::sync::Arc;

use graphrw_kernels::MappedFile;

use super::decode::initializer;
use super::proto::DATA_LOCATION_EXTERNAL;
use super::tensor_pb::{checked_shape, dtype_from_onnx, read_tensor_pb};
use super::OnnxError;
use crate::meta::DType;
use crate::Tensor;

/// Bytes per chunk of [`TensorPbChunks::for_each_chunk`].
pub const CHUNK_BYTES: usize = 4 << 20;

/// A `raw_data` shorter than this is read whole.
const MAPPED_FROM: usize = 1 << 20;

/// A tensor file opened by [`open_tensor_pb`]: its name, dtype and shape, and its
/// elements, read chunk by chunk.
pub struct TensorPbChunks {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    source: Source,
}

/// Where the elements are.
enum Source {
    /// `raw_data` at `offset` of the mapped file.
    Mapped { file: Arc<MappedFile>, offset: u64 },
    /// Read whole: a small tensor, typed data fields, external data, or a file the
    /// chunked reader does not take (then [`read_tensor_pb`] reads it and decides).
    Whole(Tensor),
}

/// Opens a `TensorProto` file (the ONNX test-data layout) to read its elements in
/// chunks; the same checks and errors as [`read_tensor_pb`], which reads it whole.
///
/// ```no_run
/// let want = graphrw::onnx::open_tensor_pb("model/test_data_set_0/output_0.pb")?;
/// let mut sum = 0.0;
/// want.for_each_chunk(&mut |chunk| sum += chunk.iter_f64().sum::<f64>())?;
/// println!("{} {:?}: sum {sum}", want.name(), want.shape());
/// # Ok::<(), graphrw::onnx::OnnxError>(())
/// ```
pub fn open_tensor_pb(path: impl AsRef<Path>) -> Result<TensorPbChunks, OnnxError> {
    let path = path.as_ref();
    let whole = |path: &Path| {
        let (name, t) = read_tensor_pb(path)?;
        Ok(TensorPbChunks {
            name,
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            source: Source::Whole(t),
        })
    };
    let file = MappedFile::open(path).map_err(|e| OnnxError::io(path, e))?;
    let Ok((proto, Some((offset, len)))) = initializer(file.as_bytes(), MAPPED_FROM) else {
        return whole(path);
    };
    if proto.data_location == DATA_LOCATION_EXTERNAL {
        return whole(path);
    }
    let name = proto.name.clone();
    let dtype = dtype_from_onnx(proto.data_type).map_err(|m| OnnxError::tensor(&name, m))?;
    let (shape, _, nbytes) = checked_shape(&proto, &name, dtype)?;
    if len != nbytes {
        return Err(OnnxError::tensor(
            &name,
            format!(
                "raw_data holds {len} bytes, dims {:?} of {dtype} need {nbytes}",
                proto.dims
            ),
        ));
    }
    Ok(TensorPbChunks {
        name,
        dtype,
        shape,
        source: Source::Mapped {
            file,
            offset: offset as u64,
        },
    })
}

impl TensorPbChunks {
    /// The tensor's name in the file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Calls `f` with the elements in order, as 1-D tensors of at most [`CHUNK_BYTES`]
    /// bytes (one tensor holding them all where the file was read whole); the mapped
    /// pages of each chunk are given back after `f` returns.
    pub fn for_each_chunk(&self, f: &mut dyn FnMut(&Tensor)) -> Result<(), OnnxError> {
        let (file, offset) = match &self.source {
            Source::Whole(t) => {
                f(t);
                return Ok(());
            }
            Source::Mapped { file, offset } => (file, *offset),
        };
        let size = self.dtype.size_in_bytes().max(1);
        let numel: usize = self.shape.iter().product();
        let per_chunk = (CHUNK_BYTES / size).max(1);
        for start in (0..numel).step_by(per_chunk) {
            let n = per_chunk.min(numel - start);
            let at = offset + (start * size) as u64;
            let chunk = Tensor::from_mapped(file, at, self.dtype, &[n])
                .map_err(|e| OnnxError::tensor(&self.name, e.to_string()))?;
            f(&chunk);
            drop(chunk);
            file.release_range(at, (n * size) as u64);
        }
        Ok(())
    }
}
