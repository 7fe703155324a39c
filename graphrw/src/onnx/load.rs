//! ONNX import: a `ModelProto` becomes a [`Graph`] over the torch-like vocabulary.
//!
//! The importer reads the model (and its external data, relative to the model's
//! folder), declares the graph inputs with their dtypes and shapes (`dim_param` becomes
//! a symbolic dim), orders the nodes topologically (rejecting cycles and undefined
//! values), and maps each ONNX node onto one or a few vocabulary ops (`Transpose` to
//! `permute`, `Gemm` to `matmul` with transposes, scaling and bias, `Slice` to a chain
//! of `slice`). Initialisers become constants the first time a node uses them, so the
//! printed program shows each weight right before its first use. ONNX node names are
//! kept on every graph node made for them, graph input names on the inputs, and output
//! names on the graph outputs. Most ops are read through the mapping table shared with
//! the exporter (`table/mod.rs`: ONNX name, domain, opsets, operands, and where each
//! attribute sits at each opset, with its kind, default and range); lowerings and
//! shape-dependent forms are the special cases here.
//!
//! **Models as they come.** Each op is read with its meaning at the model's opset
//! (opsets 1 to 23: Softmax before 13 flattens to 2-D, axes and bounds are attributes
//! before 13 / 10, legacy broadcasting before 7). What graphrw cannot express (an op
//! outside the vocabulary, an attribute or form it does not read, a computed
//! `Reshape` shape, another domain) becomes an `opaque` node (see [`crate::foreign`]),
//! never an error; so does every node that reads a value of unknown metadata. What
//! contradicts itself (inference rejects the operands, undefined values, cycles, bad
//! tensors, a graph without outputs) is an error whose first line says what and where.
//! The result is checked with [`crate::verify`].
//!
//! **Two routes, one result.** [`load`] memory-maps the file and takes the fast route
//! first: a borrowing decoder (`decode.rs`) reads the nodes one at a time straight from
//! the map (names are slices of it, attributes decoded into reused messages), and
//! each node is imported as soon as it is read, so no `ModelProto` is ever built;
//! inline `raw_data` of 1 KiB or more stays in the map as a tensor viewing it. The
//! reader also numbers the value names as it goes (graph inputs and initialisers,
//! then node outputs), so the importer finds a node's operands by number in a vector,
//! not by name in a hash map; from a few thousand nodes it runs on a second thread,
//! a batch of nodes ahead of the importer (the graph is the same either way). Anything
//! that route does not read exactly as prost does (malformed bytes, subgraphs,
//! model-local functions, nodes out of topological order) and every error go to the
//! plain route (prost's decoder, then [`from_model`]), which reads the model or says
//! what is wrong with it; tests check that both routes give the same graph.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use graphrw_kernels::MappedFile;

use prost::Message;

use super::dialect::{MAX_OPSET, MIN_OPSET};
use super::proto::{GraphProto, ModelProto, NodeProto};
use super::OnnxError;
use crate::graph::{Graph, Value};
use crate::ir::sym::bounds::Bounds;

/// Loads an ONNX model file; external data is read relative to the file's folder.
///
/// The file is memory-mapped (read only when it cannot be: a pipe, a device), and its
/// inline weights of 1 KiB or more stay there as mapped tensors, as external data does:
/// like the data files (see [`graphrw_kernels::mapped`]), the model file must not be
/// changed in place while a graph loaded from it lives (writing a new file and renaming
/// it over the old one, as [`super::save`] does, is safe).
///
/// ```no_run
/// let graph = graphrw::onnx::load("model.onnx")?;
/// println!("{graph}");
/// # Ok::<(), graphrw::onnx::OnnxError>(())
/// ```
pub fn load(path: impl AsRef<Path>) -> Result<Graph, OnnxError> {
    let path = path.as_ref();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The file is memory-mapped: the fast route reads the nodes' names in place, and
    // big inline weights stay in the file as mapped tensors. What cannot be mapped (a
    // pipe, a device) is read.
    let file = match MappedFile::open_model(path) {
        Ok(f) => f,
        Err(_) => {
            let bytes = read_stream(path).map_err(|e| OnnxError::io(path, e))?;
            return load_bytes_in(&bytes, Some(dir));
        }
    };
    let bytes = file.as_bytes();
    if let Some(graph) = load_fast(bytes, Some(dir), Some(&file)) {
        // The protobuf was read in place; its pages need not stay resident for the
        // weights that keep the map alive.
        file.release_pages();
        return Ok(graph);
    }
    let model = decode_model(bytes)?;
    // The file goes before the graph is built: on a big model it is a good part of
    // the peak memory (nothing of the plain route maps it).
    drop(file);
    from_model(&model, Some(dir))
}

/// Inline `raw_data` of at least this many bytes is mapped in place when the model is
/// loaded from a file (smaller constants, which rules read, are copied). The same as
/// the default threshold of the external layouts, so a model saved with external data
/// puts the same tensors in the data file either way.
const MAP_RAW_FROM: usize = 1024;

/// The fast route: the model decoded node by node straight from `bytes`
/// ([`super::decode`]), each node imported as soon as it is read, nothing of the
/// protobuf kept. `None` where the plain route must decide: anything the borrowing
/// decoder refuses, model-local functions, nodes out of topological order, and every
/// error (the plain route then gives the same error, or reads what this one does
/// not). `file`, when given, holds `bytes`, and big inline weights become views of it.
pub(crate) fn load_fast(
    bytes: &[u8],
    dir: Option<&Path>,
    file: Option<&Arc<MappedFile>>,
) -> Option<Graph> {
    load_fast_with(bytes, dir, file, THREAD_FROM, BATCH)
}

/// Graphs of at least this many nodes are decoded on a second thread while this one
/// builds the graph (smaller ones would pay more to start the thread than it saves).
const THREAD_FROM: usize = 4096;

/// Nodes decoded at a time (handed from the decoding thread to the building one).
const BATCH: usize = 256;

/// [`load_fast`], decoding on a second thread from `thread_from` nodes, `batch` nodes
/// at a time: the nodes are decoded and their value names numbered
/// ([`super::decode::NodeReader`]) on one thread while the other imports them in file
/// order, so the graph is the same however the work is split.
fn load_fast_with(
    bytes: &[u8],
    dir: Option<&Path>,
    file: Option<&Arc<MappedFile>>,
    thread_from: usize,
    batch: usize,
) -> Option<Graph> {
    use super::decode::{Batch, NodeReader, Numbering};
    let raw_from = if file.is_some() {
        MAP_RAW_FROM
    } else {
        usize::MAX
    };
    let scan = super::decode::scan_model(bytes, raw_from).ok()?;
    if !scan.head.functions.is_empty() {
        return None;
    }
    let (opset, opsets) = opsets(&scan.head).ok()?;
    let graph = &scan.graph;
    if graph.output.is_empty() {
        return None;
    }
    // Node outputs are found by number here (`by_number`), not in the name map.
    let named = graph.input.len() + graph.initializer.len() + graph.output.len();
    let mut imp = Importer::new(graph, dir, opset, opsets, scan.nodes.len(), named).ok()?;
    imp.graph
        .assume_bounds(&bounds::file_bounds(&scan.head.metadata_props, graph).ok()?);
    if let Some(file) = file {
        imp.file = Some(Arc::clone(file));
        for (t, r) in graph.initializer.iter().zip(&scan.raw) {
            if let Some(r) = r {
                imp.raw.insert(t.name.as_str(), *r);
            }
        }
    }
    imp.declare_inputs().ok()?;
    // Graph inputs and initialisers are numbered first; node outputs follow as read.
    let predefined = graph
        .input
        .iter()
        .map(|vi| vi.name.as_str())
        .chain(graph.initializer.iter().map(|t| t.name.as_str()));
    let numbering = Numbering::new(predefined, scan.nodes.len());
    imp.predefined = numbering.len();
    imp.by_number = Vec::with_capacity(numbering.len() + scan.nodes.len());
    imp.by_number.resize(numbering.len(), None);
    for vi in &graph.input {
        if let (Some(n), Some(&v)) = (numbering.get(&vi.name), imp.values.get(vi.name.as_str())) {
            imp.by_number[n as usize] = Some(v);
        }
    }
    let mut reader = NodeReader::new(&scan.nodes, numbering);
    let mut known: Vec<Option<Value>> = Vec::new();
    let numbering = if scan.nodes.len() >= thread_from {
        std::thread::scope(|s| {
            let (to_builder, batches) = std::sync::mpsc::sync_channel::<Batch>(2);
            let (to_reader, spares) = std::sync::mpsc::channel::<Batch>();
            // A thread that cannot be started leaves the model to the plain route.
            let worker = std::thread::Builder::new().spawn_scoped(s, move || {
                while !reader.done() {
                    let mut b = spares.try_recv().unwrap_or_default();
                    reader.fill(&mut b, batch).ok()?;
                    to_builder.send(b).ok()?;
                }
                Some(reader)
            });
            let worker = worker.ok()?;
            // Ends when the reader is done or refuses (it drops its sender); returning
            // early drops the receiver, which ends the reader.
            for b in batches.iter() {
                imp.import_batch(&b, &mut known)?;
                // The reader may be done already: its batches are then not needed.
                let _ = to_reader.send(b);
            }
            worker.join().ok()?.map(NodeReader::into_numbering)
        })?
    } else {
        let mut b = Batch::default();
        while !reader.done() {
            reader.fill(&mut b, batch).ok()?;
            imp.import_batch(&b, &mut known)?;
        }
        reader.into_numbering()
    };
    // The graph outputs are found by name (`finish`).
    for o in &graph.output {
        let v = numbering
            .get(&o.name)
            .and_then(|n| imp.by_number.get(n as usize).copied().flatten());
        if let Some(v) = v {
            imp.values.insert(o.name.as_str(), v);
        }
    }
    imp.finish().ok()
}

/// Reads a model from what cannot be mapped (a pipe, a device), refusing it past the
/// most a protobuf can hold or the run budget, whichever is less, and at once where
/// its first bytes are no protobuf field (`/dev/zero`).
fn read_stream(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    let cap = crate::onnx::MAX_PROTO_BYTES.min(graphrw_kernels::budget::max_tensor_bytes());
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut file = std::fs::File::open(path)?;
    let mut bytes: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if bytes.is_empty() && !starts_with_field_key(&chunk[..n]) {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "not an ONNX model: its first bytes are no protobuf field",
            ));
        }
        if bytes.len() + n > cap {
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!("more than {cap} bytes: past protobuf's 2 GiB limit or the run budget"),
            ));
        }
        if bytes.capacity() - bytes.len() < n {
            // Doubling, but never past the cap.
            let want = (bytes.capacity() * 2).clamp(1 << 20, cap.max(1 << 20));
            bytes
                .try_reserve_exact(want.max(bytes.len() + n) - bytes.len())
                .map_err(|e| Error::new(ErrorKind::OutOfMemory, e.to_string()))?;
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// Whether `bytes` start with a protobuf field key: a field number from 1 and a wire
/// type protobuf has (groups excepted). Only the key: the field itself may run past
/// `bytes` (a model's graph, read a chunk at a time).
fn starts_with_field_key(mut bytes: &[u8]) -> bool {
    match varint(&mut bytes) {
        Some(key) => key >> 3 > 0 && matches!(key & 7, 0 | 1 | 2 | 5),
        // Too short to hold a whole key: left to the decoder.
        None => bytes.len() < 10,
    }
}

/// Decodes a model's protobuf.
fn decode_model(bytes: &[u8]) -> Result<ModelProto, OnnxError> {
    if let Some(model) = decode_by_node(bytes)? {
        return Ok(model);
    }
    ModelProto::decode(bytes).map_err(|e| decode_error(bytes, &e.to_string()))
}

/// `ModelProto.graph` and `GraphProto.node`.
const MODEL_GRAPH_TAG: u64 = 7;
const GRAPH_NODE_TAG: u64 = 1;

/// Decodes a model the way a big graph needs: node by node into a list sized once,
/// each node's lists trimmed to their length as it is decoded (prost grows a list by
/// doubling, and an attribute list of one holds room for four). On a million-node model
/// that is most of the decoded model's memory. `None` where the bytes are anything but
/// a plain model with one graph and nodes without subgraphs (nesting limits are counted
/// from the model down): the plain decoder then reads it, or says what is wrong.
///
/// An error (not `None`) where the nodes alone would take more memory than the run budget
/// allows, or a node has no op: a file of empty nodes, 2 bytes each, would otherwise be
/// decoded whole (some 200 bytes a node) before anything looked at them.
fn decode_by_node(bytes: &[u8]) -> Result<Option<ModelProto>, OnnxError> {
    decode_nodes_checked(bytes).transpose()
}

/// [`decode_by_node`], `None` where the plain decoder is to read the bytes.
fn decode_nodes_checked(bytes: &[u8]) -> Option<Result<ModelProto, OnnxError>> {
    let mut model = ModelProto::default();
    let mut graph_bytes = None;
    for (tag, field) in fields(bytes)? {
        if tag == MODEL_GRAPH_TAG {
            if graph_bytes.is_some() {
                return None;
            }
            graph_bytes = Some(field);
        } else {
            model.merge(field).ok()?;
        }
    }
    let graph_fields = fields(length_delimited(graph_bytes?)?)?;
    let mut graph = GraphProto::default();
    let count = graph_fields
        .clone()
        .filter(|(t, _)| *t == GRAPH_NODE_TAG)
        .count();
    if let Err(e) = nodes_within(count, graphrw_kernels::budget::max_tensor_bytes()) {
        return Some(Err(e));
    }
    let mut nodes = Vec::with_capacity(count);
    for (tag, field) in graph_fields {
        if tag == GRAPH_NODE_TAG {
            let mut node = NodeProto::decode(length_delimited(field)?).ok()?;
            if node.op_type.is_empty() {
                let name = match node.name.as_str() {
                    "" => String::new(),
                    name => format!(" `{name}`"),
                };
                return Some(Err(OnnxError::Model(format!(
                    "node {}{name} has no op_type",
                    nodes.len()
                ))));
            }
            if node
                .attribute
                .iter()
                .any(|a| a.g.is_some() || !a.graphs.is_empty())
            {
                return None;
            }
            node.input.shrink_to_fit();
            node.output.shrink_to_fit();
            node.attribute.shrink_to_fit();
            nodes.push(node);
        } else {
            graph.merge(field).ok()?;
        }
    }
    graph.node = nodes;
    model.graph = Some(graph);
    Some(Ok(model))
}

/// Refuses `count` nodes whose decoded form would take more than `budget` bytes.
fn nodes_within(count: usize, budget: u64) -> Result<(), OnnxError> {
    let node_bytes = count.saturating_mul(std::mem::size_of::<NodeProto>()) as u64;
    if node_bytes > budget {
        return Err(OnnxError::Model(format!(
            "the graph has {count} nodes, which take {node_bytes} bytes to decode, past the run budget of {budget} bytes"
        )));
    }
    Ok(())
}

/// The top-level fields of a message as (tag, the field's bytes with its key), or
/// `None` for a malformed message, a group or a field number 0. The bytes are checked
/// in a first pass that keeps nothing; the fields are then read off lazily. A list of
/// them would cost 24 bytes per field of as little as 2 bytes: a 256 MiB file of zero
/// bytes asked for 3 GiB before any check.
fn fields(bytes: &[u8]) -> Option<impl Iterator<Item = (u64, &[u8])> + Clone> {
    let mut rest = bytes;
    while !rest.is_empty() {
        next_field(&mut rest)?;
    }
    let mut rest = bytes;
    Some(std::iter::from_fn(move || next_field(&mut rest)))
}

/// Reads one top-level field off the front of `bytes`: its tag and its bytes with the
/// key. `None` at the end, or for a malformed field, a group or a field number 0.
fn next_field<'a>(bytes: &mut &'a [u8]) -> Option<(u64, &'a [u8])> {
    let start = *bytes;
    let key = varint(bytes)?;
    if key >> 3 == 0 {
        return None;
    }
    let body = match key & 7 {
        0 => varint(bytes).map(|_| 0)?,
        1 => 8,
        2 => usize::try_from(varint(bytes)?).ok()?,
        5 => 4,
        _ => return None,
    };
    *bytes = bytes.get(body..)?;
    let used = start.len() - bytes.len();
    Some((key >> 3, start.get(..used)?))
}

/// The payload of one length-delimited field (key and length skipped).
fn length_delimited(mut field: &[u8]) -> Option<&[u8]> {
    let key = varint(&mut field)?;
    if key & 7 != 2 {
        return None;
    }
    let len = usize::try_from(varint(&mut field)?).ok()?;
    (field.len() == len).then_some(field)
}

/// Reads one varint off the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *bytes = bytes.get(i + 1..)?;
            return Some(value);
        }
    }
    None
}

/// [`load`], with `bounds` assumed from the start (see
/// [`Graph::assume_bounds`]): the importer folds the model's shape arithmetic with
/// them, so that `max(seq, 1)` is `seq` under `seq >= 1`. The bounds are saved with
/// the graph and checked at every run.
///
/// ```no_run
/// use graphrw::ir::sym::bounds::Bounds;
/// let graph = graphrw::onnx::load_assuming("model.onnx", &Bounds::parse("seq>=1")?)?;
/// assert_eq!(graph.bounds().lower("seq"), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_assuming(path: impl AsRef<Path>, bounds: &Bounds) -> Result<Graph, OnnxError> {
    crate::ir::sym::in_force::with(bounds, || load(path)).0
}

/// Loads an ONNX model from bytes. A model with external data is an error (there is
/// no folder to find it in); use [`load`] or [`load_bytes_in`].
pub fn load_bytes(bytes: &[u8]) -> Result<Graph, OnnxError> {
    load_bytes_in(bytes, None)
}

/// Loads an ONNX model from bytes, reading external data relative to `dir`.
pub fn load_bytes_in(bytes: &[u8], dir: Option<&Path>) -> Result<Graph, OnnxError> {
    if let Some(graph) = load_fast(bytes, dir, None) {
        return Ok(graph);
    }
    from_model(&decode_model(bytes)?, dir)
}

/// The decoder's limit on nested messages (prost's recursion limit).
const DECODE_DEPTH_LIMIT: usize = 100;

/// A one-line decode error: subgraphs nested past the decoder's limit are named as
/// such, with the depth found by a scan of the bytes; otherwise the decoder's reason
/// without its (per-level) path.
fn decode_error(bytes: &[u8], message: &str) -> OnnxError {
    if message.contains("recursion limit") {
        let depth = super::nesting::subgraph_depth(bytes);
        return OnnxError::Model(format!(
            "subgraphs are nested {depth} deep; graphrw reads at most {} levels (graph > node > attribute > graph counts one level per message, {DECODE_DEPTH_LIMIT} messages in all)",
            DECODE_DEPTH_LIMIT / 3
        ));
    }
    // prost writes `failed to decode Protobuf message: A.b: C.d: reason`: keep the
    // innermost field and the reason.
    let parts: Vec<&str> = message.split(": ").collect();
    let short = match parts.len() {
        0..=3 => message.to_string(),
        n => format!("{}: {}", parts[n - 2], parts[n - 1]),
    };
    OnnxError::Decode {
        what: "model".into(),
        message: super::error::clip(&short, 120),
    }
}

/// Imports a decoded model; `dir` is the folder external data is read from.
pub fn from_model(model: &ModelProto, dir: Option<&Path>) -> Result<Graph, OnnxError> {
    let (opset, opsets) = opsets(model)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::Model("the model has no graph".into()))?;
    let inlined = crate::onnx::ops::inline_functions(model, graph)?;
    let graph = inlined.as_ref().unwrap_or(graph);
    if graph.output.is_empty() {
        return Err(OnnxError::Model(
            "the graph declares no outputs (GraphProto.output is empty): nothing to compute".into(),
        ));
    }
    let named = graph.node.len() + graph.input.len() + graph.initializer.len();
    let mut imp = Importer::new(graph, dir, opset, opsets, graph.node.len(), named)?;
    imp.graph
        .assume_bounds(&bounds::file_bounds(&model.metadata_props, graph)?);
    imp.declare_inputs()?;
    let (mut input, mut output) = (Vec::new(), Vec::new());
    for i in imp.node_order()? {
        let n = &graph.node[i];
        input.clear();
        input.extend(n.input.iter().map(String::as_str));
        output.clear();
        output.extend(n.output.iter().map(String::as_str));
        let at = At {
            op_type: &n.op_type,
            domain: &n.domain,
            input: &input,
            output: &output,
            known: &[],
            numbers: &[],
            out_numbers: &[],
            attribute: &n.attribute,
            source: Source::Proto(n),
            name: node_name(&n.name, i),
        };
        imp.import_node(&at)?;
    }
    imp.finish()
}

/// The model's default-domain opset, and the opset of every domain it imports.
fn opsets(model: &ModelProto) -> Result<(i64, HashMap<String, i64>), OnnxError> {
    let opset = default_opset(model)?;
    let opsets: HashMap<String, i64> = model
        .opset_import
        .iter()
        .map(|o| {
            let domain = if o.domain == "ai.onnx" { "" } else { &o.domain };
            (domain.to_string(), o.version)
        })
        .collect();
    Ok((opset, opsets))
}

fn default_opset(model: &ModelProto) -> Result<i64, OnnxError> {
    let version = model
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .max()
        .ok_or_else(|| {
            OnnxError::Model("the model imports no default-domain (ai.onnx) opset".into())
        })?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&version) {
        return Err(OnnxError::Model(format!(
            "the model uses opset {version}; graphrw reads opsets {MIN_OPSET} to {MAX_OPSET} (convert it with onnx.version_converter)"
        )));
    }
    Ok(version)
}

pub mod bounds;
pub(crate) mod importer;
use importer::*;
use node::*;
pub(crate) mod node;
mod table_row;
#[cfg(test)]
mod tests;
pub(crate) mod value_info;
