//! Runtime helpers for generated fused elementwise kernels (`graphrw::fused_kernel!`).
//!
//! A generated kernel is a function of f32 (or f64) values per output element, plus, for
//! kernels with last-dimension reductions, per-row reductions feeding that function.
//! These helpers do the rest, knowing nothing of graphs:
//!
//! - [`Plan`]: the broadcast of the operand shapes, split into rows of the last dimension
//!   (elementwise kernels first merge dimensions every operand walks contiguously);
//! - [`Src`]: a dtype-tagged operand, loaded a tile at a time into compute values
//!   ([`Compute`]: f32 for f32/f16/bf16 storage, f64 for f64), without a copy when it is
//!   already contiguous in the compute type;
//! - [`run_map`] and [`run_rows`]: tiling, the output in its storage dtype, and rayon over
//!   chunks or rows for large outputs; the kernel body ([`MapKernel`], [`RowKernel`]) is
//!   compiled twice, for the baseline target and with AVX2+FMA, and [`isa`] picks one at
//!   run time (detected once per process);
//! - [`Sum`] and [`Max`]: row accumulators the compiler vectorises;
//! - [`math`]: f32 `exp`, `erf`, `tanh` and `sigmoid` the compiler vectorises.

pub mod lanes;
mod load;
pub mod math;
mod plan;
mod run;

/// The half-precision storage types (for generated code).
pub use half::{bf16, f16};
pub use load::{round_as, Compute, Src};
pub use plan::Plan;
pub use run::{isa, run_map, run_rows, with_isa, Isa, MapKernel, Max, Row, RowKernel, Sum, TILE};
