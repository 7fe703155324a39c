//! The graph: nodes (op applications) in a petgraph `StableGraph`, values as
//! (node, output), explicit inputs, constants and outputs.
//!
//! Operands live twice, on purpose: as an ordered list on each node (the matcher's hot
//! path reads operands by position) and as a use list on each producer (so users of a
//! value are cheap to find). Every mutation keeps the two in step;
//! [`crate::verify()`] checks they agree.
//!
//! The use lists are the graph's own, not petgraph edges: petgraph keeps a node's
//! outgoing edges in a singly linked list, so unlinking one use costs the fan-out of the
//! producer, and a constant shared by every layer of a model (weights, a mask, scalar
//! literals) made each removal of one of its users cost its 100 k other uses. Here a
//! producer's uses are a vector of (user, [`Use`]), and each operand slot of a user
//! remembers the position of its entry there: linking a use is a push, unlinking it a
//! swap-remove that fixes the one entry moved. Adding, rewiring and removing a node
//! cost its own degree, whatever the fan-out of its operands.
//!
//! Beside the dag, the graph keeps two dense columns by node index: the op code of
//! each node (kept by the graph's op index) and how many operand slots use it.
//! Questions asked of every node of a big graph (which nodes can anchor a rule, which
//! are dead) read those few bytes per node rather than the node slots or the edge
//! lists.
//!
//! Words for who reads a value: a *use* is one operand slot reading it (a node, the
//! user, and the operand position); a *user* is a node with one or more such uses.
//! Methods about one value take a [`Value`]: [`Graph::uses`] (its uses, unordered, no
//! allocation), [`Graph::uses_sorted`] (the same, sorted), [`Graph::use_count`],
//! [`Graph::is_output`]. Methods about every output of a node are named `node_*` and
//! take a [`NodeId`]: [`Graph::node_uses`] (each use with the output it reads),
//! [`Graph::node_users`] (the distinct user nodes), [`Graph::node_use_count`] and
//! [`Graph::node_is_unused`] (no use and no graph output). Graph outputs are not uses:
//! only `is_output` and `node_is_unused` look at them. A node keeps its output metadata inline (shapes up to
//! [`crate::meta::INLINE_RANK`] dims included), so reading an operand's shape is one
//! step from the node, not a pointer chase.

use std::collections::{BTreeMap, BTreeSet};

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use smallvec::SmallVec;

use graphrw_kernels::Tensor;

pub use crate::foreign::Foreign;
use crate::meta::TensorMeta;
use crate::op_index::{OpIndex, VACANT};
use crate::ops::{self, Arity, AttrValue, Attrs, Infer, OpDef};
use crate::GraphError;

/// A node's id: its index in the graph's node table. Ids survive the removal of other
/// nodes; a removed node's id may be reused by a later node, so do not keep ids across
/// rewrites you did not make.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The id of index `index` (ids are `u32`: a larger index wraps, as petgraph's do).
    pub fn new(index: usize) -> NodeId {
        NodeId(index as u32)
    }

    /// The index, for tables kept beside the graph.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The node store's index of this node.
    fn ix(self) -> NodeIndex<u32> {
        NodeIndex::new(self.0 as usize)
    }

    /// The id of the node store's index `ix`.
    fn of(ix: NodeIndex<u32>) -> NodeId {
        NodeId(ix.index() as u32)
    }
}

/// A value: output `output` of node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    /// The producing node.
    pub node: NodeId,
    /// Which of its outputs.
    pub output: u32,
}

impl Value {
    /// Output `output` of `node`.
    pub fn new(node: NodeId, output: u32) -> Value {
        Value { node, output }
    }
}

impl From<NodeId> for Value {
    fn from(node: NodeId) -> Value {
        Value { node, output: 0 }
    }
}

/// One use of a value, as the producer's use list holds it (with the user's id): the
/// producer's output `output` is operand `operand` of the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Use {
    /// Output index on the producing node.
    pub output: u32,
    /// Operand position on the consuming node.
    pub operand: u32,
}

/// One op application.
#[derive(Clone, Debug)]
pub struct Node {
    op: &'static OpDef,
    attrs: Box<[AttrValue]>,
    /// Inline for up to four operands: the matcher reads operands of every candidate, and
    /// keeping them in the node (not behind a second pointer) saves a cache miss per step.
    operands: SmallVec<[Value; 4]>,
    /// Per operand, the position of this use in the producer's use list ([`NO_SLOT`]
    /// for an operand whose producer does not exist): what makes unlinking it O(1).
    slots: SmallVec<[u32; 4]>,
    /// Inline for one output (nearly every op), shapes included (see
    /// [`crate::meta::Dims`]): building a node reads its operands' metadata, and on a
    /// big graph each pointer between a node and its shape would be a cache miss.
    outputs: SmallVec<[TensorMeta; 1]>,
    name: Option<Box<str>>,
    /// Boxed: only constants (a tensor) and foreign nodes (see [`Foreign`]) have one,
    /// and a node slot stays small (big graphs are scanned slot by slot, so slot size is
    /// memory traffic).
    payload: Option<Box<Payload>>,
}

/// What a node carries besides its op and attributes.
#[derive(Clone, Debug)]
enum Payload {
    /// A constant's value.
    Tensor(Tensor),
    /// An opaque node's or a foreign graph input's record for export.
    Foreign(Foreign),
}

impl Node {
    /// The op.
    pub fn op(&self) -> &'static OpDef {
        self.op
    }

    /// The op's name.
    pub fn op_name(&self) -> &'static str {
        self.op.name
    }

    /// Which built-in op the node's op is (`None` for an op declared elsewhere): what
    /// dispatch matches on.
    pub fn builtin(&self) -> Option<crate::ops::Op> {
        self.op.builtin
    }

    /// The attributes, aligned with the op's signature.
    pub fn attr_values(&self) -> &[AttrValue] {
        &self.attrs
    }

    /// The attributes by name.
    pub fn attrs(&self) -> Attrs<'_> {
        Attrs::new(self.op.attrs, &self.attrs)
    }

    /// The operands in order.
    pub fn operands(&self) -> &[Value] {
        &self.operands
    }

    /// Metadata of each output.
    pub fn outputs(&self) -> &[TensorMeta] {
        &self.outputs
    }

    /// The name given by the importer or the user (an ONNX node or input name).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The value of a `constant` node.
    pub fn payload(&self) -> Option<&Tensor> {
        match self.payload.as_deref() {
            Some(Payload::Tensor(t)) => Some(t),
            _ => None,
        }
    }

    /// The foreign record of an `opaque` node or of a graph input whose ONNX type graphrw
    /// does not model.
    pub fn foreign(&self) -> Option<&Foreign> {
        match self.payload.as_deref() {
            Some(Payload::Foreign(f)) => Some(f),
            _ => None,
        }
    }

    /// Attaches a foreign record (importers); a constant keeps its value instead.
    pub fn set_foreign(&mut self, foreign: Foreign) {
        if self.payload().is_none() {
            self.payload = Some(Box::new(Payload::Foreign(foreign)));
        }
    }

    /// True when the metadata of output `output` is exact; false when the node's
    /// foreign record says graphrw does not know it (the metadata is a placeholder).
    pub fn is_known(&self, output: usize) -> bool {
        self.foreign()
            .is_none_or(|f| f.types.get(output).is_none_or(Option::is_none))
    }

    /// True for a constant holding exactly one element: the constants that literals and
    /// scalar parameters of patterns can match.
    pub(crate) fn is_scalar_constant(&self) -> bool {
        self.payload().is_some_and(|t| t.numel() == 1)
    }

    /// Overwrites output metadata without checking (importers and verifier tests).
    pub fn set_output_meta(&mut self, output: usize, meta: TensorMeta) {
        if let Some(m) = self.outputs.get_mut(output) {
            *m = meta;
        }
    }
}

/// The slot of an operand that has no entry in a use list (its producer is missing).
const NO_SLOT: u32 = u32::MAX;

/// The uses of one node's outputs: (user, use), in no particular order. Inline for
/// two, the common case; a shared constant's list grows on the heap.
type UseList = SmallVec<[(NodeId, Use); 2]>;

/// The nodes a dead-code cascade still has to look at: the operands its removals
/// released (a handful, so inline).
type DeadStack = SmallVec<[NodeId; 16]>;

/// A computation graph.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The nodes only: the uses are in `uses`, not petgraph edges (see the module docs).
    dag: StableDiGraph<Node, ()>,
    /// Per node index, the uses of the node's outputs.
    use_lists: Vec<UseList>,
    inputs: Vec<NodeId>,
    outputs: Vec<Value>,
    output_names: Vec<String>,
    by_op: OpIndex,
    /// Per node index, how many operand slots of live nodes read one of the node's
    /// outputs: the length of its use list, kept beside it so that "is this node
    /// used?" and dead-code removal read four bytes per node, not the list or the slot.
    use_counts: Vec<u32>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Makes room for `additional` more nodes, so that a graph built node by node (an
    /// importer that knows the model's size) does not regrow and copy its node table.
    ///
    /// A quarter more is reserved on top (address space only: pages nobody writes are
    /// never resident). A rewrite adds its replacement before it removes the matched
    /// nodes, so the first rewrite of a graph loaded at its exact size would otherwise
    /// copy the whole node table into one a quarter larger (see `make_room`): at
    /// 64 k nodes, 14 MB copied and 17 MB of fresh pages, 5% of the attention passes.
    pub fn reserve(&mut self, additional: usize) {
        let room = additional + additional / 4;
        self.dag.reserve_nodes(room);
        self.use_lists.reserve(room);
        self.use_counts.reserve(room);
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.dag.node_count()
    }

    /// The node `id`, if it exists.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.dag.node_weight(id.ix())
    }

    /// The node `id`, or an error naming the id.
    pub fn try_node(&self, id: NodeId) -> Result<&Node, GraphError> {
        self.node(id)
            .ok_or_else(|| GraphError::NoSuchNode(id.index()))
    }

    /// Mutable access to a node (metadata and name only; operands change through the graph).
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.dag.node_weight_mut(id.ix())
    }

    /// Sets a node's display name.
    pub fn set_name(&mut self, id: NodeId, name: impl Into<String>) {
        if let Some(n) = self.dag.node_weight_mut(id.ix()) {
            n.name = Some(name.into().into_boxed_str());
        }
    }

    /// The metadata of `v`.
    pub fn meta(&self, v: Value) -> Result<&TensorMeta, GraphError> {
        self.try_node(v.node)?
            .outputs
            .get(v.output as usize)
            .ok_or_else(|| GraphError::NoSuchOutput {
                node: v.node.index(),
                output: v.output,
            })
    }

    /// Every live node id, in id order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.dag.node_indices().map(NodeId::of)
    }

    /// The graph inputs (`input` nodes), in declaration order.
    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    /// The graph outputs.
    pub fn outputs(&self) -> &[Value] {
        &self.outputs
    }

    /// Sets the graph outputs; every value must exist.
    pub fn set_outputs(&mut self, outputs: Vec<Value>) -> Result<(), GraphError> {
        for &v in &outputs {
            self.meta(v)?;
        }
        self.output_names = (0..outputs.len()).map(|i| format!("output_{i}")).collect();
        self.outputs = outputs;
        Ok(())
    }

    /// Sets the graph outputs with names (kept by ONNX export).
    pub fn set_named_outputs(&mut self, outputs: Vec<(String, Value)>) -> Result<(), GraphError> {
        let (names, values): (Vec<String>, Vec<Value>) = outputs.into_iter().unzip();
        self.set_outputs(values)?;
        self.output_names = names;
        Ok(())
    }

    /// The names of the graph outputs (`output_N` unless named).
    pub fn output_names(&self) -> &[String] {
        &self.output_names
    }

    /// Nodes of op `name`, in id order (the anchor index of the matcher).
    pub fn nodes_with_op<'a>(&'a self, name: &str) -> impl Iterator<Item = NodeId> + 'a {
        self.by_op.nodes(name)
    }

    /// Per node index, a dense code of the node's op (two bytes per node, for the
    /// matcher's dispatch): see [`crate::op_index`]. [`crate::op_index::VACANT`] for a
    /// free slot; indices past the end are free too.
    pub(crate) fn op_codes(&self) -> &[u16] {
        self.by_op.codes()
    }

    /// The op names behind [`Graph::op_codes`], by number (code `2 * number`, or
    /// `2 * number + 1` for a constant of one element). Numbers are never reused, so
    /// this list only grows.
    pub(crate) fn coded_ops(&self) -> impl ExactSizeIterator<Item = &'static str> + '_ {
        self.by_op.numbered()
    }

    /// How many nodes of each op, by op name.
    pub fn op_counts(&self) -> BTreeMap<&'static str, usize> {
        self.by_op.counts().collect()
    }

    /// The uses of `v` as (user, operand position), sorted ([`Graph::uses`] without
    /// the allocation and in no particular order). Graph outputs are not uses.
    pub fn uses_sorted(&self, v: Value) -> Vec<(NodeId, u32)> {
        let mut u: Vec<(NodeId, u32)> = self.uses(v).collect();
        u.sort_unstable();
        u
    }

    /// The uses of `v` as (user, operand position), in no particular order and without
    /// allocating ([`Graph::uses_sorted`] for a sorted list). Graph outputs are not
    /// uses.
    pub fn uses(&self, v: Value) -> impl Iterator<Item = (NodeId, u32)> + '_ {
        self.node_uses(v.node)
            .iter()
            .filter(move |(_, u)| u.output == v.output)
            .map(|&(user, u)| (user, u.operand))
    }

    /// The uses of every output of `id`, as (user, [`Use`]: output read and operand
    /// position), in no particular order (empty for a node that does not exist). One
    /// entry per operand slot: a user reading `id` twice appears twice
    /// ([`Graph::node_users`] lists each user once).
    pub fn node_uses(&self, id: NodeId) -> &[(NodeId, Use)] {
        self.use_lists.get(id.index()).map_or(&[], |l| l.as_slice())
    }

    /// The position of operand `operand`'s use in its producer's use list (verifier).
    pub(crate) fn use_slot(&self, id: NodeId, operand: usize) -> Option<usize> {
        let slot = *self.node(id)?.slots.get(operand)?;
        (slot != NO_SLOT).then_some(slot as usize)
    }

    /// True when no output of `id` has a use ([`Graph::node_use_count`] is 0) or is a
    /// graph output. (A graph input can be unused; the dead-code removal still keeps it.)
    pub fn node_is_unused(&self, id: NodeId) -> bool {
        self.node_use_count(id) == 0 && !self.outputs.iter().any(|o| o.node == id)
    }

    /// The number of uses of `v` (operand slots reading it; graph outputs not counted).
    pub fn use_count(&self, v: Value) -> usize {
        match self.node(v.node) {
            // The node's one output has all its uses: the count kept per node says it.
            Some(n) if n.outputs.len() == 1 && v.output == 0 => self.node_use_count(v.node),
            _ => self.uses(v).count(),
        }
    }

    /// True when `v` is a graph output.
    pub fn is_output(&self, v: Value) -> bool {
        self.outputs.contains(&v)
    }

    /// The distinct user nodes of any output of `id` (each once, sorted; graph outputs
    /// not counted).
    pub fn node_users(&self, id: NodeId) -> BTreeSet<NodeId> {
        self.node_uses(id).iter().map(|&(user, _)| user).collect()
    }

    /// Adds a graph input named `name`.
    pub fn add_input(&mut self, name: impl Into<String>, meta: TensorMeta) -> Value {
        let name = name.into();
        let id = self.insert(Node {
            op: &ops::builtin::INPUT,
            attrs: Box::new([AttrValue::Str(name.clone())]),
            operands: SmallVec::new(),
            slots: SmallVec::new(),
            outputs: smallvec::smallvec![meta],
            name: Some(name.into_boxed_str()),
            payload: None,
        });
        self.inputs.push(id);
        Value::from(id)
    }

    /// Adds a constant; the tensor's storage is shared, not copied.
    pub fn add_constant(&mut self, value: Tensor) -> Value {
        let meta = TensorMeta::of(&value);
        Value::from(self.insert(Node {
            op: &ops::builtin::CONSTANT,
            attrs: Box::new([]),
            operands: SmallVec::new(),
            slots: SmallVec::new(),
            outputs: smallvec::smallvec![meta],
            name: None,
            payload: Some(Box::new(Payload::Tensor(value))),
        }))
    }

    /// Adds a node of `op`: checks operand count and attribute kinds, fills defaulted
    /// attributes, and infers output metadata. `attrs` are by name; missing ones take
    /// their defaults.
    pub fn add_op(
        &mut self,
        op: &'static OpDef,
        operands: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<NodeId, GraphError> {
        let values = normalize_attrs(op, attrs)?;
        self.add_node(op, operands.to_vec(), values, None)
    }

    /// Adds an `opaque` node (an op graphrw does not model) with the metadata given per
    /// output and the foreign record its export needs; `known` is derived from
    /// `foreign.types`.
    pub fn add_opaque(
        &mut self,
        op_type: &str,
        domain: &str,
        operands: Vec<Value>,
        outputs: Vec<TensorMeta>,
        foreign: Foreign,
        name: Option<String>,
    ) -> NodeId {
        let known = (0..outputs.len())
            .map(|i| i64::from(foreign.types.get(i).is_none_or(Option::is_none)))
            .collect();
        self.insert(Node {
            op: &ops::builtin::OPAQUE,
            attrs: Box::new([
                AttrValue::Str(op_type.to_string()),
                AttrValue::Str(domain.to_string()),
                AttrValue::Ints(known),
            ]),
            operands: small(operands),
            slots: SmallVec::new(),
            outputs: small(outputs),
            name: name.map(String::into_boxed_str),
            payload: Some(Box::new(Payload::Foreign(foreign))),
        })
    }

    /// Adds a node whose attributes are already aligned with `op`'s signature.
    pub fn add_node(
        &mut self,
        op: &'static OpDef,
        operands: Vec<Value>,
        attrs: Vec<AttrValue>,
        name: Option<String>,
    ) -> Result<NodeId, GraphError> {
        let outputs = self.infer_node(op, &operands, &attrs, name.as_deref())?;
        Ok(self.insert(Node {
            op,
            attrs: attrs.into_boxed_slice(),
            operands: small(operands),
            slots: SmallVec::new(),
            outputs: small(outputs),
            name: name.map(String::into_boxed_str),
            payload: None,
        }))
    }

    /// [`Graph::add_node`] with the operands already in the node's inline list and no
    /// name (the builder's nodes: a rewrite builds a few per match, and a `Vec` of
    /// operands per node was an allocation and a free for nothing).
    pub(crate) fn add_node_inline(
        &mut self,
        op: &'static OpDef,
        operands: SmallVec<[Value; 4]>,
        attrs: Vec<AttrValue>,
    ) -> Result<NodeId, GraphError> {
        let outputs = self.infer_node(op, &operands, &attrs, None)?;
        Ok(self.insert(Node {
            op,
            attrs: attrs.into_boxed_slice(),
            operands,
            slots: SmallVec::new(),
            outputs: small(outputs),
            name: None,
            payload: None,
        }))
    }

    /// [`Graph::add_node`] for importers that hold the operands in a slice and the name
    /// as a `&str`: the operands go straight into the node's inline list and the name
    /// is allocated once at its size (no intermediate `Vec` or `String` per node).
    pub(crate) fn add_node_named(
        &mut self,
        op: &'static OpDef,
        operands: &[Value],
        attrs: Vec<AttrValue>,
        name: &str,
    ) -> Result<NodeId, GraphError> {
        let outputs = self.infer_node(op, operands, &attrs, Some(name))?;
        Ok(self.insert(Node {
            op,
            attrs: attrs.into_boxed_slice(),
            operands: SmallVec::from_slice(operands),
            slots: SmallVec::new(),
            outputs: small(outputs),
            name: Some(Box::from(name)),
            payload: None,
        }))
    }

    /// Adds a node with the metadata given, checking nothing. For importers that verify
    /// afterwards and for tests of the verifier; prefer [`Graph::add_node`].
    pub fn add_node_unchecked(
        &mut self,
        op: &'static OpDef,
        operands: Vec<Value>,
        attrs: Vec<AttrValue>,
        outputs: Vec<TensorMeta>,
    ) -> NodeId {
        self.insert(Node {
            op,
            attrs: attrs.into_boxed_slice(),
            operands: small(operands),
            slots: SmallVec::new(),
            outputs: small(outputs),
            name: None,
            payload: None,
        })
    }

    /// Checks a would-be node and infers its outputs' metadata.
    pub fn infer_node(
        &self,
        op: &'static OpDef,
        operands: &[Value],
        attrs: &[AttrValue],
        name: Option<&str>,
    ) -> Result<Vec<TensorMeta>, GraphError> {
        let at = || name.map(str::to_string);
        check_signature(op, operands.len(), attrs).map_err(|message| GraphError::Signature {
            op: op.name,
            node: at(),
            message,
        })?;
        // Inline for the usual few operands: one allocation less per node built.
        let metas = operands
            .iter()
            .map(|&v| self.meta(v))
            .collect::<Result<SmallVec<[&TensorMeta; 4]>, _>>()?;
        let view = Attrs::new(op.attrs, attrs);
        let out = match op.infer {
            Infer::Fn(f) => f(&metas, &view).map_err(|e| GraphError::Infer {
                op: op.name,
                node: at(),
                inputs: metas.iter().map(|m| m.to_string()).collect(),
                message: e.0,
            })?,
            Infer::Like => crate::builder::infer_like(op, &metas, &view)?,
            Infer::Declared => {
                return Err(GraphError::Signature {
                    op: op.name,
                    node: at(),
                    message: "its metadata is declared: inputs, constants and opaque nodes are added with add_input, add_constant and add_opaque".into(),
                })
            }
        };
        if let Some(checked) = op
            .builtin
            .filter(|b| ops::infer::CONSTANT_CHECKED.contains(b))
        {
            let constants: Vec<Option<&Tensor>> = operands
                .iter()
                .map(|v| {
                    self.node(v.node)
                        .filter(|n| n.op().is(ops::Op::Constant))
                        .and_then(Node::payload)
                })
                .collect();
            ops::infer::check_constants(checked, &metas, &constants, &view).map_err(|e| {
                GraphError::Infer {
                    op: op.name,
                    node: at(),
                    inputs: metas.iter().map(|m| m.to_string()).collect(),
                    message: e.0,
                }
            })?;
        }
        let expected = op.output_count(attrs);
        if out.len() != expected {
            return Err(GraphError::Infer {
                op: op.name,
                node: at(),
                inputs: metas.iter().map(|m| m.to_string()).collect(),
                message: format!(
                    "inference gave {} outputs, the op has {expected}",
                    out.len()
                ),
            });
        }
        Ok(out)
    }

    fn insert(&mut self, node: Node) -> NodeId {
        let op = node.op.name;
        let scalar = node.is_scalar_constant();
        let operands = node.operands.len();
        self.make_room();
        let id = NodeId::of(self.dag.add_node(node));
        // Sized first: an unchecked node may name its own (reused) index as an operand.
        if id.index() >= self.use_counts.len() {
            self.use_counts.resize(id.index() + 1, 0);
            self.use_lists.resize_with(id.index() + 1, UseList::new);
        }
        for i in 0..operands {
            let v = self.dag[id.ix()].operands[i];
            let slot = if self.dag.contains_node(v.node.ix()) {
                self.link(v, id, i as u32)
            } else {
                NO_SLOT
            };
            self.dag[id.ix()].slots.push(slot);
        }
        self.by_op.insert(op, id, scalar);
        id
    }

    /// Before a node is added: when no slot is free and the node table is full, grows
    /// it (and the per-index columns) by a quarter, not by the doubling `Vec` would do.
    ///
    /// An importer reserves the table at the model's size, and a rewrite adds its
    /// replacement before it removes the matched nodes: the first rewrite of a freshly
    /// loaded graph would double a table of 216-byte slots that the removals then leave
    /// mostly empty (in a 64 k-node model, 14 MB the optimize never used). A quarter keeps
    /// growth geometric (each slot is copied four times on average while a graph grows
    /// from nothing) and the unused part to a fifth of the table.
    fn make_room(&mut self) {
        // Every index ever handed out is below `use_counts.len()` (`insert` sizes it),
        // which is the length of petgraph's node table: with fewer live nodes than that,
        // a free slot is reused and nothing grows.
        let len = self.use_counts.len();
        if self.dag.node_count() < len {
            return;
        }
        let extra = (len / 4).max(16);
        if self.dag.capacity().0 <= len {
            self.dag.reserve_exact_nodes(extra);
        }
        if self.use_lists.capacity() <= len {
            self.use_lists.reserve_exact(extra);
        }
        if self.use_counts.capacity() <= len {
            self.use_counts.reserve_exact(extra);
        }
    }

    /// Records that `value` is operand `operand` of `user` in the producer's use list,
    /// and counts the use; returns the entry's position (the user's slot for it).
    fn link(&mut self, value: Value, user: NodeId, operand: u32) -> u32 {
        // Every live node went through `insert`, which sized the columns for it.
        let list = &mut self.use_lists[value.node.index()];
        list.push((
            user,
            Use {
                output: value.output,
                operand,
            },
        ));
        self.use_counts[value.node.index()] += 1;
        // A use list is at most the operand slots of the graph, which node ids (u32)
        // bound several times over; `NO_SLOT` is never a real position in practice.
        u32::try_from(list.len() - 1).unwrap_or(NO_SLOT)
    }

    /// Removes the use list entry at `slot` of `producer` (swap-remove), fixes the slot
    /// of the entry moved into its place, and forgets the use. O(1).
    fn unlink(&mut self, producer: NodeId, slot: u32) {
        let Some(list) = self.use_lists.get_mut(producer.index()) else {
            return;
        };
        let slot = slot as usize;
        if slot >= list.len() {
            return;
        }
        list.swap_remove(slot);
        if let Some(&(moved, u)) = list.get(slot) {
            if let Some(s) = self
                .dag
                .node_weight_mut(moved.ix())
                .and_then(|n| n.slots.get_mut(u.operand as usize))
            {
                *s = slot as u32;
            }
        }
        if let Some(n) = self.use_counts.get_mut(producer.index()) {
            *n = n.saturating_sub(1);
        }
    }

    /// Removes node `id` from the dag and the indexes, whether used or not (callers
    /// check), unlinking the uses its operands had. `None` when there is no such node.
    /// Costs the node's own degree.
    fn detach(&mut self, id: NodeId) -> Option<Node> {
        let operands = self.dag.node_weight(id.ix())?.operands.len();
        for i in 0..operands {
            // Read afresh each time: unlinking one operand may move another entry of
            // this node (`x.mul(x)`) within the same use list, and fix its slot.
            let Some(n) = self.dag.node_weight(id.ix()) else {
                break;
            };
            if let (Some(v), Some(&slot)) = (n.operands.get(i), n.slots.get(i)) {
                if slot != NO_SLOT {
                    self.unlink(v.node, slot);
                }
            }
        }
        let node = self.dag.remove_node(id.ix())?;
        if let Some(list) = self.use_lists.get_mut(id.index()) {
            // Empty for the unused nodes callers remove; freed either way.
            *list = UseList::new();
        }
        self.by_op.remove(node.op.name, id);
        Some(node)
    }

    /// The number of uses of every output of `id` together: operand slots, over all
    /// nodes, that read one (graph outputs not counted; 0 for a node that does not
    /// exist). Kept per node, so it costs one read.
    pub fn node_use_count(&self, id: NodeId) -> usize {
        self.use_counts.get(id.index()).map_or(0, |&n| n as usize)
    }

    /// Replaces operand `index` of `node` by `value`, without checking metadata or
    /// cycles (the rewriter checks whole patches; the verifier checks graphs).
    pub fn set_operand(
        &mut self,
        node: NodeId,
        index: usize,
        value: Value,
    ) -> Result<(), GraphError> {
        let n = self.try_node(node)?;
        if index >= n.operands.len() {
            return Err(GraphError::NoSuchOperand {
                node: node.index(),
                operand: index,
            });
        }
        let (old, slot) = (
            n.operands[index],
            n.slots.get(index).copied().unwrap_or(NO_SLOT),
        );
        self.meta(value)?;
        if slot != NO_SLOT {
            self.unlink(old.node, slot);
        }
        let slot = self.link(value, node, index as u32);
        if let Some(n) = self.dag.node_weight_mut(node.ix()) {
            n.operands[index] = value;
            n.slots[index] = slot;
        }
        Ok(())
    }

    /// Makes every user of `old` (and the graph outputs) use `new` instead.
    pub fn replace_all_uses(&mut self, old: Value, new: Value) -> Result<(), GraphError> {
        self.meta(new)?;
        for (user, operand) in self.uses_sorted(old) {
            self.set_operand(user, operand as usize, new)?;
        }
        self.redirect_output(old, new);
        Ok(())
    }

    /// Makes graph outputs that are `old` be `new` (node uses are left alone).
    pub fn redirect_output(&mut self, old: Value, new: Value) {
        for o in &mut self.outputs {
            if *o == old {
                *o = new;
            }
        }
    }

    /// Removes a node that nothing uses (neither a node nor the graph outputs).
    pub fn remove_node(&mut self, id: NodeId) -> Result<Node, GraphError> {
        let node = self.try_node(id)?;
        if let Some(user) = self.node_uses(id).iter().map(|&(user, _)| user).min() {
            return Err(GraphError::StillUsed {
                node: id.index(),
                op: node.op.name,
                user: user.index(),
            });
        }
        if self.outputs.iter().any(|o| o.node == id) {
            return Err(GraphError::IsOutput {
                node: id.index(),
                op: node.op.name,
            });
        }
        let node = self
            .detach(id)
            .ok_or_else(|| GraphError::NoSuchNode(id.index()))?;
        if *node.op == ops::builtin::INPUT {
            self.inputs.retain(|&i| i != id);
        }
        Ok(node)
    }

    /// Removes every node that no graph output depends on, except graph inputs.
    /// Returns how many were removed.
    ///
    /// In a DAG the dead nodes are exactly those that removing unused nodes, over and
    /// over, takes away: every user of a dead node is dead too. The graph keeps a use
    /// count and an op code per node index, so the unused nodes are found by reading
    /// those two dense columns (six bytes per node), and only the slots of the nodes
    /// removed are read; each removal releases its operands' uses, which may free them
    /// in turn ([`Graph::remove_if_dead`]).
    pub fn remove_dead(&mut self) -> usize {
        let mut removed = 0;
        let mut stack = DeadStack::new();
        for i in 0..self.use_counts.len() {
            let live = self.by_op.codes().get(i).is_some_and(|&c| c != VACANT);
            if live && self.use_counts[i] == 0 {
                removed += self.remove_dead_from(NodeId::new(i), &mut stack);
            }
        }
        removed
    }

    /// Removes `id` if nothing uses it and it is neither a graph input nor a graph
    /// output; then, the same way, the operands that this leaves unused, and so on.
    /// Returns how many nodes were removed (0 when `id` is used, kept or absent).
    ///
    /// The rewriter calls it on the nodes a replacement takes away, so that what they
    /// alone used goes at once, while it is still in cache.
    pub fn remove_if_dead(&mut self, id: NodeId) -> usize {
        self.remove_dead_from(id, &mut SmallVec::new())
    }

    /// True when `id` exists, nothing uses it, and it is neither a graph input nor a
    /// graph output.
    fn is_dead(&self, id: NodeId) -> bool {
        self.node(id).is_some_and(|n| *n.op != ops::builtin::INPUT) && self.node_is_unused(id)
    }

    /// [`Graph::remove_if_dead`] with a stack to reuse (left empty).
    fn remove_dead_from(&mut self, id: NodeId, stack: &mut DeadStack) -> usize {
        let mut removed = 0;
        stack.push(id);
        while let Some(n) = stack.pop() {
            // A node pushed twice (it fed the same user twice) is gone the second time.
            if !self.is_dead(n) {
                continue;
            }
            let Some(node) = self.detach(n) else {
                continue;
            };
            removed += 1;
            stack.extend(
                node.operands
                    .iter()
                    .map(|v| v.node)
                    .filter(|&p| self.node_use_count(p) == 0),
            );
        }
        removed
    }

    /// A node on a cycle, if the graph has one: the node [`Graph::topo_order`] would
    /// name, found without ordering anything (the verifier's check). The nodes whose
    /// producers are all ordered are taken from a stack rather than a heap: which nodes
    /// Kahn's algorithm reaches, and so the operands left over on a cycle, do not depend
    /// on the order it takes them in.
    pub(crate) fn node_on_cycle(&self) -> Option<NodeId> {
        let mut indegree: Vec<u32> = vec![0; self.use_lists.len()];
        let mut ready = Vec::new();
        for n in self.dag.node_indices().map(NodeId::of) {
            let d = self.dag[n.ix()]
                .slots
                .iter()
                .filter(|&&s| s != NO_SLOT)
                .count();
            if d == 0 {
                ready.push(n);
            }
            if let Some(slot) = indegree.get_mut(n.index()) {
                *slot = d as u32;
            }
        }
        let mut reached = 0;
        while let Some(n) = ready.pop() {
            reached += 1;
            for &(user, _) in self.node_uses(n) {
                if let Some(d) = indegree.get_mut(user.index()) {
                    *d = d.saturating_sub(1);
                    if *d == 0 {
                        ready.push(user);
                    }
                }
            }
        }
        if reached == self.node_count() {
            return None;
        }
        Some(
            self.dag
                .node_indices()
                .map(NodeId::of)
                .find(|n| indegree.get(n.index()).is_some_and(|&d| d > 0))
                .unwrap_or(NodeId::new(0)),
        )
    }

    /// The nodes in a deterministic topological order (among ready nodes, the smallest
    /// id first), or the id of a node on a cycle.
    ///
    /// Ids are scanned upwards and a node is taken when the scan reaches it ready; only
    /// a node that becomes ready after the scan passed it (its operand has a larger id,
    /// as after a rewrite) waits in a heap, which holds ids below the scan and so is
    /// always taken first. The order is the one a heap of every ready node gives, but
    /// a graph whose operands mostly come before their users (a loaded model) is
    /// ordered in one linear pass.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, GraphError> {
        /// The in-degree of an id with no node.
        const VACANT_ID: u32 = u32::MAX;
        let bound = petgraph::visit::NodeIndexable::node_bound(&self.dag).max(self.use_lists.len());
        // By node index: the operands still to be ordered (linked ones: a missing
        // producer is the verifier's error, not an ordering constraint).
        let mut indegree: Vec<u32> = vec![VACANT_ID; bound];
        for n in self.dag.node_indices().map(NodeId::of) {
            let d = self.dag[n.ix()]
                .slots
                .iter()
                .filter(|&&s| s != NO_SLOT)
                .count();
            indegree[n.index()] = d as u32;
        }
        let mut order = Vec::with_capacity(self.node_count());
        let mut late = BinaryHeap::new();
        let mut scan = 0;
        loop {
            let n = match late.pop() {
                Some(Reverse(n)) => n,
                None => {
                    while scan < bound && indegree[scan] != 0 {
                        scan += 1;
                    }
                    if scan == bound {
                        break;
                    }
                    scan += 1;
                    scan - 1
                }
            };
            order.push(NodeId::new(n));
            for &(user, _) in self.node_uses(NodeId::new(n)) {
                let u = user.index();
                if let Some(d) = indegree.get_mut(u).filter(|d| **d != VACANT_ID) {
                    *d = d.saturating_sub(1);
                    if *d == 0 && u < scan {
                        late.push(Reverse(u));
                    }
                }
            }
        }
        if order.len() != self.node_count() {
            let on_cycle = self
                .dag
                .node_indices()
                .find(|n| indegree.get(n.index()).is_some_and(|&d| d > 0))
                .map_or(0, |n| n.index());
            return Err(GraphError::Cycle { node: on_cycle });
        }
        Ok(order)
    }
}

/// `v` as a small vector: inline when it fits (its elements copied at once, not pushed
/// one by one), else on `v`'s own heap buffer (not copied at all).
fn small<A: smallvec::Array>(v: Vec<A::Item>) -> SmallVec<A> {
    if v.len() > A::size() || v.capacity() <= A::size() {
        SmallVec::from_vec(v)
    } else {
        v.into_iter().collect()
    }
}

/// Checks operand count and attribute kinds against `op`'s signature.
pub(crate) fn check_signature(
    op: &OpDef,
    operand_count: usize,
    attrs: &[AttrValue],
) -> Result<(), String> {
    let (min, max) = op.operand_range();
    if operand_count < min || max.is_some_and(|m| operand_count > m) {
        let expected = match max {
            Some(m) if m == min => format!("{min}"),
            Some(m) => format!("{min} to {m}"),
            None => format!("at least {min}"),
        };
        let names: Vec<String> = op
            .operands
            .iter()
            .map(|o| match o.arity {
                Arity::Required => o.name.to_string(),
                Arity::Optional => format!("{}?", o.name),
                Arity::Variadic => format!("{}...", o.name),
            })
            .collect();
        return Err(format!(
            "takes {expected} operands ({}), found {operand_count}",
            names.join(", ")
        ));
    }
    if attrs.len() != op.attrs.len() {
        return Err(format!(
            "has {} attributes, the node carries {}",
            op.attrs.len(),
            attrs.len()
        ));
    }
    for (spec, v) in op.attrs.iter().zip(attrs) {
        if !v.fits(spec) {
            return Err(format!(
                "attribute `{}` should be {}, found {} {v}",
                spec.name,
                spec.kind,
                v.kind_name()
            ));
        }
    }
    Ok(())
}

/// [`normalize_attrs`] that moves the given values into the result instead of cloning
/// them (each left [`AttrValue::Null`] in `given`): the same values, the same errors.
pub(crate) fn normalize_attrs_taking(
    op: &OpDef,
    given: &mut [(&str, AttrValue)],
) -> Result<Vec<AttrValue>, GraphError> {
    if given.iter().any(|(name, _)| op.attr_index(name).is_none()) {
        // The message is `normalize_attrs`' own.
        return normalize_attrs(op, given);
    }
    let mut out = Vec::with_capacity(op.attrs.len());
    for spec in op.attrs {
        // Signature names are distinct, so each given value is taken at most once, and
        // the first one of a name is taken as `normalize_attrs` clones the first.
        match given.iter_mut().find(|(n, _)| *n == spec.name) {
            Some((_, v)) => out.push(std::mem::replace(v, AttrValue::Null)),
            None => out.push(spec.default.value().ok_or_else(|| GraphError::Signature {
                op: op.name,
                node: None,
                message: format!("attribute `{}` is required", spec.name),
            })?),
        }
    }
    Ok(out)
}

/// Aligns named attributes with `op`'s signature, filling defaults.
pub fn normalize_attrs(
    op: &OpDef,
    given: &[(&str, AttrValue)],
) -> Result<Vec<AttrValue>, GraphError> {
    for (name, _) in given {
        if op.attr_index(name).is_none() {
            let known: Vec<&str> = op.attrs.iter().map(|a| a.name).collect();
            return Err(GraphError::Signature {
                op: op.name,
                node: None,
                message: format!("has no attribute `{name}` (it has: {})", known.join(", ")),
            });
        }
    }
    op.attrs
        .iter()
        .map(|spec| match given.iter().find(|(n, _)| *n == spec.name) {
            Some((_, v)) => Ok(v.clone()),
            None => spec.default.value().ok_or_else(|| GraphError::Signature {
                op: op.name,
                node: None,
                message: format!("attribute `{}` is required", spec.name),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::DType;

    /// Big graphs are scanned slot by slot: a node slot that grows (a field added
    /// inline, an inline capacity raised) costs every pass memory traffic. 208 bytes
    /// today: op 8, attributes 16, operands 40, their use slots 24, one output's
    /// metadata inline 96 (four dims of 16 bytes: a size, or one thin pointer to a
    /// symbol's name or an expression), name 16, payload 8.
    #[test]
    fn a_node_slot_stays_small() {
        assert!(std::mem::size_of::<crate::meta::Dim>() <= 16);
        assert!(
            std::mem::size_of::<Node>() <= 208,
            "{}",
            std::mem::size_of::<Node>()
        );
        assert!(std::mem::size_of::<UseList>() <= 32);
    }

    /// The verifier's cycle check names the node `topo_order` names.
    #[test]
    fn node_on_cycle_agrees_with_topo_order() {
        let mut g = Graph::new();
        let meta = TensorMeta::new(DType::F32, [2usize]);
        let x = g.add_input("x", meta.clone());
        assert_eq!(g.node_on_cycle(), None);
        let neg = &ops::builtin::NEG;
        let a = g.add_node_unchecked(neg, vec![x], vec![], vec![meta.clone()]);
        let b = g.add_node_unchecked(neg, vec![a.into()], vec![], vec![meta.clone()]);
        let c = g.add_node_unchecked(neg, vec![b.into()], vec![], vec![meta.clone()]);
        assert!(g.topo_order().is_ok());
        assert_eq!(g.node_on_cycle(), None);
        // a <- b <- a: a cycle, with c hanging below it.
        g.set_operand(a, 0, b.into()).unwrap();
        let Err(GraphError::Cycle { node }) = g.topo_order() else {
            panic!("topo_order missed the cycle");
        };
        assert_eq!(g.node_on_cycle(), Some(NodeId::new(node)));
        assert!([a, b, c].contains(&NodeId::new(node)));
    }

    /// Kahn's algorithm with every ready node in a heap: the order `topo_order` gives.
    fn heap_order(g: &Graph) -> Vec<NodeId> {
        let mut indegree: BTreeMap<NodeId, usize> = g
            .node_ids()
            .map(|n| (n, g.node(n).map_or(0, |n| n.operands().len())))
            .collect();
        let mut ready: BinaryHeap<Reverse<NodeId>> = indegree
            .iter()
            .filter(|(_, &d)| d == 0)
            .map(|(&n, _)| Reverse(n))
            .collect();
        let mut order = Vec::new();
        while let Some(Reverse(n)) = ready.pop() {
            order.push(n);
            for &(user, _) in g.node_uses(n) {
                let d = indegree.get_mut(&user).expect("live user");
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse(user));
                }
            }
        }
        order
    }

    /// The scan with a heap only for nodes made ready behind it gives the order of a
    /// heap of every ready node, on graphs whose operands often have larger ids than
    /// their users (rewired after they were built, as rewrites leave a graph).
    #[test]
    fn topo_order_is_smallest_ready_first() {
        let meta = TensorMeta::new(DType::F32, [2usize]);
        let (neg, add) = (
            ops::lookup("neg").expect("neg"),
            ops::lookup("add").expect("add"),
        );
        for seed in 1..20u64 {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut next = |n: usize| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 33) as usize % n
            };
            let mut g = Graph::new();
            let x = g.add_input("x", meta.clone());
            // Each node has a level; its operands have lower ones, so any wiring that
            // keeps to that stays acyclic.
            let mut nodes: Vec<(NodeId, usize)> = Vec::new();
            for _ in 0..60 {
                let level = 1 + next(1000);
                let below: Vec<Value> = nodes
                    .iter()
                    .filter(|&&(_, l)| l < level)
                    .map(|&(n, _)| Value::from(n))
                    .collect();
                let pick = |r: usize| below.get(r % below.len().max(1)).copied().unwrap_or(x);
                let id = if next(2) == 0 {
                    g.add_node_unchecked(neg, vec![pick(next(97))], vec![], vec![meta.clone()])
                } else {
                    let (a, b) = (pick(next(97)), pick(next(97)));
                    g.add_node_unchecked(add, vec![a, b], vec![], vec![meta.clone()])
                };
                nodes.push((id, level));
            }
            // Rewire operands to nodes built later (larger ids) of a lower level.
            for _ in 0..40 {
                let (u, lu) = nodes[next(nodes.len())];
                let (v, lv) = nodes[next(nodes.len())];
                if lv < lu {
                    g.set_operand(u, 0, v.into()).expect("rewire");
                }
            }
            let order = g.topo_order().expect("acyclic");
            assert_eq!(order, heap_order(&g), "seed {seed}");
            assert_eq!(order.len(), g.node_count());
        }
    }

    /// A use list entry that no operand points back to is found (the verifier counts
    /// entries against operand slots, then reads each list to name the node).
    #[test]
    fn verify_finds_a_use_list_entry_without_its_operand() {
        let mut g = Graph::new();
        let meta = TensorMeta::new(DType::F32, [2usize]);
        let x = g.add_input("x", meta.clone());
        let neg = &ops::builtin::NEG;
        let a = g.add_node_unchecked(neg, vec![x], vec![], vec![meta.clone()]);
        let b = g.add_node_unchecked(neg, vec![a.into()], vec![], vec![meta.clone()]);
        g.set_outputs(vec![b.into()]).expect("outputs");
        assert!(crate::verify::verify_all(&g).is_empty());
        // `b` listed as a user of `a` a second time (the count kept in step).
        let extra = (
            b,
            Use {
                output: 0,
                operand: 0,
            },
        );
        g.use_lists[a.index()].push(extra);
        g.use_counts[a.index()] += 1;
        let errors = crate::verify::verify_all(&g);
        assert!(
            errors.iter().any(|e| e
                .to_string()
                .contains("its use list names a use that its user's operands do not have")),
            "{errors:?}"
        );
        assert!(crate::verify::verify_ordered(&g).is_err());
    }
}
