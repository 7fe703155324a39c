//! `graphrw._native.Loop`: a session's plan run as a generation loop
//! ([`graphrw::exec::DecodeLoop`]), each step's presents fed back as the next step's
//! pasts with the caches growing in place; what `graphrw.DecodeLoop` builds on.

use std::sync::{Arc, Mutex};

use graphrw::exec::{DecodeLoop, Plan};
use graphrw::{DType, Tensor};
use pyo3::prelude::*;

use crate::arrays::{self, Array, Feed};
use crate::{detached, Failure, Kind};

/// A generation loop over a session's plan.
#[pyclass(module = "graphrw._native", frozen)]
pub(crate) struct Loop {
    inner: Mutex<DecodeLoop>,
    /// The dtype each graph input is fed to the plan in.
    feed_dtypes: Vec<DType>,
}

impl Loop {
    /// The loop over `plan` with the pairs found by name; an error when there are none.
    pub(crate) fn new(plan: Arc<Plan>, feed_dtypes: Vec<DType>) -> Result<Loop, Failure> {
        let inner = DecodeLoop::new(plan).map_err(|e| Failure::new(Kind::InvalidArgument, e))?;
        Ok(Loop {
            inner: Mutex::new(inner),
            feed_dtypes,
        })
    }

    /// The values as tensors of their own (copied: the loop keeps its caches, and
    /// whatever a step's presents view, past the call).
    fn tensors(&self, py: Python<'_>, raw: &[Feed], inputs: &[usize]) -> PyResult<Vec<Tensor>> {
        let bad = |m: String| Failure::new(Kind::InvalidArgument, m).into_pyerr(py);
        if raw.len() != inputs.len() {
            return Err(bad(format!(
                "expected {} value(s), got {}",
                inputs.len(),
                raw.len()
            )));
        }
        raw.iter()
            .zip(inputs)
            .map(|(feed, &i)| {
                let want = self.feed_dtypes.get(i).copied();
                arrays::tensor_of(py, feed, want, &format!("{i}"), true)
            })
            .collect()
    }

    fn with_loop<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut DecodeLoop) -> Result<T, graphrw::exec::ExecError> + Send,
    ) -> PyResult<T> {
        detached(py, || {
            let mut inner = self
                .inner
                .lock()
                .map_err(|_| Failure::new(Kind::Internal, "the loop's lock was poisoned"))?;
            f(&mut inner).map_err(|e| match e {
                graphrw::exec::ExecError::Input { .. } => Failure::new(Kind::InvalidArgument, e),
                e => Failure::new(Kind::Run, e),
            })
        })
    }
}

#[pymethods]
impl Loop {
    /// The pairs fed back: `(input index, output index, cache axis or None)`.
    fn pairs(&self) -> PyResult<Vec<(usize, usize, Option<usize>)>> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("poisoned"))?;
        Ok(inner
            .pairs()
            .iter()
            .map(|p| (p.past, p.present, p.axis))
            .collect())
    }

    /// (Re)starts the loop from these caches, one per pair in order.
    fn start(&self, py: Python<'_>, caches: Vec<Feed>) -> PyResult<()> {
        let inputs: Vec<usize> = self.pairs()?.iter().map(|p| p.0).collect();
        let tensors = self.tensors(py, &caches, &inputs)?;
        self.with_loop(py, move |l| l.start(&tensors))
    }

    /// One step on the inputs that are not caches, in order; the outputs that are not.
    fn step(&self, py: Python<'_>, feeds: Vec<Feed>) -> PyResult<Vec<Array>> {
        let pasts: Vec<usize> = self.pairs()?.iter().map(|p| p.0).collect();
        let inputs: Vec<usize> = (0..self.feed_dtypes.len())
            .filter(|i| !pasts.contains(i))
            .collect();
        let tensors = self.tensors(py, &feeds, &inputs)?;
        let outputs = self.with_loop(py, move |l| Ok(l.step(&tensors)?.0))?;
        Ok(outputs.into_iter().map(Array::exported).collect())
    }

    /// Pair `k`'s cache as the next step reads it (a copy).
    fn cache(&self, py: Python<'_>, k: usize) -> PyResult<Array> {
        let t = self.with_loop(py, move |l| l.cache(k))?;
        Ok(Array::exported(t))
    }

    /// Pair `k`'s cache length (`None` for a pair fed back whole, or before `start`).
    fn cache_len(&self, k: usize) -> PyResult<Option<usize>> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("poisoned"))?;
        Ok(inner.cache_len(k))
    }
}
