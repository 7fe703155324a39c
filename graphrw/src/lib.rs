//! # graphrw
//!
//! Rewrite machine-learning computation graphs: a graph IR on petgraph with a
//! torch-like op vocabulary, a builder that reads like model code, a printer, Graphviz
//! export and a verifier. Patterns, the rewriter, executors and ONNX import build on it.
//!
//! ```
//! use graphrw::{verify, Builder, DType, TensorMeta};
//!
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
//! let w = g.input("w", TensorMeta::new(DType::F32, [8usize, 4]));
//! let y = x.matmul(w)?.relu()?;
//! g.output(&[y])?;
//! let graph = g.finish();
//! verify(&graph)?;
//! assert!(graph.to_string().contains("t1 = relu(t0)  # f32[2, 4]"));
//! # Ok::<(), graphrw::GraphError>(())
//! ```
#![warn(missing_docs)]

// Lets the code the pattern macros emit name `graphrw::` inside this crate too.
extern crate self as graphrw;

mod error;
pub mod exec;
pub mod generated;
pub mod grad;
pub mod gradcheck;
// The guide: a tutorial whose examples are doctests (compiled only for docs and doctests).
#[cfg(any(doc, doctest))]
pub mod guide;
pub mod ir;
pub mod onnx;
pub mod pattern;
pub mod rewrite;
pub mod rules;
pub mod selfcheck;

pub(crate) use ir::op_index;
pub use ir::{assume, builder, dot, foreign, graph, meta, ops, printer, verify};

pub use builder::{Arg, Builder, Var};
pub use error::GraphError;
pub use graph::{Graph, Node, NodeId, Use, Value};
pub use meta::{DType, Device, Dim, Dims, Shape, TensorMeta, INLINE_RANK};
pub use verify::verify;

pub use graphrw_macros::{fused_kernel, pattern, replacement, rule_set};
pub use pattern::{Match, Pattern, PatternMatch, Rule, RuleSet};
pub use rules::Kernels;

/// Support for the code the macros emit (not a public API).
#[doc(hidden)]
pub mod __private {
    pub use crate::pattern::private::*;
    pub use crate::selfcheck::test_rule;
}

/// Tensors and kernels (re-exported from `graphrw-kernels`).
pub use graphrw_kernels as kernels;
pub use graphrw_kernels::{KernelOptions, Tensor};
