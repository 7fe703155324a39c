//! The tile executor: chains of elementwise ops nobody wrote a kernel for, run as one
//! node each, a tile of a few thousand `f32` lanes at a time, so that no intermediate
//! of a chain is written to memory.
//!
//! It works as a graph-level execution transform ([`Executor::transform_graph`]): once
//! every node is planned, each maximal convex group of at least two elementwise nodes
//! planned on executors after it becomes one [`ELEMENTWISE_GROUP`] node whose `program`
//! attribute lists the group's ops (see [`program`]); values used outside the group are
//! its outputs. Everything else — and any group node it is not given — is left to the
//! executors after it. Values are held as `f32` (f16/bf16/bool storage converted on load
//! and store, each result rounded to its own dtype as the unfused ops would).
//!
//! ```
//! use graphrw::exec::{plan, tile_executor, ReferenceCpu, Executor};
//! use graphrw::{Builder, DType, Tensor, TensorMeta};
//! use std::sync::Arc;
//!
//! let g = Builder::new();
//! let x = g.input("x", TensorMeta::new(DType::F32, [4usize, 3]));
//! let b = g.input("b", TensorMeta::new(DType::F32, [3usize]));
//! let y = x.add(b)?.gelu_with("tanh")?.mul(2.0)?;
//! g.output(&[y])?;
//! let stack: Vec<Arc<dyn Executor>> = vec![tile_executor(), Arc::new(ReferenceCpu)];
//! let p = plan(&g.finish(), &stack)?;
//! assert_eq!(p.graph().op_counts().get("fused.elementwise_group"), Some(&1));
//! let xs = Tensor::from_vec(vec![4, 3], vec![0.5f32; 12])?;
//! let bs = Tensor::from_vec(vec![3], vec![0.25f32; 3])?;
//! let (out, _) = p.run(&[xs, bs])?;
//! assert_eq!(out[0].shape(), &[4, 3]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod group;
mod kernel;
mod lanes;
pub mod program;

use std::sync::Arc;

use graphrw_kernels::Tensor;

use super::executor::{Executor, KernelFailure, NodeView};
use super::ExecError;
use crate::graph::{Graph, NodeId};
use crate::meta::Device;

pub use group::{can_take, find_groups, MAX_GROUP};
pub use kernel::TILE;
pub use program::ELEMENTWISE_GROUP;

/// The name the tile executor shows in plans.
pub const TILE_CPU: &str = "cpu-tile";

/// Runs groups of elementwise nodes tile by tile on the CPU (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct TileCpu;

/// The tile executor, ready for a stack (put it before the executors whose elementwise
/// nodes it should group, e.g. before [`ReferenceCpu`](super::ReferenceCpu)).
pub fn tile_executor() -> Arc<dyn Executor> {
    Arc::new(TileCpu)
}

impl Executor for TileCpu {
    fn name(&self) -> &str {
        TILE_CPU
    }

    fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        if !std::ptr::eq(node.op, &ELEMENTWISE_GROUP) {
            return Err(format!(
                "runs `{}` nodes only (it forms them from elementwise groups)",
                ELEMENTWISE_GROUP.name
            ));
        }
        if let Some(m) = node.inputs.iter().find(|m| m.device != Device::Cpu) {
            return Err(format!("operand on {}, not the CPU", m.device));
        }
        if let Some(m) = node
            .inputs
            .iter()
            .copied()
            .chain(node.outputs)
            .find(|m| !kernel::lane_dtype(m.dtype))
        {
            return Err(format!(
                "a {} value (tiles hold f32/f16/bf16/bool)",
                m.dtype
            ));
        }
        Ok(())
    }

    fn transform_graph(
        &self,
        graph: &mut Graph,
        movable: &dyn Fn(NodeId) -> bool,
    ) -> Result<bool, ExecError> {
        group::group_graph(graph, movable)
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        let p = program::Program::from_attrs(&node.attrs, x.len())?;
        Ok(kernel::run_program(&p, x)?)
    }
}
