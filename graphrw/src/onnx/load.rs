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
//! the exporter (`table.rs`: ONNX name, domain, opsets, operands, and where each
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

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use graphrw_kernels::MappedFile;

use super::name_key::NameKey;
use foldhash::HashMap as FastMap;
use prost::Message;

use super::proto::{
    attribute_type, AttributeProto, DimensionValue, GraphProto, ModelProto, NodeProto, TensorProto,
    ValueInfoProto,
};
use super::table::{self, Absent, Arg, Held, HeldValues, OnnxKind, OpMap, Quirk};
use super::tensor_pb::{dtype_from_onnx, tensor_from_proto, MAX_DIM};
use super::OnnxError;
use crate::graph::{normalize_attrs, normalize_attrs_taking, Foreign, Graph, NodeId, Value};
use crate::meta::{normalize_axis, DType, Dim, Shape, SymExpr, TensorMeta};
use crate::ops::{self, AttrKind, AttrValue, OpDef};
use crate::GraphError;
use crate::Tensor;
use smallvec::{smallvec, SmallVec};

mod shape_fold;

/// The oldest default-domain opset the importer reads. Each op is read with its meaning
/// at the model's opset (Softmax before 13 flattens to 2-D, axes are attributes before
/// 13, ...); an op whose old form graphrw does not read stays an `opaque` node.
pub const MIN_OPSET: i64 = 1;
/// The newest default-domain opset the importer accepts.
pub const MAX_OPSET: i64 = 23;

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
            let bytes = std::fs::read(path).map_err(|e| OnnxError::io(path, e))?;
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

/// Decodes a model's protobuf.
fn decode_model(bytes: &[u8]) -> Result<ModelProto, OnnxError> {
    if let Some(model) = decode_by_node(bytes) {
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
fn decode_by_node(bytes: &[u8]) -> Option<ModelProto> {
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
        .iter()
        .filter(|(t, _)| *t == GRAPH_NODE_TAG)
        .count();
    let mut nodes = Vec::with_capacity(count);
    for (tag, field) in graph_fields {
        if tag == GRAPH_NODE_TAG {
            let mut node = NodeProto::decode(length_delimited(field)?).ok()?;
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
    Some(model)
}

/// The top-level fields of a message as (tag, the field's bytes with its key), or
/// `None` for a malformed message or a group.
fn fields(mut bytes: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let start = bytes;
        let key = varint(&mut bytes)?;
        let body = match key & 7 {
            0 => varint(&mut bytes).map(|_| 0)?,
            1 => 8,
            2 => usize::try_from(varint(&mut bytes)?).ok()?,
            5 => 4,
            _ => return None,
        };
        bytes = bytes.get(body..)?;
        let used = start.len() - bytes.len();
        out.push((key >> 3, start.get(..used)?));
    }
    Some(out)
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
    let inlined = super::functions::inline_functions(model, graph)?;
    let graph = inlined.as_ref().unwrap_or(graph);
    if graph.output.is_empty() {
        return Err(OnnxError::Model(
            "the graph declares no outputs (GraphProto.output is empty): nothing to compute".into(),
        ));
    }
    let named = graph.node.len() + graph.input.len() + graph.initializer.len();
    let mut imp = Importer::new(graph, dir, opset, opsets, graph.node.len(), named)?;
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

struct Importer<'m> {
    proto: &'m GraphProto,
    dir: Option<&'m Path>,
    opset: i64,
    /// Opset version per domain (`""` for ai.onnx).
    opsets: HashMap<String, i64>,
    /// Declared types by value name (`value_info`, graph inputs and outputs).
    declared: FastMap<&'m str, &'m ValueInfoProto>,
    /// Nodes made for the ONNX node being mapped, undone when it falls back to opaque.
    made: Vec<NodeId>,
    graph: Graph,
    /// Every defined value by ONNX name; on the fast route, only graph inputs,
    /// initialisers made constants and (at the end) graph outputs: node outputs are
    /// in `by_number`.
    values: FastMap<&'m str, Value>,
    /// The fast route's values by number ([`super::decode::Numbering`]): graph inputs,
    /// initialisers once they are constants, node outputs as they are named.
    by_number: Vec<Option<Value>>,
    /// How many numbers name graph inputs and initialisers (the rest, node outputs).
    predefined: usize,
    /// Initialisers not yet made constants.
    inits: FastMap<&'m str, &'m TensorProto>,
    /// Mask `Expand`s of graphrw's own Attention export that the loader bypassed; removed
    /// in `finish` when nothing else reads them (once, so many attentions stay linear).
    bypassed: Vec<NodeId>,
    /// The model file, when initialisers' `raw_data` is read in place from it.
    file: Option<Arc<MappedFile>>,
    /// Initialisers whose `raw_data` was left out of their message: its byte range
    /// `(offset, len)` in `file`.
    raw: FastMap<&'m str, (usize, usize)>,
    /// The table rows that load each `(op_type, domain)` at this opset, found once.
    rows: FastMap<(NameKey<'m>, NameKey<'m>), Rc<[&'static OpMap]>>,
    /// Initialisers read as constant inputs (shapes, axes) without becoming constants,
    /// decoded once: an export shares one shape tensor between every layer's Reshape.
    read_consts: FastMap<&'m str, Tensor>,
}

/// The inputs and attributes of one ONNX node, with its name for messages.
/// `'m` is the lifetime of the model's bytes or decoded messages (the names), `'n` that
/// of this node's lists.
struct At<'m, 'n> {
    op_type: &'m str,
    domain: &'m str,
    /// Input names, `""` for an absent optional input.
    input: &'n [&'m str],
    output: &'n [&'m str],
    /// Per input, its value when it was already defined as the node was read (the fast
    /// route looks each name up once); empty where the names are looked up as read.
    known: &'n [Option<Value>],
    /// The fast route's number of each input and output name
    /// ([`super::decode::Numbering`]; `ABSENT` for `""`); empty on the plain route.
    numbers: &'n [u32],
    out_numbers: &'n [u32],
    attribute: &'n [AttributeProto],
    /// The node itself, for what only an opaque node keeps (its other fields, its
    /// subgraphs).
    source: Source<'m>,
    name: Cow<'m, str>,
}

/// Where an [`At`] was read from.
#[derive(Clone, Copy)]
enum Source<'m> {
    /// A decoded message (the plain route).
    Proto(&'m NodeProto),
    /// The bytes of a `NodeProto` (the fast route; no subgraphs).
    Bytes(&'m [u8]),
}

/// The name a node is known by in messages and in the graph: its ONNX name, or `n<i>`
/// (its index in the file) when it has none.
fn node_name(name: &str, index: usize) -> Cow<'_, str> {
    if name.is_empty() {
        Cow::Owned(format!("n{index}"))
    } else {
        Cow::Borrowed(name)
    }
}

impl<'m> At<'m, '_> {
    /// A valid form graphrw does not read: the node passes through as opaque.
    fn err(&self, message: impl Into<String>) -> OnnxError {
        OnnxError::node(self.op_type, &self.name, message)
    }

    /// A node that breaks the ONNX spec: the model is refused (`MALFORMED.md`).
    fn bad(&self, message: impl Into<String>) -> OnnxError {
        OnnxError::malformed(self.op_type, &self.name, message)
    }

    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attribute.iter().find(|a| a.name == name)
    }

    /// Refuses attributes the mapping does not know (they might change the meaning).
    fn only_attrs(&self, known: &[&str]) -> Result<(), OnnxError> {
        self.only_attrs_of(|name| known.contains(&name), || known.to_vec())
    }

    /// [`At::only_attrs`] with the names known as a test, and listed (for the message)
    /// only when one is refused.
    fn only_attrs_of<'k>(
        &self,
        reads: impl Fn(&str) -> bool,
        list: impl Fn() -> Vec<&'k str>,
    ) -> Result<(), OnnxError> {
        for a in self.attribute {
            if !reads(a.name.as_str()) {
                let known = list();
                return Err(self.err(format!(
                    "attribute `{}` is not supported (graphrw reads: {})",
                    a.name,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
            if !a.ref_attr_name.is_empty() {
                return Err(self.err(format!(
                    "attribute `{}` refers to a function attribute",
                    a.name
                )));
            }
        }
        Ok(())
    }

    fn kind_check(&self, a: &AttributeProto, want: i32, what: &str) -> Result<(), OnnxError> {
        if a.r#type != 0 && a.r#type != want {
            return Err(self.bad(format!(
                "attribute `{}` should be {what} (type {want}), found type {}",
                a.name, a.r#type
            )));
        }
        Ok(())
    }

    fn int(&self, name: &str, default: i64) -> Result<i64, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::INT, "an int")?;
                Ok(a.i)
            }
            None => Ok(default),
        }
    }

    fn float(&self, name: &str, default: f32) -> Result<f32, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::FLOAT, "a float")?;
                Ok(a.f)
            }
            None => Ok(default),
        }
    }

    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::INTS, "an int list")?;
                Ok(Some(a.ints.clone()))
            }
            None => Ok(None),
        }
    }

    fn string(&self, name: &str, default: &str) -> Result<String, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::STRING, "a string")?;
                String::from_utf8(a.s.clone())
                    .map_err(|_| self.bad(format!("attribute `{name}` is not UTF-8")))
            }
            None => Ok(default.to_string()),
        }
    }

    /// The name of input `i`, `None` when absent or empty.
    fn input_name(&self, i: usize) -> Option<&'m str> {
        self.input.get(i).copied().filter(|s| !s.is_empty())
    }

    fn inputs_between(&self, min: usize, max: usize) -> Result<(), OnnxError> {
        let n = self.input.len();
        if n < min || n > max {
            let want = if min == max {
                format!("{min}")
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(self.bad(format!("takes {want} inputs, found {n}")));
        }
        Ok(())
    }

    /// Checks an attribute held at the values graphrw reads (`table::Held`).
    fn held(&self, h: &Held) -> Result<(), OnnxError> {
        let (found, reads) = match h.values {
            HeldValues::Int { default, accept } => {
                let v = self.int(h.onnx, default)?;
                if accept.contains(&v) {
                    return Ok(());
                }
                (v.to_string(), format!("{accept:?}"))
            }
            HeldValues::Str { default, accept } => {
                let v = self.string(h.onnx, default)?;
                if accept.contains(&v.as_str()) {
                    return Ok(());
                }
                (format!("`{v}`"), accept.join(", "))
            }
        };
        Err(self.err(format!(
            "attribute `{}` {found} is not supported (graphrw reads {reads})",
            h.onnx
        )))
    }

    /// Refuses optional outputs past the first `n` that the mapping cannot produce.
    fn only_outputs(&self, n: usize) -> Result<(), OnnxError> {
        if let Some(extra) = self.output.iter().skip(n).find(|o| !o.is_empty()) {
            return Err(self.err(format!(
                "output `{extra}` is not supported (only the first {n} output(s))"
            )));
        }
        Ok(())
    }
}

/// The values made for one ONNX node's outputs (nearly always one).
type Outs = SmallVec<[Value; 2]>;

/// A graph error while adding a node for `at`, with the ONNX node it was made for.
fn graph_error(at: &At, e: GraphError) -> OnnxError {
    OnnxError::Graph {
        op_type: super::error::clip(at.op_type, 40),
        node: super::error::clip(&at.name, 60),
        source: Box::new(e),
    }
}

/// The attribute names a table row reads at `opset` (the ONNX node may carry no other).
fn row_attrs(row: &'static OpMap, opset: i64, legacy: bool) -> impl Iterator<Item = &'static str> {
    row.args
        .iter()
        .filter(move |a| a.place.input_at(opset).is_none())
        .map(|a| a.onnx)
        .chain(row.held.iter().map(|h| h.onnx))
        .chain(row.ignored.iter().copied())
        .chain(["broadcast", "axis"].into_iter().filter(move |_| legacy))
}

/// [`limit_ints`] of the entries of a symbolic list that are known.
fn limit_sym(at: &At, what: &str, v: &[SymExpr]) -> Result<(), OnnxError> {
    let known: Vec<i64> = v.iter().filter_map(SymExpr::as_const).collect();
    limit_ints(at, what, &known)
}

fn int_attr(v: i64) -> AttrValue {
    AttrValue::Int(v)
}

fn limit_ints(at: &At, what: &str, v: &[i64]) -> Result<(), OnnxError> {
    let lim = MAX_DIM as i64;
    if let Some(bad) = v.iter().find(|&&x| !(-lim..=lim).contains(&x)) {
        return Err(at.err(format!(
            "{what} value {bad} is out of range (|value| <= 2^48)"
        )));
    }
    Ok(())
}

impl<'m> Importer<'m> {
    /// An importer of `proto`'s graph, its tables sized for `node_count` nodes and
    /// `named` value names found by name.
    fn new(
        proto: &'m GraphProto,
        dir: Option<&'m Path>,
        opset: i64,
        opsets: HashMap<String, i64>,
        node_count: usize,
        named: usize,
    ) -> Result<Importer<'m>, OnnxError> {
        let declared = proto
            .value_info
            .iter()
            .chain(&proto.output)
            .chain(&proto.input)
            .map(|vi| (vi.name.as_str(), vi))
            .collect();
        let mut inits = FastMap::default();
        inits.reserve(proto.initializer.len());
        for t in &proto.initializer {
            if t.name.is_empty() {
                return Err(OnnxError::tensor("", "an initialiser has no name"));
            }
            if inits.insert(t.name.as_str(), t).is_some() {
                return Err(OnnxError::tensor(
                    &t.name,
                    "two initialisers have this name",
                ));
            }
        }
        Ok(Importer {
            proto,
            dir,
            opset,
            opsets,
            declared,
            made: Vec::new(),
            graph: {
                // Most ONNX nodes become one node; inputs and initialisers one each.
                let mut graph = Graph::new();
                graph.reserve(node_count + proto.input.len() + proto.initializer.len());
                graph
            },
            values: {
                let mut values = FastMap::default();
                values.reserve(named);
                values
            },
            inits,
            by_number: Vec::new(),
            predefined: 0,
            bypassed: Vec::new(),
            file: None,
            raw: FastMap::default(),
            rows: FastMap::default(),
            read_consts: FastMap::default(),
        })
    }

    fn declare_inputs(&mut self) -> Result<(), OnnxError> {
        let proto = self.proto;
        for vi in &proto.input {
            if self.inits.contains_key(vi.name.as_str()) {
                // An input with a default value (IR < 4 style): graphrw keeps the initialiser.
                continue;
            }
            if self.values.contains_key(vi.name.as_str()) {
                return Err(OnnxError::Input {
                    name: vi.name.clone(),
                    message: "is declared twice".into(),
                });
            }
            if let Some(message) = super::malformed::input_elem_type(vi) {
                return Err(OnnxError::Input {
                    name: super::error::clip(&vi.name, 60),
                    message,
                });
            }
            let v = match modelled(vi) {
                true => self.graph.add_input(vi.name.clone(), input_meta(vi)?),
                // A type graphrw does not model (strings, sequences, no shape): the input
                // keeps its ONNX type and everything that reads it stays opaque.
                false => {
                    let (meta, ty) = placeholder(vi);
                    let v = self.graph.add_input(vi.name.clone(), meta);
                    if let Some(n) = self.graph.node_mut(v.node) {
                        n.set_foreign(Foreign {
                            types: vec![Some(ty)],
                            outputs: vec![true],
                            ..Foreign::default()
                        });
                    }
                    v
                }
            };
            self.values.insert(vi.name.as_str(), v);
        }
        Ok(())
    }

    fn node_name(&self, i: usize) -> String {
        let n = &self.proto.node[i];
        if n.name.is_empty() {
            format!("n{i}")
        } else {
            n.name.clone()
        }
    }

    /// Node indices in a topological order (file order when the file is sorted).
    fn node_order(&self) -> Result<Vec<usize>, OnnxError> {
        let nodes = &self.proto.node;
        let mut producer: FastMap<&str, usize> = FastMap::default();
        producer.reserve(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                if self.values.contains_key(o.as_str())
                    || self.inits.contains_key(o.as_str())
                    || producer.insert(o, i).is_some()
                {
                    return Err(OnnxError::node(
                        &n.op_type,
                        &self.node_name(i),
                        format!("output `{o}` is defined more than once (ONNX values are assigned once)"),
                    ));
                }
            }
        }
        // Per node, the nodes it reads from (deduplicated), as one flat list.
        let mut deps: Vec<usize> = Vec::with_capacity(nodes.len() * 2);
        let mut starts: Vec<usize> = Vec::with_capacity(nodes.len() + 1);
        let mut sorted = true;
        for (i, n) in nodes.iter().enumerate() {
            starts.push(deps.len());
            let from = deps.len();
            for name in &n.input {
                if let Some(&d) = producer.get(name.as_str()) {
                    sorted &= d < i;
                    deps.push(d);
                }
            }
            deps[from..].sort_unstable();
            let mut kept = from;
            for k in from..deps.len() {
                if k == from || deps[k] != deps[kept - 1] {
                    deps[kept] = deps[k];
                    kept += 1;
                }
            }
            deps.truncate(kept);
        }
        starts.push(deps.len());
        // A file in order (nearly every export) keeps its order: among ready nodes the
        // smallest index goes first, and in a sorted file that is always the next one.
        if sorted {
            return Ok((0..nodes.len()).collect());
        }
        let mut indegree: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        // Users by producer, as one flat list (counting sort of the dependency edges).
        let mut user_starts = vec![0usize; nodes.len() + 1];
        for &d in &deps {
            user_starts[d + 1] += 1;
        }
        for i in 0..nodes.len() {
            user_starts[i + 1] += user_starts[i];
        }
        let mut fill = user_starts.clone();
        let mut users = vec![0usize; deps.len()];
        for (i, w) in starts.windows(2).enumerate() {
            for &d in &deps[w[0]..w[1]] {
                users[fill[d]] = i;
                fill[d] += 1;
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> = (0..nodes.len())
            .filter(|&i| indegree[i] == 0)
            .map(Reverse)
            .collect();
        let mut order = Vec::with_capacity(nodes.len());
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &u in &users[user_starts[i]..user_starts[i + 1]] {
                indegree[u] -= 1;
                if indegree[u] == 0 {
                    ready.push(Reverse(u));
                }
            }
        }
        if order.len() != nodes.len() {
            let on_cycle = (0..nodes.len()).find(|&i| indegree[i] > 0).unwrap_or(0);
            return Err(OnnxError::Cycle {
                node: self.node_name(on_cycle),
            });
        }
        Ok(order)
    }

    /// The tensor of initialiser `t`: a view of the model file where its `raw_data` was
    /// left there, else decoded from the message.
    fn initializer(&self, t: &TensorProto, name: &str) -> Result<Tensor, OnnxError> {
        match (&self.file, self.raw.get(name)) {
            (Some(file), Some(&(offset, len))) => {
                super::tensor_pb::tensor_from_file_raw(t, name, self.dir, file, offset, len)
            }
            _ => tensor_from_proto(t, name, self.dir),
        }
    }

    /// The value named `name`, making an initialiser a constant on first use.
    fn value(&mut self, name: &'m str, user: &str) -> Result<Value, OnnxError> {
        if let Some(&v) = self.values.get(name) {
            return Ok(v);
        }
        let Some(t) = self.inits.remove(name) else {
            return Err(OnnxError::Undefined {
                node: user.to_string(),
                value: name.to_string(),
            });
        };
        let tensor = self.initializer(t, name)?;
        let v = self.graph.add_constant(tensor);
        self.graph.set_name(v.node, name);
        self.values.insert(name, v);
        Ok(v)
    }

    /// Records `v` as the value numbered `n` (fast route; nothing for `ABSENT`).
    fn number(&mut self, n: u32, v: Value) {
        if n == super::decode::ABSENT {
            return;
        }
        let n = n as usize;
        if n >= self.by_number.len() {
            self.by_number.resize(n + 1, None);
        }
        self.by_number[n] = Some(v);
    }

    /// Imports the nodes of a fast-route batch in order. `None` for an input that is
    /// not defined yet (neither a value nor an initialiser: the plain route sorts the
    /// nodes or says what is undefined) and for every error (the plain route decides).
    fn import_batch(
        &mut self,
        b: &super::decode::Batch<'m>,
        known: &mut Vec<Option<Value>>,
    ) -> Option<()> {
        for node in &b.nodes {
            let numbers = b.input_numbers(node);
            known.clear();
            for &n in numbers {
                known.push(match self.by_number.get(n as usize) {
                    Some(&Some(v)) => Some(v),
                    // `""`, or an initialiser not yet a constant.
                    _ if n == super::decode::ABSENT || (n as usize) < self.predefined => None,
                    _ => return None,
                });
            }
            let at = At {
                op_type: node.op_type,
                domain: node.domain,
                input: b.inputs(node),
                output: b.outputs(node),
                known,
                numbers,
                out_numbers: b.output_numbers(node),
                attribute: b.attributes(node),
                source: Source::Bytes(node.bytes),
                name: node_name(node.name, node.index),
            };
            self.import_node(&at).ok()?;
        }
        Some(())
    }

    /// Input `i` of the node, `None` when absent.
    fn input(&mut self, at: &At<'m, '_>, i: usize) -> Result<Option<Value>, OnnxError> {
        if let Some(&Some(v)) = at.known.get(i) {
            return Ok(Some(v));
        }
        match at.input.get(i).copied().filter(|s| !s.is_empty()) {
            Some(name) => {
                let v = self.value(name, &at.name)?;
                if let Some(&n) = at.numbers.get(i) {
                    self.number(n, v);
                }
                Ok(Some(v))
            }
            None => Ok(None),
        }
    }

    fn req(&mut self, at: &At<'m, '_>, i: usize) -> Result<Value, OnnxError> {
        self.input(at, i)?
            .ok_or_else(|| at.bad(format!("input {i} is required")))
    }

    /// The constant value of input `i` without adding it to the graph, or a message that
    /// it is computed at run time.
    fn const_input(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        what: &str,
    ) -> Result<Option<Tensor>, OnnxError> {
        let Some(name) = at.input_name(i) else {
            return Ok(None);
        };
        let defined = match at.known.get(i) {
            Some(&Some(v)) => Some(v),
            _ => self.values.get(name).copied(),
        };
        if let Some(v) = defined {
            if let Some(t) = self.graph.node(v.node).and_then(|n| n.payload()) {
                return Ok(Some(t.clone()));
            }
            return Err(at.err(format!(
                "{what} input `{name}` is computed at run time; only constant {what}s are supported"
            )));
        }
        if let Some(t) = self.read_consts.get(name) {
            return Ok(Some(t.clone()));
        }
        match self.inits.get(name) {
            Some(&t) => {
                let t = self.initializer(t, name)?;
                self.read_consts.insert(name, t.clone());
                Ok(Some(t))
            }
            None => Err(OnnxError::Undefined {
                node: at.name.to_string(),
                value: name.to_string(),
            }),
        }
    }

    fn const_ints(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        what: &str,
    ) -> Result<Option<Vec<i64>>, OnnxError> {
        let v = self.const_ints_unlimited(at, i, what)?;
        if let Some(v) = &v {
            limit_ints(at, what, v)?;
        }
        Ok(v)
    }

    /// Like `const_ints` without the range check (slice bounds use `i64::MAX`).
    fn const_ints_unlimited(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        what: &str,
    ) -> Result<Option<Vec<i64>>, OnnxError> {
        match self.const_input(at, i, what)? {
            None => Ok(None),
            Some(t) if t.dtype().is_int() => {
                if t.rank() > 1 {
                    return Err(at.bad(format!(
                        "{what} input must be 0-D or 1-D, found shape {:?}",
                        t.shape()
                    )));
                }
                Ok(Some(t.to_i64_vec()))
            }
            Some(t) => Err(at.bad(format!(
                "{what} input must be int64 or int32, found {}",
                t.dtype()
            ))),
        }
    }

    fn meta(&self, v: Value) -> Result<TensorMeta, OnnxError> {
        self.graph.meta(v).cloned().map_err(OnnxError::verify)
    }

    /// Adds a vocabulary node for the ONNX node `at`, named after it.
    fn op(
        &mut self,
        at: &At,
        op: &str,
        operands: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<Outs, OnnxError> {
        let def: &'static OpDef =
            ops::lookup(op).ok_or_else(|| at.err(format!("vocabulary op `{op}` is missing")))?;
        let values = normalize_attrs(def, attrs).map_err(|e| graph_error(at, e))?;
        self.add(at, def, operands, values)
    }

    /// Adds a node of `def` with attributes aligned with its signature for the ONNX
    /// node `at`, named after it; returns its outputs.
    fn add(
        &mut self,
        at: &At,
        def: &'static OpDef,
        operands: &[Value],
        values: Vec<AttrValue>,
    ) -> Result<Outs, OnnxError> {
        let id: NodeId = self
            .graph
            .add_node_named(def, operands, values, &at.name)
            .map_err(|e| graph_error(at, e))?;
        self.made.push(id);
        let outputs = self.graph.node(id).map_or(&[][..], |n| n.outputs());
        for m in outputs {
            if m.shape
                .dims()
                .iter()
                .any(|d| d.known().is_some_and(|n| n > MAX_DIM))
            {
                return Err(at.err(format!("`{}` would make a tensor of shape {}, larger than graphrw accepts (dims <= 2^48)", def.name, m.shape)));
            }
        }
        Ok((0..outputs.len() as u32)
            .map(|o| Value::new(id, o))
            .collect())
    }

    /// [`Importer::op`] of a table row's op, its attributes moved into the node.
    fn op_taking(
        &mut self,
        at: &At,
        def: &'static OpDef,
        operands: &[Value],
        attrs: &mut [(&str, AttrValue)],
    ) -> Result<Outs, OnnxError> {
        let values = normalize_attrs_taking(def, attrs).map_err(|e| graph_error(at, e))?;
        self.add(at, def, operands, values)
    }

    fn op1(
        &mut self,
        at: &At,
        op: &str,
        operands: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<Value, OnnxError> {
        self.op(at, op, operands, attrs)?
            .first()
            .copied()
            .ok_or_else(|| at.err(format!("`{op}` made no output")))
    }

    fn scalar(&mut self, dtype: DType, value: f64) -> Value {
        let v = self.graph.add_constant(Tensor::full(dtype, &[], value));
        self.made.push(v.node);
        v
    }

    fn import_node(&mut self, at: &At<'m, '_>) -> Result<(), OnnxError> {
        let default_domain = at.domain.is_empty() || at.domain == "ai.onnx";
        if !default_domain || self.reads_unknown(at) {
            return self.opaque(at);
        }
        let mark = self.made.len();
        let mapped = match self.fold_shape(at) {
            Ok(Some(outs)) => Ok(outs),
            Ok(None) => self.map_node(at),
            Err(e) => Err(e),
        };
        match mapped {
            Ok(outs) => {
                self.made.clear();
                let named = at
                    .output
                    .iter()
                    .zip(outs)
                    .enumerate()
                    .filter(|(_, (name, _))| !name.is_empty());
                for (j, (&name, v)) in named {
                    self.name_output(at, j, name, v)?;
                }
                Ok(())
            }
            // What graphrw cannot express (an op outside the vocabulary, an attribute or
            // form it does not read) passes through; a model that contradicts itself
            // (a known op against the ONNX spec: `OnnxError::Malformed`, inference
            // rejects the operands, undefined values, bad tensors) does not.
            Err(OnnxError::Node { .. } | OnnxError::UnknownOp { .. }) => {
                self.undo(mark)?;
                self.opaque(at)
            }
            Err(e) => Err(e),
        }
    }

    /// Removes the nodes made since `mark` for a node that falls back to opaque.
    fn undo(&mut self, mark: usize) -> Result<(), OnnxError> {
        while self.made.len() > mark {
            let Some(id) = self.made.pop() else { break };
            // No name points at a made node: the ONNX node's outputs are named only
            // once it maps, and initialiser constants are not in `made`. (A scan of
            // `values` here would make a model of many fallbacks quadratic.)
            if self.graph.node(id).is_some() && self.graph.node_is_unused(id) {
                self.graph.remove_node(id).map_err(OnnxError::verify)?;
            }
        }
        self.made.clear();
        Ok(())
    }

    /// True when the node reads a value whose metadata graphrw does not know.
    fn reads_unknown(&self, at: &At<'m, '_>) -> bool {
        let unknown = |v: &Value| {
            self.graph
                .node(v.node)
                .is_some_and(|n| !n.is_known(v.output as usize))
        };
        if at.known.len() == at.input.len() {
            // Looked up as the node was read (an initialiser not yet a constant is known).
            return at.known.iter().flatten().any(unknown);
        }
        at.input
            .iter()
            .any(|&name| self.values.get(name).is_some_and(unknown))
    }

    /// Adds the ONNX node as an `opaque` node: its inputs (and the outer values its
    /// subgraphs read) as operands, its outputs with the metadata the model declares.
    fn opaque(&mut self, at: &At<'m, '_>) -> Result<(), OnnxError> {
        let decoded;
        let node: &NodeProto = match at.source {
            Source::Proto(n) => n,
            Source::Bytes(b) => {
                decoded = NodeProto::decode(b).map_err(|e| OnnxError::Decode {
                    what: format!("node {}", at.name),
                    message: e.to_string(),
                })?;
                &decoded
            }
        };
        let mut operands = Vec::with_capacity(at.input.len());
        let mut inputs = Vec::with_capacity(at.input.len());
        for (i, &name) in at.input.iter().enumerate() {
            inputs.push(!name.is_empty());
            if !name.is_empty() {
                operands.push(match at.known.get(i) {
                    Some(&Some(v)) => v,
                    _ => self.value(name, &at.name)?,
                });
            }
        }
        let captures: Vec<String> = super::nesting::captures(node)
            .into_iter()
            .filter(|c| self.values.contains_key(c.as_str()) || self.inits.contains_key(c.as_str()))
            .collect();
        for c in &captures {
            let name: &'m str = self
                .values
                .get_key_value(c.as_str())
                .map(|(k, _)| *k)
                .or_else(|| self.inits.get_key_value(c.as_str()).map(|(k, _)| *k))
                .unwrap_or("");
            operands.push(self.value(name, &at.name)?);
        }
        let mut metas = Vec::with_capacity(at.output.len());
        let mut types = Vec::with_capacity(at.output.len());
        let mut outputs = Vec::with_capacity(at.output.len());
        for &name in at.output {
            outputs.push(!name.is_empty());
            if name.is_empty() {
                continue;
            }
            let (meta, ty) = match self.declared.get(name) {
                Some(vi) if modelled(vi) => (input_meta(vi)?, None),
                Some(vi) => {
                    let (m, t) = placeholder(vi);
                    (m, Some(t))
                }
                None => (
                    TensorMeta::new(DType::F32, Shape::default()),
                    Some(Vec::new()),
                ),
            };
            metas.push(meta);
            types.push(ty);
        }
        let domain = if at.domain == "ai.onnx" {
            ""
        } else {
            at.domain
        };
        let stripped = NodeProto {
            op_type: node.op_type.clone(),
            domain: node.domain.clone(),
            overload: node.overload.clone(),
            attribute: node.attribute.clone(),
            doc_string: node.doc_string.clone(),
            metadata_props: node.metadata_props.clone(),
            ..Default::default()
        };
        let foreign = Foreign {
            node: stripped.encode_to_vec(),
            opset: self.opsets.get(domain).copied().unwrap_or(0),
            inputs,
            outputs,
            captures,
            types,
        };
        let id = self.graph.add_opaque(
            at.op_type,
            domain,
            operands,
            metas,
            foreign,
            Some(at.name.to_string()),
        );
        let present = at.output.iter().enumerate().filter(|(_, o)| !o.is_empty());
        for (o, (j, &name)) in present.enumerate() {
            self.name_output(at, j, name, Value::new(id, o as u32))?;
        }
        Ok(())
    }

    /// Names output value `v` of the node `at` `name`. A name already defined is an
    /// error: the plain route's `node_order` finds those before any node is imported,
    /// the fast route (which does not order) here, and then leaves it to the plain route.
    ///
    /// On the fast route (`at.out_numbers`, for output `j`) the value is recorded by
    /// number: the reader already refused a name defined twice.
    fn name_output(
        &mut self,
        at: &At<'m, '_>,
        j: usize,
        name: &'m str,
        v: Value,
    ) -> Result<(), OnnxError> {
        if let Some(&n) = at.out_numbers.get(j) {
            self.number(n, v);
            return Ok(());
        }
        if self.values.insert(name, v).is_some() {
            return Err(OnnxError::node(
                at.op_type,
                &at.name,
                format!(
                    "output `{name}` is defined more than once (ONNX values are assigned once)"
                ),
            ));
        }
        Ok(())
    }

    /// Maps one ONNX node; returns a value per ONNX output (in order). Ops in the table
    /// (`table.rs`) go through [`Importer::map_row`]; the rest are special cases.
    fn map_node(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let op_type = at.op_type;
        // The first row whose held attributes fit; failing that, the first row, which
        // says what does not fit.
        let domain = at.domain;
        let domain = if domain == "ai.onnx" { "" } else { domain };
        let opset = self.opset;
        let rows = Rc::clone(
            self.rows
                .entry((NameKey(op_type), NameKey(domain)))
                .or_insert_with(|| table::loading(op_type, domain, opset).collect()),
        );
        if let Some(&first) = rows.first() {
            let fits = rows
                .iter()
                .find(|r| r.held.iter().all(|h| at.held(h).is_ok()));
            return self.map_row(at, fits.copied().unwrap_or(first));
        }
        match op_type {
            "Identity" => {
                at.only_attrs(&[])?;
                at.inputs_between(1, 1)?;
                Ok(smallvec![self.req(at, 0)?])
            }
            "Dropout" => {
                // Before 12 the ratio is an attribute; before 7 `is_test` says inference.
                match self.opset {
                    ..=6 => {
                        at.only_attrs(&["is_test", "ratio"])?;
                        if at.int("is_test", 0)? == 0 {
                            return Err(at.err("is_test is 0 (training mode)"));
                        }
                    }
                    7..=11 => at.only_attrs(&["ratio", "seed"])?,
                    _ => at.only_attrs(&["seed"])?,
                }
                at.only_outputs(1)?;
                if let Some(t) = self.const_input(at, 2, "training_mode")? {
                    if t.to_f64_vec().iter().any(|&v| v != 0.0) {
                        return Err(
                            at.err("training_mode is true; graphrw imports inference graphs")
                        );
                    }
                }
                Ok(smallvec![self.req(at, 0)?])
            }
            // Since opset 13 through the table.
            "Softmax" | "LogSoftmax" => {
                at.only_attrs(&["axis"])?;
                let x = self.req(at, 0)?;
                let op = if op_type == "Softmax" {
                    "softmax"
                } else {
                    "log_softmax"
                };
                self.softmax_2d(at, op, x)
            }
            "Flatten" => {
                at.only_attrs(&["axis"])?;
                let x = self.req(at, 0)?;
                let shape = self.meta(x)?.shape;
                let axis = at.int("axis", 1)?;
                let r = shape.rank();
                let a = if axis < 0 { axis + r as i64 } else { axis };
                if !(0..=r as i64).contains(&a) {
                    return Err(at.bad(format!("axis {axis} is out of range for {shape}")));
                }
                let (head, tail) = shape.dims().split_at(a as usize);
                let prod = |d: &[Dim]| d.iter().map(Dim::known).product::<Option<u64>>();
                let target = match (prod(head), prod(tail)) {
                    (Some(h), Some(t)) => vec![h as i64, t as i64],
                    (Some(h), None) => vec![h as i64, -1],
                    (None, Some(t)) => vec![-1, t as i64],
                    (None, None) => {
                        return Err(at.err(format!("both halves of {shape} are symbolic")))
                    }
                };
                Ok(smallvec![self.op1(
                    at,
                    "reshape",
                    &[x],
                    &[("shape", AttrValue::Ints(target))],
                )?])
            }
            "Clip" => self.clip(at),
            "Einsum" => self.einsum(at),
            "PRelu" | "LeakyRelu" | "Elu" | "Selu" | "Softplus" => self.activation(at),
            "BatchNormalization" => self.batch_norm(at),
            "Gemm" => self.gemm(at),
            "Reshape" => self.reshape(at),
            "Slice" => self.slice(at),
            "Unsqueeze" => {
                let x = self.req(at, 0)?;
                let axes = self
                    .axes(at)?
                    .ok_or_else(|| at.bad("input 1 (axes) is required"))?;
                let out_rank = self.meta(x)?.rank() + axes.len();
                let mut norm: Vec<usize> = Vec::with_capacity(axes.len());
                for &a in &axes {
                    let d = normalize_axis(a, out_rank).ok_or_else(|| {
                        at.bad(format!(
                            "axis {a} is out of range for output rank {out_rank}"
                        ))
                    })?;
                    if norm.contains(&d) {
                        return Err(at.bad(format!("axes {axes:?} repeat axis {d}")));
                    }
                    norm.push(d);
                }
                norm.sort_unstable();
                let mut v = x;
                for d in norm {
                    v = self.op1(at, "unsqueeze", &[v], &[("dim", int_attr(d as i64))])?;
                }
                Ok(smallvec![v])
            }
            "Expand" => self.expand(at),
            "Split" => self.split(at),
            "Constant" => {
                let t = self.constant_attr(at)?;
                let v = self.graph.add_constant(t);
                self.graph.set_name(v.node, at.name.to_string());
                Ok(smallvec![v])
            }
            "ConstantOfShape" => {
                at.only_attrs(&["value"])?;
                let size = self
                    .shape_arg(at, 0, "shape")?
                    .ok_or_else(|| at.bad("input 0 (shape) is required"))?;
                limit_sym(at, "shape", &size)?;
                let size = AttrValue::sym_ints(size);
                let (dtype, value) = match at.attr("value") {
                    Some(a) => {
                        let t =
                            a.t.as_ref()
                                .ok_or_else(|| at.bad("attribute `value` holds no tensor"))?;
                        let t = tensor_from_proto(t, &format!("{}/value", at.name), None)?;
                        if t.numel() != 1 {
                            return Err(at.bad("attribute `value` must hold one element"));
                        }
                        (t.dtype(), t.to_f64_vec().first().copied().unwrap_or(0.0))
                    }
                    None => (DType::F32, 0.0),
                };
                let attrs = [
                    ("size", size),
                    ("value", AttrValue::Float(value)),
                    ("dtype", AttrValue::DType(dtype)),
                ];
                Ok(smallvec![self.op1(at, "full", &[], &attrs)?])
            }
            "Range" => {
                at.only_attrs(&[])?;
                let mut bounds = [AttrValue::Float(0.0), AttrValue::Null, AttrValue::Null];
                let mut dtype = DType::I64;
                for (i, what) in ["start", "limit", "delta"].into_iter().enumerate() {
                    match self.const_input(at, i, what) {
                        Ok(Some(t)) => {
                            if t.numel() != 1 {
                                return Err(at.bad(format!("{what} must be a scalar")));
                            }
                            dtype = t.dtype();
                            bounds[i] =
                                AttrValue::Float(t.to_f64_vec().first().copied().unwrap_or(0.0));
                        }
                        Ok(None) => return Err(at.bad(format!("input {i} ({what}) is required"))),
                        // A bound computed from shapes (`arange(seq)`).
                        Err(e) => match self.shape_arg(at, i, what)?.as_deref() {
                            Some([b]) => bounds[i] = AttrValue::sym_int(b.clone()),
                            _ => return Err(e),
                        },
                    }
                }
                let [start, end, step] = bounds;
                let float = |v: AttrValue| match v {
                    AttrValue::Int(n) => AttrValue::Float(n as f64),
                    v => v,
                };
                let attrs = [
                    ("start", float(start)),
                    ("end", float(end)),
                    ("step", float(step)),
                    ("dtype", AttrValue::DType(dtype)),
                ];
                Ok(smallvec![self.op1(at, "arange", &[], &attrs)?])
            }
            "Attention" => self.attention(at),
            _ => Err(OnnxError::UnknownOp {
                op_type: op_type.to_string(),
                domain: at.domain.to_string(),
                node: at.name.to_string(),
            }),
        }
    }

    /// Maps a node through its table row: the attributes, held values, inputs and
    /// outputs it reads are checked, each argument is read where the row puts it at
    /// this opset, and the vocabulary op is added (a chain of it for a folded variadic
    /// op). The row's quirk is the one hand-written step.
    fn map_row(&mut self, at: &At<'m, '_>, row: &'static OpMap) -> Result<Outs, OnnxError> {
        let def: &'static OpDef = row.op;
        let legacy = row.quirk == Quirk::LegacyBroadcast && self.opset < 7;
        let opset = self.opset;
        at.only_attrs_of(
            |name| row_attrs(row, opset, legacy).any(|k| k == name),
            || row_attrs(row, opset, legacy).collect(),
        )?;
        for h in row.held {
            at.held(h)?;
        }
        at.only_outputs(1)?;
        let max_inputs = row
            .args
            .iter()
            .filter_map(|a| a.place.input_at(self.opset))
            .fold(row.operands.1, |m, i| m.max(i + 1));
        at.inputs_between(row.operands.0, max_inputs)?;
        let count = at.input.len().min(row.operands.1);
        let mut operands: SmallVec<[Value; 4]> = SmallVec::with_capacity(count);
        for i in 0..count {
            if i < row.operands.0 {
                operands.push(self.req(at, i)?);
            } else if let Some(v) = self.input(at, i)? {
                operands.push(v);
            }
        }
        let mut attrs: SmallVec<[(&str, AttrValue); 4]> = SmallVec::with_capacity(row.args.len());
        for a in row.args {
            attrs.push((a.ours, self.read_arg(at, def, a, &operands)?));
        }
        match row.quirk {
            Quirk::LegacyBroadcast if legacy => self.legacy_broadcast(at, &mut operands)?,
            Quirk::ReduceNoop => {
                let dims = attrs.iter().find(|(n, _)| *n == "dims");
                let empty = matches!(dims, Some((_, AttrValue::Ints(d))) if d.is_empty());
                if empty && at.int("noop_with_empty_axes", 0)? != 0 {
                    return Ok(smallvec![self.req(at, 0)?]);
                }
            }
            Quirk::ConcatTotal => self.concat_total(at, &operands, &attrs)?,
            _ => {}
        }
        if row.fold {
            let mut rest = operands.into_iter();
            let mut acc = rest
                .next()
                .ok_or_else(|| at.bad("takes at least one input"))?;
            for x in rest {
                let values = normalize_attrs(def, &attrs).map_err(|e| graph_error(at, e))?;
                acc = self
                    .add(at, def, &[acc, x], values)?
                    .first()
                    .copied()
                    .ok_or_else(|| at.err(format!("`{}` made no output", def.name)))?;
            }
            return Ok(smallvec![acc]);
        }
        self.op_taking(at, def, &operands, &mut attrs)
    }

    /// One argument of a table row, as the vocabulary attribute: read from the
    /// attribute or constant input the row names at this opset (ONNX's default when
    /// absent), its kind, range and choices checked.
    fn read_arg(
        &mut self,
        at: &At<'m, '_>,
        def: &OpDef,
        a: &Arg,
        operands: &[Value],
    ) -> Result<AttrValue, OnnxError> {
        let rank = |imp: &Self| -> Result<usize, OnnxError> {
            let x = operands
                .first()
                .ok_or_else(|| at.bad(format!("`{}` needs an input", a.onnx)))?;
            Ok(imp.meta(*x)?.rank())
        };
        let kind = def
            .attrs
            .iter()
            .find(|s| s.name == a.ours)
            .map(|s| s.kind)
            .ok_or_else(|| at.err(format!("`{}` has no attribute `{}`", def.name, a.ours)))?;
        let input = a.place.input_at(self.opset);
        // An int input computed from shapes (`Trilu`'s `k` of a cache's length) is a
        // symbolic attribute.
        let symbolic = match (input, a.kind) {
            (Some(i), OnnxKind::Int | OnnxKind::Ints) => match self.const_ints(at, i, a.onnx) {
                Ok(_) => None,
                Err(e) => match self.shape_arg(at, i, a.onnx) {
                    Ok(Some(v)) => Some(v),
                    _ => return Err(e),
                },
            },
            _ => None,
        };
        let given = match (input, a.kind) {
            _ if symbolic.is_some() => match (symbolic, a.kind) {
                (Some(v), OnnxKind::Int) if v.len() == 1 => {
                    Some(AttrValue::sym_int(v.into_iter().next().unwrap_or_default()))
                }
                (Some(v), OnnxKind::Ints) => Some(AttrValue::sym_ints(v)),
                _ => return Err(at.err(format!("{} input must hold one value", a.onnx))),
            },
            (Some(i), OnnxKind::Int) => match self.const_ints(at, i, a.onnx)? {
                None => None,
                Some(v) if v.len() == 1 => Some(AttrValue::Int(v[0])),
                Some(v) => {
                    return Err(at.bad(format!(
                        "{} input must hold one value, found {}",
                        a.onnx,
                        v.len()
                    )))
                }
            },
            (Some(i), OnnxKind::Ints) => self.const_ints(at, i, a.onnx)?.map(AttrValue::Ints),
            (Some(i), _) => {
                return Err(at.err(format!("input {i} ({}) is not an int input", a.onnx)))
            }
            (None, _) if at.attr(a.onnx).is_none() => None,
            (None, OnnxKind::Int) => Some(AttrValue::Int(at.int(a.onnx, 0)?)),
            (None, OnnxKind::Ints) => {
                let v = at.ints(a.onnx)?.unwrap_or_default();
                limit_ints(at, a.onnx, &v)?;
                Some(AttrValue::Ints(v))
            }
            (None, OnnxKind::Float) => Some(AttrValue::Float(f64::from(at.float(a.onnx, 0.0)?))),
            (None, OnnxKind::Str) => Some(AttrValue::Str(at.string(a.onnx, "")?)),
        };
        let value = match (given, a.absent) {
            (Some(v), _) => v,
            (None, Absent::Required) => {
                return Err(at.bad(match input {
                    Some(i) => format!("input {i} ({}) is required", a.onnx),
                    None => format!("attribute `{}` is required", a.onnx),
                }))
            }
            (None, Absent::Int(v)) => AttrValue::Int(v),
            (None, Absent::Ints(v)) => AttrValue::Ints(v.to_vec()),
            (None, Absent::Float(v)) => AttrValue::Float(f64::from(v)),
            (None, Absent::Str(v)) => AttrValue::Str(v.to_string()),
            (None, Absent::Reversed) => AttrValue::Ints((0..rank(self)? as i64).rev().collect()),
        };
        if let Some((lo, hi)) = a.range {
            let out = match &value {
                AttrValue::Int(v) => !(lo..=hi).contains(v),
                AttrValue::Ints(v) => v.iter().any(|x| !(lo..=hi).contains(x)),
                _ => false,
            };
            let below = match &value {
                AttrValue::Int(v) => *v < lo,
                AttrValue::Ints(v) => v.iter().any(|x| *x < lo),
                _ => false,
            };
            // Below the range is against the spec (a group under 1, a negative stride);
            // above it, graphrw's own limit.
            if out {
                let e = format!("{} {value} is out of range ({lo} to {hi})", a.onnx);
                return Err(if below { at.bad(e) } else { at.err(e) });
            }
        }
        if let AttrValue::Str(v) = &value {
            if !a.choices.is_empty() && !a.choices.contains(&v.as_str()) {
                return Err(at.err(format!(
                    "{} `{v}` is not supported (graphrw reads {})",
                    a.onnx,
                    a.choices.join(", ")
                )));
            }
        }
        let value = match (value, a.shape) {
            (AttrValue::Ints(p), table::Shape::SymmetricPads) => match p.as_slice() {
                &[b0, b1, e0, e1] if b0 == e0 && b1 == e1 => AttrValue::Ints(vec![b0, b1]),
                _ => {
                    return Err(at.err(format!(
                        "{} {p:?}: only symmetric 2-D padding is supported",
                        a.onnx
                    )))
                }
            },
            (AttrValue::Ints(axes), table::Shape::SortedAxes) => {
                let r = rank(self)?;
                let mut dims = Vec::with_capacity(axes.len());
                for &x in &axes {
                    let d = normalize_axis(x, r)
                        .ok_or_else(|| at.bad(format!("axis {x} is out of range for rank {r}")))?;
                    dims.push(d as i64);
                }
                dims.sort_unstable();
                dims.dedup();
                AttrValue::Ints(dims)
            }
            (v, _) => v,
        };
        Ok(match (value, kind) {
            (AttrValue::Int(v), AttrKind::Bool) => AttrValue::Bool(v != 0),
            (AttrValue::Int(v), AttrKind::DType) => {
                let code = i32::try_from(v).unwrap_or(-1);
                AttrValue::DType(dtype_from_onnx(code).map_err(|m| {
                    // An element type ONNX does not define, or one graphrw does not have.
                    match super::malformed::elem_type_defined(code) {
                        false => at.bad(format!("`{}` {v} is not an ONNX element type", a.onnx)),
                        true => at.err(format!("`{}`: {m}", a.onnx)),
                    }
                })?)
            }
            (v, _) => v,
        })
    }

    /// Before opset 7, with `broadcast` 1, the second operand's dims line up with the
    /// first's from `axis` (default: the trailing dims): numpy broadcasting after
    /// trailing 1s are added to it.
    fn legacy_broadcast(
        &mut self,
        at: &At<'m, '_>,
        operands: &mut [Value],
    ) -> Result<(), OnnxError> {
        let [a, b] = operands else {
            return Err(at.err("legacy broadcasting takes two inputs"));
        };
        if at.int("broadcast", 0)? == 0 {
            return Ok(());
        }
        let (ra, rb) = (self.meta(*a)?.rank() as i64, self.meta(*b)?.rank() as i64);
        let axis = at.int("axis", ra - rb)?;
        let axis = if axis < 0 { axis + ra } else { axis };
        if axis < 0 || axis + rb > ra {
            return Err(at.bad(format!(
                "broadcast axis {axis} does not fit ranks {ra} and {rb}"
            )));
        }
        for _ in 0..ra - axis - rb {
            *b = self.op1(at, "unsqueeze", &[*b], &[("dim", int_attr(-1))])?;
        }
        Ok(())
    }

    /// Refuses a `Concat` whose known dims along the axis add up past graphrw's limit.
    fn concat_total(
        &self,
        at: &At<'m, '_>,
        xs: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<(), OnnxError> {
        let Some((_, AttrValue::Int(axis))) = attrs.iter().find(|(n, _)| *n == "dim") else {
            return Ok(());
        };
        let mut total: u64 = 0;
        for &x in xs {
            let m = self.meta(x)?;
            if let Some(d) = normalize_axis(*axis, m.rank()).and_then(|d| m.shape.dims()[d].known())
            {
                total = total.saturating_add(d);
            }
        }
        if total > MAX_DIM {
            return Err(at.err("the concatenated dim would be larger than graphrw accepts (2^48)"));
        }
        Ok(())
    }

    fn constant_attr(&self, at: &At) -> Result<Tensor, OnnxError> {
        let Some(a) = at.attribute.first() else {
            return Err(at.bad("has no value attribute"));
        };
        if at.attribute.len() != 1 {
            return Err(at.bad("must have exactly one value attribute"));
        }
        let name = format!("{}/{}", at.name, a.name);
        let bad = |e: graphrw_kernels::KernelError| OnnxError::tensor(&name, e.to_string());
        match a.name.as_str() {
            "value" => {
                let t =
                    a.t.as_ref()
                        .ok_or_else(|| at.bad("attribute `value` holds no tensor"))?;
                tensor_from_proto(t, &name, self.dir)
            }
            "value_float" => Ok(Tensor::scalar(a.f)),
            "value_int" => Ok(Tensor::scalar(a.i)),
            "value_floats" => Tensor::from_vec(vec![a.floats.len()], a.floats.clone()).map_err(bad),
            "value_ints" => Tensor::from_vec(vec![a.ints.len()], a.ints.clone()).map_err(bad),
            other => Err(at.err(format!(
                "attribute `{other}` is not supported (string and sparse constants are not)"
            ))),
        }
    }

    fn gemm(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        if self.opset < 7 {
            // `broadcast` 1 broadcasts C one way: numpy broadcasting does the same.
            at.only_attrs(&["alpha", "beta", "transA", "transB", "broadcast"])?;
        } else {
            at.only_attrs(&["alpha", "beta", "transA", "transB"])?;
        }
        at.inputs_between(2, 3)?;
        let alpha = at.float("alpha", 1.0)? as f64;
        let beta = at.float("beta", 1.0)? as f64;
        let mut a = self.req(at, 0)?;
        let mut b = self.req(at, 1)?;
        let c = self.input(at, 2)?;
        let swap = [("dim0", int_attr(0)), ("dim1", int_attr(1))];
        if at.int("transA", 0)? != 0 {
            a = self.op1(at, "transpose", &[a], &swap)?;
        }
        if at.int("transB", 0)? != 0 {
            b = self.op1(at, "transpose", &[b], &swap)?;
        }
        for (v, which) in [(a, "A"), (b, "B")] {
            let r = self.meta(v)?.rank();
            if r != 2 {
                return Err(at.bad(format!("{which} must be 2-D, found rank {r}")));
            }
        }
        let mut y = self.op1(at, "matmul", &[a, b], &[])?;
        let dtype = self.meta(y)?.dtype;
        if alpha != 1.0 {
            let s = self.scalar(dtype, alpha);
            y = self.op1(at, "mul", &[y, s], &[])?;
        }
        if let Some(mut c) = c {
            if beta != 1.0 {
                let s = self.scalar(dtype, beta);
                c = self.op1(at, "mul", &[c, s], &[])?;
            }
            y = self.op1(at, "add", &[y, c], &[])?;
        }
        Ok(smallvec![y])
    }

    fn reshape(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["allowzero"])?;
        at.inputs_between(2, 2)?;
        let allowzero = at.int("allowzero", 0)? != 0;
        let x = self.req(at, 0)?;
        let mut shape = self
            .shape_arg(at, 1, "shape")?
            .ok_or_else(|| at.bad("input 1 (shape) is required"))?;
        limit_sym(at, "shape", &shape)?;
        if !allowzero {
            let meta = self.meta(x)?;
            for (i, d) in shape.iter_mut().enumerate() {
                if d.as_const() == Some(0) {
                    *d = match meta.shape.dims().get(i) {
                        Some(dim) => dim.to_expr(),
                        None => return Err(at.bad(format!("shape entry {i} is 0 (copy the input's dim), but the input {} has no dim {i}", meta.shape))),
                    };
                }
            }
        }
        Ok(smallvec![self.op1(
            at,
            "reshape",
            &[x],
            &[("shape", AttrValue::sym_ints(shape))],
        )?])
    }

    fn slice(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let x = self.req(at, 0)?;
        let (starts, ends, axes, steps) = if self.opset < 10 {
            // Slice-1: starts, ends and axes are attributes, no steps.
            at.only_attrs(&["starts", "ends", "axes"])?;
            at.inputs_between(1, 1)?;
            let starts = at
                .ints("starts")?
                .ok_or_else(|| at.bad("attribute `starts` is required"))?;
            let ends = at
                .ints("ends")?
                .ok_or_else(|| at.bad("attribute `ends` is required"))?;
            let n = starts.len();
            let axes = at.ints("axes")?.unwrap_or_else(|| (0..n as i64).collect());
            limit_ints(at, "axes", &axes)?;
            let sym = |v: Vec<i64>| v.into_iter().map(SymExpr::int).collect::<Vec<_>>();
            (sym(starts), sym(ends), axes, vec![1; n])
        } else {
            at.only_attrs(&[])?;
            at.inputs_between(3, 5)?;
            let starts = self
                .shape_arg(at, 1, "starts")?
                .ok_or_else(|| at.bad("input 1 (starts) is required"))?;
            let ends = self
                .shape_arg(at, 2, "ends")?
                .ok_or_else(|| at.bad("input 2 (ends) is required"))?;
            let n = starts.len();
            let axes = self
                .const_ints(at, 3, "axes")?
                .unwrap_or_else(|| (0..n as i64).collect());
            let steps = self
                .const_ints(at, 4, "steps")?
                .unwrap_or_else(|| vec![1; n]);
            (starts, ends, axes, steps)
        };
        let n = starts.len();
        if ends.len() != n || axes.len() != n || steps.len() != n {
            return Err(at.bad(format!(
                "starts, ends, axes and steps must have one length, found {}, {}, {}, {}",
                n,
                ends.len(),
                axes.len(),
                steps.len()
            )));
        }
        let mut v = x;
        let rank = self.meta(x)?.rank();
        let mut seen = HashSet::new();
        for k in 0..n {
            let axis = normalize_axis(axes[k], rank).ok_or_else(|| {
                at.bad(format!("axis {} is out of range for rank {rank}", axes[k]))
            })?;
            if !seen.insert(axis) {
                return Err(at.bad(format!("axes {axes:?} repeat axis {axis}")));
            }
            if steps[k] == 0 {
                return Err(at.bad(format!("step 0 on axis {axis} (steps must not be 0)")));
            }
            if steps[k] < 1 {
                return Err(at.err(format!(
                    "step {} is not supported (only positive steps)",
                    steps[k]
                )));
            }
            let (start, end) = match (starts[k].as_const(), ends[k].as_const()) {
                (Some(s), Some(e)) => (s, e),
                _ => {
                    // A bound known only at run time (`x[:, :seq]`): taken as in range
                    // (`slice`'s inference says so; the run checks it).
                    let sym = |e: &SymExpr| match e.as_const() {
                        Some(c) => int_attr(c),
                        None => AttrValue::Sym(e.clone()),
                    };
                    let attrs = [
                        ("dim", int_attr(axis as i64)),
                        ("start", sym(&starts[k])),
                        ("end", sym(&ends[k])),
                        ("step", int_attr(steps[k])),
                    ];
                    v = self.op1(at, "slice", &[v], &attrs)?;
                    continue;
                }
            };
            let (mut start, mut end) = (start, end);
            match self.meta(v)?.shape.dims()[axis] {
                Dim::Known(len) => {
                    let len = len as i64;
                    let clamp = |p: i64| if p < 0 { (p + len).max(0) } else { p.min(len) };
                    start = clamp(start);
                    end = clamp(end).max(start);
                }
                Dim::Sym(_) | Dim::Expr(_) => {
                    let lim = MAX_DIM as i64;
                    start = start.clamp(-lim, lim);
                    end = if end >= lim { i64::MAX } else { end.max(-lim) };
                }
            }
            let attrs = [
                ("dim", int_attr(axis as i64)),
                ("start", int_attr(start)),
                ("end", int_attr(end)),
                ("step", int_attr(steps[k])),
            ];
            v = self.op1(at, "slice", &[v], &attrs)?;
        }
        Ok(smallvec![v])
    }

    /// The `axes` of Unsqueeze: an attribute before opset 13, input 1 since.
    fn axes(&mut self, at: &At<'m, '_>) -> Result<Option<Vec<i64>>, OnnxError> {
        if self.opset < 13 {
            at.only_attrs(&["axes"])?;
            at.inputs_between(1, 1)?;
            let axes = at.ints("axes")?;
            if let Some(a) = &axes {
                limit_ints(at, "axes", a)?;
            }
            return Ok(axes);
        }
        at.only_attrs(&[])?;
        self.const_ints(at, 1, "axes")
    }

    /// Softmax and LogSoftmax before opset 13: the input is read as 2-D, dims before
    /// `axis` (default 1) against the rest; the same as the new op on the last axis, a
    /// reshape around it otherwise (known dims only).
    fn softmax_2d(&mut self, at: &At<'m, '_>, op: &str, x: Value) -> Result<Outs, OnnxError> {
        let shape = self.meta(x)?.shape;
        let r = shape.rank() as i64;
        let axis = at.int("axis", 1)?;
        let a = if axis < 0 { axis + r } else { axis };
        if !(0..r.max(1)).contains(&a) {
            return Err(at.bad(format!("axis {axis} is out of range for {shape}")));
        }
        if a == r - 1 || r == 0 {
            return Ok(smallvec![self.op1(
                at,
                op,
                &[x],
                &[("dim", int_attr(-1))]
            )?]);
        }
        let Some(dims) = shape.as_known() else {
            return Err(at.err(format!(
                "opset {} {} over the dims from {axis} of {shape} needs known dims",
                self.opset, at.op_type
            )));
        };
        let (head, tail) = dims.split_at(a as usize);
        let flat = [
            head.iter().product::<u64>() as i64,
            tail.iter().product::<u64>() as i64,
        ];
        let y = self.op1(
            at,
            "reshape",
            &[x],
            &[("shape", AttrValue::Ints(flat.to_vec()))],
        )?;
        let y = self.op1(at, op, &[y], &[("dim", int_attr(-1))])?;
        let back: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        Ok(smallvec![self.op1(
            at,
            "reshape",
            &[y],
            &[("shape", AttrValue::Ints(back))],
        )?])
    }

    /// Activations written with vocabulary ops: `PRelu` and `LeakyRelu` as
    /// `relu(x) - slope * relu(-x)`, `Elu`/`Selu` as `where(x > 0, x, alpha * (exp(x) - 1))`
    /// (times `gamma`), `Softplus` as `log(exp(x) + 1)`. Before opset 7 a PRelu slope of
    /// one value per channel applies along dim 1.
    fn activation(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let op_type = at.op_type;
        match op_type {
            "PRelu" | "Softplus" => at.only_attrs(&[])?,
            "LeakyRelu" | "Elu" => at.only_attrs(&["alpha"])?,
            _ => at.only_attrs(&["alpha", "gamma"])?,
        }
        at.inputs_between(
            if op_type == "PRelu" { 2 } else { 1 },
            if op_type == "PRelu" { 2 } else { 1 },
        )?;
        let x = self.req(at, 0)?;
        let m = self.meta(x)?;
        if !m.dtype.is_float() {
            return Err(at.err(format!("{} input", m.dtype)));
        }
        let c = |imp: &mut Self, v: f64| imp.scalar(m.dtype, v);
        match op_type {
            "PRelu" | "LeakyRelu" => {
                let mut slope = match op_type {
                    "PRelu" => self.req(at, 1)?,
                    _ => {
                        let alpha = f64::from(at.float("alpha", 0.01)?);
                        c(self, alpha)
                    }
                };
                let sm = self.meta(slope)?;
                let per_channel = sm.rank() == 1
                    && m.rank() > 2
                    && sm.shape.dims()[0] == m.shape.dims()[1]
                    && !sm.shape.dims()[0].is_one();
                if op_type == "PRelu" && self.opset < 7 && per_channel {
                    for _ in 2..m.rank() {
                        slope = self.op1(at, "unsqueeze", &[slope], &[("dim", int_attr(-1))])?;
                    }
                }
                let pos = self.op1(at, "relu", &[x], &[])?;
                let negx = self.op1(at, "neg", &[x], &[])?;
                let neg = self.op1(at, "relu", &[negx], &[])?;
                let scaled = self.op1(at, "mul", &[neg, slope], &[])?;
                Ok(smallvec![self.op1(at, "sub", &[pos, scaled], &[])?])
            }
            "Softplus" => {
                let e = self.op1(at, "exp", &[x], &[])?;
                let one = c(self, 1.0);
                let s = self.op1(at, "add", &[e, one], &[])?;
                Ok(smallvec![self.op1(at, "log", &[s], &[])?])
            }
            _ => {
                let selu = op_type == "Selu";
                let alpha = f64::from(at.float("alpha", if selu { 1.673_263_2 } else { 1.0 })?);
                let gamma = f64::from(at.float("gamma", 1.050_701)?);
                let zero = c(self, 0.0);
                let pos = self.op1(at, "gt", &[x, zero], &[])?;
                let e = self.op1(at, "exp", &[x], &[])?;
                let one = c(self, 1.0);
                let em1 = self.op1(at, "sub", &[e, one], &[])?;
                let a = c(self, alpha);
                let neg = self.op1(at, "mul", &[em1, a], &[])?;
                let mut y = self.op1(at, "where", &[pos, x, neg], &[])?;
                if selu {
                    let g = c(self, gamma);
                    y = self.op1(at, "mul", &[y, g], &[])?;
                }
                Ok(smallvec![y])
            }
        }
    }

    /// Einsum of two operands as a batched contraction: one letter only in the first
    /// (rows), one only in the second (columns), one contracted, the others batch
    /// letters in both and the output (`bhqd,bhkd->bhqk`, `...id,...jd->...ij`); a
    /// `permute` of each operand, a `matmul` and a `permute` of the result. Other
    /// equations stay opaque.
    fn einsum(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["equation"])?;
        at.inputs_between(1, usize::MAX)?;
        let eq: String = at
            .string("equation", "")?
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        super::malformed::einsum_equation(&eq, at.input.len()).map_err(|m| at.bad(m))?;
        if at.input.len() != 2 {
            return Err(at.err("only two-operand equations are lowered"));
        }
        let (lhs, out) = eq
            .split_once("->")
            .ok_or_else(|| at.err("an equation without `->` is not lowered"))?;
        let (ta, tb) = lhs
            .split_once(',')
            .ok_or_else(|| at.err("only two-operand equations are lowered"))?;
        let (a, b) = (self.req(at, 0)?, self.req(at, 1)?);
        let (ra, rb) = (self.meta(a)?.rank(), self.meta(b)?.rank());
        // `...` stands for the leading dims: spelled with digits (never einsum letters).
        let expand = |t: &str, rank: Option<usize>, n: usize| -> Result<Vec<char>, OnnxError> {
            let Some((pre, post)) = t.split_once("...") else {
                return Ok(t.chars().collect());
            };
            let named = pre.chars().count() + post.chars().count();
            let k = match rank {
                Some(r) => r
                    .checked_sub(named)
                    .ok_or_else(|| at.bad("`...` over too few dims"))?,
                None => n,
            };
            let digits = (0..k).map(|i| char::from(b'0' + (i % 10) as u8));
            Ok(pre.chars().chain(digits).chain(post.chars()).collect())
        };
        let ea = expand(ta, Some(ra), 0)?;
        let eb = expand(tb, Some(rb), 0)?;
        let n_ell = ea.iter().filter(|c| c.is_ascii_digit()).count();
        if eb.iter().filter(|c| c.is_ascii_digit()).count() != n_ell || n_ell > 10 {
            return Err(at.err("`...` must cover as many dims in both operands"));
        }
        let eo = expand(out, None, n_ell)?;
        if ea.len() != ra || eb.len() != rb {
            return Err(at.bad(format!(
                "terms `{ta}`, `{tb}` do not fit ranks {ra} and {rb}"
            )));
        }
        let unique = |t: &[char]| t.iter().collect::<HashSet<_>>().len() == t.len();
        if !unique(&ea) || !unique(&eb) || !unique(&eo) {
            return Err(at.err("repeated letters in a term (diagonals) are not lowered"));
        }
        let (ia, ib, io) = (
            |c: &char| ea.contains(c),
            |c: &char| eb.contains(c),
            |c: &char| eo.contains(c),
        );
        let batch: Vec<char> = eo.iter().copied().filter(|c| ia(c) && ib(c)).collect();
        let rows: Vec<char> = ea.iter().copied().filter(|c| !ib(c) && io(c)).collect();
        let cols: Vec<char> = eb.iter().copied().filter(|c| !ia(c) && io(c)).collect();
        let sum: Vec<char> = ea.iter().copied().filter(|c| ib(c) && !io(c)).collect();
        let covered = batch.len() + rows.len() + cols.len() == eo.len()
            && batch.len() + rows.len() + sum.len() == ea.len()
            && batch.len() + cols.len() + sum.len() == eb.len();
        if !covered || rows.len() != 1 || cols.len() != 1 || sum.len() != 1 {
            return Err(at.err(format!("equation `{eq}` is not a batched matrix product")));
        }
        let pos = |t: &[char], c: char| t.iter().position(|&x| x == c).unwrap_or(0) as i64;
        let permute = |imp: &mut Self, v: Value, from: &[char], to: &[char]| {
            let perm: Vec<i64> = to.iter().map(|&c| pos(from, c)).collect();
            if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                return Ok(v);
            }
            imp.op1(at, "permute", &[v], &[("dims", AttrValue::Ints(perm))])
        };
        let la: Vec<char> = batch.iter().chain(&rows).chain(&sum).copied().collect();
        let lb: Vec<char> = batch.iter().chain(&sum).chain(&cols).copied().collect();
        let ly: Vec<char> = batch.iter().chain(&rows).chain(&cols).copied().collect();
        let pa = permute(self, a, &ea, &la)?;
        let pb = permute(self, b, &eb, &lb)?;
        let y = self.op1(at, "matmul", &[pa, pb], &[])?;
        Ok(smallvec![permute(self, y, &ly, &eo)?])
    }

    /// Clip: `min`/`max` attributes before opset 11, optional constant inputs since; a
    /// `maximum` and/or `minimum` with scalars of the input's dtype.
    fn clip(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let x = self.req(at, 0)?;
        let dtype = self.meta(x)?.dtype;
        let (lo, hi) = if self.opset < 11 {
            at.only_attrs(&["min", "max"])?;
            at.inputs_between(1, 1)?;
            let lo = at.attr("min").map(|_| at.float("min", 0.0)).transpose()?;
            let hi = at.attr("max").map(|_| at.float("max", 0.0)).transpose()?;
            (lo.map(f64::from), hi.map(f64::from))
        } else {
            at.only_attrs(&[])?;
            at.inputs_between(1, 3)?;
            let mut bound = |i: usize, what: &str| -> Result<Option<f64>, OnnxError> {
                match self.const_input(at, i, what)? {
                    None => Ok(None),
                    Some(t) if t.numel() == 1 => Ok(t.to_f64_vec().first().copied()),
                    Some(_) => Err(at.bad(format!("{what} must be a scalar"))),
                }
            };
            (bound(1, "min")?, bound(2, "max")?)
        };
        let mut y = x;
        if let Some(lo) = lo {
            let s = self.scalar(dtype, lo);
            y = self.op1(at, "maximum", &[y, s], &[])?;
        }
        if let Some(hi) = hi {
            let s = self.scalar(dtype, hi);
            y = self.op1(at, "minimum", &[y, s], &[])?;
        }
        Ok(smallvec![y])
    }

    /// BatchNormalization in inference mode: `(x - mean) * scale / sqrt(var + eps) + b`
    /// over dim 1, the per-channel parameters viewed as `[C, 1, ..]`. Training mode
    /// (more outputs, `is_test` 0 before 7, `training_mode` 1) and `spatial` 0 stay opaque.
    fn batch_norm(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[
            "epsilon",
            "momentum",
            "spatial",
            "is_test",
            "training_mode",
            "consumed_inputs",
        ])?;
        at.only_outputs(1)?;
        at.inputs_between(5, 5)?;
        if at.int("spatial", 1)? != 1 {
            return Err(at.err("spatial 0 is not supported"));
        }
        if self.opset < 7 && at.int("is_test", 0)? == 0 {
            return Err(at.err("is_test is 0 (training mode)"));
        }
        if at.int("training_mode", 0)? != 0 {
            return Err(at.err("training_mode is 1"));
        }
        let eps = f64::from(at.float("epsilon", 1e-5)?);
        let x = self.req(at, 0)?;
        let m = self.meta(x)?;
        if m.rank() < 2 {
            return Err(at.bad(format!("the input {} has no channel dim", m.shape)));
        }
        let mut view = vec![-1i64];
        view.resize(m.rank() - 1, 1);
        let mut p = Vec::with_capacity(4);
        for i in 1..5 {
            let v = self.req(at, i)?;
            if self.meta(v)?.dtype != m.dtype {
                return Err(at.err("parameters of another dtype than the input"));
            }
            p.push(self.op1(
                at,
                "reshape",
                &[v],
                &[("shape", AttrValue::Ints(view.clone()))],
            )?);
        }
        let e = self.scalar(m.dtype, eps);
        let var = self.op1(at, "add", &[p[3], e], &[])?;
        let sd = self.op1(at, "sqrt", &[var], &[])?;
        let gain = self.op1(at, "div", &[p[0], sd], &[])?;
        let centred = self.op1(at, "sub", &[x, p[2]], &[])?;
        let scaled = self.op1(at, "mul", &[centred, gain], &[])?;
        Ok(smallvec![self.op1(at, "add", &[scaled, p[1]], &[])?])
    }

    fn expand(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[])?;
        at.inputs_between(2, 2)?;
        let x = self.req(at, 0)?;
        let shape = self
            .shape_arg(at, 1, "shape")?
            .ok_or_else(|| at.bad("input 1 (shape) is required"))?;
        limit_sym(at, "shape", &shape)?;
        let meta = self.meta(x)?;
        let r = meta.rank();
        let out_rank = r.max(shape.len());
        let mut size = Vec::with_capacity(out_rank);
        let shown = || AttrValue::sym_ints(shape.clone());
        // ONNX broadcasts both ways: a 1 in `shape` keeps the input's dim (-1), and so
        // does an entry equal to the input's dim.
        for i in 0..out_rank {
            let s = (i + shape.len()).checked_sub(out_rank).map(|j| &shape[j]);
            let input_dim = (i + r >= out_rank).then(|| &meta.shape.dims()[i + r - out_rank]);
            size.push(match (s, input_dim) {
                (None, _) => SymExpr::int(-1),
                (Some(s), Some(_)) if s.as_const() == Some(1) => SymExpr::int(-1),
                (Some(s), Some(d)) if d.to_expr() == *s => SymExpr::int(-1),
                (Some(s), _) if s.sign() == crate::meta::Sign::Negative => {
                    return Err(at.bad(format!("shape {} has a negative size {s}", shown())))
                }
                (Some(s), _) => s.clone(),
            });
        }
        Ok(smallvec![self.op1(
            at,
            "expand",
            &[x],
            &[("size", AttrValue::sym_ints(size))],
        )?])
    }

    fn split(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let split_attr = if self.opset < 13 {
            at.only_attrs(&["axis", "split"])?;
            at.ints("split")?
        } else {
            at.only_attrs(&["axis", "num_outputs"])?;
            None
        };
        at.inputs_between(1, 2)?;
        let x = self.req(at, 0)?;
        let axis = at.int("axis", 0)?;
        let meta = self.meta(x)?;
        let d = normalize_axis(axis, meta.rank())
            .ok_or_else(|| at.bad(format!("axis {axis} is out of range for {}", meta.shape)))?;
        let outputs = at.output.len();
        let sizes =
            match split_attr.map_or_else(|| self.const_ints(at, 1, "split"), |s| Ok(Some(s)))? {
                Some(s) => s,
                None => {
                    let k = match at.attr("num_outputs") {
                        Some(_) => at.int("num_outputs", 0)?,
                        None => outputs as i64,
                    };
                    if k < 1 || k as usize != outputs {
                        return Err(at.bad(format!(
                            "num_outputs {k} does not match the {outputs} outputs"
                        )));
                    }
                    let Some(n) = meta.shape.dims()[d].known() else {
                        return Err(at.err(format!(
                        "splitting symbolic dim {} into equal parts needs a constant `split` input",
                        meta.shape.dims()[d]
                    )));
                    };
                    let (n, k) = (n as i64, k);
                    let chunk = if self.opset >= 18 {
                        (n + k - 1) / k
                    } else {
                        n / k
                    };
                    if self.opset < 18 && n % k != 0 {
                        return Err(at.bad(format!("dim {n} does not split evenly into {k} parts")));
                    }
                    let last = n - chunk * (k - 1);
                    if last < 0 || (last == 0 && n > 0) {
                        return Err(at.bad(format!("dim {n} cannot be split into {k} parts")));
                    }
                    let mut s = vec![chunk; k as usize - 1];
                    s.push(last);
                    s
                }
            };
        if sizes.len() != outputs {
            return Err(at.bad(format!(
                "split {sizes:?} has {} parts but the node has {outputs} outputs",
                sizes.len()
            )));
        }
        if let Some(bad) = sizes.iter().find(|&&s| s < 0) {
            return Err(at.bad(format!(
                "split sizes {sizes:?} include a negative size {bad}"
            )));
        }
        let total = sizes.iter().try_fold(0i64, |acc, &s| acc.checked_add(s));
        match (total, meta.shape.dims()[d].known()) {
            (Some(t), Some(n)) if t as u64 == n => {}
            (Some(_), None) => {}
            _ => {
                return Err(at.bad(format!(
                    "split sizes {sizes:?} do not add up to dim {} of {}",
                    d, meta.shape
                )))
            }
        }
        self.op(
            at,
            "split",
            &[x],
            &[
                ("split_sizes", AttrValue::Ints(sizes)),
                ("dim", int_attr(axis)),
            ],
        )
    }

    fn attention(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[
            "is_causal",
            "kv_num_heads",
            "q_num_heads",
            "qk_matmul_output_mode",
            "scale",
            "softcap",
            "softmax_precision",
        ])?;
        at.only_outputs(1)?;
        at.inputs_between(3, 6)?;
        if at.input.iter().skip(4).any(|i| !i.is_empty()) {
            return Err(at.err("past key and value inputs are not supported"));
        }
        if at.float("softcap", 0.0)? != 0.0 {
            return Err(at.err("softcap is not supported"));
        }
        if at.int("qk_matmul_output_mode", 0)? != 0 {
            return Err(at.err("qk_matmul_output_mode is not supported"));
        }
        let (q, k, v) = (self.req(at, 0)?, self.req(at, 1)?, self.req(at, 2)?);
        let (qm, km) = (self.meta(q)?, self.meta(k)?);
        if qm.rank() != 4 || km.rank() != 4 {
            return Err(at.err(format!(
                "only 4-D query and key are supported, found {} and {}",
                qm.shape, km.shape
            )));
        }
        let mut operands = vec![q, k, v];
        let mut bypassed = None;
        if let Some(mut m) = self.input(at, 3)? {
            // graphrw's exporter expands a padding mask for onnxruntime; undo that.
            let marker = format!("{}/mask_expand", at.name);
            if let Some(n) = self.graph.node(m.node) {
                if n.op_name() == "expand"
                    && n.name() == Some(marker.as_str())
                    && self.graph.use_count(m) == 0
                {
                    bypassed = Some(m.node);
                    m = n.operands()[0];
                }
            }
            operands.push(m);
        }
        let gqa = matches!((qm.shape.dims()[1].known(), km.shape.dims()[1].known()), (Some(a), Some(b)) if a != b);
        let scale = match at.attr("scale") {
            Some(_) => AttrValue::Float(at.float("scale", 1.0)? as f64),
            None => AttrValue::Null,
        };
        let attrs = [
            ("is_causal", AttrValue::Bool(at.int("is_causal", 0)? != 0)),
            ("scale", scale),
            ("enable_gqa", AttrValue::Bool(gqa)),
        ];
        let out = self.op1(at, "scaled_dot_product_attention", &operands, &attrs)?;
        // A later node may still read the expanded mask (by its name or an alias), so
        // whether it is dead is only known at the end.
        self.bypassed.extend(bypassed);
        Ok(smallvec![out])
    }

    fn finish(mut self) -> Result<Graph, OnnxError> {
        let proto = self.proto;
        // A node output named like an initialiser that no node had read yet (the plain
        // route's `node_order` refuses those up front; the fast route checks here).
        if let Some(name) = self.inits.keys().find(|&&n| self.values.contains_key(n)) {
            return Err(OnnxError::tensor(
                name,
                "a node output has this initialiser's name (ONNX values are assigned once)",
            ));
        }
        let mut outputs = Vec::with_capacity(proto.output.len());
        for o in &proto.output {
            let v = self.value(o.name.as_str(), "graph output")?;
            outputs.push((o.name.clone(), v));
        }
        self.graph
            .set_named_outputs(outputs)
            .map_err(OnnxError::verify)?;
        // Bypassed mask expands nothing else read are dead (before the constants, so
        // a constant that fed only such an expand goes too).
        for id in std::mem::take(&mut self.bypassed) {
            if self.graph.node(id).is_some() && self.graph.node_is_unused(id) {
                self.graph.remove_node(id).map_err(OnnxError::verify)?;
            }
        }
        // Constants that only fed attributes (shapes, axes) are dead.
        let unused: Vec<NodeId> = self
            .graph
            .nodes_with_op("constant")
            .filter(|&id| self.graph.node_is_unused(id))
            .collect();
        for id in unused {
            self.graph.remove_node(id).map_err(OnnxError::verify)?;
        }
        // Every node was checked as it was added (signature, inference, defined
        // operands, file order made topological), so a release build does not verify
        // the whole graph again: saving verifies it before writing. Debug builds (the
        // tests) still check the importer's work here.
        if cfg!(debug_assertions) {
            crate::verify(&self.graph).map_err(OnnxError::verify)?;
        }
        Ok(self.graph)
    }
}

/// True when graphrw models the value's declared type: a tensor of a supported dtype
/// with a shape (its dims are checked by `input_meta`).
fn modelled(vi: &ValueInfoProto) -> bool {
    vi.r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .is_some_and(|t| dtype_from_onnx(t.elem_type).is_ok() && t.shape.is_some())
}

/// Placeholder metadata for a value of a type graphrw does not model, with the
/// encoded ONNX type to write back (see [`crate::foreign`]).
fn placeholder(vi: &ValueInfoProto) -> (TensorMeta, Vec<u8>) {
    let dtype = vi
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .and_then(|t| dtype_from_onnx(t.elem_type).ok())
        .unwrap_or(DType::F32);
    let ty = vi
        .r#type
        .as_ref()
        .map(|t| t.encode_to_vec())
        .unwrap_or_default();
    (TensorMeta::new(dtype, Shape::default()), ty)
}

fn input_meta(vi: &ValueInfoProto) -> Result<TensorMeta, OnnxError> {
    let fail = |m: String| OnnxError::Input {
        name: vi.name.clone(),
        message: m,
    };
    let tt = vi
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .ok_or_else(|| {
            fail("is not a tensor (sequences, maps and optionals are not supported)".into())
        })?;
    let dtype = dtype_from_onnx(tt.elem_type).map_err(fail)?;
    let shape = tt
        .shape
        .as_ref()
        .ok_or_else(|| fail("has no shape (graphrw needs at least the rank)".into()))?;
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (i, d) in shape.dim.iter().enumerate() {
        dims.push(match &d.value {
            Some(DimensionValue::DimValue(n)) if *n < 0 => {
                return Err(fail(format!("dim {i} is negative ({n})")))
            }
            Some(DimensionValue::DimValue(n)) if *n as u64 > MAX_DIM => {
                return Err(fail(format!(
                    "dim {i} is {n}, larger than graphrw accepts (2^48)"
                )))
            }
            Some(DimensionValue::DimValue(n)) => Dim::Known(*n as u64),
            Some(DimensionValue::DimParam(p)) if !p.is_empty() => Dim::sym(p),
            _ => Dim::sym(&format!("{}_dim{i}", vi.name)),
        });
    }
    Ok(TensorMeta::new(dtype, Shape::from(dims)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn model(attribute: Vec<AttributeProto>) -> ModelProto {
        let node = |op: &str, input: &str, output: &str| NodeProto {
            input: vec![input.into()],
            output: vec![output.into()],
            op_type: op.into(),
            attribute: attribute.clone(),
            ..Default::default()
        };
        ModelProto {
            ir_version: 8,
            producer_name: "test".into(),
            graph: Some(GraphProto {
                node: vec![node("Relu", "x", "y"), node("Neg", "y", "z")],
                name: "g".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn int_attr(name: &str) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: crate::onnx::proto::attribute_type::INT,
            i: 3,
            ..Default::default()
        }
    }

    #[test]
    fn node_by_node_decoding_gives_the_plain_decoders_model_with_tight_lists() {
        let bytes = model(vec![int_attr("a")]).encode_to_vec();
        let fast = decode_by_node(&bytes).expect("a plain model takes the node-by-node path");
        assert_eq!(
            Some(&fast),
            ModelProto::decode(bytes.as_slice()).ok().as_ref()
        );
        let nodes = &fast.graph.as_ref().expect("graph").node;
        assert_eq!(nodes.capacity(), 2);
        assert!(nodes.iter().all(|n| n.attribute.capacity() == 1));
    }

    /// The program a model file loads as by the fast route (which must take it) and by
    /// the plain route (prost's decoder and `from_model`).
    fn both_routes(path: &Path) -> (String, String) {
        let dir = path.parent().expect("folder");
        let file = MappedFile::open_model(path).expect("map");
        let fast = load_fast(file.as_bytes(), Some(dir), Some(&file))
            .unwrap_or_else(|| panic!("{}: the fast route refused it", path.display()));
        // Decoded on a second thread in batches of 3 nodes: the same graph.
        let threaded = load_fast_with(file.as_bytes(), Some(dir), Some(&file), 0, 3)
            .unwrap_or_else(|| panic!("{}: the threaded fast route refused it", path.display()));
        assert_eq!(fast.to_string(), threaded.to_string(), "{}", path.display());
        let model = ModelProto::decode(file.as_bytes()).expect("prost decodes it");
        let plain = from_model(&model, Some(dir)).expect("the plain route loads it");
        (fast.to_string(), plain.to_string())
    }

    #[test]
    fn corpus_models_load_the_same_by_both_routes() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
        let mut models: Vec<_> = std::fs::read_dir(&corpus)
            .expect("the corpus")
            .filter_map(Result::ok)
            .map(|e| e.path().join("model.onnx"))
            .filter(|p| p.exists())
            .collect();
        models.sort();
        assert_eq!(models.len(), 8, "{models:?}");
        for m in models {
            let (fast, plain) = both_routes(&m);
            assert_eq!(fast, plain, "{}", m.display());
        }
    }

    /// The ONNX backend test models (found through `$GRAPHRW_PYTHON` or `python3`, as
    /// by `tests/onnx_backend_suite.rs`; skipped without the `onnx` package, except
    /// under `CI=true`): every one the fast route takes loads as by the plain route,
    /// and the fast route takes all but those with subgraphs or functions.
    #[test]
    fn backend_suite_models_load_the_same_by_both_routes() {
        let python = std::env::var("GRAPHRW_PYTHON").unwrap_or_else(|_| "python3".into());
        let out = std::process::Command::new(python)
            .args(["-c", "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data'))"])
            .output();
        let dir = out
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            .filter(|d| d.is_dir());
        let Some(dir) = dir else {
            assert!(std::env::var("CI").is_err(), "CI needs the onnx package");
            eprintln!("skipped: no onnx package");
            return;
        };
        let (mut fast_count, mut total) = (0, 0);
        for kind in std::fs::read_dir(&dir)
            .expect("suite")
            .filter_map(Result::ok)
        {
            for case in std::fs::read_dir(kind.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = case.path().join("model.onnx");
                if !path.exists() {
                    continue;
                }
                total += 1;
                let file = MappedFile::open_model(&path).expect("map");
                let model = ModelProto::decode(file.as_bytes()).expect("decode");
                let Some(fast) = load_fast(file.as_bytes(), path.parent(), Some(&file)) else {
                    continue;
                };
                fast_count += 1;
                // One node per batch, decoded on a second thread: the same graph.
                let threaded = load_fast_with(file.as_bytes(), path.parent(), Some(&file), 0, 1)
                    .expect("the threaded fast route reads what the fast route reads");
                assert_eq!(fast.to_string(), threaded.to_string(), "{}", path.display());
                let plain = from_model(&model, path.parent()).expect("plain route");
                assert_eq!(fast.to_string(), plain.to_string(), "{}", path.display());
            }
        }
        eprintln!("fast route: {fast_count} of {total} backend models");
        assert!(
            total > 0 && fast_count * 10 >= total * 9,
            "{fast_count} of {total}"
        );
    }

    /// A chain of `Relu`s from graph input `x`, node `i` reading `inputs[i]` and
    /// writing `outputs[i]`; graph output `last`, initialiser `w` (one float).
    fn chain(inputs: &[&str], outputs: &[&str], last: &str) -> Vec<u8> {
        use crate::onnx::proto::{
            data_type, Dimension, OperatorSetIdProto, TensorShapeProto, TypeProto, TypeProtoTensor,
        };
        let info = |name: &str| ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor {
                    elem_type: data_type::FLOAT,
                    shape: Some(TensorShapeProto {
                        dim: vec![Dimension {
                            value: Some(DimensionValue::DimValue(1)),
                            denotation: String::new(),
                        }],
                    }),
                }),
                ..Default::default()
            }),
            doc_string: String::new(),
        };
        let node = inputs
            .iter()
            .zip(outputs)
            .map(|(i, o)| NodeProto {
                input: vec![i.to_string()],
                output: vec![o.to_string()],
                op_type: "Relu".into(),
                ..Default::default()
            })
            .collect();
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            }],
            graph: Some(GraphProto {
                node,
                input: vec![info("x")],
                output: vec![info(last)],
                initializer: vec![TensorProto {
                    name: "w".into(),
                    dims: vec![1],
                    data_type: data_type::FLOAT,
                    float_data: vec![1.0],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// Decoding on a second thread (every batch size) reads what decoding on this one
    /// reads, and refuses what it refuses: inputs read before they are defined, outputs
    /// defined twice or over a graph input or an initialiser.
    #[test]
    fn the_threaded_fast_route_takes_and_refuses_what_the_fast_route_does() {
        let cases: [(&[&str], &[&str], &str, bool); 7] = [
            (&["x", "a", "b"], &["a", "b", "c"], "c", true),
            (&["x", "w", "a"], &["a", "b", "c"], "c", true),
            (&["a", "x", "b"], &["b", "a", "c"], "c", false),
            (&["x", "a", "x"], &["a", "b", "a"], "b", false),
            (&["x", "a", "b"], &["a", "x", "c"], "c", false),
            (&["x", "a", "b"], &["a", "w", "c"], "c", false),
            (&["x", "a", "q"], &["a", "b", "c"], "c", false),
        ];
        for (inputs, outputs, last, takes) in cases {
            let bytes = chain(inputs, outputs, last);
            let single = load_fast_with(&bytes, None, None, usize::MAX, 2).map(|g| g.to_string());
            assert_eq!(single.is_some(), takes, "{inputs:?} -> {outputs:?}");
            for batch in 1..4 {
                let threaded = load_fast_with(&bytes, None, None, 0, batch).map(|g| g.to_string());
                assert_eq!(
                    single, threaded,
                    "{inputs:?} -> {outputs:?}, batches of {batch}"
                );
            }
            // The plain route reads what the fast route reads, and says what is wrong
            // with the rest.
            let plain = load_bytes(&bytes);
            match &single {
                Some(g) => assert_eq!(&plain.expect("plain").to_string(), g),
                None if inputs[0] == "a" => assert!(plain.is_ok()),
                None => assert!(plain.is_err(), "{inputs:?} -> {outputs:?}"),
            }
        }
    }

    #[test]
    fn other_inputs_take_the_plain_decoder() {
        // A subgraph (its nesting is counted from the model down).
        let sub = AttributeProto {
            name: "body".into(),
            r#type: crate::onnx::proto::attribute_type::GRAPH,
            g: Some(Box::new(GraphProto::default())),
            ..Default::default()
        };
        assert_eq!(decode_by_node(&model(vec![sub]).encode_to_vec()), None);
        // The graph field twice (protobuf merges them).
        let mut twice = model(vec![]).encode_to_vec();
        twice.extend(model(vec![]).encode_to_vec());
        assert_eq!(decode_by_node(&twice), None);
        // A group (wire type 3), a cut varint, a length past the end.
        assert_eq!(decode_by_node(&[0x0b]), None);
        assert_eq!(decode_by_node(&[0x08, 0x80]), None);
        assert_eq!(decode_by_node(&[0x3a, 0x05, 0x00]), None);
        // No graph at all.
        assert_eq!(decode_by_node(&[0x08, 0x07]), None);
    }
}
