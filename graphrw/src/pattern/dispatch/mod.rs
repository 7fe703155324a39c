//! Rules merged into one decision structure per anchor op, so that a node is matched
//! only against the rules that can match it.
//!
//! Built once per rule list (see [`Dispatch::for_sets`], cached for the life of the
//! program) from the static pattern trees, which stay as `pattern!` emits them. For each
//! anchor op it holds a decision tree that switches on the op of the node's operand 0,
//! then of operand 1, operand 2, then of the operands of operands 0 and 1 (the
//! [`SWITCH_PATHS`]), with the rules that need nothing at a path copied into every
//! branch, so a lookup follows one path. At a
//! leaf, each rule keeps the checks that remain: operand count, and the literal
//! attributes of its anchor and of the pattern's ops at the switch paths (the
//! `[0, 2, 1, 3]` of a `permute` operand, say); an attribute check shared by several
//! rules is evaluated once per node.
//! A commutative anchor is entered once per operand order.
//!
//! A node's op is read from the graph's op-code column (`Graph::op_codes`: two bytes
//! per node index) through a table made once per pass (`Dispatch::keys`) from the
//! graph's few distinct ops to this dispatch's op ids (`op_ids`). So the cost of a node
//! no rule is anchored at is two array reads (its slot is never read), and the cost of
//! an anchor is one such read per switched path plus the leaf's checks: rules anchored
//! at other ops, or needing other operand ops, cost nothing. The result is a superset
//! of the rules that match: the full matcher still runs on each candidate, in priority
//! order.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use crate::op_index::VACANT;
use crate::ops::{AttrValue, Op, OpId};
use crate::pattern::claims::Claims;
use crate::pattern::matcher::attr_literal_matches;
use crate::pattern::op_ids::{OpIds, OpKey, NO_OP};
use crate::pattern::{AttrPat, PatNode, Rule, RuleSet};
use crate::{Graph, Node, NodeId};

mod build;

use build::{anchor_needs, build, Branches, Keyed};

/// The operand paths the decision trees switch on, in order: operands 0, 1 and 2 of the
/// anchor, then operands 0 and 1 of its operands 0 and 1. The second level prunes the
/// rules that agree with a node on its operands but not on theirs (attention rules that
/// differ in what feeds the softmax), before the matcher runs at all.
pub const SWITCH_PATHS: [&[usize]; 7] = [&[0], &[1], &[2], &[0, 0], &[1, 0], &[0, 1], &[1, 1]];

/// Rules by anchor op, each op's rules merged into one decision tree.
#[derive(Debug)]
pub struct Dispatch {
    rules: Vec<&'static Rule>,
    /// Ids of the op names the rules mention.
    ids: OpIds,
    /// The decision tree of each anchor op, by op id, built at its first use: a graph
    /// has a few of the ops a long rule list is anchored at, and building every tree
    /// up front was most of a small graph's pass.
    trees: Vec<Option<LazyTree>>,
    /// The id of `constant` when it appears in the trees only for literal and
    /// scalar-parameter operands (no rule names the `constant` op itself): a constant
    /// of more than one element then takes the default branch, since it can match
    /// none of those. [`NO_OP`] otherwise.
    scalar_constant: OpKey,
    /// Which rules may claim which others' matches ([`Claims`]), found at first use.
    claims: OnceLock<Claims>,
}

/// What the decision tree of one anchor op is built from, and the tree once built.
#[derive(Debug)]
struct LazyTree {
    needs: Vec<Need>,
    tests: Vec<AttrTest>,
    tree: OnceLock<OpTree>,
}

impl LazyTree {
    /// The tree, built now if this is its first use.
    #[inline]
    fn get(&self, ids: &OpIds) -> &OpTree {
        self.tree.get_or_init(|| self.build(ids))
    }

    fn build(&self, ids: &OpIds) -> OpTree {
        let switched = self
            .needs
            .iter()
            .map(|n| n.operand_ops.len())
            .max()
            .unwrap_or(0)
            .min(SWITCH_PATHS.len());
        let mut tree = OpTree {
            tests: self.tests.clone(),
            nodes: Vec::new(),
            switched,
        };
        // Each need's operand ops as sorted ids, so that building compares two bytes
        // rather than op names.
        let keyed: Vec<Keyed> = self
            .needs
            .iter()
            .map(|n| Keyed {
                operand_ops: n
                    .operand_ops
                    .iter()
                    .map(|ops| {
                        ops.as_ref().map(|ops| {
                            let mut ids: Vec<OpKey> = ops.iter().map(|&o| ids.key(o)).collect();
                            ids.sort_unstable();
                            ids.dedup();
                            ids
                        })
                    })
                    .collect(),
                entry: &n.entry,
            })
            .collect();
        let all = (0..keyed.len() as u32).collect();
        build(&mut tree.nodes, &keyed, all, 0, switched);
        tree
    }
}

/// The decision tree of one anchor op.
#[derive(Debug, Default)]
struct OpTree {
    /// Distinct literal-attribute checks of the anchor and of the nodes at its switch
    /// paths, shared by the leaves.
    tests: Vec<AttrTest>,
    /// Node 0 is the root.
    nodes: Vec<TreeNode>,
    /// How many of [`SWITCH_PATHS`] the tree may switch on.
    switched: usize,
}

#[derive(Debug)]
enum TreeNode {
    /// Go to the branch of the op of the node at operand path `SWITCH_PATHS[pos]` (or
    /// `default` when no rule names it or the node has no such operand).
    Switch {
        pos: usize,
        branches: Branches,
        default: u32,
    },
    /// The rules left, in priority order.
    Leaf(Vec<Entry>),
}

/// A literal attribute a rule needs: of the anchor (`path: None`), or of the node at
/// `SWITCH_PATHS[path]` below it, which must then also have op `op` (a test reads an
/// attribute by index, and indices mean something only for one op).
#[derive(Clone, Copy, Debug, PartialEq)]
struct AttrTest {
    path: Option<u8>,
    op: OpId,
    index: usize,
    pat: &'static AttrPat,
}

impl AttrTest {
    fn passes(&self, graph: &Graph, anchor: &Node) -> bool {
        let node = match self.path {
            None => Some(anchor),
            Some(p) => {
                at_path(graph, anchor, SWITCH_PATHS[p as usize]).filter(|n| n.op().id() == self.op)
            }
        };
        node.and_then(|n| n.attr_values().get(self.index))
            .is_some_and(|v| literal(self.pat, v))
    }
}

/// What a rule still needs of a node that reached a leaf.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    /// Index in [`Dispatch::rules`].
    rule: u32,
    /// Operands listed in the pattern, and whether more are allowed.
    operands: usize,
    more: bool,
    /// Indices into [`OpTree::tests`].
    tests: Vec<u16>,
}

/// One way a rule's anchor can match (a rule with an alternative at its root, or a
/// commutative anchor, has several).
#[derive(Clone, Debug)]
struct Need {
    /// Per path of [`SWITCH_PATHS`], the ops its producer may have (`None`: anything).
    operand_ops: Vec<Option<Vec<OpId>>>,
    entry: Entry,
}

impl Dispatch {
    /// The dispatch of the rules of `sets`, sorted as the rewriter tries them (priority
    /// descending, then set order, then declaration order). Built at the first call for
    /// a list of sets and cached.
    pub fn for_sets(sets: &[&'static RuleSet]) -> Arc<Dispatch> {
        type Cache = Mutex<HashMap<Vec<usize>, Arc<Dispatch>>>;
        static CACHE: OnceLock<Cache> = OnceLock::new();
        let key: Vec<usize> = sets.iter().map(|s| *s as *const RuleSet as usize).collect();
        let cache = CACHE.get_or_init(Default::default);
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(key)
            .or_insert_with(|| {
                let mut rules: Vec<&'static Rule> =
                    sets.iter().flat_map(|s| s.rules.iter().copied()).collect();
                rules.sort_by_key(|r| std::cmp::Reverse(r.priority));
                Arc::new(Dispatch::new(rules))
            })
            .clone()
    }

    /// The dispatch of `rules`, tried in the given order.
    pub fn new(rules: Vec<&'static Rule>) -> Dispatch {
        let mut needs: BTreeMap<OpId, Vec<Need>> = BTreeMap::new();
        let mut tests: BTreeMap<OpId, Vec<AttrTest>> = BTreeMap::new();
        for (i, rule) in rules.iter().enumerate() {
            let p = rule.pattern;
            let Some(root) = p.roots.first() else {
                continue;
            };
            for op in p.anchors {
                let tests = tests.entry(op.id()).or_default();
                let list = needs.entry(op.id()).or_default();
                let mut found = Vec::new();
                anchor_needs(p, root.node, op.id(), i as u32, tests, &mut found);
                for n in found {
                    if !list
                        .iter()
                        .any(|m| m.entry == n.entry && m.operand_ops == n.operand_ops)
                    {
                        list.push(n);
                    }
                }
            }
        }
        let ids = OpIds::new(needs.iter().flat_map(|(&op, needs)| {
            let operand_ops = needs
                .iter()
                .flat_map(|n| n.operand_ops.iter().flatten().flatten().copied());
            std::iter::once(op).chain(operand_ops).collect::<Vec<_>>()
        }));
        let mut trees: Vec<Option<LazyTree>> = (0..ids.len()).map(|_| None).collect();
        for (op, needs) in needs {
            trees[ids.key(op) as usize] = Some(LazyTree {
                needs,
                tests: tests.remove(&op).unwrap_or_default(),
                tree: OnceLock::new(),
            });
        }
        let scalar_constants_only = !rules.iter().any(|r| {
            r.pattern
                .nodes
                .iter()
                .any(|n| matches!(n, PatNode::Op(o) if o.op.is(Op::Constant)))
        });
        let scalar_constant = if scalar_constants_only {
            ids.key(Op::Constant.into())
        } else {
            NO_OP
        };
        Dispatch {
            rules,
            ids,
            trees,
            scalar_constant,
            claims: OnceLock::new(),
        }
    }

    /// Which rules of higher priority may claim a match of which others: the larger
    /// rules that contain a smaller one's anchor op ([`Claims`]).
    pub(crate) fn claims(&self) -> &Claims {
        self.claims.get_or_init(|| Claims::new(&self.rules))
    }

    /// This dispatch's op ids for the op codes of `graph` ([`Graph::op_codes`]): a
    /// node's op, or its operand's, is then two array reads, with no node slot, op
    /// definition or constant payload read. Built in time proportional to the number of
    /// distinct ops in the graph.
    pub(super) fn keys(&self, graph: &Graph) -> GraphKeys {
        let mut ids = Vec::with_capacity(2 * graph.coded_ops().len());
        for op in graph.coded_ops() {
            let id = self.ids.key(op);
            // Code 2k: not a one-element constant; 2k + 1: a one-element constant.
            ids.extend([self.switch_id(id, false), self.switch_id(id, true)]);
        }
        GraphKeys { ids }
    }

    /// The key a switch reads for a node of op id `op`: a constant of more than one
    /// element (`scalar` false) reads as [`NO_OP`] when only literal and scalar
    /// operands ask for `constant`, since it can match none of them.
    fn switch_id(&self, op: OpKey, scalar: bool) -> OpKey {
        if op == self.scalar_constant && !scalar {
            NO_OP
        } else {
            op
        }
    }

    /// False when no tree is for a node of op code `code` (a free slot, or an op no
    /// rule is anchored at); true when one is, or when the code alone cannot tell.
    #[inline]
    fn may_anchor(&self, keys: &GraphKeys, code: u16) -> bool {
        match keys.ids.get(code as usize) {
            Some(&key) => matches!(self.trees.get(key as usize), Some(Some(_))),
            None => code != VACANT,
        }
    }

    /// The switch key of node `id`: the id of its op, or [`NO_OP`] (a free slot, an op
    /// no rule names, or a constant of more than one element when only literal and
    /// scalar operands ask for `constant`).
    #[inline]
    fn key(&self, keys: &GraphKeys, graph: &Graph, id: NodeId) -> OpKey {
        let code = graph.op_codes().get(id.index()).copied().unwrap_or(VACANT);
        match keys.ids.get(code as usize) {
            Some(&key) => key,
            None if code == VACANT => NO_OP,
            // An op the graph gained after `keys` were made, or one without a code.
            None => graph.node(id).map_or(NO_OP, |n| self.key_of_node(n)),
        }
    }

    /// [`Dispatch::key`] read from the node itself.
    fn key_of_node(&self, node: &Node) -> OpKey {
        self.switch_id(self.ids.id(node.op()), node.is_scalar_constant())
    }

    /// The keys of the switch paths one operand deep below `node` (up to `upto`),
    /// read up front: their reads do not wait for one another, where a walk reading
    /// each path at its switch would wait for every read in turn. Deeper paths are
    /// read when a switch asks ([`Dispatch::deep_key`]).
    ///
    /// Packed in one integer, 16 bits a key ([`unpack`]): kept in an array, the keys
    /// were stored two bytes at a time and read back wider, and the processor cannot
    /// forward such stores to the load, which then waited for them to reach the cache.
    fn direct_keys(&self, keys: &GraphKeys, graph: &Graph, node: &Node, upto: usize) -> u64 {
        let mut packed = u64::MAX;
        for (i, v) in node.operands().iter().take(upto.min(3)).enumerate() {
            let key = self.key(keys, graph, v.node);
            packed &= !(0xffff << (16 * i));
            packed |= u64::from(key) << (16 * i);
        }
        packed
    }

    /// The key of switch path `pos` below `node`, for a path two operands deep.
    fn deep_key(&self, keys: &GraphKeys, graph: &Graph, node: &Node, pos: usize) -> OpKey {
        let &[i, j] = SWITCH_PATHS[pos] else {
            unreachable!("switch paths past the third are two operands deep")
        };
        node.operands()
            .get(i)
            .and_then(|v| graph.node(v.node))
            .and_then(|parent| parent.operands().get(j))
            .map_or(NO_OP, |v| self.key(keys, graph, v.node))
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> &[&'static Rule] {
        &self.rules
    }

    /// Builds every anchor op's decision tree now rather than at its first use (what
    /// [`crate::rules::prepare`] does ahead of a pass, off the pass's thread). A tree
    /// another thread is building is waited for, never built twice.
    pub fn build_trees(&self) {
        for tree in self.trees.iter().flatten() {
            tree.get(&self.ids);
        }
    }

    /// The rules that may match with their anchor at node `id`, in the order they are
    /// tried, written to `out` (cleared first). With `ignore_literals`, literal
    /// attributes are not checked.
    ///
    /// For one node at a time: each call reads the graph's op list first. A pass over a
    /// whole graph is a [`NodeMatcher`](crate::pattern::NodeMatcher), which reads it once.
    pub fn candidates(
        &self,
        graph: &Graph,
        id: NodeId,
        ignore_literals: bool,
        out: &mut Vec<&'static Rule>,
    ) {
        let keys = self.keys(graph);
        self.candidates_with(&keys, graph, id, ignore_literals, out);
    }

    /// [`Dispatch::candidates`] with the graph's keys made once ([`Dispatch::keys`]).
    pub(super) fn candidates_with(
        &self,
        keys: &GraphKeys,
        graph: &Graph,
        id: NodeId,
        ignore_literals: bool,
        out: &mut Vec<&'static Rule>,
    ) {
        out.clear();
        // Most nodes stop here, having read two bytes of the op-code column.
        let Some(Some(lazy)) = self.trees.get(self.key(keys, graph, id) as usize) else {
            return;
        };
        let tree = lazy.get(&self.ids);
        let Some(node) = graph.node(id) else { return };
        let direct = self.direct_keys(keys, graph, node, tree.switched);
        let mut at = 0usize;
        let entries = loop {
            match &tree.nodes[at] {
                TreeNode::Switch {
                    pos,
                    branches,
                    default,
                } => {
                    let key = match unpack(direct, *pos) {
                        Some(key) => key,
                        None => self.deep_key(keys, graph, node, *pos),
                    };
                    at = *branches.get(key).unwrap_or(default) as usize;
                }
                TreeNode::Leaf(entries) => break entries,
            }
        };
        // 0: not evaluated, 1: passes, 2: fails.
        let mut memo = [0u8; 64];
        let n = node.operands().len();
        let mut last = u32::MAX;
        for e in entries {
            if e.rule == last || n < e.operands || (!e.more && n != e.operands) {
                continue;
            }
            let pass = ignore_literals
                || e.tests.iter().all(|&t| {
                    let t = t as usize;
                    let eval = || tree.tests[t].passes(graph, node);
                    match memo.get_mut(t) {
                        Some(m) => {
                            if *m == 0 {
                                *m = if eval() { 1 } else { 2 };
                            }
                            *m == 1
                        }
                        None => eval(),
                    }
                });
            if pass {
                out.push(self.rules[e.rule as usize]);
                last = e.rule;
            }
        }
    }
}

/// Key `pos` of [`Dispatch::direct_keys`]' packed keys (`None` past the third).
#[inline]
fn unpack(packed: u64, pos: usize) -> Option<OpKey> {
    (pos < 3).then(|| (packed >> (16 * pos)) as OpKey)
}

/// How many node slots [`Dispatch::read_block_ahead`] looks at together.
const GATHER: usize = 64;

/// True when `anchors` of `len` nodes are few enough for [`read_ahead`] to pay.
fn sparse(anchors: usize, len: usize) -> bool {
    2 * anchors < len
}

/// Reads the `n` node slots from index `from` on, in order (called when few of them
/// are anchors).
///
/// On a graph bigger than the caches, anchors that are sparse among the nodes (the
/// `matmul`s a one-rule pass visits, say) are scattered over memory: visiting them one
/// after another waits for one cache miss per anchor, in turn. A read of the whole
/// block in slot order is a stream the processor's prefetcher follows, and the visits
/// that follow find the slots in cache. (A block that is mostly anchors is read
/// nearly in order by the visits themselves.)
fn read_ahead(graph: &Graph, from: usize, n: usize) {
    let mut sum = 0usize;
    for i in from..from + n {
        if let Some(node) = graph.node(NodeId::new(i)) {
            sum ^= node.operands().len();
        }
    }
    std::hint::black_box(sum);
}

/// A [`Dispatch`]'s op ids for the op codes of one graph ([`Dispatch::keys`]). Keys of
/// an op the graph gained after they were made are read from the node (correct, only
/// slower): [`GraphKeys::is_current`] says when to make them again.
#[derive(Debug)]
pub(super) struct GraphKeys {
    /// By op code: two per op the graph had when they were made.
    ids: Vec<OpKey>,
}

impl GraphKeys {
    /// False when `graph` has ops these keys do not know.
    #[inline]
    pub(super) fn is_current(&self, graph: &Graph) -> bool {
        self.ids.len() == 2 * graph.coded_ops().len()
    }
}

impl Dispatch {
    /// Prepares visits to the nodes of the block of [`GATHER`] indices from `from` on:
    /// when few of them are anchors, it reads their slots ahead, in order (see
    /// [`read_ahead`]). A [`NodeMatcher`](crate::pattern::NodeMatcher) calls it as its visits enter a new block. Returns the index just past the block.
    pub(super) fn read_block_ahead(&self, keys: &GraphKeys, graph: &Graph, from: usize) -> usize {
        let codes = graph.op_codes();
        let end = from.saturating_add(GATHER);
        let block = codes.get(from..end.min(codes.len())).unwrap_or(&[]);
        let anchors = block.iter().filter(|&&c| self.may_anchor(keys, c)).count();
        if anchors > 0 && sparse(anchors, block.len()) {
            read_ahead(graph, from, block.len());
        }
        end
    }

    /// The nodes of the block of [`GATHER`] indices from `from` on that some tree is
    /// for, found from the op-code column alone, written to `out` (cleared first); when
    /// they are few, their slots are read ahead, in order (see [`read_ahead`]). Returns
    /// the index just past the block.
    pub(super) fn block_anchors(
        &self,
        keys: &GraphKeys,
        graph: &Graph,
        from: usize,
        out: &mut Vec<NodeId>,
    ) -> usize {
        out.clear();
        let codes = graph.op_codes();
        let end = from.saturating_add(GATHER).min(codes.len());
        let block = codes.get(from..end).unwrap_or(&[]);
        for (k, &code) in block.iter().enumerate() {
            if self.may_anchor(keys, code) {
                out.push(NodeId::new(from + k));
            }
        }
        if !out.is_empty() && sparse(out.len(), block.len()) {
            read_ahead(graph, from, block.len());
        }
        end
    }
}

fn literal(pat: &AttrPat, v: &AttrValue) -> bool {
    attr_literal_matches(pat, v)
}

/// The node at `path` below `node` (operand indices, outermost first).
fn at_path<'g>(graph: &'g Graph, node: &'g Node, path: &[usize]) -> Option<&'g Node> {
    path.iter()
        .try_fold(node, |n, &i| graph.node(n.operands().get(i)?.node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{rule_set, Builder, DType, TensorMeta};

    rule_set! {
        /// Anchored at `neg`, switching on its operand's op.
        static NEG_OF;
        #[verify(skip = "a dispatch fixture: the replacement drops the `neg` on purpose")]
        rule neg_of_silu(x: Tensor) -> Tensor { x.silu().neg() } => { x.silu()? }
        #[verify(skip = "a dispatch fixture: the replacement drops the `neg` on purpose")]
        rule neg_of_exp(x: Tensor) -> Tensor { x.exp().neg() } => { x.exp()? }
    }

    #[test]
    fn keys_made_before_the_graph_gained_an_op_still_give_the_right_candidates() {
        let b = Builder::new();
        let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 2]));
        let x_value = x.value();
        b.output(&[x.exp().unwrap().neg().unwrap()]).unwrap();
        let mut g = b.finish();
        let dispatch = Dispatch::for_sets(&[&NEG_OF]);
        let stale = dispatch.keys(&g);
        // `silu` and a `neg` of it arrive after the keys were made.
        let silu = g
            .add_op(crate::ops::lookup("silu").unwrap(), &[x_value], &[])
            .unwrap();
        let neg = g
            .add_op(crate::ops::lookup("neg").unwrap(), &[silu.into()], &[])
            .unwrap();
        assert!(!stale.is_current(&g));
        let fresh = dispatch.keys(&g);
        assert!(fresh.is_current(&g));
        let mut with_stale = Vec::new();
        let mut with_fresh = Vec::new();
        for id in g.node_ids() {
            dispatch.candidates_with(&stale, &g, id, false, &mut with_stale);
            dispatch.candidates_with(&fresh, &g, id, false, &mut with_fresh);
            let names = |c: &[&Rule]| c.iter().map(|r| r.name).collect::<Vec<_>>();
            assert_eq!(names(&with_stale), names(&with_fresh), "at {id:?}");
        }
        dispatch.candidates_with(&stale, &g, neg, false, &mut with_stale);
        assert_eq!(with_stale.len(), 1);
        assert_eq!(with_stale[0].name, "neg_of_silu");
    }
}
