//! Adding nodes: inputs, constants, ops (checked against their signature and
//! inferred), and the arena slots and use lists they take.

use super::*;

impl Graph {
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
        mut attrs: Vec<AttrValue>,
        name: Option<String>,
    ) -> Result<NodeId, GraphError> {
        let outputs = self.infer_assuming(op, &operands, &mut attrs, name.as_deref())?;
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
        mut attrs: Vec<AttrValue>,
    ) -> Result<NodeId, GraphError> {
        let outputs = self.infer_assuming(op, &operands, &mut attrs, None)?;
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
        mut attrs: Vec<AttrValue>,
        name: &str,
    ) -> Result<NodeId, GraphError> {
        let outputs = self.infer_assuming(op, operands, &mut attrs, Some(name))?;
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

    /// Checks a would-be node and infers its outputs' metadata, deciding with the
    /// graph's bounds ([`Graph::bounds`]).
    pub fn infer_node(
        &self,
        op: &'static OpDef,
        operands: &[Value],
        attrs: &[AttrValue],
        name: Option<&str>,
    ) -> Result<Vec<TensorMeta>, GraphError> {
        crate::ir::sym::in_force::with(&self.bounds, || {
            self.infer_node_in_force(op, operands, attrs, name)
        })
        .0
    }

    /// [`Graph::infer_node`] with whatever bounds are in force (the caller's scope).
    pub(super) fn infer_node_in_force(
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
        let op = node.op.id();
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
    pub(super) fn link(&mut self, value: Value, user: NodeId, operand: u32) -> u32 {
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
    pub(super) fn unlink(&mut self, producer: NodeId, slot: u32) {
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
}
