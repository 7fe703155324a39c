//! The graph's side of [`crate::assume`]: inference of a node added in a scope that may
//! assume, and the substitution of what it assumed through every node.

use super::*;
use crate::assume::{self, Assumption, InputSite, Made, Requirement};
use crate::ir::sym::bounds::Bounds;
use crate::ir::sym::in_force;
use crate::meta::{Dim, SymExpr, Symbol, TensorMeta};

impl Graph {
    /// The equalities between symbols inference assumed while nodes were added, in the
    /// order made (see [`crate::assume`]). The interpreter checks them against every
    /// run's inputs.
    pub fn assumptions(&self) -> &[Assumption] {
        &self.assumptions
    }

    /// The broadcast dims inference needed equal to one of their members while nodes
    /// were added (see [`crate::assume`]). The interpreter checks them at every run.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The lower bounds every run of the graph meets (`seq >= 1`), beyond the `>= 0`
    /// of every size: given by the user ([`Graph::assume_at_least`]), read from a
    /// saved model, or proven by the model itself (see [`crate::ir::sym::in_force`]).
    /// Inference, shape folding and the rewrites decide with them; the interpreter
    /// refuses a run whose inputs break one.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// Assumes `symbol >= n` for every run: what follows from it is decided from now
    /// on, and every node's metadata and symbolic attributes are brought to the
    /// simpler form it allows (`max(seq, 1)` becomes `seq` under `seq >= 1`). A bound
    /// under one already known changes nothing.
    pub fn assume_at_least(&mut self, symbol: &str, n: i64) {
        self.assume_bounds(&Bounds::new().at_least(symbol, n));
    }

    /// [`Graph::assume_at_least`] for each of `bounds`.
    pub fn assume_bounds(&mut self, bounds: &Bounds) {
        if self.bounds.implies(bounds) {
            return;
        }
        self.bounds = self.bounds.merge(bounds);
        let b = self.bounds.clone();
        in_force::with(&b, || self.simplify_all());
    }

    /// Rewrites every expression of the graph in the form the bounds in force give
    /// (the scope [`Graph::assume_bounds`] opens).
    fn simplify_all(&mut self) {
        for node in self.dag.node_weights_mut() {
            for meta in node.outputs.iter_mut() {
                if let Some(n) = simplify_meta(meta) {
                    *meta = n;
                }
            }
            for v in node.attrs.iter_mut() {
                let n = match v {
                    AttrValue::Sym(e) => simplify(e).map(AttrValue::sym_int),
                    AttrValue::Dims(es) => es
                        .iter()
                        .map(|e| simplify(e).or_else(|| Some(e.clone())))
                        .collect::<Option<Vec<_>>>()
                        .filter(|n| n != es)
                        .map(AttrValue::sym_ints),
                    _ => None,
                };
                if let Some(n) = n {
                    *v = n;
                }
            }
        }
        for a in &mut self.assumptions {
            if let Some(n) = simplify(&a.value) {
                a.value = n;
            }
        }
        for r in &mut self.requirements {
            for d in [&mut r.dims.0, &mut r.dims.1] {
                if let Some(n) = simplify_dim(d) {
                    *d = n;
                }
            }
        }
    }

    /// Records `r` as if a node's inference had required it (for a graph rebuilt from
    /// another).
    pub fn add_requirement(&mut self, r: Requirement) {
        if !self.requirements.contains(&r) {
            self.requirements.push(r);
        }
    }

    /// Records `a` as if a node's inference had assumed it, substituting it through
    /// every node's metadata and symbolic attributes (for a graph rebuilt from another:
    /// the assumptions of the original carry over this way).
    pub fn add_assumption(&mut self, a: Assumption) {
        let b = self.bounds.clone();
        in_force::with(&b, || self.substitute(&a.symbol, &a.value));
        self.assumptions.push(a);
    }

    /// [`Graph::infer_node`] in a scope where inference may assume equalities between
    /// symbolic dims; what it assumes is recorded on the graph and substituted through
    /// it, and into the outputs returned. `attrs` first has the graph's assumptions
    /// substituted (an importer may hold symbols from before one was made).
    pub(super) fn infer_assuming(
        &mut self,
        op: &'static OpDef,
        operands: &[Value],
        attrs: &mut [AttrValue],
        name: Option<&str>,
    ) -> Result<Vec<TensorMeta>, GraphError> {
        for v in attrs.iter_mut().filter(|v| v.is_symbolic()) {
            for a in &self.assumptions {
                if let Some(n) = assume::substitute_attr(v, &a.symbol, &a.value) {
                    *v = n;
                }
            }
        }
        let known = self
            .assumptions
            .iter()
            .map(|a| (a.symbol.clone(), a.value.clone()))
            .collect();
        let attrs: &[AttrValue] = attrs;
        let ((out, outcome), proven) = in_force::with(&self.bounds, || {
            assume::assuming(known, || {
                self.infer_node_in_force(op, operands, attrs, name)
            })
        });
        let mut out: Vec<TensorMeta> = out?;
        self.assume_bounds(&proven);
        for m in outcome.made {
            for meta in &mut out {
                if let Some(n) = assume::substitute_meta(meta, &m.symbol, &m.value) {
                    *meta = n;
                }
            }
            self.record(m, op.name, name);
        }
        for dims in outcome.required {
            self.add_requirement(Requirement {
                dims,
                op: op.name,
                node: name.map(str::to_string),
            });
        }
        Ok(out)
    }

    /// Records one assumption a node's inference made.
    fn record(&mut self, m: Made, op: &'static str, node: Option<&str>) {
        let mut sites = Vec::new();
        for &id in &self.inputs {
            let Some(n) = self.dag.node_weight(id.ix()) else {
                continue;
            };
            let Some(meta) = n.outputs.first() else {
                continue;
            };
            for (axis, d) in meta.shape.dims().iter().enumerate() {
                if d.to_expr().symbols().contains(&m.symbol) {
                    sites.push(InputSite {
                        input: n.name().unwrap_or("?").to_string(),
                        axis,
                        dim: d.clone(),
                    });
                }
            }
        }
        self.add_assumption(Assumption {
            symbol: m.symbol,
            value: m.value,
            op,
            node: node.map(str::to_string),
            dims: m.dims,
            sites,
        });
    }

    /// Replaces `symbol` by `value` in every node's metadata and symbolic attributes
    /// and in the values of the assumptions already made.
    fn substitute(&mut self, symbol: &Symbol, value: &SymExpr) {
        for node in self.dag.node_weights_mut() {
            for meta in node.outputs.iter_mut() {
                if let Some(n) = assume::substitute_meta(meta, symbol, value) {
                    *meta = n;
                }
            }
            for v in node.attrs.iter_mut() {
                if let Some(n) = assume::substitute_attr(v, symbol, value) {
                    *v = n;
                }
            }
        }
        for a in &mut self.assumptions {
            if let Some(n) = assume::substitute_one(&a.value, symbol, value) {
                a.value = n;
            }
        }
        for r in &mut self.requirements {
            for d in [&mut r.dims.0, &mut r.dims.1] {
                if let Some(n) = assume::substitute_dim(d, symbol, value) {
                    *d = n;
                }
            }
        }
    }
}

/// `e` in the form the bounds in force give, where that differs from `e`.
fn simplify(e: &SymExpr) -> Option<SymExpr> {
    e.substitute(&|_| None).filter(|n| n != e)
}

/// [`simplify`] of a dim.
fn simplify_dim(d: &Dim) -> Option<Dim> {
    match d {
        Dim::Expr(e) => Dim::from_expr(simplify(e)?),
        _ => None,
    }
}

/// [`simplify`] of each dim of `m`; `None` when nothing changes.
fn simplify_meta(m: &TensorMeta) -> Option<TensorMeta> {
    if !m.shape.is_symbolic() {
        return None;
    }
    let mut out = m.clone();
    let mut changed = false;
    for d in out.shape.0.iter_mut() {
        if let Some(n) = simplify_dim(d) {
            *d = n;
            changed = true;
        }
    }
    changed.then_some(out)
}
