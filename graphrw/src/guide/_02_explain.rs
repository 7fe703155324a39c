//! # 2. Why didn't my pattern match?
//!
//! Two kinds of mistakes, caught at two times.
//!
//! ## At compile time
//!
//! A pattern is checked against the op table when your crate compiles: an unknown op,
//! an attribute of the wrong kind, a wrong operand count, a rule that can never fire
//! because an earlier one matches everything it matches — each is a compile error at
//! your token, most with a suggestion. This one misspells `softmax`:
//!
//! ```compile_fail
//! graphrw::pattern! {
//!     fn attention_probs(x: Tensor) -> Tensor {
//!         x.softmx(-1)
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! and fails with ``unknown op `softmx`; did you mean `softmax`?`` at `softmx`. The UI suite in
//! the repository (`tests/ui/fail/*.stderr`) shows every such message.
//!
//! ## At run time: `explain`
//!
//! A pattern that compiles may still not match a given graph: the model spells the
//! computation differently. [`Pattern::explain`](crate::Pattern::explain) tries the
//! pattern at one node and says where and why it stopped, naming nodes as the printer
//! does:
//!
//! ```
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//!
//! pattern! {
//!     /// Inductor's first SDPA pattern.
//!     fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
//!         query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
//!     }
//! }
//!
//! # fn main() -> Result<(), graphrw::GraphError> {
//! let g = Builder::new();
//! let m = TensorMeta::new(DType::F32, [1usize, 4, 16, 16]);
//! let (q, k, v) = (g.input("q", m.clone()), g.input("k", m.clone()), g.input("v", m));
//! // A `mul` where the pattern wants `matmul` under the `div`.
//! let out = q.mul(k.transpose(-2, -1)?)?.div(8.0)?.softmax(-1)?.matmul(v)?;
//! g.output(&[out])?;
//! let anchor = out.value().node;
//! let graph = g.finish();
//!
//! let why = sfdp_1::PATTERN.explain(&graph, anchor);
//! assert!(!why.matched);
//! assert_eq!(why.position, "operand 0 of `div`");
//! let text = why.to_string();
//! assert_eq!(text, "operand 0 of `div`: expected `matmul`, found `mul` t1");
//! # Ok(())
//! # }
//! ```
//!
//! The explanation also reports attribute mismatches with both values (`dim=0`,
//! expected `dim=-1`), failed `where` constraints with their text and the values that
//! failed them, and a name bound twice to different values.
//!
//! When you do not know which node should have matched,
//! [`near_misses`](crate::pattern::near_misses) tries the pattern at every node of its
//! anchor op and lists the misses deepest first (most of the pattern matched: nodes
//! plus parameters bound) — the first is usually the block you meant. Each names its
//! node as the printer does (`anchor_name`, `t5`) beside its id (`anchor`):
//!
//! ```
//! use graphrw::pattern::near_misses;
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//!
//! pattern! {
//!     fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
//!         query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
//!     }
//! }
//!
//! # fn main() -> Result<(), graphrw::GraphError> {
//! let g = Builder::new();
//! let m = TensorMeta::new(DType::F32, [1usize, 4, 16, 16]);
//! let (q, k, v) = (g.input("q", m.clone()), g.input("k", m.clone()), g.input("v", m));
//! let shallow = q.matmul(v)?; // misses at once
//! let deep = q.mul(k.transpose(-2, -1)?)?.div(8.0)?.softmax(-1)?.matmul(v)?;
//! g.output(&[shallow, deep])?;
//! let deep = deep.value().node;
//! let graph = g.finish();
//!
//! let misses = near_misses(&sfdp_1::PATTERN, &graph);
//! assert_eq!(misses[0].anchor, deep);
//! assert_eq!(misses[0].anchor_name, "t5"); // as the printer names it
//! for why in &misses {
//!     println!("{}: {why}", why.anchor_name);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The command line does the same on an ONNX model: `graphrw explain MODEL --rule
//! attention` lists a rule set's near misses, and `--node t41` explains one node
//! ([chapter 6](super::_06_onnx_and_cli)); without `--rule` it reports every site of
//! the model, fused or not ([chapter 8](super::_08_is_my_rule_right)).
//!
//! Next: [optional parts, constraints and priorities](super::_03_optional_constraints_priorities).
