//! The CUDA executor (feature `cuda`): whole models on the GPU, in the ordinary stack.
//!
//! [`CudaExecutor`] takes the built-in ops its kernels cover (elementwise with
//! broadcasting, casts, matmul through cuBLAS, softmax, layer/rms norm, reductions,
//! layout ops as copies or views, gathers, fused attention; see `check.rs` for the exact
//! rules) and keeps its results on the device as [`CudaValue`]s, so a chain of CUDA nodes
//! runs without transfers: host operands (graph inputs, constants, results of CPU nodes)
//! are uploaded when a CUDA node reads them, and device values reach the host only when
//! a CPU node reads them or they are graph outputs. [`CudaExecutor::transfers`] counts
//! both directions.
//!
//! ```no_run
//! use graphrw::exec::{cuda_stack, plan};
//!
//! # fn f(graph: &graphrw::Graph, inputs: &[graphrw::Tensor]) -> Result<(), Box<dyn std::error::Error>> {
//! let plan = plan(graph, &cuda_stack(0)?)?; // CUDA where it can, else the CPU
//! let (outputs, report) = plan.run(inputs)?;
//! # Ok(()) }
//! ```

/// The built-in ops the CUDA kernels do not cover, as a pattern over
/// [`Op`](crate::ops::Op): the checker refuses them and the runner names them from this
/// one list (the other arms of both `match`es are the ops it runs).
macro_rules! no_cuda_kernel {
    () => {
        Op::Input
            | Op::Constant
            | Op::Opaque
            | Op::Arange
            | Op::Full
            | Op::SymInts
            | Op::Zeros
            | Op::Ones
            | Op::MaskedFill
            | Op::Conv2d
            | Op::Tril
            | Op::Triu
            | Op::Cumsum
            | Op::ScaledDotProductAttentionBackward
            | Op::CrossEntropy
            | Op::CrossEntropyBackward
    };
}

mod check;
mod generated;
mod ops;

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use graphrw_kernels::cuda::{CudaDevice, CudaTensor};
use graphrw_kernels::{DType, KernelError, Tensor};

use super::executor::{Executor, KernelFailure, NodeView};
use super::value::{DeviceValue, RunValue};
use super::{generated_executor, FusedCpu, ReferenceCpu};
use crate::generated::{builtin, FusedKernel};
use crate::meta::Device;
use crate::ops as op_table;
use crate::ops::OpId;

/// Largest head dim the fused attention kernel takes.
pub const CUDA_MAX_HEAD_DIM: u64 = 256;

/// Counts of host/device transfers.
#[derive(Debug, Default)]
struct Counters {
    uploads: AtomicUsize,
    downloads: AtomicUsize,
}

/// Host/device transfers made by a [`CudaExecutor`] and its values so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Host tensors copied to the device.
    pub uploads: usize,
    /// Device tensors copied to the host.
    pub downloads: usize,
}

/// A tensor a [`CudaExecutor`] keeps on its device between nodes.
#[derive(Clone, Debug)]
pub struct CudaValue {
    tensor: CudaTensor,
    counters: Arc<Counters>,
}

impl CudaValue {
    /// The device tensor.
    pub fn tensor(&self) -> &CudaTensor {
        &self.tensor
    }
}

impl DeviceValue for CudaValue {
    fn dtype(&self) -> DType {
        self.tensor.dtype()
    }
    fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }
    fn nbytes(&self) -> usize {
        self.tensor.nbytes()
    }
    fn device(&self) -> Device {
        Device::Cuda(self.tensor.device().ordinal() as u32)
    }
    fn to_host(&self) -> Result<Tensor, KernelFailure> {
        self.counters.downloads.fetch_add(1, Ordering::Relaxed);
        Ok(self.tensor.to_host()?)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Runs built-in ops on one CUDA device with NVRTC kernels (compiled at first use and
/// cached) and cuBLAS, keeping results on the device.
///
/// Its checker accepts a node when: the op is a built-in one with a CUDA kernel; every
/// operand's metadata says this device (or the CPU, while host operands are allowed, the
/// default); the dtypes suit the kernel (floats for math, bool conditions, i64/i32
/// indices, f32/f16/bf16 for attention, norms and reductions); for attention, head dims
/// known and at most 256 and `dropout_p` 0.
///
/// It also runs generated kernels ([`crate::generated`]: the built-in ones, more with
/// [`CudaExecutor::with_kernels`]) and their vjp ops on their CUDA source, compiled by
/// NVRTC at first use and cached per kernel and dtype, when the output is f32, f16 or
/// bf16, every operand has the output's dtype, and the rows suit the kernel as on the CPU.
#[derive(Clone, Debug)]
pub struct CudaExecutor {
    device: Arc<CudaDevice>,
    name: String,
    host_operands: bool,
    counters: Arc<Counters>,
    generated: Arc<HashMap<OpId, generated::GeneratedOp>>,
}

impl CudaExecutor {
    /// An executor on device `ordinal`. Errors when there is no CUDA driver or device.
    pub fn new(ordinal: usize) -> Result<CudaExecutor, KernelError> {
        Ok(CudaExecutor {
            device: CudaDevice::get(ordinal)?,
            name: format!("cuda:{ordinal}"),
            host_operands: true,
            counters: Arc::default(),
            generated: Arc::new(generated::table(builtin::ALL)),
        })
    }

    /// The executor also running `kernels` (and their vjp ops) on the GPU, besides the
    /// built-in generated kernels.
    pub fn with_kernels(mut self, kernels: &[&'static FusedKernel]) -> CudaExecutor {
        let all: Vec<&'static FusedKernel> = builtin::ALL.iter().chain(kernels).copied().collect();
        self.generated = Arc::new(generated::table(&all));
        self
    }

    /// The generated kernel that runs `node`, if `node` is of a generated op it knows.
    fn generated_op(&self, node: &NodeView<'_>) -> Option<generated::GeneratedOp> {
        self.generated
            .get(&node.op.id())
            .filter(|g| g.is_for(node))
            .copied()
    }

    /// Whether nodes whose operands are placed on the CPU are taken (their host values
    /// are uploaded); when false only nodes placed on this device are.
    pub fn with_host_operands(mut self, yes: bool) -> CudaExecutor {
        self.host_operands = yes;
        self
    }

    /// The device.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.device
    }

    /// Transfers made so far by this executor (and its clones) and the values it made.
    pub fn transfers(&self) -> Transfers {
        Transfers {
            uploads: self.counters.uploads.load(Ordering::Relaxed),
            downloads: self.counters.downloads.load(Ordering::Relaxed),
        }
    }

    fn upload(&self, t: &Tensor) -> Result<CudaTensor, KernelFailure> {
        self.counters.uploads.fetch_add(1, Ordering::Relaxed);
        Ok(self.device.upload(t)?)
    }

    /// `v` as a tensor on this device (uploaded when it is elsewhere).
    fn on_device(&self, v: &RunValue) -> Result<CudaTensor, KernelFailure> {
        if let RunValue::Device(d) = v {
            if let Some(c) = d.as_any().downcast_ref::<CudaValue>() {
                if c.tensor.device().ordinal() == self.device.ordinal() {
                    return Ok(c.tensor.clone());
                }
            }
        }
        self.upload(&v.to_host()?)
    }

    /// Runs an accepted node on device operands: its generated kernel, or the op's.
    fn run_device(
        &self,
        node: &NodeView<'_>,
        inputs: &[&CudaTensor],
    ) -> Result<Vec<CudaTensor>, KernelFailure> {
        match self.generated_op(node) {
            Some(g) => Ok(vec![g.run(node, inputs)?]),
            None => Ok(ops::run_op(node, inputs)?),
        }
    }

    fn wrap(&self, t: CudaTensor) -> RunValue {
        RunValue::Device(Arc::new(CudaValue {
            tensor: t,
            counters: self.counters.clone(),
        }))
    }
}

impl Executor for CudaExecutor {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        let gen = self.generated_op(node);
        if gen.is_none() && op_table::lookup(node.op.name) != Some(node.op) {
            return Err(format!(
                "`{}` is neither a built-in op nor a generated kernel it was given",
                node.op.name
            ));
        }
        let me = Device::Cuda(self.device.ordinal() as u32);
        for m in &node.inputs {
            let ok = m.device == me || (self.host_operands && m.device == Device::Cpu);
            if !ok {
                return Err(format!("operand on {}, not {me}", m.device));
            }
        }
        match gen {
            Some(g) => g.check(node),
            None => check::check_op(node),
        }
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        let dev: Vec<CudaTensor> = x.iter().map(|t| self.upload(t)).collect::<Result<_, _>>()?;
        let refs: Vec<&CudaTensor> = dev.iter().collect();
        self.run_device(node, &refs)?
            .iter()
            .map(|t| {
                self.counters.downloads.fetch_add(1, Ordering::Relaxed);
                Ok(t.to_host()?)
            })
            .collect()
    }

    fn run_values(
        &self,
        node: &NodeView<'_>,
        inputs: &[&RunValue],
    ) -> Result<Vec<RunValue>, KernelFailure> {
        let dev: Vec<CudaTensor> = inputs
            .iter()
            .map(|v| self.on_device(v))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&CudaTensor> = dev.iter().collect();
        Ok(self
            .run_device(node, &refs)?
            .into_iter()
            .map(|t| self.wrap(t))
            .collect())
    }
}

/// The CUDA stack on device `ordinal`: the CUDA executor first (built-in ops and the
/// built-in generated kernels), then the generated, fused and reference CPU executors
/// for what it does not take.
pub fn cuda_stack(ordinal: usize) -> Result<Vec<Arc<dyn Executor>>, KernelError> {
    Ok(vec![
        Arc::new(CudaExecutor::new(ordinal)?),
        Arc::new(generated_executor()),
        Arc::new(FusedCpu),
        Arc::new(ReferenceCpu),
    ])
}
