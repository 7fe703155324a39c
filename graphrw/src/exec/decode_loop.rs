//! [`DecodeLoop`]: a decoder step run again and again, each step's `present_*`
//! outputs fed back as the next step's `past_*` inputs, with the caches growing in
//! place ([`KvCache`]): a step's cost is its new tokens' (and attention reading the
//! cache), not a copy of the cache.

use std::sync::Arc;

use graphrw_kernels::Tensor;

use super::kv_cache::KvCache;
use super::value::RunValue;
use super::{ExecError, Plan, RunReport};
use crate::ops::Op;
use crate::Graph;

/// A graph input fed, from the second step on, with a graph output of the step before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachePair {
    /// The input's index among the graph's inputs (`past_key_0`).
    pub past: usize,
    /// The output's index among the graph's outputs (`present_key_0`).
    pub present: usize,
    /// The axis along which the output is `concat(past, new)`, when it is: then the
    /// cache grows in place along it. `None`: the output is fed back as it is.
    pub axis: Option<usize>,
}

impl CachePair {
    /// The pairs of `graph` by name: an output whose name has `present` in it, with the
    /// input named as it is with `present` read as `past` or `past_key_values`
    /// (`present_key_0` / `past_key_0`, `present.0.key` / `past_key_values.0.key`), of
    /// the output's dtype and rank.
    pub fn by_name(graph: &Graph) -> Vec<CachePair> {
        let input_names: Vec<Option<&str>> = graph
            .inputs()
            .iter()
            .map(|&id| graph.node(id).and_then(|n| n.name()))
            .collect();
        let mut pairs = Vec::new();
        for (present, name) in graph.output_names().iter().enumerate() {
            if !name.contains("present") {
                continue;
            }
            let candidates = [
                name.replacen("present", "past", 1),
                name.replacen("present", "past_key_values", 1),
            ];
            let found = input_names
                .iter()
                .position(|n| n.is_some_and(|n| candidates.iter().any(|c| c == n)));
            if let Some(past) = found {
                if compatible(graph, past, present) {
                    pairs.push(CachePair {
                        past,
                        present,
                        axis: concat_axis(graph, past, present),
                    });
                }
            }
        }
        pairs
    }
}

/// Whether input `past` and output `present` have one dtype and rank.
fn compatible(graph: &Graph, past: usize, present: usize) -> bool {
    let input = graph.inputs()[past];
    let Some(pm) = graph.node(input).and_then(|n| n.outputs().first()) else {
        return false;
    };
    let Ok(om) = graph.meta(graph.outputs()[present]) else {
        return false;
    };
    pm.dtype == om.dtype && pm.rank() == om.rank()
}

/// The axis of `present = concat(past, x)`, if the output is that.
fn concat_axis(graph: &Graph, past: usize, present: usize) -> Option<usize> {
    let out = graph.outputs()[present];
    let node = graph.node(out.node)?;
    if node.builtin() != Some(Op::Concat) || node.operands().len() != 2 {
        return None;
    }
    if node.operands()[0].node != graph.inputs()[past] {
        return None;
    }
    let rank = node.outputs()[0].rank() as i64;
    let dim = node.attrs().int("dim").ok()?;
    let axis = if dim < 0 { dim + rank } else { dim };
    (0..rank).contains(&axis).then_some(axis as usize)
}

/// Runs a decoder step again and again: the caller gives each step the inputs that are
/// not caches and gets the outputs that are not; the loop feeds each step's presents
/// back as the next step's pasts. A present that is `concat(past, new)` is kept as a
/// [`KvCache`], so that the next step's concatenation appends to it in place and its
/// attention reads it where it is. The outputs are those of running the steps one by
/// one through [`Plan::run`], bit for bit.
///
/// ```
/// use std::sync::Arc;
/// use graphrw::exec::{default_stack, plan, DecodeLoop};
/// use graphrw::{Builder, DType, Dim, Tensor, TensorMeta};
///
/// // A toy step: present = concat(past, x) along axis 1, y = the cache's sum.
/// let b = Builder::new();
/// let x = b.input("x", TensorMeta::new(DType::F32, [Dim::from(1usize), Dim::from(1usize)]));
/// let past = b.input("past", TensorMeta::new(DType::F32, [Dim::from(1usize), Dim::sym("n")]));
/// let present = b.var(b.concat_with(&[past.value(), x.value()], 1)?);
/// let y = present.sum_with(&[1], true)?;
/// let (y, present) = (y.value(), present.value());
/// let mut g = b.finish();
/// g.set_named_outputs(vec![("y".into(), y), ("present".into(), present)])?;
/// let plan = Arc::new(plan(&g, &default_stack())?);
/// let mut lp = DecodeLoop::new(plan)?;
/// lp.start(&[Tensor::zeros(DType::F32, &[1, 0])])?;
/// for t in 1..=3 {
///     let (out, _) = lp.step(&[Tensor::from_vec(vec![1, 1], vec![t as f32])?])?;
///     // y only: the present stays in the loop.
///     assert_eq!(out[0].to_f64_vec(), vec![(t * (t + 1) / 2) as f64]);
/// }
/// assert_eq!(lp.cache_len(0), Some(3));
/// assert_eq!(lp.cache(0)?.to_f64_vec(), vec![1.0, 2.0, 3.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DecodeLoop {
    plan: Arc<Plan>,
    pairs: Vec<CachePair>,
    /// Per graph input: the pair whose past it is, if any.
    past_of: Vec<Option<usize>>,
    /// Per graph output: the pair whose present it is, if any.
    present_of: Vec<Option<usize>>,
    /// Per pair, the value the next step reads (set by [`DecodeLoop::start`]).
    state: Vec<Option<RunValue>>,
}

impl DecodeLoop {
    /// A loop over `plan` with the pairs [`CachePair::by_name`] finds; an error when
    /// it finds none.
    pub fn new(plan: Arc<Plan>) -> Result<DecodeLoop, ExecError> {
        let pairs = CachePair::by_name(plan.graph());
        if pairs.is_empty() {
            return Err(loop_error(
                "no output named `present*` has an input named `past*` of its dtype and rank \
                 (give the pairs with DecodeLoop::with_pairs)",
            ));
        }
        DecodeLoop::with_pairs(plan, pairs)
    }

    /// A loop over `plan` feeding the given pairs back.
    pub fn with_pairs(plan: Arc<Plan>, pairs: Vec<CachePair>) -> Result<DecodeLoop, ExecError> {
        let g = plan.graph();
        let (n_in, n_out) = (g.inputs().len(), g.outputs().len());
        let mut past_of = vec![None; n_in];
        let mut present_of = vec![None; n_out];
        for (k, p) in pairs.iter().enumerate() {
            if p.past >= n_in || p.present >= n_out {
                return Err(loop_error(format!(
                    "pair {k}: input {} / output {} of a graph with {n_in} inputs and {n_out} outputs",
                    p.past, p.present
                )));
            }
            if past_of[p.past].replace(k).is_some() || present_of[p.present].replace(k).is_some() {
                return Err(loop_error(format!(
                    "pair {k}: input {} or output {} is in another pair too",
                    p.past, p.present
                )));
            }
        }
        let state = vec![None; pairs.len()];
        Ok(DecodeLoop {
            plan,
            pairs,
            past_of,
            present_of,
            state,
        })
    }

    /// The pairs fed back.
    pub fn pairs(&self) -> &[CachePair] {
        &self.pairs
    }

    /// The plan the loop runs.
    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// Starts (or restarts) the loop from these caches, one per pair in order (often
    /// empty: `[batch, heads, 0, head_dim]`).
    pub fn start(&mut self, caches: &[Tensor]) -> Result<(), ExecError> {
        if caches.len() != self.pairs.len() {
            return Err(loop_error(format!(
                "{} caches given for {} pairs",
                caches.len(),
                self.pairs.len()
            )));
        }
        for (k, (p, t)) in self.pairs.iter().zip(caches).enumerate() {
            self.state[k] = Some(match p.axis {
                Some(axis) if axis < t.rank() => {
                    let cache = KvCache::new(t, axis).map_err(|e| ExecError::Input {
                        input: self.input_name(p.past),
                        message: e.to_string(),
                    })?;
                    RunValue::Device(Arc::new(cache))
                }
                _ => RunValue::Host(t.clone()),
            });
        }
        Ok(())
    }

    /// One step: `feeds` are the graph's inputs that are not pasts, in order; returns
    /// the outputs that are not presents, in order, and the run's report.
    pub fn step(&mut self, feeds: &[Tensor]) -> Result<(Vec<Tensor>, RunReport), ExecError> {
        let want = self.past_of.iter().filter(|p| p.is_none()).count();
        if feeds.len() != want {
            return Err(ExecError::Input {
                input: String::new(),
                message: format!(
                    "the loop's step takes {want} inputs (the graph's without the caches), {} given",
                    feeds.len()
                ),
            });
        }
        let mut fed = feeds.iter();
        let mut inputs = Vec::with_capacity(self.past_of.len());
        for (i, p) in self.past_of.iter().enumerate() {
            inputs.push(match p {
                Some(k) => self.state[*k].clone().ok_or_else(|| ExecError::Input {
                    input: self.input_name(i),
                    message: "the loop was not started (DecodeLoop::start gives the first caches)"
                        .into(),
                })?,
                None => match fed.next() {
                    Some(t) => RunValue::Host(t.clone()),
                    None => return Err(loop_error("fewer feeds than inputs")),
                },
            });
        }
        let (outputs, report) = self.plan.run_values(&inputs, false)?;
        drop(inputs);
        let mut shown = Vec::new();
        let names = self.plan.graph().output_names();
        for (j, value) in outputs.into_iter().enumerate() {
            if let Some(k) = self.present_of[j] {
                self.state[k] = Some(value);
                continue;
            }
            shown.push(value.to_host().map_err(|e| ExecError::Kernel {
                node: format!("output `{}`", names[j]),
                executor: "interpreter".into(),
                message: e.to_string(),
            })?);
        }
        Ok((shown, report))
    }

    /// Pair `k`'s cache as the next step would read it, as a tensor (a copy).
    pub fn cache(&self, k: usize) -> Result<Tensor, ExecError> {
        let value = self.state.get(k).and_then(Option::as_ref).ok_or_else(|| {
            loop_error(format!(
                "no cache {k} (the loop has {} pairs and must be started)",
                self.pairs.len()
            ))
        })?;
        value.to_host().map_err(|e| loop_error(e.to_string()))
    }

    /// Pair `k`'s cache length along its axis (`None` for a pair fed back as it is, or
    /// before [`DecodeLoop::start`]).
    pub fn cache_len(&self, k: usize) -> Option<usize> {
        self.state
            .get(k)?
            .as_ref()
            .and_then(KvCache::of)
            .map(KvCache::len)
    }

    fn input_name(&self, i: usize) -> String {
        let g = self.plan.graph();
        g.inputs()
            .get(i)
            .and_then(|&id| g.node(id))
            .and_then(|n| n.name())
            .unwrap_or("?")
            .to_string()
    }
}

/// An error of the loop itself (not of one node).
fn loop_error(message: impl Into<String>) -> ExecError {
    ExecError::Input {
        input: "decode loop".into(),
        message: message.into(),
    }
}
