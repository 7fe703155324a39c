//! # 1. Your first rule
//!
//! graphrw works on a [`Graph`](crate::Graph): nodes of ops from a torch-like vocabulary
//! ([`crate::ops`]), each with its inputs' and outputs' metadata (dtype and shape). You
//! build one with a [`Builder`](crate::Builder), whose methods read like model code:
//! nested calls (`g.matmul(a, b)`) or chained ones on a [`Var`](crate::Var)
//! (`a.matmul(b)?.relu()?`). Every call infers its output's metadata and fails, with the
//! op and what it expected, on operands that do not fit.
//!
//! ```
//! use graphrw::{verify, Builder, DType, TensorMeta};
//!
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let y = x.div(4.0)?.neg()?.neg()?;
//! g.output(&[y])?;
//! let graph = g.finish();
//! verify(&graph)?; // acyclic, uses defined, metadata consistent
//! // The printer writes the graph as a program, one value per line.
//! let text = graph.to_string();
//! assert!(text.contains("neg("), "{text}");
//! # Ok::<(), graphrw::GraphError>(())
//! ```
//!
//! Attributes with a default are left out, as in a pattern: `x.gelu()` is
//! `gelu(x, approximate = "none")` and `x.sum()` sums every dim. The `_with` form of the
//! same method takes every attribute, in the op's order (`graphrw ops gelu` lists them):
//!
//! ```
//! use graphrw::{Builder, DType, TensorMeta};
//!
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let exact = x.gelu()?; // approximate = "none"
//! let tanh = x.gelu_with("tanh")?;
//! let rows = tanh.sum_with(&[-1], true)?; // dims, keepdim
//! assert_eq!(rows.meta()?.shape.to_string(), "[2, 1]");
//! # let _ = exact;
//! # Ok::<(), graphrw::GraphError>(())
//! ```
//!
//! A rule is a pattern and a replacement, both written as Rust-like functions inside
//! [`rule_set!`](crate::rule_set). The pattern (left of `=>`) is compiled at compile
//! time into a matcher; its parameters bind what it matched: `Tensor` parameters bind
//! values of the graph, `f64` ones bind constant scalars. The replacement (right of `=>`)
//! is plain Rust over [`Var`](crate::Var)s: it may compute (`1.0 / s` is folded when the
//! rule fires) and use `?`. A `where` clause constrains the bindings.
//!
//! The [`Rewriter`](crate::rewrite::Rewriter) applies a list of rule sets to a fixed
//! point and reports what fired:
//!
//! ```
//! use graphrw::exec::run_reference;
//! use graphrw::rewrite::Rewriter;
//! use graphrw::{rule_set, verify, Builder, DType, Tensor, TensorMeta};
//!
//! rule_set! {
//!     /// Small algebraic canonicalisations.
//!     pub static ALGEBRA;
//!
//!     rule div_to_mul(x: Tensor, s: f64) -> Tensor where s != 0.0 {
//!         x.div(s)
//!     } => {
//!         x.mul(1.0 / s)?
//!     }
//!
//!     rule neg_neg(x: Tensor) -> Tensor {
//!         x.neg().neg()
//!     } => {
//!         x
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let y = x.div(4.0)?.neg()?.neg()?;
//! g.output(&[y])?;
//! let mut graph = g.finish();
//!
//! let input = Tensor::from_vec(vec![2, 3], vec![0.5f32, 1.0, 2.0, 3.0, 4.0, 5.0])?;
//! let before = run_reference(&graph, &[input.clone()])?;
//!
//! let report = Rewriter::new(&[&ALGEBRA]).run(&mut graph)?;
//! assert_eq!(report.counts().get("div_to_mul"), Some(&1));
//! assert_eq!(report.counts().get("neg_neg"), Some(&1));
//! verify(&graph)?;
//! let text = graph.to_string();
//! assert!(!text.contains("div(") && !text.contains("neg("), "{text}");
//!
//! // The rewrite keeps the numbers: run both graphs on the reference kernels.
//! let after = run_reference(&graph, &[input])?;
//! assert_eq!(before[0].to_f64_vec(), after[0].to_f64_vec());
//! # Ok(())
//! # }
//! ```
//!
//! What the rewriter guarantees: a match whose interior values are used outside it is
//! not replaced (nothing it removes can escape), each replacement is one atomic patch
//! (a replacement that fails leaves the graph as it was, and is listed in the report),
//! and two rules that undo each other stop at an iteration limit with an error naming
//! them. Rules sharing an anchor op are merged into one decision tree per op, so a rule
//! costs nothing at nodes it cannot match.
//!
//! The built-in library [`crate::rules`] is written the same way: its
//! [`optimize`](crate::rules::optimize) fuses attention blocks into one
//! `scaled_dot_product_attention` node and elementwise chains into generated kernels:
//!
//! ```
//! use graphrw::{rules, Builder, DType, TensorMeta};
//!
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
//! // GPT-2's tanh-form GELU, spelled out.
//! let inner = x.pow(3.0)?.mul(0.044715)?.add(x)?.mul(0.7978845608028654)?.tanh()?;
//! let y = x.mul(0.5)?.mul(inner.add(1.0)?)?;
//! g.output(&[y])?;
//! let mut graph = g.finish();
//! let done = rules::optimize(&mut graph)?;
//! assert_eq!(done.fused_nodes.get("fused.gelu_tanh"), Some(&1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Next: [what to do when a pattern does not match](super::_02_explain).
