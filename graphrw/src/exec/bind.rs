//! Symbol binding at run time: one plan runs at every shape.
//!
//! A graph with symbolic dims (`batch`, `seq`, `past + seq`) is planned once. When it
//! runs, the symbols are bound from the inputs' shapes ([`Bindings::bind_shape`]); a
//! symbol that only a data-dependent op can size (`NonZero`, a reshape no expression
//! can say) is bound from that op's result the first time it appears. Before a node
//! whose metadata or attributes read symbols runs, its view is made concrete
//! ([`BoundNode`]): `reshape(x, [batch, seq, 12, 64])` reaches the kernel as
//! `reshape(x, [3, 11, 12, 64])`. Kernels never see a symbol.
//!
//! The bound views of one run are kept for the next ([`BoundCache`]): a run whose inputs
//! bind every symbol to the same values as the last run's reuses them, so a model with
//! dynamic axes run at one shape again and again binds nothing after its first run.
//! A model whose symbols are sized by data (`NonZero`) binds every run afresh.

use smallvec::SmallVec;

use crate::assume::Assumption;
use crate::meta::{Dim, Shape, Symbol, TensorMeta};
use crate::ops::AttrValue;

use super::executor::NodeView;

/// The values of the symbols for one run: a short list (models have a few symbols),
/// searched by pointer first (the graph shares each symbol's name), which is cheaper
/// than hashing for every dim of every symbolic node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bindings {
    values: Vec<(Symbol, i64)>,
}

impl Bindings {
    /// How many symbols are bound.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// True when both bind the same symbols, in the same order, to the same values.
    pub(crate) fn same_as(&self, other: &Bindings) -> bool {
        self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .zip(&other.values)
                .all(|((a, x), (b, y))| x == y && (a.as_ptr() == b.as_ptr() || a == b))
    }

    /// The value of `name`, when bound.
    pub(crate) fn get(&self, name: &str) -> Option<i64> {
        let ptr = name.as_ptr();
        self.values
            .iter()
            .find(|(k, _)| k.as_ptr() == ptr)
            .or_else(|| self.values.iter().find(|(k, _)| &***k == name))
            .map(|(_, v)| *v)
    }

    /// Binds the plain symbols of `meta` from the tensor shape `actual` and checks every
    /// dim that can be evaluated. `what` names the value in errors.
    pub(crate) fn bind_shape(
        &mut self,
        meta: &TensorMeta,
        actual: &[usize],
        what: &dyn Fn() -> String,
    ) -> Result<(), String> {
        let known_ok = meta
            .shape
            .dims()
            .iter()
            .zip(actual)
            .all(|(d, &n)| d.known().is_none_or(|k| k as usize == n));
        if actual.len() != meta.rank() || !known_ok {
            return Err(format!("{}, got shape {actual:?}", what()));
        }
        // Plain symbols first, so that expressions over them can be checked after.
        for (d, &n) in meta.shape.dims().iter().zip(actual) {
            if let Dim::Sym(s) = d {
                let n = n as i64;
                match self.get(s) {
                    Some(prev) if prev != n => {
                        return Err(format!(
                            "{}: symbol `{s}` is {n} here but was bound to {prev} earlier",
                            what()
                        ));
                    }
                    Some(_) => {}
                    None => self.values.push((s.clone(), n)),
                }
            }
        }
        for (i, (d, &n)) in meta.shape.dims().iter().zip(actual).enumerate() {
            match d.eval(&|s| self.get(s)) {
                Ok(want) if want as usize != n => {
                    return Err(format!("{}: dim {i} is {n}, but {d} = {want}", what()));
                }
                // An expression over a symbol no value has bound yet is checked later,
                // by the node that reads it.
                _ => {}
            }
        }
        Ok(())
    }

    /// Binds each symbol an assumption eliminated (see [`crate::assume`]) that is still
    /// unbound to the value of what it stands for: a node may still read it (an
    /// attribute an importer computed before the assumption was made).
    pub(crate) fn bind_assumed(&mut self, assumptions: &[Assumption]) {
        for a in assumptions {
            if self.get(&a.symbol).is_none() {
                if let Ok(v) = a.value.eval(&|s| self.get(s)) {
                    self.values.push((a.symbol.clone(), v));
                }
            }
        }
    }

    /// `meta` with every dim that evaluates made known.
    pub(crate) fn meta(&self, meta: &TensorMeta) -> TensorMeta {
        if !meta.shape.is_symbolic() {
            return meta.clone();
        }
        let dims = meta
            .shape
            .dims()
            .iter()
            .map(|d| match d.eval(&|s| self.get(s)) {
                Ok(n) => Dim::Known(n),
                Err(_) => d.clone(),
            })
            .collect();
        TensorMeta {
            dtype: meta.dtype,
            shape: Shape(dims),
            device: meta.device,
        }
    }
}

/// True when running `view` needs a binding: a symbolic attribute, or a symbolic dim in
/// the metadata of an operand or output.
pub(crate) fn needs_binding(view: &NodeView<'_>) -> bool {
    view.attrs.iter().any(|(_, v)| v.is_symbolic())
        || view.inputs.iter().any(|m| m.shape.is_symbolic())
        || view.outputs.iter().any(|m| m.shape.is_symbolic())
}

/// A node's attributes and metadata with the symbols of one run bound: what the kernel
/// is shown in place of the symbolic node.
#[derive(Debug)]
pub(crate) struct BoundNode {
    /// The bound attributes; `None` where none is symbolic (the node's own are shown).
    attrs: Option<Box<[AttrValue]>>,
    inputs: Vec<TensorMeta>,
    outputs: Vec<TensorMeta>,
}

/// The bound views of the symbolic steps of one run, kept for the next run whose inputs
/// bind the same values (`nodes` is indexed by step; `None` for steps that read no
/// symbol).
#[derive(Debug)]
pub(crate) struct BoundCache {
    pub(crate) key: Bindings,
    pub(crate) nodes: Vec<Option<BoundNode>>,
}

impl BoundNode {
    /// Binds `view`'s attributes and metadata; an attribute that reads an unbound
    /// symbol or overflows is an error naming it.
    pub(crate) fn new(view: &NodeView<'_>, b: &Bindings) -> Result<BoundNode, String> {
        let specs = view.op.attrs;
        let attrs = match view.attrs.iter().any(|(_, v)| v.is_symbolic()) {
            false => None,
            true => Some(
                view.attrs
                    .iter()
                    .zip(specs)
                    .map(|((name, v), spec)| {
                        v.bind(spec.kind, &|s| b.get(s))
                            .map_err(|e| format!("attribute `{name}` = {v}: {e}"))
                    })
                    .collect::<Result<Box<[_]>, _>>()?,
            ),
        };
        let outputs: Vec<TensorMeta> = view.outputs.iter().map(|m| b.meta(m)).collect();
        // A size computed from symbols is checked against the run budget before any
        // kernel allocates it (a `full([seq, seq])` at a huge `seq`).
        for m in &outputs {
            let dims: Option<SmallVec<[usize; 8]>> = m
                .shape
                .dims()
                .iter()
                .map(|d| d.known().map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
                .collect();
            if let Some(dims) = dims {
                graphrw_kernels::budget::check_alloc(view.op.name, &dims, m.dtype)
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(BoundNode {
            attrs,
            inputs: view.inputs.iter().map(|m| b.meta(m)).collect(),
            outputs,
        })
    }

    /// The bound metadata of the outputs (every dim known).
    pub(crate) fn outputs(&self) -> &[TensorMeta] {
        &self.outputs
    }

    /// The view a kernel sees.
    pub(crate) fn view<'v>(&'v self, of: &NodeView<'v>) -> NodeView<'v> {
        NodeView {
            op: of.op,
            attrs: crate::ops::Attrs::new(
                of.op.attrs,
                self.attrs.as_deref().unwrap_or(of.attrs.values()),
            ),
            inputs: self.inputs.iter().collect(),
            outputs: &self.outputs,
            name: of.name,
        }
    }
}

/// A run's inputs that break an assumption: the input that reads the eliminated symbol
/// (empty when none does) and one line naming the dims, their values and the node that
/// made the assumption.
#[derive(Debug)]
pub(crate) struct Broken {
    pub(crate) input: String,
    pub(crate) message: String,
}

/// Checks a run's inputs (`(name, metadata, shape)`) against the graph's assumptions
/// before they are bound: each input's dims are read as they were before the
/// assumptions were substituted into them, so that the two symbols an assumption made
/// one are bound apart and compared. A symbol no input binds (sized by data) is left to
/// the checks of the nodes that make it.
pub(crate) fn check_assumptions(
    inputs: &[(&str, &TensorMeta, &[usize])],
    assumptions: &[Assumption],
) -> Result<(), Broken> {
    if assumptions.is_empty() {
        return Ok(());
    }
    let restored: Vec<TensorMeta> = inputs
        .iter()
        .map(|&(name, meta, _)| {
            let mut m = meta.clone();
            let mut done = vec![false; m.rank()];
            for site in assumptions.iter().flat_map(|a| &a.sites) {
                if site.input == name && site.axis < m.rank() && !done[site.axis] {
                    m.shape.0[site.axis] = site.dim.clone();
                    done[site.axis] = true;
                }
            }
            m
        })
        .collect();
    let mut b = Bindings::default();
    for (m, &(_, _, shape)) in restored.iter().zip(inputs) {
        // A shape that does not fit is reported by the usual binding after this.
        let _ = b.bind_shape(m, shape, &String::new);
    }
    // Where an input dim is exactly the symbol `s`: `(input, axis)`.
    let origin = |s: &Symbol| {
        restored.iter().zip(inputs).find_map(|(m, &(name, _, _))| {
            let axis = m
                .shape
                .dims()
                .iter()
                .position(|d| matches!(d, Dim::Sym(x) if x == s))?;
            Some((name.to_string(), axis))
        })
    };
    for a in assumptions {
        let (Some(left), Ok(right)) = (b.get(&a.symbol), a.value.eval(&|s| b.get(s))) else {
            continue;
        };
        if left == right {
            continue;
        }
        let (input, lhs) = match origin(&a.symbol) {
            Some((n, i)) => (n, format!("dim {i} is {left} ({})", a.symbol)),
            None => (String::new(), format!("{} is {left}", a.symbol)),
        };
        let rhs = match a.value.as_sym().and_then(origin) {
            Some((n, i)) => format!("input `{n}` dim {i} is {right} ({})", a.value),
            None => format!("{} is {right}", a.value),
        };
        let message = format!(
            "{lhs}, but {rhs}: {} assumed {} = {} (comparing {} with {})",
            a.origin(),
            a.symbol,
            a.value,
            a.dims.0,
            a.dims.1
        );
        return Err(Broken { input, message });
    }
    Ok(())
}
