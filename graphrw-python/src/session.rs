//! `graphrw._native.Session` and `Outputs`: a model loaded, optimised, planned and
//! warmed up at construction (as onnxruntime prepares its session), and run on plain
//! values; what `graphrw.InferenceSession` and its `IOBinding` build on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graphrw::exec::{self, ExecError, Executor, Plan, RunReport};
use graphrw::{rules, DType, Graph, KernelOptions, Tensor, Value};
use graphrw_cli::commands;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrays::{self, Array, Feed};
use crate::Source;
use crate::{detached, io_info, numpy_name, Failure, IoInfo, Kind, Outcome};

/// How much of graphrw's pipeline a session applies before planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The default pipeline (attention fusion, causal masks, generated kernels), then
    /// the default stack (onnxruntime's `ORT_ENABLE_*` levels).
    Rewrite,
    /// No rewrite; the default stack (`ORT_DISABLE_ALL`).
    AsLoaded,
    /// No rewrite; the reference kernels (`optimize=False`, `graphrw run --executors
    /// reference`).
    Reference,
}

impl Level {
    fn parse(name: &str) -> Outcome<Level> {
        match name {
            "all" => Ok(Level::Rewrite),
            "none" => Ok(Level::AsLoaded),
            "reference" => Ok(Level::Reference),
            other => Err(Failure::new(
                Kind::InvalidArgument,
                format!("unknown optimisation level `{other}` (all, none or reference)"),
            )),
        }
    }
}

/// Where the plan's kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Device {
    Cpu,
    /// A CUDA device (builds with the `cuda` feature).
    Cuda(usize),
}

impl Device {
    fn parse(name: &str) -> Outcome<Device> {
        let bad = || {
            Failure::new(
                Kind::InvalidArgument,
                format!("unknown device `{name}` (cpu, cuda or cuda:N)"),
            )
        };
        match name {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match name.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Device::Cuda(n)),
                _ => Err(bad()),
            },
        }
    }

    fn name(self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Cuda(n) => format!("cuda:{n}"),
        }
    }
}

/// Whether this build can run plans on CUDA devices (the `cuda` feature).
pub(crate) const HAS_CUDA: bool = cfg!(feature = "cuda");

/// The executor stack for `level` on `device`.
fn stack(level: Level, device: Device) -> Outcome<Vec<Arc<dyn Executor>>> {
    match (device, level) {
        (Device::Cpu, Level::Reference) => Ok(exec::reference_stack()),
        (Device::Cpu, _) => Ok(exec::default_stack()),
        (Device::Cuda(ordinal), _) => cuda_stack(ordinal),
    }
}

#[cfg(feature = "cuda")]
fn cuda_stack(ordinal: usize) -> Outcome<Vec<Arc<dyn Executor>>> {
    let device_err =
        |e: graphrw::kernels::KernelError| Failure::new(Kind::Run, format!("cuda:{ordinal}: {e}"));
    // NVRTC from `GRAPHRW_NVRTC_LIB`, named before the first compile (as the CLI does).
    graphrw::kernels::cuda::CudaDevice::get_with(ordinal, &commands::env::cuda_options_from_env())
        .map_err(device_err)?;
    exec::cuda_stack(ordinal).map_err(device_err)
}

#[cfg(not(feature = "cuda"))]
fn cuda_stack(ordinal: usize) -> Outcome<Vec<Arc<dyn Executor>>> {
    Err(Failure::new(
        Kind::InvalidArgument,
        format!(
            "cuda:{ordinal}: this graphrw was built without CUDA (build the package with \
             the `cuda` feature)"
        ),
    ))
}

/// A message for the session's log, with onnxruntime's severities: 0 verbose, 1 info,
/// 2 warning, 3 error.
type Note = (u8, String);

/// What the session's construction was asked for, past the model.
struct SessionArgs {
    level: Level,
    /// Threads for the plan's kernels; 0: `GRAPHRW_THREADS`, else one per core.
    threads: usize,
    device: Device,
    /// Where to write the model as planned (after the rewrite), as onnxruntime's
    /// `optimized_model_filepath`.
    optimized_model_path: Option<PathBuf>,
    /// Run the plan once at construction on zeros.
    warmup: bool,
    /// The sizes symbolic input dims take in the warm-up run (1 where not named).
    dims: HashMap<String, u64>,
}

/// A model planned on graphrw's default (or reference, or CUDA) stack (see
/// `graphrw.InferenceSession`).
#[pyclass(module = "graphrw._native", frozen)]
pub(crate) struct Session {
    plan: Arc<Plan>,
    /// The graph inputs as the caller feeds them.
    inputs: Vec<IoInfo>,
    /// The dtype each input is fed to the plan in.
    feed_dtypes: Vec<DType>,
    outputs: Vec<IoInfo>,
    /// What the optimiser did (`nodes: a -> b` and the fused ops), or why it failed.
    optimized: String,
    /// Seconds spent loading, optimising, planning and warming up.
    timings: Vec<(&'static str, f64)>,
    notes: Vec<Note>,
    warmup_error: Option<String>,
    device: Device,
    options: KernelOptions,
}

/// The kernel options: the `GRAPHRW_*` variables (as the `graphrw` command reads them),
/// then `threads` where above 0.
fn kernel_options(threads: usize) -> Outcome<KernelOptions> {
    let options =
        commands::env::options_from_env().map_err(|e| Failure::new(Kind::InvalidArgument, e))?;
    Ok(if threads > 0 {
        options.with_threads(threads)
    } else {
        options
    })
}

/// Runs `plan` once on zeros shaped as the graph's inputs, symbolic dims as `dims` names
/// them (else 1, or the symbol's lower bound, [`Graph::bounds`]), so that the first real run finds weights packed, kernels chosen for
/// those shapes and buffers in the pool.
fn warm_up(plan: &Plan, graph: &Graph, dims: &HashMap<String, u64>) -> Result<(), String> {
    let bounds = graph.bounds();
    let env = |name: &str| {
        Some(
            dims.get(name)
                .map_or(bounds.lower(name).max(1), |&n| n as i64),
        )
    };
    let mut inputs = Vec::new();
    for &id in graph.inputs() {
        let v = Value::from(id);
        let meta = graph.meta(v).map_err(|e| e.to_string())?;
        let name = graph.node(id).and_then(|n| n.name()).unwrap_or("?");
        if !graph.node(id).is_some_and(|n| n.is_known(0)) {
            return Err(format!("input `{name}` has a type graphrw does not model"));
        }
        let shape = meta
            .shape
            .eval(&env)
            .map_err(|e| format!("input `{name}`: {e}"))?;
        inputs.push(Tensor::zeros(meta.dtype, &shape));
    }
    let (outputs, _) = plan.run(&inputs).map_err(|e| e.to_string())?;
    plan.recycle(outputs);
    Ok(())
}

/// The first line of a message (plan errors list each executor's refusal below it).
fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// Loads, optimises, plans and warms up a model.
fn prepare(src: &Source<'_>, args: &SessionArgs) -> Outcome<Session> {
    let start = Instant::now();
    let options = kernel_options(args.threads)?;
    let loaded = src.load()?;
    let load_s = start.elapsed().as_secs_f64();
    let mut inputs = Vec::new();
    let mut feed_dtypes = Vec::new();
    for &id in loaded.inputs() {
        let name = loaded.node(id).and_then(|n| n.name()).unwrap_or("?");
        inputs.push(io_info(&loaded, name, Value::from(id))?);
        feed_dtypes.push(loaded.meta(Value::from(id)).map_or(DType::F32, |m| m.dtype));
    }
    let mut outputs = Vec::new();
    for (name, &v) in loaded.output_names().iter().zip(loaded.outputs()) {
        outputs.push(io_info(&loaded, name, v)?);
    }
    let mut notes: Vec<Note> = Vec::new();
    let t = Instant::now();
    let (graph, optimized) = if args.level == Level::Rewrite {
        let mut g = loaded.clone();
        match rules::optimize(&mut g) {
            Ok(done) => (g, done.to_string()),
            Err(e) => {
                let why = format!("optimisation failed, running the model as loaded: {e}");
                notes.push((2, why.clone()));
                (loaded, why)
            }
        }
    } else {
        (loaded, "not optimised".to_string())
    };
    let optimize_s = t.elapsed().as_secs_f64();
    notes.push((1, format!("graphrw optimize: {}", optimized.trim_end())));
    if let Some(path) = &args.optimized_model_path {
        let saved = graphrw::onnx::save_with(&graph, path, &graphrw::onnx::SaveOptions::default())
            .map_err(|e| Failure::new(Kind::Save, e))?;
        notes.push((1, format!("optimised model written: {saved}")));
    }
    let t = Instant::now();
    let label = match (args.device, args.level) {
        (Device::Cuda(_), _) => "CUDA",
        (_, Level::Reference) => "reference",
        _ => "default",
    };
    let stack = stack(args.level, args.device)?;
    let plan = exec::plan_with(&graph, &stack, options).map_err(|e| {
        let kind = match e {
            ExecError::Options(_) => Kind::InvalidArgument,
            _ => Kind::Run,
        };
        Failure::new(kind, format!("planning on the {label} stack: {e}"))
    })?;
    let plan_s = t.elapsed().as_secs_f64();
    for f in plan.fallbacks() {
        notes.push((1, f.to_string()));
    }
    let mut per_executor: Vec<(&str, usize)> = Vec::new();
    for (_, e) in plan.assignments() {
        match per_executor.iter_mut().find(|(name, _)| *name == e) {
            Some((_, n)) => *n += 1,
            None => per_executor.push((e, 1)),
        }
    }
    let executors: Vec<String> = per_executor
        .iter()
        .map(|(e, n)| format!("{e} {n}"))
        .collect();
    notes.push((
        0,
        format!(
            "planned {} kernel nodes on the {label} stack in {:.1} ms ({})",
            plan.assignments().count(),
            plan_s * 1e3,
            executors.join(", ")
        ),
    ));
    let plan = Arc::new(plan);
    let t = Instant::now();
    let mut warmup_s = 0.0;
    let mut warmup_error = None;
    if args.warmup {
        if let Err(e) = warm_up(&plan, &graph, &args.dims) {
            let why = format!(
                "warm-up run failed (the first run does its one-time work): {}",
                first_line(&e)
            );
            notes.push((2, why.clone()));
            warmup_error = Some(why);
        }
        warmup_s = t.elapsed().as_secs_f64();
    }
    Ok(Session {
        plan,
        inputs,
        feed_dtypes,
        outputs,
        optimized,
        timings: vec![
            ("load", load_s),
            ("optimize", optimize_s),
            ("plan", plan_s),
            ("warmup", warmup_s),
            ("total", start.elapsed().as_secs_f64()),
        ],
        notes,
        warmup_error,
        device: args.device,
        options,
    })
}

/// A profiled run's times: the run's seconds and `(op, seconds, calls)` per op.
type RunProfile = (f64, Vec<(&'static str, f64, usize)>);

fn profile_of(report: &RunReport) -> RunProfile {
    (
        report.total.as_secs_f64(),
        report
            .per_op
            .iter()
            .map(|(op, (t, n)): (&&'static str, &(Duration, usize))| (*op, t.as_secs_f64(), *n))
            .collect(),
    )
}

impl Session {
    /// The feeds as tensors of the plan's input dtypes (viewing the arrays in place),
    /// checked against the inputs.
    fn tensors(&self, py: Python<'_>, feeds: &[Feed]) -> PyResult<Vec<Tensor>> {
        if feeds.len() != self.inputs.len() {
            return Err(Failure::new(
                Kind::InvalidArgument,
                format!(
                    "expected {} input(s), got {}",
                    self.inputs.len(),
                    feeds.len()
                ),
            )
            .into_pyerr(py));
        }
        feeds
            .iter()
            .enumerate()
            .map(|(k, feed)| {
                let want = self.feed_dtypes.get(k).copied();
                arrays::tensor_of(py, feed, want, &self.inputs[k].0, false)
            })
            .collect()
    }

    /// Runs the plan with the GIL released (the inputs, which may view the caller's
    /// arrays, are dropped by the caller with the GIL held).
    fn execute(
        &self,
        py: Python<'_>,
        tensors: &[Tensor],
        profile: bool,
    ) -> PyResult<(Vec<Tensor>, RunReport)> {
        let plan = &self.plan;
        detached(py, || {
            let run = if profile {
                plan.run_profiled(tensors)
            } else {
                plan.run(tensors)
            };
            run.map_err(|e| match e {
                ExecError::Input { .. } => Failure::new(Kind::InvalidArgument, e),
                e => Failure::new(Kind::Run, e),
            })
        })
    }
}

#[pymethods]
impl Session {
    /// Loads, optimises (`level`: `all`, `none` or `reference`), plans on `device`
    /// (`cpu`, `cuda:N`) with `threads` (0: `GRAPHRW_THREADS`, else one per core) and,
    /// with `warmup`, runs once on zeros (symbolic dims sized by `dims`, else 1), the
    /// model loaded with the lower bounds `assume` gives (`seq>=1`).
    #[new]
    #[pyo3(signature = (model, level="all", threads=0, device="cpu", optimized_model_path=None, warmup=true, dims=HashMap::new(), assume=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        level: &str,
        threads: usize,
        device: &str,
        optimized_model_path: Option<PathBuf>,
        warmup: bool,
        dims: HashMap<String, u64>,
        assume: Vec<String>,
    ) -> PyResult<Session> {
        let src = Source::extract(model)?;
        let args = SessionArgs {
            level: Level::parse(level).map_err(|f| f.into_pyerr(py))?,
            threads,
            device: Device::parse(device).map_err(|f| f.into_pyerr(py))?,
            optimized_model_path,
            warmup,
            dims,
        };
        let bounds = super::bounds_of(&assume).map_err(|f| f.into_pyerr(py))?;
        detached(py, || super::assuming(&bounds, || prepare(&src, &args)))
    }

    /// The graph inputs: `(name, numpy dtype, ort type, dims)`.
    fn inputs(&self) -> Vec<IoInfo> {
        self.inputs.clone()
    }

    /// The graph outputs: `(name, numpy dtype, ort type, dims)`.
    fn outputs(&self) -> Vec<IoInfo> {
        self.outputs.clone()
    }

    /// The numpy dtype each input is fed to the plan in (`int32` for a `uint8` input
    /// widened at load).
    fn feed_dtypes(&self) -> Vec<&'static str> {
        self.feed_dtypes.iter().map(|&d| numpy_name(d)).collect()
    }

    /// What the optimiser did, as `graphrw run` prints it.
    fn optimized(&self) -> String {
        self.optimized.clone()
    }

    /// Seconds spent at construction: `load`, `optimize`, `plan`, `warmup`, `total`.
    fn timings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.timings {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The construction's messages, `(severity, text)` with onnxruntime's severities
    /// (0 verbose, 1 info, 2 warning, 3 error).
    fn notes(&self) -> Vec<Note> {
        self.notes.clone()
    }

    /// Why the warm-up run failed, if it did.
    fn warmup_error(&self) -> Option<String> {
        self.warmup_error.clone()
    }

    /// The device the plan runs on (`cpu`, `cuda:0`).
    fn device(&self) -> String {
        self.device.name()
    }

    /// Threads for the plan's kernels (`None`: one per core).
    fn threads(&self) -> Option<usize> {
        self.options.threads
    }

    /// Runs the plan on `feeds`, one `(numpy dtype name, shape, address, array)` per
    /// graph input in order (each in its `feed_dtypes` dtype, read in place); returns
    /// every output as an [`Array`] over its own buffer (handed over, not copied, unless
    /// graphrw still shares it), and with `profile` the run's times.
    #[pyo3(signature = (feeds, profile=false))]
    fn run(
        &self,
        py: Python<'_>,
        feeds: Vec<Feed>,
        profile: bool,
    ) -> PyResult<(Vec<Array>, Option<RunProfile>)> {
        let tensors = self.tensors(py, &feeds)?;
        let (outputs, report) = self.execute(py, &tensors, profile)?;
        // An output that views an input (an identity) is copied here, while the input
        // is still held.
        let arrays = outputs.into_iter().map(Array::exported).collect();
        drop(tensors);
        Ok((arrays, profile.then(|| profile_of(&report))))
    }

    /// Where a run on `feeds` reads each value: the address of the first element of the
    /// tensor made from it (the array's own where it is read in place, a copy's
    /// otherwise). A check for tests: `run` makes its tensors the same way.
    fn feed_addresses(&self, py: Python<'_>, feeds: Vec<Feed>) -> PyResult<Vec<usize>> {
        Ok(self
            .tensors(py, &feeds)?
            .iter()
            .map(Tensor::address)
            .collect())
    }

    /// A generation loop over this session's plan (`graphrw.DecodeLoop`): the pairs of
    /// `present*` outputs and `past*` inputs found by name.
    fn decode_loop(&self, py: Python<'_>) -> PyResult<crate::decode_loop::Loop> {
        crate::decode_loop::Loop::new(Arc::clone(&self.plan), self.feed_dtypes.clone())
            .map_err(|f| f.into_pyerr(py))
    }

    /// [`Session::run`], the outputs kept in graphrw's memory ([`Outputs`]) until
    /// copied; their buffers go back to the plan's pool when the `Outputs` is freed.
    #[pyo3(signature = (feeds, profile=false))]
    fn run_kept(
        &self,
        py: Python<'_>,
        feeds: Vec<Feed>,
        profile: bool,
    ) -> PyResult<(Outputs, Option<RunProfile>)> {
        let tensors = self.tensors(py, &feeds)?;
        let (outputs, report) = self.execute(py, &tensors, profile)?;
        // Kept past this call: an output viewing an input's array is copied.
        let kept = Outputs {
            plan: Arc::clone(&self.plan),
            tensors: outputs.into_iter().map(Tensor::into_owned).collect(),
        };
        drop(tensors);
        Ok((kept, profile.then(|| profile_of(&report))))
    }
}

/// A run's outputs held in graphrw's memory (an `IOBinding`'s bound outputs): read
/// through read-only [`Array`]s over them; the buffers no `Array` holds go back to the
/// session's pool when this is freed, for its next run to write into.
#[pyclass(module = "graphrw._native", frozen)]
pub(crate) struct Outputs {
    plan: Arc<Plan>,
    tensors: Vec<Tensor>,
}

impl Outputs {
    fn get(&self, k: usize) -> PyResult<&Tensor> {
        self.tensors.get(k).ok_or_else(|| {
            PyIndexError::new_err(format!(
                "output {k}: the run has {} output(s)",
                self.tensors.len()
            ))
        })
    }
}

#[pymethods]
impl Outputs {
    fn __len__(&self) -> usize {
        self.tensors.len()
    }

    /// Output `k`'s numpy dtype name and shape.
    fn info(&self, k: usize) -> PyResult<(&'static str, Vec<usize>)> {
        let t = self.get(k)?;
        Ok((numpy_name(t.dtype()), t.shape().to_vec()))
    }

    /// Output `k` as a read-only [`Array`] over graphrw's buffer (no copy); while it
    /// lives, the buffer stays out of the session's pool.
    fn array(&self, k: usize) -> PyResult<Array> {
        Ok(Array::shared(self.get(k)?.clone()))
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        self.plan.recycle(std::mem::take(&mut self.tensors));
    }
}

/// The model's metadata (`ModelProto`'s producer, domain, doc string, version, graph
/// name and doc string, metadata properties) as a dict; `version` is `None` where the
/// model does not set it.
#[pyfunction]
pub(crate) fn model_meta<'py>(
    py: Python<'py>,
    model: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let src = Source::extract(model)?;
    let m = detached(py, || {
        let read = match &src {
            Source::Path(p) => {
                crate::meta::from_file(p).map_err(|e| format!("{}: {e}", p.display()))
            }
            Source::Bytes(b) => crate::meta::from_bytes(b).map_err(|e| format!("model bytes: {e}")),
        };
        read.map_err(|e| Failure::new(Kind::Load, format!("reading the model's metadata: {e}")))
    })?;
    let d = PyDict::new(py);
    d.set_item("producer_name", m.producer_name)?;
    d.set_item("producer_version", m.producer_version)?;
    d.set_item("domain", m.domain)?;
    d.set_item("description", m.description)?;
    d.set_item("version", m.version)?;
    d.set_item("graph_name", m.graph_name)?;
    d.set_item("graph_description", m.graph_description)?;
    d.set_item("custom_metadata_map", m.custom)?;
    Ok(d)
}

/// Whether this build runs plans on CUDA devices.
#[pyfunction]
pub(crate) fn has_cuda() -> bool {
    HAS_CUDA
}
