//! The executor of generated kernels ([`crate::generated`]): a checker that says what each
//! kernel takes, and the kernel (the forward op and its vjp ops); other nodes of these
//! ops fall back to their decomposition. It reads the kernel descriptors of
//! [`crate::generated`] (data emitted by [`fused_kernel!`](crate::fused_kernel)), and nothing
//! of the rewriter or the gradients: [`Kernels`](crate::Kernels), which wires a
//! list of kernels into a program (rules, stack, vjp rules), lives in `rules`.

use std::sync::Arc;

use super::{Executor, FusedCpu, NodeView, OpExecutor, ReferenceCpu};
use crate::generated::{builtin, FusedKernel, VjpKernel};
use crate::meta::{DType, Device};

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

/// The executors of the default stack after the generated one (shared by
/// [`Kernels::stack`] and [`default_stack`](super::default_stack), so they agree).
pub(crate) fn after_generated() -> Vec<Arc<dyn Executor>> {
    vec![
        Arc::new(FusedCpu),
        super::tile_executor(),
        Arc::new(ReferenceCpu),
    ]
}
