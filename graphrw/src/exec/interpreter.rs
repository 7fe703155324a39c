//! The interpreter: runs a [`Plan`] on input tensors, freeing each intermediate after
//! its last use, and reports time per op and peak live bytes.
//!
//! Values are held as [`RunValue`]s: a device executor's results stay on its device
//! and feed its next nodes directly; a host executor given a device value gets a host
//! copy ([`Executor::run_values`](super::Executor::run_values)), and graph outputs are
//! brought to the host at the end.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graphrw_kernels::cpu::awake::KeepAwake;
use graphrw_kernels::Tensor;

use crate::graph::NodeId;
use crate::meta::TensorMeta;
use crate::printer::{node_line, Names};

use super::bind::{check_inputs, Bindings, BoundCache, BoundNode};
use super::executor::view;
use super::plan::Plan;
use super::value::RunValue;
use super::ExecError;
use crate::ops::Op;

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Wall time and call count per op name: filled by [`Plan::run_profiled`], empty
    /// after [`Plan::run`] (two clock reads and a map update per node were 4-5% of a
    /// small model's run).
    pub per_op: BTreeMap<&'static str, (Duration, usize)>,
    /// Wall time of the whole run.
    pub total: Duration,
    /// The most bytes of intermediate tensors alive at once (graph inputs and
    /// constants excluded: the caller and the graph own them), host and device alike.
    pub peak_live_bytes: usize,
    /// Graph outputs that were on a device and were copied to the host at the end.
    pub outputs_downloaded: usize,
    /// Bytes of kernel outputs written into buffers of freed intermediates (of this
    /// run or an earlier one of the same plan) instead of fresh allocations.
    pub reused_bytes: usize,
    /// Nodes whose symbolic attributes and metadata were bound afresh in this run: 0
    /// when every symbol has the value it had in the last run, and on a decoder step
    /// whose cache grew, only the nodes that read the cache length.
    pub bound_views: usize,
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

/// A run shorter than this (its last run's time) runs on the calling thread instead of
/// a worker of the global pool. On the 2-vCPU Xeon (family 6 model 167), a one-node
/// model's `InferenceSession.run` from Python took 50 us, 25 of them in the native run,
/// nearly all handing the run to a worker and waiting for it.
const QUICK_RUN_NS: u64 = 50_000;

impl Plan {
    /// Runs the plan. Inputs are matched to the graph's inputs in order; their dtype
    /// and shape are checked (symbolic dims must be consistent) before anything runs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, RunReport), ExecError> {
        self.run_tensors(inputs, false)
    }

    /// [`Plan::run`], also timing each kernel call: the report's
    /// [`per_op`](RunReport::per_op) has the time and calls of each op.
    pub fn run_profiled(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, RunReport), ExecError> {
        self.run_tensors(inputs, true)
    }

    /// [`Plan::run`] on the values the interpreter holds, returning the outputs as they
    /// are: a value an executor keeps (on a device, or a [`KvCache`](super::KvCache)
    /// with spare capacity) stays so, for a later run to take as an input without a
    /// copy. Times each kernel call when `profile`.
    ///
    /// It runs on a worker of the plan's thread pool (rayon's global pool unless the
    /// options set threads). The thread that walks the plan then takes its share of
    /// each parallel kernel: run from outside the pool, it handed every kernel to the
    /// pool and slept until it was done, two thread wake-ups per kernel (GPT-2 small at
    /// S = 128: 900 context switches a run, 100 from a worker). Medians of 30 pairs of
    /// runs by `benches/paired.py`, worker over main thread: 0.982 on GPT-2 small at
    /// S = 128 and 0.987 on the main example's model on a 2-vCPU Zen 4 (an A/A run
    /// 0.999), 0.93-0.99 and 0.95 on a Zen 3. A plan whose last run took under 50 us
    /// runs on the calling thread instead, where that handoff would cost more than the
    /// run.
    pub fn run_values(
        &self,
        inputs: &[RunValue],
        profile: bool,
    ) -> Result<(Vec<RunValue>, RunReport), ExecError> {
        let quick = self.last_run_ns.load(Ordering::Relaxed) < QUICK_RUN_NS;
        let result = match &self.threads {
            Some(pool) => pool.install(|| self.run_here(inputs, profile)),
            // A quick plan (its last run under `QUICK_RUN_NS`) runs where it is called:
            // handing it to a worker and waiting costs a wake-up and a latch, about
            // 20 us, most of a small model's run.
            None if quick => self.run_here(inputs, profile),
            // `scope` runs its closure on a worker of the global pool (in place when
            // called from one).
            None => rayon::scope(|_| self.run_here(inputs, profile)),
        };
        if let Ok((_, report)) = &result {
            let ns = u64::try_from(report.total.as_nanos()).unwrap_or(u64::MAX);
            self.last_run_ns.store(ns, Ordering::Relaxed);
        }
        result
    }

    /// [`Plan::run_values`] on host tensors, the outputs brought to the host.
    fn run_tensors(
        &self,
        inputs: &[Tensor],
        profile: bool,
    ) -> Result<(Vec<Tensor>, RunReport), ExecError> {
        let values: Vec<RunValue> = inputs.iter().cloned().map(RunValue::Host).collect();
        let (outputs, mut report) = self.run_values(&values, profile)?;
        let mut tensors = Vec::with_capacity(outputs.len());
        for (value, v) in outputs.into_iter().zip(self.graph.outputs()) {
            if matches!(value, RunValue::Device(_)) {
                report.outputs_downloaded += 1;
            }
            tensors.push(value.to_host().map_err(|e| ExecError::Kernel {
                node: format!("output %{}.{}", v.node.index(), v.output),
                executor: "interpreter".into(),
                message: e.to_string(),
            })?);
        }
        Ok((tensors, report))
    }

    /// [`Plan::run_values`] on the calling thread.
    fn run_here(
        &self,
        inputs: &[RunValue],
        profile: bool,
    ) -> Result<(Vec<RunValue>, RunReport), ExecError> {
        let start = Instant::now();
        let mut bindings = check_inputs(&self.graph, inputs)?;
        let sched = &self.schedule;
        let bound_by_inputs = bindings.len();
        // The last run's bound views: each is reused where the symbols it read are bound
        // to the same values in this run.
        let cached: Option<Arc<BoundCache>> =
            match sched.symbolic_steps > 0 && !sched.data_dependent.load(Ordering::Relaxed) {
                true => sched.bound.lock().ok().and_then(|c| c.clone()),
                false => None,
            };
        // This run's, kept for the next.
        let mut fresh: Vec<Option<Arc<BoundNode>>> = Vec::new();
        if sched.symbolic_steps > 0 {
            fresh.resize_with(self.steps.len(), || None);
        }
        // Kernels called on this thread draw their large outputs from the plan's pool,
        // which gets each intermediate back after its last use.
        let _pool = self.pool.install();
        // Kernels called on this thread run with the plan's options.
        let _options = self.options.install();
        // The pool's other workers poll for work until the run ends.
        let awake = KeepAwake::start(self.options.keep_workers_awake);
        let reused_before = self.pool.reused_bytes();
        let g = &self.graph;
        let mut values: Vec<Option<RunValue>> = vec![None; sched.slots];
        // Bytes of each slot's value when a kernel made it (inputs and constants: 0).
        let mut owned_bytes: Vec<usize> = vec![0; sched.slots];
        let mut live = 0usize;
        let mut report = RunReport::default();
        for (step, (&(id, ex), slots)) in self.steps.iter().zip(&sched.steps).enumerate() {
            let node = g.try_node(id)?;
            awake.top_up();
            let outs: Vec<RunValue> = match ex {
                None => match (node.builtin(), slots.input) {
                    (Some(Op::Input), Some(i)) => vec![inputs[i].clone()],
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
                        .zip(&slots.operands)
                        .map(|(v, s)| {
                            s.and_then(|s| values[s].as_ref())
                                .ok_or_else(|| ExecError::Kernel {
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
                    let reused = match slots.symbolic {
                        true => cached
                            .as_ref()
                            .and_then(|c| c.nodes.get(step)?.as_ref())
                            .filter(|b| b.holds_for(&bindings)),
                        false => None,
                    };
                    let bound: Option<Arc<BoundNode>> = match (slots.symbolic, reused) {
                        (false, _) => None,
                        (true, Some(b)) => Some(b.clone()),
                        (true, None) => {
                            let b = BoundNode::new(&nv, &bindings).map_err(|message| {
                                ExecError::Kernel {
                                    node: self.line(id),
                                    executor: "interpreter".into(),
                                    message,
                                }
                            })?;
                            report.bound_views += 1;
                            Some(Arc::new(b))
                        }
                    };
                    if let (Some(b), Some(slot)) = (&bound, fresh.get_mut(step)) {
                        *slot = Some(b.clone());
                    }
                    let bound = bound.as_deref();
                    let bound_view = bound.map(|b| b.view(&nv));
                    let nv = bound_view.as_ref().unwrap_or(&nv);
                    let t0 = profile.then(Instant::now);
                    let outs = self.executors[e].run_values(nv, &args).map_err(|err| {
                        ExecError::Kernel {
                            node: self.line(id),
                            executor: self.executors[e].name().to_string(),
                            message: err.to_string(),
                        }
                    })?;
                    if let Some(t0) = t0 {
                        let entry = report.per_op.entry(node.op_name()).or_default();
                        entry.0 += t0.elapsed();
                        entry.1 += 1;
                    }
                    self.check_outputs(id, &outs, bound.map(BoundNode::outputs), &mut bindings)?;
                    outs
                }
            };
            for (t, s) in outs.into_iter().zip(&slots.outputs) {
                let Some(s) = *s else {
                    // Never read: freed at once.
                    if let (Some(_), RunValue::Host(t)) = (ex, t) {
                        self.pool.recycle(t);
                    }
                    continue;
                };
                if ex.is_some() {
                    live += t.nbytes();
                    owned_bytes[s] = t.nbytes();
                }
                values[s] = Some(t);
            }
            if live > report.peak_live_bytes {
                report.peak_live_bytes = live;
                // The pool holds at most twice what was alive at once (raised as the
                // peak grows: its lock is not taken for every node). Once the peak,
                // not twice, it dropped the oldest buffers, often the large ones a
                // later node needed: on the main example's model the QKV and MLP
                // products (4.5 and 6 MiB) were allocated and zeroed afresh every
                // run; at twice the peak no buffer of a warm run is new.
                self.pool.raise_limit(2 * live);
            }
            for &s in &slots.frees {
                let owned = std::mem::take(&mut owned_bytes[s]);
                live -= owned;
                // Only what a kernel made goes back (not inputs or constants; the pool
                // also refuses any storage still shared with another tensor).
                if let Some(RunValue::Host(t)) = values[s].take() {
                    if owned > 0 {
                        self.pool.recycle(t);
                    }
                }
            }
        }
        let mut outputs = Vec::with_capacity(g.outputs().len());
        for (v, s) in g.outputs().iter().zip(&sched.outputs) {
            let fail = |message: String| ExecError::Kernel {
                node: format!("output %{}.{}", v.node.index(), v.output),
                executor: "interpreter".into(),
                message,
            };
            let value = s
                .and_then(|s| values[s].as_ref())
                .ok_or_else(|| fail("the output was never computed".into()))?;
            outputs.push(value.clone());
        }
        if bindings.len() > bound_by_inputs {
            sched.data_dependent.store(true, Ordering::Relaxed);
        } else if report.bound_views > 0 {
            // Only when something was bound afresh: otherwise the cache is this run's.
            if let Ok(mut c) = sched.bound.lock() {
                *c = Some(Arc::new(BoundCache { nodes: fresh }));
            }
        }
        report.reused_bytes = self.pool.reused_bytes() - reused_before;
        report.total = start.elapsed();
        Ok((outputs, report))
    }

    fn line(&self, id: NodeId) -> String {
        node_line(&self.graph, &Names::new(&self.graph), id)
    }

    /// Checks a kernel's results against the node's metadata (`bound`: its outputs'
    /// metadata with this run's symbols bound, for a symbolic node), binding the symbols
    /// that first appear there (data-dependent sizes).
    fn check_outputs(
        &self,
        id: NodeId,
        outs: &[RunValue],
        bound: Option<&[TensorMeta]>,
        bindings: &mut Bindings,
    ) -> Result<(), ExecError> {
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
        for (i, (t, static_meta)) in outs.iter().zip(node.outputs()).enumerate() {
            // Bound metadata with every dim known checks like static metadata.
            let m = match bound.and_then(|b| b.get(i)) {
                Some(b) if !b.shape.is_symbolic() => b,
                _ => static_meta,
            };
            let shape_ok = match m.shape.is_symbolic() {
                false => {
                    t.shape().len() == m.rank()
                        && m.shape
                            .dims()
                            .iter()
                            .zip(t.shape())
                            .all(|(d, &n)| d.known().is_none_or(|k| k as usize == n))
                }
                true => {
                    let what = || format!("expected {m}");
                    bindings.bind_shape(m, t.shape(), &what).map_err(fail)?;
                    true
                }
            };
            if t.dtype() != m.dtype || !shape_ok {
                // Where the sizes came from the run's inputs, say so: an input size the
                // model cannot take (a sequence past a position table) shows here.
                let from_inputs = match std::ptr::eq(m, static_meta) {
                    true => String::new(),
                    false => format!(" ({static_meta} at this run's input sizes)"),
                };
                return Err(fail(format!(
                    "kernel returned {} {:?}, expected {m}{from_inputs}",
                    t.dtype(),
                    t.shape()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::exec::{default_stack, plan, reference_stack};
    use crate::{Builder, DType, Shape, Tensor, TensorMeta};

    /// A tensor of varied values, `scale` apart.
    pub(in crate::exec) fn ramp(shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        let data = (0..n)
            .map(|i| ((i * 7919 % 1009) as f32 - 504.0) * scale)
            .collect();
        Tensor::from_vec(shape.to_vec(), data).expect("shape and data agree")
    }

    /// Outputs given back with [`Plan::recycle`] are drawn on by the next run (which
    /// reuses more than a run after the outputs were dropped) and overwritten whole; an
    /// output whose storage the caller still shares is not taken.
    #[test]
    fn recycled_outputs_are_reused_and_overwritten() {
        let g = block();
        let (x1, x2) = (ramp(&[131, 128], 0.01), ramp(&[131, 128], -0.003));
        let want2 = {
            let fresh = plan(&g, &default_stack()).expect("plans");
            fresh.run(std::slice::from_ref(&x2)).expect("runs").0[0].to_f64_vec()
        };
        let p = plan(&g, &default_stack()).expect("plans");
        let (warm, _) = p.run(std::slice::from_ref(&x1)).expect("warm run");
        let want1 = warm[0].to_f64_vec();
        drop(warm);
        let (dropped, after_drop) = p.run(std::slice::from_ref(&x1)).expect("runs");
        assert_eq!(dropped[0].to_f64_vec(), want1);
        p.recycle(dropped);
        let (second, after_recycle) = p.run(std::slice::from_ref(&x2)).expect("runs");
        assert!(
            after_recycle.reused_bytes > after_drop.reused_bytes,
            "the recycled output was not drawn on: {after_recycle:?} against {after_drop:?}"
        );
        assert_eq!(second[0].to_f64_vec(), want2, "a stale output buffer shows");
        // A shared output stays the caller's.
        let kept = second[0].clone();
        p.recycle(second);
        let (third, _) = p.run(std::slice::from_ref(&x1)).expect("runs");
        assert_eq!(third[0].to_f64_vec(), want1);
        assert_eq!(kept.to_f64_vec(), want2, "a shared output was overwritten");
    }

    /// A plan whose one kernel is a layer norm (a row kernel) writes its second run's
    /// output into the recycled output of the first: no fresh memory in a warm run.
    #[test]
    fn a_row_kernel_draws_its_output_from_the_pool() {
        let (s, h) = (256usize, 128usize);
        let b = Builder::new();
        let x = b.input(
            "x",
            TensorMeta::new(DType::F32, Shape::known(&[s as u64, h as u64])),
        );
        let w = |shape: &[usize]| b.constant(ramp(shape, 0.002)).value();
        // The generated kernel's op, as the built-in rules leave it.
        let op = crate::generated::builtin::layer_norm::KERNEL.op;
        let eps = [("eps", crate::ops::AttrValue::Float(1e-5))];
        let y = b
            .apply(op, &[x.value(), w(&[h]), w(&[h])], &eps)
            .expect("builds");
        b.output(&[b.var(y[0])]).expect("output");
        let g = b.finish();
        let (x1, x2) = (ramp(&[s, h], 0.01), ramp(&[s, h], -0.003));
        let p = plan(&g, &default_stack()).expect("plans");
        let node = p.graph().nodes_of(op).next().expect("kept");
        assert_eq!(p.executor_of(node), Some(crate::exec::GENERATED_CPU));
        let (first, _) = p.run(std::slice::from_ref(&x1)).expect("runs");
        let bytes = first[0].nbytes();
        p.recycle(first);
        let (second, report) = p.run(std::slice::from_ref(&x2)).expect("runs");
        assert_eq!(report.reused_bytes, bytes, "{report:?}");
        let fresh = plan(&g, &default_stack()).expect("plans");
        let (want, _) = fresh.run(std::slice::from_ref(&x2)).expect("runs");
        assert_eq!(second[0].to_f64_vec(), want[0].to_f64_vec());
    }

    /// A small MLP block whose intermediates are all large enough to pool (64 KiB+) (layer norm, matmul + bias + GELU,
    /// matmul, softmax, residual add), built once.
    fn block() -> crate::Graph {
        let (s, h) = (131usize, 128usize);
        let b = Builder::new();
        let x = b.input(
            "x",
            TensorMeta::new(DType::F32, Shape::known(&[s as u64, h as u64])),
        );
        let w = |shape: &[usize]| b.constant(ramp(shape, 0.002));
        let y = x
            .layer_norm(Some(w(&[h])), Some(w(&[h])))
            .and_then(|y| y.matmul(w(&[h, 4 * h])))
            .and_then(|y| y.add(w(&[4 * h])))
            .and_then(|y| y.gelu_with("tanh"))
            .and_then(|y| y.matmul(w(&[4 * h, h])))
            .and_then(|y| y.softmax(-1))
            .and_then(|y| y.add(x))
            .expect("block builds");
        b.output(&[y]).expect("output");
        b.finish()
    }

    /// Runs reuse the buffers of freed intermediates (from the second run on), and
    /// every reused element is overwritten: a run on other inputs, in buffers holding
    /// the first run's values, matches a fresh plan; outputs the caller keeps are never
    /// overwritten.
    #[test]
    fn reused_buffers_give_the_same_results() {
        let g = block();
        let (x1, x2) = (ramp(&[131, 128], 0.01), ramp(&[131, 128], -0.003));
        for stack in [default_stack(), reference_stack()] {
            let p = plan(&g, &stack).expect("plans");
            let (first, r1) = p.run(std::slice::from_ref(&x1)).expect("first run");
            let kept = first[0].to_f64_vec();
            let (second, r2) = p.run(std::slice::from_ref(&x2)).expect("second run");
            let (third, r3) = p.run(std::slice::from_ref(&x1)).expect("third run");
            assert!(r2.reused_bytes > 0, "second run reused nothing: {r2:?}");
            assert!(r3.reused_bytes > 0, "third run reused nothing: {r3:?}");
            assert_eq!(
                r1.peak_live_bytes, r2.peak_live_bytes,
                "peak is of live values"
            );
            assert_eq!(first[0].to_f64_vec(), kept, "a kept output was overwritten");
            assert_eq!(third[0].to_f64_vec(), kept);
            let fresh = plan(&g, &stack).expect("plans");
            let (want, _) = fresh.run(std::slice::from_ref(&x2)).expect("runs");
            assert_eq!(
                second[0].to_f64_vec(),
                want[0].to_f64_vec(),
                "a fresh plan agrees"
            );
            assert_ne!(
                second[0].to_f64_vec(),
                kept,
                "the two inputs give different outputs"
            );
            assert!(
                p.pool.held_bytes() <= 2 * r3.peak_live_bytes,
                "the pool holds no more than twice what a run had alive"
            );
        }
    }
}
