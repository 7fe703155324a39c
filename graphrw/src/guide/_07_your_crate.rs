//! # 7. Using graphrw from your crate
//!
//! ## Dependencies
//!
//! ```toml
//! [dependencies]
//! graphrw = "0.1"
//! # with the CUDA executor (cudarc, loaded at run time: builds without CUDA installed):
//! # graphrw = { version = "0.1", features = ["cuda"] }
//! ```
//!
//! `graphrw` re-exports what you need: the macros ([`pattern!`](macro@crate::pattern),
//! [`rule_set!`](crate::rule_set), [`replacement!`](crate::replacement),
//! [`fused_kernel!`](crate::fused_kernel)), the tensors and kernels of
//! `graphrw-kernels` as [`graphrw::kernels`](crate::kernels) and its
//! [`Tensor`](crate::Tensor). The macros expand to paths under `graphrw::`, so depend on
//! `graphrw` under its own name. The minimum Rust version is the `rust-version` of the
//! crate (1.89: the AVX-512 kernels use intrinsics stable since then).
//!
//! ## Which profile
//!
//! graphrw's kernels (GEMM, fused attention, generated kernels) are written for an
//! optimising compiler: unoptimised, they run tens of times slower. Release builds need
//! nothing. For `cargo test` and `cargo run` in the dev profile, optimise your
//! dependencies while keeping your own crate quick to build:
//!
//! ```toml
//! [profile.dev.package."*"]
//! opt-level = 2
//! ```
//!
//! ## What the first build costs, and what to turn off
//!
//! graphrw has one feature, `cuda` (the CUDA executor, through cudarc), and it is off
//! by default: a default build has no feature left to turn off, and turning `cuda` on
//! adds cudarc's build. What a first build costs is optimisation: most of it is
//! compiling graphrw, graphrw-kernels and the `gemm` crate (kernels for each x86
//! instruction set) with optimisations on. Measured: a clean first `cargo build` of a
//! crate with one `rule_set!` depending on graphrw by path (dev profile, Rust 1.95),
//! on a 2-vCPU Intel Xeon (family 6, model 167) that other builds shared (load
//! average 4 to 6, so the CPU time is the fairer comparison):
//!
//! | dependencies built with | wall time | CPU time (user) |
//! |---|---|---|
//! | `opt-level = 2` (the setting above) | 9 min 52 s | 588 s |
//! | `opt-level = 1` | 7 min 58 s | 441 s |
//! | `opt-level = 0` (cargo's dev default) | 2 min 55 s | 145 s |
//!
//! The dependencies are built once; later builds recompile your crate only. So while
//! you write rules (`rule_set!`, `explain`, rewriting small graphs, which do not need
//! fast kernels), leave the dependencies unoptimised, and optimise them (or build
//! `--release`) when you run models.
//!
//! ## What debug builds cost
//!
//! With debug assertions on, graphrw checks its own work: the
//! [`Rewriter`](crate::rewrite::Rewriter) verifies the whole graph after every
//! rewrite, planning verifies the planned graph, and loading verifies the imported
//! model. Each check is linear in the graph, so a pass of many rewrites over a large
//! model grows as rewrites × nodes: fine on test graphs of hundreds of nodes, seconds
//! on a whole transformer of tens of thousands. `opt-level` does not turn these checks
//! off (debug assertions are a separate setting); where your tests optimise whole
//! models, turn them off for graphrw alone:
//!
//! ```toml
//! [profile.dev.package.graphrw]
//! debug-assertions = false
//! ```
//!
//! or, for one rewriter, say so in code: the per-rewrite check is
//! [`Rewriter::with_verify_each`](crate::rewrite::Rewriter::with_verify_each), on by
//! default only in debug builds. A final [`verify`](fn@crate::verify) keeps the guarantee
//! at the end:
//!
//! ```
//! use graphrw::rewrite::Rewriter;
//! use graphrw::{rule_set, verify, Builder, DType, TensorMeta};
//!
//! rule_set! {
//!     static NEG;
//!     rule neg_neg(x: Tensor) -> Tensor {
//!         x.neg().neg()
//!     } => {
//!         x
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A chain of 1 000 `neg`s: 500 rewrites.
//! let g = Builder::new();
//! let mut y = g.input("x", TensorMeta::new(DType::F32, [8usize]));
//! for _ in 0..1000 {
//!     y = y.neg()?;
//! }
//! g.output(&[y.relu()?])?;
//! let mut graph = g.finish();
//!
//! let report = Rewriter::new(&[&NEG]).with_verify_each(false).run(&mut graph)?;
//! assert_eq!(report.counts().get("neg_neg"), Some(&500));
//! verify(&graph)?; // once, at the end
//! assert_eq!(graph.nodes_with_op("neg").count(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! ## Errors
//!
//! Every fallible call returns a `Result` whose error names the node, the op and what
//! was expected ([`GraphError`](crate::GraphError),
//! [`RewriteError`](crate::rewrite::RewriteError),
//! [`ExecError`](crate::exec::ExecError), [`OnnxError`](crate::onnx::OnnxError)); all
//! implement `std::error::Error`, so `?` into `Box<dyn Error>` or `anyhow` works. Bad
//! input never panics.
//!
//! Next: [is my rule right, and why didn't my model fuse?](super::_08_is_my_rule_right)
//! The API documentation of each module goes further, and the repository's
//! `ARCHITECTURE.md` maps where each step lives.
