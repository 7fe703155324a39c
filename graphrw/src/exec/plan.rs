//! The planner: assigns every node to the first executor of the stack that accepts
//! it, applying execution transforms and falling back to an op's decomposition when
//! no executor takes it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use graphrw_kernels::cpu::BufferPool;
use graphrw_kernels::KernelOptions;

use crate::builder::Builder;
use crate::graph::{Graph, NodeId, Value};
use crate::ops::{Attrs, DecomposeFn};
use crate::printer::{node_line, Names};
use crate::verify::verify;

use super::executor::{Executor, NodeView};
use super::interpreter::{schedule, Schedule};
use super::ExecError;

/// The most transforms and decompositions a plan may apply before it is considered a
/// loop (a transform whose output it transforms again, forever).
const MAX_EXPANSIONS_PER_NODE: usize = 64;

/// A graph with an executor chosen for every node: what the interpreter runs.
pub struct Plan {
    pub(crate) graph: Graph,
    pub(crate) executors: Vec<Arc<dyn Executor>>,
    /// (node, index into `executors`) in execution order; sources have no executor.
    pub(crate) steps: Vec<(NodeId, Option<usize>)>,
    /// Buffers of freed intermediates, reused by later nodes and runs (the
    /// interpreter gives them back and installs the pool while kernels run).
    pub(crate) pool: Arc<BufferPool>,
    /// The value slots of each step, worked out once.
    pub(crate) schedule: Schedule,
    /// The options its kernels run with (installed on the running thread by the
    /// interpreter, see [`KernelOptions::install`]).
    pub(crate) options: KernelOptions,
    /// The thread pool of [`KernelOptions::threads`], where set.
    pub(crate) threads: Option<Arc<rayon::ThreadPool>>,
}

impl Plan {
    /// The graph as planned (after execution transforms and decompositions).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// For each node that runs a kernel, the executor that runs it.
    pub fn assignments(&self) -> impl Iterator<Item = (NodeId, &str)> + '_ {
        self.steps
            .iter()
            .filter_map(|&(n, e)| e.map(|e| (n, self.executors[e].name())))
    }

    /// The executor that runs `node`, if any.
    pub fn executor_of(&self, node: NodeId) -> Option<&str> {
        self.assignments().find(|(n, _)| *n == node).map(|(_, e)| e)
    }

    /// The options the plan's kernels run with.
    pub fn options(&self) -> &KernelOptions {
        &self.options
    }
}

/// The thread pool of `options.threads`, where set.
fn thread_pool(options: &KernelOptions) -> Result<Option<Arc<rayon::ThreadPool>>, ExecError> {
    let Some(n) = options.threads else {
        return Ok(None);
    };
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build()
        .map(|p| Some(Arc::new(p)))
        .map_err(|e| ExecError::Options(format!("a pool of {n} threads: {e}")))
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Plan {
    /// The plan as a program: each line is the node and, after `|`, its executor.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = Names::new(&self.graph);
        writeln!(f, "plan {{")?;
        for &(id, ex) in &self.steps {
            let line = node_line(&self.graph, &names, id);
            match ex {
                Some(e) => writeln!(f, "  {line}  | {}", self.executors[e].name())?,
                None => writeln!(f, "  {line}")?,
            }
        }
        let rets: Vec<String> = self.graph.outputs().iter().map(|&v| names.get(v)).collect();
        writeln!(f, "  return {}", rets.join(", "))?;
        write!(f, "}}")
    }
}

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

enum Choice {
    Run(usize),
    Expand(DecomposeFn, String),
}

fn choose(graph: &Graph, id: NodeId, executors: &[Arc<dyn Executor>]) -> Result<Choice, ExecError> {
    let v = view(graph, id)?;
    let mut reasons = Vec::new();
    for (i, ex) in executors.iter().enumerate() {
        match ex.check(&v) {
            Ok(()) => {
                return Ok(match ex.transform(&v) {
                    Some(t) => Choice::Expand(t, format!("execution transform of {}", ex.name())),
                    None => Choice::Run(i),
                })
            }
            Err(r) => reasons.push(format!("{}: {r}", ex.name())),
        }
    }
    if let Some(d) = v.op.decompose {
        return Ok(Choice::Expand(
            d,
            format!("decomposition of `{}`", v.op.name),
        ));
    }
    let names = Names::new(graph);
    Err(ExecError::NoExecutor {
        node: node_line(graph, &names, id),
        reasons,
    })
}

/// Replaces node `id` by what `f` builds from its operands and attributes.
pub(crate) fn expand_node(graph: &mut Graph, id: NodeId, f: DecomposeFn) -> Result<(), ExecError> {
    let node = graph.try_node(id)?.clone();
    let b = Builder::from_graph(std::mem::take(graph));
    let attrs = Attrs::new(node.op().attrs, node.attr_values());
    let built = f(&b, node.operands(), &attrs);
    *graph = b.finish();
    let outs = built?;
    if outs.len() != node.outputs().len() {
        graph.remove_dead();
        return Err(ExecError::Transform {
            op: node.op_name(),
            message: format!(
                "built {} outputs for a node with {}",
                outs.len(),
                node.outputs().len()
            ),
        });
    }
    for (i, &new) in outs.iter().enumerate() {
        let want = &node.outputs()[i];
        let got = graph.meta(new)?;
        if got != want {
            return Err(ExecError::Transform {
                op: node.op_name(),
                message: format!("output {i} became {got}, the node's is {want}"),
            });
        }
        graph.replace_all_uses(Value::new(id, i as u32), new)?;
    }
    graph.remove_node(id)?;
    Ok(())
}

/// Gives each executor, in stack order, its graph-level transform over the nodes planned
/// on executors after it; true as soon as one changed the graph.
fn graph_transforms(
    graph: &mut Graph,
    executors: &[Arc<dyn Executor>],
    steps: &[(NodeId, Option<usize>)],
) -> Result<bool, ExecError> {
    let assigned: HashMap<NodeId, usize> = steps
        .iter()
        .filter_map(|&(n, e)| e.map(|e| (n, e)))
        .collect();
    for (i, ex) in executors.iter().enumerate() {
        let movable = |n: NodeId| assigned.get(&n).is_some_and(|&e| e > i);
        if ex.transform_graph(graph, &movable)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Plans `graph` on `executors` (tried in order), its kernels to run with the default
/// [`KernelOptions`] (the best instruction set this CPU has, every core).
pub fn plan(graph: &Graph, executors: &[Arc<dyn Executor>]) -> Result<Plan, ExecError> {
    plan_with(graph, executors, KernelOptions::default())
}

/// [`plan`] with the kernel options `options`: the instruction set, weight packing,
/// SDPA tuning, threads and tensor budget of the plan's kernels (also installed while
/// the executors plan and transform the graph).
///
/// ```
/// use std::sync::Arc;
/// use graphrw::exec::{plan_with, Executor, ReferenceCpu};
/// use graphrw::{Builder, DType, KernelOptions, Tensor, TensorMeta};
///
/// let g = Builder::new();
/// let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
/// g.output(&[x.softmax(-1)?])?;
/// let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
/// let opts = KernelOptions::default().with_threads(1).with_pack_weights(false);
/// let p = plan_with(&g.finish(), &stack, opts)?;
/// assert_eq!(p.options().threads, Some(1));
/// p.run(&[Tensor::from_vec(vec![2, 3], vec![0f32; 6])?])?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn plan_with(
    graph: &Graph,
    executors: &[Arc<dyn Executor>],
    options: KernelOptions,
) -> Result<Plan, ExecError> {
    let threads = thread_pool(&options)?;
    let _options = options.install();
    let mut g = graph.clone();
    let mut expansions = 0usize;
    let limit = MAX_EXPANSIONS_PER_NODE.saturating_mul(graph.node_count().max(1));
    'replan: loop {
        let order = g.topo_order()?;
        let mut steps = Vec::with_capacity(order.len());
        for id in order {
            let node = g.try_node(id)?;
            if node.op().is_source_leaf() {
                steps.push((id, None));
                continue;
            }
            match choose(&g, id, executors)? {
                Choice::Run(e) => steps.push((id, Some(e))),
                Choice::Expand(f, what) => {
                    expansions += 1;
                    if expansions > limit {
                        return Err(ExecError::Transform {
                            op: g.try_node(id)?.op_name(),
                            message: format!("{what} keeps producing nodes to expand (a loop?)"),
                        });
                    }
                    expand_node(&mut g, id, f)?;
                    continue 'replan;
                }
            }
        }
        if graph_transforms(&mut g, executors, &steps)? {
            expansions += 1;
            if expansions > limit {
                return Err(ExecError::Transform {
                    op: "graph",
                    message: "graph-level execution transforms keep changing the graph".into(),
                });
            }
            continue 'replan;
        }
        if cfg!(debug_assertions) {
            verify(&g)?;
        }
        let schedule = schedule(&g, &steps)?;
        return Ok(Plan {
            graph: g,
            executors: executors.to_vec(),
            steps,
            pool: Arc::new(BufferPool::new()),
            schedule,
            options,
            threads,
        });
    }
}
