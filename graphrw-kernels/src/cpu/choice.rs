//! Which kernel runs a product by a constant weight, chosen by measuring the
//! candidates on this CPU rather than by the machine the kernels were tuned on.
//!
//! The candidates are the `gemm` crate and the packed GEMM on each instruction set the
//! CPU has and the options allow ([`ProductKernel`]). For each product shape (depth,
//! width) and bucket of row counts ([`RowBucket`]: 1, 2–16, 17–128, more) the first
//! product of that shape times each candidate on the real operands: the same rows, a
//! few of the weight's columns ([`SAMPLE_COLUMNS`], each candidate's packing of just
//! those), each candidate run a few times and its best time kept. The fastest is kept
//! for every later product of that shape and bucket in the process ([`global`]), so a
//! shape bound only at run time (a decode step's rows) chooses on first sight, and the
//! layers of a model that share a shape share one measurement. Timing a sample of
//! columns keeps the choice's cost a fraction of one product per shape.
//!
//! [`ProductChoice`] (in [`KernelOptions::product_kernel`]) turns measuring off (the
//! fixed rule: packed from [`PackedWeight::MIN_ROWS`] rows) or pins one kernel. The
//! chooser also keeps, per shape, how long the products it chose ran
//! ([`ProductChooser::record`]), for `graphrw run --profile`.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cpu::{matmul_epilogue_with, Epilogue, GemmBackend, Isa, PackedWeight};
pub use crate::options::{ProductChoice, ProductKernel};
use crate::{DType, KernelOptions, Tensor};

/// Columns of the weight each candidate is timed on (a multiple of both packed
/// kernels' panel widths), or all of them when fewer. At 128 the sample's weight sat in
/// L2 and the choice did not follow the products in a plan, whose weights stream from
/// further out: on a 2-vCPU Xeon (family 6 model 167) Llama-width products chose the
/// AVX2 kernel on 128 columns and ran at 159-169 GFLOP/s, against 208-232 on the
/// AVX-512 kernel that 512 columns chose.
pub const SAMPLE_COLUMNS: usize = 512;

/// The most bytes of weight a sample holds: past it (a depth over 4096), fewer columns
/// than [`SAMPLE_COLUMNS`] are timed, a multiple of 64, still far past L2. Each
/// candidate holds its own packing of the sample while the candidates take turns.
pub const SAMPLE_BYTES: usize = 8 << 20;

/// The columns a sample of a weight of depth `k` holds ([`SAMPLE_COLUMNS`], fewer past
/// [`SAMPLE_BYTES`]).
fn sample_columns(k: usize) -> usize {
    let fit = SAMPLE_BYTES / (k.max(1) * std::mem::size_of::<f32>());
    SAMPLE_COLUMNS.min(fit / 64 * 64).max(64)
}

/// Timed rounds of the candidates (each one's best counts), at most.
const SAMPLE_RUNS: usize = 4;

/// Timed time after which no further round runs (past the second).
const SAMPLE_BUDGET: Duration = Duration::from_millis(8);

/// Row counts that share a choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RowBucket {
    /// One row (a decode step).
    One,
    /// 2 to 16 rows (a chunk of new tokens).
    Few,
    /// 17 to 128 rows.
    Some,
    /// More than 128 rows.
    Many,
}

impl RowBucket {
    /// The bucket of `rows` rows.
    pub fn of(rows: usize) -> RowBucket {
        match rows {
            0 | 1 => RowBucket::One,
            2..=16 => RowBucket::Few,
            17..=128 => RowBucket::Some,
            _ => RowBucket::Many,
        }
    }
}

impl fmt::Display for RowBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowBucket::One => "1",
            RowBucket::Few => "2-16",
            RowBucket::Some => "17-128",
            RowBucket::Many => ">128",
        })
    }
}

/// What a choice is kept for: a product shape and bucket of rows under one set of
/// options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProductKey {
    /// Depth (rows of the weight).
    pub k: usize,
    /// Columns of the weight the product reads.
    pub n: usize,
    /// Rows of the left operand.
    pub rows: RowBucket,
    /// The highest instruction set the options allow.
    pub isa: Isa,
    /// Threads the product may use.
    pub threads: usize,
    /// The weight is stored transposed (`[N, K]`, a product by `transpose(w)`): the
    /// `gemm` crate reads it at other strides, so it is measured apart.
    pub transposed: bool,
}

impl fmt::Display for ProductKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rows {} x {} x {}", self.rows, self.k, self.n)?;
        if self.transposed {
            f.write_str(" (weight transposed)")?;
        }
        Ok(())
    }
}

/// A measured choice: the kernel kept and every candidate's rate on the sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Chosen {
    /// The fastest candidate.
    pub kernel: ProductKernel,
    /// Each candidate with its best rate on the sample, GFLOP/s.
    pub candidates: Vec<(ProductKernel, f64)>,
    /// Time the measurement took.
    pub cost: Duration,
}

/// How the products of one shape ran ([`ProductChooser::record`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProductStat {
    /// Calls.
    pub calls: usize,
    /// Their flops (`2 m k n` each).
    pub flops: f64,
    /// Their time.
    pub time: Duration,
}

impl ProductStat {
    /// The rate over all calls, GFLOP/s.
    pub fn gflops(&self) -> f64 {
        self.flops / self.time.as_secs_f64().max(1e-12) / 1e9
    }
}

/// Kept choices and per-shape statistics; one per process ([`global`]).
#[derive(Debug, Default)]
pub struct ProductChooser {
    choices: Mutex<HashMap<ProductKey, Chosen>>,
    stats: Mutex<HashMap<(usize, usize, usize, ProductKernel), ProductStat>>,
}

/// The process's chooser: choices measured by one plan serve every other.
pub fn global() -> &'static ProductChooser {
    static CHOOSER: OnceLock<ProductChooser> = OnceLock::new();
    CHOOSER.get_or_init(ProductChooser::default)
}

impl ProductChooser {
    /// The kernel for `a @ w[.., columns]` (`a` of depth `w.shape()[0]`, `w` an f32
    /// matrix) under `options`: by [`KernelOptions::product_kernel`]; when measuring,
    /// the kept choice for its shape and bucket of rows, or one measured now on `a`
    /// and `w`. Anything but an f32 matrix weight runs on the `gemm` crate.
    pub fn kernel_for(
        &self,
        a: &Tensor,
        w: &Tensor,
        columns: Option<(usize, usize)>,
        options: &KernelOptions,
    ) -> ProductKernel {
        self.kernel_for_as(a, w, columns, false, options)
    }

    /// [`ProductChooser::kernel_for`], or for `a @ w^T[.., columns]` when `transposed`
    /// (`w` an f32 matrix stored `[N, K]`, [`Epilogue::transposed`]): measured on a
    /// sample of `w`'s rows (the product's columns), each packed kernel's sample packed
    /// from the transposed storage.
    pub fn kernel_for_as(
        &self,
        a: &Tensor,
        w: &Tensor,
        columns: Option<(usize, usize)>,
        transposed: bool,
        options: &KernelOptions,
    ) -> ProductKernel {
        let (k, n_all) = match (w.shape(), transposed) {
            (&[k, n_all], false) | (&[n_all, k], true) => (k, n_all),
            _ => return ProductKernel::Gemm,
        };
        let (start, end) = columns.unwrap_or((0, n_all));
        let n = end.saturating_sub(start);
        let rows = a.numel() / k.max(1);
        if w.dtype() != DType::F32 || a.dtype() != DType::F32 || n == 0 || k == 0 {
            return ProductKernel::Gemm;
        }
        let isa = options.isa();
        let rule = || match isa {
            Isa::Baseline => ProductKernel::Gemm,
            _ if rows < PackedWeight::MIN_ROWS || k > 8 * n => ProductKernel::Gemm,
            isa => ProductKernel::Packed(isa),
        };
        match options.product_kernel {
            ProductChoice::Rule => rule(),
            ProductChoice::Pin(kernel)
                if kernel
                    .packed_isa()
                    .is_some_and(|p| p > isa || p == Isa::Baseline) =>
            {
                rule()
            }
            ProductChoice::Pin(kernel) => kernel,
            ProductChoice::Measure => {
                let key = ProductKey {
                    k,
                    n,
                    rows: RowBucket::of(rows),
                    isa,
                    threads: rayon::current_num_threads(),
                    transposed,
                };
                if let Some(c) = self
                    .choices
                    .lock()
                    .ok()
                    .and_then(|c| c.get(&key).map(|c| c.kernel))
                {
                    return c;
                }
                let chosen = measure(a, (w, transposed), (start, end), isa);
                let kernel = chosen.kernel;
                // Two threads meeting a shape at once both measure, and may choose
                // differently on a busy machine: the first kept is every caller's
                // kernel, this one's too, so that a shape's products always run (and
                // round) alike in a process.
                match self.choices.lock() {
                    Ok(mut c) => c.entry(key).or_insert(chosen).kernel,
                    Err(_) => kernel,
                }
            }
        }
    }

    /// Every kept choice, by shape.
    pub fn choices(&self) -> Vec<(ProductKey, Chosen)> {
        let mut all: Vec<_> = self
            .choices
            .lock()
            .map(|c| c.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default();
        all.sort_by_key(|(k, _)| *k);
        all
    }

    /// Records a product of `rows x k x n` on `kernel` that took `time`.
    pub fn record(
        &self,
        (rows, k, n): (usize, usize, usize),
        kernel: ProductKernel,
        time: Duration,
    ) {
        if let Ok(mut stats) = self.stats.lock() {
            let s = stats.entry((rows, k, n, kernel)).or_default();
            s.calls += 1;
            s.flops += 2.0 * (rows * k * n) as f64;
            s.time += time;
        }
    }

    /// The recorded products, by shape `(rows, k, n)` and kernel, most time first.
    pub fn stats(&self) -> Vec<((usize, usize, usize), ProductKernel, ProductStat)> {
        let mut all: Vec<_> = self
            .stats
            .lock()
            .map(|s| {
                s.iter()
                    .map(|(&(m, k, n, kernel), &st)| ((m, k, n), kernel, st))
                    .collect()
            })
            .unwrap_or_default();
        all.sort_by(|a, b| b.2.time.cmp(&a.2.time).then(a.0.cmp(&b.0)));
        all
    }

    /// Forgets the recorded statistics (the choices stay).
    pub fn clear_stats(&self) {
        if let Ok(mut s) = self.stats.lock() {
            s.clear();
        }
    }
}

/// The candidates under instruction set `isa`, the `gemm` crate first (the AVX-512
/// kernel in both of its forms, [`Broadcast`](crate::cpu::Broadcast)).
pub fn candidates(isa: Isa) -> Vec<ProductKernel> {
    let mut all = vec![ProductKernel::Gemm];
    for packed in [Isa::Avx512, Isa::Avx2Fma] {
        if cfg!(target_arch = "x86_64") && packed <= isa && packed.is_available() {
            all.push(ProductKernel::Packed(packed));
            if packed == Isa::Avx512 {
                all.push(ProductKernel::PackedAvx512InRegister);
            }
        }
    }
    all
}

/// Times every candidate on `a` and columns `start..start + SAMPLE_COLUMNS` of `w`
/// (at most `end`; of `w^T` when `transposed`, rows of `w`'s storage), each packed for
/// its kernel; the fastest wins (the `gemm` crate where every timing fails).
///
/// The candidates run in turn, round by round: a first round untimed (it faults in a
/// weight mapped from a file, which would otherwise count against whichever candidate
/// runs first, and wakes the threads), then up to [`SAMPLE_RUNS`] timed rounds, at least
/// two, fewer past [`SAMPLE_BUDGET`]; each candidate's best round counts. Taking turns
/// spreads a passing load on a shared machine over every candidate.
fn measure(
    a: &Tensor,
    (w, transposed): (&Tensor, bool),
    (start, end): (usize, usize),
    isa: Isa,
) -> Chosen {
    let began = Instant::now();
    let k = w.shape()[usize::from(transposed)];
    let sample = (start, end.min(start + sample_columns(k)));
    let rows = a.numel() / k.max(1);
    let flops = 2.0 * (rows * k * (sample.1 - sample.0)) as f64;
    let packings: Vec<(ProductKernel, Option<PackedWeight>)> = candidates(isa)
        .into_iter()
        .filter_map(|kernel| match kernel {
            ProductKernel::Gemm => Some((kernel, None)),
            packed => {
                let p = packed.packed_isa()?;
                PackedWeight::sample(w, sample, p, transposed).map(|w| (kernel, Some(w)))
            }
        })
        .collect();
    let run = |kernel: ProductKernel, packed: Option<&PackedWeight>| -> Option<Duration> {
        let epilogue = Epilogue {
            columns: Some(sample),
            packed,
            transposed,
            broadcast: kernel.broadcast(),
            ..Epilogue::default()
        };
        let t = Instant::now();
        let out = matmul_epilogue_with(a, w, &epilogue, GemmBackend::Auto).ok()?;
        let took = t.elapsed();
        std::hint::black_box(&out);
        Some(took)
    };
    let mut best = vec![Duration::MAX; packings.len()];
    let mut timed = Duration::ZERO;
    for round in 0..=SAMPLE_RUNS {
        for ((kernel, packed), best) in packings.iter().zip(best.iter_mut()) {
            let Some(took) = run(*kernel, packed.as_ref()) else {
                continue;
            };
            if round > 0 {
                *best = (*best).min(took);
                timed += took;
            }
        }
        if round >= 2 && timed > SAMPLE_BUDGET {
            break;
        }
    }
    // Reading a sample of a weight mapped from an external data file maps far more
    // than the sample (the kernel maps the pages around each one read): give them
    // back, so that packing the weight next holds it about once, not twice.
    if let Some(r) = w.file_range().filter(|r| !r.file.holds_model()) {
        r.file.release_range(r.offset, r.len);
    }
    let rated: Vec<(ProductKernel, f64)> = packings
        .iter()
        .zip(&best)
        .filter(|(_, &t)| t != Duration::MAX)
        .map(|((kernel, _), t)| (*kernel, flops / t.as_secs_f64().max(1e-12) / 1e9))
        .collect();
    let kernel = rated
        .iter()
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .map_or(ProductKernel::Gemm, |r| r.0);
    Chosen {
        kernel,
        candidates: rated,
        cost: began.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(k: usize, n: usize) -> Tensor {
        let data = (0..k * n)
            .map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0)
            .collect();
        Tensor::from_vec(vec![k, n], data).expect("tensor")
    }

    #[test]
    fn samples_stay_within_their_bytes() {
        assert_eq!(sample_columns(768), SAMPLE_COLUMNS);
        assert_eq!(sample_columns(4096), SAMPLE_COLUMNS);
        assert_eq!(sample_columns(8192), 256);
        assert_eq!(sample_columns(1 << 20), 64);
        for k in [1, 100, 5000, 8192, 20000] {
            let c = sample_columns(k);
            assert!(c.is_multiple_of(64) && c <= SAMPLE_COLUMNS);
            assert!(c == 64 || c * k * 4 <= SAMPLE_BYTES, "k {k}: {c} columns");
        }
    }

    #[test]
    fn names_round_trip() {
        for kernel in [
            ProductKernel::Gemm,
            ProductKernel::Packed(Isa::Avx512),
            ProductKernel::PackedAvx512InRegister,
            ProductKernel::Packed(Isa::Avx2Fma),
        ] {
            assert_eq!(kernel.to_string().parse::<ProductKernel>(), Ok(kernel));
            if let Some(isa) = kernel.packed_isa() {
                assert_eq!(ProductKernel::packed(isa, kernel.broadcast()), kernel);
            }
            assert_eq!(
                kernel.to_string().parse::<ProductChoice>(),
                Ok(ProductChoice::Pin(kernel))
            );
        }
        assert_eq!(
            "Measure".parse::<ProductChoice>(),
            Ok(ProductChoice::Measure)
        );
        assert_eq!("rule".parse::<ProductChoice>(), Ok(ProductChoice::Rule));
        let err = "fastest".parse::<ProductChoice>().unwrap_err();
        assert!(
            err.contains("`fastest`") && err.contains("measure"),
            "{err}"
        );
    }

    #[test]
    fn buckets_split_at_1_16_128() {
        let b: Vec<_> = [0, 1, 2, 16, 17, 128, 129, 4096]
            .map(RowBucket::of)
            .to_vec();
        use RowBucket::*;
        assert_eq!(b, [One, One, Few, Few, Some, Some, Many, Many]);
    }

    /// A measured choice times every candidate the CPU has, is kept for its shape and
    /// bucket, and a new bucket measures anew.
    #[test]
    fn measures_each_candidate_once_per_shape_and_bucket() {
        let chooser = ProductChooser::default();
        let opts = KernelOptions::default();
        let w = matrix(96, 200);
        let a = matrix(20, 96);
        let first = chooser.kernel_for(&a, &w, Some((8, 200)), &opts);
        let kept = chooser.choices();
        assert_eq!(kept.len(), 1);
        let (key, chosen) = &kept[0];
        assert_eq!((key.k, key.n, key.rows), (96, 192, RowBucket::Some));
        assert_eq!(chosen.kernel, first);
        let timed: Vec<_> = chosen.candidates.iter().map(|c| c.0).collect();
        assert_eq!(timed, candidates(opts.isa()));
        assert!(chosen.candidates.iter().all(|c| c.1 > 0.0), "{chosen:?}");
        // Another row count of the same bucket: the kept choice, nothing measured.
        let again = chooser.kernel_for(&matrix(100, 96), &w, Some((8, 200)), &opts);
        assert_eq!((again, chooser.choices().len()), (first, 1));
        chooser.kernel_for(&matrix(1, 96), &w, Some((8, 200)), &opts);
        assert_eq!(chooser.choices().len(), 2, "one row is a bucket of its own");
    }

    /// Threads meeting a shape at once each measure it, but all of them, and every
    /// later caller, get the one choice kept: a shape's products never mix kernels (and
    /// their rounding) in a process, however the racing measurements came out.
    #[test]
    fn racing_first_sights_all_take_the_kept_choice() {
        for _ in 0..4 {
            let chooser = ProductChooser::default();
            let w = matrix(96, 200);
            let a = matrix(20, 96);
            let barrier = std::sync::Barrier::new(4);
            let got: Vec<ProductKernel> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            chooser.kernel_for(&a, &w, None, &KernelOptions::default())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("joins"))
                    .collect()
            });
            let kept = chooser.choices();
            assert_eq!(kept.len(), 1);
            assert!(
                got.iter().all(|&k| k == kept[0].1.kernel),
                "{got:?} vs {kept:?}"
            );
        }
    }

    /// A product by a transposed weight (`[N, K]` stored) is measured on its own, on
    /// a sample of the storage's rows, and kept apart from the plain product of the
    /// same shape.
    #[test]
    fn transposed_weights_are_measured_apart() {
        let chooser = ProductChooser::default();
        let opts = KernelOptions::default();
        let w = matrix(96, 200);
        let wt = matrix(200, 96);
        let a = matrix(20, 96);
        chooser.kernel_for(&a, &w, None, &opts);
        let t = chooser.kernel_for_as(&a, &wt, Some((8, 200)), true, &opts);
        let kept = chooser.choices();
        assert_eq!(kept.len(), 2, "{kept:?}");
        let (key, chosen) = kept
            .iter()
            .find(|(k, _)| k.transposed)
            .expect("a transposed choice");
        assert_eq!((key.k, key.n, chosen.kernel), (96, 192, t));
        let timed: Vec<_> = chosen.candidates.iter().map(|c| c.0).collect();
        assert_eq!(timed, candidates(opts.isa()));
        assert!(key.to_string().contains("transposed"), "{key}");
        // A transposed weight that is not a matrix runs on the `gemm` crate.
        let flat = Tensor::from_vec(vec![96], vec![0.0f32; 96]).expect("tensor");
        assert_eq!(
            chooser.kernel_for_as(&a, &flat, None, true, &opts),
            ProductKernel::Gemm
        );
    }

    #[test]
    fn rule_and_pins_measure_nothing() {
        let chooser = ProductChooser::default();
        let w = matrix(64, 64);
        let isa = KernelOptions::default().isa();
        let with = |choice| KernelOptions {
            product_kernel: choice,
            ..KernelOptions::default()
        };
        let few = matrix(4, 64);
        let many = matrix(64, 64);
        let rule = with(ProductChoice::Rule);
        assert_eq!(
            chooser.kernel_for(&few, &w, None, &rule),
            ProductKernel::Gemm
        );
        let expected = match isa {
            Isa::Baseline => ProductKernel::Gemm,
            isa => ProductKernel::Packed(isa),
        };
        assert_eq!(chooser.kernel_for(&many, &w, None, &rule), expected);
        let gemm = with(ProductChoice::Pin(ProductKernel::Gemm));
        assert_eq!(
            chooser.kernel_for(&many, &w, None, &gemm),
            ProductKernel::Gemm
        );
        // A pinned kernel above the options' instruction set falls back to the rule.
        let capped = KernelOptions {
            max_isa: Some(Isa::Baseline),
            ..with(ProductChoice::Pin(ProductKernel::Packed(Isa::Avx512)))
        };
        assert_eq!(
            chooser.kernel_for(&many, &w, None, &capped),
            ProductKernel::Gemm
        );
        assert!(chooser.choices().is_empty());
    }

    #[test]
    fn records_add_up_per_shape_and_kernel() {
        let chooser = ProductChooser::default();
        let kernel = ProductKernel::Gemm;
        chooser.record((2, 3, 4), kernel, Duration::from_millis(1));
        chooser.record((2, 3, 4), kernel, Duration::from_millis(3));
        let stats = chooser.stats();
        assert_eq!(stats.len(), 1);
        assert_eq!(stats[0].2.calls, 2);
        assert_eq!(stats[0].2.flops, 96.0);
        assert!((stats[0].2.gflops() - 96.0 / 4e-3 / 1e9).abs() < 1e-9);
        chooser.clear_stats();
        assert!(chooser.stats().is_empty());
    }
}
