//! Matching options as PyTorch FX's `SubgraphMatcher` has them ([`MatchOptions`]), and
//! [`find_with`], the search that applies them.

use std::collections::HashSet;

use crate::pattern::matcher::{self, Flags, Scratch};
use crate::pattern::safety::check_safe;
use crate::pattern::{Match, Pattern};
use crate::{Graph, NodeId};

/// A filter on matches: return false to skip a match (FX's `match_filters`).
pub type MatchFilter = fn(&Graph, &Match) -> bool;

/// How to match: FX's `SubgraphMatcher` options, set with builder methods.
/// `MatchOptions::new()` is FX's default.
///
/// | option | default | effect |
/// |---|---|---|
/// | [`match_output`](MatchOptions::match_output) | off | the pattern's outputs must be the graph's outputs: all of them, in order (FX matches the pattern's `return` against the graph's) |
/// | [`match_placeholder`](MatchOptions::match_placeholder) | off | tensor parameters must bind graph inputs (not computed values or constants); scalar parameters are unaffected |
/// | [`remove_overlapping_matches`](MatchOptions::remove_overlapping_matches) | on | greedily in anchor order, drop a match sharing an op node with a match kept earlier |
/// | [`ignore_literals`](MatchOptions::ignore_literals) | off | literals of the pattern (constant numbers, attribute values, defaults of attributes left out) match any value; a literal still matches only a one-element constant, never a computed value |
/// | [`fully_contained`](MatchOptions::fully_contained) | on | keep only matches that are safe to replace ([`check_safe`]: no interior value used outside, convex) |
/// | [`filter`](MatchOptions::filter) | none | keep only matches every filter accepts; filters run before overlap removal, so a refused match never hides another |
///
/// Unlike FX, a name used twice must bind the same value, distinct names may bind the
/// same value (`x.add(y)` matches `a + a`), and [`find_with`] reports at most one match
/// per anchor node (FX's raw matches also count every permutation of identical
/// sibling anchors).
///
/// ```
/// use graphrw::pattern::{find_with, MatchOptions};
/// use graphrw::{pattern, Builder, DType, TensorMeta};
///
/// pattern! {
///     fn sigmoid2(x: Tensor) -> Tensor { x.sigmoid().sigmoid() }
/// }
/// let g = Builder::new();
/// let mut y = g.input("x", TensorMeta::new(DType::F32, [4usize]));
/// for _ in 0..4 {
///     y = y.sigmoid()?;
/// }
/// g.output(&[y])?;
/// let graph = g.finish();
/// let count = |o: MatchOptions| find_with(&sigmoid2::PATTERN, &graph, &o).len();
/// assert_eq!(count(MatchOptions::new()), 2);
/// assert_eq!(count(MatchOptions::new().remove_overlapping_matches(false)), 3);
/// assert_eq!(count(MatchOptions::new().match_output(true)), 1);
/// assert_eq!(count(MatchOptions::new().match_placeholder(true)), 1);
/// # Ok::<(), graphrw::GraphError>(())
/// ```
#[derive(Clone, Debug)]
pub struct MatchOptions {
    pub(crate) flags: Flags,
    pub(crate) remove_overlapping: bool,
    pub(crate) fully_contained: bool,
    pub(crate) filters: Vec<MatchFilter>,
}

impl Default for MatchOptions {
    fn default() -> Self {
        MatchOptions::new()
    }
}

impl MatchOptions {
    /// FX's defaults: outputs and inputs are wildcards, literals compared, overlapping
    /// and unsafe matches removed, no filters.
    pub fn new() -> MatchOptions {
        MatchOptions {
            flags: Flags::default(),
            remove_overlapping: true,
            fully_contained: true,
            filters: Vec::new(),
        }
    }

    /// The pattern's outputs must be the graph's outputs, all of them, in order.
    pub fn match_output(mut self, on: bool) -> MatchOptions {
        self.flags.match_output = on;
        self
    }

    /// Tensor parameters must bind graph inputs.
    pub fn match_placeholder(mut self, on: bool) -> MatchOptions {
        self.flags.match_placeholder = on;
        self
    }

    /// Drop matches that share an op node with a match kept earlier (default on). The
    /// [`Rewriter`](crate::rewrite::Rewriter) ignores it: it rewrites one match at a
    /// time on the graph as the previous rewrite left it, so its rewrites never overlap.
    pub fn remove_overlapping_matches(mut self, on: bool) -> MatchOptions {
        self.remove_overlapping = on;
        self
    }

    /// Literals of the pattern match any value of the same place.
    pub fn ignore_literals(mut self, on: bool) -> MatchOptions {
        self.flags.ignore_literals = on;
        self
    }

    /// Keep only matches that are safe to replace (default on; the
    /// [`Rewriter`](crate::rewrite::Rewriter) always checks safety).
    pub fn fully_contained(mut self, on: bool) -> MatchOptions {
        self.fully_contained = on;
        self
    }

    /// Keep only matches `filter` accepts (several filters must all accept).
    pub fn filter(mut self, filter: MatchFilter) -> MatchOptions {
        self.filters.push(filter);
        self
    }

    /// Whether the filters accept `m`.
    pub(crate) fn accepts(&self, graph: &Graph, m: &Match) -> bool {
        self.filters.iter().all(|f| f(graph, m))
    }
}

/// Every match of `pattern` in `graph` under `options`, in anchor node order.
pub fn find_with(pattern: &'static Pattern, graph: &Graph, options: &MatchOptions) -> Vec<Match> {
    let mut scratch = Scratch::default();
    let mut taken: HashSet<NodeId> = HashSet::new();
    let mut out = Vec::new();
    for anchor in matcher::anchor_candidates(pattern, graph) {
        let Ok(m) = matcher::run_in::<false>(pattern, graph, anchor, options.flags, &mut scratch)
        else {
            continue;
        };
        if options.fully_contained && check_safe(graph, &m).is_err() {
            continue;
        }
        if !options.accepts(graph, &m) {
            continue;
        }
        if options.remove_overlapping {
            let ops: Vec<NodeId> = m
                .nodes
                .iter()
                .copied()
                .filter(|&n| graph.node(n).is_some_and(|n| !n.op().is_source_leaf()))
                .collect();
            if ops.iter().any(|n| taken.contains(n)) {
                continue;
            }
            taken.extend(ops);
        }
        out.push(m);
    }
    out
}

/// The first match of `pattern` anchored at `node` under `options`' matching flags
/// (`match_output`, `match_placeholder`, `ignore_literals`) and filters; safety is not
/// checked here.
pub fn match_at_with(
    pattern: &'static Pattern,
    graph: &Graph,
    node: NodeId,
    options: &MatchOptions,
) -> Option<Match> {
    matcher::run_in::<false>(pattern, graph, node, options.flags, &mut Scratch::default())
        .ok()
        .filter(|m| options.accepts(graph, m))
}
