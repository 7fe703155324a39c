//! Gradients of generated kernels: the vjp rule that `fused_kernel!` registers for a
//! `#[grad]` kernel builds one vjp op per parameter that needs a gradient (the
//! generated executor runs it on its vjp kernel, anything else on its decomposition).

use crate::grad::{GradError, GradRegistry, VjpContext, VjpResult};
use crate::ops::AttrValue;
use crate::Value;

use super::FusedKernel;

/// The gradients of a node of `k.op`: `<op>.vjp_<param>(params.., g)` for each operand
/// that needs one (the transform sums broadcast gradients back to the operand's shape).
pub fn vjp_nodes<'b>(cx: &VjpContext<'b>, k: &FusedKernel) -> VjpResult<'b> {
    let n = k.tensors.len();
    if k.vjp.len() != n {
        return Err(GradError::unsupported(format!(
            "`{}` has {} vjp kernels for {} tensor parameters (declare it with `#[grad]`)",
            k.op.name,
            k.vjp.len(),
            n
        )));
    }
    if cx.num_inputs() != n {
        return Err(GradError::unsupported(format!(
            "the node has {} operands, the kernel takes {n}",
            cx.num_inputs()
        )));
    }
    let b = cx.builder();
    let g = cx.cotangent(0)?;
    let mut operands: Vec<Value> = (0..n).map(|i| cx.input(i).value()).collect();
    operands.push(g.value());
    let attrs = cx.attrs();
    let scalars = k
        .scalars
        .iter()
        .map(|&s| attrs.float(s).map(|v| (s, AttrValue::Float(v))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| GradError::unsupported(e.0))?;
    let mut out = Vec::with_capacity(n);
    for (i, v) in k.vjp.iter().enumerate() {
        if !cx.needs_grad(i) {
            out.push(None);
            continue;
        }
        let r = b.apply(v.op, &operands, &scalars)?;
        out.push(Some(b.var(r[0])));
    }
    Ok(out)
}

/// Registers the vjp rule of every `#[grad]` kernel of `kernels` (others keep being
/// differentiated through their decomposition).
pub fn register_grads_of(registry: &mut GradRegistry, kernels: &[&'static FusedKernel]) {
    for k in kernels {
        if let Some(rule) = k.grad {
            registry.register(k.op, rule);
        }
    }
}

/// Registers the vjp rules of the built-in kernels ([`builtin::ALL`](super::builtin::ALL)).
pub fn register_grads(registry: &mut GradRegistry) {
    register_grads_of(registry, super::builtin::ALL);
}
