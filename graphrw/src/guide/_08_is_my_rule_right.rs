//! # 8. Is my rule right, and why didn't my model fuse?
//!
//! [Chapter 2](super::_02_explain) explained one pattern at one node. This chapter
//! looks at a whole model: which of its blocks the pipeline fused, why the others did
//! not, and whether a rule of yours took a block that a built-in fusion wanted.
//!
//! ## Why didn't my model fuse? The coverage report
//!
//! [`rules::coverage`](crate::rules::coverage()) runs [`optimize`](crate::rules::optimize)'s
//! passes on a copy of the graph and reports every *site*: each node where a fusion
//! could start (every `softmax`, every normalisation's mean of squares and every
//! `layer_norm`, every GELU's `erf` or `tanh`, every `sigmoid` or `silu`, every
//! rotation's `neg`). A site that fused names the rule that fused it; one that did not
//! names the nearest fusing rule and the first check of it that failed, in the
//! printer's names. Each site is looked at on the graph as the pipeline has it when its
//! rules run: a softmax after canonicalisation, a norm after its spellings were brought
//! to one form, never the raw import.
//!
//! ```
//! use graphrw::{rules, Builder, DType, TensorMeta};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
//! // An RMS norm written with `pow` and `1 / sqrt` (its spellings pass rewrites it
//! // first), and a softmax over the first dim, which no fusion takes.
//! let ms = x.pow(2.0)?.mean_with(&[-1], true)?.add(1e-6)?;
//! let norm = x.mul(ms.sqrt()?.reciprocal()?)?;
//! g.output(&[norm.softmax(0)?])?;
//! let graph = g.finish();
//!
//! let report = rules::coverage(&graph)?;
//! print!("{report}");
//! assert_eq!(report.sites.len(), 2);
//! assert_eq!(report.fused_by_rule().get("rms_norm_unit_weight"), Some(&1));
//! let softmax = report.sites.iter().find(|s| s.op == "softmax").unwrap();
//! let near = softmax.nearest.as_ref().unwrap();
//! assert!(near.why.check.ends_with("expected dim=-1"));
//! # Ok(())
//! # }
//! ```
//!
//! prints one line per site under the pass that found it, then a summary that adds up
//! (sites = fused + not fused, the misses grouped by reason). The softmax is `t6` in the
//! graph the attention pass sees and `t5` in the one the kernels' pass sees (the norm
//! before it is one node by then):
//!
//! ```text
//! sites of the `attention` pass (named as in the graph it sees):
//!   softmax t6: not fused; nearest `softmax_scale_mask_form2` at t5 (kernels pass): the root: `softmax` t5 has dim=-2, expected dim=-1
//! sites of the `kernels` pass (named as in the graph it sees):
//!   mean t1: fused by `rms_norm_unit_weight`
//! 2 site(s): 1 fused, 1 not fused
//!   fused by `rms_norm_unit_weight`: 1
//!   not fused, `softmax_scale_mask_form2`: the root: expected dim=-1: 1
//! ```
//!
//! Each [`Site`](crate::rules::Site) carries the same as data: `fused_by`, or `nearest`
//! (a [`NearMiss`](crate::rules::NearMiss): the rule, the pass whose graph its names
//! are from, and chapter 2's [`Explanation`](crate::pattern::Explanation), whose
//! `check` is the failed check without the graph's names, so that the misses of many
//! blocks for one reason read the same).
//!
//! ### Your own rules
//!
//! [`rules::coverage_of`](crate::rules::coverage_of) reports on rule sets of your own,
//! after the built-in canonicalisation: every node of an op one of your rules starts at
//! is a site.
//!
//! ```
//! use graphrw::{rule_set, rules, Builder, DType, TensorMeta};
//!
//! rule_set! {
//!     /// SiLU, at rank 4 only.
//!     static MINE;
//!
//!     rule rank4_silu(x: Tensor) -> Tensor where rank(x) == 4 {
//!         x.mul(x.sigmoid())
//!     } => {
//!         x.silu()?
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3, 4, 8]));
//! let y = g.input("y", TensorMeta::new(DType::F32, [4usize, 8]));
//! g.output(&[x.mul(x.sigmoid()?)?, y.mul(y.sigmoid()?)?])?;
//! let graph = g.finish();
//!
//! let report = rules::coverage_of(&graph, &[&MINE])?;
//! assert_eq!((report.sites.len(), report.fused()), (2, 1));
//! let miss = report.sites.iter().find(|s| !s.is_fused()).unwrap();
//! assert_eq!(
//!     miss.reason().as_deref(),
//!     Some("`rank4_silu`: operand 0 of `mul`: constraint `rank(x) == 4`")
//! );
//! # Ok(())
//! # }
//! ```
//!
//! ### From the command line and Python
//!
//! ```sh
//! graphrw explain model.onnx                 # every site, then the summary
//! graphrw explain model.onnx --json          # the same for tools
//! graphrw explain --list-rules               # every rule the optimize report prints
//! graphrw explain model.onnx --rule bias_gelu --node t61   # one miss in full
//! graphrw print model.onnx --before kernels  # the graph (and names) that pass sees
//! ```
//!
//! On the TorchScript export of ELECTRA in the repository's test corpus, the report
//! finds both attention blocks and every layer norm fused, and two GELUs not:
//!
//! ```text
//!   erf t59 (/m/encoder/layer.0/intermediate/intermediate_act_fn/Erf): not fused; nearest `bias_gelu` at t61 (kernels pass): operand 1 of `mul`: expected `mul`, found `add` t60
//! ```
//!
//! `--rule` takes any rule name (the optimize report's), and explains it on the graph
//! as the pipeline has it when that rule's pass runs, so a `t61` in the report is the
//! `t61` that `--node` and `print --before` mean. In Python, `graphrw.explain(model)`
//! returns the report as objects (`Coverage`, `Site`, `NearMiss`),
//! `graphrw.explain(model, rule, node)` the rule's text, and `graphrw.rules()` lists
//! every rule.
//!
//! ## Did my rule take a block a built-in fusion wanted?
//!
//! Rules of your own usually run before [`optimize`](crate::rules::optimize). If one of
//! them rewrites a region that a built-in fusion would have fused, the fusion never sees
//! it. Give the built-in fusions ([`rules::fusions`](crate::rules::fusions)) to your
//! rewriter as *later* rules ([`Rewriter::with_later`](crate::rewrite::Rewriter::with_later)),
//! and its report lists each such rewrite ([`Report::preempted`](crate::rewrite::Report::preempted)):
//!
//! ```
//! use graphrw::rewrite::Rewriter;
//! use graphrw::{rule_set, rules, Builder, DType, TensorMeta};
//!
//! rule_set! {
//!     /// SiLU as one op: the built-in SwiGLU kernel's rule wanted the `mul` too.
//!     static SILU;
//!
//!     rule silu(x: Tensor) -> Tensor {
//!         x.mul(x.sigmoid())
//!     } => {
//!         x.silu()?
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 8]));
//! let up = g.input("up", TensorMeta::new(DType::F32, [2usize, 8]));
//! g.output(&[x.mul(x.sigmoid()?)?.mul(up)?])?;
//! let mut graph = g.finish();
//!
//! let report = Rewriter::new(&[&SILU])
//!     .with_later(&rules::fusions())
//!     .run(&mut graph)?;
//! print!("{report}"); // ... preempted: rule `silu` at %3 mul rewrote a region that the later rule `swiglu` would have fused
//! assert_eq!(report.preempted.len(), 1);
//! assert_eq!(report.preempted[0].rule, "silu");
//! assert!(report.preempted[0].later.starts_with("swiglu"));
//! # Ok(())
//! # }
//! ```
//!
//! (Here no harm is done: SwiGLU's rule also takes `silu(gate) * up`. The check looks at
//! the graph before each of your rewrites, not at what the later passes will see.)
//!
//! ## Is my rule right? `#[verify]`
//!
//! Whether the replacement computes what the pattern computes is checked for you:
//! `rule_set!` emits a differential test for every rule, which `cargo test` runs, and
//! `#[verify(..)]` tunes or skips it. The next chapter tells how:
//! [rules that check themselves](super::_09_rules_that_check_themselves).
