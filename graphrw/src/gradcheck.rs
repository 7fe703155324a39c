//! Gradient checks by finite differences: the analytic gradients of a backward graph
//! against central differences of the forward graph, both run by an executor stack.

use std::sync::Arc;

use thiserror::Error;

use crate::exec::{plan, ExecError, Executor};
use crate::grad::{grad_with, Cotangents, GradError, GradRegistry};
use crate::{Graph, Tensor, Value};

/// Why a gradient check could not run.
#[derive(Debug, Error)]
pub enum CheckError {
    /// Building the backward graph failed.
    #[error(transparent)]
    Grad(#[from] GradError),
    /// Planning or running a graph failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The inputs do not fit the graph.
    #[error("{0}")]
    Input(String),
}

/// The largest disagreement found for one `wrt` input.
#[derive(Clone, Debug, PartialEq)]
pub struct InputCheck {
    /// The input's name.
    pub input: String,
    /// The largest `|analytic - numeric| / max(1, |numeric|)`.
    pub max_error: f64,
    /// The flat index of the element where it occurs.
    pub at: usize,
    /// The analytic and the numeric derivative there.
    pub analytic: f64,
    /// See `analytic`.
    pub numeric: f64,
}

/// The result of [`check_grad`]: one entry per `wrt` input.
#[derive(Clone, Debug, PartialEq)]
pub struct GradCheck {
    /// Per input, in `wrt` order.
    pub inputs: Vec<InputCheck>,
}

impl GradCheck {
    /// The largest error over all inputs.
    pub fn max_error(&self) -> f64 {
        self.inputs.iter().map(|c| c.max_error).fold(0.0, f64::max)
    }
}

impl std::fmt::Display for GradCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in &self.inputs {
            writeln!(
                f,
                "{}: max error {:.3e} at [{}] (analytic {}, numeric {})",
                c.input, c.max_error, c.at, c.analytic, c.numeric
            )?;
        }
        Ok(())
    }
}

/// Compares the gradients of output 0 (a scalar) of `graph` with respect to `wrt`,
/// computed by [`grad_with`] and `registry`, with central differences of step `eps`
/// (use f64 inputs). `inputs` are in the order of `graph.inputs()`; both graphs run on
/// `executors`.
pub fn check_grad(
    graph: &Graph,
    wrt: &[Value],
    inputs: &[Tensor],
    registry: &GradRegistry,
    executors: &[Arc<dyn Executor>],
    eps: f64,
) -> Result<GradCheck, CheckError> {
    let backward = grad_with(graph, wrt, registry, Cotangents::Scalar)?;
    let n_fwd = graph.outputs().len();
    let (outs, _) = plan(&backward, executors)?.run(inputs)?;
    let forward = plan(graph, executors)?;
    let loss = |x: &[Tensor]| -> Result<f64, CheckError> {
        let (o, _) = forward.run(x)?;
        Ok(o[0].to_f64_vec()[0])
    };
    let mut report = Vec::with_capacity(wrt.len());
    for (k, &v) in wrt.iter().enumerate() {
        let pos = graph
            .inputs()
            .iter()
            .position(|&i| i == v.node)
            .ok_or_else(|| CheckError::Input(format!("wrt value {k} is not a graph input")))?;
        let x = inputs
            .get(pos)
            .ok_or_else(|| CheckError::Input(format!("missing input {pos}")))?;
        let analytic = outs[n_fwd + k].to_f64_vec();
        let base = x.to_f64_vec();
        let mut worst = InputCheck {
            input: graph
                .node(v.node)
                .and_then(|n| n.name())
                .unwrap_or("?")
                .to_string(),
            max_error: 0.0,
            at: 0,
            analytic: 0.0,
            numeric: 0.0,
        };
        for i in 0..base.len() {
            let at = |delta: f64| -> Result<f64, CheckError> {
                let mut data = base.clone();
                data[i] += delta;
                let mut xs = inputs.to_vec();
                xs[pos] = Tensor::from_f64_slice(x.dtype(), x.shape(), &data)
                    .map_err(|e| CheckError::Input(e.to_string()))?;
                loss(&xs)
            };
            let numeric = (at(eps)? - at(-eps)?) / (2.0 * eps);
            let err = (analytic[i] - numeric).abs() / numeric.abs().max(1.0);
            if err > worst.max_error || err.is_nan() {
                worst.max_error = if err.is_nan() { f64::INFINITY } else { err };
                worst.at = i;
                worst.analytic = analytic[i];
                worst.numeric = numeric;
            }
        }
        report.push(worst);
    }
    Ok(GradCheck { inputs: report })
}
