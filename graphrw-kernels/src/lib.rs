//! Tensors and compute for graphrw: a dtype-tagged [`Tensor`] and reference CPU kernels
//! ([`cpu`]) for every op of the vocabulary. This crate knows nothing of graphs.
//!
//! Kernels never panic on bad input: wrong shapes, dims, indices or dtypes come back as
//! a [`KernelError`] naming the kernel and the operands involved. Semantics follow
//! PyTorch unless a kernel's docs say otherwise; f16 and bf16 are computed in f32.
//!
//! ```
//! use graphrw_kernels::{cpu, Tensor};
//!
//! let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = Tensor::from_vec(vec![3], vec![10.0f32, 20.0, 30.0])?;
//! let c = cpu::binary(cpu::BinaryOp::Add, &a, &b)?;
//! assert_eq!(c.as_slice::<f32>()?, &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
//! let t = cpu::matmul(&a, &cpu::transpose(&a, 0, 1)?)?;
//! assert_eq!(t.shape(), &[2, 2]);
//! # Ok::<(), graphrw_kernels::KernelError>(())
//! ```
#![warn(missing_docs)]

mod macros;

pub mod broadcast;
pub mod budget;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod dtype;
pub mod element;
pub mod elementwise;
mod error;
pub mod external;
pub mod fused;
pub mod mapped;
pub mod options;
mod storage;
mod tensor;
pub mod testing;

pub use cpu::{CpuFeatures, Isa};
pub use dtype::DType;
pub use element::{Element, IntElement, Real};
pub use error::KernelError;
pub use external::ExternalElements;
pub use mapped::{FileRange, MappedFile};
pub use options::{KernelOptions, SdpaBlocks, SdpaCudaConfig, SdpaLoopOrder, SdpaTuning};
pub use storage::Storage;
pub use tensor::{ExportedElements, Tensor};
