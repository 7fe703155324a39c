//! Execution: executors with checkers, the planner that picks one per node, and the
//! interpreter (Thunder's executor model).
//!
//! ```
//! use std::sync::Arc;
//! use graphrw::exec::{plan, Executor, ReferenceCpu};
//! use graphrw::{Builder, DType, Tensor, TensorMeta};
//!
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
//! let y = x.softmax(-1)?;
//! g.output(&[y])?;
//! let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
//! let plan = plan(&g.finish(), &stack)?;
//! let (out, report) = plan.run(&[Tensor::from_vec(vec![2, 3], vec![0f32; 6])?])?;
//! assert!((out[0].to_f64_vec()[0] - 1.0 / 3.0).abs() < 1e-6);
//! assert!(report.peak_live_bytes > 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bind;
#[cfg(feature = "cuda")]
mod cuda;
mod decode_loop;
mod epilogue;
mod executor;
mod fused_cpu;
mod generated;
mod interpreter;
mod kv_cache;
mod plan;
mod reference;
mod schedule;
pub mod tile;
mod value;

use std::sync::Arc;

use thiserror::Error;

use graphrw_kernels::Tensor;

#[cfg(feature = "cuda")]
pub use cuda::{cuda_stack, CudaExecutor, CudaValue, CUDA_MAX_HEAD_DIM};
pub use decode_loop::{CachePair, DecodeLoop};
pub use epilogue::{EpilogueCpu, EPILOGUE_CPU, MATMUL_EPILOGUE, PACKED_LIMIT};
pub use executor::{Checker, Executor, Kernel, NodeView, OpExecutor};
pub use fused_cpu::{FusedCpu, FUSED_CPU};
pub(crate) use generated::after_generated;
pub use generated::{
    check_node, check_vjp_node, generated_executor, generated_executor_of, GENERATED_CPU,
};
pub use graphrw_kernels::KernelOptions;
pub use interpreter::RunReport;
pub use kv_cache::KvCache;
pub use plan::{plan, plan_with, Fallback, Plan};
pub use reference::{ReferenceCpu, REFERENCE_CPU};
pub use tile::{tile_executor, TileCpu, TILE_CPU};
pub use value::{DeviceValue, KernelFailure, RunValue};

use crate::{Graph, GraphError};

/// Why planning or running failed.
#[derive(Debug, Error)]
pub enum ExecError {
    /// No executor of the stack accepts a node and its op has no decomposition.
    #[error("no executor for node {}:\n{}", short_node(node), reasons.iter().map(|r| format!("  - {r}")).collect::<Vec<_>>().join("\n"))]
    NoExecutor {
        /// The node as the printer shows it.
        node: String,
        /// Every executor's reason, in stack order.
        reasons: Vec<String>,
    },
    /// An input does not fit the graph.
    #[error("input {input}: {message}")]
    Input {
        /// The input's name.
        input: String,
        /// What does not fit.
        message: String,
    },
    /// A kernel failed.
    #[error("{executor} failed on {}: {message}", short_node(node))]
    Kernel {
        /// The node as the printer shows it.
        node: String,
        /// The executor.
        executor: String,
        /// The kernel's message.
        message: String,
    },
    /// An execution transform or decomposition built something wrong.
    #[error("expanding `{op}`: {message}")]
    Transform {
        /// The op being expanded.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A graph error (the graph is malformed).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The [`KernelOptions`] cannot be applied (say, a thread pool cannot be made).
    #[error("kernel options: {0}")]
    Options(String),
}

/// The longest node description an [`ExecError`]'s first line shows.
pub const NODE_TEXT_MAX: usize = 56;

/// A node's printed line cut to [`NODE_TEXT_MAX`] characters (its output names and
/// op first; the operands and sizes that follow are what is cut), so that an error's
/// first line stays short however many operands the node has.
fn short_node(node: &str) -> String {
    if node.chars().count() <= NODE_TEXT_MAX {
        return node.to_string();
    }
    let cut: String = node.chars().take(NODE_TEXT_MAX - 3).collect();
    format!("{cut}...")
}

/// The reference stack: the reference CPU executor alone (attention runs through its
/// decomposition).
pub fn reference_stack() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(ReferenceCpu)]
}

/// The default CPU stack: the matmul epilogue executor (a matmul with its bias and
/// activation as one node, formed at plan time), the generated fused kernels
/// ([`generated_executor`]) and the fused attention/cross-entropy kernels, then the tile
/// executor (groups of elementwise nodes left to the reference kernels run as one node
/// each), then the reference kernels.
pub fn default_stack() -> Vec<Arc<dyn Executor>> {
    let mut stack: Vec<Arc<dyn Executor>> = vec![
        Arc::new(EpilogueCpu::default()),
        Arc::new(generated_executor()),
    ];
    stack.extend(generated::after_generated());
    stack
}

/// Plans `graph` on the reference stack and runs it.
pub fn run_reference(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, ExecError> {
    Ok(plan(graph, &reference_stack())?.run(inputs)?.0)
}
