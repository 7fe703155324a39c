//! A pattern made concrete: walks a compiled [`Pattern`]'s tree from its roots and
//! builds a graph it matches. Each tensor parameter (and `_`) becomes a graph input at
//! its first use, each scalar parameter a drawn value, each alternative, optional part
//! and repetition count a choice ([`Coverage`] steers the choices towards the ones no
//! accepted graph has taken yet). Shapes follow the ops: an operand created beside
//! another takes its shape (with dims of 1 now and then, to broadcast) and dtype, the
//! right operand of a `matmul` continues the left one's inner dim, and `rank(x) == N`
//! and `dtype(x) == T` constraints are met directly. Everything else (`check(..)`
//! closures, comparisons of scalars) is left to rejection: the caller matches the graph
//! and draws another when the pattern refuses it.

use std::collections::BTreeMap;

use super::{sample, Rng};
use crate::meta::{DType, Shape, TensorMeta};
use crate::ops::{AttrValue, Op, OpClass};
use crate::pattern::{
    AttrPat, Bound, CmpOp, ConstPat, OpPat, ParamKind, PatNode, Pattern, Slot, Term,
};
use crate::{Graph, Tensor, Value};

/// The choices taken for one graph: `(pattern node, branch, branches)`.
pub(super) type Trail = Vec<(u16, usize, usize)>;

/// How many times each branch of each choice (an alternative, an optional part, a
/// repetition count) was taken by an accepted graph, per pattern node.
#[derive(Clone, Debug, Default)]
pub(super) struct Coverage {
    counts: BTreeMap<u16, Vec<u32>>,
}

impl Coverage {
    /// Commits the choices of an accepted graph.
    pub(super) fn commit(&mut self, trail: &[(u16, usize, usize)]) {
        for &(node, branch, n) in trail {
            let c = self.counts.entry(node).or_insert_with(|| vec![0; n]);
            c[branch] += 1;
        }
    }

    /// Branches no accepted graph has taken: `(pattern node, branch)`.
    pub(super) fn missing(&self, pattern: &Pattern) -> Vec<(u16, usize)> {
        let mut out = Vec::new();
        for (i, node) in pattern.nodes.iter().enumerate() {
            let n = branches(node);
            let counts = self.counts.get(&(i as u16));
            for b in 0..n {
                if counts.is_none_or(|c| c[b] == 0) {
                    out.push((i as u16, b));
                }
            }
        }
        out
    }

    /// The least taken branch of `node` (of `n`), ties and one try in four at random.
    fn choose(&self, rng: &mut Rng, node: u16, n: usize) -> usize {
        let counts = self.counts.get(&node);
        if rng.chance(0.25) || counts.is_none() {
            return rng.below(n);
        }
        let c = counts.map(|c| c.as_slice()).unwrap_or(&[]);
        let least = (0..n)
            .map(|b| c.get(b).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        let ties: Vec<usize> = (0..n)
            .filter(|&b| c.get(b).copied().unwrap_or(0) == least)
            .collect();
        rng.pick(&ties)
    }
}

/// The most repetitions a generated chain has.
const MAX_REPEAT: u16 = 3;

/// How many branches a choice at `node` has (0: not a choice).
pub(super) fn branches(node: &PatNode) -> usize {
    match node {
        PatNode::Alt(list) => list.len(),
        PatNode::Repeat(r) => {
            let lo = r.min.max(1);
            let hi = r.max.min(lo.max(MAX_REPEAT));
            usize::from(hi.saturating_sub(lo)) + 1
        }
        _ => 0,
    }
}

/// How dims are drawn for a graph: all one size (shapes always fit each other), or each
/// its own.
#[derive(Clone, Copy, Debug)]
pub(super) enum Sizes {
    /// Every dim this size.
    One(u64),
    /// Each dim in `2..=5`, or 1 one time in ten.
    Varied,
}

/// What the user of a value to be built would like it to be.
#[derive(Clone, Debug, Default)]
struct Hint {
    dtype: Option<DType>,
    shape: Option<Vec<u64>>,
}

/// A generated graph and what was chosen to build it.
pub(super) struct Instance {
    /// The graph; its outputs are the pattern's roots.
    pub graph: Graph,
    /// The choices taken: `(pattern node, branch, branches)`.
    pub trail: Trail,
}

/// The walker's state for one graph.
struct Walk<'a> {
    pattern: &'static Pattern,
    graph: Graph,
    rng: &'a mut Rng,
    coverage: &'a Coverage,
    trail: Trail,
    slots: Vec<Option<Bound>>,
    holes: Vec<Value>,
    float: DType,
    sizes: Sizes,
    rank_of: Vec<Option<usize>>,
    dtype_of: Vec<Option<DType>>,
    seen_sizes: Vec<u64>,
}

/// Builds a graph `pattern` should match, or says why it could not (an op refused the
/// drawn operands or attributes: the caller draws again).
pub(super) fn instantiate(
    pattern: &'static Pattern,
    rng: &mut Rng,
    coverage: &Coverage,
    half: bool,
) -> Result<Instance, String> {
    let sizes = if rng.chance(0.5) {
        Sizes::One(rng.range(2, 4) as u64)
    } else {
        Sizes::Varied
    };
    let float = if half {
        rng.pick(&sample::WITH_HALF)
    } else {
        rng.pick(&sample::FLOATS)
    };
    let n = pattern.params.len();
    let mut walk = Walk {
        pattern,
        graph: Graph::new(),
        rng,
        coverage,
        trail: Vec::new(),
        slots: vec![None; usize::from(pattern.slots).max(n)],
        holes: Vec::new(),
        float,
        sizes,
        rank_of: vec![None; n],
        dtype_of: vec![None; n],
        seen_sizes: Vec::new(),
    };
    walk.read_constraints();
    let mut outputs = Vec::new();
    for root in pattern.roots {
        outputs.push(walk.build(root.node, Hint::default())?);
    }
    walk.graph.set_outputs(outputs).map_err(|e| e.to_string())?;
    Ok(Instance {
        graph: walk.graph,
        trail: walk.trail,
    })
}

impl Walk<'_> {
    /// `rank(x) == N` and `dtype(x) == T` (either way round) fix the parameter's rank
    /// and dtype from the start.
    fn read_constraints(&mut self) {
        for c in self.pattern.constraints {
            let crate::pattern::Check::Compare(a, CmpOp::Eq, b) = c.check else {
                continue;
            };
            for (x, y) in [(a, b), (b, a)] {
                // Only parameters (a `let` name's rank follows from its ops).
                match (x, y) {
                    (Term::Rank(s), Term::Int(n)) if n >= 0 => {
                        if let Some(r) = self.rank_of.get_mut(usize::from(s)) {
                            *r = Some(n as usize);
                        }
                    }
                    (Term::DType(s), Term::DTypeLit(t)) => {
                        if let Some(d) = self.dtype_of.get_mut(usize::from(s)) {
                            *d = Some(t);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    fn choose(&mut self, node: u16, n: usize) -> usize {
        let b = self.coverage.choose(self.rng, node, n);
        self.trail.push((node, b, n));
        b
    }

    fn dim(&mut self) -> u64 {
        let d = match self.sizes {
            Sizes::One(n) => n,
            Sizes::Varied if self.rng.chance(0.1) => 1,
            Sizes::Varied => self.rng.range(2, 5) as u64,
        };
        self.seen_sizes.push(d);
        d
    }

    /// A new graph input for parameter `slot` (or `_`), shaped after `hint`.
    fn input(&mut self, slot: Option<Slot>, hint: &Hint) -> Result<Value, String> {
        let forced_rank = slot.and_then(|s| self.rank_of[usize::from(s)]);
        let dtype = slot
            .and_then(|s| self.dtype_of[usize::from(s)])
            .or(hint.dtype)
            .unwrap_or(self.float);
        let mut shape = match &hint.shape {
            Some(s) => {
                let mut s = s.clone();
                // Broadcast now and then: drop leading dims, or make some dims 1.
                if self.rng.chance(0.3) && !s.is_empty() {
                    if self.rng.chance(0.3) {
                        let drop = self.rng.below(s.len());
                        s.drain(..drop);
                    } else {
                        for d in &mut s {
                            if self.rng.chance(0.5) {
                                *d = 1;
                            }
                        }
                    }
                }
                s
            }
            None => {
                let r = forced_rank.unwrap_or_else(|| self.rng.pick(&[1, 2, 2, 3, 3, 4, 4]));
                (0..r).map(|_| self.dim()).collect()
            }
        };
        if let Some(r) = forced_rank {
            while shape.len() > r {
                shape.remove(0);
            }
            while shape.len() < r {
                let d = self.dim();
                shape.insert(0, d);
            }
        }
        let name = match slot {
            Some(s) => self.pattern.params[usize::from(s)].name.to_string(),
            None => format!("any{}", self.graph.inputs().len()),
        };
        // A tensor parameter binds any value: now and then a one-number constant (what
        // `check(|c| c.scalar() == Some(2.0))` looks for), 0-d or of all-ones shape.
        let v = if dtype.is_float() && self.rng.chance(0.2) {
            let x = if self.rng.chance(0.6) {
                self.rng.pick(&[1.0, 2.0])
            } else {
                sample::float(self.rng, &self.seen_sizes)
            };
            let ones = vec![1usize; self.rng.below(shape.len() + 1)];
            self.graph.add_constant(Tensor::full(dtype, &ones, x))
        } else {
            let meta = TensorMeta::new(dtype, Shape::known(&shape));
            self.graph.add_input(name, meta)
        };
        if let Some(s) = slot {
            self.slots[usize::from(s)] = Some(Bound::Value(v));
        }
        Ok(v)
    }

    /// A one-number constant of the hint's dtype.
    fn constant(&mut self, x: f64, hint: &Hint) -> Value {
        let dtype = hint.dtype.unwrap_or(self.float);
        self.graph.add_constant(Tensor::full(dtype, &[], x))
    }

    /// The value of scalar parameter `slot`, drawn at its first use.
    fn scalar(&mut self, slot: Slot) -> f64 {
        match &self.slots[usize::from(slot)] {
            Some(Bound::Float(x)) => *x,
            Some(Bound::Int(x)) => *x as f64,
            _ => {
                let (bound, x) = match self.pattern.params[usize::from(slot)].kind {
                    ParamKind::Int => {
                        let i = self.rng.range(-2, 3);
                        (Bound::Int(i), i as f64)
                    }
                    _ => {
                        let x = sample::float(self.rng, &self.seen_sizes);
                        (Bound::Float(x), x)
                    }
                };
                self.slots[usize::from(slot)] = Some(bound);
                x
            }
        }
    }

    fn build(&mut self, node: u16, hint: Hint) -> Result<Value, String> {
        match &self.pattern.nodes[usize::from(node)] {
            PatNode::Any => self.input(None, &hint),
            PatNode::Tensor(slot) => match &self.slots[usize::from(*slot)] {
                Some(Bound::Value(v)) => Ok(*v),
                _ => self.input(Some(*slot), &hint),
            },
            PatNode::Const(ConstPat::Value(x)) => Ok(self.constant(*x, &hint)),
            PatNode::Const(ConstPat::Param(slot)) => {
                let x = self.scalar(*slot);
                Ok(self.constant(x, &hint))
            }
            PatNode::Alt(list) => {
                let b = self.choose(node, list.len());
                self.build(list[b], hint)
            }
            PatNode::Repeat(r) => {
                let n = branches(&self.pattern.nodes[usize::from(node)]);
                let count = r.min.max(1) as usize + self.choose(node, n);
                let mut v = self.build(r.base, hint.clone())?;
                for _ in 0..count {
                    self.holes.push(v);
                    let out = self.build(r.body, hint.clone());
                    self.holes.pop();
                    v = out?;
                }
                Ok(v)
            }
            PatNode::Hole(_) => self
                .holes
                .last()
                .copied()
                .ok_or_else(|| "a repeated chain's hole outside its chain".to_string()),
            PatNode::Op(op) => match op.slot.map(|s| &self.slots[usize::from(s)]) {
                // A shared (`let`) node built before: the same value.
                Some(Some(Bound::Value(v))) => Ok(*v),
                _ => {
                    let v = self.op(op, hint)?;
                    if let Some(s) = op.slot {
                        self.slots[usize::from(s)] = Some(Bound::Value(v));
                    }
                    Ok(v)
                }
            },
        }
    }

    fn meta(&self, v: Value) -> Result<TensorMeta, String> {
        self.graph.meta(v).cloned().map_err(|e| e.to_string())
    }

    /// The hint for operand `i` of `op`, given the operands built before it.
    fn operand_hint(&self, op: &OpPat, i: usize, out: &Hint, built: &[TensorMeta]) -> Hint {
        let bool_hint = |shape: Option<Vec<u64>>| Hint {
            dtype: Some(DType::Bool),
            shape,
        };
        let like_first = || match built.first() {
            Some(m) => Hint {
                dtype: Some(m.dtype),
                shape: m.shape.as_known().map(|s| s.to_vec()),
            },
            None => out.clone(),
        };
        match op.op.builtin {
            Some(Op::And | Op::Or | Op::Not) => bool_hint(out.shape.clone()),
            // Ops whose operands have another dtype than their result.
            Some(Op::Isnan | Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge | Op::Cast)
                if i == 0 =>
            {
                Hint {
                    dtype: None,
                    shape: out.shape.clone(),
                }
            }
            Some(Op::Where) if i == 0 => bool_hint(out.shape.clone()),
            Some(Op::Where) if i == 2 && built.len() > 1 => Hint {
                dtype: Some(built[1].dtype),
                shape: built[1].shape.as_known().map(|s| s.to_vec()),
            },
            Some(Op::Where) => Hint {
                dtype: None,
                ..out.clone()
            },
            Some(Op::MaskedFill) if i == 1 => {
                bool_hint(built.first().and_then(|m| m.shape.as_known()))
            }
            Some(Op::Matmul) if i == 1 => match built.first().and_then(|m| m.shape.as_known()) {
                Some(a) if !a.is_empty() => {
                    let mut s = a[..a.len().saturating_sub(2)].to_vec();
                    s.push(a[a.len() - 1]);
                    s.push(
                        out.shape
                            .as_ref()
                            .and_then(|o| o.last().copied())
                            .unwrap_or(0),
                    );
                    Hint {
                        dtype: Some(built[0].dtype),
                        shape: Some(s),
                    }
                }
                _ => Hint::default(),
            },
            Some(Op::Matmul) => Hint {
                dtype: out.dtype,
                shape: out.shape.clone().map(|mut s| {
                    if let Some(last) = s.last_mut() {
                        *last = 0;
                    }
                    s
                }),
            },
            _ if op.op.class == OpClass::Elementwise && i > 0 => like_first(),
            _ if op.op.class == OpClass::Elementwise => out.clone(),
            _ if i > 0 => like_first(),
            _ => Hint {
                dtype: out.dtype,
                shape: None,
            },
        }
    }

    fn op(&mut self, op: &'static OpPat, hint: Hint) -> Result<Value, String> {
        let mut operands = Vec::with_capacity(op.operands.len());
        let mut metas = Vec::with_capacity(op.operands.len());
        for (i, &o) in op.operands.iter().enumerate() {
            let mut h = self.operand_hint(op, i, &hint, &metas);
            // A dim of 0 in a hint is "any size": drawn now.
            if let Some(s) = &mut h.shape {
                for d in s.iter_mut().filter(|d| **d == 0) {
                    *d = self.dim();
                }
            }
            let v = self.build(o, h)?;
            metas.push(self.meta(v)?);
            operands.push(v);
        }
        // Operands the op requires but the pattern leaves out (`..`): inputs like the
        // first.
        let required = op
            .op
            .operands
            .iter()
            .filter(|s| s.arity == crate::ops::Arity::Required)
            .count();
        while operands.len() < required {
            let h = self.operand_hint(op, operands.len(), &hint, &metas);
            let v = self.input(None, &h)?;
            metas.push(self.meta(v)?);
            operands.push(v);
        }
        if op.op.commutative && operands.len() == 2 && self.rng.chance(0.5) {
            operands.swap(0, 1);
            metas.swap(0, 1);
        }
        let mut attrs = Vec::with_capacity(op.op.attrs.len());
        for (i, spec) in op.op.attrs.iter().enumerate() {
            let check = op.attrs.iter().find(|c| c.index == i);
            let value = match check {
                Some(c) => self.attr_pat(op, i, &c.pat, &metas)?,
                None => match spec.default.value() {
                    Some(v) => v,
                    None => sample::attr(self.rng, op.op, spec, &metas, &self.seen_sizes),
                },
            };
            attrs.push(value);
        }
        let id = self
            .graph
            .add_node(op.op, operands, attrs, None)
            .map_err(|e| e.to_string())?;
        Ok(Value::new(id, 0))
    }

    /// The value of attribute `index` of `op` that `pat` accepts.
    fn attr_pat(
        &mut self,
        op: &'static OpPat,
        index: usize,
        pat: &AttrPat,
        metas: &[TensorMeta],
    ) -> Result<AttrValue, String> {
        Ok(match pat {
            AttrPat::Int(v) => AttrValue::Int(*v),
            AttrPat::Float(v) => AttrValue::Float(*v),
            AttrPat::Bool(v) => AttrValue::Bool(*v),
            AttrPat::Ints(v) => AttrValue::Ints(v.to_vec()),
            AttrPat::Str(v) => AttrValue::Str(v.to_string()),
            AttrPat::DType(v) => AttrValue::DType(*v),
            AttrPat::Null => AttrValue::Null,
            AttrPat::OneOf(list) => {
                let b = self.rng.below(list.len());
                self.attr_pat(op, index, &list[b], metas)?
            }
            AttrPat::Param(slot) => match self.slots[usize::from(*slot)].clone() {
                Some(b) => bound_attr(b)?,
                None => {
                    let spec = &op.op.attrs[index];
                    let v = sample::attr(self.rng, op.op, spec, metas, &self.seen_sizes);
                    if let Some(b) = attr_bound(&v) {
                        self.slots[usize::from(*slot)] = Some(b);
                    }
                    v
                }
            },
        })
    }
}

/// A bound scalar parameter as an attribute value.
fn bound_attr(b: Bound) -> Result<AttrValue, String> {
    Ok(match b {
        Bound::Int(v) => AttrValue::Int(v),
        Bound::Float(v) => AttrValue::Float(v),
        Bound::Bool(v) => AttrValue::Bool(v),
        Bound::Ints(v) => AttrValue::Ints(v),
        Bound::Str(v) => AttrValue::Str(v),
        Bound::DType(v) => AttrValue::DType(v),
        Bound::Value(_) => return Err("a tensor parameter used as an attribute".into()),
    })
}

/// An attribute value as the binding of a scalar parameter.
fn attr_bound(v: &AttrValue) -> Option<Bound> {
    Some(match v {
        AttrValue::Int(v) => Bound::Int(*v),
        AttrValue::Float(v) => Bound::Float(*v),
        AttrValue::Bool(v) => Bound::Bool(*v),
        AttrValue::Ints(v) => Bound::Ints(v.clone()),
        AttrValue::Str(v) => Bound::Str(v.clone()),
        AttrValue::DType(v) => Bound::DType(*v),
        _ => return None,
    })
}
