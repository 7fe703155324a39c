//! The exporter: its state (names, initialisers, opsets, the node sink), naming, and the
//! writing of one node (through the table, the per-op forms of `onnx/ops/`, or as an
//! opaque node or a function call).

use crate::graph::Graph;
use crate::graph::NodeId;
use crate::graph::Value;
use crate::meta::normalize_axis;
use crate::meta::DType;
use crate::meta::TensorMeta;
use crate::onnx::dialect::{BASE_OPSET, FUNCTION_DOMAIN, IR_VERSION};
use crate::onnx::encode::Attr;
use crate::onnx::encode::InitBytes;
use crate::onnx::encode::NodeParts;
use crate::onnx::encode::NodeSink;
use crate::onnx::proto::FunctionProto;
use crate::onnx::proto::GraphProto;
use crate::onnx::proto::ModelProto;
use crate::onnx::proto::OperatorSetIdProto;
use crate::onnx::proto::TensorProto;
use crate::onnx::proto::TypeProto;
use crate::onnx::proto::ValueInfoProto;
use crate::onnx::save::names::*;
use crate::onnx::table::Absent;
use crate::onnx::table::HeldValues;
use crate::onnx::table::OnnxKind;
use crate::onnx::table::OpMap;
use crate::onnx::table::Quirk;
use crate::onnx::table::Shape;
use crate::onnx::tensor_pb::dtype_to_onnx;
use crate::onnx::tensor_pb::tensor_to_proto;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::InferError;
use crate::ops::Op;
#[cfg(debug_assertions)]
use crate::printer::Names;
use crate::Tensor;
use prost::Message;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt::Write as _;

pub(crate) struct Exporter<'g> {
    pub(crate) graph: &'g Graph,
    /// The order nodes are written in: the printer's ([`crate::printer::Names::order`]).
    pub(crate) order: Vec<NodeId>,
    /// The printer's names, to check the exporter spells them alike (debug builds).
    #[cfg(debug_assertions)]
    pub(crate) printer: Names,
    pub(crate) names: ValueNames,
    /// The text of every [`Name`].
    pub(crate) arena: Arena,
    pub(crate) taken: NameSet,
    pub(crate) node_names: NameSet,
    pub(crate) nodes: NodeSink,
    pub(crate) inits: Vec<TensorProto>,
    /// Where small int64 initialisers are encoded straight away (the writers' fast
    /// path; `None`: they are messages in `inits`).
    pub(crate) init_bytes: Option<InitBytes>,
    pub(crate) inputs: Vec<ValueInfoProto>,
    /// Graph outputs that need an `Identity` (source value name, output name).
    pub(crate) identities: Vec<(Name, Name)>,
    pub(crate) opset: i64,
    /// The ONNX name of the node being written, and the vocabulary op.
    pub(crate) cur: String,
    pub(crate) cur_op: &'static str,
    /// Room to spell a name in before it is made unique.
    pub(crate) scratch: String,
    /// The next numbers of the printer's `t` and `c` names.
    pub(crate) printed: (u32, u32),
    /// Model-local functions written so far, callees before callers.
    pub(crate) functions: Vec<FunctionProto>,
    /// Function name by encoded body, so equal bodies share one function.
    pub(crate) function_names: HashMap<Vec<u8>, String>,
    /// Function name by the op, operand metadata and attributes of a node written as
    /// a call, so that a like node is not decomposed again.
    pub(crate) function_calls: HashMap<String, String>,
    /// Declared types of opaque nodes' outputs (ONNX cannot infer them).
    pub(crate) value_infos: Vec<ValueInfoProto>,
    /// Opset imports of the other domains opaque nodes came from.
    pub(crate) domains: BTreeMap<String, i64>,
    /// Default-domain opaque nodes (their key in `nodes`, source opset, graph node),
    /// upgraded or checked against the opset finally written.
    pub(crate) pinned: Vec<(usize, i64, NodeId)>,
    /// The graph's constants, by index into `inits`, whose `raw_data` is left empty
    /// until the writer decides where their bytes go.
    pub(crate) payloads: Vec<(usize, Tensor)>,
    /// Symbols and symbolic lists written as shape arithmetic so far.
    pub(crate) shapes: ShapeCache,
}

pub(crate) use super::attrs::{a_float, a_int, a_ints, a_str, a_tensor, value_info};

impl<'g> Exporter<'g> {
    /// An exporter of `graph`, a verified graph, writing its nodes in `order` (the
    /// printer's: [`Graph::topo_order`]).
    pub(crate) fn new(graph: &'g Graph, order: Vec<NodeId>) -> Exporter<'g> {
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
            shapes: ShapeCache::default(),
        }
    }

    pub(crate) fn err(&self, message: impl Into<String>) -> OnnxError {
        OnnxError::node(self.cur_op, &self.cur, message)
    }

    pub(crate) fn input_name(&self, id: NodeId) -> String {
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
    pub(crate) fn reserve_io(&mut self) -> Result<(), OnnxError> {
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
        for id in graph.nodes_of(Op::Opaque) {
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
    pub(crate) fn s(&self, n: Name) -> &str {
        self.arena.get(n)
    }

    /// Takes the next `count` numbers of the printer's `t` (values of ops) or `c`
    /// (constants) names, counted as [`crate::printer::Names`] counts them (nodes are written in its
    /// order); returns the first.
    pub(crate) fn next_printed(&mut self, kind: char, count: u32) -> u32 {
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
    pub(crate) fn printed_name(&mut self, v: Value, kind: char, n: u32) -> Name {
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

    pub(crate) fn name_of(&self, v: Value) -> Result<Name, OnnxError> {
        self.names.get(v).ok_or_else(|| {
            self.err(format!(
                "operand %{}.{} has no name yet (the graph is not in order)",
                v.node.index(),
                v.output
            ))
        })
    }

    pub(crate) fn meta(&self, v: Value) -> Result<TensorMeta, OnnxError> {
        self.graph.meta(v).cloned().map_err(OnnxError::verify)
    }

    /// A fresh value name `<node>/<what>`.
    pub(crate) fn tmp(&mut self, what: &str) -> Name {
        self.scratch.clear();
        self.scratch.push_str(&self.cur);
        self.scratch.push('/');
        self.scratch.push_str(what);
        unique_in(&mut self.taken, &mut self.arena, &self.scratch)
    }

    /// The current node's ONNX name, made unique among the nodes.
    pub(crate) fn node_name(&mut self) -> Name {
        unique_in(&mut self.node_names, &mut self.arena, &self.cur)
    }

    pub(crate) fn push(
        &mut self,
        op_type: &str,
        inputs: &[Name],
        outputs: &[Name],
        attrs: &[Attr],
    ) {
        let name = self.node_name();
        self.push_named(name, op_type, "", inputs, outputs, attrs);
    }

    pub(crate) fn push_named(
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
    pub(crate) fn init(&mut self, what: &str, t: &Tensor) -> Name {
        let name = self.tmp(what);
        self.push_init(tensor_to_proto(self.arena.get(name), t));
        name
    }

    /// An int64 initialiser holding `v` (1-D), named after the current node and `what`:
    /// the message [`Exporter::init`] makes, without a tensor first.
    pub(crate) fn init_ints(&mut self, what: &str, v: &[i64]) -> Result<Name, OnnxError> {
        Ok(self.init_i64s(what, vec![v.len() as i64], v))
    }

    /// An int64 scalar initialiser holding `v`.
    pub(crate) fn init_i64(&mut self, what: &str, v: i64) -> Name {
        self.init_i64s(what, Vec::new(), &[v])
    }

    /// An int64 initialiser of shape `dims` holding `v`.
    pub(crate) fn init_i64s(&mut self, what: &str, dims: Vec<i64>, v: &[i64]) -> Name {
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
    pub(crate) fn push_init(&mut self, t: TensorProto) {
        if let Some(bytes) = self.init_bytes.as_mut() {
            bytes.mark();
        }
        self.inits.push(t);
    }

    /// The error for attribute `attr` of the node being written, symbolic (`v`), where
    /// `form` (the ONNX op written, say `Softmax`) takes it as an attribute, not an
    /// input: an ONNX attribute is a constant, so a value known only at run time cannot
    /// be written.
    pub(crate) fn symbolic_attr_err(&self, attr: &str, v: &AttrValue, form: &str) -> OnnxError {
        self.err(format!(
            "attribute `{attr}` = {v} is known only at run time, but {form} takes it as an \
             attribute (a constant), with no input to compute it from the shapes"
        ))
    }

    /// The error for a node whose attributes do not read as its op declares.
    pub(crate) fn bad(&self, e: InferError) -> OnnxError {
        self.err(e.0)
    }

    pub(crate) fn node(&mut self, id: NodeId) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        match node.builtin() {
            Some(Op::Input) => {
                let name = self.name_of(Value::from(id))?;
                let vi = self.value_info_of(Value::from(id), self.s(name))?;
                self.inputs.push(vi);
                Ok(())
            }
            Some(Op::Constant) => {
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
            _ => {
                let op = node.op_name();
                self.node_names.group();
                self.cur_op = op;
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

    /// Writes a vocabulary node through its table row (`table/mod.rs`): each argument as
    /// the attribute or constant input the row names at the opset written (an int list
    /// input left out when it is ONNX's default), held attributes whose value is not
    /// ONNX's default, and the row's opset.
    pub(crate) fn write_row(
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
                // Known only at run time (`Trilu`'s `k` of a cache's length): the input is
                // computed from the graph's shapes.
                (Some(i), AttrValue::Sym(e)) if a.kind == OnnxKind::Int => {
                    inputs.push((i, self.sym_scalar(&e)?))
                }
                (Some(i), AttrValue::Dims(v)) => inputs.push((i, self.sym_list(&v)?)),
                (None, v @ (AttrValue::Sym(_) | AttrValue::Dims(_))) => {
                    let form = format!("ONNX `{}`", row.onnx);
                    return Err(self.symbolic_attr_err(a.ours, &v, &form));
                }
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
    pub(crate) fn ones_scale(&mut self, id: NodeId) -> Result<Name, OnnxError> {
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
    pub(crate) fn value_info_of(&self, v: Value, name: &str) -> Result<ValueInfoProto, OnnxError> {
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

    /// The `Identity` nodes that give graph outputs their names.
    pub(crate) fn write_identities(&mut self) {
        let identities = std::mem::take(&mut self.identities);
        for (src, dst) in identities {
            self.node_names.group();
            self.cur = format!("output_{}", self.s(dst));
            self.push("Identity", &[src], &[dst], &[]);
        }
    }

    /// The model around the nodes written, the nodes, and whether the node names
    /// are unique (false only where they were deferred: [`NameSet::defer`]).
    pub(crate) fn finish(mut self) -> Result<(ModelProto, NodeSink, bool), OnnxError> {
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
            metadata_props: bounds_props(self.graph),
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

/// The graph's bounds as the model's `metadata_props` (none where it has none), read
/// back on load (`crate::onnx::load::bounds`).
fn bounds_props(graph: &Graph) -> Vec<crate::onnx::proto::StringStringEntryProto> {
    if graph.bounds().is_empty() {
        return Vec::new();
    }
    vec![crate::onnx::proto::StringStringEntryProto {
        key: crate::onnx::load::bounds::BOUNDS_KEY.into(),
        value: graph.bounds().to_string(),
    }]
}
