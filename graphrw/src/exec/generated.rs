//! The executor of generated kernels ([`crate::generated`]): a checker that says what each
//! kernel takes, and the kernel (the forward op and its vjp ops); other nodes of these
//! ops fall back to their decomposition. [`Kernels`] wires a list of kernels into a
//! program in one call: their rules, their executor in a stack, their vjp rules.
//!
//! Dependencies run one way: this module reads the kernel descriptors of
//! [`crate::generated`] (data emitted by [`fused_kernel!`](crate::fused_kernel)); `fused`
//! itself does not import `exec` (its `generated_executor` and `Kernels` are re-exports
//! of the items here).

use std::sync::Arc;

use super::{Executor, FusedCpu, NodeView, OpExecutor, ReferenceCpu};
use crate::generated::{builtin, register_grads_of, FusedKernel, VjpKernel};
use crate::grad::GradRegistry;
use crate::meta::{DType, Device};
use crate::rewrite::{Report, RewriteError, Rewriter};
use crate::{Graph, RuleSet};

/// The name the generated-kernel executor shows in plans.
pub const GENERATED_CPU: &str = "cpu-generated";

/// Whether the CPU kernel of `k` takes `node`, with the reason when it does not.
pub fn check_node(k: &FusedKernel, node: &NodeView<'_>) -> Result<(), String> {
    check(k.tensors, k.reduction_inputs, k.rotate_inputs, node)
}

/// Whether the vjp kernel `v` of `k` takes `node` (a node of `v.op`: `k`'s parameters
/// then `g`), with the reason when it does not.
pub fn check_vjp_node(k: &FusedKernel, v: &VjpKernel, node: &NodeView<'_>) -> Result<(), String> {
    check(&vjp_operands(k), v.reduction_inputs, v.rotate_inputs, node)
}

/// The operand names of `k`'s vjp ops: its parameters, then `g`.
pub(crate) fn vjp_operands(k: &FusedKernel) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = k.tensors.to_vec();
    names.push("g");
    names
}

fn check(
    tensors: &[&str],
    reduction_inputs: &[&[usize]],
    rotate_inputs: &[&[usize]],
    node: &NodeView<'_>,
) -> Result<(), String> {
    let Some(out) = node.outputs.first() else {
        return Err("has no output".into());
    };
    if !matches!(
        out.dtype,
        DType::F32 | DType::F16 | DType::BF16 | DType::F64
    ) {
        return Err(format!(
            "output of {}: the kernel writes f32, f16, bf16 or f64",
            out.dtype
        ));
    }
    if node.inputs.len() != tensors.len() {
        return Err(format!(
            "{} operands, the kernel takes {}",
            node.inputs.len(),
            tensors.len()
        ));
    }
    for (m, name) in node.inputs.iter().zip(tensors) {
        if m.device != Device::Cpu {
            return Err(format!("operand `{name}` on {}, not the CPU", m.device));
        }
        if !matches!(
            m.dtype,
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 | DType::Bool | DType::I64
        ) {
            return Err(format!(
                "operand `{name}` of {}: the kernel reads float, bool or i64 operands",
                m.dtype
            ));
        }
    }
    check_rows(tensors, reduction_inputs, rotate_inputs, node)
}

/// The conditions of rows the CPU and CUDA kernels share: a reduction reads an operand
/// spanning the output's last dimension, and `rotate_half` rotates rows of even known
/// length read from an operand spanning them. `tensors` names the operands.
pub(crate) fn check_rows(
    tensors: &[&str],
    reduction_inputs: &[&[usize]],
    rotate_inputs: &[&[usize]],
    node: &NodeView<'_>,
) -> Result<(), String> {
    let Some(out) = node.outputs.first() else {
        return Err("has no output".into());
    };
    let last = out.shape.dims().last();
    if let Some(last) = last {
        if last.known() != Some(1) {
            for ins in reduction_inputs.iter().filter(|i| !i.is_empty()) {
                let full = ins
                    .iter()
                    .any(|&i| node.inputs.get(i).and_then(|m| m.shape.dims().last()) == Some(last));
                if !full {
                    return Err(format!(
                        "a reduction reads only operands broadcast along the last dimension ({}) or of unknown size: its row is not the output's",
                        ins.iter().map(|&i| tensors[i]).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    if !rotate_inputs.is_empty() {
        // The kernel permutes rows of even length; the decomposition takes the rest.
        let Some(last) = last else {
            return Err("rotate_half of a rank-0 output".into());
        };
        match last.known() {
            Some(d) if d % 2 == 0 => {}
            Some(d) => {
                return Err(format!(
                    "rotate_half over an odd last dimension ({d}): the kernel rotates rows of even length"
                ))
            }
            None => {
                return Err(format!(
                    "rotate_half over a last dimension of unknown size ({last})"
                ))
            }
        }
        for ins in rotate_inputs {
            let full = ins
                .iter()
                .any(|&i| node.inputs.get(i).and_then(|m| m.shape.dims().last()) == Some(last));
            if !full {
                return Err(format!(
                    "rotate_half reads only operands broadcast along the last dimension ({}): its row is not the output's",
                    ins.iter().map(|&i| tensors[i]).collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// An executor running `kernels` (and their vjp kernels) on the CPU where
/// [`check_node`] ([`check_vjp_node`]) accepts a node.
pub fn generated_executor_of(kernels: &[&'static FusedKernel]) -> OpExecutor {
    let mut ex = OpExecutor::new(GENERATED_CPU);
    for &k in kernels {
        for v in k.vjp {
            ex = ex.with_checked_kernel(
                v.op,
                move |n: &NodeView<'_>| check_vjp_node(k, v, n),
                move |n: &NodeView<'_>, x| {
                    let scalars = scalars_of(k, n)?;
                    Ok(vec![(v.cpu)(x, &scalars, n.outputs[0].dtype)?])
                },
            );
        }
        ex = ex.with_checked_kernel(
            k.op,
            move |n: &NodeView<'_>| check_node(k, n),
            move |n: &NodeView<'_>, x| {
                let scalars = scalars_of(k, n)?;
                Ok(vec![(k.cpu)(x, &scalars, n.outputs[0].dtype)?])
            },
        );
    }
    ex
}

/// The float attributes of `n`, in the order of `k`'s scalar parameters.
pub(crate) fn scalars_of(k: &FusedKernel, n: &NodeView<'_>) -> Result<Vec<f64>, String> {
    k.scalars
        .iter()
        .map(|s| n.attrs.float(s))
        .collect::<Result<Vec<f64>, _>>()
        .map_err(|e| e.0)
}

/// The executor of the built-in generated kernels (put it before the reference one).
pub fn generated_executor() -> OpExecutor {
    generated_executor_of(builtin::ALL)
}

/// A list of generated kernels wired into a program in one call: the rules that fuse
/// their decomposed forms, a stack that runs them, and their vjp rules for
/// [`grad_with`](crate::grad::grad_with).
///
/// ```
/// use graphrw::exec::plan;
/// use graphrw::generated::{Kernels, GENERATED_CPU};
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

    /// The built-in kernels ([`builtin::ALL`]).
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
        Rewriter::new(&self.rules()).run(graph)
    }

    /// The executor of these kernels and their vjp kernels on the CPU.
    pub fn executor(&self) -> OpExecutor {
        generated_executor_of(&self.kernels)
    }

    /// The default CPU stack ([`default_stack`](super::default_stack)) with the
    /// executor of these kernels first.
    pub fn stack(&self) -> Vec<Arc<dyn Executor>> {
        let mut stack: Vec<Arc<dyn Executor>> =
            vec![Arc::new(self.executor()), Arc::new(generated_executor())];
        stack.extend(after_generated());
        stack
    }

    /// The CUDA stack ([`cuda_stack`](super::cuda_stack)) on device `ordinal` with these
    /// kernels (and their vjp ops) on the GPU too, and their CPU executor after it for
    /// the nodes the GPU does not take. Errors when there is no CUDA driver or device.
    #[cfg(feature = "cuda")]
    pub fn cuda_stack(
        &self,
        ordinal: usize,
    ) -> Result<Vec<Arc<dyn Executor>>, graphrw_kernels::KernelError> {
        let cuda = super::CudaExecutor::new(ordinal)?.with_kernels(&self.kernels);
        let mut stack: Vec<Arc<dyn Executor>> = vec![Arc::new(cuda), Arc::new(self.executor())];
        stack.extend(super::cuda_stack(ordinal)?.into_iter().skip(1));
        Ok(stack)
    }

    /// Registers the vjp rule of every `#[grad]` kernel of the list in `registry`.
    pub fn register_grads(&self, registry: &mut GradRegistry) {
        register_grads_of(registry, &self.kernels);
    }
}

/// The executors of the default stack after the generated one (shared by
/// [`Kernels::stack`] and [`default_stack`](super::default_stack), so they agree).
pub(super) fn after_generated() -> Vec<Arc<dyn Executor>> {
    vec![
        Arc::new(FusedCpu),
        super::tile_executor(),
        Arc::new(ReferenceCpu),
    ]
}
