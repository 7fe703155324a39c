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

mod assume;
mod build;
pub(crate) mod draft;
mod edit;
mod id;
mod order;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use petgraph::stable_graph::StableDiGraph;
use smallvec::SmallVec;

use graphrw_kernels::Tensor;

pub use crate::foreign::Foreign;
use crate::meta::TensorMeta;
use crate::op_index::{OpIndex, VACANT};
use crate::ops::{self, Arity, AttrValue, Attrs, Infer, OpDef, OpId};
use crate::GraphError;
pub use id::{NodeId, Value};

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
    /// The equalities between symbols that inference assumed, in the order made (see
    /// [`crate::assume`]); already substituted through the nodes' metadata.
    assumptions: Vec<crate::assume::Assumption>,
    /// The broadcast dims inference needed equal to one of their members (see
    /// [`crate::assume`]); checked at every run.
    requirements: Vec<crate::assume::Requirement>,
    /// The lower bounds every run meets (see [`crate::ir::sym::in_force`]): inference
    /// decides with them, the interpreter checks them.
    bounds: crate::ir::sym::bounds::Bounds,
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

    /// Nodes of op `name`, in id order (for callers that have the op as text; with the
    /// op at hand, [`Graph::nodes_of`]).
    pub fn nodes_with_op<'a>(&'a self, name: &str) -> impl Iterator<Item = NodeId> + 'a {
        OpId::find(name)
            .into_iter()
            .flat_map(move |op| self.by_op.nodes(op))
    }

    /// Nodes of op `op` (an [`OpId`], a built-in [`Op`](crate::ops::Op) or a definition),
    /// in id order (the anchor index of the matcher).
    pub fn nodes_of<'a>(&'a self, op: impl Into<OpId>) -> impl Iterator<Item = NodeId> + 'a {
        self.by_op.nodes(op.into())
    }

    /// Per node index, a dense code of the node's op (two bytes per node, for the
    /// matcher's dispatch): see [`crate::op_index`]. [`crate::op_index::VACANT`] for a
    /// free slot; indices past the end are free too.
    pub(crate) fn op_codes(&self) -> &[u16] {
        self.by_op.codes()
    }

    /// The ops behind [`Graph::op_codes`], by number (code `2 * number`, or
    /// `2 * number + 1` for a constant of one element). Numbers are never reused, so
    /// this list only grows.
    pub(crate) fn coded_ops(&self) -> impl ExactSizeIterator<Item = OpId> + '_ {
        self.by_op.numbered()
    }

    /// How many nodes of each op, by op name.
    pub fn op_counts(&self) -> BTreeMap<&'static str, usize> {
        self.by_op.counts().map(|(op, n)| (op.name(), n)).collect()
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
