//! Building graphs in Rust that read like the model code.
//!
//! A [`Builder`] owns a graph behind a `RefCell`, so its methods take `&self` and calls
//! nest: `g.matmul(q, g.transpose(k, -2, -1)?)?`. A [`Var`] is a value with its builder
//! attached, for method chaining: `q.matmul(k.transpose(-2, -1)?)?.softmax(-1)?`.
//! One method per built-in op is generated from the op table, with the op's operands
//! first and then every attribute in signature order. Scalars may stand for tensor
//! operands (`x.div(8.0)`): they become 0-d constants of the other operand's dtype.
//!
//! ```
//! use graphrw::{Builder, DType, TensorMeta};
//!
//! let g = Builder::new();
//! let q = g.input("q", TensorMeta::new(DType::F32, [1usize, 4, 16, 8]));
//! let k = g.input("k", TensorMeta::new(DType::F32, [1usize, 4, 16, 8]));
//! let v = g.input("v", TensorMeta::new(DType::F32, [1usize, 4, 16, 8]));
//! let out = q.matmul(k.transpose(-2, -1)?)?.div(8f64.sqrt())?.softmax(-1)?.matmul(v)?;
//! g.output(&[out])?;
//! let graph = g.finish();
//! assert_eq!(graph.node_count(), 9);
//! # Ok::<(), graphrw::GraphError>(())
//! ```

use std::cell::RefCell;

use graphrw_kernels::Tensor;
use smallvec::SmallVec;

pub use crate::graph::draft::Builder;
use crate::graph::{normalize_attrs, Graph, NodeId, Value};
use crate::meta::{DType, TensorMeta};
use crate::ops::{AttrValue, Attrs, OpDef};
use crate::GraphError;

/// A tensor operand of a builder method: a value, or a scalar that becomes a 0-d
/// constant of the dtype of the op's first tensor operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A value of the graph.
    Value(Value),
    /// A scalar literal.
    Scalar(f64),
}

impl From<Value> for Arg {
    fn from(v: Value) -> Arg {
        Arg::Value(v)
    }
}

impl From<Var<'_>> for Arg {
    fn from(v: Var<'_>) -> Arg {
        Arg::Value(v.value)
    }
}

impl From<f64> for Arg {
    fn from(v: f64) -> Arg {
        Arg::Scalar(v)
    }
}

impl From<f32> for Arg {
    fn from(v: f32) -> Arg {
        Arg::Scalar(v as f64)
    }
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Scalar(v as f64)
    }
}

impl From<i32> for Arg {
    fn from(v: i32) -> Arg {
        Arg::Scalar(v as f64)
    }
}

/// A new node's operands: inline up to four, as the node keeps them (most built nodes
/// have one to three, so building one allocates no list of them).
type Operands = SmallVec<[Value; 4]>;

/// An operand slot as the generated methods fill it.
#[doc(hidden)]
pub enum Slot {
    One(Arg),
    Opt(Option<Value>),
    Many(Vec<Value>),
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// A builder that adds to an existing graph.
    pub fn from_graph(graph: Graph) -> Builder {
        Builder {
            graph: RefCell::new(graph),
            created: RefCell::default(),
        }
    }

    /// The graph built so far.
    pub fn finish(self) -> Graph {
        self.graph.into_inner()
    }

    /// The graph built so far and the nodes this builder added, in order (what
    /// [`Builder::finish`] and [`Builder::created`] give, without copying the list).
    pub(crate) fn into_parts(self) -> (Graph, Vec<NodeId>) {
        (self.graph.into_inner(), self.created.into_inner())
    }

    /// The nodes this builder added, in order (the rewriter removes them again when a
    /// replacement fails half-way).
    pub fn created(&self) -> Vec<NodeId> {
        self.created.borrow().clone()
    }

    /// Reads the graph being built.
    pub fn with_graph<R>(&self, f: impl FnOnce(&Graph) -> R) -> R {
        f(&self.graph.borrow())
    }

    /// Changes the graph being built.
    pub fn with_graph_mut<R>(&self, f: impl FnOnce(&mut Graph) -> R) -> R {
        f(&mut self.graph.borrow_mut())
    }

    /// `v` with this builder attached, for method chaining.
    pub fn var(&self, v: Value) -> Var<'_> {
        Var {
            builder: self,
            value: v,
        }
    }

    /// Adds a graph input.
    pub fn input(&self, name: &str, meta: TensorMeta) -> Var<'_> {
        let v = self.graph.borrow_mut().add_input(name, meta);
        self.created.borrow_mut().push(v.node);
        self.var(v)
    }

    /// Adds a constant (shared, not copied).
    pub fn constant(&self, value: Tensor) -> Var<'_> {
        let v = self.graph.borrow_mut().add_constant(value);
        self.created.borrow_mut().push(v.node);
        self.var(v)
    }

    /// Adds a 0-d constant of `dtype`.
    pub fn scalar(&self, value: f64, dtype: DType) -> Var<'_> {
        self.constant(Tensor::full(dtype, &[], value))
    }

    /// Sets the graph outputs.
    pub fn output(&self, outputs: &[Var<'_>]) -> Result<(), GraphError> {
        self.graph
            .borrow_mut()
            .set_outputs(outputs.iter().map(|v| v.value).collect())
    }

    /// The metadata of `v`.
    pub fn meta(&self, v: Value) -> Result<TensorMeta, GraphError> {
        self.graph.borrow().meta(v).cloned()
    }

    /// Applies any op (built-in or user-declared) with attributes by name (missing ones
    /// take their defaults); returns every output.
    pub fn apply(
        &self,
        op: &'static OpDef,
        operands: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<Vec<Value>, GraphError> {
        let values = normalize_attrs(op, attrs)?;
        self.push_node(op, SmallVec::from_slice(operands), values)
    }

    fn push_node(
        &self,
        op: &'static OpDef,
        operands: Operands,
        attrs: Vec<AttrValue>,
    ) -> Result<Vec<Value>, GraphError> {
        let id = self.push(op, operands, attrs)?;
        let n = self.graph.borrow().try_node(id)?.outputs().len();
        Ok((0..n as u32).map(|i| Value::new(id, i)).collect())
    }

    /// Adds the node and records it as created; its id (no list of its outputs to
    /// allocate when only the first is wanted).
    fn push(
        &self,
        op: &'static OpDef,
        operands: Operands,
        attrs: Vec<AttrValue>,
    ) -> Result<NodeId, GraphError> {
        let id: NodeId = self
            .graph
            .borrow_mut()
            .add_node_inline(op, operands, attrs)?;
        self.created.borrow_mut().push(id);
        Ok(id)
    }

    fn resolve(&self, op: &'static OpDef, slots: Vec<Slot>) -> Result<Operands, GraphError> {
        // A scalar takes the dtype of the op's first non-bool tensor operand (in
        // `where(cond, x, 0.0)` the scalar is data, like `x`), else of the first one.
        let mut dtype = None;
        for s in &slots {
            let vs: &[Value] = match s {
                Slot::One(Arg::Value(v)) | Slot::Opt(Some(v)) => std::slice::from_ref(v),
                Slot::Many(vs) => vs,
                _ => &[],
            };
            for &v in vs {
                // The dtype alone: no copy of the metadata (its shape) per operand.
                let d = self.graph.borrow().meta(v)?.dtype;
                if d != DType::Bool {
                    dtype = Some(d);
                    break;
                }
                dtype = dtype.or(Some(d));
            }
            if dtype.is_some_and(|d| d != DType::Bool) {
                break;
            }
        }
        let dtype = dtype.unwrap_or(DType::F32);
        let mut operands = Operands::with_capacity(slots.len());
        let mut gap = None;
        for (i, slot) in slots.into_iter().enumerate() {
            match slot {
                Slot::One(Arg::Value(v)) => operands.push(v),
                Slot::One(Arg::Scalar(s)) => operands.push(self.scalar(s, dtype).value),
                Slot::Opt(None) => gap = gap.or(Some(i)),
                Slot::Opt(Some(v)) => {
                    if let Some(g) = gap {
                        return Err(GraphError::Signature {
                            op: op.name,
                            node: None,
                            message: format!(
                                "operand `{}` is given but `{}` before it is not (optional operands fill in order)",
                                op.operands[i].name, op.operands[g].name
                            ),
                        });
                    }
                    operands.push(v)
                }
                Slot::Many(vs) => operands.extend(vs),
            }
        }
        Ok(operands)
    }

    #[doc(hidden)]
    pub fn apply_one(
        &self,
        op: &'static OpDef,
        slots: Vec<Slot>,
        attrs: Vec<AttrValue>,
    ) -> Result<Value, GraphError> {
        let operands = self.resolve(op, slots)?;
        let id = self.push(op, operands, attrs)?;
        // Every op has at least one output (`OpDef::output_count`); checked, not assumed.
        match self.graph.borrow().try_node(id)?.outputs().len() {
            0 => Err(GraphError::NoSuchOutput {
                node: id.index(),
                output: 0,
            }),
            _ => Ok(Value::new(id, 0)),
        }
    }

    #[doc(hidden)]
    pub fn apply_many(
        &self,
        op: &'static OpDef,
        slots: Vec<Slot>,
        attrs: Vec<AttrValue>,
    ) -> Result<Vec<Value>, GraphError> {
        let operands = self.resolve(op, slots)?;
        self.push_node(op, operands, attrs)
    }
}

graphrw_macros::__builtin_op_table!(builder);

/// A value with its builder attached: the handle for method-chained model code.
#[derive(Clone, Copy, Debug)]
pub struct Var<'b> {
    builder: &'b Builder,
    value: Value,
}

impl<'b> Var<'b> {
    /// The value.
    pub fn value(self) -> Value {
        self.value
    }

    /// The builder.
    pub fn builder(self) -> &'b Builder {
        self.builder
    }

    /// The metadata.
    pub fn meta(self) -> Result<TensorMeta, GraphError> {
        self.builder.meta(self.value)
    }
}

impl From<Var<'_>> for Value {
    fn from(v: Var<'_>) -> Value {
        v.value
    }
}

graphrw_macros::__builtin_op_table!(var);

/// Infers the outputs of an op declared `like` its decomposition by building the
/// decomposition on inputs that carry only metadata.
pub(crate) fn infer_like(
    op: &'static OpDef,
    inputs: &[&TensorMeta],
    attrs: &Attrs,
) -> Result<Vec<TensorMeta>, GraphError> {
    let Some(decompose) = op.decompose else {
        return Err(GraphError::Signature {
            op: op.name,
            node: None,
            message: "declared `like` its decomposition but has none".into(),
        });
    };
    // Inference is a function of the op, the inputs' metadata and the attributes, and
    // a big graph asks the same question for every layer (each verify and each fused
    // node the kernel pass builds): the answers are remembered per thread, found by a
    // hash of the question and compared in place (a hit allocates only the answer).
    let op_addr = std::ptr::from_ref(op) as usize;
    let hash = like_hash(op_addr, inputs);
    let same = |e: &LikeEntry| {
        e.op == op_addr
            && e.inputs.len() == inputs.len()
            && e.inputs.iter().zip(inputs).all(|(a, b)| a == *b)
            && e.attrs.len() == attrs.iter().count()
            && e.attrs.iter().zip(attrs.iter()).all(|(a, (_, b))| a == b)
    };
    let known = LIKE_CACHE.with(|c| {
        c.borrow()
            .get(&hash)
            .and_then(|entries| entries.iter().find(|e| same(e)).map(|e| e.out.clone()))
    });
    if let Some(out) = known {
        return Ok(out);
    }
    let b = Builder::new();
    let operands: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, m)| b.input(&format!("arg{i}"), (*m).clone()).value)
        .collect();
    let outs = decompose(&b, &operands, attrs)?;
    let out = outs
        .iter()
        .map(|&v| b.meta(v))
        .collect::<Result<Vec<_>, _>>()?;
    LIKE_CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= LIKE_CACHE_ENTRIES {
            c.clear();
        }
        c.entry(hash).or_default().push(LikeEntry {
            op: op_addr,
            inputs: inputs.iter().map(|m| (*m).clone()).collect(),
            attrs: attrs.iter().map(|(_, v)| v.clone()).collect(),
            out: out.clone(),
        });
    });
    Ok(out)
}

/// The [`LIKE_CACHE`] key of a question: a hash of the op's address and the inputs'
/// metadata (the attributes are compared in the entries).
fn like_hash(op: usize, inputs: &[&TensorMeta]) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = foldhash::fast::FixedState::default().build_hasher();
    op.hash(&mut h);
    inputs.len().hash(&mut h);
    for m in inputs {
        m.hash(&mut h);
    }
    h.finish()
}

/// One remembered [`infer_like`] answer: the question asked (op address, input
/// metadata, attribute values) and the outputs inferred.
struct LikeEntry {
    op: usize,
    inputs: Vec<TensorMeta>,
    attrs: Vec<AttrValue>,
    out: Vec<TensorMeta>,
}

/// Remembered [`infer_like`] answers, by [`like_hash`] of their question.
type LikeCache = foldhash::HashMap<u64, Vec<LikeEntry>>;

/// How many (op, metadata) keys [`LIKE_CACHE`] holds before it starts over.
const LIKE_CACHE_ENTRIES: usize = 4096;

thread_local! {
    static LIKE_CACHE: std::cell::RefCell<LikeCache> = std::cell::RefCell::default();
}

/// A value an attribute can take in [`Call::attr`]: numbers, bools, strings, int
/// lists, dtypes, or an [`AttrValue`] itself.
pub trait IntoAttr {
    /// The attribute value.
    fn into_attr(self) -> AttrValue;
}

impl IntoAttr for AttrValue {
    fn into_attr(self) -> AttrValue {
        self
    }
}

impl IntoAttr for f64 {
    fn into_attr(self) -> AttrValue {
        AttrValue::Float(self)
    }
}

impl IntoAttr for f32 {
    fn into_attr(self) -> AttrValue {
        AttrValue::Float(f64::from(self))
    }
}

impl IntoAttr for i64 {
    fn into_attr(self) -> AttrValue {
        AttrValue::Int(self)
    }
}

impl IntoAttr for i32 {
    fn into_attr(self) -> AttrValue {
        AttrValue::Int(i64::from(self))
    }
}

impl IntoAttr for bool {
    fn into_attr(self) -> AttrValue {
        AttrValue::Bool(self)
    }
}

impl IntoAttr for &str {
    fn into_attr(self) -> AttrValue {
        AttrValue::Str(self.to_string())
    }
}

impl IntoAttr for String {
    fn into_attr(self) -> AttrValue {
        AttrValue::Str(self)
    }
}

impl IntoAttr for &[i64] {
    fn into_attr(self) -> AttrValue {
        AttrValue::Ints(self.to_vec())
    }
}

impl IntoAttr for Vec<i64> {
    fn into_attr(self) -> AttrValue {
        AttrValue::Ints(self)
    }
}

impl IntoAttr for DType {
    fn into_attr(self) -> AttrValue {
        AttrValue::DType(self)
    }
}

/// A call of any op (built-in, user-declared or fused) built argument by argument:
/// operands in order, attributes by name, the rest at their defaults.
///
/// ```
/// use graphrw::{Builder, DType, TensorMeta};
/// use graphrw::ops::builtin;
///
/// let b = Builder::new();
/// let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 3]));
/// // `approximate` keeps its default, "none".
/// let y = b.call(&builtin::GELU).arg(x).build()?;
/// let z = b.call(&builtin::DROPOUT).arg(y).attr("p", 0.1).build()?;
/// b.output(&[z])?;
/// let text = b.finish().to_string();
/// assert!(text.contains("gelu(x, approximate=") && text.contains("dropout(t0, p=0.1"), "{text}");
/// # Ok::<(), graphrw::GraphError>(())
/// ```
#[must_use = "a call adds nothing until `build`"]
pub struct Call<'b> {
    builder: &'b Builder,
    op: &'static OpDef,
    args: Vec<Slot>,
    attrs: Vec<(String, AttrValue)>,
}

impl Builder {
    /// Starts a call of `op` ([`Call`]): the typed form of [`Builder::apply`].
    pub fn call(&self, op: &'static OpDef) -> Call<'_> {
        Call {
            builder: self,
            op,
            args: Vec::new(),
            attrs: Vec::new(),
        }
    }
}

impl<'b> Call<'b> {
    /// The next operand: a value, or a number made a scalar constant of the call's
    /// dtype.
    pub fn arg(mut self, x: impl Into<Arg>) -> Call<'b> {
        self.args.push(Slot::One(x.into()));
        self
    }

    /// Several operands at once (a variadic operand's values, say), in order.
    pub fn args<A: Into<Arg>>(mut self, xs: impl IntoIterator<Item = A>) -> Call<'b> {
        self.args
            .extend(xs.into_iter().map(|x| Slot::One(x.into())));
        self
    }

    /// Attribute `name`; an attribute not given takes the op's default.
    pub fn attr(mut self, name: &str, value: impl IntoAttr) -> Call<'b> {
        self.attrs.push((name.to_string(), value.into_attr()));
        self
    }

    /// Adds the node; its first output. An error names the op and what does not fit
    /// (an unknown attribute, a wrong kind, a wrong operand count, inference).
    pub fn build(self) -> Result<Var<'b>, GraphError> {
        let op = self.op.name;
        self.build_all()?
            .into_iter()
            .next()
            .ok_or_else(|| GraphError::Signature {
                op,
                node: None,
                message: "made no output".into(),
            })
    }

    /// Adds the node; every output.
    pub fn build_all(self) -> Result<Vec<Var<'b>>, GraphError> {
        let attrs: Vec<(&str, AttrValue)> = self
            .attrs
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        let values = normalize_attrs(self.op, &attrs)?;
        let b = self.builder;
        let outs = b.apply_many(self.op, self.args, values)?;
        Ok(outs.into_iter().map(|v| b.var(v)).collect())
    }
}
