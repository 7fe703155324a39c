//! ONNX export: a [`Graph`] becomes a valid ONNX model again.
//!
//! Nodes are written in the printer's deterministic topological order, so that
//! `load(save(g))` prints the same program as `g`. Constants become initialisers, with
//! `raw_data` or in external data (see [`save_with`] and [`super::external`]), named
//! after the initialiser they came from when there is one; graph
//! inputs and outputs keep their names. Vocabulary ops map onto ONNX opset 18 ops
//! (`permute` to `Transpose`, `slice` to `Slice` with constant bounds, ...), through the
//! mapping table the importer reads too (`table.rs`) where one op is one op; a few ops
//! need newer opsets and raise the model's opset: `gelu` (`Gelu`, 20), `rms_norm`
//! (`RMSNormalization`, 23) and `scaled_dot_product_attention`, written as the
//! standard ONNX `Attention` op (23). The IR version stays 10 so that current
//! onnxruntime loads the model.
//!
//! onnxruntime's CPU `Attention` kernel rejects a mask without its full query dim (a
//! padding mask `(B, 1, 1, Skv)`), so such a mask is first expanded to
//! `(.., .., Sq, Skv)` by an `Expand` node named `<attention node>/mask_expand`; the
//! importer recognises that node and gives the attention its original mask back. When
//! the query length is symbolic the mask is written as it is.
//!
//! Opaque nodes are written back as they came (attributes byte for byte), with their
//! domain's opset imported. One from the default domain read at an older opset is
//! written unchanged where its op kept its meaning up to the opset written (the schema
//! table of `schemas.rs`), upgraded where only the form changed (attributes that became
//! inputs, `upgrade.rs`), and refused otherwise, naming the op and the opsets; the
//! model's opset is never below such a node's own.
//!
//! [`save`], [`save_with`] and [`to_bytes`] encode each node as it is written, straight
//! from the graph into one byte buffer (`encode.rs`), with every name the exporter gives
//! kept as a span of one string: no `NodeProto` of owned strings is built for a big
//! graph. Small int64 initialisers (reshape targets, axes, slice bounds) are encoded
//! straight to bytes the same way (`encode::InitBytes`). [`to_model`] builds the prost
//! messages from the same exporter; both give the same bytes (`tests/onnx_encode.rs`,
//! and the table round trip).
//!
//! Every writer verifies the graph first. From a few thousand nodes up the verifier's
//! checks run on a second thread while the exporter writes the nodes in the same
//! topological order a little behind it, reading only nodes that checked out
//! (`verify::verify_ordered_with`); a graph with any problem is refused with the error
//! `graphrw::verify` gives (`tests/onnx_save_verify.rs`).
//!
//! Fused ops (the generated kernels' `fused.*` ops, user ops declared `like` a
//! decomposition, the tile executor's `fused.elementwise_group`) are written as their
//! standard ONNX op where one exists (`fused.layer_norm` as `LayerNormalization`,
//! `fused.rms_norm` as `RMSNormalization`, `fused.gelu_erf`/`fused.gelu_tanh` as
//! `Gelu`), and otherwise as a call of a model-local ONNX function in domain
//! [`FUNCTION_DOMAIN`] whose body is the op's decomposition (one function per distinct
//! body), so that onnxruntime still runs the model; [`load`](super::load) inlines such
//! functions back.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use foldhash::HashMap as FastMap;
use smallvec::{smallvec, SmallVec};
use std::path::Path;

use prost::Message;

use super::encode::{Attr, InitBytes, NodeParts, NodeSink};
use super::external::{SaveOptions, Saved};
use super::proto::{
    attribute_type, AttributeProto, Dimension, DimensionValue, FunctionProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    TypeProtoTensor, ValueInfoProto,
};
use super::table::{Absent, HeldValues, OpMap, Quirk, Shape};
use super::tensor_pb::{dtype_to_onnx, tensor_to_proto};
use super::OnnxError;
use crate::builder::Builder;
use crate::graph::{Graph, NodeId, Value};
use crate::meta::{normalize_axis, DType, Dim, SymExpr, TensorMeta};
use crate::ops::{AttrValue, InferError};
#[cfg(debug_assertions)]
use crate::printer::Names;
use crate::verify::Gate;
use crate::Tensor;

mod shapes;

/// The IR version written (10: what current onnxruntime reads).
pub const IR_VERSION: i64 = 10;
/// The default-domain opset written when no op needs a newer one.
pub const BASE_OPSET: i64 = 18;
/// The opset of the standard `Attention` op.
pub const ATTENTION_OPSET: i64 = 23;
/// The domain of the model-local functions written for fused ops.
pub const FUNCTION_DOMAIN: &str = "graphrw";

/// Writes `graph` as an ONNX model file, keeping the weights' layout
/// ([`WeightLayout::Keep`](super::WeightLayout::Keep)): constants mapped from external data go to
/// `<file name>.data` next to the model, by copying their file ranges; a graph with no
/// such constants is written as one file. A model that would not fit protobuf's 2 GiB
/// limit is refused, never written corrupt. See [`save_with`] for the options.
///
/// ```no_run
/// let graph = graphrw::onnx::load("model.onnx")?;
/// graphrw::onnx::save(&graph, "out.onnx")?;
/// # Ok::<(), graphrw::onnx::OnnxError>(())
/// ```
pub fn save(graph: &Graph, path: impl AsRef<Path>) -> Result<(), OnnxError> {
    save_with(graph, path, &SaveOptions::default()).map(|_| ())
}

/// Writes `graph` as an ONNX model file with the given weight layout, and says where
/// the bytes went. See [`super::external`] for the external data layout.
///
/// ```no_run
/// use graphrw::onnx::{save_with, SaveOptions, WeightLayout};
/// let graph = graphrw::onnx::load("model.onnx")?;
/// let options = SaveOptions { layout: WeightLayout::External, ..SaveOptions::default() };
/// let saved = save_with(&graph, "out.onnx", &options)?;
/// println!("{saved}");
/// # Ok::<(), graphrw::onnx::OnnxError>(())
/// ```
pub fn save_with(
    graph: &Graph,
    path: impl AsRef<Path>,
    options: &SaveOptions,
) -> Result<Saved, OnnxError> {
    super::external::write(export(graph, true)?, path.as_ref(), options)
}

/// The ONNX model of `graph`, encoded, with every constant inline. Refused when it
/// would pass protobuf's 2 GiB limit (save such a model with external data).
pub fn to_bytes(graph: &Graph) -> Result<Vec<u8>, OnnxError> {
    let exported = export(graph, true)?;
    // Refused before any weight is read.
    super::external::check_inline_estimate(&exported, &exported.payloads)?;
    super::external::encode_model(exported)
}

/// The ONNX model of `graph`, every constant inline (`raw_data`). The graph is verified
/// first; an op with no ONNX form is an error naming the node.
///
/// [`save`] and [`to_bytes`] do not build this message: they encode the nodes
/// straight from the graph (the same bytes prost gives for this model).
pub fn to_model(graph: &Graph) -> Result<ModelProto, OnnxError> {
    let Exported {
        mut model,
        nodes,
        inits,
        payloads,
    } = export(graph, false)?;
    // Message initialisers only: the exporter encodes them only for the writers.
    debug_assert!(inits.bytes.is_empty());
    if let Some(g) = model.graph.as_mut() {
        fill_inline(&mut g.initializer, payloads);
        if let NodeSink::Protos(nodes) = nodes {
            g.node = nodes;
        }
    }
    Ok(model)
}

/// An exported model before it is written: the model without its graph's nodes, the
/// nodes, and the constants' tensors.
pub(super) struct Exported {
    /// The model; its graph's `node` list is empty (the nodes are in `nodes`), and the
    /// initialisers of `payloads` have no data yet.
    pub model: ModelProto,
    /// The graph's nodes, in order.
    pub nodes: NodeSink,
    /// Initialisers encoded already, around those of the model's graph.
    pub inits: InitBytes,
    /// The graph's constants as `(initializer index, tensor)`, for the writer to place
    /// inline or in external data without copying them first.
    pub payloads: Vec<(usize, Tensor)>,
}

/// Exports `graph`: its nodes encoded as they are written (`encoded`) or as prost
/// messages.
///
/// Node names are first given on the guess that no two graph nodes ask for the same
/// one (see [`NameSet::defer`]), checked at the end; where that does not hold, or
/// the export fails, it is done again checking each name as it comes, which gives
/// the names (and errors) the guess would have had to.
pub(super) fn export(graph: &Graph, encoded: bool) -> Result<Exported, OnnxError> {
    // The verifier orders the nodes (the order they are written in); on a big graph it
    // checks them on a second thread as they are written, a little ahead.
    crate::verify::verify_ordered_with(graph, |order, gate| {
        if let Ok(Some(exported)) = export_in(graph, encoded, order, true, gate) {
            return Ok(exported);
        }
        export_in(graph, encoded, order, false, gate)?
            .ok_or_else(|| OnnxError::Model("node names checked one by one were not unique".into()))
    })
    .map_err(OnnxError::verify)?
}

/// [`export`] in `order`, with node names checked at the end (`defer`; `None` when
/// two were the same) or one by one.
fn export_in(
    graph: &Graph,
    encoded: bool,
    order: &[NodeId],
    defer: bool,
    gate: &Gate,
) -> Result<Option<Exported>, OnnxError> {
    let mut ex = Exporter::new(graph, Vec::new());
    if defer {
        ex.node_names.defer(graph.node_count());
    } else {
        ex.node_names = NameSet::with_capacity(graph.node_count());
    }
    if encoded {
        // Room for the usual encoded node (55 bytes in a transformer export) so that
        // the buffer is not copied as it grows; pages not written are never touched.
        ex.nodes = NodeSink::Bytes {
            bytes: Vec::with_capacity(graph.node_count() * 96),
            held: Vec::new(),
        };
        ex.init_bytes = Some(InitBytes::default());
    }
    // Every node's first output is named by its index: the list sized once, so that
    // naming a graph output (a late node) does not grow it.
    let bound = order.iter().map(|id| id.index() + 1).max().unwrap_or(0);
    ex.names.first.resize(bound, None);
    ex.reserve_io()?;
    for (i, &id) in order.iter().enumerate() {
        if !gate.ready(i) {
            return Err(unverified());
        }
        ex.node(id)?;
        if ex.arena.overflow {
            return Err(super::external::too_large(ex.arena.text.len() as u64));
        }
    }
    if !gate.ready(order.len()) {
        return Err(unverified());
    }
    let payloads = std::mem::take(&mut ex.payloads);
    let inits = ex.init_bytes.take().unwrap_or_default();
    let (model, nodes, names_unique) = ex.finish()?;
    Ok(names_unique.then_some(Exported {
        model,
        nodes,
        inits,
        payloads,
    }))
}

/// The export's answer when the verifier's second thread found a problem (never
/// returned: the verifier's error is).
fn unverified() -> OnnxError {
    OnnxError::Model("the graph does not verify".into())
}

/// Fills the `raw_data` of the initialisers `payloads` name.
pub(super) fn fill_inline(inits: &mut [TensorProto], payloads: Vec<(usize, Tensor)>) {
    for (i, t) in payloads {
        if let Some(p) = inits.get_mut(i) {
            p.raw_data = t.to_raw_bytes();
        }
    }
}

/// A name the exporter gave (a value's or a node's): a span of its [`Arena`], so that
/// names are copied as two numbers, not as strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Name {
    start: u32,
    len: u32,
}

impl Name {
    /// `""`: an absent optional input.
    const EMPTY: Name = Name { start: 0, len: 0 };
}

/// Every name the exporter gave, end to end in one string.
#[derive(Default)]
struct Arena {
    text: String,
    /// Set when the text passed `u32::MAX` bytes (then names read as empty; the
    /// export is refused, such a model passes protobuf's limit anyway).
    overflow: bool,
}

impl Arena {
    fn add(&mut self, s: &str) -> Name {
        let start = self.text.len();
        match (u32::try_from(start), u32::try_from(s.len())) {
            (Ok(start), Ok(len)) if start.checked_add(len).is_some() => {
                self.text.push_str(s);
                Name { start, len }
            }
            _ => {
                self.overflow = true;
                Name::EMPTY
            }
        }
    }

    fn get(&self, n: Name) -> &str {
        let start = n.start as usize;
        self.text.get(start..start + n.len as usize).unwrap_or("")
    }

    /// Forgets `n` when it is the last name added (a node's name, written already).
    fn drop_last(&mut self, n: Name) {
        if n.len > 0 && (n.start + n.len) as usize == self.text.len() {
            self.text.truncate(n.start as usize);
        }
    }
}

/// A node's input or output names.
type Names8 = SmallVec<[Name; 8]>;

/// The name of each value named so far: first outputs in a list by node index (read
/// in the order nodes are written, so mostly in memory order), other outputs in a map.
#[derive(Default)]
struct ValueNames {
    first: Vec<Option<Name>>,
    more: FastMap<Value, Name>,
}

impl ValueNames {
    fn with_capacity(nodes: usize) -> ValueNames {
        ValueNames {
            first: Vec::with_capacity(nodes),
            more: FastMap::default(),
        }
    }

    fn get(&self, v: Value) -> Option<Name> {
        if v.output == 0 {
            self.first.get(v.node.index()).copied().flatten()
        } else {
            self.more.get(&v).copied()
        }
    }

    fn insert(&mut self, v: Value, name: Name) {
        if v.output == 0 {
            let i = v.node.index();
            if self.first.len() <= i {
                self.first.resize(i + 1, None);
            }
            self.first[i] = Some(name);
        } else {
            self.more.insert(v, name);
        }
    }
}

struct Exporter<'g> {
    graph: &'g Graph,
    /// The order nodes are written in: the printer's ([`crate::printer::Names::order`]).
    order: Vec<NodeId>,
    /// The printer's names, to check the exporter spells them alike (debug builds).
    #[cfg(debug_assertions)]
    printer: Names,
    names: ValueNames,
    /// The text of every [`Name`].
    arena: Arena,
    taken: NameSet,
    node_names: NameSet,
    nodes: NodeSink,
    inits: Vec<TensorProto>,
    /// Where small int64 initialisers are encoded straight away (the writers' fast
    /// path; `None`: they are messages in `inits`).
    init_bytes: Option<InitBytes>,
    inputs: Vec<ValueInfoProto>,
    /// Graph outputs that need an `Identity` (source value name, output name).
    identities: Vec<(Name, Name)>,
    opset: i64,
    /// The ONNX name of the node being written, and the vocabulary op.
    cur: String,
    cur_op: &'static str,
    /// Room to spell a name in before it is made unique.
    scratch: String,
    /// The next numbers of the printer's `t` and `c` names.
    printed: (u32, u32),
    /// Model-local functions written so far, callees before callers.
    functions: Vec<FunctionProto>,
    /// Function name by encoded body, so equal bodies share one function.
    function_names: HashMap<Vec<u8>, String>,
    /// Function name by the op, operand metadata and attributes of a node written as
    /// a call, so that a like node is not decomposed again.
    function_calls: HashMap<String, String>,
    /// Declared types of opaque nodes' outputs (ONNX cannot infer them).
    value_infos: Vec<ValueInfoProto>,
    /// Opset imports of the other domains opaque nodes came from.
    domains: BTreeMap<String, i64>,
    /// Default-domain opaque nodes (their key in `nodes`, source opset, graph node),
    /// upgraded or checked against the opset finally written.
    pinned: Vec<(usize, i64, NodeId)>,
    /// The graph's constants, by index into `inits`, whose `raw_data` is left empty
    /// until the writer decides where their bytes go.
    payloads: Vec<(usize, Tensor)>,
    /// Symbols and symbolic lists written as shape arithmetic so far.
    shapes: shapes::ShapeCache,
}

fn a_int(name: &str, i: i64) -> Attr<'_> {
    Attr::Int(name, i)
}

fn a_float(name: &str, f: f64) -> Attr<'_> {
    Attr::Float(name, f as f32)
}

fn a_ints(name: &str, ints: Vec<i64>) -> Attr<'_> {
    Attr::Ints(name, ints)
}

fn a_str<'a>(name: &'a str, s: impl Into<Cow<'a, str>>) -> Attr<'a> {
    Attr::Str(name, s.into())
}

fn a_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::TENSOR,
        t: Some(Box::new(t)),
        ..Default::default()
    }
}

fn value_info(name: &str, meta: &TensorMeta) -> ValueInfoProto {
    let dim = meta
        .shape
        .dims()
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Dim::Known(n) => DimensionValue::DimValue(*n as i64),
                Dim::Sym(s) => DimensionValue::DimParam(s.to_string()),
                Dim::Expr(e) => DimensionValue::DimParam(e.to_string()),
            }),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: dtype_to_onnx(meta.dtype),
                shape: Some(TensorShapeProto { dim }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

/// Names given so far, kept as 64-bit fingerprints rather than strings: a big model
/// names a million values and nodes, and a set of strings would copy and free every
/// one of them. Two names sharing a fingerprint (odds about 2^-64 per pair; the seed is
/// fixed, so the names written are the same on every run) only make the second one
/// look taken, so it gets a `_k` suffix: names stay unique whatever the fingerprints.
///
/// The printer's names (`t<n>`, `c<n>`: most value names of a big graph) are kept
/// apart, as bits by number: whatever gave a name of that spelling, it goes to the
/// bits, so the set holds the same names, and the exporter's own printed names are
/// neither spelled out nor hashed to be checked.
#[derive(Default)]
struct NameSet {
    hashed: HashSet<u64, std::hash::BuildHasherDefault<Fingerprint>>,
    /// Bit `n` of `printed[0]` is `t<n>`, of `printed[1]` `c<n>`.
    printed: [Vec<u64>; 2],
    /// Set by [`NameSet::defer`].
    deferred: Option<Deferred>,
}

/// The fingerprints of a deferred [`NameSet`]: every one taken, in order, and those
/// of the current group (one graph node's names).
#[derive(Default)]
struct Deferred {
    all: Vec<u64>,
    group: SmallVec<[u64; 8]>,
}

/// The hasher of fingerprints, which are hashes already: the value itself.
#[derive(Default)]
struct Fingerprint(u64);

impl std::hash::Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else in for completeness.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Printed names kept as bits go up to this number (a name beyond is hashed).
const PRINTED_BITS: u32 = 1 << 28;

/// `name` as a printer's name: `t<n>` (kind 0) or `c<n>` (kind 1), `n` in decimal
/// without leading zeros and below [`PRINTED_BITS`].
fn printed_number(name: &str) -> Option<(usize, u32)> {
    let b = name.as_bytes();
    let kind = match b.first()? {
        b't' => 0,
        b'c' => 1,
        _ => return None,
    };
    let digits = &b[1..];
    if digits.is_empty() || digits.len() > 9 || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    let mut n: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(d - b'0');
    }
    (n < PRINTED_BITS).then_some((kind, n))
}

impl NameSet {
    fn with_capacity(n: usize) -> NameSet {
        NameSet {
            hashed: HashSet::with_capacity_and_hasher(n, Default::default()),
            printed: Default::default(),
            deferred: None,
        }
    }

    /// From now on a name (other than a printed one) is taken when it was given in the
    /// current group ([`NameSet::group`]), and otherwise counted as fresh without a
    /// look-up in a big table (a cache miss per name on a big graph; `capacity`: the
    /// names expected); whether every
    /// name so counted was fresh is [`NameSet::deferred_unique`]'s answer. Where it is
    /// yes, every answer was the one the hashed set gives: a name counted fresh was
    /// given by nothing before it, and one taken in its group was taken.
    fn defer(&mut self, capacity: usize) {
        self.deferred = Some(Deferred {
            all: Vec::with_capacity(capacity),
            group: SmallVec::new(),
        });
    }

    /// Starts a new group of deferred names.
    fn group(&mut self) {
        if let Some(d) = &mut self.deferred {
            d.group.clear();
        }
    }

    /// False when names counted fresh by a deferred set were the same (sorts them).
    fn deferred_unique(&mut self) -> bool {
        let Some(d) = &mut self.deferred else {
            return true;
        };
        d.all.sort_unstable();
        d.all.windows(2).all(|w| w[0] != w[1])
    }

    /// Adds `name`; false when it was there already.
    fn insert(&mut self, name: impl AsRef<str>) -> bool {
        use std::hash::BuildHasher;
        let name = name.as_ref();
        if let Some((kind, n)) = printed_number(name) {
            return self.insert_printed(kind, n);
        }
        let h = foldhash::quality::FixedState::with_seed(0x9e37_79b9_7f4a_7c15).hash_one(name);
        match &mut self.deferred {
            None => self.hashed.insert(h),
            Some(d) if d.group.contains(&h) => false,
            Some(d) => {
                d.group.push(h);
                d.all.push(h);
                true
            }
        }
    }

    /// Adds the printed name of `kind` (0: `t`, 1: `c`) and number `n` (below
    /// [`PRINTED_BITS`]); false when it was there already.
    fn insert_printed(&mut self, kind: usize, n: u32) -> bool {
        let bits = &mut self.printed[kind];
        let (word, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        if bits.len() <= word {
            bits.resize((word + 1).next_power_of_two(), 0);
        }
        let fresh = bits[word] & bit == 0;
        bits[word] |= bit;
        fresh
    }
}

/// Appends the decimal digits of `n`.
fn push_decimal(s: &mut String, n: u32) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        s.push(char::from(d));
    }
}

/// `base`, or `base_1`, `base_2`, ... whichever `taken` does not have yet, added to
/// `taken` and to `arena`.
fn unique_in(taken: &mut NameSet, arena: &mut Arena, base: &str) -> Name {
    if taken.insert(base) {
        return arena.add(base);
    }
    arena.add(&unique(taken, base))
}

fn unique(taken: &mut NameSet, base: &str) -> String {
    if taken.insert(base) {
        return base.to_string();
    }
    let mut k = 1;
    loop {
        let name = format!("{base}_{k}");
        if taken.insert(&name) {
            return name;
        }
        k += 1;
    }
}

impl<'g> Exporter<'g> {
    /// An exporter of `graph`, a verified graph, writing its nodes in `order` (the
    /// printer's: [`Graph::topo_order`]).
    fn new(graph: &'g Graph, order: Vec<NodeId>) -> Exporter<'g> {
        Exporter {
            graph,
            order,
            #[cfg(debug_assertions)]
            printer: Names::new(graph),
            names: ValueNames::with_capacity(graph.node_count()),
            arena: Arena {
                // Value names stay (node names are dropped once written).
                text: String::with_capacity(graph.node_count() * 8),
                overflow: false,
            },
            // Most value names are the printer's, kept as bits, not in the hashed set.
            taken: NameSet::with_capacity(graph.node_count() / 4),
            node_names: NameSet::default(),
            nodes: NodeSink::Protos(Vec::new()),
            inits: Vec::new(),
            init_bytes: None,
            inputs: Vec::new(),
            identities: Vec::new(),
            opset: BASE_OPSET,
            cur: String::new(),
            cur_op: "",
            scratch: String::new(),
            printed: (0, 0),
            functions: Vec::new(),
            function_names: HashMap::new(),
            function_calls: HashMap::new(),
            domains: BTreeMap::new(),
            pinned: Vec::new(),
            value_infos: Vec::new(),
            payloads: Vec::new(),
            shapes: shapes::ShapeCache::default(),
        }
    }

    fn err(&self, message: impl Into<String>) -> OnnxError {
        OnnxError::node(self.cur_op, &self.cur, message)
    }

    fn input_name(&self, id: NodeId) -> String {
        let Some(node) = self.graph.node(id) else {
            return format!("input{}", id.index());
        };
        match node.attrs().get("name") {
            Some(AttrValue::Str(s)) => s.clone(),
            _ => node
                .name()
                .map(str::to_string)
                .unwrap_or_else(|| format!("input{}", id.index())),
        }
    }

    /// Reserves input names, then output names (so generated names avoid both).
    fn reserve_io(&mut self) -> Result<(), OnnxError> {
        for &id in self.graph.inputs() {
            let name = self.input_name(id);
            if !self.taken.insert(name.clone()) {
                return Err(OnnxError::Model(format!(
                    "two graph inputs are named `{name}`"
                )));
            }
            let name = self.arena.add(&name);
            self.names.insert(Value::from(id), name);
        }
        let outputs: Vec<(String, Value)> = self
            .graph
            .output_names()
            .iter()
            .cloned()
            .zip(self.graph.outputs().iter().copied())
            .collect();
        // ONNX lets a graph list one value as an output twice (the same name twice);
        // one name for two different values cannot be written.
        let mut seen: HashMap<String, Value> = HashMap::new();
        for (name, v) in outputs {
            match seen.get(&name) {
                Some(&first) if first == v => continue,
                Some(_) => {
                    return Err(OnnxError::Model(format!(
                        "two different graph outputs are named `{name}`"
                    )))
                }
                None => {
                    seen.insert(name.clone(), v);
                }
            }
            match self.names.get(v) {
                Some(existing) if self.arena.get(existing) == name => {}
                Some(existing) => {
                    if !self.taken.insert(name.clone()) {
                        return Err(OnnxError::Model(format!(
                            "graph output `{name}` has the name of a graph input"
                        )));
                    }
                    let name = self.arena.add(&name);
                    self.identities.push((existing, name));
                }
                None => {
                    if !self.taken.insert(name.clone()) {
                        return Err(OnnxError::Model(format!(
                            "graph output `{name}` has the name of a graph input"
                        )));
                    }
                    let name = self.arena.add(&name);
                    self.names.insert(v, name);
                }
            }
        }
        // Outer names that opaque nodes' subgraphs read must exist under those names.
        let graph = self.graph;
        for id in graph.nodes_with_op("opaque") {
            let Some(node) = graph.node(id) else { continue };
            let Some(f) = node.foreign() else { continue };
            let first = node.operands().len().saturating_sub(f.captures.len());
            for (c, &v) in f.captures.iter().zip(&node.operands()[first..]) {
                if self.names.get(v).map(|n| self.arena.get(n)) == Some(c.as_str()) {
                    continue;
                }
                if self.names.get(v).is_some() || !self.taken.insert(c) {
                    // Named already (an input or output): an Identity gives it `c`.
                    self.taken.insert(c);
                } else {
                    let c = self.arena.add(c);
                    self.names.insert(v, c);
                }
            }
        }
        Ok(())
    }

    /// The text of `n`.
    fn s(&self, n: Name) -> &str {
        self.arena.get(n)
    }

    /// Takes the next `count` numbers of the printer's `t` (values of ops) or `c`
    /// (constants) names, counted as [`crate::printer::Names`] counts them (nodes are written in its
    /// order); returns the first.
    fn next_printed(&mut self, kind: char, count: u32) -> u32 {
        let next = if kind == 'c' {
            &mut self.printed.1
        } else {
            &mut self.printed.0
        };
        *next += count;
        *next - count
    }

    /// A fresh name for `v`, the printer's (`t<n>`, `c<n>` for a constant) made unique:
    /// spelled here rather than asked of [`crate::printer::Names::get`], which allocates a
    /// string.
    fn printed_name(&mut self, v: Value, kind: char, n: u32) -> Name {
        self.scratch.clear();
        self.scratch.push(kind);
        push_decimal(&mut self.scratch, n);
        #[cfg(debug_assertions)]
        assert_eq!(self.scratch, self.printer.get(v), "printer name of {v:?}");
        #[cfg(not(debug_assertions))]
        let _ = v;
        match n < PRINTED_BITS && self.taken.insert_printed(usize::from(kind == 'c'), n) {
            true => self.arena.add(&self.scratch),
            // Taken, or past the bits: the checks of any other name.
            false if n >= PRINTED_BITS => {
                unique_in(&mut self.taken, &mut self.arena, &self.scratch)
            }
            false => self.arena.add(&unique(&mut self.taken, &self.scratch)),
        }
    }

    fn name_of(&self, v: Value) -> Result<Name, OnnxError> {
        self.names.get(v).ok_or_else(|| {
            self.err(format!(
                "operand %{}.{} has no name yet (the graph is not in order)",
                v.node.index(),
                v.output
            ))
        })
    }

    fn meta(&self, v: Value) -> Result<TensorMeta, OnnxError> {
        self.graph.meta(v).cloned().map_err(OnnxError::verify)
    }

    /// A fresh value name `<node>/<what>`.
    fn tmp(&mut self, what: &str) -> Name {
        self.scratch.clear();
        self.scratch.push_str(&self.cur);
        self.scratch.push('/');
        self.scratch.push_str(what);
        unique_in(&mut self.taken, &mut self.arena, &self.scratch)
    }

    /// The current node's ONNX name, made unique among the nodes.
    fn node_name(&mut self) -> Name {
        unique_in(&mut self.node_names, &mut self.arena, &self.cur)
    }

    fn push(&mut self, op_type: &str, inputs: &[Name], outputs: &[Name], attrs: &[Attr]) {
        let name = self.node_name();
        self.push_named(name, op_type, "", inputs, outputs, attrs);
    }

    fn push_named(
        &mut self,
        name: Name,
        op_type: &str,
        domain: &str,
        inputs: &[Name],
        outputs: &[Name],
        attrs: &[Attr],
    ) {
        let arena = &self.arena;
        self.nodes.push_parts(NodeParts {
            inputs: inputs.iter().map(|&n| arena.get(n)),
            outputs: outputs.iter().map(|&n| arena.get(n)),
            name: arena.get(name),
            op_type,
            domain,
            attrs,
        });
        // A node's name is written once: its text need not stay.
        self.arena.drop_last(name);
    }

    /// An initialiser holding `t`, named after the current node and `what`.
    fn init(&mut self, what: &str, t: &Tensor) -> Name {
        let name = self.tmp(what);
        self.push_init(tensor_to_proto(self.arena.get(name), t));
        name
    }

    /// An int64 initialiser holding `v` (1-D), named after the current node and `what`:
    /// the message [`Exporter::init`] makes, without a tensor first.
    fn init_ints(&mut self, what: &str, v: &[i64]) -> Result<Name, OnnxError> {
        Ok(self.init_i64s(what, vec![v.len() as i64], v))
    }

    /// An int64 scalar initialiser holding `v`.
    fn init_i64(&mut self, what: &str, v: i64) -> Name {
        self.init_i64s(what, Vec::new(), &[v])
    }

    /// An int64 initialiser of shape `dims` holding `v`.
    fn init_i64s(&mut self, what: &str, dims: Vec<i64>, v: &[i64]) -> Name {
        let name = self.tmp(what);
        if let Some(bytes) = self.init_bytes.as_mut() {
            bytes.push_i64s(self.arena.get(name), &dims, v);
            return name;
        }
        let mut raw_data = Vec::with_capacity(8 * v.len());
        for x in v {
            raw_data.extend_from_slice(&x.to_le_bytes());
        }
        self.push_init(TensorProto {
            dims,
            data_type: dtype_to_onnx(DType::I64),
            name: self.arena.get(name).to_string(),
            raw_data,
            ..Default::default()
        });
        name
    }

    /// Adds an initialiser message (after the initialisers encoded so far).
    fn push_init(&mut self, t: TensorProto) {
        if let Some(bytes) = self.init_bytes.as_mut() {
            bytes.mark();
        }
        self.inits.push(t);
    }

    /// The error for a node whose attributes do not read as its op declares.
    fn bad(&self, e: InferError) -> OnnxError {
        self.err(e.0)
    }

    fn node(&mut self, id: NodeId) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        match node.op_name() {
            "input" => {
                let name = self.name_of(Value::from(id))?;
                let vi = self.value_info_of(Value::from(id), self.s(name))?;
                self.inputs.push(vi);
                Ok(())
            }
            "constant" => {
                let v = Value::from(id);
                let printed = self.next_printed('c', 1);
                let name = match self.names.get(v) {
                    Some(n) => n,
                    None => {
                        let n = match node.name() {
                            Some(base) => unique_in(&mut self.taken, &mut self.arena, base),
                            None => self.printed_name(v, 'c', printed),
                        };
                        self.names.insert(v, n);
                        n
                    }
                };
                let name = self.s(name).to_string();
                let t = node
                    .payload()
                    .ok_or_else(|| OnnxError::tensor(&name, "a constant without a value"))?;
                // The bytes are placed by the writer (inline or external data).
                self.payloads.push((self.inits.len(), t.clone()));
                self.push_init(TensorProto {
                    dims: t.shape().iter().map(|&d| d as i64).collect(),
                    data_type: dtype_to_onnx(t.dtype()),
                    name,
                    ..Default::default()
                });
                Ok(())
            }
            op => {
                self.node_names.group();
                self.cur_op = node.op_name();
                self.cur.clear();
                match node.name() {
                    Some(n) => self.cur.push_str(n),
                    None => {
                        let _ = write!(self.cur, "{op}_{}", id.index());
                    }
                }
                let mut ins = Names8::new();
                for &v in node.operands() {
                    ins.push(self.name_of(v)?);
                }
                let count = node.outputs().len() as u32;
                let first = self.next_printed('t', count);
                let mut outs = Names8::new();
                for o in 0..count {
                    let v = Value::new(id, o);
                    let name = match self.names.get(v) {
                        Some(n) => n,
                        None => {
                            let n = self.printed_name(v, 't', first + o);
                            self.names.insert(v, n);
                            n
                        }
                    };
                    outs.push(name);
                }
                self.op(id, ins, outs)
            }
        }
    }

    fn op(&mut self, id: NodeId, ins: Names8, outs: Names8) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let attrs = node.attrs();
        if let Some(row) = super::table::saving(node.op_name()) {
            return self.write_row(id, row, ins, outs);
        }
        match node.op_name() {
            "ne" => {
                let t = self.tmp("eq");
                self.push("Equal", &ins, &[t], &[]);
                self.push("Not", &[t], &outs, &[]);
            }
            "rsqrt" => {
                let t = self.tmp("sqrt");
                self.push("Sqrt", &ins, &[t], &[]);
                self.push("Reciprocal", &[t], &outs, &[]);
            }
            "silu" => {
                let t = self.tmp("sigmoid");
                self.push("Sigmoid", &ins, &[t], &[]);
                self.push("Mul", &[ins[0], t], &outs, &[]);
            }
            "dropout" => {
                if attrs.bool("train").map_err(|e| self.bad(e))?
                    && attrs.float("p").map_err(|e| self.bad(e))? != 0.0
                {
                    return Err(self.err("training-mode dropout has no ONNX inference form"));
                }
                self.push("Identity", &ins, &outs, &[]);
            }
            "masked_fill" => {
                let dtype = self.meta(node.operands()[0])?.dtype;
                let fill = attrs.float("value").map_err(|e| self.bad(e))?;
                let value = self.init("value", &Tensor::full(dtype, &[], fill));
                self.push("Where", &[ins[1], value, ins[0]], &outs, &[]);
            }
            "transpose" => {
                let r = self.meta(node.operands()[0])?.rank();
                let d0 = normalize_axis(attrs.int("dim0").map_err(|e| self.bad(e))?, r)
                    .ok_or_else(|| self.err("dim0 out of range"))?;
                let d1 = normalize_axis(attrs.int("dim1").map_err(|e| self.bad(e))?, r)
                    .ok_or_else(|| self.err("dim1 out of range"))?;
                let mut perm: Vec<i64> = (0..r as i64).collect();
                perm.swap(d0, d1);
                self.push("Transpose", &ins, &outs, &[a_ints("perm", perm)]);
            }
            "reshape" if attrs.get("shape").is_some_and(AttrValue::is_symbolic) => {
                let shape = attrs.sym_ints("shape").map_err(|e| self.bad(e))?;
                let s = self.sym_list(&shape)?;
                self.push("Reshape", &[ins[0], s], &outs, &[]);
            }
            "expand" if attrs.get("size").is_some_and(AttrValue::is_symbolic) => {
                let size: Vec<SymExpr> = attrs
                    .sym_ints("size")
                    .map_err(|e| self.bad(e))?
                    .iter()
                    .map(|d| {
                        if d.as_const() == Some(-1) {
                            SymExpr::int(1)
                        } else {
                            d.clone()
                        }
                    })
                    .collect();
                let s = self.sym_list(&size)?;
                self.push("Expand", &[ins[0], s], &outs, &[]);
            }
            "slice"
                if ["start", "end"]
                    .iter()
                    .any(|n| attrs.get(n).is_some_and(AttrValue::is_symbolic)) =>
            {
                let mut i: Names8 = smallvec![ins[0]];
                for what in ["start", "end", "dim", "step"] {
                    let v = attrs.sym_int(what).map_err(|e| self.bad(e))?;
                    i.push(self.sym_list(&[v])?);
                }
                self.push("Slice", &i, &outs, &[]);
            }
            "arange"
                if ["start", "end", "step"]
                    .iter()
                    .any(|n| attrs.get(n).is_some_and(AttrValue::is_symbolic)) =>
            {
                let dtype = attrs.dtype("dtype").map_err(|e| self.bad(e))?;
                let mut i = Names8::new();
                for what in ["start", "end", "step"] {
                    let v = attrs.sym_int(what).map_err(|e| self.bad(e))?;
                    i.push(self.sym_scalar(&v)?);
                }
                if dtype == DType::I64 {
                    self.push("Range", &i, &outs, &[]);
                } else {
                    let r = self.tmp("range");
                    self.push("Range", &i, &[r], &[]);
                    self.push(
                        "Cast",
                        &[r],
                        &outs,
                        &[a_int("to", dtype_to_onnx(dtype) as i64)],
                    );
                }
            }
            // A static size is one initialiser; a symbolic one, shape arithmetic.
            "full" | "zeros" | "ones" => {
                let size = attrs.sym_ints("size").map_err(|e| self.bad(e))?;
                let dtype = attrs.dtype("dtype").map_err(|e| self.bad(e))?;
                let value = match node.op_name() {
                    "full" => attrs.float("value").map_err(|e| self.bad(e))?,
                    "zeros" => 0.0,
                    _ => 1.0,
                };
                let s = self.sym_list(&size)?;
                let v = tensor_to_proto("value", &Tensor::full(dtype, &[1], value));
                self.push(
                    "ConstantOfShape",
                    &[s],
                    &outs,
                    &[Attr::Tensor("value", Box::new(v))],
                );
            }
            "sym_ints" => {
                let values = attrs.sym_ints("values").map_err(|e| self.bad(e))?;
                let v = self.sym_list(&values)?;
                if attrs.bool("scalar").map_err(|e| self.bad(e))? {
                    let empty = self.init_ints("scalar_shape", &[])?;
                    self.push("Reshape", &[v, empty], &outs, &[]);
                } else {
                    self.push("Identity", &[v], &outs, &[]);
                }
            }
            "reshape" => {
                let shape = attrs.ints("shape").map_err(|e| self.bad(e))?;
                let zero = shape.contains(&0);
                let s = self.init_ints("shape", shape)?;
                let allow = [a_int("allowzero", 1)];
                let a: &[Attr] = if zero { &allow } else { &[] };
                self.push("Reshape", &[ins[0], s], &outs, a);
            }
            "expand" => {
                let size: Vec<i64> = attrs
                    .ints("size")
                    .map_err(|e| self.bad(e))?
                    .iter()
                    .map(|&d| if d == -1 { 1 } else { d })
                    .collect();
                let s = self.init_ints("shape", &size)?;
                self.push("Expand", &[ins[0], s], &outs, &[]);
            }
            "unsqueeze" => {
                let dim = attrs.int("dim").map_err(|e| self.bad(e))?;
                let a = self.init_ints("axes", &[dim])?;
                self.push("Unsqueeze", &[ins[0], a], &outs, &[]);
            }
            "split" => {
                let sizes = attrs.ints("split_sizes").map_err(|e| self.bad(e))?;
                let dim = attrs.int("dim").map_err(|e| self.bad(e))?;
                let s = self.init_ints("split", sizes)?;
                self.push("Split", &[ins[0], s], &outs, &[a_int("axis", dim)]);
            }
            "slice" => {
                let mut i: Names8 = smallvec![ins[0]];
                for what in ["start", "end", "dim", "step"] {
                    let v = attrs.int(what).map_err(|e| self.bad(e))?;
                    i.push(self.init_ints(what, &[v])?);
                }
                self.push("Slice", &i, &outs, &[]);
            }
            "arange" => {
                let dtype = attrs.dtype("dtype").map_err(|e| self.bad(e))?;
                let mut i = Names8::new();
                for what in ["start", "end", "step"] {
                    let v = attrs.float(what).map_err(|e| self.bad(e))?;
                    i.push(self.init(what, &Tensor::full(dtype, &[], v)));
                }
                self.push("Range", &i, &outs, &[]);
            }
            "scaled_dot_product_attention" => self.attention(id, ins, outs)?,
            "opaque" => self.opaque(id, ins, outs)?,
            other => {
                if self.standard_fused(id, &ins, &outs)? {
                    return Ok(());
                }
                if node.op().decompose.is_some() {
                    return self.function_call(id, ins, outs);
                }
                return Err(self.err(format!(
                    "op `{other}` has no ONNX form and no decomposition"
                )));
            }
        }
        Ok(())
    }

    /// Writes a vocabulary node through its table row (`table.rs`): each argument as
    /// the attribute or constant input the row names at the opset written (an int list
    /// input left out when it is ONNX's default), held attributes whose value is not
    /// ONNX's default, and the row's opset.
    fn write_row(
        &mut self,
        id: NodeId,
        row: &'static OpMap,
        mut ins: Names8,
        outs: Names8,
    ) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let attrs = node.attrs();
        self.opset = self.opset.max(row.write_opset);
        if row.quirk == Quirk::OnesScale && ins.len() < row.operands.0 {
            ins.push(self.ones_scale(id)?);
        }
        let mut attribute: SmallVec<[Attr; 4]> = SmallVec::new();
        let mut inputs: SmallVec<[(usize, Name); 4]> = SmallVec::new();
        for a in row.args {
            let value = attrs.get(a.ours).ok_or_else(|| {
                self.err(format!(
                    "`{}` has no attribute `{}`",
                    node.op_name(),
                    a.ours
                ))
            })?;
            let value = match (value, a.shape) {
                (AttrValue::Null, _) => continue,
                (AttrValue::Ints(p), Shape::SymmetricPads) => match p.as_slice() {
                    &[p0, p1] => AttrValue::Ints(vec![p0, p1, p0, p1]),
                    _ => return Err(self.err(format!("{} {p:?} is not 2-D", a.ours))),
                },
                (AttrValue::Ints(p), Shape::Perm) => {
                    let r = self.meta(node.operands()[0])?.rank();
                    let perm = p
                        .iter()
                        .map(|&d| normalize_axis(d, r).map(|d| d as i64))
                        .collect::<Option<Vec<i64>>>()
                        .ok_or_else(|| self.err(format!("{} dims out of range", node.op_name())))?;
                    AttrValue::Ints(perm)
                }
                (AttrValue::Bool(b), _) => AttrValue::Int(i64::from(*b)),
                (AttrValue::DType(d), _) => AttrValue::Int(i64::from(dtype_to_onnx(*d))),
                (v, _) => v.clone(),
            };
            match (a.place.input_at(self.opset), value) {
                (None, AttrValue::Int(v)) => attribute.push(a_int(a.onnx, v)),
                (None, AttrValue::Ints(v)) => attribute.push(a_ints(a.onnx, v)),
                (None, AttrValue::Float(v)) => attribute.push(a_float(a.onnx, v)),
                (None, AttrValue::Str(v)) => attribute.push(a_str(a.onnx, v)),
                (Some(i), AttrValue::Int(v)) => inputs.push((i, self.init_i64(a.onnx, v))),
                (Some(_), AttrValue::Ints(v)) if matches!(a.absent, Absent::Ints(d) if d == v) => {}
                (Some(i), AttrValue::Ints(v)) => inputs.push((i, self.init_ints(a.onnx, &v)?)),
                (_, v) => {
                    return Err(self.err(format!(
                        "attribute `{}` {v} has no ONNX form in `{}`",
                        a.ours, row.onnx
                    )))
                }
            }
        }
        for h in row.held {
            match h.values {
                HeldValues::Int { default, accept } => match accept.first() {
                    Some(&v) if v != default => attribute.push(a_int(h.onnx, v)),
                    _ => {}
                },
                HeldValues::Str { default, accept } => match accept.first() {
                    Some(&v) if v != default => attribute.push(a_str(h.onnx, v)),
                    _ => {}
                },
            }
        }
        inputs.sort_by_key(|(i, _)| *i);
        for (i, name) in inputs {
            ins.resize(ins.len().max(i), Name::EMPTY);
            ins.insert(i, name);
        }
        let name = self.node_name();
        self.push_named(name, row.onnx, row.domain, &ins, &outs, &attribute);
        Ok(())
    }

    /// A scale of ones over the normalised dims, for a norm without a weight (ONNX's
    /// LayerNormalization and RMSNormalization require one).
    fn ones_scale(&mut self, id: NodeId) -> Result<Name, OnnxError> {
        let node = self.graph.try_node(id).map_err(OnnxError::verify)?;
        let cur = self.cur.clone();
        let axis = node
            .attrs()
            .int("axis")
            .map_err(|e| OnnxError::node(node.op_name(), &cur, e.0))?;
        let meta = self.meta(node.operands()[0])?;
        let ax = normalize_axis(axis, meta.rank()).ok_or_else(|| self.err("axis out of range"))?;
        let dims: Option<Vec<usize>> = meta.shape.dims()[ax..]
            .iter()
            .map(|d| d.known().map(|n| n as usize))
            .collect();
        let dims = dims.ok_or_else(|| {
            self.err(format!(
                "without a weight, the normalised dims of {} must be known (ONNX needs a scale)",
                meta.shape
            ))
        })?;
        Ok(self.init("scale", &Tensor::full(meta.dtype, &dims, 1.0)))
    }

    /// The value info of `v` named `name`: its metadata, or the ONNX type recorded when
    /// graphrw does not know it (see [`crate::foreign`]).
    fn value_info_of(&self, v: Value, name: &str) -> Result<ValueInfoProto, OnnxError> {
        let node = self.graph.try_node(v.node).map_err(OnnxError::verify)?;
        let recorded = node
            .foreign()
            .and_then(|f| f.types.get(v.output as usize))
            .and_then(Option::as_ref);
        match recorded {
            None => Ok(value_info(name, &self.meta(v)?)),
            Some(bytes) => Ok(ValueInfoProto {
                name: name.into(),
                r#type: if bytes.is_empty() {
                    None
                } else {
                    Some(TypeProto::decode(bytes.as_slice()).map_err(|e| {
                        OnnxError::tensor(name, format!("its recorded ONNX type: {e}"))
                    })?)
                },
                doc_string: String::new(),
            }),
        }
    }

    /// Writes an opaque node back as it came: its recorded op type, domain and
    /// attributes, empty input and output slots where the source had them, and an
    /// `Identity` for each outer value its subgraphs read under another name.
    fn opaque(&mut self, id: NodeId, ins: Names8, outs: Names8) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let f = node
            .foreign()
            .ok_or_else(|| self.err("an opaque node without its foreign record"))?;
        let mut proto = NodeProto::decode(f.node.as_slice())
            .map_err(|e| self.err(format!("its recorded ONNX node does not decode: {e}")))?;
        let first = ins.len().saturating_sub(f.captures.len());
        let (own, captured) = ins.split_at(first);
        let mut own = own.iter();
        proto.input = f
            .inputs
            .iter()
            .map(|&present| match present {
                true => own.next().map_or("", |&n| self.s(n)).to_string(),
                false => String::new(),
            })
            .collect();
        for (o, &name) in outs.iter().enumerate() {
            let name = self.s(name);
            let vi = self.value_info_of(Value::new(id, o as u32), name)?;
            if vi.r#type.is_some() && !self.graph.output_names().iter().any(|n| n == name) {
                self.value_infos.push(vi);
            }
        }
        let mut outs = outs.iter();
        proto.output = f
            .outputs
            .iter()
            .map(|&present| match present {
                true => outs.next().map_or("", |&n| self.s(n)).to_string(),
                false => String::new(),
            })
            .collect();
        for (c, &have) in f.captures.iter().zip(captured) {
            if c != self.s(have) {
                let c = self.arena.add(c);
                self.push("Identity", &[have], &[c], &[]);
            }
        }
        proto.name = unique(&mut self.node_names, &self.cur);
        let domain = if proto.domain == "ai.onnx" {
            ""
        } else {
            proto.domain.as_str()
        };
        if domain.is_empty() {
            // Never below the node's own opset (its meaning there is what it has).
            self.opset = self.opset.max(f.opset);
            let key = self.nodes.push_held(proto);
            self.pinned.push((key, f.opset, id));
            return Ok(());
        } else {
            let have = *self.domains.entry(domain.to_string()).or_insert(f.opset);
            if have != f.opset {
                return Err(self.err(format!(
                    "domain `{domain}` is imported at opset {have} by another node and {} by this one",
                    f.opset
                )));
            }
        }
        self.nodes.push_proto(proto);
        Ok(())
    }

    /// Brings the opaque default-domain node `nodes[at]`, read at opset `from`, to the
    /// opset written: unchanged where its op kept its meaning, through the upgrades of
    /// [`super::upgrade`] where only the form changed, else an error.
    fn upgrade(&mut self, at: usize, from: i64, id: NodeId) -> Result<(), OnnxError> {
        let to = self.opset;
        let Some(mut node) = self.nodes.held_mut(at).map(|n| n.clone()) else {
            return Ok(());
        };
        if super::schemas::removed_by(&node.op_type, to) {
            return Err(OnnxError::node(
                &node.op_type,
                &node.name,
                format!("read at opset {from}, this op no longer exists at opset {to}, which graphrw writes; convert the model with onnx.version_converter"),
            ));
        }
        let Some(steps) = super::schemas::barriers(&node.op_type, from, to) else {
            return Ok(()); // Not a standard op: written as it came.
        };
        let graph = self.graph;
        let gnode = graph.try_node(id).map_err(OnnxError::verify)?;
        let meta = |i: usize| {
            gnode
                .operands()
                .get(i)
                .filter(|v| {
                    graph
                        .node(v.node)
                        .is_some_and(|n| n.is_known(v.output as usize))
                })
                .and_then(|&v| graph.meta(v).ok())
        };
        let dtype = meta(0).map(|m| m.dtype);
        let ranks = [meta(0).map(TensorMeta::rank), meta(1).map(TensorMeta::rank)];
        let base = node.name.clone();
        let taken = &mut self.taken;
        let mut fresh = |what: &str| unique(taken, &format!("{base}/{what}"));
        let mut ctx = super::upgrade::Ctx {
            dtype,
            ranks,
            fresh: &mut fresh,
            inits: &mut self.inits,
        };
        for v in steps {
            super::upgrade::step(&mut node, v, &mut ctx).map_err(|why| {
                OnnxError::node(
                    &node.op_type,
                    &node.name,
                    format!("read at opset {from}, it changed meaning at opset {v} (graphrw writes {to}): {why}; convert the model with onnx.version_converter"),
                )
            })?;
        }
        if let Some(n) = self.nodes.held_mut(at) {
            *n = node;
        }
        Ok(())
    }

    fn attention(&mut self, id: NodeId, mut ins: Names8, outs: Names8) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let attrs = node.attrs();
        if attrs.float("dropout_p").map_err(|e| self.bad(e))? != 0.0 {
            return Err(self.err("ONNX Attention has no dropout; dropout_p must be 0"));
        }
        let q = self.meta(node.operands()[0])?;
        let k = self.meta(node.operands()[1])?;
        let r = q.rank();
        if r < 3 || k.rank() != r {
            return Err(self.err(format!(
                "ONNX Attention export takes (batch.., heads, seq, dim) inputs of rank >= 3, found {} and {}",
                q.shape, k.shape
            )));
        }
        let (sq, skv) = (q.shape.dims()[r - 2].clone(), k.shape.dims()[r - 2].clone());
        let mask = match node.operands().get(3) {
            Some(&m) => Some(self.meta(m)?),
            None => None,
        };
        // ONNX Attention is 4-D: a 3-D attention (heads folded into the batch, the
        // `bmm` form) gets a leading unit dim, a higher rank has its batch dims merged.
        let out = if r == 4 {
            None
        } else {
            let out_meta = self.meta(Value::new(id, 0))?;
            let qkv = node.operands()[..3].to_vec();
            for (x, name) in qkv.into_iter().zip(ins.iter_mut()) {
                let meta = self.meta(x)?;
                *name = self.view_as_4d(*name, &meta, r, "qkv")?;
            }
            if let Some(m) = &mask {
                ins[3] = self.mask_to_4d(ins[3], m, &q, &k, r)?;
            }
            Some(out_meta)
        };
        let attn_outs: Names8 = match &out {
            Some(_) => smallvec![self.tmp("attention_4d")],
            None => outs.clone(),
        };
        self.opset = self.opset.max(ATTENTION_OPSET);
        let attn_name = self.node_name();
        if let Some(m) = &mask {
            // The mask's rank as written: 2 stays 2, anything else became 4-D.
            let mr = if m.rank() <= 2 { m.rank() } else { 4 };
            let md = m.shape.dims();
            let full = (mr == 2 || mr == 4)
                && m.rank() >= 2
                && md[m.rank() - 2] == sq
                && md[m.rank() - 1] == skv;
            if let (false, Some(sq), Some(skv)) = (full, sq.known(), skv.known()) {
                let shape = self.init_ints("mask_shape", &[1, 1, sq as i64, skv as i64])?;
                let expanded = self.tmp("mask_expanded");
                let base = format!("{}/mask_expand", self.s(attn_name));
                let name = unique_in(&mut self.node_names, &mut self.arena, &base);
                self.push_named(name, "Expand", "", &[ins[3], shape], &[expanded], &[]);
                ins[3] = expanded;
            }
        }
        let causal = i64::from(attrs.bool("is_causal").map_err(|e| self.bad(e))?);
        let mut a: SmallVec<[Attr; 2]> = smallvec![a_int("is_causal", causal)];
        if let Some(scale) = attrs.opt_float("scale").map_err(|e| self.bad(e))? {
            a.push(a_float("scale", scale));
        }
        self.push_named(attn_name, "Attention", "", &ins, &attn_outs, &a);
        if let Some(out_meta) = out {
            self.write_back_from_4d(attn_outs[0], &out_meta, outs[0])?;
        }
        Ok(())
    }

    /// `x` (q, k or v of rank `r` != 4) as a 4-D tensor: `Unsqueeze(0)` for rank 3,
    /// a `Reshape` to `[-1, heads, seq, dim]` (known) above 4.
    fn view_as_4d(
        &mut self,
        x: Name,
        meta: &TensorMeta,
        r: usize,
        what: &str,
    ) -> Result<Name, OnnxError> {
        let out = self.tmp(&format!("{what}_4d"));
        if r == 3 {
            let axes = self.init_ints("axes", &[0])?;
            self.push("Unsqueeze", &[x, axes], &[out], &[]);
            return Ok(out);
        }
        let tail = self.known_tail(meta, 3)?;
        let shape = self.init_ints("shape_4d", &[-1, tail[0], tail[1], tail[2]])?;
        self.push("Reshape", &[x, shape], &[out], &[]);
        Ok(out)
    }

    /// The mask of an attention of rank `r` != 4 as the 4-D attention's mask: a 2-D
    /// mask stays, a rank-3 one gets a leading unit dim, a higher rank is expanded to
    /// the scores' shape and its batch dims merged.
    fn mask_to_4d(
        &mut self,
        m: Name,
        meta: &TensorMeta,
        q: &TensorMeta,
        k: &TensorMeta,
        r: usize,
    ) -> Result<Name, OnnxError> {
        if meta.rank() <= 2 {
            return Ok(m);
        }
        if r == 3 {
            return self.view_as_4d(m, meta, 3, "mask");
        }
        let mut scores: Vec<i64> = Vec::with_capacity(r);
        for d in &q.shape.dims()[..r - 1] {
            scores.push(self.known(d)?);
        }
        scores.push(self.known(&k.shape.dims()[r - 2])?);
        let full = self.init_ints("mask_full_shape", &scores)?;
        let expanded = self.tmp("mask_full");
        self.push("Expand", &[m, full], &[expanded], &[]);
        let shape = self.init_ints(
            "mask_shape_4d",
            &[-1, scores[r - 3], scores[r - 2], scores[r - 1]],
        )?;
        let out = self.tmp("mask_4d");
        self.push("Reshape", &[expanded, shape], &[out], &[]);
        Ok(out)
    }

    /// Brings the 4-D attention output `x` back to `meta` (the fused node's output).
    fn write_back_from_4d(
        &mut self,
        x: Name,
        meta: &TensorMeta,
        out: Name,
    ) -> Result<(), OnnxError> {
        if meta.rank() == 3 {
            let axes = self.init_ints("axes", &[0])?;
            self.push("Squeeze", &[x, axes], &[out], &[]);
            return Ok(());
        }
        let mut dims = Vec::with_capacity(meta.rank());
        for d in meta.shape.dims() {
            dims.push(self.known(d)?);
        }
        let shape = self.init_ints("out_shape", &dims)?;
        self.push("Reshape", &[x, shape], &[out], &[]);
        Ok(())
    }

    fn known(&self, d: &Dim) -> Result<i64, OnnxError> {
        d.known().map(|d| d as i64).ok_or_else(|| {
            self.err(format!(
                "ONNX Attention export of a rank other than 3 or 4 needs known dims, found {d}"
            ))
        })
    }

    fn known_tail(&self, meta: &TensorMeta, n: usize) -> Result<Vec<i64>, OnnxError> {
        let dims = meta.shape.dims();
        dims[dims.len() - n..]
            .iter()
            .map(|d| self.known(d))
            .collect()
    }

    /// Writes a fused op as its standard ONNX op when it has one and the node has the
    /// usual form; false when it does not.
    fn standard_fused(
        &mut self,
        id: NodeId,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<bool, OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        if outs.len() != 1 {
            return Ok(false);
        }
        // The epsilon: the op's float attribute named like `eps`.
        let eps = node
            .attrs()
            .iter()
            .find(|(n, _)| n.contains("eps"))
            .and_then(|(_, v)| match v {
                AttrValue::Float(f) => Some(*f),
                _ => None,
            });
        match (node.op_name(), ins.len(), eps) {
            ("fused.layer_norm", 2 | 3, Some(eps)) => self.push(
                "LayerNormalization",
                ins,
                outs,
                &[a_int("axis", -1), a_float("epsilon", eps)],
            ),
            ("fused.rms_norm", 2, Some(eps)) => {
                self.opset = self.opset.max(23);
                self.push(
                    "RMSNormalization",
                    ins,
                    outs,
                    &[a_int("axis", -1), a_float("epsilon", eps)],
                );
            }
            ("fused.gelu_erf" | "fused.gelu_tanh", 1, _) => {
                self.opset = self.opset.max(20);
                let approximate = if node.op_name() == "fused.gelu_tanh" {
                    "tanh"
                } else {
                    "none"
                };
                self.push("Gelu", ins, outs, &[a_str("approximate", approximate)]);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Writes node `id` as a call of a model-local function whose body is the op's
    /// decomposition for this node's operands and attributes.
    fn function_call(&mut self, id: NodeId, ins: Names8, outs: Names8) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let Some(decompose) = node.op().decompose else {
            return Err(self.err("the op has no decomposition"));
        };
        // The body depends only on the op, the operands' metadata and the attributes:
        // a node like one written before calls the same function, without building
        // and encoding the body again (a big graph has thousands of such nodes).
        let mut call_key = format!("{:p} {}", node.op(), node.op_name());
        for &v in node.operands() {
            let _ = write!(call_key, " {:?}", self.meta(v)?);
        }
        for (n, v) in node.attrs().iter() {
            let _ = write!(call_key, " {n}={v:?}");
        }
        if let Some(name) = self.function_calls.get(&call_key).cloned() {
            let node_name = self.node_name();
            self.push_named(node_name, &name, FUNCTION_DOMAIN, &ins, &outs, &[]);
            return Ok(());
        }
        let b = Builder::new();
        let params: Vec<Value> = node
            .operands()
            .iter()
            .enumerate()
            .map(|(i, &v)| Ok(b.input(&format!("in{i}"), self.meta(v)?).value()))
            .collect::<Result<_, OnnxError>>()?;
        let results = decompose(&b, &params, &node.attrs())
            .map_err(|e| self.err(format!("its decomposition failed: {e}")))?;
        let named = results
            .iter()
            .enumerate()
            .map(|(i, &v)| (format!("out{i}"), v))
            .collect();
        let mut body = b.finish();
        body.set_named_outputs(named).map_err(OnnxError::verify)?;
        body.remove_dead();
        let order = crate::verify::verify_ordered(&body)
            .map_err(|e| self.err(format!("its decomposition: {e}")))?;

        let mut child = Exporter::new(&body, order);
        child.functions = std::mem::take(&mut self.functions);
        child.function_names = std::mem::take(&mut self.function_names);
        let written = child.function_body();
        self.functions = std::mem::take(&mut child.functions);
        self.function_names = std::mem::take(&mut child.function_names);
        let mut f = written?;
        self.opset = self.opset.max(child.opset);
        f.doc_string = node.op().doc.to_string();
        let key = f.encode_to_vec();
        let name = match self.function_names.get(&key) {
            Some(n) => n.clone(),
            None => {
                let base: String = node
                    .op_name()
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                let taken: HashSet<&str> = self.functions.iter().map(|f| f.name.as_str()).collect();
                let mut n = base.clone();
                let mut k = 2;
                while taken.contains(n.as_str()) {
                    n = format!("{base}_{k}");
                    k += 1;
                }
                f.name = n.clone();
                self.function_names.insert(key, n.clone());
                self.functions.push(f);
                n
            }
        };
        let node_name = self.node_name();
        self.push_named(node_name, &name, FUNCTION_DOMAIN, &ins, &outs, &[]);
        self.function_calls.insert(call_key, name);
        Ok(())
    }

    /// This exporter's graph as a function body (unnamed): constants become `Constant`
    /// nodes (functions have no initialisers).
    fn function_body(&mut self) -> Result<FunctionProto, OnnxError> {
        self.reserve_io()?;
        let order = std::mem::take(&mut self.order);
        for id in order {
            self.node(id)?;
        }
        self.write_identities();
        let payloads = std::mem::take(&mut self.payloads);
        fill_inline(&mut self.inits, payloads);
        let mut nodes: Vec<NodeProto> = std::mem::take(&mut self.inits)
            .into_iter()
            .map(|t| NodeProto {
                output: vec![t.name.clone()],
                name: format!("{}/const", t.name),
                op_type: "Constant".into(),
                attribute: vec![a_tensor("value", t)],
                ..Default::default()
            })
            .collect();
        if let NodeSink::Protos(own) = &mut self.nodes {
            nodes.append(own);
        }
        let input = self
            .graph
            .inputs()
            .iter()
            .map(|&id| self.input_name(id))
            .collect();
        Ok(FunctionProto {
            name: String::new(),
            input,
            output: self.graph.output_names().to_vec(),
            node: nodes,
            domain: FUNCTION_DOMAIN.into(),
            ..Default::default()
        })
    }

    /// The `Identity` nodes that give graph outputs their names.
    fn write_identities(&mut self) {
        let identities = std::mem::take(&mut self.identities);
        for (src, dst) in identities {
            self.node_names.group();
            self.cur = format!("output_{}", self.s(dst));
            self.push("Identity", &[src], &[dst], &[]);
        }
    }

    /// The model around the nodes written, the nodes, and whether the node names
    /// are unique (false only where they were deferred: [`NameSet::defer`]).
    fn finish(mut self) -> Result<(ModelProto, NodeSink, bool), OnnxError> {
        self.write_identities();
        let names_unique = self.node_names.deferred_unique();
        // An opaque default-domain node read at an older opset is written unchanged
        // only where its op kept its meaning up to the opset written.
        for (at, from, id) in std::mem::take(&mut self.pinned) {
            self.upgrade(at, from, id)?;
        }
        let mut opset_import = vec![OperatorSetIdProto {
            domain: String::new(),
            version: self.opset,
        }];
        for (domain, &version) in &self.domains {
            opset_import.push(OperatorSetIdProto {
                domain: domain.clone(),
                version,
            });
        }
        if !self.functions.is_empty() {
            opset_import.push(OperatorSetIdProto {
                domain: FUNCTION_DOMAIN.into(),
                version: 1,
            });
        }
        let mut functions = std::mem::take(&mut self.functions);
        for f in &mut functions {
            f.opset_import = opset_import.clone();
        }
        let mut outputs = Vec::with_capacity(self.graph.outputs().len());
        for (name, &v) in self.graph.output_names().iter().zip(self.graph.outputs()) {
            outputs.push(self.value_info_of(v, name)?);
        }
        let model = ModelProto {
            ir_version: IR_VERSION,
            opset_import,
            functions,
            producer_name: "graphrw".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            graph: Some(GraphProto {
                node: Vec::new(),
                name: "graphrw".into(),
                initializer: self.inits,
                input: self.inputs,
                output: outputs,
                value_info: self.value_infos,
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok((model, self.nodes, names_unique))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::DType;
    use crate::ops::lookup;

    /// `x -> neg "dup" -> neg "dup" -> neg "dup_1" -> rsqrt "r" (two ONNX nodes)
    /// -> neg "r_1"`, output `y`.
    fn named_chain(names: [&str; 5]) -> Graph {
        let mut g = Graph::new();
        let mut v = g.add_input("x", TensorMeta::new(DType::F32, [4usize]));
        let ops = ["neg", "neg", "neg", "rsqrt", "neg"];
        for (op, name) in ops.into_iter().zip(names) {
            let op = lookup(op).expect("op");
            let id = g.add_op(op, &[v], &[]).expect("node");
            g.set_name(id, name);
            v = Value::from(id);
        }
        g.set_named_outputs(vec![("y".into(), v)]).expect("output");
        g
    }

    fn node_names(e: Exported) -> Vec<String> {
        let mut model = e.model;
        let g = model.graph.as_mut().expect("graph");
        if let NodeSink::Protos(nodes) = e.nodes {
            g.node = nodes;
        }
        g.node.iter().map(|n| n.name.clone()).collect()
    }

    /// Names given twice by different graph nodes: the deferred check finds it and the
    /// export checked name by name gives each repeat a fresh `_k`.
    #[test]
    fn deferred_node_names_fall_back_on_repeats() {
        let g = named_chain(["dup", "dup", "dup_1", "r", "r_1"]);
        let order = g.topo_order().expect("order");
        assert!(export_in(&g, false, &order, true, &Gate::checked())
            .expect("export")
            .is_none());
        let exact = export_in(&g, false, &order, false, &Gate::checked())
            .expect("export")
            .expect("checked one by one");
        let want = ["dup", "dup_1", "dup_1_1", "r", "r_1", "r_1_1", "output_y"];
        let names = node_names(exact);
        assert_eq!(names[..6], want[..6], "{names:?}");
        // `export` takes the checked path and gives the same names.
        assert_eq!(
            node_names(export(&g, false).expect("export"))[..6],
            want[..6]
        );
    }

    /// Distinct names: the deferred export is kept, and names and bytes are those of
    /// the export checked name by name (a repeat inside one graph node, the two ONNX
    /// nodes of `rsqrt`, is still found).
    #[test]
    fn deferred_node_names_match_checked_ones() {
        let g = named_chain(["a", "b", "c", "r", "s"]);
        let order = g.topo_order().expect("order");
        let deferred = export_in(&g, true, &order, true, &Gate::checked())
            .expect("export")
            .expect("names unique");
        let exact = export_in(&g, true, &order, false, &Gate::checked())
            .expect("export")
            .expect("checked one by one");
        let bytes = |e: Exported| super::super::external::encode_model(e).expect("encode");
        assert_eq!(bytes(deferred), bytes(exact));
        let names = node_names(export(&g, false).expect("export"));
        assert_eq!(names[..6], ["a", "b", "c", "r", "r_1", "s"], "{names:?}");
    }
}
