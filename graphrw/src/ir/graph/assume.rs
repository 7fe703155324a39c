//! The graph's side of [`crate::assume`]: inference of a node added in a scope that may
//! assume, and the substitution of what it assumed through every node.

use super::*;
use crate::assume::{self, Assumption, InputSite, Made, Requirement};
use crate::meta::{SymExpr, Symbol};

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
        self.substitute(&a.symbol, &a.value);
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
        let (out, outcome) = assume::assuming(known, || self.infer_node(op, operands, attrs, name));
        let mut out = out?;
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
