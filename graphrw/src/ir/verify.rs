//! The verifier: a graph is acyclic, every use is defined, operand lists, use lists
//! and use counts agree, attributes fit their op's signature, and every node's metadata is
//! what its op's inference gives.

use crate::graph::{check_signature, Graph, NodeId, Use, Value};
use crate::meta::TensorMeta;
use crate::ops::{AttrValue, Infer, Op};
use crate::printer::{node_line, Names};
use crate::GraphError;

/// Checks `graph`; the first problem found is the error, naming the node as the
/// printer shows it and what was expected.
pub fn verify(graph: &Graph) -> Result<(), GraphError> {
    match verify_all(graph).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Checks `graph` as [`verify`] does and returns its nodes in [`Graph::topo_order`]'s
/// order: the cycle check orders the graph anyway, so a caller that needs the order
/// (the ONNX exporter) does not walk the graph a second time.
pub(crate) fn verify_ordered(graph: &Graph) -> Result<Vec<NodeId>, GraphError> {
    let (errors, order) = check(graph, true);
    match (errors.into_iter().next(), order) {
        (Some(e), _) => Err(e),
        (None, Some(order)) => Ok(order),
        // Not reached: without a cycle error the order is there.
        (None, None) => graph.topo_order(),
    }
}

/// Graphs of fewer nodes are checked before [`verify_ordered_with`]'s consumer runs, on
/// the calling thread: starting a thread would cost more than the overlap saves.
const PARALLEL_NODES: usize = 4096;

/// Checks `graph` as [`verify_ordered`] does and runs `run` over its topological order,
/// returning `run`'s result only when the graph verifies (and the first problem, as
/// [`verify`] gives it, when it does not).
///
/// Above [`PARALLEL_NODES`] nodes the checks run on a second thread while `run` goes
/// on with the calling one, in the same order: `run` must call [`Gate::ready`] before it
/// reads the `i`-th node of the order (and with `order.len()` before it reads anything
/// not behind a node, such as the graph's outputs), and stop when it says no. So `run`
/// only reads nodes that checked out, and operands come before their users: what it
/// reads is what it would read after a whole check. When the second thread finds any
/// problem, the graph is checked again on the calling thread, so the error is the one
/// [`verify_ordered`] gives, whatever the thread's timing.
pub(crate) fn verify_ordered_with<T>(
    graph: &Graph,
    mut run: impl FnMut(&[NodeId], &Gate) -> T,
) -> Result<T, GraphError> {
    if graph.node_count() >= PARALLEL_NODES {
        if let Ok(order) = graph.topo_order() {
            let progress = Progress::default();
            let out = std::thread::scope(|s| {
                // No thread to be had: the one-thread check below.
                let checker = std::thread::Builder::new()
                    .name("graphrw-verify".into())
                    .spawn_scoped(s, || progress.check(graph, &order))
                    .ok()?;
                let out = run(
                    &order,
                    &Gate {
                        progress: Some(&progress),
                        seen: std::cell::Cell::new(0),
                    },
                );
                if let Err(panic) = checker.join() {
                    std::panic::resume_unwind(panic);
                }
                Some(out)
            });
            if let Some(out) = out.filter(|_| progress.passed(order.len())) {
                return Ok(out);
            }
        }
    }
    // A small graph, or one with a problem: the errors of the one-thread check.
    let order = verify_ordered(graph)?;
    Ok(run(&order, &Gate::checked()))
}

/// How far the second thread of [`verify_ordered_with`] has checked the order.
#[derive(Default)]
struct Progress {
    /// Nodes of the order that checked out; the order's length plus one once the
    /// whole graph has.
    checked: std::sync::atomic::AtomicUsize,
    /// Set when a problem was found (checking stops there).
    failed: std::sync::atomic::AtomicBool,
}

impl Progress {
    /// Checks `graph`'s nodes in `order` (every node, as [`check_node`] does when
    /// [`verify_all`] walks them by id), then what [`check_with`] checks of the
    /// whole graph but its cycles (`order` is a topological order: there are none).
    fn check(&self, graph: &Graph, order: &[NodeId]) {
        use std::sync::atomic::Ordering::Release;
        let mut tally = Tally::default();
        for (i, &id) in order.iter().enumerate() {
            let mut ok = true;
            check_node(graph, id, false, &mut tally, &mut |_, _| ok = false);
            if !ok {
                self.failed.store(true, Release);
                return;
            }
            self.checked.store(i + 1, Release);
        }
        let whole = order.len() == graph.node_count()
            && tally.all_linked
            && tally.linked_slots == tally.entries
            && graph
                .inputs()
                .iter()
                .all(|&id| graph.node(id).is_some_and(|n| n.op().is(Op::Input)))
            && graph.outputs().iter().all(|&v| graph.meta(v).is_ok());
        match whole {
            true => self.checked.store(order.len() + 1, Release),
            false => self.failed.store(true, Release),
        }
    }

    /// True when the whole graph of `nodes` nodes checked out.
    fn passed(&self, nodes: usize) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        !self.failed.load(Acquire) && self.checked.load(Acquire) > nodes
    }
}

/// What the consumer of [`verify_ordered_with`] asks before it reads a node: whether
/// the check has got that far and found it sound.
pub(crate) struct Gate<'p> {
    /// `None`: the graph was checked whole before (everything is ready).
    progress: Option<&'p Progress>,
    /// The last progress read (read again only when the consumer catches up with it,
    /// so the two threads do not share a cache line node by node).
    seen: std::cell::Cell<usize>,
}

impl Gate<'_> {
    /// The gate of a graph checked whole before: every node is ready.
    pub(crate) fn checked() -> Gate<'static> {
        Gate {
            progress: None,
            seen: std::cell::Cell::new(0),
        }
    }

    /// Waits until the `i`-th node of the order has been checked (`i` = the order's
    /// length: the whole graph) and says whether it checked out; false means stop, the
    /// graph has a problem.
    pub(crate) fn ready(&self, i: usize) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        let Some(progress) = self.progress else {
            return true;
        };
        if i < self.seen.get() {
            return true;
        }
        let mut spins = 0u32;
        loop {
            let checked = progress.checked.load(Acquire);
            if checked > i {
                self.seen.set(checked);
                return true;
            }
            if progress.failed.load(Acquire) {
                return false;
            }
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Checks `graph` and returns every problem found.
pub fn verify_all(graph: &Graph) -> Vec<GraphError> {
    check(graph, false).0
}

/// Every problem of `graph`, and its topological order when `ordered` and it has no
/// cycle.
///
/// The use lists are checked from the operands' side only, with a count: each linked
/// operand slot finds its own entry in its producer's use list, so the slots map one to
/// one onto entries, and when there are as many entries as linked slots, every entry
/// points back to the slot that found it (what the per-list check would check, use by
/// use, at a random node each). Only when that does not hold is the graph checked
/// again with each use list read, so the errors are those of that check.
fn check(graph: &Graph, ordered: bool) -> (Vec<GraphError>, Option<Vec<NodeId>>) {
    match check_with(graph, ordered, false) {
        Some(found) => found,
        None => check_with(graph, ordered, true).unwrap_or_else(|| (Vec::new(), None)),
    }
}

/// [`check`], reading each node's use list (`each_use_list`) or counting entries;
/// `None` when the count does not settle it.
fn check_with(
    graph: &Graph,
    ordered: bool,
    each_use_list: bool,
) -> Option<(Vec<GraphError>, Option<Vec<NodeId>>)> {
    // Named only when something is wrong: naming every value costs more than the checks.
    let names = std::cell::OnceCell::new();
    let names = || names.get_or_init(|| Names::new(graph));
    let mut errors = Vec::new();
    let mut tally = Tally::default();
    for id in graph.node_ids() {
        check_node(graph, id, each_use_list, &mut tally, &mut |id, message| {
            errors.push(GraphError::Verify {
                node: node_line(graph, names(), id),
                message,
            })
        });
    }
    let Tally {
        linked_slots,
        entries,
        all_linked,
    } = tally;
    for id in graph.inputs() {
        if !graph.node(*id).is_some_and(|n| n.op().is(Op::Input)) {
            errors.push(GraphError::Verify {
                node: format!("%{}", id.index()),
                message: "is listed as a graph input but is not an `input` node".into(),
            });
        }
    }
    for (i, &v) in graph.outputs().iter().enumerate() {
        if graph.meta(v).is_err() {
            errors.push(GraphError::Verify {
                node: format!("%{}.{}", v.node.index(), v.output),
                message: format!("graph output {i} does not exist"),
            });
        }
    }
    let settled = each_use_list || (all_linked && linked_slots == entries);
    if !settled {
        return None;
    }
    // The same node either way: which nodes Kahn's algorithm leaves, and so the first
    // one on or behind a cycle, does not depend on the order it takes them in.
    let (on_cycle, order) = if ordered {
        match graph.topo_order() {
            Ok(order) => (None, Some(order)),
            Err(GraphError::Cycle { node }) => (Some(NodeId::new(node)), None),
            Err(e) => {
                errors.push(e);
                (None, None)
            }
        }
    } else {
        (graph.node_on_cycle(), None)
    };
    if let Some(node) = on_cycle {
        errors.push(GraphError::Verify {
            node: node_line(graph, names(), node),
            message: "lies on a cycle: a value depends on itself".into(),
        });
    }
    Some((errors, order))
}

/// Counts [`check_node`] keeps over the nodes it checks: linked operand slots (whose
/// producer exists), use list entries of live nodes, and whether every node's operands
/// were found in their producers' use lists.
struct Tally {
    linked_slots: usize,
    entries: usize,
    all_linked: bool,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            linked_slots: 0,
            entries: 0,
            all_linked: true,
        }
    }
}

/// The checks of one node, each problem given to `fail` (node, message) in the order
/// [`verify_all`] lists them; `each_use_list` reads the node's use list entry by
/// entry (see [`check`]).
fn check_node(
    graph: &Graph,
    id: NodeId,
    each_use_list: bool,
    tally: &mut Tally,
    fail: &mut impl FnMut(NodeId, String),
) {
    let Some(node) = graph.node(id) else { return };
    // Every use is defined.
    for (i, &v) in node.operands().iter().enumerate() {
        if graph.meta(v).is_err() {
            fail(
                id,
                format!(
                    "operand {i} uses %{}.{}, which does not exist (a dangling use)",
                    v.node.index(),
                    v.output
                ),
            );
        }
    }
    // Each operand is in its producer's use list, at the slot the node keeps.
    let linked = node.operands().iter().enumerate().all(|(i, &v)| {
        let want = (
            id,
            Use {
                output: v.output,
                operand: i as u32,
            },
        );
        match graph.use_slot(id, i) {
            Some(slot) => {
                tally.linked_slots += usize::from(graph.node(v.node).is_some());
                graph.node_uses(v.node).get(slot) == Some(&want)
            }
            None => graph.node(v.node).is_none(),
        }
    });
    if !linked {
        tally.all_linked = false;
        fail(
            id,
            "its operand list and its producers' use lists disagree".into(),
        );
    }
    tally.entries += graph.node_uses(id).len();
    // Each entry of its use list is an operand of a live user, which points back.
    let back = !each_use_list
        || graph
            .node_uses(id)
            .iter()
            .enumerate()
            .all(|(slot, &(user, u))| {
                let i = u.operand as usize;
                graph.node(user).and_then(|n| n.operands().get(i).copied())
                    == Some(Value::new(id, u.output))
                    && graph.use_slot(user, i) == Some(slot)
            });
    if !back {
        fail(
            id,
            "its use list names a use that its user's operands do not have".into(),
        );
    }
    // The graph's use count agrees with the use list.
    let listed = graph.node_uses(id).len();
    if graph.node_use_count(id) != listed {
        fail(
            id,
            format!(
                "the graph counts {} uses of it, its use list has {listed}",
                graph.node_use_count(id)
            ),
        );
    }
    // Signature.
    if let Err(message) = check_signature(node.op(), node.operands().len(), node.attr_values()) {
        fail(id, format!("`{}` {message}", node.op_name()));
        return;
    }
    // Output count and metadata.
    let expected = node.op().output_count(node.attr_values());
    if node.outputs().len() != expected {
        fail(
            id,
            format!(
                "has {} outputs, `{}` makes {expected}",
                node.outputs().len(),
                node.op_name()
            ),
        );
        return;
    }
    if let Some(message) = check_metadata(graph, id) {
        fail(id, message);
    }
}

fn check_metadata(graph: &Graph, id: NodeId) -> Option<String> {
    let node = graph.node(id)?;
    match node.op().infer {
        Infer::Declared => match node.builtin() {
            Some(Op::Constant) => {
                let Some(t) = node.payload() else {
                    return Some("a constant without a value".into());
                };
                let m = TensorMeta::of(t);
                (node.outputs()[0].dtype != m.dtype || node.outputs()[0].shape != m.shape)
                    .then(|| format!("metadata says {}, the constant is {m}", node.outputs()[0]))
            }
            Some(Op::Opaque) => match node.foreign() {
                None => Some("an opaque node without its foreign record".into()),
                Some(f) if f.types.len() != node.outputs().len() => Some(format!(
                    "an opaque node with {} outputs but {} output types recorded",
                    node.outputs().len(),
                    f.types.len()
                )),
                Some(_) => None,
            },
            _ => match node.attr_values().first() {
                Some(AttrValue::Str(_)) => None,
                _ => Some("an input without a name".into()),
            },
        },
        _ => {
            if node.operands().iter().any(|&v| graph.meta(v).is_err()) {
                return None;
            }
            match graph.infer_node(node.op(), node.operands(), node.attr_values(), node.name()) {
                Ok(inferred) if inferred == node.outputs() => None,
                Ok(inferred) => {
                    let want: Vec<String> = inferred.iter().map(|m| m.to_string()).collect();
                    Some(format!(
                        "metadata disagrees with `{}`'s inference, which gives {}",
                        node.op_name(),
                        want.join(", ")
                    ))
                }
                Err(e) => Some(format!("inference rejects this node: {e}")),
            }
        }
    }
}

/// What one rewrite touched, for [`verify_patch`]: the nodes it added, the nodes outside
/// it whose operands it rewired, and the producers whose use lists it changed (those of
/// the added nodes' operands and of the removed nodes' operands).
#[derive(Debug, Default)]
pub(crate) struct Touched<'a> {
    /// Nodes the rewrite added.
    pub(crate) added: &'a [NodeId],
    /// Nodes outside the patch that now read the new outputs.
    pub(crate) rewired: &'a [NodeId],
    /// Producers whose use lists gained or lost entries (a removed one is skipped).
    pub(crate) producers: &'a [NodeId],
}

/// A producer's use list is read entry by entry up to this length; a longer one (a
/// value shared by every layer) is checked by its count alone, so a rewrite at each of
/// its users does not read the whole list each time.
const LISTED_USES: usize = 64;

/// The local check after one rewrite: every node the rewrite [`Touched`], and no cycle
/// through its added nodes. Returns the first problem (named as [`verify`] names it) and
/// adds the nodes checked, plus the nodes the cycle search visited, to `work`.
///
/// Checked: the added nodes whole (operands defined and linked, use lists, signature,
/// metadata against inference); the rewired nodes' operands, signature and metadata
/// (their own use lists did not change); each producer's use count against its use list,
/// and its list entry by entry when it has at most [`LISTED_USES`] entries; and the
/// graph outputs. The cycle search walks back from each added node's operands and fails
/// when it comes back to that node (a new cycle passes through an added node). It
/// visits at most 64 nodes per added node; past that budget it stops without a verdict
/// and the whole-graph check at the end of the run (which
/// [`Verify::Local`](crate::rewrite::Verify::Local) includes) decides. The nodes only
/// the removed ones used, removed with them, are not seen here: their producers are
/// checked by the end-of-run check too.
pub(crate) fn verify_patch(
    graph: &Graph,
    touched: &Touched<'_>,
    work: &mut usize,
) -> Result<(), GraphError> {
    let mut first: Option<(NodeId, String)> = None;
    let mut tally = Tally::default();
    let mut fail = |id: NodeId, message: String| {
        if first.is_none() {
            first = Some((id, message));
        }
    };
    for &id in touched.added {
        check_node(graph, id, true, &mut tally, &mut fail);
    }
    for &id in touched.rewired {
        check_node(graph, id, false, &mut tally, &mut fail);
    }
    for &id in touched.producers {
        let listed = graph.node_uses(id).len();
        check_node(graph, id, listed <= LISTED_USES, &mut tally, &mut fail);
    }
    *work += touched.added.len() + touched.rewired.len() + touched.producers.len();
    for (i, &v) in graph.outputs().iter().enumerate() {
        if graph.meta(v).is_err() {
            return Err(GraphError::Verify {
                node: format!("%{}.{}", v.node.index(), v.output),
                message: format!("graph output {i} does not exist"),
            });
        }
    }
    if first.is_none() {
        first = cycle_through_patch(graph, touched, work).map(|on_cycle| {
            (
                on_cycle,
                "lies on a cycle through the rewrite's new nodes: a value depends on itself"
                    .to_string(),
            )
        });
    }
    match first {
        None => Ok(()),
        Some((id, message)) => Err(GraphError::Verify {
            node: node_line(graph, &Names::new(graph), id),
            message,
        }),
    }
}

/// An added node on a cycle, found by walking back from its operands until the walk
/// comes back to it, within a budget of nodes per added node (see [`verify_patch`]);
/// `None` when there is none or the budget ran out first.
fn cycle_through_patch(graph: &Graph, touched: &Touched<'_>, work: &mut usize) -> Option<NodeId> {
    /// Nodes one walk may visit.
    const BUDGET: usize = 64;
    let mut stack: Vec<NodeId> = Vec::new();
    let mut seen: std::collections::HashSet<NodeId> = std::collections::HashSet::new();
    for &a in touched.added {
        stack.clear();
        seen.clear();
        stack.extend(graph.node(a)?.operands().iter().map(|v| v.node));
        while let Some(n) = stack.pop() {
            if n == a {
                return Some(a);
            }
            if !seen.insert(n) {
                continue;
            }
            *work += 1;
            if seen.len() > BUDGET {
                break;
            }
            stack.extend(
                graph
                    .node(n)
                    .map_or(&[][..], |n| n.operands())
                    .iter()
                    .map(|v| v.node),
            );
        }
    }
    None
}

/// What an op declaration must be for any node of it to be built: an op whose
/// metadata is `like` its decomposition needs a decomposition.
const LIKE_WITHOUT_DECOMPOSITION: &str =
    "is declared `infer: Infer::Like` (metadata like its decomposition) but has no decomposition";

impl crate::ops::OpDef {
    /// Checks the declaration itself, at compile time when used in a `static`'s
    /// initialiser: `static MY_OP: OpDef = OpDef { .. }.checked();` fails to compile when
    /// the op is declared `like` its decomposition ([`Infer::Like`]) without one. A
    /// `pattern!` that names a user op makes the same check at compile time, and
    /// [`OpRegistry::register`](crate::ops::OpRegistry::register) refuses such an op.
    pub const fn checked(self) -> crate::ops::OpDef {
        if self.soundness().is_err() {
            panic!("the op is declared `infer: Infer::Like` (metadata like its decomposition) but has no decomposition: give it `decompose: Some(..)` or an `Infer::Fn`");
        }
        self
    }

    /// `Err` with what is wrong when the declaration cannot make a node ([`Self::checked`]).
    pub const fn soundness(&self) -> Result<(), &'static str> {
        if matches!(self.infer, Infer::Like) && self.decompose.is_none() {
            return Err(LIKE_WITHOUT_DECOMPOSITION);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Builder, DType, TensorMeta};

    /// `x → relu → exp`, with the relu and exp nodes.
    fn chain() -> (Graph, NodeId, NodeId) {
        let b = Builder::new();
        let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
        let y = x.relu().unwrap();
        let z = y.exp().unwrap();
        b.output(&[z]).unwrap();
        let (y, z) = (y.value().node, z.value().node);
        (b.finish(), y, z)
    }

    fn like(
        _: &crate::Builder,
        x: &[Value],
        _: &crate::ops::Attrs,
    ) -> Result<Vec<Value>, GraphError> {
        Ok(vec![x[0]])
    }

    /// A `like` op, with or without a decomposition.
    const fn like_op(decompose: Option<crate::ops::DecomposeFn>) -> crate::ops::OpDef {
        crate::ops::OpDef {
            name: "test.like",
            doc: "",
            operands: &[],
            attrs: &[],
            outputs: crate::ops::OutputCount::Fixed(1),
            commutative: false,
            class: crate::ops::OpClass::Elementwise,
            infer: Infer::Like,
            decompose,
            builtin: None,
        }
    }

    static SOUND: crate::ops::OpDef = like_op(Some(like)).checked();
    static UNSOUND: crate::ops::OpDef = like_op(None);

    #[test]
    fn a_like_op_needs_a_decomposition() {
        assert!(SOUND.soundness().is_ok());
        assert!(UNSOUND
            .soundness()
            .unwrap_err()
            .contains("no decomposition"));
        let mut registry = crate::ops::OpRegistry::with_builtins();
        let e = registry.register(&UNSOUND).unwrap_err().to_string();
        assert!(
            e.contains("test.like") && e.contains("no decomposition"),
            "{e}"
        );
        registry.register(&SOUND).unwrap();
    }

    #[test]
    fn a_sound_patch_passes_and_counts_its_nodes() {
        let (g, y, z) = chain();
        let mut work = 0;
        let touched = Touched {
            added: &[y],
            rewired: &[z],
            producers: &[],
        };
        verify_patch(&g, &touched, &mut work).unwrap();
        assert!(work >= 2, "{work}");
    }

    #[test]
    fn a_cycle_through_an_added_node_is_found() {
        let (mut g, y, z) = chain();
        // relu reads exp, which reads relu.
        g.set_operand(y, 0, Value::new(z, 0)).unwrap();
        let touched = Touched {
            added: &[y],
            rewired: &[z],
            producers: &[],
        };
        let e = verify_patch(&g, &touched, &mut 0).unwrap_err().to_string();
        assert!(e.contains("cycle") && e.contains("relu"), "{e}");
    }

    #[test]
    fn wrong_metadata_on_a_rewired_node_is_found() {
        let (mut g, _, z) = chain();
        g.node_mut(z)
            .unwrap()
            .set_output_meta(0, TensorMeta::new(DType::F32, [7usize]));
        let touched = Touched {
            added: &[],
            rewired: &[z],
            producers: &[],
        };
        let e = verify_patch(&g, &touched, &mut 0).unwrap_err().to_string();
        assert!(e.contains("exp") && e.contains("inference"), "{e}");
    }
}
