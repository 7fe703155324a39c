//! Executors: who runs which node. An executor says, for a node, yes or no with a
//! reason (its checker sees only metadata and attributes), and runs the nodes it
//! accepted. It may also carry execution transforms: for a node it accepts, a
//! replacement subgraph (Thunder's execution transforms), e.g. `mul` into a custom
//! `multimul` call with a layout prologue.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use graphrw_kernels::Tensor;
use smallvec::SmallVec;

use super::value::RunValue;
use crate::graph::{Graph, NodeId};
use crate::meta::TensorMeta;
use crate::ops::{Attrs, DecomposeFn, OpDef, OpId};

use super::ExecError;

/// What an executor's checker and kernel see of a node: its op, attributes and the
/// metadata of its operands and outputs — never tensor values.
#[derive(Clone, Debug)]
pub struct NodeView<'a> {
    /// The op.
    pub op: &'static OpDef,
    /// The node's attributes.
    pub attrs: Attrs<'a>,
    /// Metadata of each operand.
    pub inputs: Vec<&'a TensorMeta>,
    /// Metadata of each output.
    pub outputs: &'a [TensorMeta],
    /// The node's given name, if any.
    pub name: Option<&'a str>,
}

pub use super::value::KernelFailure;

/// The view of node `id` that checkers see.
pub(crate) fn view(graph: &Graph, id: NodeId) -> Result<NodeView<'_>, ExecError> {
    let node = graph.try_node(id)?;
    let inputs = node
        .operands()
        .iter()
        .map(|&v| graph.meta(v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(NodeView {
        op: node.op(),
        attrs: node.attrs(),
        inputs,
        outputs: node.outputs(),
        name: node.name(),
    })
}

/// A kernel: operand tensors in, output tensors out.
pub type Kernel =
    Arc<dyn Fn(&NodeView<'_>, &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> + Send + Sync>;

/// A checker: `Ok(())` when the executor takes the node, else the reason it does not.
pub type Checker = Arc<dyn Fn(&NodeView<'_>) -> Result<(), String> + Send + Sync>;

/// Runs some ops.
pub trait Executor: Send + Sync {
    /// A short name, shown in plans and errors.
    fn name(&self) -> &str;

    /// Whether this executor takes `node`; the reason when it does not.
    fn check(&self, node: &NodeView<'_>) -> Result<(), String>;

    /// An execution transform for a node this executor accepted: the subgraph to put in
    /// its place (built from the node's operands and attributes). `None`: run it as is.
    fn transform(&self, _node: &NodeView<'_>) -> Option<DecomposeFn> {
        None
    }

    /// A graph-level execution transform, run once every node has an executor: it may
    /// replace nodes for which `movable` is true (those planned on executors after this
    /// one) by nodes this executor accepts, e.g. a group of elementwise nodes by one
    /// fused node. Returns whether it changed the graph (the planner then plans again).
    fn transform_graph(
        &self,
        _graph: &mut Graph,
        _movable: &dyn Fn(NodeId) -> bool,
    ) -> Result<bool, ExecError> {
        Ok(false)
    }

    /// Runs an accepted node.
    fn run(&self, node: &NodeView<'_>, inputs: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure>;

    /// Runs an accepted node on the values the interpreter holds. The default brings
    /// device values to the host and calls [`Executor::run`]; a device executor overrides
    /// it to keep its results on the device.
    fn run_values(
        &self,
        node: &NodeView<'_>,
        inputs: &[&RunValue],
    ) -> Result<Vec<RunValue>, KernelFailure> {
        run_on_host(self, node, inputs)
    }
}

/// [`Executor::run_values`]'s default: device values copied to the host, then
/// [`Executor::run`].
pub(crate) fn run_on_host<E: Executor + ?Sized>(
    executor: &E,
    node: &NodeView<'_>,
    inputs: &[&RunValue],
) -> Result<Vec<RunValue>, KernelFailure> {
    // Host values are lent as they are (no clone, which allocates a shape, per
    // operand); device values are copied to the host first.
    let fetched = inputs
        .iter()
        .map(|v| match v {
            RunValue::Host(_) => Ok(None),
            RunValue::Device(d) => d.to_host().map(Some),
        })
        .collect::<Result<SmallVec<[Option<Tensor>; 4]>, _>>()?;
    let refs: SmallVec<[&Tensor; 4]> = inputs
        .iter()
        .zip(&fetched)
        .filter_map(|(v, f)| match v {
            RunValue::Host(t) => Some(t),
            RunValue::Device(_) => f.as_ref(),
        })
        .collect();
    Ok(executor
        .run(node, &refs)?
        .into_iter()
        .map(RunValue::Host)
        .collect())
}

impl fmt::Debug for dyn Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Executor({})", self.name())
    }
}

enum Action {
    Kernel(Kernel),
    Transform(DecomposeFn),
}

struct Registration {
    checker: Option<Checker>,
    action: Action,
}

/// An executor made of registrations, one per op: a kernel or an execution transform,
/// each with an optional checker.
///
/// ```
/// use graphrw::exec::{OpExecutor, NodeView};
/// use graphrw::ops::builtin::ADD;
/// use graphrw::DType;
///
/// // Seed example: an `add` only for f32 2-D tensors whose first dim is 2.
/// let ex = OpExecutor::new("add_2xn").with_checked_kernel(
///     &ADD,
///     |n: &NodeView<'_>| {
///         let ok = n.inputs.iter().all(|m| {
///             m.dtype == DType::F32 && m.rank() == 2 && m.shape.dims()[0].known() == Some(2)
///         });
///         if ok { Ok(()) } else { Err("needs f32 tensors of shape [2, n]".into()) }
///     },
///     |_, x| Ok(vec![graphrw::kernels::cpu::binary(graphrw::kernels::cpu::BinaryOp::Add, x[0], x[1])?]),
/// );
/// # let _ = ex;
/// ```
pub struct OpExecutor {
    name: String,
    ops: HashMap<OpId, Registration>,
}

impl OpExecutor {
    /// An executor with no ops yet.
    pub fn new(name: impl Into<String>) -> OpExecutor {
        OpExecutor {
            name: name.into(),
            ops: HashMap::new(),
        }
    }

    /// Registers a kernel for `op` that accepts every node of it.
    pub fn with_kernel(
        mut self,
        op: &'static OpDef,
        kernel: impl Fn(&NodeView<'_>, &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure>
            + Send
            + Sync
            + 'static,
    ) -> OpExecutor {
        self.ops.insert(
            op.id(),
            Registration {
                checker: None,
                action: Action::Kernel(Arc::new(kernel)),
            },
        );
        self
    }

    /// Registers a kernel for `op` guarded by a checker.
    pub fn with_checked_kernel(
        mut self,
        op: &'static OpDef,
        checker: impl Fn(&NodeView<'_>) -> Result<(), String> + Send + Sync + 'static,
        kernel: impl Fn(&NodeView<'_>, &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure>
            + Send
            + Sync
            + 'static,
    ) -> OpExecutor {
        self.ops.insert(
            op.id(),
            Registration {
                checker: Some(Arc::new(checker)),
                action: Action::Kernel(Arc::new(kernel)),
            },
        );
        self
    }

    /// Registers an execution transform for `op`: where the checker accepts a node, the
    /// node is replaced by what `transform` builds (whose nodes are then planned too).
    pub fn with_transform(
        mut self,
        op: &'static OpDef,
        checker: impl Fn(&NodeView<'_>) -> Result<(), String> + Send + Sync + 'static,
        transform: DecomposeFn,
    ) -> OpExecutor {
        self.ops.insert(
            op.id(),
            Registration {
                checker: Some(Arc::new(checker)),
                action: Action::Transform(transform),
            },
        );
        self
    }
}

impl Executor for OpExecutor {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        let Some(reg) = self.ops.get(&node.op.id()) else {
            return Err(format!("has no implementation of `{}`", node.op.name));
        };
        match &reg.checker {
            Some(c) => c(node),
            None => Ok(()),
        }
    }

    fn transform(&self, node: &NodeView<'_>) -> Option<DecomposeFn> {
        match self.ops.get(&node.op.id())?.action {
            Action::Transform(t) => Some(t),
            Action::Kernel(_) => None,
        }
    }

    fn run(&self, node: &NodeView<'_>, inputs: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        match self.ops.get(&node.op.id()).map(|r| &r.action) {
            Some(Action::Kernel(k)) => k(node, inputs),
            Some(Action::Transform(_)) => Err(format!(
                "`{}` is an execution transform of {}, not a kernel",
                node.op.name, self.name
            )
            .into()),
            None => Err(format!("{} has no kernel for `{}`", self.name, node.op.name).into()),
        }
    }
}
