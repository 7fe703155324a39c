//! Lowering: the checked [`Ir`] becomes the final tree: anchors, links between roots,
//! and the op count (the default priority).

use std::collections::BTreeSet;

use super::ir::{Ir, Node, OpRef};

/// What lowering adds to the IR.
pub struct Lowered {
    /// Ops the first root can have.
    pub anchors: Vec<OpRef>,
    /// For each root, `(slot, depth)` of a binding earlier roots always bind.
    pub links: Vec<Option<(usize, u16)>>,
    /// Ops matched (alternatives count their smallest branch; repetitions their minimum).
    pub op_count: u16,
}

pub fn lower(ir: &Ir) -> Lowered {
    let mut anchors = Vec::new();
    if let Some(&r) = ir.roots.first() {
        anchor_ops(ir, r, &mut anchors);
    }
    let mut seen: Vec<String> = Vec::new();
    anchors.retain(|a: &OpRef| {
        let k = a.key();
        !seen.contains(&k) && {
            seen.push(k);
            true
        }
    });
    let mut links = vec![None];
    let mut bound = BTreeSet::new();
    if let Some(&r) = ir.roots.first() {
        surely_bound(ir, r, &mut bound);
    }
    for &r in ir.roots.iter().skip(1) {
        links.push(find_link(ir, r, &bound));
        surely_bound(ir, r, &mut bound);
    }
    let mut visited = BTreeSet::new();
    let op_count = ir
        .roots
        .iter()
        .map(|&r| count_ops(ir, r, &mut visited))
        .sum::<usize>()
        .min(u16::MAX as usize) as u16;
    Lowered {
        anchors,
        links,
        op_count,
    }
}

pub fn anchor_ops(ir: &Ir, n: usize, out: &mut Vec<OpRef>) {
    match &ir.nodes[n] {
        Node::Op(o) => out.push(o.op.clone()),
        Node::Alt(bs) => bs.iter().for_each(|&b| anchor_ops(ir, b, out)),
        Node::Repeat {
            body, base, min, ..
        } => {
            anchor_ops(ir, *body, out);
            if *min == 0 {
                anchor_ops(ir, *base, out);
            }
        }
        _ => {}
    }
}

/// Slots certainly bound after matching node `n`: parameters anywhere outside repeated
/// bodies (alternatives bind the same ones), op slots outside alternatives.
fn surely_bound(ir: &Ir, n: usize, out: &mut BTreeSet<usize>) {
    match &ir.nodes[n] {
        Node::Tensor(p) => {
            out.insert(*p);
        }
        Node::Op(o) => {
            if let Some(s) = o.slot {
                out.insert(s);
            }
            for &x in &o.operands {
                surely_bound(ir, x, out);
            }
        }
        Node::Alt(bs) => {
            let sets: Vec<BTreeSet<usize>> = bs
                .iter()
                .map(|&b| {
                    let mut s = BTreeSet::new();
                    surely_bound(ir, b, &mut s);
                    s
                })
                .collect();
            if let Some(first) = sets.first() {
                for s in first {
                    if sets.iter().all(|x| x.contains(s)) {
                        out.insert(*s);
                    }
                }
            }
        }
        Node::Repeat { base, .. } => surely_bound(ir, *base, out),
        _ => {}
    }
}

/// The nearest value-binding node of root `r` (by depth, breadth first) whose slot is in
/// `bound`.
fn find_link(ir: &Ir, r: usize, bound: &BTreeSet<usize>) -> Option<(usize, u16)> {
    let mut level = vec![r];
    let mut depth = 0u16;
    while !level.is_empty() {
        let mut next = Vec::new();
        for &n in &level {
            match &ir.nodes[n] {
                Node::Tensor(p) if bound.contains(p) && depth > 0 => return Some((*p, depth)),
                Node::Op(o) => {
                    if let Some(s) = o.slot {
                        if bound.contains(&s) && depth > 0 {
                            return Some((s, depth));
                        }
                    }
                    next.extend(o.operands.iter().copied());
                }
                _ => {}
            }
        }
        level = next;
        depth += 1;
    }
    None
}

fn count_ops(ir: &Ir, n: usize, visited: &mut BTreeSet<usize>) -> usize {
    if !visited.insert(n) {
        return 0;
    }
    match &ir.nodes[n] {
        Node::Op(o) => {
            1 + o
                .operands
                .iter()
                .map(|&x| count_ops(ir, x, visited))
                .sum::<usize>()
        }
        Node::Alt(bs) => bs
            .iter()
            .map(|&b| count_ops(ir, b, &mut visited.clone()))
            .min()
            .unwrap_or(0),
        Node::Repeat {
            body, base, min, ..
        } => count_ops(ir, *body, visited) * (*min as usize) + count_ops(ir, *base, visited),
        Node::ConstValue(_) | Node::ConstParam(_) => 0,
        _ => 0,
    }
}
