//! The CUDA executor (feature `cuda`): fused attention on the GPU, in the ordinary stack.
//!
//! Today it takes `scaled_dot_product_attention` nodes and runs them with the fused
//! flash-attention kernel of [`graphrw_kernels::cuda::sdpa`]. The interpreter hands every
//! executor host [`Tensor`]s, so each node it runs uploads its operands and downloads its
//! result (per-node transfers). Keeping whole models on the device, with transfers only
//! at the graph's edges, needs device-resident values in the interpreter and CUDA kernels
//! for the other ops; that is not done yet.
//!
//! ```no_run
//! use std::sync::Arc;
//! use graphrw::exec::{plan, CudaExecutor, Executor, ReferenceCpu};
//!
//! # fn f(graph: &graphrw::Graph) -> Result<(), Box<dyn std::error::Error>> {
//! let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(CudaExecutor::new(0)?), Arc::new(ReferenceCpu)];
//! let plan = plan(graph, &stack)?; // attention on the GPU, the rest on the CPU
//! # Ok(()) }
//! ```

use std::sync::Arc;

use graphrw_kernels::cuda::{self, CudaDevice, SdpaOptions};
use graphrw_kernels::{DType, KernelError, Tensor};

use super::executor::{Executor, KernelFailure, NodeView};
use crate::meta::Device;
use crate::ops;

/// Largest head dim the fused kernel takes.
pub const CUDA_MAX_HEAD_DIM: u64 = 256;

/// Runs `scaled_dot_product_attention` on one CUDA device with the fused kernel.
///
/// Its checker accepts a node when: the op is the built-in SDPA; every operand's
/// metadata says this device (or the CPU, while host operands are allowed, the default);
/// q, k, v are f32, f16 or bf16; the head dims are known and at most 256; the mask is
/// bool or a float type; `dropout_p` is 0.
#[derive(Clone, Debug)]
pub struct CudaExecutor {
    device: Arc<CudaDevice>,
    name: String,
    host_operands: bool,
}

impl CudaExecutor {
    /// An executor on device `ordinal`. Errors when there is no CUDA driver or device.
    pub fn new(ordinal: usize) -> Result<CudaExecutor, KernelError> {
        Ok(CudaExecutor {
            device: CudaDevice::get(ordinal)?,
            name: format!("cuda:{ordinal}"),
            host_operands: true,
        })
    }

    /// Whether nodes whose operands live on the CPU are taken (uploaded per node and the
    /// result downloaded); when false only nodes placed on this device are.
    pub fn with_host_operands(mut self, yes: bool) -> CudaExecutor {
        self.host_operands = yes;
        self
    }

    /// The device.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.device
    }
}

impl Executor for CudaExecutor {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        if node.op.name != "scaled_dot_product_attention"
            || ops::lookup(node.op.name) != Some(node.op)
        {
            return Err(format!("has no CUDA kernel for `{}`", node.op.name));
        }
        let me = Device::Cuda(self.device.ordinal() as u32);
        for m in &node.inputs {
            let ok = m.device == me || (self.host_operands && m.device == Device::Cpu);
            if !ok {
                return Err(format!("operand on {}, not {me}", m.device));
            }
        }
        if node.inputs.len() < 3 {
            return Err("needs q, k and v".into());
        }
        let dtype = node.inputs[0].dtype;
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(format!(
                "dtype {dtype}: the CUDA kernel takes f32, f16 or bf16"
            ));
        }
        if let Some(mask) = node.inputs.get(3) {
            if !matches!(
                mask.dtype,
                DType::Bool | DType::F32 | DType::F16 | DType::BF16
            ) {
                return Err(format!("mask dtype {} is not bool or float", mask.dtype));
            }
        }
        for (what, m) in [("q/k", node.inputs[0]), ("v", node.inputs[2])] {
            match m.shape.dims().last().and_then(|d| d.known()) {
                Some(d) if (1..=CUDA_MAX_HEAD_DIM).contains(&d) => {}
                Some(d) => {
                    return Err(format!(
                        "{what} head dim {d} is over the kernel's {CUDA_MAX_HEAD_DIM}"
                    ))
                }
                None => return Err(format!("{what} head dim is not known")),
            }
        }
        match node.attrs.float("dropout_p") {
            Ok(0.0) => {}
            Ok(p) => return Err(format!("dropout_p = {p} is not supported")),
            Err(e) => return Err(e.0),
        }
        Ok(())
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        let a = &node.attrs;
        let opts = SdpaOptions {
            is_causal: a.bool("is_causal").map_err(|e| e.0)?,
            scale: a.opt_float("scale").map_err(|e| e.0)?,
            enable_gqa: a.bool("enable_gqa").map_err(|e| e.0)?,
        };
        let up = |t: &Tensor| self.device.upload(t);
        let (q, k, v) = (up(x[0])?, up(x[1])?, up(x[2])?);
        let mask = x.get(3).map(|m| up(m)).transpose()?;
        let out = cuda::sdpa(&q, &k, &v, mask.as_ref(), &opts)?;
        Ok(vec![out.to_host()?])
    }
}
