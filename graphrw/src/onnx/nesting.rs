//! Subgraphs (`If`, `Loop`, `Scan` bodies): how deep a file nests them, and which
//! outer values a node's subgraphs read.

use std::collections::HashSet;

use super::proto::{GraphProto, NodeProto};

/// Which message a scanned slice holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Model,
    Graph,
    Node,
    Attribute,
}

/// The child message kind of field `field` of a `kind` message, for the fields that
/// lead to subgraphs.
fn child(kind: Kind, field: u64) -> Option<Kind> {
    match (kind, field) {
        (Kind::Model, 7) => Some(Kind::Graph),
        (Kind::Graph, 1) => Some(Kind::Node),
        (Kind::Node, 5) => Some(Kind::Attribute),
        (Kind::Attribute, 6 | 11) => Some(Kind::Graph),
        _ => None,
    }
}

fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// How many graphs deep the model's subgraphs nest (the main graph is 1), found by a
/// scan of the encoded `ModelProto` without recursion; a malformed tail ends the scan.
pub(crate) fn subgraph_depth(bytes: &[u8]) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&[u8], Kind, usize)> = vec![(bytes, Kind::Model, 0)];
    while let Some((b, kind, depth)) = stack.pop() {
        let depth = depth + usize::from(kind == Kind::Graph);
        deepest = deepest.max(depth);
        let mut pos = 0;
        while pos < b.len() {
            let Some(key) = varint(b, &mut pos) else {
                break;
            };
            let skip = match key & 7 {
                0 => varint(b, &mut pos).map(|_| 0),
                1 => Some(8),
                5 => Some(4),
                2 => {
                    let Some(len) = varint(b, &mut pos) else {
                        break;
                    };
                    let Some(end) = usize::try_from(len)
                        .ok()
                        .and_then(|l| pos.checked_add(l))
                        .filter(|&e| e <= b.len())
                    else {
                        break;
                    };
                    if let Some(k) = child(kind, key >> 3) {
                        stack.push((&b[pos..end], k, depth));
                    }
                    Some(end - pos)
                }
                _ => None,
            };
            match skip {
                Some(n) if pos + n <= b.len() => pos += n,
                _ => break,
            }
        }
    }
    deepest
}

/// The names the node's subgraphs read that no subgraph defines (outer-scope values),
/// in first-use order.
pub(crate) fn captures(node: &NodeProto) -> Vec<String> {
    let mut stack: Vec<&GraphProto> = Vec::new();
    for a in &node.attribute {
        stack.extend(a.g.as_deref());
        stack.extend(a.graphs.iter());
    }
    let mut defined: HashSet<&str> = HashSet::new();
    let mut used: Vec<&str> = Vec::new();
    while let Some(g) = stack.pop() {
        defined.extend(g.input.iter().map(|v| v.name.as_str()));
        defined.extend(g.initializer.iter().map(|t| t.name.as_str()));
        for n in &g.node {
            defined.extend(n.output.iter().map(String::as_str));
            used.extend(n.input.iter().map(String::as_str));
            for a in &n.attribute {
                stack.extend(a.g.as_deref());
                stack.extend(a.graphs.iter());
            }
        }
        used.extend(g.output.iter().map(|v| v.name.as_str()));
    }
    let mut seen = HashSet::new();
    used.into_iter()
        .filter(|u| !u.is_empty() && !defined.contains(u) && seen.insert(*u))
        .map(str::to_string)
        .collect()
}
