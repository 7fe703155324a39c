//! The planner: assigns every node to the first executor of the stack that accepts
//! it, applying execution transforms and falling back to an op's decomposition when
//! no executor takes it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use graphrw_kernels::cpu::BufferPool;
use graphrw_kernels::{KernelOptions, Tensor};

use crate::builder::Builder;
use crate::graph::{Graph, NodeId, Value};
use crate::ops::{Attrs, DecomposeFn};
use crate::printer::{node_line, Names};
use crate::verify::verify;

use super::executor::{view, Executor};
use super::schedule::{schedule, Schedule};
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
    /// The nodes no executor took, replaced by their op's decomposition.
    pub(crate) fallbacks: Vec<Fallback>,
    /// Nanoseconds the last run took (`u64::MAX` before the first): a quick plan runs
    /// on the calling thread (see [`Plan::run_values`]).
    pub(crate) last_run_ns: std::sync::atomic::AtomicU64,
}

/// A node no executor of the stack took, planned through its op's decomposition
/// instead ([`Plan::fallbacks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// The node as the printer showed it when it was decomposed (`t3 = my.op(t1)`).
    pub node: String,
    /// Its op.
    pub op: &'static str,
    /// Each executor's refusal, in stack order (`executor: reason`).
    pub refusals: Vec<String>,
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ran as its decomposition: {}",
            self.node,
            self.refusals.join("; ")
        )
    }
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

    /// Every node that no executor took and that was replaced by its op's
    /// decomposition, in planning order, with each executor's refusal (a node of a
    /// decomposition may fall back in turn and is listed too).
    pub fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    /// Gives a run's outputs back once the caller is done with them: the plan's next
    /// run draws its outputs (and intermediates) from their buffers, as onnxruntime's
    /// arena reuses an output's memory once the caller drops it. Without it, a large
    /// output is fresh memory every run, and the kernel that writes it first faults in
    /// every page (GPT-2's logits at S = 512: 103 MB, 25 000 page faults a run).
    ///
    /// What the pool does not take is simply dropped, as
    /// [`BufferPool::recycle`](graphrw_kernels::cpu::BufferPool::recycle) decides: a
    /// tensor whose storage another tensor still shares, a small or memory-mapped one,
    /// one past the pool's limit. The values are never read again.
    pub fn recycle(&self, outputs: impl IntoIterator<Item = Tensor>) {
        for t in outputs {
            self.pool.recycle(t);
        }
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
    /// First, as `#` comments, every node that no executor took and that runs as its
    /// op's decomposition ([`Plan::fallbacks`]), with each executor's refusal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = Names::new(&self.graph);
        writeln!(f, "plan {{")?;
        for fb in &self.fallbacks {
            writeln!(
                f,
                "  # runs as its decomposition (no executor took it): {}",
                fb.node
            )?;
            for r in &fb.refusals {
                writeln!(f, "  #   refused by {r}")?;
            }
        }
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

enum Choice {
    Run(usize),
    /// An execution transform of an executor that took the node.
    Transform(DecomposeFn, String),
    /// The op's decomposition, with every executor's refusal.
    Decompose(DecomposeFn, Vec<String>),
}

/// Where a node of the planned graph came from: the fallback (an index into the
/// plan's fallbacks) whose decomposition built it, for the nodes that have one.
type Origins = HashMap<NodeId, usize>;

fn choose(
    graph: &Graph,
    id: NodeId,
    executors: &[Arc<dyn Executor>],
    origins: &Origins,
    fallbacks: &[Fallback],
) -> Result<Choice, ExecError> {
    let v = view(graph, id)?;
    let mut reasons = Vec::new();
    for (i, ex) in executors.iter().enumerate() {
        match ex.check(&v) {
            Ok(()) => {
                return Ok(match ex.transform(&v) {
                    Some(t) => {
                        Choice::Transform(t, format!("execution transform of {}", ex.name()))
                    }
                    None => Choice::Run(i),
                })
            }
            Err(r) => reasons.push(format!("{}: {r}", ex.name())),
        }
    }
    if let Some(d) = v.op.decompose {
        return Ok(Choice::Decompose(d, reasons));
    }
    // A node of a decomposition: name the node the user wrote and why it was
    // decomposed, before this node's own refusals.
    if let Some(fallback) = origins.get(&id).and_then(|&i| fallbacks.get(i)) {
        let mut all = vec![format!(
            "this node is part of the decomposition of `{}` (op `{}`), which no executor took:",
            fallback.node, fallback.op
        )];
        all.extend(fallback.refusals.iter().map(|r| format!("  {r}")));
        all.push(format!("and no executor takes this `{}` node:", v.op.name));
        all.extend(reasons.into_iter().map(|r| format!("  {r}")));
        reasons = all;
    }
    let names = Names::new(graph);
    Err(ExecError::NoExecutor {
        node: node_line(graph, &names, id),
        reasons,
    })
}

/// Replaces node `id` by what `f` builds from its operands and attributes, and returns
/// the nodes it added.
fn expand_node_created(
    graph: &mut Graph,
    id: NodeId,
    f: DecomposeFn,
) -> Result<Vec<NodeId>, ExecError> {
    let node = graph.try_node(id)?.clone();
    let b = Builder::from_graph(std::mem::take(graph));
    let attrs = Attrs::new(node.op().attrs, node.attr_values());
    let built = f(&b, node.operands(), &attrs);
    let created = b.created();
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
    Ok(created)
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
    let mut fallbacks: Vec<Fallback> = Vec::new();
    let mut origins = Origins::new();
    'replan: loop {
        let order = g.topo_order()?;
        let mut steps = Vec::with_capacity(order.len());
        for id in order {
            let node = g.try_node(id)?;
            if node.op().is_source_leaf() {
                steps.push((id, None));
                continue;
            }
            let choice = choose(&g, id, executors, &origins, &fallbacks)?;
            let (f, what, fallback) = match choice {
                Choice::Run(e) => {
                    steps.push((id, Some(e)));
                    continue;
                }
                Choice::Transform(f, what) => (f, what, None),
                Choice::Decompose(f, refusals) => {
                    let node = node_line(&g, &Names::new(&g), id);
                    let op = g.try_node(id)?.op_name();
                    let what = format!("decomposition of `{op}`");
                    (f, what, Some(Fallback { node, op, refusals }))
                }
            };
            expansions += 1;
            if expansions > limit {
                return Err(ExecError::Transform {
                    op: g.try_node(id)?.op_name(),
                    message: format!("{what} keeps producing nodes to expand (a loop?)"),
                });
            }
            let origin = origins.remove(&id);
            let created = expand_node_created(&mut g, id, f)?;
            // New nodes answer for the node the user wrote: the first fallback
            // of the chain, or this one.
            let source = match fallback {
                Some(fallback) => {
                    fallbacks.push(fallback);
                    origin.unwrap_or(fallbacks.len() - 1)
                }
                None => match origin {
                    Some(o) => o,
                    None => continue 'replan,
                },
            };
            origins.extend(created.into_iter().map(|n| (n, source)));
            continue 'replan;
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
            fallbacks,
            last_run_ns: std::sync::atomic::AtomicU64::new(u64::MAX),
        });
    }
}
