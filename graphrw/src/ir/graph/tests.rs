//! Unit tests of the graph store.

use super::*;
use crate::meta::DType;

/// Big graphs are scanned slot by slot: a node slot that grows (a field added
/// inline, an inline capacity raised) costs every pass memory traffic. 208 bytes
/// today: op 8, attributes 16, operands 40, their use slots 24, one output's
/// metadata inline 96 (four dims of 16 bytes: a size, or one thin pointer to a
/// symbol's name or an expression), name 16, payload 8.
#[test]
fn a_node_slot_stays_small() {
    assert!(std::mem::size_of::<crate::meta::Dim>() <= 16);
    assert!(
        std::mem::size_of::<Node>() <= 208,
        "{}",
        std::mem::size_of::<Node>()
    );
    assert!(std::mem::size_of::<UseList>() <= 32);
}

/// The verifier's cycle check names the node `topo_order` names.
#[test]
fn node_on_cycle_agrees_with_topo_order() {
    let mut g = Graph::new();
    let meta = TensorMeta::new(DType::F32, [2usize]);
    let x = g.add_input("x", meta.clone());
    assert_eq!(g.node_on_cycle(), None);
    let neg = &ops::builtin::NEG;
    let a = g.add_node_unchecked(neg, vec![x], vec![], vec![meta.clone()]);
    let b = g.add_node_unchecked(neg, vec![a.into()], vec![], vec![meta.clone()]);
    let c = g.add_node_unchecked(neg, vec![b.into()], vec![], vec![meta.clone()]);
    assert!(g.topo_order().is_ok());
    assert_eq!(g.node_on_cycle(), None);
    // a <- b <- a: a cycle, with c hanging below it.
    g.set_operand(a, 0, b.into()).unwrap();
    let Err(GraphError::Cycle { node }) = g.topo_order() else {
        panic!("topo_order missed the cycle");
    };
    assert_eq!(g.node_on_cycle(), Some(NodeId::new(node)));
    assert!([a, b, c].contains(&NodeId::new(node)));
}

/// Kahn's algorithm with every ready node in a heap: the order `topo_order` gives.
fn heap_order(g: &Graph) -> Vec<NodeId> {
    let mut indegree: BTreeMap<NodeId, usize> = g
        .node_ids()
        .map(|n| (n, g.node(n).map_or(0, |n| n.operands().len())))
        .collect();
    let mut ready: BinaryHeap<Reverse<NodeId>> = indegree
        .iter()
        .filter(|(_, &d)| d == 0)
        .map(|(&n, _)| Reverse(n))
        .collect();
    let mut order = Vec::new();
    while let Some(Reverse(n)) = ready.pop() {
        order.push(n);
        for &(user, _) in g.node_uses(n) {
            let d = indegree.get_mut(&user).expect("live user");
            *d -= 1;
            if *d == 0 {
                ready.push(Reverse(user));
            }
        }
    }
    order
}

/// The scan with a heap only for nodes made ready behind it gives the order of a
/// heap of every ready node, on graphs whose operands often have larger ids than
/// their users (rewired after they were built, as rewrites leave a graph).
#[test]
fn topo_order_is_smallest_ready_first() {
    let meta = TensorMeta::new(DType::F32, [2usize]);
    let (neg, add) = (
        ops::lookup("neg").expect("neg"),
        ops::lookup("add").expect("add"),
    );
    for seed in 1..20u64 {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as usize % n
        };
        let mut g = Graph::new();
        let x = g.add_input("x", meta.clone());
        // Each node has a level; its operands have lower ones, so any wiring that
        // keeps to that stays acyclic.
        let mut nodes: Vec<(NodeId, usize)> = Vec::new();
        for _ in 0..60 {
            let level = 1 + next(1000);
            let below: Vec<Value> = nodes
                .iter()
                .filter(|&&(_, l)| l < level)
                .map(|&(n, _)| Value::from(n))
                .collect();
            let pick = |r: usize| below.get(r % below.len().max(1)).copied().unwrap_or(x);
            let id = if next(2) == 0 {
                g.add_node_unchecked(neg, vec![pick(next(97))], vec![], vec![meta.clone()])
            } else {
                let (a, b) = (pick(next(97)), pick(next(97)));
                g.add_node_unchecked(add, vec![a, b], vec![], vec![meta.clone()])
            };
            nodes.push((id, level));
        }
        // Rewire operands to nodes built later (larger ids) of a lower level.
        for _ in 0..40 {
            let (u, lu) = nodes[next(nodes.len())];
            let (v, lv) = nodes[next(nodes.len())];
            if lv < lu {
                g.set_operand(u, 0, v.into()).expect("rewire");
            }
        }
        let order = g.topo_order().expect("acyclic");
        assert_eq!(order, heap_order(&g), "seed {seed}");
        assert_eq!(order.len(), g.node_count());
    }
}

/// A use list entry that no operand points back to is found (the verifier counts
/// entries against operand slots, then reads each list to name the node).
#[test]
fn verify_finds_a_use_list_entry_without_its_operand() {
    let mut g = Graph::new();
    let meta = TensorMeta::new(DType::F32, [2usize]);
    let x = g.add_input("x", meta.clone());
    let neg = &ops::builtin::NEG;
    let a = g.add_node_unchecked(neg, vec![x], vec![], vec![meta.clone()]);
    let b = g.add_node_unchecked(neg, vec![a.into()], vec![], vec![meta.clone()]);
    g.set_outputs(vec![b.into()]).expect("outputs");
    assert!(crate::verify::verify_all(&g).is_empty());
    // `b` listed as a user of `a` a second time (the count kept in step).
    let extra = (
        b,
        Use {
            output: 0,
            operand: 0,
        },
    );
    g.use_lists[a.index()].push(extra);
    g.use_counts[a.index()] += 1;
    let errors = crate::verify::verify_all(&g);
    assert!(
        errors.iter().any(|e| e
            .to_string()
            .contains("its use list names a use that its user's operands do not have")),
        "{errors:?}"
    );
    assert!(crate::verify::verify_ordered(&g).is_err());
}
