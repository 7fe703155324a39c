//! Generated fused kernels: [`fused_kernel!`](crate::fused_kernel) definitions, the
//! built-in ones ([`builtin`]), the pass that fuses their decomposed forms
//! ([`fuse_kernels`]); the executor that runs them is [`crate::exec::generated_executor`],
//! and [`Kernels`](crate::Kernels) wires a list of kernels (rules, stack, vjp rules) in one call.
//!
//! Besides elementwise ops and last-dimension reductions, a body may rotate a tensor
//! parameter by half its last dimension, `x.rotate_half()` (see [`rotate_half`]; rotary
//! position embeddings): the rule matches the `slice`/`neg`/`concat` chain exporters write
//! ([`is_rotate_half`]), the kernel runs a row at a time reading `x` at rotated positions
//! (even rows only, `x` spanning the row: other nodes run the decomposition), and the vjp
//! uses the transpose ([`rotate_half_transpose`]).
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
//! b.output(&[y.sum()?])?;
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
mod grad;

// The executor lives in `exec` (which reads the descriptors defined here), and
// `Kernels`, which wires kernels into rules, a stack and vjp rules, in `rules`: this
// module imports neither.
pub use grad::{register_grads, register_grads_of, vjp_nodes};

use graphrw_kernels::{KernelError, Tensor};

use crate::grad::VjpFn;
use crate::meta::DType;
use crate::ops::OpDef;
use crate::pattern::TensorRef;
use crate::rewrite::{Report, RewriteError, Rewriter};
use crate::{Builder, Graph, GraphError, RuleSet, Value};

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
/// The source leaves out the prelude it is compiled after (the f16/bf16 loads and stores
/// shared by every CUDA source of the workspace, and the generated kernels' helpers):
/// `graphrw_kernels::cuda::generated_source` puts it first, and the CUDA executor
/// (feature `cuda`) compiles and launches it at first use.
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
    /// Per `rotate_half` of the kernel, the operands it reads (one must span the output's
    /// last dimension, which must be even).
    pub rotate_inputs: &'static [&'static [usize]],
    /// Its CUDA source (entry `vjp_<param>`, same conventions as the forward's).
    pub cuda: CudaSource,
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
    /// Per `rotate_half`, the tensor operands it reads (one must span the output's last
    /// dimension, which must be even).
    pub rotate_inputs: &'static [&'static [usize]],
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

/// The last dimension of `x` and its half, for the decompositions of `rotate_half`.
fn last_dim_halves(b: &Builder, x: Value, op: &'static str) -> Result<(i64, i64), GraphError> {
    let meta = b.meta(x)?;
    let d = match meta.shape.dims().last() {
        Some(d) => d.known(),
        None => {
            return Err(GraphError::Signature {
                op,
                node: None,
                message: "rotate_half needs a tensor of rank 1 or more".into(),
            })
        }
    };
    let d = d
        .and_then(|d| i64::try_from(d).ok())
        .ok_or_else(|| GraphError::Signature {
            op,
            node: None,
            message: format!(
                "rotate_half needs a known last dimension, found {}",
                meta.shape
            ),
        })?;
    Ok((d, d / 2))
}

/// Rotate-half over the last dimension `d` of `x` (`h = d / 2`), as exporters write it for
/// rotary position embeddings: `concat([neg(x[.., h:]), x[.., :h]], -1)`. The
/// decomposition of `x.rotate_half()` in a [`fused_kernel!`](crate::fused_kernel); the
/// last dimension must be known.
pub fn rotate_half(b: &Builder, x: Value) -> Result<Value, GraphError> {
    let (_, h) = last_dim_halves(b, x, "rotate_half")?;
    let lo = b.slice_with(x, -1, 0, h, 1)?;
    let hi = b.slice_with(x, -1, h, i64::MAX, 1)?;
    let neg = b.neg(hi)?;
    b.concat_with(&[neg, lo], -1)
}

/// The transpose of [`rotate_half`] over the last dimension `d` of `g` (`h = d / 2`):
/// `concat([g[.., d - h:], neg(g[.., :d - h])], -1)`, which is `-rotate_half(g)` when `d`
/// is even. The vjp of `rotate_half` in derived kernels.
pub fn rotate_half_transpose(b: &Builder, g: Value) -> Result<Value, GraphError> {
    let (d, h) = last_dim_halves(b, g, "rotate_half")?;
    let lo = b.slice_with(g, -1, 0, d - h, 1)?;
    let hi = b.slice_with(g, -1, d - h, i64::MAX, 1)?;
    let neg = b.neg(lo)?;
    b.concat_with(&[hi, neg], -1)
}

/// Whether the attributes of a matched `concat([neg(slice(x, hi)), slice(x, lo)], dim)`
/// make it [`rotate_half`] of `x`: the slices and the concat along `x`'s last dimension
/// (`dims`: hi slice, lo slice, concat; `-1` or `rank - 1`), `lo` the first `d / 2`
/// elements (`start = 0` is matched by the pattern, `lo_end` here) and `hi` the rest, with
/// bounds as python slices (negative from the end, clamped). The last dimension must be
/// known. Called by the rules [`fused_kernel!`](crate::fused_kernel) emits.
pub fn is_rotate_half(
    x: TensorRef<'_>,
    dims: [i64; 3],
    hi_start: i64,
    hi_end: i64,
    lo_end: i64,
) -> bool {
    let rank = x.rank() as i64;
    let Some(d) = x
        .dim(-1)
        .and_then(|d| d.known())
        .and_then(|d| i64::try_from(d).ok())
    else {
        return false;
    };
    let h = d / 2;
    let bound = |v: i64| {
        if v < 0 {
            v.saturating_add(d).max(0)
        } else {
            v.min(d)
        }
    };
    dims.iter().all(|&a| a == -1 || a == rank - 1)
        && bound(lo_end) == h
        && bound(hi_start) == h
        && bound(hi_end) == d
}
