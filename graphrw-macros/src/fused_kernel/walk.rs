//! Walks over a fused kernel's DAG: its nodes in order, a node's operands, and the
//! lowering of `rotate_half` into the row reads code generation emits.

use std::collections::HashMap;

use super::ir::{Dag, Id, Node, Un};

/// The nodes reachable from `root`, operands before users.
pub fn topo(dag: &Dag, root: Id) -> Vec<Id> {
    let mut seen = vec![false; dag.nodes.len()];
    let mut out = Vec::new();
    fn visit(dag: &Dag, n: Id, seen: &mut Vec<bool>, out: &mut Vec<Id>) {
        if seen[n] {
            return;
        }
        seen[n] = true;
        for c in operands(&dag.nodes[n]) {
            visit(dag, c, seen, out);
        }
        out.push(n);
    }
    visit(dag, root, &mut seen, &mut out);
    out
}

/// The operands of a node.
pub fn operands(n: &Node) -> Vec<Id> {
    match *n {
        Node::Input(_) | Node::Scalar(_) | Node::Lit(_) | Node::InputRot(_) => vec![],
        Node::Un(_, a)
        | Node::Cast(a, _)
        | Node::Reduce(_, a)
        | Node::Rot(a)
        | Node::RotT(a)
        | Node::HalfNeg(a) => vec![a],
        Node::Bin(_, a, b) => vec![a, b],
        Node::Where(c, a, b) => vec![c, a, b],
    }
}

/// True when the expression at `root` rotates along the row (`Rot`/`RotT`, or after
/// [`lower_rot`] `InputRot`/`HalfNeg`): its kernels run a row at a time.
pub fn has_rot(dag: &Dag, root: Id) -> bool {
    topo(dag, root).into_iter().any(|n| {
        matches!(
            dag.nodes[n],
            Node::Rot(_) | Node::RotT(_) | Node::InputRot(_) | Node::HalfNeg(_)
        )
    })
}

/// Per `Rot`/`RotT` node reachable from `root`, the tensor parameters it reads along the
/// row (not through a reduction). A kernel computes the rotation of an expression by
/// reading these at rotated positions, which is the decomposition's rotation only when the
/// expression has the output's row: one of them must span the output's last dimension.
pub fn rotation_inputs(dag: &Dag, root: Id) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for n in topo(dag, root) {
        let (Node::Rot(a) | Node::RotT(a)) = dag.nodes[n] else {
            continue;
        };
        let mut ins = Vec::new();
        let mut seen = vec![false; dag.nodes.len()];
        let mut stack = vec![a];
        while let Some(m) = stack.pop() {
            if seen[m] || matches!(dag.nodes[m], Node::Reduce(..)) {
                continue;
            }
            seen[m] = true;
            if let Node::Input(k) | Node::InputRot(k) = dag.nodes[m] {
                if !ins.contains(&k) {
                    ins.push(k);
                }
            }
            stack.extend(operands(&dag.nodes[m]));
        }
        ins.sort_unstable();
        if !out.contains(&ins) {
            out.push(ins);
        }
    }
    out
}

/// The expression at `root` with every rotation pushed down to the reads, for code
/// generation over rows of even length `d` (`h = d / 2`, `P(j) = (j + h) mod d`, an
/// involution): `rot(a)[j] = s(j) a[P(j)]` with `s` = -1 on the first half, and reading
/// an elementwise expression at `P(j)` reads its tensor parameters at `P(j)` (row
/// constants, such as reductions, are the same everywhere in the row). So `rot(a)`
/// becomes `HalfNeg(a')` where `a'` reads `InputRot` for `Input` and vice versa; under a
/// rotated read, `HalfNeg(b)` is `-HalfNeg(b')` (`s(P(j)) = -s(j)`); `rotT(a) = -rot(a)`.
/// Returns the new DAG and root (a DAG without rotations comes back unchanged).
pub fn lower_rot(dag: &Dag, root: Id) -> (Dag, Id) {
    if !has_rot(dag, root) {
        return (dag.clone(), root);
    }
    struct L<'d> {
        src: &'d Dag,
        out: Dag,
        memo: HashMap<(Id, bool), Id>,
    }
    impl L<'_> {
        fn go(&mut self, n: Id, flip: bool) -> Id {
            if let Some(&id) = self.memo.get(&(n, flip)) {
                return id;
            }
            let node = match self.src.nodes[n] {
                Node::Input(k) if flip => Node::InputRot(k),
                Node::InputRot(k) if flip => Node::Input(k),
                n @ (Node::Input(_) | Node::InputRot(_) | Node::Scalar(_) | Node::Lit(_)) => n,
                Node::Un(op, a) => Node::Un(op, self.go(a, flip)),
                Node::Bin(op, a, b) => Node::Bin(op, self.go(a, flip), self.go(b, flip)),
                Node::Where(c, a, b) => {
                    Node::Where(self.go(c, flip), self.go(a, flip), self.go(b, flip))
                }
                Node::Cast(a, dt) => Node::Cast(self.go(a, flip), dt),
                // A row constant: the same at every position of the row.
                Node::Reduce(r, a) => Node::Reduce(r, self.go(a, false)),
                Node::Rot(a) => {
                    let inner = self.go(a, !flip);
                    let s = self.out.add(Node::HalfNeg(inner));
                    if flip {
                        Node::Un(Un::Neg, s)
                    } else {
                        self.memo.insert((n, flip), s);
                        return s;
                    }
                }
                Node::RotT(a) => {
                    let inner = self.go(a, !flip);
                    let s = self.out.add(Node::HalfNeg(inner));
                    if flip {
                        self.memo.insert((n, flip), s);
                        return s;
                    }
                    Node::Un(Un::Neg, s)
                }
                Node::HalfNeg(a) => {
                    let inner = self.go(a, flip);
                    let s = self.out.add(Node::HalfNeg(inner));
                    if flip {
                        Node::Un(Un::Neg, s)
                    } else {
                        self.memo.insert((n, flip), s);
                        return s;
                    }
                }
            };
            let id = self.out.add(node);
            self.memo.insert((n, flip), id);
            id
        }
    }
    let mut l = L {
        src: dag,
        out: Dag::default(),
        memo: HashMap::new(),
    };
    let r = l.go(root, false);
    (l.out, r)
}
