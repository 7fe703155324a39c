//! # 3. Optional parts, constraints and priorities
//!
//! ## Optional parts
//!
//! Exporters spell the same block in several forms: attention with or without a scale,
//! with or without a mask. Instead of one pattern per form, mark what may be absent:
//! `x.mul(s?)` matches `x.mul(s)` or plain `x`, and `opt(p, |p| ..)` matches the closure
//! applied to `p` or `p` alone. A parameter that may be absent is declared `Option<..>`;
//! the typed match (and a replacement) sees `None` or `Some`:
//!
//! ```
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//!
//! pattern! {
//!     /// Attention with an optional scale, mask and NaN guard.
//!     fn attn(q: Tensor, kt: Tensor, v: Tensor, s: Option<f64>, mask: Option<Tensor>) -> Tensor {
//!         let p = q.matmul(kt).mul(s?).add(mask?).softmax(-1);
//!         opt(p, |p| p.isnan().where_(0.0, p)).matmul(v)
//!     }
//! }
//!
//! # fn main() -> Result<(), graphrw::GraphError> {
//! let g = Builder::new();
//! let m = |s: [usize; 4]| TensorMeta::new(DType::F32, s);
//! let q = g.input("q", m([1, 2, 4, 8]));
//! let kt = g.input("kt", m([1, 2, 8, 4]));
//! let v = g.input("v", m([1, 2, 4, 8]));
//! // A scale, no mask, no guard.
//! let out = q.matmul(kt)?.mul(0.125)?.softmax(-1)?.matmul(v)?;
//! g.output(&[out])?;
//! let graph = g.finish();
//!
//! let found = attn::PATTERN.find(&graph);
//! assert_eq!(found.len(), 1);
//! let m: attn::Match = found[0].typed();
//! assert_eq!(m.s, Some(0.125));
//! assert_eq!(m.mask, None);
//! # Ok(())
//! # }
//! ```
//!
//! ## Constraints
//!
//! A `where` clause after the signature restricts a match: `rank(x) == 4`,
//! `dtype(x) == f32`, `dim(q, -1) == dim(k, -1)`, comparisons of scalar parameters
//! (`s != 0.0`), `users(t) == 1` (an interior value with no other user), and
//! `check(|x, s| ..)`, an escape hatch that sees the bound values' metadata and scalars
//! as plain Rust. Dtypes are written as in Rust (`f32`, `bf16`; `float32` is an error
//! that says so). A number compares with a literal of its own kind: an `i64` parameter,
//! a rank, a dim or a user count against a float literal (`d0 > 0.5`) is a compile
//! error giving the integer bound that says the same (`d0 > 0`), and an `f64`
//! parameter against an integer literal (`s > 1`) asks for `1.0`; an `f64` parameter
//! compared with an integer term (`s > rank(x)`) compares as `f64`:
//!
//! ```
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//!
//! pattern! {
//!     fn softmax_last(x: Tensor) -> Tensor
//!     where
//!         rank(x) == 4,
//!         dtype(x) == f32,
//!     {
//!         softmax(x, dim = -1)
//!     }
//!
//!     fn big_scale(x: Tensor, s: f64) -> Tensor
//!     where
//!         check(|x, s| x.rank() >= 2 && s > 2.0),
//!     {
//!         x.mul(s)
//!     }
//! }
//!
//! # fn main() -> Result<(), graphrw::GraphError> {
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let small = x.mul(2.0)?;
//! let big = x.mul(3.0)?;
//! let probs = big.softmax(-1)?; // rank 2, not 4
//! g.output(&[small, probs])?;
//! let probs = probs.value().node;
//! let graph = g.finish();
//!
//! assert_eq!(big_scale::PATTERN.find(&graph).len(), 1); // the 3.0, not the 2.0
//! assert!(softmax_last::PATTERN.find(&graph).is_empty());
//! let why = softmax_last::PATTERN.explain(&graph, probs).to_string();
//! assert!(why.contains("constraint `rank(x) == 4` failed"), "{why}");
//! # Ok(())
//! # }
//! ```
//!
//! ## Priorities
//!
//! A [`rule_set!`](crate::rule_set) tries its rules in priority order, higher first.
//! The default priority is the pattern's op count, so a larger pattern is tried before a
//! smaller one it contains; `#[priority(N)]` sets it by hand.
//!
//! That holds across nodes too, not only at one node: a larger pattern is anchored
//! further down the graph than a smaller one nested in it (`swiglu_mlp`,
//! `silu(x @ wg) * (x @ wu)`, at the outer `mul`; `silu`, `x * sigmoid(x)`, at the inner
//! one), and the rewriter may reach the smaller rule's anchor first. So before a rule
//! fires, every rule of higher priority whose pattern holds the smaller rule's anchor op
//! below its own anchor is tried at the users of the match, that many levels up; if
//! one matches there with the smaller match inside it, it fires instead (its *claim*).
//! Declaration order, the order of rule sets given to the
//! [`Rewriter`](crate::rewrite::Rewriter) and node order do not change which wins; a
//! smaller rule given the higher `#[priority]` wins instead. The claim search looks at
//! most 8 levels of users up (64 nodes), and from a multi-output pattern's first
//! output only. Where two rules overlap
//! (a node could match both) the order must be decided: two overlapping rules of equal
//! priority, or a rule that can never fire because a rule tried before it matches
//! everything it matches, are compile errors that say which `#[priority]` to add.
//!
//! ```
//! use graphrw::rewrite::Rewriter;
//! use graphrw::{rule_set, Builder, DType, TensorMeta};
//!
//! rule_set! {
//!     static SCALES;
//!
//!     /// Tried first: a product by exactly one disappears.
//!     #[priority(10)]
//!     rule mul_one(x: Tensor) -> Tensor {
//!         x.mul(1.0)
//!     } => {
//!         x
//!     }
//!
//!     /// Any other product by a scalar becomes a division.
//!     rule mul_to_div(x: Tensor, s: f64) -> Tensor where s != 0.0 {
//!         x.mul(s)
//!     } => {
//!         x.div(1.0 / s)?
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [4usize]));
//! let y = x.mul(1.0)?.relu()?.mul(4.0)?;
//! g.output(&[y])?;
//! let mut graph = g.finish();
//! let report = Rewriter::new(&[&SCALES]).run(&mut graph)?;
//! assert_eq!(report.counts().get("mul_one"), Some(&1));
//! assert_eq!(report.counts().get("mul_to_div"), Some(&1));
//! # Ok(())
//! # }
//! ```
//!
//! Two rules that overlap at equal priority do not compile: here a node
//! `relu(a) / relu(b)` matches both, and both have two ops.
//!
//! ```compile_fail
//! graphrw::rule_set! {
//!     static SET;
//!
//!     rule div_by_relu(x: Tensor, y: Tensor) -> Tensor {
//!         x.div(y.relu())
//!     } => {
//!         x.div(y)?
//!     }
//!
//!     rule div_of_relu(x: Tensor, y: Tensor) -> Tensor {
//!         x.relu().div(y)
//!     } => {
//!         x.div(y)?
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! The error: ``rules `div_by_relu` and `div_of_relu` overlap at equal priority 2``, with
//! the advice to add `#[priority(N)]` to one, or `#[overlap]` if declaration order is
//! meant to decide.
//!
//! Other pattern tools: alternatives `a | b`, `_` and `..` for operands you do not care
//! about, tuple returns for multi-output patterns, and `repeat(x, |t| t.add(_), 1..=4)`
//! for a chain of one to four steps.
//!
//! Next: [your own op and executor](super::_04_own_op_and_executor).
