//! The IR, in one room: the [`graph`] (nodes on petgraph, use lists, values), tensor
//! [`meta`]data, the op vocabulary ([`ops`]), the [`builder`] that reads like model code,
//! symbolic integers ([`sym`]: expressions for dims known at run time, their text form
//! and the [`assume`]d equalities between them), the [`printer`], Graphviz export ([`dot`]), the [`verify`]er, and the [`foreign`]
//! records of opaque (unmodelled ONNX) nodes.
//!
//! Everything else in the crate builds on these modules and they depend on nothing
//! else in it: patterns, the rewriter, the rules, executors and ONNX import/export all
//! sit above. Each module is also re-exported at the crate root (`graphrw::graph`,
//! `graphrw::ops`, ...), the paths user code and the macros' generated code use.

pub mod builder;
pub mod dot;
pub mod foreign;
pub mod graph;
pub mod meta;
pub(crate) mod op_index;
pub mod ops;
pub mod printer;
pub mod sym;
pub use sym::assume;
pub mod verify;
