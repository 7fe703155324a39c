//! Where a saved model's weights go: inline in the `.onnx` protobuf, or in an external
//! data file beside it, laid out as onnx and onnxruntime read it.
//!
//! # The external data layout
//! - One data file per model, named by [`SaveOptions::data_file`] (default: the model's
//!   file name plus `.data`, as `torch.onnx` writes it), in the model's folder; each
//!   external initialiser has `data_location = EXTERNAL` and `location`, `offset` and
//!   `length` entries.
//! - Offsets of tensors of 64 KiB or more are multiples of 64 KiB (the allocation
//!   granularity onnxruntime maps external data at); smaller ones are multiples of 64
//!   bytes, so every dtype can be viewed in place when the model is loaded again.
//!   Padding is a hole, not written zeros.
//! - A tensor mapped from a loaded model's external data ([`Tensor::file_range`]) is
//!   copied file to file ([`FileRange::copy_to`]: `copy_file_range` on Linux), never
//!   read into memory; the holes of a sparse input stay holes.
//!   Tensors that view the same bytes are written once and share the range.
//! - The data file and the model are written to temporary files in the same folder
//!   and renamed into place, so saving over the model that was loaded (whose data is
//!   still mapped) is safe: the old files live on for the maps that view them.
//!
//! # The 2 GiB limit
//! A protobuf message cannot pass 2 GiB (`onnx` and onnxruntime refuse it as corrupt).
//! Every writer checks the encoded size before writing and refuses a model past the
//! limit with an error that says to use external data.

use std::fmt;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use graphrw_kernels::FileRange;
use prost::Message;

use super::encode::{Exported, InitBytes, NodeSink, INITIALIZER_TAG};
use super::proto::{
    GraphProto, ModelProto, StringStringEntryProto, TensorProto, DATA_LOCATION_EXTERNAL,
};
use super::OnnxError;
use crate::Tensor;

/// The largest protobuf message (2 GiB - 1 bytes): protobuf lengths are 32-bit signed.
pub const MAX_PROTO_BYTES: u64 = i32::MAX as u64;

/// Alignment of external tensors of at least this size ([`BIG_ALIGN`]); smaller ones
/// get [`SMALL_ALIGN`].
const BIG_ALIGN: u64 = 64 * 1024;
const SMALL_ALIGN: u64 = 64;

/// Where a saved model's constants go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightLayout {
    /// The layout the weights came with: when any constant is mapped from a loaded
    /// model's external data, those constants and every other constant of at least
    /// [`SaveOptions::threshold`] bytes go to the data file; a graph with no mapped
    /// constant is written as one file.
    #[default]
    Keep,
    /// Every constant inline in the one `.onnx` file (refused past 2 GiB).
    SingleFile,
    /// Every constant of at least [`SaveOptions::threshold`] bytes (mapped ones
    /// included) in the data file, whatever the input's layout.
    External,
}

/// How [`save_with`](super::save_with) writes a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveOptions {
    /// Inline, external, or as the weights came.
    pub layout: WeightLayout,
    /// The data file's name, in the model's folder; `None` is the model's file name
    /// plus `.data` (`out.onnx.data`).
    pub data_file: Option<String>,
    /// Constants smaller than this many bytes stay inline in the external layouts
    /// (mapped constants go to the data file whatever their size). Default 1024, as
    /// `onnx.external_data_helper`.
    pub threshold: usize,
}

impl Default for SaveOptions {
    fn default() -> SaveOptions {
        SaveOptions {
            layout: WeightLayout::Keep,
            data_file: None,
            threshold: 1024,
        }
    }
}

/// What [`save_with`](super::save_with) wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    /// The model file.
    pub model: PathBuf,
    /// Size of the model file (the protobuf).
    pub model_bytes: u64,
    /// The external data file, when any tensor went there.
    pub data_file: Option<PathBuf>,
    /// Size of the data file (holes and padding included).
    pub data_bytes: u64,
    /// Constants in the data file.
    pub external_tensors: usize,
    /// Of those, the ones copied from a mapped file's range (not read into memory).
    pub copied_ranges: usize,
    /// Constants written inline.
    pub inline_tensors: usize,
}

impl fmt::Display for Saved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wrote {} ({} bytes, {} tensors inline)",
            self.model.display(),
            self.model_bytes,
            self.inline_tensors
        )?;
        if let Some(d) = &self.data_file {
            write!(
                f,
                " and {} ({} bytes, {} tensors, {} copied as file ranges)",
                d.display(),
                self.data_bytes,
                self.external_tensors,
                self.copied_ranges
            )?;
        }
        Ok(())
    }
}

/// Refuses a model whose encoding would pass [`MAX_PROTO_BYTES`] once `inline`'s
/// tensors are filled in (checked before they are read): the skeleton's size (the
/// exported model around its nodes and encoded initialisers) plus each tensor's bytes
/// and a generous field overhead.
pub(super) fn check_inline_estimate(
    exported: &Exported,
    inline: &[(usize, Tensor)],
) -> Result<(), OnnxError> {
    let inline_bytes: u64 = inline.iter().map(|(_, t)| t.nbytes() as u64 + 16).sum();
    let estimate = model_len(
        &exported.model,
        exported.nodes.encoded_len() + exported.inits.bytes.len(),
    ) + inline_bytes;
    if estimate > MAX_PROTO_BYTES {
        return Err(too_large(estimate));
    }
    Ok(())
}

/// The encoded length of `model` with `nodes_len` bytes of nodes added to its graph,
/// give or take the 4 bytes the graph's length prefix may grow by (counted in).
fn model_len(model: &ModelProto, nodes_len: usize) -> u64 {
    (model.encoded_len() + nodes_len + 4) as u64
}

/// An exported model, every constant inline, encoded; refused past
/// [`MAX_PROTO_BYTES`].
pub(super) fn encode_model(exported: Exported) -> Result<Vec<u8>, OnnxError> {
    let Exported {
        model,
        nodes,
        inits,
        payloads,
    } = exported;
    let (parts, size) = ModelParts::split(model, nodes, inits, payloads);
    if size > MAX_PROTO_BYTES {
        return Err(too_large(size));
    }
    let mut out = Vec::with_capacity(size as usize);
    parts
        .write(&mut out)
        .map_err(|e| OnnxError::Model(format!("encoding the model: {e}")))?;
    Ok(out)
}

pub(crate) fn too_large(n: u64) -> OnnxError {
    OnnxError::Model(format!(
        "the model would be a {:.2} GiB protobuf, past protobuf's 2 GiB limit (onnx and onnxruntime would read it as corrupt); write its weights as external data (graphrw optimize: --external-data; the library: WeightLayout::External)",
        n as f64 / (1u64 << 30) as f64
    ))
}

fn align_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// A temporary file in `path`'s folder, renamed onto `path` by [`Staged::commit`] and
/// removed when dropped uncommitted.
struct Staged {
    tmp: PathBuf,
    path: PathBuf,
    done: bool,
}

impl Staged {
    fn create(path: &Path) -> Result<(Staged, File), OnnxError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        // The staged file is renamed onto `path`: a device, a FIFO or a folder there
        // would be replaced (`-o /dev/null` as root), so it is refused instead.
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            return Err(OnnxError::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "exists and is not a regular file (a device, a FIFO or a folder): not replaced",
                ),
            ));
        }
        let tmp = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
        // The error names the file the user asked for, not the staging name.
        let file = File::create(&tmp).map_err(|e| OnnxError::io(path, e))?;
        Ok((
            Staged {
                tmp,
                path: path.to_path_buf(),
                done: false,
            },
            file,
        ))
    }

    /// Renames the staged file onto `path`. A file already there is removed first:
    /// renaming over it makes ext4 (`auto_da_alloc`) write the new file's data back
    /// before the rename returns, 0.1-0.3 ms that were a tenth of optimising a 1 k-node
    /// model. Readers still never see a half-written model under `path`: they see the
    /// old file, none, or the whole new one (neither way is made durable: nothing here
    /// calls `fsync`).
    fn commit(mut self) -> Result<(), OnnxError> {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_file()) {
            // A failure here (permissions, say) shows in the rename's error.
            let _ = std::fs::remove_file(&self.path);
        }
        std::fs::rename(&self.tmp, &self.path).map_err(|e| OnnxError::io(&self.path, e))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            // Best effort: the error being returned matters more than a leftover file.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// True when the payload goes to the data file under `options`.
fn goes_external(t: &Tensor, options: &SaveOptions, any_mapped: bool) -> bool {
    let external_layout = match options.layout {
        WeightLayout::SingleFile => false,
        WeightLayout::External => true,
        WeightLayout::Keep => any_mapped,
    };
    external_layout && (from_data_file(t) || t.nbytes() >= options.threshold)
}

/// True for a tensor mapped from a loaded model's external data file (not one of a
/// single-file model's inline weights, which the loader maps from the `.onnx` itself).
fn from_data_file(t: &Tensor) -> bool {
    t.file_range().is_some_and(|r| !r.file.holds_model())
}

/// Writes an exported model (its constants' `raw_data` still empty, their tensors in
/// `payloads`) to `path`, placing each constant inline or in the data file as
/// `options` say.
pub(super) fn write(
    exported: Exported,
    path: &Path,
    options: &SaveOptions,
) -> Result<Saved, OnnxError> {
    let mut exported = exported;
    let any_mapped = exported.payloads.iter().any(|(_, t)| from_data_file(t));
    let (external, inline): (Vec<_>, Vec<_>) = std::mem::take(&mut exported.payloads)
        .into_iter()
        .partition(|(_, t)| goes_external(t, options, any_mapped));
    let mut saved = Saved {
        model: path.to_path_buf(),
        inline_tensors: inline.len(),
        external_tensors: external.len(),
        ..Saved::default()
    };
    // Refuse a protobuf past 2 GiB before reading or writing any weight.
    check_inline_estimate(&exported, &inline)?;
    let Exported {
        mut model,
        nodes,
        inits,
        ..
    } = exported;
    let Some(graph) = model.graph.as_mut() else {
        return Err(OnnxError::Model("the exported model has no graph".into()));
    };

    let mut staged_data = None;
    if !external.is_empty() {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let location = match &options.data_file {
            Some(n) => n.clone(),
            None => format!(
                "{}.data",
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "model".into())
            ),
        };
        let rel = Path::new(&location);
        if location.is_empty()
            || rel.components().count() != 1
            || !matches!(
                rel.components().next(),
                Some(std::path::Component::Normal(_))
            )
        {
            return Err(OnnxError::Model(format!(
                "the data file name `{location}` must be a plain file name (it is written in the model's folder)"
            )));
        }
        let data_path = dir.join(rel);
        let (staged, file) = Staged::create(&data_path)?;
        let end = write_data(
            &mut graph.initializer,
            external,
            &location,
            file,
            &staged.tmp,
        )?;
        saved.data_file = Some(data_path);
        saved.data_bytes = end.0;
        saved.copied_ranges = end.1;
        staged_data = Some(staged);
    }

    let (parts, size) = ModelParts::split(model, nodes, inits, inline);
    if size > MAX_PROTO_BYTES {
        return Err(too_large(size));
    }
    saved.model_bytes = size;
    let (staged_model, file) = Staged::create(path)?;
    parts
        .write(file)
        .map_err(|e| OnnxError::io(&staged_model.tmp, e))?;
    if let Some(d) = staged_data {
        d.commit()?;
    }
    staged_model.commit()?;
    Ok(saved)
}

/// A model cut for writing piece by piece: the fields before the graph, the graph's
/// nodes, its name, its initialisers one by one, the rest of the graph, the fields
/// after it. Written in that order they are the bytes prost's `encode_to_vec` gives
/// for the whole model (prost writes fields in tag order: the graph is field 7 of the
/// model; in the graph the nodes are field 1, the name 2, the initialisers 5 and every
/// other field comes after), but the whole encoding never sits in memory beside the
/// model, and an inline weight's bytes are streamed into the file as its
/// initialiser is written, never held whole (a weight mapped from the input model is
/// read through its file a buffer at a time).
struct ModelParts {
    head: ModelProto,
    graph: Option<GraphParts>,
    tail: ModelProto,
}

/// The graph of a [`ModelParts`].
struct GraphParts {
    nodes: NodeSink,
    /// The initialisers encoded already, before and between those of `initializers`.
    encoded: InitBytes,
    /// Only the graph's name (field 2).
    name: GraphProto,
    /// Each initialiser (its `raw_data` empty when a tensor is given), its encoded
    /// length so, and the tensor whose bytes are its `raw_data`.
    initializers: Vec<(TensorProto, usize, Option<Tensor>)>,
    /// The graph's fields after the initialisers.
    rest: GraphProto,
    /// The encoded length of the whole graph message.
    len: usize,
}

/// The tag of `ModelProto.graph`.
const GRAPH_TAG: u32 = 7;
/// The tag of `TensorProto.raw_data`.
const RAW_DATA_TAG: u32 = 9;

/// Bytes gathered before each write to the file.
const WRITE_CHUNK: usize = 1 << 20;

/// The encoded length of a length-delimited field of `len` bytes under `tag`.
fn field_len(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + prost::encoding::encoded_len_varint(len as u64) + len
}

/// Writes the key and length of a length-delimited field under `tag`.
fn field_head(tag: u32, len: usize, buf: &mut Vec<u8>) {
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, buf);
    prost::encoding::encode_varint(len as u64, buf);
}

/// The bytes of `raw_data` a streamed tensor adds to its initialiser (none when it
/// has no elements: prost leaves an empty `bytes` field out).
fn raw_data_len(t: Option<&Tensor>) -> usize {
    match t.map(Tensor::nbytes) {
        Some(n) if n > 0 => field_len(RAW_DATA_TAG, n),
        _ => 0,
    }
}

/// The fields of `tensor` after `raw_data` (tags 10 and up), taken out of it.
fn take_fields_after_raw_data(tensor: &mut TensorProto) -> TensorProto {
    TensorProto {
        double_data: std::mem::take(&mut tensor.double_data),
        uint64_data: std::mem::take(&mut tensor.uint64_data),
        doc_string: std::mem::take(&mut tensor.doc_string),
        external_data: std::mem::take(&mut tensor.external_data),
        data_location: std::mem::take(&mut tensor.data_location),
        ..TensorProto::default()
    }
}

/// Appends `bytes` to the pending `buf`, or writes both to `out` when `bytes` is a
/// chunk or more (not copied through `buf`).
fn put(bytes: &[u8], buf: &mut Vec<u8>, out: &mut impl Write) -> std::io::Result<()> {
    if bytes.len() < WRITE_CHUNK {
        buf.extend_from_slice(bytes);
        return Ok(());
    }
    out.write_all(buf)?;
    buf.clear();
    out.write_all(bytes)
}

/// Writes `t`'s elements as little-endian bytes to `out`: a tensor mapped from a file
/// is streamed from it, any other one is converted (one tensor at a time).
fn write_raw(t: &Tensor, out: &mut impl Write) -> std::io::Result<()> {
    match t.file_range() {
        Some(r) if r.len == t.nbytes() as u64 => r.write_to(out),
        _ => out.write_all(&t.to_raw_bytes()),
    }
}

impl ModelParts {
    /// Cuts `model`, whose graph's nodes are `nodes`, whose initialisers come around
    /// those `encoded` already, and whose initialisers at the indices of `inline` take
    /// those tensors' bytes as `raw_data`; returns the parts and the encoded size of the
    /// whole.
    fn split(
        mut model: ModelProto,
        nodes: NodeSink,
        encoded: InitBytes,
        inline: Vec<(usize, Tensor)>,
    ) -> (ModelParts, u64) {
        let head = ModelProto {
            ir_version: std::mem::take(&mut model.ir_version),
            producer_name: std::mem::take(&mut model.producer_name),
            producer_version: std::mem::take(&mut model.producer_version),
            domain: std::mem::take(&mut model.domain),
            model_version: std::mem::take(&mut model.model_version),
            doc_string: std::mem::take(&mut model.doc_string),
            ..ModelProto::default()
        };
        let graph = model.graph.take().map(|mut g| {
            let mut tensors: Vec<Option<Tensor>> = g.initializer.iter().map(|_| None).collect();
            for (i, t) in inline {
                if let Some(slot) = tensors.get_mut(i) {
                    *slot = Some(t);
                }
            }
            let initializers: Vec<(TensorProto, usize, Option<Tensor>)> =
                std::mem::take(&mut g.initializer)
                    .into_iter()
                    .zip(tensors)
                    .map(|(mut p, t)| {
                        if t.is_some() {
                            p.raw_data = Vec::new();
                        }
                        let len = p.encoded_len();
                        (p, len, t)
                    })
                    .collect();
            let name = GraphProto {
                name: std::mem::take(&mut g.name),
                ..GraphProto::default()
            };
            let len = nodes.encoded_len()
                + encoded.bytes.len()
                + name.encoded_len()
                + initializers
                    .iter()
                    .map(|(_, len, t)| field_len(INITIALIZER_TAG, len + raw_data_len(t.as_ref())))
                    .sum::<usize>()
                + g.encoded_len();
            GraphParts {
                nodes,
                encoded,
                name,
                initializers,
                rest: g,
                len,
            }
        });
        let mut size = head.encoded_len() + model.encoded_len();
        if let Some(g) = &graph {
            size += field_len(GRAPH_TAG, g.len);
        }
        let parts = ModelParts {
            head,
            graph,
            tail: model,
        };
        (parts, size as u64)
    }

    /// Writes the parts to `out` in order.
    fn write(self, out: impl Write) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::with_capacity(WRITE_CHUNK, out);
        // Room for a chunk and the node that passes it, so the buffer never regrows.
        let mut buf = Vec::with_capacity(2 * WRITE_CHUNK);
        self.head.encode_raw(&mut buf);
        if let Some(g) = self.graph {
            field_head(GRAPH_TAG, g.len, &mut buf);
            g.nodes.write_to(&mut buf, WRITE_CHUNK, &mut out)?;
            g.name.encode_raw(&mut buf);
            let mut at = 0;
            for (i, (mut proto, len, tensor)) in g.initializers.into_iter().enumerate() {
                let before = g.encoded.before(i);
                if let Some(encoded) = g.encoded.bytes.get(at..before) {
                    put(encoded, &mut buf, &mut out)?;
                }
                at = at.max(before);
                let raw = raw_data_len(tensor.as_ref());
                field_head(INITIALIZER_TAG, len + raw, &mut buf);
                let after = take_fields_after_raw_data(&mut proto);
                proto.encode_raw(&mut buf);
                if let Some(t) = tensor.filter(|_| raw > 0) {
                    field_head(RAW_DATA_TAG, t.nbytes(), &mut buf);
                    out.write_all(&buf)?;
                    buf.clear();
                    write_raw(&t, &mut out)?;
                }
                after.encode_raw(&mut buf);
                if buf.len() >= WRITE_CHUNK {
                    out.write_all(&buf)?;
                    buf.clear();
                }
            }
            if let Some(encoded) = g.encoded.bytes.get(at..) {
                put(encoded, &mut buf, &mut out)?;
            }
            g.rest.encode_raw(&mut buf);
        }
        self.tail.encode_raw(&mut buf);
        out.write_all(&buf)?;
        out.flush()
    }
}

/// Writes the `external` tensors to `file` (at `tmp`), pointing their initialisers at
/// `location`; returns the file's length and how many tensors were copied as ranges.
fn write_data(
    inits: &mut [TensorProto],
    external: Vec<(usize, Tensor)>,
    location: &str,
    file: File,
    tmp: &Path,
) -> Result<(u64, usize), OnnxError> {
    let io = |e: std::io::Error| OnnxError::io(tmp, e);
    let mut out = file;
    let mut pos: u64 = 0;
    let mut copied = 0;
    // Ranges already written, so tensors viewing the same bytes share them.
    let mut written: Vec<(FileRange, u64)> = Vec::new();
    for (i, t) in external {
        let len = t.nbytes() as u64;
        let range = t.file_range();
        let shared = range
            .as_ref()
            .and_then(|r| written.iter().find(|(w, _)| w.same_as(r)).map(|(_, o)| *o));
        let offset = match shared {
            Some(o) => o,
            None => {
                let align = if len >= BIG_ALIGN {
                    BIG_ALIGN
                } else {
                    SMALL_ALIGN
                };
                let offset = align_up(pos, align);
                if offset != pos {
                    out.seek(SeekFrom::Start(offset)).map_err(io)?;
                }
                match &range {
                    Some(r) => {
                        r.copy_to(&mut out).map_err(|e| {
                            let name = inits.get(i).map_or("?", |p| p.name.as_str());
                            OnnxError::ExternalData {
                                name: name.to_string(),
                                message: format!(
                                    "copying bytes {}..{} of `{}`: {e}",
                                    r.offset,
                                    r.offset + r.len,
                                    r.file.path().display()
                                ),
                            }
                        })?;
                        copied += 1;
                        written.push((r.clone(), offset));
                    }
                    None => out.write_all(&t.to_raw_bytes()).map_err(io)?,
                }
                pos = offset + len;
                offset
            }
        };
        if let Some(p) = inits.get_mut(i) {
            p.raw_data.clear();
            p.data_location = DATA_LOCATION_EXTERNAL;
            p.external_data = vec![
                entry("location", location.to_string()),
                entry("offset", offset.to_string()),
                entry("length", len.to_string()),
            ];
        }
    }
    // Holes at the end (a zero tail, padding) still belong to the file.
    out.set_len(pos).map_err(io)?;
    Ok((pos, copied))
}

fn entry(key: &str, value: String) -> StringStringEntryProto {
    StringStringEntryProto {
        key: key.into(),
        value,
    }
}
