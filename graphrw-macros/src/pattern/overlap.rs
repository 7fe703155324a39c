//! Rule-set checks (as Cranelift ISLE's `overlap.rs`): a rule that can never fire because
//! a more general rule is tried first (shadowing), and two rules of equal priority that
//! can match the same node (overlap) unless one is marked `#[overlap]`.
//!
//! Both checks are conservative in the direction that avoids false errors: "A subsumes
//! B" is claimed only when A has no constraints, one root, and each parameter used once;
//! "A and B overlap" treats anything it cannot compare as overlapping.

use super::ir::{AttrPattern, Ir, Lit, Node};

/// True when every match of `b` is a match of `a`.
pub fn subsumes(a: &Ir, b: &Ir) -> bool {
    if !a.constraints.is_empty() || a.roots.len() != 1 || b.roots.len() != 1 {
        return false;
    }
    let mut uses = vec![0usize; a.params.len()];
    for n in &a.nodes {
        match n {
            Node::Tensor(p) | Node::ConstParam(p) => uses[*p] += 1,
            Node::Op(o) => {
                for at in &o.attrs {
                    if let AttrPattern::Param(p) = at.pat {
                        uses[p] += 1;
                    }
                }
            }
            _ => {}
        }
    }
    if uses.iter().any(|&u| u > 1) {
        return false;
    }
    sub(a, a.roots[0], b, b.roots[0])
}

fn sub(a: &Ir, x: usize, b: &Ir, y: usize) -> bool {
    if let Node::Alt(bs) = &b.nodes[y] {
        return bs.iter().all(|&yb| sub(a, x, b, yb));
    }
    match (&a.nodes[x], &b.nodes[y]) {
        (Node::Any, _) | (Node::Tensor(_), _) => true,
        (Node::Alt(xs), _) => xs.iter().any(|&xa| sub(a, xa, b, y)),
        (Node::ConstValue(v), Node::ConstValue(w)) => v == w,
        (Node::ConstParam(_), Node::ConstValue(_) | Node::ConstParam(_)) => true,
        (Node::Op(oa), Node::Op(ob)) => {
            if oa.op.key() != ob.op.key() {
                return false;
            }
            let arity_ok = if oa.more {
                ob.operands.len() >= oa.operands.len()
            } else {
                !ob.more && ob.operands.len() == oa.operands.len()
            };
            if !arity_ok {
                return false;
            }
            for ca in &oa.attrs {
                let cb = ob.attrs.iter().find(|cb| same_key(&cb.key, &ca.key));
                let ok = match (&ca.pat, cb.map(|c| &c.pat)) {
                    (AttrPattern::Param(_), Some(AttrPattern::Lit(_) | AttrPattern::Param(_))) => {
                        true
                    }
                    (AttrPattern::Lit(l), Some(AttrPattern::Lit(m))) => l == m,
                    (AttrPattern::OneOf(ls), Some(AttrPattern::Lit(m))) => ls.contains(m),
                    (AttrPattern::OneOf(ls), Some(AttrPattern::OneOf(ms))) => {
                        ms.iter().all(|m| ls.contains(m))
                    }
                    _ => false,
                };
                if !ok {
                    return false;
                }
            }
            let pairs = |order: &[usize]| {
                oa.operands
                    .iter()
                    .zip(order.iter().map(|&i| ob.operands[i]))
                    .all(|(&xa, yb)| sub(a, xa, b, yb))
            };
            let ident: Vec<usize> = (0..oa.operands.len()).collect();
            if pairs(&ident) {
                return true;
            }
            if oa.op.commutative() && oa.operands.len() >= 2 {
                let mut sw = ident.clone();
                sw.swap(0, 1);
                return pairs(&sw);
            }
            false
        }
        _ => false,
    }
}

fn same_key(a: &super::ir::AttrKey, b: &super::ir::AttrKey) -> bool {
    use super::ir::AttrKey::*;
    match (a, b) {
        (Builtin(i, _), Builtin(j, _)) => i == j,
        (User(x, _), User(y, _)) => x == y,
        _ => false,
    }
}

/// True when some node might match both `a` and `b`.
pub fn overlaps(a: &Ir, b: &Ir) -> bool {
    match (a.roots.first(), b.roots.first()) {
        (Some(&x), Some(&y)) => ovl(a, x, b, y),
        _ => false,
    }
}

fn ovl(a: &Ir, x: usize, b: &Ir, y: usize) -> bool {
    match (&a.nodes[x], &b.nodes[y]) {
        (Node::Alt(xs), _) => xs.iter().any(|&xa| ovl(a, xa, b, y)),
        (_, Node::Alt(ys)) => ys.iter().any(|&yb| ovl(a, x, b, yb)),
        (Node::ConstValue(v), Node::ConstValue(w)) => v == w,
        (Node::ConstValue(_) | Node::ConstParam(_), Node::Op(_))
        | (Node::Op(_), Node::ConstValue(_) | Node::ConstParam(_)) => false,
        (Node::Op(oa), Node::Op(ob)) => {
            if oa.op.key() != ob.op.key() {
                return false;
            }
            let (la, lb) = (oa.operands.len(), ob.operands.len());
            if (!oa.more && !ob.more && la != lb) || (!oa.more && lb > la) || (!ob.more && la > lb)
            {
                return false;
            }
            for ca in &oa.attrs {
                if let Some(cb) = ob.attrs.iter().find(|cb| same_key(&cb.key, &ca.key)) {
                    if !attrs_meet(&ca.pat, &cb.pat) {
                        return false;
                    }
                }
            }
            let n = la.min(lb);
            let straight = (0..n).all(|i| ovl(a, oa.operands[i], b, ob.operands[i]));
            straight
                || (oa.op.commutative()
                    && n >= 2
                    && ovl(a, oa.operands[0], b, ob.operands[1])
                    && ovl(a, oa.operands[1], b, ob.operands[0])
                    && (2..n).all(|i| ovl(a, oa.operands[i], b, ob.operands[i])))
        }
        _ => true,
    }
}

fn attrs_meet(x: &AttrPattern, y: &AttrPattern) -> bool {
    let set = |p: &AttrPattern| -> Option<Vec<Lit>> {
        match p {
            AttrPattern::Lit(l) => Some(vec![l.clone()]),
            AttrPattern::OneOf(ls) => Some(ls.clone()),
            AttrPattern::Param(_) => None,
        }
    };
    match (set(x), set(y)) {
        (Some(xs), Some(ys)) => xs.iter().any(|l| ys.contains(l)),
        _ => true,
    }
}
