//! What a match binds: [`Bindings`], slot by slot (a match of a whole pattern, with
//! its pattern, is a [`Match`](super::Match)).

use crate::meta::{Dim, TensorMeta};
use crate::ops::Op;
use crate::{DType, Graph, Node, Value};

/// Index of a binding slot. Slots `0..params.len()` are the pattern's parameters, in
/// declaration order; the next slots hold the value of each op node of the pattern.
pub type Slot = u16;

/// A bound value.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    /// A value of the graph (tensor parameters and op nodes).
    Value(Value),
    /// An int.
    Int(i64),
    /// A float.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// An int list.
    Ints(Vec<i64>),
    /// A string.
    Str(String),
    /// A dtype.
    DType(DType),
}

/// The slots of a pattern as matching fills them.
#[derive(Debug, Default, PartialEq)]
pub struct Bindings {
    slots: Vec<Option<Bound>>,
}

impl Clone for Bindings {
    fn clone(&self) -> Bindings {
        Bindings {
            slots: self.slots.clone(),
        }
    }

    /// Reuses this one's slot list (the rewriter copies every match it finds into the
    /// same [`Match`](crate::pattern::Match)).
    fn clone_from(&mut self, source: &Bindings) {
        self.slots.clone_from(&source.slots);
    }
}

impl Bindings {
    /// `n` unbound slots.
    pub fn new(n: usize) -> Bindings {
        Bindings {
            slots: vec![None; n],
        }
    }

    /// `n` unbound slots, reusing this one's memory.
    pub fn reset(&mut self, n: usize) {
        self.slots.clear();
        self.slots.resize(n, None);
    }

    /// `n` slots when every slot is unbound already (the matcher's reuse between
    /// candidates): only the length changes.
    pub(crate) fn resize_unbound(&mut self, n: usize) {
        debug_assert!(self.slots.iter().all(Option::is_none));
        self.slots.resize(n, None);
    }

    /// Slot `slot`, if bound.
    pub fn get(&self, slot: Slot) -> Option<&Bound> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// True when `slot` is bound.
    pub fn is_bound(&self, slot: Slot) -> bool {
        self.get(slot).is_some()
    }

    /// Binds `slot` (the matcher's job; overwrites).
    pub fn set(&mut self, slot: Slot, value: Bound) {
        self.slots[slot as usize] = Some(value);
    }

    /// Unbinds `slot`.
    pub fn clear(&mut self, slot: Slot) {
        self.slots[slot as usize] = None;
    }

    /// Unbinds `slot`, returning what it held.
    pub(crate) fn take(&mut self, slot: Slot) -> Option<Bound> {
        self.slots.get_mut(slot as usize).and_then(Option::take)
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when there are no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The value bound to `slot`. Panics when it is not a bound value (generated code
    /// only asks for slots the pattern guarantees).
    pub fn value(&self, slot: Slot) -> Value {
        match self.get(slot) {
            Some(Bound::Value(v)) => *v,
            other => panic!("slot {slot} is not a bound value: {other:?}"),
        }
    }

    /// The float bound to `slot` (panics otherwise).
    pub fn float(&self, slot: Slot) -> f64 {
        match self.get(slot) {
            Some(Bound::Float(v)) => *v,
            other => panic!("slot {slot} is not a bound float: {other:?}"),
        }
    }

    /// The int bound to `slot` (panics otherwise).
    pub fn int(&self, slot: Slot) -> i64 {
        match self.get(slot) {
            Some(Bound::Int(v)) => *v,
            other => panic!("slot {slot} is not a bound int: {other:?}"),
        }
    }

    /// The bool bound to `slot` (panics otherwise).
    pub fn bool(&self, slot: Slot) -> bool {
        match self.get(slot) {
            Some(Bound::Bool(v)) => *v,
            other => panic!("slot {slot} is not a bound bool: {other:?}"),
        }
    }

    /// The int list bound to `slot` (panics otherwise).
    pub fn ints(&self, slot: Slot) -> Vec<i64> {
        self.ints_ref(slot).to_vec()
    }

    /// The int list bound to `slot`, borrowed (panics when it is not one): what
    /// `check(|..| ..)` closures receive for int-list parameters.
    pub fn ints_ref(&self, slot: Slot) -> &[i64] {
        match self.get(slot) {
            Some(Bound::Ints(v)) => v,
            other => panic!("slot {slot} is not a bound int list: {other:?}"),
        }
    }

    /// The string bound to `slot` (panics otherwise).
    pub fn string(&self, slot: Slot) -> String {
        match self.get(slot) {
            Some(Bound::Str(v)) => v.clone(),
            other => panic!("slot {slot} is not a bound string: {other:?}"),
        }
    }

    /// The dtype bound to `slot` (panics otherwise).
    pub fn dtype(&self, slot: Slot) -> DType {
        match self.get(slot) {
            Some(Bound::DType(v)) => *v,
            other => panic!("slot {slot} is not a bound dtype: {other:?}"),
        }
    }

    /// The value bound to `slot` with its graph, for predicates.
    pub fn tensor<'g>(&self, graph: &'g Graph, slot: Slot) -> TensorRef<'g> {
        TensorRef {
            graph,
            value: self.value(slot),
        }
    }
}

/// A bound value with its graph: what `check(|x, ..| ..)` predicates receive for tensor
/// bindings.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'g> {
    /// The graph.
    pub graph: &'g Graph,
    /// The value.
    pub value: Value,
}

impl<'g> TensorRef<'g> {
    /// The value's metadata.
    pub fn meta(&self) -> &'g TensorMeta {
        self.graph
            .meta(self.value)
            .expect("a bound value exists in its graph")
    }

    /// The producing node.
    pub fn node(&self) -> &'g Node {
        self.graph
            .node(self.value.node)
            .expect("a bound value exists in its graph")
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.meta().shape.rank()
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.meta().dtype
    }

    /// Dim `i` (negative counts from the end).
    pub fn dim(&self, i: i64) -> Option<&'g Dim> {
        let shape = &self.meta().shape;
        shape.axis(i).map(|a| &shape.dims()[a])
    }

    /// The pattern language's `users(x)`: the value's uses
    /// ([`Graph::use_count`](crate::Graph::use_count)), plus one if it is a graph output.
    pub fn users(&self) -> usize {
        self.graph.use_count(self.value) + usize::from(self.graph.is_output(self.value))
    }

    /// The number a constant node holds, when the value is a one-element constant.
    pub fn scalar(&self) -> Option<f64> {
        constant_scalar(self.graph, self.value)
    }
}

/// The number a one-element `constant` node holds.
pub fn constant_scalar(graph: &Graph, v: Value) -> Option<f64> {
    let node = graph.node(v.node)?;
    if !node.op().is(Op::Constant) || v.output != 0 {
        return None;
    }
    let t = node.payload()?;
    t.scalar_f64()
}
