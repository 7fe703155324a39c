//! [`NodeMatcher`]: the matches of many rules at one node after another, the one way
//! the rewriter and [`Dispatch::first_matches`] ask for them.
//!
//! A visit is three steps: the node's candidate rules (the [`Dispatch`]'s decision
//! trees, which read op codes and attributes only), then the full matcher on each
//! candidate in priority order, then the options' filters. How the graph is read (the
//! op-code keys, made again when the graph gains ops; the node slots of a block read
//! ahead when anchors are sparse; the matcher's reused buffers) stays in here.

use crate::pattern::dispatch::{Dispatch, GraphKeys};
use crate::pattern::matcher::{self, Scratch};
use crate::pattern::{Match, MatchOptions, Rule};
use crate::{Graph, NodeId};

/// Matches of a [`Dispatch`]'s rules, node by node, on a graph that may change between
/// visits (the rewriter replaces a match, then visits on).
///
/// ```
/// # use graphrw::pattern::{dispatch::Dispatch, MatchOptions, NodeMatcher};
/// # fn demo(graph: &graphrw::Graph, rules: &'static graphrw::RuleSet) {
/// let dispatch = Dispatch::for_sets(&[rules]);
/// let options = MatchOptions::new();
/// let mut matcher = NodeMatcher::new(&dispatch, graph, &options);
/// while let Some(id) = matcher.next_anchor(graph) {
///     matcher.visit(graph, id);
///     while let Some((rule, m)) = matcher.next_match(graph, |_| false) {
///         println!("{} matches at {id:?} ({} nodes)", rule.name, m.nodes.len());
///     }
/// }
/// # }
/// ```
pub struct NodeMatcher<'a> {
    dispatch: &'a Dispatch,
    options: &'a MatchOptions,
    /// The dispatch's op ids for the graph's op codes.
    keys: GraphKeys,
    /// The end of the last block whose slots were read ahead.
    read_to: usize,
    scratch: Scratch,
    /// The visited node and its candidate rules, in priority order.
    node: NodeId,
    candidates: Vec<&'static Rule>,
    /// The next candidate to try.
    next: usize,
    /// [`NodeMatcher::next_anchor`]'s pass: the anchors of the current block, the next
    /// of them, and the start of the next block.
    block: Vec<NodeId>,
    block_at: usize,
    sweep: usize,
    attempts: usize,
    /// The last match [`NodeMatcher::next_match_ref`] found, whose lists the next one
    /// reuses.
    found: Option<Match>,
}

impl<'a> NodeMatcher<'a> {
    /// A matcher of `dispatch`'s rules under `options`' matching flags and filters, for
    /// `graph` (or the graph it becomes by rewrites).
    pub fn new(dispatch: &'a Dispatch, graph: &Graph, options: &'a MatchOptions) -> Self {
        NodeMatcher {
            dispatch,
            options,
            keys: dispatch.keys(graph),
            read_to: 0,
            scratch: Scratch::default(),
            node: NodeId::new(0),
            candidates: Vec::new(),
            next: 0,
            block: Vec::new(),
            block_at: 0,
            sweep: 0,
            attempts: 0,
            found: None,
        }
    }

    /// The next node, in node order, that some rule may be anchored at: a pass over the
    /// whole graph (which must not change during the pass), one block of node indices
    /// at a time. The anchors of a block are found from the graph's op-code column alone
    /// (the other nodes' slots are never read), and their slots are read ahead when
    /// they are sparse.
    #[inline]
    pub fn next_anchor(&mut self, graph: &Graph) -> Option<NodeId> {
        loop {
            if let Some(&id) = self.block.get(self.block_at) {
                self.block_at += 1;
                return Some(id);
            }
            if self.sweep >= graph.op_codes().len() {
                return None;
            }
            self.refresh_keys(graph);
            self.block_at = 0;
            self.sweep =
                self.dispatch
                    .block_anchors(&self.keys, graph, self.sweep, &mut self.block);
            self.read_to = self.sweep;
        }
    }

    /// Makes the op-code keys again when the graph has gained ops since.
    #[inline]
    fn refresh_keys(&mut self, graph: &Graph) {
        if !self.keys.is_current(graph) {
            self.keys = self.dispatch.keys(graph);
        }
    }

    /// Starts on node `id`: finds the rules that may match with their anchor there
    /// ([`Dispatch::candidates`]). Returns false when there are none (most nodes: the
    /// cost is then a read of the graph's op-code column).
    #[inline]
    pub fn visit(&mut self, graph: &Graph, id: NodeId) -> bool {
        self.refresh_keys(graph);
        if id.index() >= self.read_to {
            // Mostly on the first sweep through the graph, in node order.
            self.read_to = self
                .dispatch
                .read_block_ahead(&self.keys, graph, id.index());
        }
        self.node = id;
        self.next = 0;
        self.dispatch.candidates_with(
            &self.keys,
            graph,
            id,
            self.options.flags.ignore_literals,
            &mut self.candidates,
        );
        !self.candidates.is_empty()
    }

    /// The next match at the visited node: the candidates not tried yet are run in
    /// priority order, and the first that matches and that the options' filters accept
    /// is returned. Rules `skip` refuses are passed over (and not counted as attempts).
    /// `None` when no candidate is left.
    #[inline]
    pub fn next_match(
        &mut self,
        graph: &Graph,
        skip: impl FnMut(&'static Rule) -> bool,
    ) -> Option<(&'static Rule, Match)> {
        self.next_match_ref(graph, skip)
            .map(|(rule, m)| (rule, m.clone()))
    }

    /// [`NodeMatcher::next_match`] for a caller that only reads the match: it is
    /// written into the same lists every time (the rewriter's loop), not allocated anew.
    #[inline]
    pub(crate) fn next_match_ref(
        &mut self,
        graph: &Graph,
        mut skip: impl FnMut(&'static Rule) -> bool,
    ) -> Option<(&'static Rule, &Match)> {
        while let Some(&rule) = self.candidates.get(self.next) {
            self.next += 1;
            if skip(rule) {
                continue;
            }
            self.attempts += 1;
            let flags = self.options.flags;
            let found = &mut self.found;
            let scratch = &mut self.scratch;
            if matcher::run_into::<false>(rule.pattern, graph, self.node, flags, scratch, found)
                .is_err()
            {
                continue;
            }
            let options = self.options;
            if self
                .found
                .as_ref()
                .is_some_and(|m| options.accepts(graph, m))
            {
                return self.found.as_ref().map(|m| (rule, m));
            }
        }
        None
    }

    /// Full match attempts so far: candidates run by the matcher, over all visits.
    pub fn attempts(&self) -> usize {
        self.attempts
    }
}

impl Dispatch {
    /// A matching pass without rewriting: for every node, in node order, the first rule
    /// (in the order rules are tried) that matches with its anchor there, under
    /// `options`' matching flags and filters. Safety and overlaps are not checked (the
    /// rewriter's job). A [`NodeMatcher`] visit of every node.
    pub fn first_matches(
        &self,
        graph: &Graph,
        options: &MatchOptions,
    ) -> Vec<(&'static Rule, Match)> {
        let mut matcher = NodeMatcher::new(self, graph, options);
        let mut out = Vec::new();
        while let Some(id) = matcher.next_anchor(graph) {
            if matcher.visit(graph, id) {
                out.extend(matcher.next_match(graph, |_| false));
            }
        }
        out
    }
}
