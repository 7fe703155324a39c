//! [`Kernels`]: a list of generated kernels wired into a program in one call (their
//! rules for the rewriter, their executor in a stack, their vjp rules for the gradient
//! transform). It sits above the rewriter, the executors and the gradients, which know
//! nothing of it.

use std::sync::Arc;

use crate::exec::{
    after_generated, generated_executor, generated_executor_of, Executor, OpExecutor,
};
use crate::generated::{builtin, register_grads_of, FusedKernel};
use crate::grad::GradRegistry;
use crate::rewrite::{Report, RewriteError, Rewriter, Verify};
use crate::{Graph, RuleSet};

/// A list of generated kernels wired into a program in one call: the rules that fuse
/// their decomposed forms, a stack that runs them, and their vjp rules for
/// [`grad_with`](crate::grad::grad_with).
///
/// ```
/// use graphrw::exec::plan;
/// use graphrw::exec::GENERATED_CPU;
/// use graphrw::Kernels;
/// use graphrw::{fused_kernel, Builder, DType, Tensor, TensorMeta};
///
/// fused_kernel! {
///     /// `x * sigmoid(x * beta)`.
///     #[op = "my.swish"]
///     #[grad]
///     pub fn swish(x: Tensor, beta: f64) -> Tensor {
///         x.mul(x.mul(beta).sigmoid())
///     }
/// }
/// let kernels = Kernels::new(&[&swish::KERNEL]);
///
/// // A graph holding the decomposed chain, fused by the kernel's rules.
/// let b = Builder::new();
/// let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
/// let y = x.mul(x.mul(1.5)?.sigmoid()?)?;
/// b.output(&[y])?;
/// let mut graph = b.finish();
/// let report = kernels.fuse(&mut graph)?;
/// assert_eq!(report.firings.len(), 1);
/// assert_eq!(graph.nodes_with_op("my.swish").count(), 1);
///
/// // Planned on `kernels.stack()`, the node runs on the generated kernel.
/// let p = plan(&graph, &kernels.stack())?;
/// assert!(p.assignments().any(|(_, e)| e == GENERATED_CPU));
/// let (out, _) = p.run(&[Tensor::from_vec(vec![2, 3], vec![1f32; 6])?])?;
/// let want = 1.0 / (1.0 + (-1.5f64).exp());
/// assert!((out[0].to_f64_vec()[0] - want).abs() < 1e-6);
///
/// // Its vjp rule, for `grad_with`.
/// let mut registry = graphrw::grad::GradRegistry::with_builtins();
/// kernels.register_grads(&mut registry);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Kernels {
    kernels: Vec<&'static FusedKernel>,
}

impl Kernels {
    /// The kernels of `kernels` (their `KERNEL` statics), in order.
    pub fn new(kernels: &[&'static FusedKernel]) -> Kernels {
        Kernels {
            kernels: kernels.to_vec(),
        }
    }

    /// The built-in kernels ([`builtin::ALL`](crate::generated::builtin::ALL)).
    pub fn builtin() -> Kernels {
        Kernels::new(builtin::ALL)
    }

    /// The kernels.
    pub fn kernels(&self) -> &[&'static FusedKernel] {
        &self.kernels
    }

    /// The rule sets that fuse the kernels' decomposed forms (for
    /// [`Rewriter::new`]).
    pub fn rules(&self) -> Vec<&'static RuleSet> {
        self.kernels.iter().map(|k| k.rules).collect()
    }

    /// Fuses every decomposed form of the kernels in `graph`, to a fixed point.
    pub fn fuse(&self, graph: &mut Graph) -> Result<Report, RewriteError> {
        self.fuse_with(graph, Verify::default())
    }

    /// [`Kernels::fuse`], verifying as `verify` says ([`Verify`]).
    pub fn fuse_with(&self, graph: &mut Graph, verify: Verify) -> Result<Report, RewriteError> {
        Rewriter::new(&self.rules()).with_verify(verify).run(graph)
    }

    /// The executor of these kernels and their vjp kernels on the CPU.
    pub fn executor(&self) -> OpExecutor {
        generated_executor_of(&self.kernels)
    }

    /// The default CPU stack ([`default_stack`](crate::exec::default_stack)) with the
    /// executor of these kernels first.
    pub fn stack(&self) -> Vec<Arc<dyn Executor>> {
        let mut stack: Vec<Arc<dyn Executor>> =
            vec![Arc::new(self.executor()), Arc::new(generated_executor())];
        stack.extend(after_generated());
        stack
    }

    /// The CUDA stack ([`cuda_stack`](crate::exec::cuda_stack)) on device `ordinal` with these
    /// kernels (and their vjp ops) on the GPU too, and their CPU executor after it for
    /// the nodes the GPU does not take. Errors when there is no CUDA driver or device.
    #[cfg(feature = "cuda")]
    pub fn cuda_stack(
        &self,
        ordinal: usize,
    ) -> Result<Vec<Arc<dyn Executor>>, graphrw_kernels::KernelError> {
        let cuda = crate::exec::CudaExecutor::new(ordinal)?.with_kernels(&self.kernels);
        let mut stack: Vec<Arc<dyn Executor>> = vec![Arc::new(cuda), Arc::new(self.executor())];
        stack.extend(crate::exec::cuda_stack(ordinal)?.into_iter().skip(1));
        Ok(stack)
    }

    /// Registers the vjp rule of every `#[grad]` kernel of the list in `registry`.
    pub fn register_grads(&self, registry: &mut GradRegistry) {
        register_grads_of(registry, &self.kernels);
    }
}
