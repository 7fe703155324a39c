//! Generated kernels on the GPU: the [`CudaExecutor`](super::CudaExecutor) takes the
//! nodes of every kernel it was given (the built-in ones, and a user's through
//! [`Kernels::cuda_stack`](crate::Kernels::cuda_stack)) and of their vjp ops, and
//! runs them on the kernel's `CUDA_SOURCE`, compiled by NVRTC at first use and cached
//! per kernel, dtype and device (`graphrw_kernels::cuda::run_generated`).

use std::collections::HashMap;

use graphrw_kernels::cuda::{run_generated, CudaTensor, GeneratedKernel, GeneratedLaunch};
use graphrw_kernels::DType;

use super::super::executor::{KernelFailure, NodeView};
use super::super::generated::{check_rows, scalars_of, vjp_operands};
use crate::generated::{CudaLaunch, CudaSource, FusedKernel, VjpKernel};
use crate::ops::OpId;

/// One op the CUDA executor runs on a generated kernel: a kernel's forward op, or one of
/// its vjp ops.
#[derive(Clone, Copy, Debug)]
pub(super) struct GeneratedOp {
    kernel: &'static FusedKernel,
    vjp: Option<&'static VjpKernel>,
}

/// The generated ops of `kernels` by op (a later kernel of the same op wins).
pub(super) fn table(kernels: &[&'static FusedKernel]) -> HashMap<OpId, GeneratedOp> {
    let mut t = HashMap::new();
    for &kernel in kernels {
        t.insert(kernel.op.id(), GeneratedOp { kernel, vjp: None });
        for v in kernel.vjp {
            t.insert(
                v.op.id(),
                GeneratedOp {
                    kernel,
                    vjp: Some(v),
                },
            );
        }
    }
    t
}

impl GeneratedOp {
    /// Whether this entry is for `node`'s op (the same static, not only the same name).
    pub(super) fn is_for(&self, node: &NodeView<'_>) -> bool {
        let op = match self.vjp {
            Some(v) => v.op,
            None => self.kernel.op,
        };
        std::ptr::eq(op, node.op)
    }

    fn source(&self) -> CudaSource {
        match self.vjp {
            Some(v) => v.cuda,
            None => self.kernel.cuda,
        }
    }

    /// Whether the CUDA kernel takes `node` (devices are checked by the executor): the
    /// output f32, f16 or bf16 and every operand of the output's dtype (the source
    /// stores all of them as one type), and the row conditions of the CPU kernel
    /// (reductions and `rotate_half` read operands spanning the row; even rows).
    pub(super) fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        let Some(out) = node.outputs.first() else {
            return Err("has no output".into());
        };
        if !matches!(out.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(format!(
                "output of {}: the CUDA kernel of `{}` stores f32, f16 or bf16",
                out.dtype, node.op.name
            ));
        }
        let names = match self.vjp {
            Some(_) => vjp_operands(self.kernel),
            None => self.kernel.tensors.to_vec(),
        };
        if node.inputs.len() != names.len() {
            return Err(format!(
                "{} operands, the kernel takes {}",
                node.inputs.len(),
                names.len()
            ));
        }
        for (m, name) in node.inputs.iter().zip(&names) {
            if m.dtype != out.dtype {
                return Err(format!(
                    "operand `{name}` of {} and output of {}: the CUDA kernel reads its operands as the output's dtype",
                    m.dtype, out.dtype
                ));
            }
        }
        let (red, rot) = match self.vjp {
            Some(v) => (v.reduction_inputs, v.rotate_inputs),
            None => (self.kernel.reduction_inputs, self.kernel.rotate_inputs),
        };
        check_rows(&names, red, rot, node)
    }

    /// Runs the node on device operands.
    pub(super) fn run(
        &self,
        node: &NodeView<'_>,
        inputs: &[&CudaTensor],
    ) -> Result<CudaTensor, KernelFailure> {
        let src = self.source();
        let scalars = scalars_of(self.kernel, node)?;
        let k = GeneratedKernel {
            name: node.op.name,
            source: src.source,
            entry: src.entry,
            launch: match src.launch {
                CudaLaunch::Elementwise => GeneratedLaunch::Elementwise,
                CudaLaunch::Rows => GeneratedLaunch::Rows,
            },
        };
        let dtype = node
            .outputs
            .first()
            .map(|m| m.dtype)
            .ok_or("the node has no output")?;
        Ok(run_generated(&k, inputs, &scalars, dtype)?)
    }
}
