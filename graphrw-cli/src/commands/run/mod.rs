//! `graphrw run MODEL_DIR [--model FILE] [--executors default|reference] [--repeat N]
//! [--compare] [--profile] [--paced]`: run a model on its ONNX test data and compare with
//! the expected outputs.
//!
//! The fast path is the default: the graph is optimised ([`graphrw::rules::optimize`]:
//! attention fusion, causal masks, generated kernels) and planned on
//! [`graphrw::exec::default_stack`]; `--executors reference` runs the graph as loaded on
//! the reference kernels. The stack is chosen in one place ([`executor_stack`]), so
//! another device's stack slots in beside these two.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use graphrw::exec::{self, Executor, Plan};
use graphrw::onnx::TensorPbChunks;
use graphrw::{DType, Graph, Tensor};

use super::CmdResult;

/// Absolute tolerance of f32 and f64 outputs.
pub const ATOL: f64 = 1e-4;
/// Relative tolerance of f32 and f64 outputs.
pub const RTOL: f64 = 1e-3;

/// The `(absolute, relative)` tolerance an output of `dtype` is held to. A model in
/// f16 or bf16 rounds to its type (11 or 8 significant bits) after every op, so its
/// outputs are held to a few units in the last place of their type instead: f16 to
/// 2 ulps of 1 absolute and 10 ulps relative (`2e-3`, `1e-2`), bf16 likewise (`1.6e-2`,
/// `8e-2`). Every other dtype gets [`ATOL`] and [`RTOL`].
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (2e-3, 1e-2),
        DType::BF16 => (1.6e-2, 8e-2),
        _ => (ATOL, RTOL),
    }
}

/// How far one output is from the expected one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Error {
    /// Largest `|got - want|`.
    pub max_abs: f64,
    /// Largest `|got - want| / |want|` over nonzero `want`.
    pub max_rel: f64,
    /// True when every element is within `ATOL + RTOL * |want|`.
    pub ok: bool,
}

/// The running [`Error`] of a comparison, element by element.
struct Differences {
    atol: f64,
    rtol: f64,
    error: Error,
}

impl Differences {
    /// A comparison with the tolerance of `dtype`.
    fn new(dtype: DType) -> Differences {
        let (atol, rtol) = tolerance(dtype);
        Differences {
            atol,
            rtol,
            error: Error {
                ok: true,
                ..Error::default()
            },
        }
    }

    /// Counts one element (NaN matches NaN).
    fn add(&mut self, g: f64, w: f64) {
        let e = &mut self.error;
        if g.is_nan() && w.is_nan() {
            return;
        }
        let d = (g - w).abs();
        if d.is_nan() {
            e.ok = false;
            e.max_abs = f64::INFINITY;
            return;
        }
        e.max_abs = e.max_abs.max(d);
        if w != 0.0 {
            e.max_rel = e.max_rel.max(d / w.abs());
        }
        if d > self.atol + self.rtol * w.abs() {
            e.ok = false;
        }
    }
}

/// The shape mismatch of `got` against `want`, if any.
fn shape_mismatch(got: &[usize], want: &[usize]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    Err(format!("shape {got:?}, expected {want:?}"))
}

/// Compares `got` with `want` elementwise (NaN matches NaN).
pub fn compare(got: &Tensor, want: &Tensor) -> Result<Error, String> {
    shape_mismatch(got.shape(), want.shape())?;
    let mut diff = Differences::new(want.dtype());
    // Element by element, in place: two f64 copies of GPT-2's logits were 100 MB, a
    // sixth of `graphrw run`'s peak on it.
    for (g, w) in got.iter_f64().zip(want.iter_f64()) {
        diff.add(g, w);
    }
    Ok(diff.error)
}

/// [`compare`] against a reference file read chunk by chunk
/// ([`graphrw::onnx::open_tensor_pb`]): the reference is never held whole.
pub fn compare_chunks(got: &Tensor, want: &TensorPbChunks) -> Result<Error, String> {
    shape_mismatch(got.shape(), want.shape())?;
    let mut diff = Differences::new(want.dtype());
    let mut got_values = got.iter_f64();
    want.for_each_chunk(&mut |chunk| {
        // The chunk first: `zip` stops on it without taking an element of `got`.
        for (w, g) in chunk.iter_f64().zip(got_values.by_ref()) {
            diff.add(g, w);
        }
    })
    .map_err(|e| e.to_string())?;
    Ok(diff.error)
}

/// Files `prefix_N.pb` of `dir`, in order of N.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("{e} (folder {})", super::short_path(dir)))?;
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name
                .strip_prefix(prefix)?
                .strip_suffix(".pb")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// The `test_data_set_*` folders of `dir`, sorted.
pub fn test_sets(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("{e} (folder {})", super::short_path(dir)))?;
    let mut sets: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("test_data_set_")
                && e.path().is_dir()
        })
        .map(|e| e.path())
        .collect();
    sets.sort();
    Ok(sets)
}

/// Which executor stack `run` plans the model on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Executors {
    /// The fast path: the graph optimised by the built-in rules, then the generated
    /// fused kernels, the fused attention kernels, the tile executor and the reference
    /// kernels ([`graphrw::exec::default_stack`]).
    Default,
    /// The graph as loaded, on the reference kernels alone.
    Reference,
}

impl Executors {
    /// The name shown in the output.
    pub fn label(self) -> &'static str {
        match self {
            Executors::Default => "default",
            Executors::Reference => "reference",
        }
    }

    /// Whether this stack runs the optimised graph.
    fn optimizes(self) -> bool {
        self == Executors::Default
    }
}

/// Options of `graphrw run`.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// The stack whose outputs are checked against the test data.
    pub executors: Executors,
    /// Timed runs per test data set (the best is reported); at least 1.
    pub repeat: usize,
    /// Also run the other stack and print the max difference between the two.
    pub compare: bool,
    /// Print the best run's time per op (see [`profile_lines`]).
    pub profile: bool,
    /// Print `ready` once planned, then wait for a line on stdin before each timed run
    /// and print `run N T ms` after it, until `repeat` runs or the end of stdin.
    pub paced: bool,
    /// The options the plans' kernels run with (the command's come from the
    /// environment, see [`super::env`]).
    pub kernel: graphrw::KernelOptions,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            executors: Executors::Default,
            repeat: 1,
            compare: false,
            profile: false,
            paced: false,
            kernel: graphrw::KernelOptions::default(),
        }
    }
}

/// The executor stack of `executors`.
pub fn executor_stack(executors: Executors) -> Vec<Arc<dyn Executor>> {
    match executors {
        Executors::Default => exec::default_stack(),
        Executors::Reference => exec::reference_stack(),
    }
}

/// The model planned for one stack (optimised first when the stack wants it).
struct Prepared {
    executors: Executors,
    plan: Plan,
}

/// Optimises a copy of `graph` if `executors` asks for it (a failing rewrite is
/// reported and the graph run as loaded) and plans it.
fn prepare(
    graph: &Graph,
    executors: Executors,
    kernel: graphrw::KernelOptions,
) -> Result<Prepared, String> {
    let label = executors.label();
    let mut g = graph.clone();
    if executors.optimizes() {
        match graphrw::rules::optimize(&mut g) {
            Ok(done) => println!("[{label}] {done}"),
            Err(e) => {
                println!("[{label}] optimisation failed, running the model as loaded: {e}");
                g = graph.clone();
            }
        }
    }
    let plan = exec::plan_with(&g, &executor_stack(executors), kernel)
        .map_err(|e| format!("planning on the {label} stack: {e}"))?;
    Ok(Prepared { executors, plan })
}

/// What the timed runs of one plan gave.
struct Timed {
    outputs: Vec<Tensor>,
    /// Runs made (fewer than asked when `--paced` reached the end of stdin).
    runs: usize,
    best: Duration,
    peak_live_bytes: usize,
    /// Time and calls per op in the best run.
    per_op: BTreeMap<&'static str, (Duration, usize)>,
}

/// `--paced`: a bench that alternates graphrw with another runtime run by run (so that
/// each pair of runs sees the machine in the same state) starts each run by writing a
/// line to stdin, and reads the run's time back from stdout.
///
/// Prints `ready` once the model is planned and its inputs read, then, for each line
/// read, runs once and prints `run N T ms`. Ends after `repeat` runs or at the end of
/// stdin, whichever comes first (at least one run).
#[derive(Debug)]
struct Pace {
    runs: usize,
}

impl Pace {
    /// Announces that the runs can start.
    fn start() -> Pace {
        println!("ready");
        flush_stdout();
        Pace { runs: 0 }
    }

    /// Waits for the go of the next run; false at the end of stdin (after one run).
    fn next(&mut self) -> Result<bool, String> {
        let mut line = String::new();
        let read = std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| format!("--paced: reading stdin: {e}"))?;
        Ok(read > 0 || self.runs == 0)
    }

    /// Reports one run's time.
    fn done(&mut self, time: Duration) {
        self.runs += 1;
        println!("run {} {:.3} ms", self.runs, time.as_secs_f64() * 1e3);
        flush_stdout();
    }
}

/// Flushes stdout for a reader waiting on a line (a closed pipe ends the command, as
/// [`super::end_quietly_on_closed_stdout`] says).
fn flush_stdout() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

/// Runs `plan` `repeat` times (at least once; each kernel call timed when `profile`;
/// each run started by a line on stdin when `paced`, see [`Pace`]); the last outputs,
/// the best time, the largest peak and the best run's time per op.
fn timed(
    plan: &Plan,
    inputs: &[Tensor],
    repeat: usize,
    (profile, paced): (bool, bool),
) -> Result<Timed, String> {
    let mut best = Duration::MAX;
    let mut peak = 0;
    let mut outputs = Vec::new();
    let mut per_op = BTreeMap::new();
    let mut pace = paced.then(Pace::start);
    let mut runs = 0;
    for _ in 0..repeat.max(1) {
        if let Some(pace) = pace.as_mut() {
            if !pace.next()? {
                break;
            }
        }
        // The last run's outputs go back to the plan before the next run: held through
        // it, they raised the peak by their size; dropped, the next run faulted their
        // pages in afresh.
        plan.recycle(std::mem::take(&mut outputs));
        let (out, report) = if profile {
            plan.run_profiled(inputs)
        } else {
            plan.run(inputs)
        }
        .map_err(|e| e.to_string())?;
        runs += 1;
        if let Some(pace) = pace.as_mut() {
            pace.done(report.total);
        }
        if report.total < best {
            best = report.total;
            per_op = report.per_op;
        }
        peak = peak.max(report.peak_live_bytes);
        outputs = out;
    }
    Ok(Timed {
        outputs,
        runs,
        best,
        peak_live_bytes: peak,
        per_op,
    })
}

/// The `--profile` table: one line per op (time in ms, share of the run, calls),
/// largest time first, then the time spent outside kernels (the interpreter's own
/// bookkeeping, frees, checks).
pub fn profile_lines(
    per_op: &BTreeMap<&'static str, (Duration, usize)>,
    total: Duration,
) -> Vec<String> {
    let mut rows: Vec<(&str, Duration, usize)> =
        per_op.iter().map(|(op, &(t, n))| (*op, t, n)).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let total_s = total.as_secs_f64().max(1e-12);
    let in_kernels: Duration = rows.iter().map(|r| r.1).sum();
    let mut lines = vec![format!(
        "  {:<40} {:>10} {:>7} {:>6}",
        "op", "ms", "share", "calls"
    )];
    let mut line = |name: &str, t: Duration, calls: String| {
        lines.push(format!(
            "  {name:<40} {:>10.3} {:>6.1}% {calls:>6}",
            t.as_secs_f64() * 1e3,
            100.0 * t.as_secs_f64() / total_s
        ))
    };
    for (op, t, n) in rows {
        line(op, t, n.to_string());
    }
    line(
        "(outside kernels)",
        total.saturating_sub(in_kernels),
        String::new(),
    );
    lines
}

/// The `--profile` lines on products by a constant weight: each shape's kernel, calls,
/// time and rate (over every run, warm-up included) with its share of this CPU's FMA
/// peak ([`probe`](graphrw::kernels::cpu::probe)), then each measured choice with its
/// candidates' rates on the sample they were timed on.
pub fn product_lines(
    chooser: &graphrw::kernels::cpu::choice::ProductChooser,
    threads: usize,
) -> Vec<String> {
    use graphrw::kernels::cpu::{packed_prefetch, Isa};
    let stats = chooser.stats();
    if stats.is_empty() {
        return Vec::new();
    }
    let peak = graphrw::kernels::cpu::probe::fma_peak_gflops(threads, 2_000_000);
    let mut lines = vec![match peak {
        Some(p) => format!("  products (FMA peak {p:.1} GFLOP/s on {threads} thread(s)):"),
        None => "  products (no FMA probe on this CPU):".to_string(),
    }];
    for ((m, k, n), kernel, st) in stats {
        let share = peak.map_or(String::new(), |p| {
            format!(" {:>5.1}% of peak", 100.0 * st.gflops() / p)
        });
        lines.push(format!(
            "  {:<40} {:>10.3} {:>6} calls {:>7.1} GFLOP/s{share}",
            format!("{m}x{k}x{n} {kernel}"),
            st.time.as_secs_f64() * 1e3,
            st.calls,
            st.gflops()
        ));
    }
    for isa in [Isa::Avx512, Isa::Avx2Fma] {
        if let Some(p) = packed_prefetch::measured_so_far(isa) {
            lines.push(format!(
                "  packed {isa:?} kernel prefetches the next weight block: {} (measured {:.2}x as fast with)",
                if p.on { "yes" } else { "no" },
                p.speedup
            ));
        }
    }
    for (key, chosen) in chooser.choices() {
        let rates: Vec<String> = chosen
            .candidates
            .iter()
            .map(|(kernel, g)| format!("{kernel} {g:.1}"))
            .collect();
        lines.push(format!(
            "  chose {} for {key} (GFLOP/s: {}; measured in {:.2} ms)",
            chosen.kernel,
            rates.join(", "),
            chosen.cost.as_secs_f64() * 1e3
        ));
    }
    lines
}

/// The `--profile` lines on the fused attention: each kind of shape's measured choice
/// with every candidate's time on its first call.
pub fn sdpa_choice_lines(
    chooser: &graphrw::kernels::fused::sdpa::choice::SdpaChooser,
) -> Vec<String> {
    chooser
        .choices()
        .into_iter()
        .map(|(key, chosen)| {
            let times: Vec<String> = chosen
                .candidates
                .iter()
                .map(|(kernel, t)| format!("{kernel:?} {:.3} ms", t.as_secs_f64() * 1e3))
                .collect();
            format!(
                "  attention: chose {:?} for {key} ({})",
                chosen.kernel,
                times.join(", ")
            )
        })
        .collect()
}

/// The `--profile` lines on planning: how many nodes no executor took and ran as
/// their op's decomposition, then each such node with every executor's refusal.
pub fn fallback_lines(plan: &Plan) -> Vec<String> {
    let fallbacks = plan.fallbacks();
    let mut lines = vec![format!(
        "{} node(s) ran as their decomposition (no executor took them)",
        fallbacks.len()
    )];
    for f in fallbacks {
        lines.push(format!("  {} (`{}`)", f.node, f.op));
        lines.extend(f.refusals.iter().map(|r| format!("    refused by {r}")));
    }
    lines
}

/// The largest `|a - b|` over all outputs (NaN against NaN counts as equal; a NaN
/// against a number, or a shape mismatch, as infinite).
fn max_difference(a: &[Tensor], b: &[Tensor]) -> f64 {
    let mut worst = if a.len() == b.len() {
        0.0f64
    } else {
        f64::INFINITY
    };
    for (x, y) in a.iter().zip(b) {
        if x.shape() != y.shape() {
            return f64::INFINITY;
        }
        for (p, q) in x.iter_f64().zip(y.iter_f64()) {
            if p.is_nan() && q.is_nan() {
                continue;
            }
            let d = (p - q).abs();
            worst = worst.max(if d.is_nan() { f64::INFINITY } else { d });
        }
    }
    worst
}

/// One line of timing: best time over the runs and peak live memory.
fn timing_line(set_name: &str, executors: Executors, t: &Timed) -> String {
    format!(
        "{set_name} [{}]: best of {} {:.3} ms, peak live {:.1} MiB",
        executors.label(),
        t.runs,
        t.best.as_secs_f64() * 1e3,
        t.peak_live_bytes as f64 / (1024.0 * 1024.0)
    )
}

/// Runs the model on every test data set and prints the errors, times and peak memory.
pub fn run(model_dir: &Path, model: Option<&Path>, opts: &RunOptions) -> CmdResult {
    let progress = std::io::stderr().is_terminal();
    let model_path = model
        .map(Path::to_path_buf)
        .unwrap_or_else(|| model_dir.join("model.onnx"));
    if progress {
        eprintln!("loading {}…", model_path.display());
    }
    let graph = super::load(&model_path)?;
    let sets = test_sets(model_dir)?;
    if sets.is_empty() {
        return Err(format!(
            "no test_data_set_* folders in {}",
            super::short_path(model_dir)
        )
        .into());
    }
    println!(
        "model: {} ({} nodes)",
        model_path.display(),
        graph.node_count()
    );
    println!("{}", graphrw::kernels::cpu::machine_line(opts.kernel.isa()));
    let main = prepare(&graph, opts.executors, opts.kernel)?;
    if opts.profile {
        for l in fallback_lines(&main.plan) {
            println!("[{}] {l}", main.executors.label());
        }
    }
    let other = if opts.compare {
        let o = match opts.executors {
            Executors::Default => Executors::Reference,
            Executors::Reference => Executors::Default,
        };
        Some(prepare(&graph, o, opts.kernel)?)
    } else {
        None
    };
    let mut all_ok = true;
    for set in sets {
        let set_name = set
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let inputs: Vec<Tensor> = numbered(&set, "input_")?
            .iter()
            .map(|p| graphrw::onnx::read_tensor_pb(p).map(|(_, t)| t))
            .collect::<Result<_, _>>()?;
        // The reference outputs are read after the timed runs, one at a time and chunk
        // by chunk, so the check adds little to the run's peak memory.
        let expected = numbered(&set, "output_")?;
        if inputs.len() != graph.inputs().len() {
            return Err(format!(
                "{set_name}: {} input files for {} graph inputs",
                inputs.len(),
                graph.inputs().len()
            )
            .into());
        }
        if progress {
            eprintln!("running {set_name}…");
        }
        graphrw::kernels::cpu::choice::global().clear_stats();
        let t = timed(&main.plan, &inputs, opts.repeat, (opts.profile, opts.paced))
            .map_err(|e| format!("{set_name} [{}]: {e}", main.executors.label()))?;
        println!("{}", timing_line(&set_name, main.executors, &t));
        if opts.profile {
            for l in profile_lines(&t.per_op, t.best) {
                println!("{l}");
            }
            let threads = opts
                .kernel
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            for l in product_lines(graphrw::kernels::cpu::choice::global(), threads) {
                println!("{l}");
            }
            for l in sdpa_choice_lines(graphrw::kernels::fused::sdpa::choice::global()) {
                println!("{l}");
            }
        }
        if let Some(other) = &other {
            let u = timed(&other.plan, &inputs, opts.repeat, (false, false))
                .map_err(|e| format!("{set_name} [{}]: {e}", other.executors.label()))?;
            println!("{}", timing_line(&set_name, other.executors, &u));
            println!(
                "{set_name}: max |{} - {}| {:.3e}, time {} / {} {}",
                main.executors.label(),
                other.executors.label(),
                max_difference(&t.outputs, &u.outputs),
                main.executors.label(),
                other.executors.label(),
                significant(t.best.as_secs_f64() / u.best.as_secs_f64().max(1e-12))
            );
        }
        let outputs = t.outputs;
        if outputs.len() < expected.len() {
            return Err(format!(
                "{set_name}: the model gives {} outputs, the test data expects {}",
                outputs.len(),
                expected.len()
            )
            .into());
        }
        for (k, (path, got)) in expected.iter().zip(&outputs).enumerate() {
            let want = graphrw::onnx::open_tensor_pb(path)?;
            let label = if want.name().is_empty() {
                format!("output {k}")
            } else {
                format!("output {k} `{}`", want.name())
            };
            all_ok &= print_comparison(&label, compare_chunks(got, &want));
        }
    }
    verdict(all_ok)
}

/// Prints one output's comparison with its expected value on one line; true when it
/// is within tolerance.
pub fn report_output(label: &str, got: &Tensor, want: &Tensor) -> bool {
    print_comparison(label, compare(got, want))
}

/// Prints a comparison's line (see [`report_output`]); true when within tolerance.
fn print_comparison(label: &str, comparison: Result<Error, String>) -> bool {
    match comparison {
        Ok(e) => {
            println!(
                "  {label}: max abs error {:.3e}, max rel error {:.3e}: {}",
                e.max_abs,
                e.max_rel,
                if e.ok { "ok" } else { "BEYOND TOLERANCE" }
            );
            e.ok
        }
        Err(m) => {
            println!("  {label}: {m}");
            false
        }
    }
}

/// The closing line and exit code of a run: success when every output was within
/// tolerance.
pub fn verdict(all_ok: bool) -> CmdResult {
    if all_ok {
        println!("all outputs within tolerance (abs {ATOL:e} + rel {RTOL:e}; f16/bf16 outputs: a few ulps of their type)");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("some outputs are beyond tolerance (abs {ATOL:e} + rel {RTOL:e}; f16/bf16 outputs: a few ulps of their type)");
        Ok(ExitCode::FAILURE)
    }
}

/// `x` with three significant digits (`0.912`, `12.4`, `3.51e-3`): a ratio of times
/// far apart (a first run that measures its kernels) does not print as `0.00`.
fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (0.01..1000.0).contains(&x.abs()) {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

#[cfg(test)]
mod tests;
