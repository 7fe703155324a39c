//! One differential run: a graph before and after the rewrite, on the same random
//! inputs, compared element by element through the NaN-safe helper
//! ([`graphrw_kernels::testing::compare`]), with the counterexample a mismatch gives.

use std::fmt;
use std::sync::Arc;

use graphrw_kernels::testing::compare::{check_close_tensor, Tol};

use super::{sample, Rng};
use crate::exec::{generated_executor, plan, Executor, ReferenceCpu};
use crate::meta::DType;
use crate::{Graph, Tensor};

/// A graph on which the rewrite changed the numbers.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The inputs: name, dtype and shape.
    pub inputs: Vec<(String, DType, Vec<usize>)>,
    /// The scalar parameters the generator chose are visible in `before`; this is the
    /// graph before the rewrite, as the printer writes it.
    pub before: String,
    /// The graph after the rewrite.
    pub after: String,
    /// The output that differs.
    pub output: usize,
    /// Its dtype and shape.
    pub dtype: DType,
    /// See `dtype`.
    pub shape: Vec<usize>,
    /// What the NaN-safe comparison says about the first differing element (its flat
    /// index, both values, the difference and what was allowed).
    pub first_difference: String,
    /// The seed that generated the graph and its inputs.
    pub seed: u64,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "output {} ({} {:?}) differs after the rewrite: {}",
            self.output, self.dtype, self.shape, self.first_difference
        )?;
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|(n, d, s)| format!("{n}: {d} {s:?}"))
            .collect();
        let inputs = if inputs.is_empty() {
            "none (constants only)".to_string()
        } else {
            inputs.join(", ")
        };
        writeln!(f, "inputs: {inputs} (seed {})", self.seed)?;
        writeln!(f, "before:\n{}", self.before.trim_end())?;
        write!(f, "after:\n{}", self.after.trim_end())
    }
}

/// The default tolerance of a dtype: `|after - before| <= tol * (1 + |before|)`. The
/// half types round at every op of a decomposed graph (bf16 keeps 8 bits) where a fused
/// kernel or a reordered product rounds once or elsewhere, so their bound only catches
/// gross errors; f32 and f64 are the precise check.
pub(super) fn default_tol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-9,
        DType::F32 => 1e-4,
        DType::F16 | DType::BF16 => 1e-1,
        _ => 0.0,
    }
}

/// An executor stack.
type Stack = Vec<Arc<dyn Executor>>;

/// The stacks the two graphs run on: the reference kernels, and for the rewritten graph
/// the generated kernels first (so that a kernel's rule is checked against the kernel,
/// not against its own decomposition).
fn stacks() -> (Stack, Stack) {
    let reference: Stack = vec![Arc::new(ReferenceCpu)];
    let after: Stack = vec![Arc::new(generated_executor()), Arc::new(ReferenceCpu)];
    (reference, after)
}

/// What one comparison found.
pub(super) enum Outcome {
    /// Within tolerance; the largest scaled error.
    Same(f64),
    /// The generated graph does not run (the generator's fault: draw again).
    BeforeFails(String),
    /// The rewritten graph does not run where the original did.
    AfterFails(String),
    /// The numbers differ.
    Differs(Box<Counterexample>),
}

/// Runs `before` and `after` on random inputs drawn from `seed` and compares them.
pub(super) fn compare(before: &Graph, after: &Graph, seed: u64, tol: Option<f64>) -> Outcome {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut inputs = Vec::new();
    let mut described = Vec::new();
    for &id in before.inputs() {
        let Some(node) = before.node(id) else {
            return Outcome::BeforeFails("an input node is missing".into());
        };
        let meta = &node.outputs()[0];
        match sample::input(&mut rng, meta) {
            Ok(t) => {
                described.push((
                    node.name().unwrap_or("?").to_string(),
                    t.dtype(),
                    t.shape().to_vec(),
                ));
                inputs.push(t);
            }
            Err(e) => return Outcome::BeforeFails(e.to_string()),
        }
    }
    let (reference, generated) = stacks();
    let want = match run(before, &reference, &inputs) {
        Ok(v) => v,
        Err(e) => return Outcome::BeforeFails(e),
    };
    let got = match run(after, &generated, &inputs) {
        Ok(v) => v,
        Err(e) => return Outcome::AfterFails(e),
    };
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let t = tol.unwrap_or_else(|| default_tol(w.dtype()));
        let differs = |first_difference: String| {
            Outcome::Differs(Box::new(Counterexample {
                inputs: described.clone(),
                before: before.to_string(),
                after: after.to_string(),
                output: i,
                dtype: w.dtype(),
                shape: w.shape().to_vec(),
                first_difference,
                seed,
            }))
        };
        if g.dtype() != w.dtype() {
            return differs(format!("dtype {} where it was {}", g.dtype(), w.dtype()));
        }
        if let Err(e) = check_close_tensor(g, w, Tol::scaled(t)) {
            return differs(e);
        }
        worst = worst.max(scaled_error(g, w));
    }
    if got.len() != want.len() {
        return Outcome::AfterFails(format!(
            "{} outputs where there were {}",
            got.len(),
            want.len()
        ));
    }
    Outcome::Same(worst)
}

/// The largest `|g - w| / (1 + |w|)` over elements whose reference is finite.
fn scaled_error(got: &Tensor, want: &Tensor) -> f64 {
    got.to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .filter(|(_, w)| w.is_finite())
        .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
        .fold(0.0, f64::max)
}

fn run(
    graph: &Graph,
    stack: &[Arc<dyn Executor>],
    inputs: &[Tensor],
) -> Result<Vec<Tensor>, String> {
    let p = plan(graph, stack).map_err(|e| e.to_string())?;
    Ok(p.run(inputs).map_err(|e| e.to_string())?.0)
}
