//! Orders of the nodes: a topological order (deterministic, by node id among the ready
//! ones) and the cycle check of one node.

use super::*;

impl Graph {
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
