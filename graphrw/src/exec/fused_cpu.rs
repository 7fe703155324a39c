//! The fused CPU executor: `scaled_dot_product_attention` through the blocked
//! online-softmax kernel of `graphrw-kernels::fused`, for the cases its checker accepts;
//! other attention nodes fall through to the next executor or the op's decomposition.

use graphrw_kernels::fused::{self, FullyMaskedRows, SdpaOptions};
use graphrw_kernels::Tensor;

use super::executor::{Executor, KernelFailure, NodeView};
use crate::meta::{DType, Device};

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
        if node.op.name != "scaled_dot_product_attention" {
            return Err(format!("has no kernel for `{}`", node.op.name));
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

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        let a = &node.attrs;
        let opts = SdpaOptions {
            is_causal: a.bool("is_causal")?,
            scale: a.opt_float("scale")?,
            enable_gqa: a.bool("enable_gqa")?,
            fully_masked_rows: FullyMaskedRows::Zero,
        };
        Ok(vec![fused::sdpa(
            x[0],
            x[1],
            x[2],
            x.get(3).copied(),
            &opts,
        )?])
    }
}
