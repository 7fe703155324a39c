//! The fused CPU executor: `scaled_dot_product_attention` through the blocked
//! online-softmax kernel of `graphrw-kernels::fused`, for the cases its checker accepts;
//! other attention nodes fall through to the next executor or the op's decomposition.
//! It also runs the attention backward and the softmax cross-entropy (forward and
//! backward) on their fused kernels.

use graphrw_kernels::fused::{self, FullyMaskedRows, SdpaOptions};
use graphrw_kernels::Tensor;

use super::executor::{run_on_host, Executor, KernelFailure, NodeView};
use super::kv_cache::KvCache;
use super::value::{DeviceValue, RunValue};
use crate::meta::{DType, Device};
use crate::ops::Op;

/// Runs fused attention on the CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct FusedCpu;

/// The name the fused executor shows in plans.
pub const FUSED_CPU: &str = "cpu-fused";

impl Executor for FusedCpu {
    fn name(&self) -> &str {
        FUSED_CPU
    }

    fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        match node.op.builtin {
            Some(Op::ScaledDotProductAttention) => {}
            Some(Op::ScaledDotProductAttentionBackward) => return check_sdpa_backward(node),
            Some(Op::CrossEntropy | Op::CrossEntropyBackward) => return check_cross_entropy(node),
            _ => return Err(format!("has no kernel for `{}`", node.op.name)),
        }
        let q = node.inputs[0];
        if !matches!(q.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
            return Err(format!("no fused kernel for {}", q.dtype));
        }
        if let Some(m) = node.inputs.iter().find(|m| m.device != Device::Cpu) {
            return Err(format!("operand on {}, not the CPU", m.device));
        }
        if node.attrs.float("dropout_p").map_err(|e| e.0)? != 0.0 {
            return Err("dropout is not fused".into());
        }
        if let Some(mask) = node.inputs.get(3) {
            if mask.dtype != DType::Bool && mask.dtype != q.dtype {
                return Err(format!("mask of {} with {} inputs", mask.dtype, q.dtype));
            }
        }
        Ok(())
    }

    /// As [`Executor::run`], but attention whose keys and values are
    /// [`KvCache`](super::KvCache)s of one length reads them in place from their
    /// buffers.
    fn run_values(
        &self,
        node: &NodeView<'_>,
        inputs: &[&RunValue],
    ) -> Result<Vec<RunValue>, KernelFailure> {
        if node.op.builtin == Some(Op::ScaledDotProductAttention) {
            if let (Some(k), Some(v)) = (
                inputs.get(1).and_then(|x| KvCache::of(x)),
                inputs.get(2).and_then(|x| KvCache::of(x)),
            ) {
                if let Some(out) = sdpa_on_caches(node, inputs, k, v)? {
                    return Ok(vec![RunValue::Host(out)]);
                }
            }
        }
        run_on_host(self, node, inputs)
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        match node.op.builtin {
            Some(Op::ScaledDotProductAttentionBackward) => return run_sdpa_backward(node, x),
            Some(Op::CrossEntropy | Op::CrossEntropyBackward) => return run_cross_entropy(node, x),
            _ => {}
        }
        let opts = sdpa_options(node)?;
        Ok(vec![fused::sdpa(
            x[0],
            x[1],
            x[2],
            x.get(3).copied(),
            &opts,
        )?])
    }
}

/// The options of an attention node.
fn sdpa_options(node: &NodeView<'_>) -> Result<SdpaOptions, KernelFailure> {
    let a = &node.attrs;
    Ok(SdpaOptions {
        is_causal: a.bool("is_causal")?,
        scale: a.opt_float("scale")?,
        enable_gqa: a.bool("enable_gqa")?,
        fully_masked_rows: FullyMaskedRows::Zero,
    })
}

/// Attention over keys and values held as caches (the sequence axis theirs, one
/// length and capacity), read in place; `None` when they are not of that form.
fn sdpa_on_caches(
    node: &NodeView<'_>,
    inputs: &[&RunValue],
    k: &KvCache,
    v: &KvCache,
) -> Result<Option<Tensor>, KernelFailure> {
    let rank = k.shape().len();
    let seq_axis = rank.checked_sub(2);
    let (kb, vb) = (k.buffer()?, v.buffer()?);
    let same = k.len() == v.len()
        && Some(k.axis()) == seq_axis
        && Some(v.axis()) == seq_axis
        && kb.shape()[..rank - 1] == vb.shape()[..rank - 1];
    if !same {
        return Ok(None);
    }
    let q = inputs[0].to_host()?;
    let mask = match inputs.get(3) {
        Some(m) => Some(m.to_host()?),
        None => None,
    };
    let opts = sdpa_options(node)?;
    let kernel = graphrw_kernels::KernelOptions::current();
    Ok(Some(fused::sdpa_prefix(
        &q,
        &kb,
        &vb,
        k.len(),
        mask.as_ref(),
        &opts,
        &kernel,
    )?))
}

/// The fused attention backward: float q/k/v on the CPU, a bool or same-dtype mask.
fn check_sdpa_backward(node: &NodeView<'_>) -> Result<(), String> {
    let q = node.inputs[1];
    if !matches!(q.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
        return Err(format!("no fused attention backward for {}", q.dtype));
    }
    if let Some(m) = node.inputs.iter().find(|m| m.device != Device::Cpu) {
        return Err(format!("operand on {}, not the CPU", m.device));
    }
    if let Some(mask) = node.inputs.get(5) {
        if mask.dtype != DType::Bool && mask.dtype != q.dtype {
            return Err(format!("mask of {} with {} inputs", mask.dtype, q.dtype));
        }
    }
    Ok(())
}

fn run_sdpa_backward(node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
    let opts = sdpa_options(node)?;
    let g = fused::sdpa_backward::sdpa_backward(
        x[0],
        x[1],
        x[2],
        x[3],
        x[4],
        x.get(5).copied(),
        &opts,
    )?;
    Ok(vec![g.dq, g.dk, g.dv])
}

/// The fused softmax cross-entropy (apex's xentropy): float logits on the CPU.
fn check_cross_entropy(node: &NodeView<'_>) -> Result<(), String> {
    let input = node.inputs[if node.op.is(Op::CrossEntropy) { 0 } else { 1 }];
    if !input.dtype.is_float() {
        return Err(format!("no fused cross-entropy for {}", input.dtype));
    }
    if let Some(m) = node.inputs.iter().find(|m| m.device != Device::Cpu) {
        return Err(format!("operand on {}, not the CPU", m.device));
    }
    Ok(())
}

fn run_cross_entropy(node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
    use fused::cross_entropy::{self as ce, CrossEntropyOptions};
    let a = &node.attrs;
    let opts = CrossEntropyOptions {
        ignore_index: a.int("ignore_index")?,
        label_smoothing: a.float("label_smoothing")?,
        reduction: a.reduction()?,
    };
    Ok(vec![if node.op.is(Op::CrossEntropy) {
        ce::cross_entropy(x[0], x[1], &opts)?
    } else {
        ce::cross_entropy_backward(x[0], x[1], x[2], &opts)?
    }])
}
