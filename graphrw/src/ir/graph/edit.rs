//! Editing the graph in place: operands redirected, uses replaced, nodes detached and
//! removed, dead code dropped.

use super::*;

impl Graph {
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
        self.by_op.remove(node.op.id(), id);
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
}
