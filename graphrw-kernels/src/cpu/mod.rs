//! Reference CPU kernels, one public function per op.
//!
//! Every kernel takes tensors by reference and returns a new tensor (or an error).
//! Dims are `i64`; negative dims count from the end and are validated against the rank.

pub(crate) mod attention_ref;
pub mod awake;
pub mod choice;
mod conv;
mod creation;
pub(crate) mod elementwise;
pub mod features;
mod indexing;
mod layout;
pub(crate) mod matmul;
mod norm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod packed_gemm;
mod packed_weight;
pub mod pool;
pub mod probe;
mod reduce;
pub mod row_cache;
pub(crate) mod util;

pub use attention_ref::sdpa_reference;
pub use conv::conv2d;
pub use creation::{arange, full};
pub use elementwise::{binary, cast, dropout, masked_fill, unary, where_, BinaryOp, UnaryOp};
pub use features::{cpu_brand, machine_line, CpuFeatures, Isa};
pub use indexing::{gather, gather_elements, gather_nd, index_select};
#[cfg(feature = "cuda")]
pub(crate) use indexing::{gather_nd_shape, GatherNdShape};
pub use layout::{
    concat, contiguous, expand, permute, reshape, slice, split, squeeze, transpose, tril, triu,
    unsqueeze,
};
pub use matmul::{
    matmul, matmul_epilogue, matmul_epilogue_with, matmul_with, Activation, Broadcast, Epilogue,
    GemmBackend,
};
pub use norm::{layer_norm, rms_norm};
pub use packed_gemm::prefetch as packed_prefetch;
pub use packed_weight::PackedWeight;
pub use pool::{buffer, BufferPool, PoolGuard};
pub use reduce::{cumsum, log_softmax, reduce, softmax, ReduceOp};
pub use row_cache::RowCache;
