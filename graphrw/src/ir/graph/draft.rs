//! The state of a [`Builder`]: a graph under construction and the nodes added to it.
//! Its methods are in [`crate::builder`]; the type lives with the graph so that the op
//! table's decompositions (`fn(&Builder, ..)`) can name it without the builder's methods.

use std::cell::RefCell;

use super::{Graph, NodeId};

/// A graph under construction (see [`crate::builder`] for its methods).
#[derive(Debug, Default)]
pub struct Builder {
    /// The graph built so far.
    pub(in crate::ir) graph: RefCell<Graph>,
    /// The nodes this builder added, in order.
    pub(in crate::ir) created: RefCell<Vec<NodeId>>,
}
