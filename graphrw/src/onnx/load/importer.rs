//! The importer: its state (values by name and number, initialisers, the graph being
//! built), the reading of operands and constant inputs, node ordering, and the step
//! that imports one node (through the table, the per-op mappings of `onnx/ops/`, or as
//! an opaque node).

use crate::graph::normalize_attrs;
use crate::graph::normalize_attrs_taking;
use crate::graph::Graph;
use crate::graph::NodeId;
use crate::graph::Value;
use crate::meta::DType;
use crate::meta::SymExpr;
use crate::meta::TensorMeta;
use crate::onnx::load::node::*;
use crate::onnx::name_key::NameKey;
use crate::onnx::proto::GraphProto;
use crate::onnx::proto::TensorProto;
use crate::onnx::proto::ValueInfoProto;
use crate::onnx::table::OpMap;
use crate::onnx::tensor_pb::tensor_from_proto;
use crate::onnx::tensor_pb::MAX_DIM;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use crate::ops::OpDef;
use crate::GraphError;
use crate::Tensor;
use foldhash::HashMap as FastMap;
use graphrw_kernels::MappedFile;
use smallvec::SmallVec;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

pub(crate) struct Importer<'m> {
    pub(crate) proto: &'m GraphProto,
    pub(crate) dir: Option<&'m Path>,
    pub(crate) opset: i64,
    /// Opset version per domain (`""` for ai.onnx).
    pub(crate) opsets: HashMap<String, i64>,
    /// Declared types by value name (`value_info`, graph inputs and outputs).
    pub(crate) declared: FastMap<&'m str, &'m ValueInfoProto>,
    /// Nodes made for the ONNX node being mapped, undone when it falls back to opaque.
    pub(crate) made: Vec<NodeId>,
    pub(crate) graph: Graph,
    /// Every defined value by ONNX name; on the fast route, only graph inputs,
    /// initialisers made constants and (at the end) graph outputs: node outputs are
    /// in `by_number`.
    pub(crate) values: FastMap<&'m str, Value>,
    /// The fast route's values by number ([`crate::onnx::decode::Numbering`]): graph inputs,
    /// initialisers once they are constants, node outputs as they are named.
    pub(crate) by_number: Vec<Option<Value>>,
    /// How many numbers name graph inputs and initialisers (the rest, node outputs).
    pub(crate) predefined: usize,
    /// Initialisers not yet made constants.
    pub(crate) inits: FastMap<&'m str, &'m TensorProto>,
    /// Mask `Expand`s of graphrw's own Attention export that the loader bypassed; removed
    /// in `finish` when nothing else reads them (once, so many attentions stay linear).
    pub(crate) bypassed: Vec<NodeId>,
    /// The model file, when initialisers' `raw_data` is read in place from it.
    pub(crate) file: Option<Arc<MappedFile>>,
    /// Initialisers whose `raw_data` was left out of their message: its byte range
    /// `(offset, len)` in `file`.
    pub(crate) raw: FastMap<&'m str, (usize, usize)>,
    /// The table rows that load each `(op_type, domain)` at this opset, found once.
    pub(crate) rows: FastMap<(NameKey<'m>, NameKey<'m>), Rc<[&'static OpMap]>>,
    /// Initialisers read as constant inputs (shapes, axes) without becoming constants,
    /// decoded once: an export shares one shape tensor between every layer's Reshape.
    pub(crate) read_consts: FastMap<&'m str, Tensor>,
}

/// The values made for one ONNX node's outputs (nearly always one).
pub(crate) type Outs = SmallVec<[Value; 2]>;

/// A graph error while adding a node for `at`, with the ONNX node it was made for.
pub(crate) fn graph_error(at: &At, e: GraphError) -> OnnxError {
    OnnxError::Graph {
        op_type: crate::onnx::error::clip(at.op_type, 40),
        node: crate::onnx::error::clip(&at.name, 60),
        source: Box::new(e),
    }
}

/// The attribute names a table row reads at `opset` (the ONNX node may carry no other).
pub(crate) fn row_attrs(
    row: &'static OpMap,
    opset: i64,
    legacy: bool,
) -> impl Iterator<Item = &'static str> {
    row.args
        .iter()
        .filter(move |a| a.place.input_at(opset).is_none())
        .map(|a| a.onnx)
        .chain(row.held.iter().map(|h| h.onnx))
        .chain(row.ignored.iter().copied())
        .chain(["broadcast", "axis"].into_iter().filter(move |_| legacy))
}

/// [`limit_ints`] of the entries of a symbolic list that are known.
pub(crate) fn limit_sym(at: &At, what: &str, v: &[SymExpr]) -> Result<(), OnnxError> {
    let known: Vec<i64> = v.iter().filter_map(SymExpr::as_const).collect();
    limit_ints(at, what, &known)
}

pub(crate) fn int_attr(v: i64) -> AttrValue {
    AttrValue::Int(v)
}

pub(crate) fn limit_ints(at: &At, what: &str, v: &[i64]) -> Result<(), OnnxError> {
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
    pub(crate) fn new(
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
                // The bounds of `load_assuming`'s scope.
                graph.assume_bounds(&crate::ir::sym::in_force::current());
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

    pub(crate) fn node_name(&self, i: usize) -> String {
        let n = &self.proto.node[i];
        if n.name.is_empty() {
            format!("n{i}")
        } else {
            n.name.clone()
        }
    }

    /// Node indices in a topological order (file order when the file is sorted).
    pub(crate) fn node_order(&self) -> Result<Vec<usize>, OnnxError> {
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
    pub(crate) fn initializer(&self, t: &TensorProto, name: &str) -> Result<Tensor, OnnxError> {
        match (&self.file, self.raw.get(name)) {
            (Some(file), Some(&(offset, len))) => {
                crate::onnx::tensor_pb::tensor_from_file_raw(t, name, self.dir, file, offset, len)
            }
            _ => tensor_from_proto(t, name, self.dir),
        }
    }

    /// The value named `name`, making an initialiser a constant on first use.
    pub(crate) fn value(&mut self, name: &'m str, user: &str) -> Result<Value, OnnxError> {
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
    pub(crate) fn number(&mut self, n: u32, v: Value) {
        if n == crate::onnx::decode::ABSENT {
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
    pub(crate) fn import_batch(
        &mut self,
        b: &crate::onnx::decode::Batch<'m>,
        known: &mut Vec<Option<Value>>,
    ) -> Option<()> {
        for node in &b.nodes {
            let numbers = b.input_numbers(node);
            known.clear();
            for &n in numbers {
                known.push(match self.by_number.get(n as usize) {
                    Some(&Some(v)) => Some(v),
                    // `""`, or an initialiser not yet a constant.
                    _ if n == crate::onnx::decode::ABSENT || (n as usize) < self.predefined => None,
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
    pub(crate) fn input(&mut self, at: &At<'m, '_>, i: usize) -> Result<Option<Value>, OnnxError> {
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

    pub(crate) fn req(&mut self, at: &At<'m, '_>, i: usize) -> Result<Value, OnnxError> {
        self.input(at, i)?
            .ok_or_else(|| at.bad(format!("input {i} is required")))
    }

    /// The constant value of input `i` without adding it to the graph, or a message that
    /// it is computed at run time.
    pub(crate) fn const_input(
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

    pub(crate) fn const_ints(
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
    pub(crate) fn const_ints_unlimited(
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

    pub(crate) fn meta(&self, v: Value) -> Result<TensorMeta, OnnxError> {
        self.graph.meta(v).cloned().map_err(OnnxError::verify)
    }

    /// Adds a vocabulary node for the ONNX node `at`, named after it.
    pub(crate) fn op(
        &mut self,
        at: &At,
        op: Op,
        operands: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<Outs, OnnxError> {
        let def = op.def();
        let values = normalize_attrs(def, attrs).map_err(|e| graph_error(at, e))?;
        self.add(at, def, operands, values)
    }

    /// Adds a node of `def` with attributes aligned with its signature for the ONNX
    /// node `at`, named after it; returns its outputs.
    pub(crate) fn add(
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
    pub(crate) fn op_taking(
        &mut self,
        at: &At,
        def: &'static OpDef,
        operands: &[Value],
        attrs: &mut [(&str, AttrValue)],
    ) -> Result<Outs, OnnxError> {
        let values = normalize_attrs_taking(def, attrs).map_err(|e| graph_error(at, e))?;
        self.add(at, def, operands, values)
    }

    pub(crate) fn op1(
        &mut self,
        at: &At,
        op: Op,
        operands: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<Value, OnnxError> {
        self.op(at, op, operands, attrs)?
            .first()
            .copied()
            .ok_or_else(|| at.err(format!("`{op}` made no output")))
    }

    pub(crate) fn scalar(&mut self, dtype: DType, value: f64) -> Value {
        let v = self.graph.add_constant(Tensor::full(dtype, &[], value));
        self.made.push(v.node);
        v
    }

    /// Imports one node, its shape arithmetic folded with the graph's bounds in force;
    /// the bounds the node proves (a division by a dim) join the graph's.
    pub(crate) fn import_node(&mut self, at: &At<'m, '_>) -> Result<(), OnnxError> {
        let bounds = self.graph.bounds().clone();
        let (r, proven) = crate::ir::sym::in_force::with(&bounds, || self.import_node_in_force(at));
        self.graph.assume_bounds(&proven);
        r
    }

    fn import_node_in_force(&mut self, at: &At<'m, '_>) -> Result<(), OnnxError> {
        let default_domain = at.domain.is_empty() || at.domain == "ai.onnx";
        let contrib = crate::onnx::dialect::is_contrib(at.op_type, at.domain);
        if !(default_domain || contrib) || self.reads_unknown(at) {
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
    pub(crate) fn undo(&mut self, mark: usize) -> Result<(), OnnxError> {
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
    pub(crate) fn reads_unknown(&self, at: &At<'m, '_>) -> bool {
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

    /// Names output value `v` of the node `at` `name`. A name already defined is an
    /// error: the plain route's `node_order` finds those before any node is imported,
    /// the fast route (which does not order) here, and then leaves it to the plain route.
    ///
    /// On the fast route (`at.out_numbers`, for output `j`) the value is recorded by
    /// number: the reader already refused a name defined twice.
    pub(crate) fn name_output(
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

    pub(crate) fn finish(mut self) -> Result<Graph, OnnxError> {
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
            .nodes_with_op(Op::Constant.name())
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
