//! Generated fused kernels: [`fused_kernel!`](crate::fused_kernel) definitions, the
//! built-in ones ([`builtin`]), the pass that fuses their decomposed forms
//! ([`fuse_kernels`]) and the executor that runs them ([`generated_executor`]).
//!
//! ```
//! use graphrw::fused_kernel;
//!
//! fused_kernel! {
//!     /// `x * sigmoid(x * beta)`: Swish with a learnt-free scale.
//!     #[op = "my.swish"]
//!     #[grad]
//!     pub fn swish(x: Tensor, beta: f64) -> Tensor {
//!         x.mul(x.mul(beta).sigmoid())
//!     }
//! }
//! // `swish::OP` is an ordinary op (`like` its decomposition), `swish::RULES` fuses the
//! // decomposed chain, `swish::cpu` is the kernel, `swish::CUDA_SOURCE` its CUDA C,
//! // `swish::VJP` its vjp kernels, and `swish::KERNEL` ties them together.
//! let x = graphrw::Tensor::from_vec(vec![3], vec![-1f32, 0.0, 2.0])?;
//! let y = (swish::KERNEL.cpu)(&[&x], &[1.0], graphrw::DType::F32)?;
//! assert!((y.to_f64_vec()[2] - 2.0 / (1.0 + (-2f64).exp())).abs() < 1e-6);
//!
//! // With `#[grad]`, `swish::register_grad` makes the gradient transform use the vjp
//! // op `my.swish.vjp_x` (run by the generated executor on `swish::VJP[0]`).
//! let mut registry = graphrw::grad::GradRegistry::with_builtins();
//! swish::register_grad(&mut registry);
//! let b = graphrw::Builder::new();
//! let xin = b.input("x", graphrw::TensorMeta::new(graphrw::DType::F32, [3usize]));
//! let attrs = [("beta", graphrw::ops::AttrValue::Float(1.0))];
//! let y = b.var(b.apply(&swish::OP, &[xin.value()], &attrs)?[0]);
//! b.output(&[y.sum(&[], false)?])?;
//! let wrt = [xin.value()];
//! let backward = graphrw::grad::grad_with(
//!     &b.finish(),
//!     &wrt,
//!     &registry,
//!     graphrw::grad::Cotangents::Scalar,
//! )?;
//! assert_eq!(backward.nodes_with_op("my.swish.vjp_x").count(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod builtin;
mod executor;
mod grad;

pub use executor::{
    check_node, check_vjp_node, generated_executor, generated_executor_of, GENERATED_CPU,
};
pub use grad::{register_grads, register_grads_of, vjp_nodes};

use graphrw_kernels::{KernelError, Tensor};

use crate::grad::VjpFn;
use crate::meta::DType;
use crate::ops::OpDef;
use crate::rewrite::{Report, RewriteError, Rewriter};
use crate::{Graph, RuleSet};

/// A generated CPU kernel: tensor operands, scalar attributes (in declaration order),
/// output dtype.
pub type CpuFn = fn(&[&Tensor], &[f64], DType) -> Result<Tensor, KernelError>;

/// How a generated CUDA kernel is launched (the source's header says it in full).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaLaunch {
    /// Grid-stride over every output element (any grid; 256 threads per block).
    Elementwise,
    /// One block of 256 threads per row of the last dimension (`grid.x = rows`).
    Rows,
}

/// The CUDA C source of a generated kernel, for NVRTC. Arguments: `(out, in0.., scalars
/// (f32), meta (i64: rank, output shape, each operand's broadcast strides), count)`;
/// `DTYPE_ID` (0 f32, 1 f16, 2 bf16) selects the storage type of operands and output.
#[derive(Clone, Copy, Debug)]
pub struct CudaSource {
    /// The source.
    pub source: &'static str,
    /// The `extern "C"` entry point.
    pub entry: &'static str,
    /// The launch shape.
    pub launch: CudaLaunch,
}

/// One vjp kernel of a generated kernel: the gradient of one tensor parameter, at the
/// output's broadcast shape (sum it over broadcast dims for a broadcast parameter).
#[derive(Clone, Copy, Debug)]
pub struct VjpKernel {
    /// The parameter.
    pub param: &'static str,
    /// Its op, `<op>.vjp_<param>`: the parameters then the output gradient `g`, the
    /// forward's attributes; `like` its decomposition (the derived expression).
    pub op: &'static OpDef,
    /// Its CPU kernel: the parameters then the output gradient.
    pub cpu: CpuFn,
    /// Per last-dimension reduction of the kernel, the operands it reads.
    pub reduction_inputs: &'static [&'static [usize]],
    /// Its CUDA source (entry `vjp_<param>`, same conventions).
    pub cuda_source: &'static str,
}

/// Everything `fused_kernel!` emits for one kernel.
#[derive(Debug)]
pub struct FusedKernel {
    /// The op (its `like` is the decomposition).
    pub op: &'static OpDef,
    /// The CPU kernel.
    pub cpu: CpuFn,
    /// Tensor parameter names, in operand order.
    pub tensors: &'static [&'static str],
    /// Scalar parameter names (float attributes of the op), in order.
    pub scalars: &'static [&'static str],
    /// Per last-dimension reduction, the tensor operands it reads.
    pub reduction_inputs: &'static [&'static [usize]],
    /// The CUDA source.
    pub cuda: CudaSource,
    /// The rules that fuse the decomposed forms.
    pub rules: &'static RuleSet,
    /// The vjp kernels (empty unless `#[grad]`).
    pub vjp: &'static [VjpKernel],
    /// The vjp rule that builds the vjp ops (`Some` with `#[grad]`); see
    /// [`register_grads_of`].
    pub grad: Option<VjpFn>,
}

/// Fuses every decomposed form of `kernels` in `graph`, to a fixed point.
pub fn fuse_with(
    graph: &mut Graph,
    kernels: &[&'static FusedKernel],
) -> Result<Report, RewriteError> {
    let sets: Vec<&'static RuleSet> = kernels.iter().map(|k| k.rules).collect();
    Rewriter::new(&sets).run(graph)
}

/// The rule sets of the built-in kernels.
pub fn builtin_rules() -> Vec<&'static RuleSet> {
    builtin::ALL.iter().map(|k| k.rules).collect()
}

/// Fuses the built-in kernels' chains in `graph` (run it after
/// [`fuse_attention`](crate::rules::fuse_attention)).
pub fn fuse_kernels(graph: &mut Graph) -> Result<Report, RewriteError> {
    fuse_with(graph, builtin::ALL)
}
