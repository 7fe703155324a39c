//! Values during a run: host tensors, or tensors an executor keeps on its device so a
//! chain of device nodes runs with no transfers between them.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use graphrw_kernels::{DType, Tensor};

use crate::meta::Device;

/// The error type kernels return.
pub type KernelFailure = Box<dyn std::error::Error + Send + Sync>;

/// A tensor held by a device executor (for instance a CUDA buffer).
pub trait DeviceValue: fmt::Debug + Send + Sync {
    /// The element type.
    fn dtype(&self) -> DType;
    /// The shape.
    fn shape(&self) -> &[usize];
    /// Bytes of data.
    fn nbytes(&self) -> usize;
    /// Where the data lives.
    fn device(&self) -> Device;
    /// A host copy (waits for the device).
    fn to_host(&self) -> Result<Tensor, KernelFailure>;
    /// For executors to recover their own type.
    fn as_any(&self) -> &dyn Any;
}

/// A value the interpreter holds between nodes.
#[derive(Clone, Debug)]
pub enum RunValue {
    /// A host tensor.
    Host(Tensor),
    /// A tensor on a device.
    Device(Arc<dyn DeviceValue>),
}

impl RunValue {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            RunValue::Host(t) => t.dtype(),
            RunValue::Device(d) => d.dtype(),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            RunValue::Host(t) => t.shape(),
            RunValue::Device(d) => d.shape(),
        }
    }

    /// Bytes of data.
    pub fn nbytes(&self) -> usize {
        match self {
            RunValue::Host(t) => t.nbytes(),
            RunValue::Device(d) => d.nbytes(),
        }
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        match self {
            RunValue::Host(_) => Device::Cpu,
            RunValue::Device(d) => d.device(),
        }
    }

    /// The value as a host tensor: shared for host values, a download for device ones.
    pub fn to_host(&self) -> Result<Tensor, KernelFailure> {
        match self {
            RunValue::Host(t) => Ok(t.clone()),
            RunValue::Device(d) => d.to_host(),
        }
    }
}

impl From<Tensor> for RunValue {
    fn from(t: Tensor) -> RunValue {
        RunValue::Host(t)
    }
}
