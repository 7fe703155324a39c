//! Drivers: tiles, output storage, parallel chunks; and row accumulators.

use rayon::prelude::*;

use super::load::{same_type_mut, Compute, Src};
use super::plan::Plan;
use crate::broadcast::PAR_THRESHOLD;
use crate::{Element, KernelError};

/// Elements per tile: each operand is loaded (converted to the compute type when needed)
/// a tile at a time, so intermediates live in registers or L1, never in memory.
pub const TILE: usize = 1024;

/// Output elements per rayon task.
const TASK: usize = 1 << 15;

/// One row of the output as a kernel sees it: loads of any operand at any position.
pub struct Row<'p, 'a> {
    plan: &'p Plan,
    srcs: &'p [Src<'a>],
    row: usize,
}

impl<'a> Row<'_, 'a> {
    /// The row's length.
    #[inline]
    pub fn len(&self) -> usize {
        self.plan.inner
    }

    /// True for an empty row.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.plan.inner == 0
    }

    /// Operand `k` at row positions `j .. j + buf.len()`, as compute values: borrowed
    /// when the operand is contiguous in the compute type, else converted into `buf`.
    #[inline]
    pub fn load<'b, F: Compute>(&self, k: usize, j: usize, buf: &'b mut [F]) -> &'b [F]
    where
        'a: 'b,
    {
        let (off, stride) = self.plan.row_start(k, self.row);
        let off = off + j * stride;
        if stride == 1 {
            if let Some(s) = F::borrow(&self.srcs[k], off, buf.len()) {
                return s;
            }
        }
        F::convert(&self.srcs[k], off, stride, buf);
        buf
    }

    /// Operand `k` at row positions `j .. j + buf.len()` rotated by half a row, as compute
    /// values in `buf`: position `p` holds the operand at `(p + n / 2) mod n` (`n` the
    /// row's length; no sign change, a kernel applies it). An operand broadcast along
    /// the row reads its one value. The operand must span the row (the generated kernel
    /// checks it before running) and `j + buf.len() <= n`.
    #[inline]
    pub fn load_rot<'b, F: Compute>(&self, k: usize, j: usize, buf: &'b mut [F]) -> &'b [F] {
        let (off, stride) = self.plan.row_start(k, self.row);
        if stride == 0 {
            F::convert(&self.srcs[k], off, 0, buf);
            return buf;
        }
        let n = self.plan.inner;
        let h = n / 2;
        // Positions before `n - h` read `p + h`, the others `p - (n - h)`.
        let cut = (n - h).saturating_sub(j).min(buf.len());
        let (first, second) = buf.split_at_mut(cut);
        if !first.is_empty() {
            F::convert(&self.srcs[k], off + j + h, 1, first);
        }
        if !second.is_empty() {
            F::convert(&self.srcs[k], off + j + cut - (n - h), 1, second);
        }
        buf
    }
}

impl Row<'_, '_> {
    /// Prefetches (a cache hint) positions `j .. j + len` of every operand that walks the
    /// row and differs from row to row (a weight broadcast over the rows, or a value
    /// broadcast along the row, is read once and stays cached).
    #[inline]
    fn prefetch(&self, j: usize, len: usize) {
        for (k, src) in self.srcs.iter().enumerate() {
            if !self.plan.varies_by_row(k) {
                continue;
            }
            let (off, stride) = self.plan.row_start(k, self.row);
            if stride == 1 {
                src.prefetch(off + j, len);
            }
        }
    }
}

fn check_srcs(op: &'static str, plan: &Plan, srcs: &[Src<'_>]) -> Result<(), KernelError> {
    if srcs.len() != plan.operands() {
        return Err(KernelError::invalid(
            op,
            format!("{} operands for a plan of {}", srcs.len(), plan.operands()),
        ));
    }
    Ok(())
}

pub use crate::cpu::Isa;

thread_local! {
    /// [`with_isa`]'s choice for this thread, over [`isa`]'s.
    static ISA_OVERRIDE: std::cell::Cell<Option<Isa>> = const { std::cell::Cell::new(None) };
}

/// The [`Isa`] the generated kernels called on this thread run with: [`with_isa`]'s
/// choice inside it, else [`KernelOptions::fused_isa`](crate::KernelOptions::fused_isa)
/// of the options installed on this thread (by default the best this CPU has:
/// [`Isa::Avx512`], then [`Isa::Avx2Fma`], then [`Isa::Baseline`]).
pub fn isa() -> Isa {
    ISA_OVERRIDE
        .with(|o| o.get())
        .unwrap_or_else(|| crate::KernelOptions::current().fused_isa())
}

/// Runs `f` with the generated kernels it calls on this thread built for `isa` (their
/// parallel chunks included); `None`, without running `f`, where this CPU lacks `isa`.
/// For tests and measurements that compare the builds in one process. Kernels read
/// [`isa`] on the calling thread, before they split work over rayon's.
pub fn with_isa<R>(isa: Isa, f: impl FnOnce() -> R) -> Option<R> {
    if !isa.is_available() {
        return None;
    }
    let before = ISA_OVERRIDE.with(|o| o.replace(Some(isa)));
    // Restored even if `f` unwinds.
    struct Restore(Option<Isa>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ISA_OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(before);
    Some(f())
}

/// The body of a generated elementwise kernel (no reductions), run by [`run_map`].
///
/// Implementations mark [`MapKernel::tile`] `#[inline(always)]`: the driver compiles its
/// tile loop, and so the body, once per [`Isa`].
pub trait MapKernel<F: Compute>: Sync {
    /// Fills `out` (at most [`TILE`] values) with the results for row positions
    /// `j .. j + out.len()` of `row`; `scratch` holds the driver's scratch tiles for the
    /// loads (`scratch_tiles` of them, of equal length, none shorter than `out`). With `FMA` the caller is compiled with the `avx2` and `fma` target
    /// features, so fused multiply-adds are cheap ([`Compute::exp_vec`] and its kin).
    fn tile<const FMA: bool>(&self, row: &Row<'_, '_>, j: usize, scratch: &mut [F], out: &mut [F]);
}

/// The body of a generated row kernel (one with last-dimension reductions), run by
/// [`run_rows`]; `#[inline(always)]` as for [`MapKernel`].
pub trait RowKernel<F: Compute>: Sync {
    /// Fills the whole row `out` for `row`; `scratch` holds the driver's scratch tiles
    /// (`scratch_tiles` of them, of equal length: the row is walked in pieces no longer
    /// than one). `FMA` as for [`MapKernel::tile`].
    fn row<const FMA: bool>(&self, row: &Row<'_, '_>, scratch: &mut [F], out: &mut [F]);
}

/// What one task of [`run_map`] or [`run_rows`] needs besides its output chunk.
struct Job<'p, 'a, K> {
    plan: &'p Plan,
    srcs: &'p [Src<'a>],
    scratch_tiles: usize,
    kernel: &'p K,
}

/// Output elements `start .. start + chunk.len()` of an elementwise kernel.
#[inline(always)]
fn map_chunk<F: Compute, E: Element, K: MapKernel<F>, const FMA: bool>(
    job: &Job<'_, '_, K>,
    start: usize,
    chunk: &mut [E],
) {
    let Job {
        plan,
        srcs,
        scratch_tiles,
        kernel,
    } = *job;
    let inner = plan.inner;
    // No tile is longer than a row or the chunk: the scratch tiles are no longer
    // either (zeroing 4 KiB tiles for 64-wide rows was 5% of a small model's run).
    let tile = TILE.min(inner).min(chunk.len()).max(1);
    let mut scratch = vec![F::ZERO; tile * scratch_tiles.max(1)];
    let mut obuf = [F::ZERO; TILE];
    let mut pos = start;
    let end = start + chunk.len();
    while pos < end {
        let (row, j) = (pos / inner, pos % inner);
        let len = TILE.min(inner - j).min(end - pos);
        let next = pos + len;
        if next < end {
            let (row, j) = (next / inner, next % inner);
            Row { plan, srcs, row }.prefetch(j, TILE.min(inner - j).min(end - next));
        }
        let r = Row { plan, srcs, row };
        let out = &mut chunk[pos - start..pos - start + len];
        match same_type_mut::<E, F>(out) {
            // The kernel writes every value of its tile: computed in place.
            Some(out) => kernel.tile::<FMA>(&r, j, &mut scratch, out),
            None => {
                kernel.tile::<FMA>(&r, j, &mut scratch, &mut obuf[..len]);
                F::store(&obuf[..len], out);
            }
        }
        pos += len;
    }
}

/// [`map_chunk`] compiled for AVX2+FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn map_chunk_avx2<F: Compute, E: Element, K: MapKernel<F>>(
    job: &Job<'_, '_, K>,
    start: usize,
    chunk: &mut [E],
) {
    map_chunk::<F, E, K, true>(job, start, chunk)
}

/// [`map_chunk`] compiled for AVX-512 (and AVX2+FMA).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
fn map_chunk_avx512<F: Compute, E: Element, K: MapKernel<F>>(
    job: &Job<'_, '_, K>,
    start: usize,
    chunk: &mut [E],
) {
    map_chunk::<F, E, K, true>(job, start, chunk)
}

/// [`map_chunk`] for `isa`.
#[inline(always)]
fn map_chunk_on<F: Compute, E: Element, K: MapKernel<F>>(
    isa: Isa,
    job: &Job<'_, '_, K>,
    start: usize,
    chunk: &mut [E],
) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: `map_chunk_avx512` only requires the target features it enables, and
        // `isa()` returns `Avx512` only where `Isa::is_available` detected them all.
        unsafe { map_chunk_avx512::<F, E, K>(job, start, chunk) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2Fma {
        // SAFETY: `map_chunk_avx2` only requires the avx2 and fma target features, and
        // `isa()` returns `Avx2Fma` only where both were detected on this CPU.
        unsafe { map_chunk_avx2::<F, E, K>(job, start, chunk) };
        return;
    }
    let _ = isa;
    map_chunk::<F, E, K, false>(job, start, chunk)
}

/// Rows `first ..` (as many as `chunk` holds) of a row kernel.
#[inline(always)]
fn rows_chunk<F: Compute, E: Element, K: RowKernel<F>, const FMA: bool>(
    job: &Job<'_, '_, K>,
    first: usize,
    chunk: &mut [E],
) {
    let Job {
        plan,
        srcs,
        scratch_tiles,
        kernel,
    } = *job;
    let inner = plan.inner;
    // The row kernel walks its row a tile at a time: tiles no longer than the row.
    let mut scratch = vec![F::ZERO; TILE.min(inner).max(1) * scratch_tiles.max(1)];
    // The row in the compute type, where the output's storage type differs.
    let mut orow = Vec::new();
    let rows = chunk.len() / inner.max(1);
    for (i, o) in chunk.chunks_mut(inner).enumerate() {
        if i + 1 < rows {
            let next = Row {
                plan,
                srcs,
                row: first + i + 1,
            };
            next.prefetch(0, inner);
        }
        let r = Row {
            plan,
            srcs,
            row: first + i,
        };
        match same_type_mut::<E, F>(o) {
            // The kernel writes every value of its row: computed in place.
            Some(o) => kernel.row::<FMA>(&r, &mut scratch, o),
            None => {
                orow.resize(inner, F::ZERO);
                kernel.row::<FMA>(&r, &mut scratch, &mut orow);
                F::store(&orow, o);
            }
        }
    }
}

/// [`rows_chunk`] compiled for AVX2+FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_chunk_avx2<F: Compute, E: Element, K: RowKernel<F>>(
    job: &Job<'_, '_, K>,
    first: usize,
    chunk: &mut [E],
) {
    rows_chunk::<F, E, K, true>(job, first, chunk)
}

/// [`rows_chunk`] compiled for AVX-512 (and AVX2+FMA).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
fn rows_chunk_avx512<F: Compute, E: Element, K: RowKernel<F>>(
    job: &Job<'_, '_, K>,
    first: usize,
    chunk: &mut [E],
) {
    rows_chunk::<F, E, K, true>(job, first, chunk)
}

/// [`rows_chunk`] for `isa`.
#[inline(always)]
fn rows_chunk_on<F: Compute, E: Element, K: RowKernel<F>>(
    isa: Isa,
    job: &Job<'_, '_, K>,
    first: usize,
    chunk: &mut [E],
) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: `rows_chunk_avx512` only requires the target features it enables, and
        // `isa()` returns `Avx512` only where `Isa::is_available` detected them all.
        unsafe { rows_chunk_avx512::<F, E, K>(job, first, chunk) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2Fma {
        // SAFETY: `rows_chunk_avx2` only requires the avx2 and fma target features, and
        // `isa()` returns `Avx2Fma` only where both were detected on this CPU.
        unsafe { rows_chunk_avx2::<F, E, K>(job, first, chunk) };
        return;
    }
    let _ = isa;
    rows_chunk::<F, E, K, false>(job, first, chunk)
}

/// Runs an elementwise kernel: `kernel` fills the output a tile ([`TILE`] values at
/// most) at a time, with `scratch_tiles` scratch tiles for its loads, in chunks run in
/// parallel when the output is large, each compiled for this CPU's [`Isa`]. Returns the
/// output elements in storage type `E`.
pub fn run_map<F: Compute, E: Element, K: MapKernel<F>>(
    op: &'static str,
    plan: &Plan,
    srcs: &[Src<'_>],
    scratch_tiles: usize,
    kernel: &K,
) -> Result<Vec<E>, KernelError> {
    check_srcs(op, plan, srcs)?;
    let n = plan.numel();
    // Every element is written by the chunks below (a buffer from the plan's pool
    // when one is installed: no fresh pages to fault in and zero).
    let mut out = crate::cpu::pool::buffer::<E>(n);
    if n == 0 {
        return Ok(out);
    }
    let isa = isa();
    let job = Job {
        plan,
        srcs,
        scratch_tiles,
        kernel,
    };
    if n < PAR_THRESHOLD {
        map_chunk_on::<F, E, K>(isa, &job, 0, &mut out);
    } else {
        out.par_chunks_mut(TASK)
            .enumerate()
            .for_each(|(c, chunk)| map_chunk_on::<F, E, K>(isa, &job, c * TASK, chunk));
    }
    Ok(out)
}

/// Runs a row kernel (one with last-dimension reductions): `kernel` fills a whole row at
/// a time, with `scratch_tiles` scratch tiles. Rows run in parallel when the output is
/// large, compiled for this CPU's [`Isa`].
pub fn run_rows<F: Compute, E: Element, K: RowKernel<F>>(
    op: &'static str,
    plan: &Plan,
    srcs: &[Src<'_>],
    scratch_tiles: usize,
    kernel: &K,
) -> Result<Vec<E>, KernelError> {
    check_srcs(op, plan, srcs)?;
    let n = plan.numel();
    let inner = plan.inner;
    // Every row is written whole by the chunks below (`rows_chunk` stores each row it
    // computes); a buffer from the plan's pool when one is installed, as in `run_map`.
    let mut out = crate::cpu::pool::buffer::<E>(n);
    if n == 0 {
        return Ok(out);
    }
    let isa = isa();
    let job = Job {
        plan,
        srcs,
        scratch_tiles,
        kernel,
    };
    let rows_per_task = (TASK / inner).max(1);
    if n < PAR_THRESHOLD {
        rows_chunk_on::<F, E, K>(isa, &job, 0, &mut out);
    } else {
        out.par_chunks_mut(rows_per_task * inner)
            .enumerate()
            .for_each(|(c, chunk)| rows_chunk_on::<F, E, K>(isa, &job, c * rows_per_task, chunk));
    }
    Ok(out)
}

/// Independent accumulator lanes of [`Sum`] and [`Max`]: four 256-bit (eight 128-bit)
/// vectors of f32, so that the adds of a row overlap instead of waiting on one another.
const LANES: usize = 32;

/// A sum over a row, in independent lanes so the loop vectorises.
#[derive(Clone, Copy, Debug)]
pub struct Sum<F> {
    lanes: [F; LANES],
}

impl<F: Compute> Default for Sum<F> {
    fn default() -> Self {
        Sum {
            lanes: [F::ZERO; LANES],
        }
    }
}

impl<F: Compute> Sum<F> {
    /// Adds every value of `v`.
    #[inline]
    pub fn add(&mut self, v: &[F]) {
        let mut it = v.chunks_exact(LANES);
        for c in &mut it {
            for (l, &x) in self.lanes.iter_mut().zip(c) {
                *l += x;
            }
        }
        for (l, &x) in self.lanes.iter_mut().zip(it.remainder()) {
            *l += x;
        }
    }

    /// The total, added pairwise: the upper half of the lanes onto the lower, then
    /// again (each step one vector add). In lane order, the 31 dependent scalar adds
    /// of every row's reduction were most of a layer norm over 64-wide rows.
    #[inline]
    pub fn total(&self) -> F {
        fold_pairwise(self.lanes, |a, b| a + b)
    }
}

/// A maximum over a row; NaN wins, as in the reference `amax`.
#[derive(Clone, Copy, Debug)]
pub struct Max<F> {
    lanes: [F; LANES],
}

impl<F: Compute> Default for Max<F> {
    fn default() -> Self {
        Max {
            lanes: [F::NEG_INFINITY; LANES],
        }
    }
}

impl<F: Compute> Max<F> {
    /// Takes every value of `v` into account.
    #[inline]
    pub fn add(&mut self, v: &[F]) {
        let mut it = v.chunks_exact(LANES);
        for c in &mut it {
            for (l, &x) in self.lanes.iter_mut().zip(c) {
                *l = l.max_nan(x);
            }
        }
        for (l, &x) in self.lanes.iter_mut().zip(it.remainder()) {
            *l = l.max_nan(x);
        }
    }

    /// The maximum (negative infinity for an empty row).
    #[inline]
    pub fn total(&self) -> F {
        // Pairwise, as `Sum::total` (NaN still wins: `max_nan` keeps it either side).
        fold_pairwise(self.lanes, F::max_nan)
    }
}

/// Folds the lanes with `op` pairwise: the upper half onto the lower, then again, so
/// each step is one vector operation (see [`Sum::total`]).
#[inline]
fn fold_pairwise<F: Copy>(mut lanes: [F; LANES], op: impl Fn(F, F) -> F) -> F {
    let mut half = LANES / 2;
    while half > 0 {
        let (lo, hi) = lanes.split_at_mut(half);
        for (a, &b) in lo.iter_mut().zip(&hi[..half]) {
            *a = op(*a, b);
        }
        half /= 2;
    }
    lanes[0]
}
