//! # 4. Your own op and executor
//!
//! ## An op
//!
//! The built-in ops are declared in one table; yours are declared the same way, as a
//! `static` [`OpDef`](crate::ops::OpDef): a name (give it a dotted prefix of your own,
//! like `my.scale`), operands, attributes with defaults, an output count, and how its
//! output metadata is found — an inference function, or `Infer::Like`: like its
//! decomposition, built from existing ops. [`Builder::apply`](crate::Builder::apply)
//! makes a node of it; defaults are filled in, and your inference function's error is
//! reported with the op's name.
//!
//! ```
//! use graphrw::ops::{
//!     Arity, AttrDefault, AttrKind, AttrSpec, AttrValue, Attrs, Infer, InferError, OpClass,
//!     OpDef, OperandSpec, OutputCount,
//! };
//! use graphrw::{verify, Builder, DType, TensorMeta};
//!
//! fn infer_scale(inputs: &[&TensorMeta], attrs: &Attrs) -> Result<Vec<TensorMeta>, InferError> {
//!     if !inputs[0].dtype.is_float() {
//!         return Err(InferError(format!("expected a float tensor, found {}", inputs[0].dtype)));
//!     }
//!     attrs.float("factor")?;
//!     Ok(vec![inputs[0].clone()])
//! }
//!
//! /// `input * factor`, with its own inference.
//! static SCALE: OpDef = OpDef {
//!     name: "my.scale",
//!     doc: "Multiplies by a constant factor.",
//!     operands: &[OperandSpec { name: "input", arity: Arity::Required }],
//!     attrs: &[AttrSpec {
//!         name: "factor",
//!         kind: AttrKind::Float,
//!         default: AttrDefault::Float(1.0),
//!     }],
//!     outputs: OutputCount::Fixed(1),
//!     commutative: false,
//!     class: OpClass::Elementwise,
//!     infer: Infer::Fn(infer_scale),
//!     decompose: None,
//!     builtin: None, // not one of graphrw's built-in ops
//! };
//!
//! # fn main() -> Result<(), graphrw::GraphError> {
//! let b = Builder::new();
//! let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let y = b.apply(&SCALE, &[x.value()], &[("factor", AttrValue::Float(0.5))])?;
//! b.output(&[b.var(y[0])])?;
//! let graph = b.finish();
//! verify(&graph)?;
//! assert!(graph.to_string().contains("t0 = my.scale(x, factor=0.5)"));
//!
//! // An integer input is refused by the op's own check, named in the error.
//! let b = Builder::new();
//! let i = b.input("i", TensorMeta::new(DType::I64, [2usize]));
//! let e = b.apply(&SCALE, &[i.value()], &[]).unwrap_err().to_string();
//! assert!(e.contains("my.scale") && e.contains("expected a float tensor, found i64"), "{e}");
//! # Ok(())
//! # }
//! ```
//!
//! A user op is called in patterns by the path of its static (`my_ops::SCALE(x)`), so
//! rules can produce and consume it like a built-in op.
//!
//! ## An executor
//!
//! Executors decide who runs each node. A [`plan`](crate::exec::plan) takes a graph and
//! an ordered stack of executors; for each node the first executor whose checker accepts
//! it runs it. Checkers see metadata and attributes only (a
//! [`NodeView`](crate::exec::NodeView)), never values, so a plan is made once. An op
//! declared `like` a decomposition needs no kernel at all: where no executor takes it,
//! the planner runs its decomposition instead. [`OpExecutor`](crate::exec::OpExecutor)
//! is the quick way to give ops kernels, with or without a checker:
//!
//! ```
//! use std::sync::Arc;
//!
//! use graphrw::exec::{plan, reference_stack, Executor, OpExecutor, ReferenceCpu};
//! use graphrw::kernels::cpu::{self, BinaryOp};
//! use graphrw::ops::{Arity, Attrs, Infer, OpClass, OpDef, OperandSpec, OutputCount};
//! use graphrw::{Builder, DType, GraphError, Tensor, TensorMeta, Value};
//!
//! fn multimul_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
//!     Ok(vec![b.mul(x[0], x[1])?, b.mul(x[2], x[3])?])
//! }
//!
//! /// Thunder's seed example: `multimul(a, b, c, d) -> (a * b, c * d)`, metadata `like`
//! /// its decomposition.
//! static MULTIMUL: OpDef = OpDef {
//!     name: "my.multimul",
//!     doc: "Two products in one call.",
//!     operands: &[
//!         OperandSpec { name: "a", arity: Arity::Required },
//!         OperandSpec { name: "b", arity: Arity::Required },
//!         OperandSpec { name: "c", arity: Arity::Required },
//!         OperandSpec { name: "d", arity: Arity::Required },
//!     ],
//!     attrs: &[],
//!     outputs: OutputCount::Fixed(2),
//!     commutative: false,
//!     class: OpClass::Elementwise,
//!     infer: Infer::Like,
//!     decompose: Some(multimul_like),
//!     builtin: None,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let b = Builder::new();
//! let x: Vec<Value> = (0..4)
//!     .map(|i| b.input(&format!("x{i}"), TensorMeta::new(DType::F32, [2usize])).value())
//!     .collect();
//! let outs = b.apply(&MULTIMUL, &x, &[])?;
//! b.output(&[b.var(outs[0]), b.var(outs[1])])?;
//! let graph = b.finish();
//!
//! // Our kernel first, then the reference kernels for everything else.
//! let mine = OpExecutor::new("multimul").with_kernel(&MULTIMUL, |_, x| {
//!     Ok(vec![
//!         cpu::binary(BinaryOp::Mul, x[0], x[1])?,
//!         cpu::binary(BinaryOp::Mul, x[2], x[3])?,
//!     ])
//! });
//! let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(mine), Arc::new(ReferenceCpu)];
//! let p = plan(&graph, &stack)?;
//! assert!(p.to_string().contains("my.multimul(x0, x1, x2, x3)  # f32[2], f32[2]  | multimul"));
//!
//! let t = |v: Vec<f32>| Tensor::from_vec(vec![2], v);
//! let inputs = [t(vec![1., 2.])?, t(vec![3., 4.])?, t(vec![5., 6.])?, t(vec![7., 8.])?];
//! let (out, _report) = p.run(&inputs)?;
//! assert_eq!(out[0].as_slice::<f32>()?, &[3., 8.]);
//! assert_eq!(out[1].as_slice::<f32>()?, &[35., 48.]);
//!
//! // Without our executor, the planner falls back to the decomposition: two `mul`s.
//! // The plan's printout says so first, with each executor's refusal, and so does
//! // `plan.fallbacks()` (and `graphrw run --profile`).
//! let p = plan(&graph, &reference_stack())?;
//! let text = p.to_string();
//! assert!(text.contains("# runs as its decomposition (no executor took it): t0, t1 = my.multimul("));
//! assert!(text.contains("#   refused by cpu-reference: `my.multimul` is not a built-in op"));
//! assert_eq!(text.matches("= mul(").count(), 2);
//! assert_eq!(p.fallbacks().len(), 1);
//! assert_eq!(p.run(&inputs)?.0[1].as_slice::<f32>()?, &[35., 48.]);
//! # Ok(())
//! # }
//! ```
//!
//! [`OpExecutor::with_checked_kernel`](crate::exec::OpExecutor::with_checked_kernel)
//! adds a checker: `Ok(())` to take a node, `Err(reason)` to pass it on to the next
//! executor; a node every executor passes on runs as its decomposition, and the
//! plan's printout lists it with each checker's reason. `with_transform` replaces an accepted node by a subgraph (Thunder's
//! execution transforms). For full control, implement the
//! [`Executor`](crate::exec::Executor) trait. When no executor takes a node and it has no
//! decomposition, [`plan`](crate::exec::plan) fails with each executor's reason.
//!
//! ## In and out of ONNX
//!
//! An op of your own needs nothing more to be saved: [`onnx::save`](crate::onnx::save)
//! writes a node of an op with a decomposition as a call of a model-local ONNX function
//! (domain [`FUNCTION_DOMAIN`](crate::onnx::FUNCTION_DOMAIN)) whose body is the
//! decomposition, which onnxruntime runs; loading inlines the function's body, so the
//! loaded graph holds the ops of the decomposition. A rule (chapter 1) that matches
//! them gives your op back, and [`fused_kernel!`](crate::fused_kernel) (chapter 5)
//! writes that rule for you.
//!
//! ```
//! use graphrw::exec::{plan, reference_stack};
//! use graphrw::ops::{Arity, AttrDefault, AttrKind, AttrSpec, AttrValue, Attrs, Infer, OpClass,
//!     OpDef, OperandSpec, OutputCount};
//! use graphrw::{onnx, Builder, DType, GraphError, Tensor, TensorMeta, Value};
//!
//! fn scale_like(b: &Builder, x: &[Value], attrs: &Attrs) -> Result<Vec<Value>, GraphError> {
//!     let factor = attrs.float("factor").map_err(|e| GraphError::Signature {
//!         op: "my.scale",
//!         node: None,
//!         message: e.0,
//!     })?;
//!     Ok(vec![b.var(x[0]).mul(factor)?.value()])
//! }
//!
//! /// `input * factor`, metadata `like` its decomposition.
//! static SCALE: OpDef = OpDef {
//!     name: "my.scale",
//!     doc: "Multiplies by a constant factor.",
//!     operands: &[OperandSpec { name: "input", arity: Arity::Required }],
//!     attrs: &[AttrSpec { name: "factor", kind: AttrKind::Float, default: AttrDefault::Float(1.0) }],
//!     outputs: OutputCount::Fixed(1),
//!     commutative: false,
//!     class: OpClass::Elementwise,
//!     infer: Infer::Like,
//!     decompose: Some(scale_like),
//!     builtin: None,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let b = Builder::new();
//! let x = b.input("x", TensorMeta::new(DType::F32, [3usize]));
//! let y = b.apply(&SCALE, &[x.value()], &[("factor", AttrValue::Float(2.0))])?;
//! b.output(&[b.var(y[0])])?;
//! let graph = b.finish();
//!
//! let back = onnx::load_bytes(&onnx::to_bytes(&graph)?)?;
//! assert_eq!(back.nodes_of(&SCALE).count(), 0);
//! assert_eq!(back.nodes_with_op("mul").count(), 1);
//! let input = [Tensor::from_vec(vec![3], vec![1f32, 2., 3.])?];
//! let (out, _) = plan(&back, &reference_stack())?.run(&input)?;
//! assert_eq!(out[0].as_slice::<f32>()?, &[2., 4., 6.]);
//! # Ok(())
//! # }
//! ```
//!
//! ## How many files a new op touches
//!
//! - **Your own op**: one file of your crate — its `static OpDef`, its kernel (an
//!   [`OpExecutor`](crate::exec::OpExecutor) entry, or none when its decomposition is
//!   fast enough), and nothing for ONNX (above). Every registry keys it by its
//!   [`OpId`](crate::ops::OpId), interned from its name the first time it is used.
//! - **A built-in op**: its row in the op table (`graphrw-ops/src/vocab.rs`), its
//!   inference function (`graphrw/src/ir/ops/infer.rs`), and a reference kernel
//!   (`graphrw-kernels/src/cpu/`) when no existing one computes it; the row's `grad`
//!   column says how it is differentiated, and an op with a rule of its own adds it to
//!   `graphrw/src/grad/vjp_rules.rs`. Then the compiler points at the four exhaustive
//!   `match`es over [`Op`](crate::ops::Op) that must say what the op is to them (the
//!   reference executor, the CUDA executor's checker and kernels, the tile executor's
//!   lanes), and a one-to-one ONNX mapping is a row of the ONNX table
//!   (`graphrw/src/onnx/table/mod.rs`): nine files in all, seven when an existing
//!   kernel serves and it has no vjp rule of its own. The goal of three is not reached
//!   yet; turning those `match` lists into columns of the op table is what is left.
//!
//! Next: [your own fused kernel](super::_05_fused_kernel), which writes the op, its rule
//! and its kernels for you.
