//! Patterns compiled at compile time: the runtime side of `pattern!`, `replacement!`
//! and `rule_set!`.
//!
//! The macros emit `static` [`Pattern`] trees (nodes in an array, referring to each
//! other by index), a typed match struct per pattern ([`PatternMatch`]), replacement
//! functions ([`ReplaceFn`]) and [`Rule`]s and [`RuleSet`]s. Nothing is parsed or traced
//! at run time. The [`matcher`] runs the trees on a [`Graph`].
//! Set `GRAPHRW_DUMP_PATTERNS=1` while compiling to print the code the macros generate,
//! and print a pattern (`Display`) to see its tree in the pattern language.
//!
//! # The pattern language
//!
//! `pattern!` takes one or more Rust-like functions. Each becomes a module of the same
//! name holding `PATTERN` (the static tree), `Match` (one field per parameter) and
//! `OUTPUTS`. Parameters are wildcards: `Tensor` (any value), `f64`/`i64` (an attribute,
//! or a one-element constant node where an op wants a tensor), `bool`, `Ints`, `String`,
//! `DType` (attributes). The body is `let` bindings and one expression of op calls, in
//! method (`x.softmax(-1)`) or function (`softmax(x, -1)`) syntax; attributes follow the
//! operands positionally, as in the builder, or by keyword (`softmax(x, dim = -1)`).
//! An attribute left out must have its default (the pattern is a call); `_` matches any
//! value and `..` leaves every remaining attribute (and trailing operand) open.
//!
//! ```
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//!
//! pattern! {
//!     /// Inductor's first SDPA pattern.
//!     pub fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
//!         query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
//!     }
//! }
//!
//! let g = Builder::new();
//! let meta = TensorMeta::new(DType::F32, [1usize, 4, 16, 8]);
//! let (q, k, v) = (g.input("q", meta.clone()), g.input("k", meta.clone()), g.input("v", meta));
//! let out = q.matmul(k.transpose(-2, -1)?)?.div(8.0)?.softmax(-1)?.matmul(v)?;
//! g.output(&[out])?;
//! let graph = g.finish();
//!
//! let found = sfdp_1::PATTERN.find(&graph);
//! let m: sfdp_1::Match = found[0].typed();
//! assert_eq!(m.inv_scale, 8.0);
//! assert_eq!(sfdp_1::PATTERN.op_count, 5);
//! # Ok::<(), graphrw::GraphError>(())
//! ```
//!
//! Wildcards, literals, keyword attributes, `..` and a name used twice:
//!
//! ```
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//! pattern! {
//!     fn any_softmax(x: Tensor) -> Tensor { softmax(x, dim = _) }
//!     fn halve(x: Tensor) -> Tensor { x.mul(0.5) }      // matches a constant 0.5
//!     fn any_sum(x: Tensor) -> Tensor { x.sum(..) }      // any dims, any keepdim
//!     fn square(x: Tensor) -> Tensor { x.mul(x) }        // both operands the same value
//!     fn to_half(x: Tensor) -> Tensor { x.cast(f16) }    // a dtype attribute
//! }
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let y = g.mul(0.5, x.mul(x)?)?;                        // commutative: either order
//! g.output(&[g.var(y)])?;
//! let graph = g.finish();
//! assert_eq!(halve::PATTERN.find(&graph).len(), 1);
//! assert_eq!(square::PATTERN.find(&graph).len(), 1);
//! # Ok::<(), graphrw::GraphError>(())
//! ```
//!
//! Alternatives (`|`, tried in order; every branch binds the same parameters), also of
//! attribute literals:
//!
//! ```
//! graphrw::pattern! {
//!     fn scale(x: Tensor, s: f64) -> Tensor { x.div(s) | x.mul(s) }
//!     fn last(x: Tensor) -> Tensor { x.softmax(-1 | 3) }
//! }
//! assert_eq!(scale::PATTERN.to_string(),
//!     "pattern scale(x: Tensor, s: f64) -> Tensor {\n    (div(x, s) | mul(x, s))\n}");
//! ```
//!
//! Constraints in a `where` clause, run as soon as what they read is bound: `rank`,
//! `dtype`, `dim(x, i)` (shape equalities between bindings), scalar comparisons,
//! `users(x)` (user counts, also of `let` bindings), and two escape hatches: `check(|a, b|
//! ..)` (a closure whose parameters name the bindings it reads: tensors arrive as
//! [`TensorRef`], int lists as `&[i64]`, other scalars as their Rust type) and `pred(path)` (a
//! `fn(&Graph, &Bindings) -> bool`):
//!
//! ```
//! graphrw::pattern! {
//!     fn attn(q: Tensor, k: Tensor, s: f64) -> Tensor
//!     where
//!         rank(q) == 4,
//!         dtype(q) == f16,
//!         dim(q, -1) == dim(k, -1),
//!         s > 0.0,
//!         users(scores) == 1,
//!         check(|q, s| q.rank() == 4 && s < 1e3),
//!     {
//!         let scores = q.matmul(k.transpose(-2, -1));
//!         scores.mul(s)
//!     }
//! }
//! assert_eq!(attn::PATTERN.constraints.len(), 6);
//! ```
//!
//! Repetition of a chain between `min` and `max` times (longest first), and tuple
//! returns for multi-output patterns:
//!
//! ```
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//! pattern! {
//!     fn adds(x: Tensor) -> Tensor { repeat(x, |t| t.add(_), 1..=4).relu() }
//!     fn both(x: Tensor) -> (Tensor, Tensor) { (x.relu(), x.sigmoid()) }
//! }
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [4usize]));
//! let y = x.add(1.0)?.add(2.0)?.relu()?;
//! let (r, s) = (x.relu()?, x.sigmoid()?);
//! g.output(&[y, r, s])?;
//! let graph = g.finish();
//! assert_eq!(adds::PATTERN.find(&graph)[0].nodes.len(), 3); // relu and 2 adds (`_` records nothing)
//! assert_eq!(both::PATTERN.find(&graph)[0].outputs.len(), 2);
//! # Ok::<(), graphrw::GraphError>(())
//! ```
//!
//! Optional parts: `x.op(a?)` is `op(x, a)` or, when the op is absent, `x` itself (the
//! other operand passes through); `opt(x, |t| step)` is `step` applied to `x`, or `x`.
//! A parameter bound only inside optional parts is declared `Option<..>`; the typed
//! `Match` and the replacement get `None` when its part is absent. Matching tries the
//! part present, then absent, so one pattern covers every combination without 2^n rules;
//! a constraint that reads an optional binding runs only when its part is present.
//!
//! ```
//! use graphrw::{pattern, Builder, DType, TensorMeta};
//! pattern! {
//!     fn scaled(x: Tensor, s: Option<f64>) -> Tensor {
//!         opt(x.relu(), |t| t.isnan().where_(0.0, t)).mul(s?).neg()
//!     }
//! }
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [4usize]));
//! let y = x.relu()?.neg()?;
//! g.output(&[y])?;
//! let graph = g.finish();
//! let m: scaled::Match = scaled::PATTERN.find(&graph)[0].typed();
//! assert_eq!(m.s, None);
//! # Ok::<(), graphrw::GraphError>(())
//! ```
//!
//! A user op is called by the Rust path of its `OpDef` static, attributes by keyword;
//! what the macro cannot know (the attribute names, kinds and operand count) is checked
//! by compile-time evaluation of the emitted static:
//!
//! ```
//! use graphrw::ops::{AttrDefault, AttrKind, AttrSpec, Arity, Infer, OpClass, OpDef,
//!     OperandSpec, OutputCount};
//! pub static SCALE: OpDef = OpDef {
//!     name: "my.scale", doc: "x * factor",
//!     operands: &[OperandSpec { name: "input", arity: Arity::Required }],
//!     attrs: &[AttrSpec { name: "factor", kind: AttrKind::Float, default: AttrDefault::Float(1.0) }],
//!     outputs: OutputCount::Fixed(1), commutative: false, class: OpClass::Elementwise,
//!     infer: Infer::Fn(|i, _| Ok(vec![i[0].clone()])), decompose: None, builtin: None,
//! };
//! graphrw::pattern! {
//!     fn scaled_relu(x: Tensor, f: f64) -> Tensor { SCALE(x, factor = f).relu() }
//! }
//! # fn main() { let _ = &scaled_relu::PATTERN; }
//! ```
//!
//! A pattern expands to a module that imports its surroundings with `use super::*`, so
//! user ops and `pred`/`check` helpers must be items of the enclosing module (not local
//! to a function body).
//!
//! # Replacements, rules and rule sets
//!
//! `replacement!` is a function over the same parameters (tensors arrive as [`Var`](crate::Var)s,
//! so the body builds with the builder; scalars are plain Rust values) that names the
//! pattern it replaces after `for`. rustc rejects a missing or extra parameter, a
//! parameter of another kind, and another number of outputs, at the user's tokens. An
//! optional first parameter `b: &Builder` receives the builder.
//!
//! ```
//! use graphrw::{pattern, replacement, Builder};
//! pattern! {
//!     fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
//!         query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
//!     }
//! }
//! replacement! {
//!     fn sfdp_1_fused(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor
//!     for sfdp_1 {
//!         query.scaled_dot_product_attention_with(key, value, None, 0.0, false, Some(1.0 / inv_scale), false)?
//!     }
//! }
//! static RULE: graphrw::Rule = graphrw::Rule::new("sfdp_1", &sfdp_1::PATTERN, sfdp_1_fused);
//! assert_eq!(RULE.priority, 5);
//! ```
//!
//! `rule_set!` bundles rules written inline (`rule name(..) -> Tensor { pattern } =>
//! { replacement }`; the builder is `b` in the replacement) into a checked static
//! [`RuleSet`], ordered by priority (default: the pattern's op count; `#[priority(N)]`
//! overrides). A rule shadowed by a more general rule tried first is a compile error
//! naming both, as is an overlap of two rules at equal priority unless one is marked
//! `#[overlap]`:
//!
//! ```
//! graphrw::rule_set! {
//!     /// Canonical forms.
//!     pub static CANON;
//!
//!     rule div_to_mul(x: Tensor, s: f64) -> Tensor where s != 0.0 {
//!         x.div(s)
//!     } => {
//!         x.mul(1.0 / s)?
//!     }
//!
//!     #[priority(10)]
//!     rule neg_neg(x: Tensor) -> Tensor {
//!         x.neg().neg()
//!     } => {
//!         x
//!     }
//! }
//! assert_eq!(CANON.rules[0].name, "neg_neg");
//! assert_eq!(div_to_mul::RULE.priority, 1);
//! ```
//!
//! Each rule is a module named after it, holding its `PATTERN`, `RULE`, typed `Match`
//! and `replace`. Like any module it is private to the module around the `rule_set!`
//! unless written `pub rule` (or `pub(crate) rule`): then its pattern can be reached
//! from elsewhere, for [`explain()`] or [`near_misses`]. [`RuleSet::rule`] looks a rule
//! up by name.
//!
//! ```
//! mod mlp {
//!     graphrw::rule_set! {
//!         pub static MLP;
//!
//!         /// Reachable as `mlp::swiglu_mlp`.
//!         pub rule swiglu_mlp(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
//!             let h = x.matmul(wg);
//!             h.mul(h.sigmoid()).mul(x.matmul(wu))
//!         } => {
//!             x.matmul(wg)?.silu()?.mul(x.matmul(wu)?)?
//!         }
//!     }
//! }
//! assert_eq!(mlp::swiglu_mlp::PATTERN.op_count, 5);
//! assert!(std::ptr::eq(mlp::MLP.rule("swiglu_mlp").unwrap(), &mlp::swiglu_mlp::RULE));
//! ```

//! # Matching options and many rules at once
//!
//! [`find_with`] and [`Rewriter::with_options`](crate::rewrite::Rewriter::with_options)
//! take FX's `SubgraphMatcher` options as a [`MatchOptions`] builder (`match_output`,
//! `match_placeholder`, `remove_overlapping_matches`, `ignore_literals`, plus
//! `fully_contained` and filters). [`dispatch::Dispatch`] merges the rules of rule sets
//! into one decision tree per anchor op, so a node is tried only against the rules
//! that can match it.

mod bindings;
pub(crate) mod claims;
pub mod dispatch;
mod display;
mod explain;
mod matched;
pub mod matcher;
mod node_matcher;
mod op_ids;
mod options;
#[doc(hidden)]
pub mod private;
mod rule;
pub(crate) mod safety;
mod tree;

pub use bindings::{Bindings, Bound, Slot, TensorRef};
pub use explain::{
    explain, explain_named, explain_rules, near_misses, Explanation, RulesExplanation,
};
pub use matched::{Match, PatternMatch};
pub use node_matcher::NodeMatcher;
pub use options::{find_with, match_at_with, MatchFilter, MatchOptions};
pub use rule::{GenFn, ReplaceFn, Rule, RuleSet, VerifySpec};
pub use safety::{check_safe, Unsafe};
pub use tree::{
    AttrCheck, AttrPat, Check, CmpOp, ConstPat, Constraint, Link, OpPat, Param, ParamKind, PatNode,
    Pattern, PredFn, RepeatPat, Root, Term,
};

use crate::{Graph, NodeId};

impl Pattern {
    /// Every match in `graph` (see [`matcher::find`]).
    pub fn find(&'static self, graph: &Graph) -> Vec<Match> {
        matcher::find(self, graph)
    }

    /// Every match in `graph` under FX-style `options` (see [`find_with`]).
    pub fn find_with(&'static self, graph: &Graph, options: &MatchOptions) -> Vec<Match> {
        options::find_with(self, graph, options)
    }

    /// The first match anchored at `node` (see [`matcher::match_at`]).
    pub fn match_at(&'static self, graph: &Graph, node: NodeId) -> Option<Match> {
        matcher::match_at(self, graph, node)
    }

    /// Why this pattern does or does not match at `node` (see [`explain()`]).
    pub fn explain(&'static self, graph: &Graph, node: NodeId) -> Explanation {
        explain::explain(self, graph, node)
    }
}
