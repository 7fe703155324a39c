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
//! The bound views of one run are kept for the next ([`BoundCache`]). Each view records
//! the symbols it read and the values they had, and a later run reuses it wherever
//! those symbols still have those values: a model run at one shape again and again binds
//! nothing after its first run, and a decoder step whose cache grew by one rebinds only
//! the nodes that read the cache length (the attention, the cache's `concat`), not the
//! projections and norms that read the batch and the new tokens alone. A model whose
//! symbols are sized by data (`NonZero`) binds every run afresh.

use std::cell::RefCell;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::assume::{Assumption, Requirement};
use crate::graph::Graph;
use crate::meta::{Dim, EvalError, Shape, Symbol, TensorMeta};
use crate::ops::AttrValue;

use super::executor::NodeView;
use super::value::RunValue;
use super::ExecError;

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
}

/// `meta` with every dim that evaluates in `env` made known.
fn bind_meta(meta: &TensorMeta, env: &dyn Fn(&str) -> Option<i64>) -> TensorMeta {
    if !meta.shape.is_symbolic() {
        return meta.clone();
    }
    let dims = meta
        .shape
        .dims()
        .iter()
        .map(|d| match d.eval(env) {
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

/// The symbols a bound view read, each once, with the value each had (`None`: not
/// bound then).
type Reads = SmallVec<[(Box<str>, Option<i64>); 4]>;

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
    /// What binding it read: it holds for any run where these symbols have these values.
    reads: Reads,
}

/// The bound views of the symbolic steps of the last run, each reused by a later run
/// where the symbols it read have the same values ([`BoundNode::holds_for`]). `nodes`
/// is indexed by step; `None` for steps that read no symbol.
#[derive(Debug)]
pub(crate) struct BoundCache {
    pub(crate) nodes: Vec<Option<Arc<BoundNode>>>,
}

impl BoundNode {
    /// Binds `view`'s attributes and metadata; an attribute that reads an unbound
    /// symbol or overflows is an error naming it.
    pub(crate) fn new(view: &NodeView<'_>, b: &Bindings) -> Result<BoundNode, String> {
        let reads = RefCell::new(Reads::new());
        // Every lookup recorded, so that the view can tell which runs it holds for.
        let env = |s: &str| {
            let v = b.get(s);
            let mut r = reads.borrow_mut();
            if !r.iter().any(|(k, _)| &**k == s) {
                r.push((s.into(), v));
            }
            v
        };
        let specs = view.op.attrs;
        let attrs = match view.attrs.iter().any(|(_, v)| v.is_symbolic()) {
            false => None,
            true => Some(
                view.attrs
                    .iter()
                    .zip(specs)
                    .map(|((name, v), spec)| {
                        v.bind(spec.kind, &env)
                            .map_err(|e| format!("attribute `{name}` = {v}: {e}"))
                    })
                    .collect::<Result<Box<[_]>, _>>()?,
            ),
        };
        // Sizes that do not broadcast (`broadcast(k, m)` at k = 3, m = 5) are an error
        // naming the dim, before any kernel sees a shape (read through `env`: a view
        // reused at the same values broadcasts the same).
        for m in view.inputs.iter().copied().chain(view.outputs.iter()) {
            for (i, d) in m.shape.dims().iter().enumerate() {
                if let Err(e @ EvalError::Broadcast(_)) = d.eval(&env) {
                    return Err(format!("dim {i} of {m}, {d}: {e}"));
                }
            }
        }
        let outputs: Vec<TensorMeta> = view.outputs.iter().map(|m| bind_meta(m, &env)).collect();
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
        let inputs = view.inputs.iter().map(|m| bind_meta(m, &env)).collect();
        Ok(BoundNode {
            attrs,
            inputs,
            outputs,
            reads: reads.into_inner(),
        })
    }

    /// True when `b` gives every symbol this view read the value it had then: the view
    /// is then exactly what binding the node afresh would make.
    pub(crate) fn holds_for(&self, b: &Bindings) -> bool {
        self.reads.iter().all(|(s, v)| b.get(s) == *v)
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

/// Checks the inputs against the graph's and binds the symbols of their shapes.
pub(crate) fn check_inputs(g: &Graph, inputs: &[RunValue]) -> Result<Bindings, ExecError> {
    if inputs.len() != g.inputs().len() {
        return Err(ExecError::Input {
            input: String::new(),
            message: format!(
                "the graph takes {} inputs, {} given",
                g.inputs().len(),
                inputs.len()
            ),
        });
    }
    if !g.assumptions().is_empty() {
        let mut seen = Vec::with_capacity(inputs.len());
        for (&id, t) in g.inputs().iter().zip(inputs) {
            let node = g.try_node(id)?;
            seen.push((node.name().unwrap_or("?"), &node.outputs()[0], t.shape()));
        }
        check_assumptions(&seen, g.assumptions()).map_err(|b| ExecError::Input {
            input: b.input,
            message: b.message,
        })?;
    }
    let mut bindings = Bindings::default();
    for (&id, t) in g.inputs().iter().zip(inputs) {
        let node = g.try_node(id)?;
        let name = node.name().unwrap_or("?").to_string();
        let meta: &TensorMeta = &node.outputs()[0];
        let bad = |message: String| ExecError::Input {
            input: name.clone(),
            message,
        };
        if t.dtype() != meta.dtype {
            return Err(bad(format!(
                "expected {}, got a {} tensor",
                meta,
                t.dtype()
            )));
        }
        bindings
            .bind_shape(meta, t.shape(), &|| format!("expected {meta}"))
            .map_err(bad)?;
    }
    // An input's dim written over symbols a later input binds (`past + 1` before
    // `past`) is checked now that every input is bound.
    for (&id, t) in g.inputs().iter().zip(inputs) {
        let node = g.try_node(id)?;
        let meta: &TensorMeta = &node.outputs()[0];
        if meta.shape.dims().iter().any(|d| matches!(d, Dim::Expr(_))) {
            bindings
                .bind_shape(meta, t.shape(), &|| format!("expected {meta}"))
                .map_err(|message| ExecError::Input {
                    input: node.name().unwrap_or("?").to_string(),
                    message,
                })?;
        }
    }
    check_bounds(g, &bindings)?;
    bindings.bind_assumed(g.assumptions());
    check_requirements(&bindings, g.requirements()).map_err(|message| ExecError::Input {
        input: String::new(),
        message,
    })?;
    Ok(bindings)
}

/// Checks the inputs' symbols against the graph's bounds ([`Graph::bounds`]): a run
/// that binds `seq` to 0 where `seq >= 1` was assumed fails in one line naming the
/// input, the dim, the symbol and the bound.
fn check_bounds(g: &Graph, b: &Bindings) -> Result<(), ExecError> {
    for (s, lower) in g.bounds().iter() {
        let Some(v) = b.get(s).filter(|v| *v < lower) else {
            continue;
        };
        let site = g.inputs().iter().find_map(|&id| {
            let node = g.node(id)?;
            let axis = node
                .outputs()
                .first()?
                .shape
                .dims()
                .iter()
                .position(|d| matches!(d, Dim::Sym(x) if x == s))?;
            Some((node.name().unwrap_or("?").to_string(), axis))
        });
        let (input, at) = match site {
            Some((name, axis)) => (name, format!("dim {axis} is {v} ({s})")),
            None => (String::new(), format!("{s} is {v}")),
        };
        return Err(ExecError::Input {
            input,
            message: format!("{at}, but the graph assumes {s} >= {lower}"),
        });
    }
    Ok(())
}

/// Checks the broadcasts inference needed equal to a member (see [`crate::assume`])
/// once the inputs are bound: each side that the inputs bind is evaluated, and a run
/// where they differ, or where the sizes do not broadcast at all, fails in one line
/// naming the dims, their values and the node that required it. A side over a symbol
/// no input binds (sized by data) is left to the nodes that read it.
pub(crate) fn check_requirements(b: &Bindings, required: &[Requirement]) -> Result<(), String> {
    for r in required {
        let (x, y) = (&r.dims.0, &r.dims.1);
        let at = |d: &Dim| d.eval(&|s| b.get(s));
        let (vx, vy) = match (at(x), at(y)) {
            (Err(e @ EvalError::Broadcast(_)), _) | (_, Err(e @ EvalError::Broadcast(_))) => {
                return Err(format!("{x}: {e}; required: {r}"));
            }
            (Ok(vx), Ok(vy)) => (vx, vy),
            _ => continue,
        };
        if vx != vy {
            let origin = r.origin();
            return Err(format!(
                "{x} is {vx} and {y} is {vy}, but {origin} needs them equal (the sizes \
                 broadcast there must be 1 or {y})"
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use crate::exec::interpreter::tests::ramp;
    use crate::exec::{default_stack, plan, reference_stack};
    use crate::{Builder, DType, Shape, Tensor, TensorMeta};

    /// `[n, 4] -> reshape [-1, 6]`: the -1 is `n*4/6`, which no expression says exactly, so
    /// it is a fresh symbol that the reshape's result binds (a data-dependent size);
    /// then `x * 2` over `[n, 4]` and a `full([n, 4])` whose size attribute is symbolic.
    fn symbolic_graph() -> crate::Graph {
        use crate::meta::{Dim, SymExpr};
        use crate::ops::{lookup, AttrValue};
        let b = Builder::new();
        let x = b
            .input(
                "x",
                TensorMeta::new(DType::F32, Shape::from(vec![Dim::sym("n"), Dim::Known(4)])),
            )
            .value();
        let op = |name: &str| lookup(name).expect("built-in op");
        let two = b.constant(Tensor::scalar(2.0f32)).value();
        let doubled = b.apply(op("mul"), &[x, two], &[]).expect("mul")[0];
        let size = AttrValue::Dims(vec![SymExpr::sym("n"), SymExpr::int(4)]);
        let ones = b
            .apply(
                op("full"),
                &[],
                &[("size", size), ("value", AttrValue::Float(1.0))],
            )
            .expect("full")[0];
        let y = b.apply(op("add"), &[doubled, ones], &[]).expect("add")[0];
        let r = b
            .apply(
                op("reshape"),
                &[x],
                &[("shape", AttrValue::Ints(vec![-1, 6]))],
            )
            .expect("reshape")[0];
        b.output(&[b.var(y), b.var(r)]).expect("output");
        b.finish()
    }

    /// A plan reuses the last run's bound views only for inputs that bind the same
    /// values, and a graph with a size that data decides binds every run afresh: every
    /// run, at shapes alternating and repeating, matches a plan made for that run alone.
    #[test]
    fn bound_views_are_reused_only_for_the_same_binding() {
        let g = symbolic_graph();
        let p = plan(&g, &default_stack()).expect("plan");
        for n in [3usize, 3, 6, 3, 9, 9] {
            let x = ramp(&[n, 4], 0.5);
            let (got, _) = p.run(std::slice::from_ref(&x)).expect("run");
            let fresh = plan(&g, &reference_stack()).expect("plan");
            let (want, _) = fresh.run(std::slice::from_ref(&x)).expect("run");
            assert_eq!(got[0].shape(), &[n, 4]);
            assert_eq!(got[1].shape(), &[n * 4 / 6, 6]);
            let tol = graphrw_kernels::testing::compare::Tol::new(1e-6, 1e-6);
            graphrw_kernels::testing::compare::assert_close_tensors(
                &got,
                &want,
                tol,
                &format!("n = {n}"),
            );
        }
        // Without the data-dependent reshape the views are cached; a run at another
        // shape after a cached one still binds the new values.
        let b = Builder::new();
        let x = b.input(
            "x",
            TensorMeta::new(
                DType::F32,
                Shape::from(vec![crate::meta::Dim::sym("n"), crate::meta::Dim::Known(4)]),
            ),
        );
        let y = x.softmax(-1).expect("softmax");
        b.output(&[y]).expect("output");
        let g = b.finish();
        let p = plan(&g, &default_stack()).expect("plan");
        let reference = plan(&g, &reference_stack()).expect("plan");
        for n in [2usize, 2, 5, 2] {
            let x = [ramp(&[n, 4], 0.1)];
            let (got, _) = p.run(&x).expect("run");
            let (want, _) = reference.run(&x).expect("run");
            assert_eq!(got[0].shape(), &[n, 4], "n = {n}");
            let tol = graphrw_kernels::testing::compare::Tol::new(1e-6, 1e-6);
            graphrw_kernels::testing::compare::assert_close_tensors(
                &got,
                &want,
                tol,
                &format!("n = {n}"),
            );
        }
    }

    /// A view is bound afresh only where a symbol it reads changed: with `x: [n, 4]` and
    /// `y: [m, 4]`, each through a softmax, a run that changes `m` alone rebinds `y`'s
    /// softmax and reuses `x`'s (as a decoder step whose cache grew rebinds only what
    /// reads the cache length), a run at the last run's sizes binds nothing, and every
    /// run's results match the reference executor's.
    #[test]
    fn only_views_that_read_a_changed_symbol_are_bound_again() {
        use crate::meta::Dim;
        let b = Builder::new();
        let meta =
            |s: &str| TensorMeta::new(DType::F32, Shape::from(vec![Dim::sym(s), Dim::Known(4)]));
        let x = b.input("x", meta("n"));
        let y = b.input("y", meta("m"));
        let (sx, sy) = (
            x.softmax(-1).expect("softmax"),
            y.softmax(-1).expect("softmax"),
        );
        b.output(&[sx, sy]).expect("output");
        let g = b.finish();
        let p = plan(&g, &default_stack()).expect("plan");
        let reference = plan(&g, &reference_stack()).expect("plan");
        let mut bound = Vec::new();
        for (n, m) in [(2usize, 3usize), (2, 3), (2, 5), (4, 5), (4, 5), (2, 3)] {
            let inputs = [ramp(&[n, 4], 0.1), ramp(&[m, 4], 0.2)];
            let (got, report) = p.run(&inputs).expect("run");
            let (want, _) = reference.run(&inputs).expect("run");
            let tol = graphrw_kernels::testing::compare::Tol::new(1e-6, 1e-6);
            graphrw_kernels::testing::compare::assert_close_tensors(
                &got,
                &want,
                tol,
                &format!("n = {n}, m = {m}"),
            );
            bound.push(report.bound_views);
        }
        assert_eq!(bound, [2, 0, 1, 1, 0, 2], "views bound afresh per run");
    }
}
