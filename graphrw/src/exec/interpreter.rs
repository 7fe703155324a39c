//! The interpreter: runs a [`Plan`] on input tensors, freeing each intermediate after
//! its last use, and reports time per op and peak live bytes.
//!
//! Values are held as [`RunValue`]s: a device executor's results stay on its device
//! and feed its next nodes directly; a host executor given a device value gets a host
//! copy ([`Executor::run_values`](super::Executor::run_values)), and graph outputs are
//! brought to the host at the end.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use graphrw_kernels::Tensor;

use crate::graph::{NodeId, Value};
use crate::meta::{Dim, TensorMeta};
use crate::printer::{node_line, Names};

use super::plan::{view, Plan};
use super::value::RunValue;
use super::ExecError;

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Wall time and call count per op name.
    pub per_op: BTreeMap<&'static str, (Duration, usize)>,
    /// Wall time of the whole run.
    pub total: Duration,
    /// The most bytes of intermediate tensors alive at once (graph inputs and
    /// constants excluded: the caller and the graph own them), host and device alike.
    pub peak_live_bytes: usize,
    /// Graph outputs that were on a device and were copied to the host at the end.
    pub outputs_downloaded: usize,
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "total {:.3} ms, peak live {:.1} KiB",
            self.total.as_secs_f64() * 1e3,
            self.peak_live_bytes as f64 / 1024.0
        )?;
        let mut rows: Vec<_> = self.per_op.iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .0));
        for (op, (t, n)) in rows {
            writeln!(
                f,
                "  {op:<32} {n:>6} calls {:>10.3} ms",
                t.as_secs_f64() * 1e3
            )?;
        }
        Ok(())
    }
}

impl Plan {
    /// Runs the plan. Inputs are matched to the graph's inputs in order; their dtype
    /// and shape are checked (symbolic dims must be consistent) before anything runs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, RunReport), ExecError> {
        let start = Instant::now();
        self.check_inputs(inputs)?;
        let g = &self.graph;
        // Last step that reads each value; graph outputs are read at the end.
        let mut last_use: HashMap<Value, usize> = HashMap::new();
        for (step, &(id, _)) in self.steps.iter().enumerate() {
            for &v in g.try_node(id)?.operands() {
                last_use.insert(v, step);
            }
        }
        for &v in g.outputs() {
            last_use.insert(v, usize::MAX);
        }
        let input_index: HashMap<NodeId, usize> = g
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, &n)| (n, i))
            .collect();

        let mut values: HashMap<Value, RunValue> = HashMap::new();
        let mut owned_bytes: HashMap<Value, usize> = HashMap::new();
        let mut live = 0usize;
        let mut report = RunReport::default();
        for (step, &(id, ex)) in self.steps.iter().enumerate() {
            let node = g.try_node(id)?;
            let outs: Vec<RunValue> = match ex {
                None => match node.op_name() {
                    "input" => vec![RunValue::Host(inputs[input_index[&id]].clone())],
                    _ => vec![RunValue::Host(node.payload().cloned().ok_or_else(
                        || ExecError::Kernel {
                            node: self.line(id),
                            executor: "interpreter".into(),
                            message: "constant without a value".into(),
                        },
                    )?)],
                },
                Some(e) => {
                    let args: Vec<&RunValue> = node
                        .operands()
                        .iter()
                        .map(|v| {
                            values.get(v).ok_or_else(|| ExecError::Kernel {
                                node: self.line(id),
                                executor: "interpreter".into(),
                                message: format!(
                                    "operand %{}.{} was freed or never computed",
                                    v.node.index(),
                                    v.output
                                ),
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    let nv = view(g, id)?;
                    let t0 = Instant::now();
                    let outs = self.executors[e].run_values(&nv, &args).map_err(|err| {
                        ExecError::Kernel {
                            node: self.line(id),
                            executor: self.executors[e].name().to_string(),
                            message: err.to_string(),
                        }
                    })?;
                    let entry = report.per_op.entry(node.op_name()).or_default();
                    entry.0 += t0.elapsed();
                    entry.1 += 1;
                    self.check_outputs(id, &outs)?;
                    outs
                }
            };
            for (i, t) in outs.into_iter().enumerate() {
                let v = Value::new(id, i as u32);
                if !last_use.contains_key(&v) {
                    continue; // never read: dropped at once
                }
                if ex.is_some() {
                    live += t.nbytes();
                    owned_bytes.insert(v, t.nbytes());
                }
                values.insert(v, t);
            }
            report.peak_live_bytes = report.peak_live_bytes.max(live);
            for &v in node.operands() {
                if last_use.get(&v) == Some(&step) {
                    values.remove(&v);
                    live -= owned_bytes.remove(&v).unwrap_or(0);
                }
            }
        }
        let mut outputs = Vec::with_capacity(g.outputs().len());
        for v in g.outputs() {
            let fail = |message: String| ExecError::Kernel {
                node: format!("output %{}.{}", v.node.index(), v.output),
                executor: "interpreter".into(),
                message,
            };
            let value = values
                .get(v)
                .ok_or_else(|| fail("the output was never computed".into()))?;
            if matches!(value, RunValue::Device(_)) {
                report.outputs_downloaded += 1;
            }
            outputs.push(value.to_host().map_err(|e| fail(e.to_string()))?);
        }
        report.total = start.elapsed();
        Ok((outputs, report))
    }

    fn line(&self, id: NodeId) -> String {
        node_line(&self.graph, &Names::new(&self.graph), id)
    }

    fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), ExecError> {
        let g = &self.graph;
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
        let mut symbols: HashMap<&str, usize> = HashMap::new();
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
            if t.rank() != meta.rank() {
                return Err(bad(format!("expected {meta}, got shape {:?}", t.shape())));
            }
            for (d, &n) in meta.shape.dims().iter().zip(t.shape()) {
                match d {
                    Dim::Known(k) if *k as usize != n => {
                        return Err(bad(format!("expected {meta}, got shape {:?}", t.shape())))
                    }
                    Dim::Sym(s) => {
                        if let Some(&prev) = symbols.get(s.as_ref()) {
                            if prev != n {
                                return Err(bad(format!(
                                    "dim `{s}` is {n} here but {prev} in an earlier input"
                                )));
                            }
                        }
                        symbols.insert(s, n);
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn check_outputs(&self, id: NodeId, outs: &[RunValue]) -> Result<(), ExecError> {
        let node = self.graph.try_node(id)?;
        let fail = |message: String| ExecError::Kernel {
            node: self.line(id),
            executor: "interpreter".into(),
            message,
        };
        if outs.len() != node.outputs().len() {
            return Err(fail(format!(
                "kernel returned {} outputs, expected {}",
                outs.len(),
                node.outputs().len()
            )));
        }
        for (t, m) in outs.iter().zip(node.outputs()) {
            let shape_ok = t.shape().len() == m.rank()
                && m.shape
                    .dims()
                    .iter()
                    .zip(t.shape())
                    .all(|(d, &n)| d.known().is_none_or(|k| k as usize == n));
            if t.dtype() != m.dtype || !shape_ok {
                return Err(fail(format!(
                    "kernel returned {} {:?}, expected {m}",
                    t.dtype(),
                    t.shape()
                )));
            }
        }
        Ok(())
    }
}
