//! # 5. Your own fused kernel
//!
//! Memory-bound chains of elementwise ops (an activation, a normalisation) run fastest
//! as one pass over the data. [`fused_kernel!`](crate::fused_kernel) generates
//! everything such a pass needs from one definition, at compile time:
//!
//! - `OP`: the op (`#[op = "my.swish"]`), declared `like` its decomposition, so it runs
//!   anywhere even without its kernel;
//! - `RULES`: the rule that finds the decomposed chain in a graph and fuses it;
//! - `cpu`: a one-pass CPU kernel (f32 maths for f16/bf16 storage, rayon over rows,
//!   AVX2+FMA and AVX-512 variants chosen at run time);
//! - `CUDA_SOURCE`: its CUDA C source, compiled with NVRTC at first use by the CUDA
//!   executor (feature `cuda`);
//! - with `#[grad]`, `VJP`: its vector-Jacobian products, derived symbolically, each a
//!   fused kernel too;
//! - `KERNEL`: all of the above in one static.
//!
//! The body is `let` bindings and one expression of elementwise ops, reductions over
//! the last dimension (`sum`/`mean`/`amax` with `dims = [-1], keepdim = true`) and
//! `rotate_half()`; anything else is a compile error that lists what is supported.
//! [`Kernels`](crate::Kernels) wires a list of kernels into a program: `fuse` runs their
//! rules, `stack` puts their executor before [`default_stack`](crate::exec::default_stack),
//! `register_grads` makes [`grad_with`](crate::grad::grad_with) use their vjp kernels.
//!
//! ```
//! use graphrw::exec::{plan, reference_stack, GENERATED_CPU};
//! use graphrw::{fused_kernel, Builder, DType, Kernels, Tensor, TensorMeta};
//!
//! fused_kernel! {
//!     /// `x * sigmoid(x * beta)`.
//!     #[op = "my.swish"]
//!     #[grad]
//!     pub fn swish(x: Tensor, beta: f64) -> Tensor {
//!         x.mul(x.mul(beta).sigmoid())
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kernels = Kernels::new(&[&swish::KERNEL]);
//!
//! // A graph holding the decomposed chain, as an exporter writes it.
//! let b = Builder::new();
//! let x = b.input("x", TensorMeta::new(DType::F32, [4usize, 8]));
//! let y = x.mul(x.mul(1.5)?.sigmoid()?)?;
//! b.output(&[y])?;
//! let unfused = b.finish();
//!
//! let mut graph = unfused.clone();
//! kernels.fuse(&mut graph)?;
//! assert_eq!(graph.nodes_with_op("my.swish").count(), 1);
//! assert_eq!(graph.nodes_with_op("sigmoid").count(), 0);
//!
//! // Planned on `kernels.stack()`, the node runs on the generated kernel...
//! let p = plan(&graph, &kernels.stack())?;
//! assert!(p.assignments().any(|(_, e)| e == GENERATED_CPU));
//! let input: Vec<f32> = (0..32).map(|i| i as f32 / 8.0 - 2.0).collect();
//! let input = Tensor::from_vec(vec![4, 8], input)?;
//! let (fused_out, _) = p.run(&[input.clone()])?;
//!
//! // ...and agrees with the unfused chain on the reference kernels.
//! let (want, _) = plan(&unfused, &reference_stack())?.run(&[input])?;
//! for (a, b) in fused_out[0].to_f64_vec().iter().zip(want[0].to_f64_vec()) {
//!     assert!((a - b).abs() < 1e-5, "{a} vs {b}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The derivative comes for free: with `#[grad]`, the backward graph of a fused node
//! uses the derived vjp kernel (`my.swish.vjp_x`) instead of differentiating through the
//! decomposition:
//!
//! ```
//! use graphrw::exec::{plan, GENERATED_CPU};
//! use graphrw::grad::{grad_with, Cotangents, GradRegistry};
//! use graphrw::{fused_kernel, Builder, DType, Kernels, Tensor, TensorMeta};
//!
//! fused_kernel! {
//!     #[op = "my.swish"]
//!     #[grad]
//!     pub fn swish(x: Tensor, beta: f64) -> Tensor {
//!         x.mul(x.mul(beta).sigmoid())
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kernels = Kernels::new(&[&swish::KERNEL]);
//! let b = Builder::new();
//! let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let loss = x.mul(x.mul(1.0)?.sigmoid()?)?.sum()?;
//! b.output(&[loss])?;
//! let wrt = [x.value()];
//! let mut graph = b.finish();
//! kernels.fuse(&mut graph)?;
//!
//! let mut registry = GradRegistry::with_builtins();
//! kernels.register_grads(&mut registry);
//! let backward = grad_with(&graph, &wrt, &registry, Cotangents::Scalar)?;
//! let p = plan(&backward, &kernels.stack())?;
//! let on_generated: Vec<String> = p
//!     .assignments()
//!     .filter(|(_, e)| *e == GENERATED_CPU)
//!     .map(|(n, _)| p.graph().try_node(n).unwrap().op_name().to_string())
//!     .collect();
//! assert!(on_generated.iter().any(|op| op == "my.swish.vjp_x"), "{on_generated:?}");
//!
//! // d/dx of x * sigmoid(x) at 0 is 1/2.
//! let (out, _) = p.run(&[Tensor::from_vec(vec![2, 3], vec![0f32; 6])?])?;
//! let dx = out.last().unwrap().to_f64_vec();
//! assert!(dx.iter().all(|g| (g - 0.5).abs() < 1e-6), "{dx:?}");
//! # Ok(())
//! # }
//! ```
//!
//! A fused op is saved to ONNX as a model-local function whose body is its
//! decomposition ([chapter 6](super::_06_onnx_and_cli)); loading inlines it again, and
//! `kernels.fuse` fuses it back. The built-in kernels (GELU, SwiGLU, RMSNorm, LayerNorm,
//! rotary embeddings and others, in [`crate::generated::builtin`]) are written with the
//! same macro.
//!
//! Next: [ONNX in and out, and the CLI](super::_06_onnx_and_cli).
