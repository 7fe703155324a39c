//! Building a dispatch's decision trees: what each rule needs of an anchor node and of
//! the nodes on its operand paths ([`SWITCH_PATHS`](super::SWITCH_PATHS)), and the tree
//! of switches on those ops that sorts the rules.

use super::{AttrTest, Entry, Need, TreeNode, SWITCH_PATHS};
use crate::ops::{Op, OpId};
use crate::pattern::op_ids::OpKey;
use crate::pattern::{AttrPat, OpPat, PatNode, Pattern};

/// The ways the pattern node `at` can match a node of op `op` as the anchor.
pub(super) fn anchor_needs(
    p: &'static Pattern,
    at: u16,
    op: OpId,
    rule: u32,
    tests: &mut Vec<AttrTest>,
    out: &mut Vec<Need>,
) {
    match &p.nodes[at as usize] {
        PatNode::Op(o) if o.op.id() == op => {
            let orders: &[bool] = if o.op.commutative && o.operands.len() >= 2 {
                &[true, false]
            } else {
                &[false]
            };
            for &swap in orders {
                let mut wanted: Vec<AttrTest> = literal_attrs(None, o).collect();
                for (path, &at) in path_nodes(p, o.operands, swap).iter().enumerate() {
                    if let Some(PatNode::Op(inner)) = at.map(|at| &p.nodes[at as usize]) {
                        wanted.extend(literal_attrs(Some(path as u8), inner));
                    }
                }
                let mut ids: Vec<u16> = wanted
                    .into_iter()
                    .map(|t| match tests.iter().position(|u| *u == t) {
                        Some(i) => i as u16,
                        None => {
                            tests.push(t);
                            (tests.len() - 1) as u16
                        }
                    })
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                out.push(Need {
                    operand_ops: path_ops(p, o.operands, swap),
                    entry: Entry {
                        rule,
                        operands: o.operands.len(),
                        more: o.more_operands,
                        tests: ids,
                    },
                });
            }
        }
        PatNode::Op(_) => {}
        PatNode::Alt(bs) => {
            for &b in *bs {
                anchor_needs(p, b, op, rule, tests, out);
            }
        }
        // Anything else at the root: a candidate wherever its op is an anchor op.
        _ => out.push(Need {
            operand_ops: Vec::new(),
            entry: Entry {
                rule,
                operands: 0,
                more: true,
                tests: Vec::new(),
            },
        }),
    }
}

/// The literal-attribute tests of pattern op node `o`, matched at `path`.
pub(super) fn literal_attrs(path: Option<u8>, o: &'static OpPat) -> impl Iterator<Item = AttrTest> {
    o.attrs
        .iter()
        .filter(|a| !matches!(a.pat, AttrPat::Param(_)))
        .map(move |a| AttrTest {
            path,
            op: o.op.id(),
            index: a.index,
            pat: &a.pat,
        })
}

/// Per path of [`SWITCH_PATHS`], the ops a match needs there, for an anchor whose
/// pattern operands are `operands` (`swap`: operands 0 and 1 exchanged, the other order
/// of a commutative anchor). Trailing paths that need nothing are left out.
pub(super) fn path_ops(p: &Pattern, operands: &[u16], swap: bool) -> Vec<Option<Vec<OpId>>> {
    let mut out: Vec<Option<Vec<OpId>>> = path_nodes(p, operands, swap)
        .into_iter()
        .map(|at| top_ops(p, at?))
        .collect();
    while out.last().is_some_and(Option::is_none) {
        out.pop();
    }
    out
}

/// Per path of [`SWITCH_PATHS`], the pattern node a match puts there, when the path
/// is fixed by the pattern (it goes only through plain ops whose operand order is
/// fixed: a commutative or alternative node may match its operands in either order).
pub(super) fn path_nodes(p: &Pattern, operands: &[u16], swap: bool) -> Vec<Option<u16>> {
    let operand = |i: usize| {
        let i = match (swap, i) {
            (true, 0) => 1,
            (true, 1) => 0,
            _ => i,
        };
        operands.get(i).copied()
    };
    SWITCH_PATHS
        .iter()
        .map(|path| {
            let mut at = operand(path[0])?;
            for &i in &path[1..] {
                match &p.nodes[at as usize] {
                    PatNode::Op(o) if !o.op.commutative => at = *o.operands.get(i)?,
                    _ => return None,
                }
            }
            Some(at)
        })
        .collect()
}

/// The ops the graph node matched by pattern node `at` may have (`None`: any).
pub(super) fn top_ops(p: &Pattern, at: u16) -> Option<Vec<OpId>> {
    match &p.nodes[at as usize] {
        PatNode::Op(o) => Some(vec![o.op.id()]),
        PatNode::Const(_) => Some(vec![Op::Constant.into()]),
        PatNode::Alt(bs) => {
            let mut all = Vec::new();
            for &b in *bs {
                all.extend(top_ops(p, b)?);
            }
            Some(all)
        }
        PatNode::Repeat(r) => {
            let mut all = top_ops(p, r.body)?;
            if r.min == 0 {
                all.extend(top_ops(p, r.base)?);
            }
            Some(all)
        }
        PatNode::Any | PatNode::Tensor(_) | PatNode::Hole(_) => None,
    }
}

/// A [`Need`] with its operand ops as sorted ids, what [`build`] switches on.
pub(super) struct Keyed<'a> {
    pub(super) operand_ops: Vec<Option<Vec<OpKey>>>,
    pub(super) entry: &'a Entry,
}

/// Builds the subtree of the needs `sel` (indices into `all`) switching from operand
/// `pos`; returns its index. Subtrees share `all` and take lists of indices, so a need
/// is copied once, into the leaves it reaches.
pub(super) fn build(
    nodes: &mut Vec<TreeNode>,
    all: &[Keyed<'_>],
    sel: Vec<u32>,
    pos: usize,
    switched: usize,
) -> u32 {
    let at = nodes.len() as u32;
    let need_at = |i: u32| {
        all[i as usize]
            .operand_ops
            .get(pos)
            .and_then(Option::as_deref)
    };
    let mut names: Vec<OpKey> = sel
        .iter()
        .filter_map(|&i| need_at(i))
        .flatten()
        .copied()
        .collect();
    names.sort_unstable();
    names.dedup();
    if pos < switched && !sel.is_empty() && names.is_empty() {
        // Nothing to switch on here: try the next position.
        return build(nodes, all, sel, pos + 1, switched);
    }
    if pos >= switched || sel.is_empty() {
        let mut entries: Vec<Entry> = sel.iter().map(|&i| all[i as usize].entry.clone()).collect();
        entries.sort_by_key(|e| e.rule);
        entries.dedup();
        nodes.push(TreeNode::Leaf(entries));
        return at;
    }
    nodes.push(TreeNode::Leaf(Vec::new())); // placeholder, replaced below
    let default_sel: Vec<u32> = sel
        .iter()
        .copied()
        .filter(|&i| need_at(i).is_none())
        .collect();
    let default = build(nodes, all, default_sel, pos + 1, switched);
    let mut branches = Vec::with_capacity(names.len());
    for id in names {
        let sub: Vec<u32> = sel
            .iter()
            .copied()
            .filter(|&i| need_at(i).is_none_or(|ops| ops.binary_search(&id).is_ok()))
            .collect();
        branches.push((id, build(nodes, all, sub, pos + 1, switched)));
    }
    nodes[at as usize] = TreeNode::Switch {
        pos,
        branches: Branches::new(branches),
        default,
    };
    at
}

/// The branches of a switch, by op id, sorted. Most switches have a handful, scanned;
/// bigger ones are searched by halves.
#[derive(Debug)]
pub(super) struct Branches(Vec<(OpKey, u32)>);

impl Branches {
    /// Up to this many branches are scanned.
    const SCAN: usize = 8;

    fn new(mut branches: Vec<(OpKey, u32)>) -> Branches {
        branches.sort_unstable();
        Branches(branches)
    }

    #[inline]
    pub(super) fn get(&self, op: OpKey) -> Option<&u32> {
        if self.0.len() <= Branches::SCAN {
            self.0.iter().find(|(id, _)| *id == op).map(|(_, to)| to)
        } else {
            let i = self.0.binary_search_by_key(&op, |(id, _)| *id).ok()?;
            Some(&self.0[i].1)
        }
    }
}
