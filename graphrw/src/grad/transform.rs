//! The reverse-mode transform: walks the forward graph backwards, calling each node's
//! vjp rule (or differentiating through its decomposition), and accumulates cotangents.

use std::collections::{HashMap, HashSet};

use super::context::{known_dims, zeros};
use super::{GradError, GradRegistry, VjpContext};
use crate::builder::{Builder, Var};
use crate::meta::{Dim, Shape};
use crate::ops::Op;
use crate::printer::Names;
use crate::{Graph, NodeId, Value};

/// Where the backward pass starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Cotangents {
    /// Differentiate output 0, which must have exactly one element (a loss); its
    /// cotangent is 1. Other outputs are only passed through.
    #[default]
    Scalar,
    /// One new graph input per float output, named `d_<output name>`, holds that
    /// output's cotangent (a vector-Jacobian product of every output).
    Given,
}

/// Differentiates output 0 (a scalar) of `graph` with respect to the inputs `wrt`,
/// with the built-in vjp rules. See [`grad_with`].
pub fn grad(graph: &Graph, wrt: &[Value]) -> Result<Graph, GradError> {
    grad_with(
        graph,
        wrt,
        &GradRegistry::with_builtins(),
        Cotangents::Scalar,
    )
}

/// Builds the backward graph of `graph`: a new graph whose outputs are the forward
/// outputs followed by the gradient of every `wrt` input (named `grad_<input>`), in
/// `wrt` order. An input nothing differentiable depends on gets zeros.
pub fn grad_with(
    graph: &Graph,
    wrt: &[Value],
    registry: &GradRegistry,
    cotangents: Cotangents,
) -> Result<Graph, GradError> {
    let names = Names::new(graph);
    check_wrt(graph, &names, wrt)?;
    if graph.outputs().is_empty() {
        return Err(GradError::Outputs("the graph has no outputs".into()));
    }
    let order = graph.topo_order()?;
    let mut req: HashSet<NodeId> = wrt.iter().map(|v| v.node).collect();
    for &id in &order {
        if depends_on(graph, &req, id)? {
            req.insert(id);
        }
    }
    let b = Builder::from_graph(graph.clone());
    let mut state = State {
        b: &b,
        registry,
        names,
        req,
        cot: HashMap::new(),
    };
    seed(&mut state, graph, cotangents)?;
    for &id in order.iter().rev() {
        state.backprop(id)?;
    }
    let mut outs: Vec<(String, Value)> = graph
        .output_names()
        .iter()
        .cloned()
        .zip(graph.outputs().iter().copied())
        .collect();
    for &v in wrt {
        let name = format!("grad_{}", state.names.get(v));
        let g = match state.cot.get(&v) {
            Some(&g) => g,
            None => zeros(&b, &b.meta(v)?, &state.names.get(v))?.value(),
        };
        outs.push((name, g));
    }
    drop(state);
    let mut out = b.finish();
    out.set_named_outputs(outs)?;
    out.remove_dead();
    Ok(out)
}

fn check_wrt(graph: &Graph, names: &Names, wrt: &[Value]) -> Result<(), GradError> {
    for &v in wrt {
        let not = |message: String| GradError::NotAnInput {
            value: names.get(v),
            message,
        };
        let node = graph
            .node(v.node)
            .ok_or_else(|| not("no such node".into()))?;
        if !node.op().is(Op::Input) {
            return Err(not(format!(
                "it is an output of `{}`, not a graph input",
                node.op_name()
            )));
        }
        let meta = graph.meta(v)?;
        if !meta.dtype.is_float() {
            return Err(not(format!(
                "it is {}, and only float inputs have gradients",
                meta.dtype
            )));
        }
    }
    Ok(())
}

/// True when node `id` has a float output computed from a float value in `req`.
fn depends_on(graph: &Graph, req: &HashSet<NodeId>, id: NodeId) -> Result<bool, GradError> {
    let node = graph.try_node(id)?;
    if !node.outputs().iter().any(|m| m.dtype.is_float()) {
        return Ok(false);
    }
    for &v in node.operands() {
        if req.contains(&v.node) && graph.meta(v)?.dtype.is_float() {
            return Ok(true);
        }
    }
    Ok(false)
}

fn seed(state: &mut State<'_>, graph: &Graph, mode: Cotangents) -> Result<(), GradError> {
    let b = state.b;
    match mode {
        Cotangents::Scalar => {
            let out = graph.outputs()[0];
            let meta = graph.meta(out)?;
            if meta.shape.numel() != Some(1) {
                return Err(GradError::NonScalarOutput {
                    output: 0,
                    meta: meta.to_string(),
                });
            }
            if !meta.dtype.is_float() {
                return Err(GradError::Outputs(format!(
                    "output 0 is {meta}: only float outputs can be differentiated"
                )));
            }
            let one = b.full_with(&known_dims(&meta.shape)?, 1.0, meta.dtype)?;
            state.accumulate(out, b.var(one))?;
        }
        Cotangents::Given => {
            for (name, &out) in graph.output_names().iter().zip(graph.outputs()) {
                let meta = graph.meta(out)?;
                if meta.dtype.is_float() {
                    let d = b.input(&format!("d_{name}"), meta.clone());
                    state.accumulate(out, d)?;
                }
            }
        }
    }
    Ok(())
}

struct State<'b> {
    b: &'b Builder,
    registry: &'b GradRegistry,
    names: Names,
    /// Nodes whose outputs depend on a `wrt` input.
    req: HashSet<NodeId>,
    /// The accumulated cotangent of each value.
    cot: HashMap<Value, Value>,
}

impl State<'_> {
    fn node_name(&self, id: NodeId) -> String {
        self.names.get(Value::from(id))
    }

    fn accumulate(&mut self, v: Value, g: Var<'_>) -> Result<(), GradError> {
        let g = match self.cot.get(&v) {
            Some(&prev) => self.b.add(prev, g)?,
            None => g.value(),
        };
        self.cot.insert(v, g);
        Ok(())
    }

    /// Propagates the cotangents of node `id`'s outputs to its operands.
    fn backprop(&mut self, id: NodeId) -> Result<(), GradError> {
        if !self.req.contains(&id) {
            return Ok(());
        }
        let (op, attrs, inputs, n_out) = self.b.with_graph(|g| {
            g.try_node(id).map(|n| {
                (
                    n.op(),
                    n.attr_values().to_vec(),
                    n.operands().to_vec(),
                    n.outputs().len(),
                )
            })
        })?;
        let outputs: Vec<Value> = (0..n_out as u32).map(|o| Value::new(id, o)).collect();
        let cotangents: Vec<Option<Value>> =
            outputs.iter().map(|v| self.cot.get(v).copied()).collect();
        if cotangents.iter().all(Option::is_none) || inputs.is_empty() {
            return Ok(());
        }
        let mut needs_grad = Vec::with_capacity(inputs.len());
        for &v in &inputs {
            needs_grad.push(self.req.contains(&v.node) && self.b.meta(v)?.dtype.is_float());
        }
        let node = self.node_name(id);
        if let Some(rule) = self.registry.get(op) {
            let cx = VjpContext {
                builder: self.b,
                op,
                node: node.clone(),
                attrs,
                inputs: inputs.clone(),
                outputs,
                cotangents,
                needs_grad: needs_grad.clone(),
            };
            let grads = rule(&cx).map_err(|e| name_rule_error(e, op.name, &node))?;
            if grads.len() != inputs.len() {
                return Err(GradError::Rule {
                    op: op.name,
                    node,
                    message: format!(
                        "returned {} gradients for {} operands",
                        grads.len(),
                        inputs.len()
                    ),
                });
            }
            for ((&v, g), need) in inputs.iter().zip(grads).zip(needs_grad) {
                if let (Some(g), true) = (g, need) {
                    let g = self.fit(g, v, op.name, &node)?;
                    self.accumulate(v, g)?;
                }
            }
            Ok(())
        } else if let Some(decompose) = op.decompose {
            // Differentiate through the decomposition: rebuild it on the node's operands
            // and propagate through the new nodes.
            let before = self.b.created().len();
            let a = crate::ops::Attrs::new(op.attrs, &attrs);
            let outs = decompose(self.b, &inputs, &a)?;
            let created: Vec<NodeId> = self.b.created()[before..].to_vec();
            for &c in &created {
                let dep = self.b.with_graph(|g| depends_on(g, &self.req, c))?;
                if dep {
                    self.req.insert(c);
                }
            }
            for (o, g) in outs.iter().zip(&cotangents) {
                if let Some(g) = g {
                    self.accumulate(*o, self.b.var(*g))?;
                }
            }
            for &c in created.iter().rev() {
                self.backprop(c)?;
            }
            Ok(())
        } else {
            Err(GradError::NoRule { op: op.name, node })
        }
    }

    /// Checks a gradient against its operand: reduces broadcast dims away, and
    /// rejects a dtype or shape that does not fit.
    fn fit<'a>(
        &self,
        g: Var<'a>,
        operand: Value,
        op: &'static str,
        node: &str,
    ) -> Result<Var<'a>, GradError> {
        let want = self.b.meta(operand)?;
        let have = g.meta()?;
        let err = |message: String| GradError::Rule {
            op,
            node: node.to_string(),
            message,
        };
        if have.dtype != want.dtype {
            return Err(err(format!(
                "gradient of {} for an operand of {}",
                have.dtype, want.dtype
            )));
        }
        let g = sum_to_shape(g, &want.shape).map_err(|e| err(e.to_string()))?;
        let have = g.meta()?;
        if !same_shape(&have.shape, &want.shape) {
            return Err(err(format!(
                "gradient of shape {} for an operand of shape {}",
                have.shape, want.shape
            )));
        }
        Ok(g)
    }
}

fn name_rule_error(e: GradError, op: &'static str, node: &str) -> GradError {
    match e {
        GradError::Rule {
            op: "", message, ..
        } => GradError::Rule {
            op,
            node: node.to_string(),
            message,
        },
        GradError::Graph(g) => GradError::Rule {
            op,
            node: node.to_string(),
            message: g.to_string(),
        },
        other => other,
    }
}

fn same_shape(a: &Shape, b: &Shape) -> bool {
    a.rank() == b.rank()
        && a.dims().iter().zip(b.dims()).all(|(x, y)| match (x, y) {
            (Dim::Known(x), Dim::Known(y)) => x == y,
            _ => true,
        })
}

/// Sums `g` over the dims that broadcasting added to reach `target` (leading dims,
/// and dims where `target` has size 1): the gradient of a broadcast.
pub fn sum_to_shape<'b>(g: Var<'b>, target: &Shape) -> Result<Var<'b>, GradError> {
    let have = g.meta()?.shape;
    if have.rank() < target.rank() {
        return Err(GradError::unsupported(format!(
            "gradient of shape {have} cannot be reduced to shape {target}"
        )));
    }
    let lead = have.rank() - target.rank();
    let mut dims: Vec<i64> = (0..lead as i64).collect();
    for (i, d) in target.dims().iter().enumerate() {
        if d.is_one() && !have.dims()[lead + i].is_one() {
            dims.push((lead + i) as i64);
        }
    }
    if dims.is_empty() {
        return Ok(g);
    }
    let mut s = g.sum_with(&dims, true)?;
    if lead > 0 {
        s = s.squeeze_with(&(0..lead as i64).collect::<Vec<_>>())?;
    }
    Ok(s)
}
