//! Finding elementwise groups and replacing each by one group node.
//!
//! A group is a connected set of at least two elementwise nodes the tile kernel can
//! run, all with the same output shape (only the group's inputs broadcast). Values of a
//! group that are used outside it, or are graph outputs, become the group node's
//! outputs, so nothing used elsewhere is swallowed. A group is convex: no path leaves
//! it and comes back, so replacing it by one node cannot create a cycle.

use std::collections::{HashMap, HashSet};

use crate::graph::{Graph, NodeId, Value};
use crate::meta::{Device, Shape};
use crate::ops::{AttrValue, Op, OpClass};

use super::kernel::lane_dtype;
use super::lanes::LaneOp;
use super::program::{attr_encodable, Instr, Operand, Program, ELEMENTWISE_GROUP};
use crate::exec::ExecError;

/// The most nodes one group takes (bounds the register file of a tile).
pub const MAX_GROUP: usize = 48;

/// True when the tile kernel can run node `id` as a member of a group.
pub fn can_take(g: &Graph, id: NodeId) -> bool {
    let Some(node) = g.node(id) else {
        return false;
    };
    let op = node.op();
    let Some(builtin) = op.builtin else {
        return false;
    };
    if op.class != OpClass::Elementwise
        || LaneOp::of_builtin(builtin).is_none()
        || node.outputs().len() != 1
    {
        return false;
    }
    let attrs = node.attrs();
    match builtin {
        Op::Dropout if attrs.bool("train").unwrap_or(true) => return false,
        Op::Gelu if attrs.gelu_approximation().is_err() => return false,
        _ => {}
    }
    if !node.attr_values().iter().all(attr_encodable) {
        return false;
    }
    let out = &node.outputs()[0];
    if !lane_dtype(out.dtype) || out.device != Device::Cpu {
        return false;
    }
    node.operands().iter().all(|&v| {
        g.meta(v)
            .is_ok_and(|m| lane_dtype(m.dtype) && m.device == Device::Cpu)
    })
}

struct Finder<'a> {
    g: &'a Graph,
    pos: HashMap<NodeId, usize>,
}

impl Finder<'_> {
    /// True when no path leaves `set` and comes back into it.
    fn convex(&self, set: &HashSet<NodeId>) -> bool {
        let min = set.iter().map(|n| self.pos[n]).min().unwrap_or(0);
        let mut seen: HashSet<NodeId> = HashSet::new();
        let mut stack: Vec<NodeId> = Vec::new();
        for &m in set {
            for v in self.g.node(m).map(|n| n.operands()).unwrap_or(&[]) {
                if !set.contains(&v.node) {
                    stack.push(v.node);
                }
            }
        }
        while let Some(n) = stack.pop() {
            if set.contains(&n) {
                return false;
            }
            if self.pos[&n] < min || !seen.insert(n) {
                continue;
            }
            if let Some(node) = self.g.node(n) {
                stack.extend(node.operands().iter().map(|v| v.node));
            }
        }
        true
    }
}

/// The groups of at least two nodes among those `movable` says may be taken, each
/// in topological order.
pub fn find_groups(
    g: &Graph,
    movable: &dyn Fn(NodeId) -> bool,
) -> Result<Vec<Vec<NodeId>>, ExecError> {
    let order = g.topo_order()?;
    let f = Finder {
        g,
        pos: order.iter().enumerate().map(|(i, &n)| (n, i)).collect(),
    };
    let mut group_of: HashMap<NodeId, usize> = HashMap::new();
    let mut groups: Vec<Option<HashSet<NodeId>>> = Vec::new();
    let mut shape_of: Vec<Shape> = Vec::new();
    for &n in &order {
        if !movable(n) || !can_take(g, n) {
            continue;
        }
        let node = g.try_node(n)?;
        let shape = node.outputs()[0].shape.clone();
        let mut producers: Vec<usize> = node
            .operands()
            .iter()
            .filter_map(|v| group_of.get(&v.node).copied())
            .filter(|&gi| shape_of[gi] == shape)
            .collect();
        producers.sort_unstable();
        producers.dedup();
        // Largest groups first, then all of them together.
        producers.sort_by_key(|&gi| std::cmp::Reverse(groups[gi].as_ref().map_or(0, |s| s.len())));
        let mut choice: Option<Vec<usize>> = None;
        let mut candidates: Vec<Vec<usize>> = Vec::new();
        if producers.len() > 1 {
            candidates.push(producers.clone());
        }
        candidates.extend(producers.iter().map(|&p| vec![p]));
        for cand in candidates {
            let mut set: HashSet<NodeId> = HashSet::new();
            for &gi in &cand {
                set.extend(groups[gi].iter().flatten().copied());
            }
            set.insert(n);
            if set.len() <= MAX_GROUP && f.convex(&set) {
                choice = Some(cand);
                break;
            }
        }
        match choice {
            Some(cand) => {
                let keep = cand[0];
                for &gi in &cand[1..] {
                    let moved = groups[gi].take().unwrap_or_default();
                    for &m in &moved {
                        group_of.insert(m, keep);
                    }
                    if let Some(s) = groups[keep].as_mut() {
                        s.extend(moved);
                    }
                }
                if let Some(s) = groups[keep].as_mut() {
                    s.insert(n);
                }
                group_of.insert(n, keep);
            }
            None => {
                group_of.insert(n, groups.len());
                groups.push(Some(HashSet::from([n])));
                shape_of.push(shape);
            }
        }
    }
    let mut out: Vec<Vec<NodeId>> = groups
        .into_iter()
        .flatten()
        .filter(|s| s.len() >= 2)
        .map(|s| {
            let mut v: Vec<NodeId> = s.into_iter().collect();
            v.sort_by_key(|n| f.pos[n]);
            v
        })
        .collect();
    out.sort_by_key(|v| f.pos[&v[0]]);
    Ok(out)
}

/// The program of `members` (in topological order), its input values and the member
/// values it outputs.
pub fn program_of(
    g: &Graph,
    members: &[NodeId],
) -> Result<(Program, Vec<Value>, Vec<Value>), ExecError> {
    let index: HashMap<NodeId, usize> = members.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut inputs: Vec<Value> = Vec::new();
    let mut instrs = Vec::with_capacity(members.len());
    for &m in members {
        let node = g.try_node(m)?;
        let args = node
            .operands()
            .iter()
            .map(|&v| match index.get(&v.node) {
                Some(&k) => Operand::Result(k),
                None => Operand::Input(match inputs.iter().position(|&x| x == v) {
                    Some(i) => i,
                    None => {
                        inputs.push(v);
                        inputs.len() - 1
                    }
                }),
            })
            .collect();
        instrs.push(Instr {
            op: node.op(),
            args,
            attrs: node.attr_values().to_vec(),
        });
    }
    let mut outputs = Vec::new();
    let mut out_values = Vec::new();
    for (k, &m) in members.iter().enumerate() {
        let v = Value::new(m, 0);
        let used_outside =
            g.is_output(v) || g.uses_sorted(v).iter().any(|(u, _)| !index.contains_key(u));
        if used_outside {
            outputs.push(k);
            out_values.push(v);
        }
    }
    Ok((Program { instrs, outputs }, inputs, out_values))
}

/// Replaces every group of movable nodes by one group node; true when any was.
///
/// Each pass finds the groups and replaces them all when that leaves the graph acyclic
/// ([`replaceable_together`]): each group is convex on its own, but collapsing one joins
/// all its inputs to all its outputs, which can close a cycle through another. Where it
/// would, the pass replaces the first group only and the next pass finds the groups
/// again. (A pass per group made a chain of 100 000 elementwise nodes quadratic.)
pub fn group_graph(g: &mut Graph, movable: &dyn Fn(NodeId) -> bool) -> Result<bool, ExecError> {
    let mut changed = false;
    let mut skip: HashSet<NodeId> = HashSet::new();
    loop {
        let take = |n: NodeId| movable(n) && !skip.contains(&n);
        let mut groups = find_groups(g, &take)?;
        if groups.is_empty() {
            return Ok(changed);
        }
        if !replaceable_together(g, &groups)? {
            groups.truncate(1);
        }
        for members in groups {
            if replace_group(g, &members)? {
                changed = true;
            } else {
                // Nothing of it is used: leave it to dead-code removal.
                skip.extend(members);
            }
        }
    }
}

/// Whether the graph stays acyclic with every group of `groups` (disjoint sets of
/// nodes) collapsed into one node: a topological sort of the graph with each group as
/// one vertex.
fn replaceable_together(g: &Graph, groups: &[Vec<NodeId>]) -> Result<bool, ExecError> {
    if groups.len() < 2 {
        return Ok(true);
    }
    // Vertices: the groups, then every other node.
    let mut vertex: HashMap<NodeId, usize> = groups
        .iter()
        .enumerate()
        .flat_map(|(gi, members)| members.iter().map(move |&m| (m, gi)))
        .collect();
    let mut count = groups.len();
    for n in g.node_ids() {
        vertex.entry(n).or_insert_with(|| {
            count += 1;
            count - 1
        });
    }
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); count];
    let mut indegree = vec![0usize; count];
    for n in g.node_ids() {
        let to = vertex[&n];
        for v in g.try_node(n)?.operands() {
            let Some(&from) = vertex.get(&v.node) else {
                continue;
            };
            if from != to {
                succ[from].push(to);
                indegree[to] += 1;
            }
        }
    }
    let mut ready: Vec<usize> = (0..count).filter(|&v| indegree[v] == 0).collect();
    let mut sorted = 0;
    while let Some(v) = ready.pop() {
        sorted += 1;
        for &w in &succ[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push(w);
            }
        }
    }
    Ok(sorted == count)
}

/// Replaces the group `members` (in topological order) by one group node; false, with
/// the graph unchanged, when none of its values is used outside it.
fn replace_group(g: &mut Graph, members: &[NodeId]) -> Result<bool, ExecError> {
    let (program, inputs, outs) = program_of(g, members)?;
    if outs.is_empty() {
        return Ok(false);
    }
    let attrs = vec![
        AttrValue::Str(program.text()),
        AttrValue::Ints(program.output_attr()),
    ];
    let id = g.add_node(&ELEMENTWISE_GROUP, inputs, attrs, None)?;
    for (i, &old) in outs.iter().enumerate() {
        let new = Value::new(id, i as u32);
        if g.meta(new)? != g.meta(old)? {
            let message = format!(
                "group output {i} became {}, the node's is {}",
                g.meta(new)?,
                g.meta(old)?
            );
            g.remove_node(id)?;
            return Err(ExecError::Transform {
                op: ELEMENTWISE_GROUP.name,
                message,
            });
        }
    }
    for (i, &old) in outs.iter().enumerate() {
        g.replace_all_uses(old, Value::new(id, i as u32))?;
    }
    for &m in members.iter().rev() {
        g.remove_node(m)?;
    }
    Ok(true)
}
