//! Drivers: tiles, output storage, parallel chunks; and row accumulators.

use rayon::prelude::*;

use super::load::{Compute, Src};
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

fn check_srcs(op: &'static str, plan: &Plan, srcs: &[Src<'_>]) -> Result<(), KernelError> {
    if srcs.len() != plan.operands() {
        return Err(KernelError::invalid(
            op,
            format!("{} operands for a plan of {}", srcs.len(), plan.operands()),
        ));
    }
    Ok(())
}

/// Runs an elementwise kernel: `f(row, j, scratch, out)` fills `out` (at most [`TILE`]
/// values) with the results for row positions `j .. j + out.len()`; `scratch` holds
/// `scratch_tiles` tiles for the loads. Returns the output elements in storage type `E`.
pub fn run_map<F: Compute, E: Element>(
    op: &'static str,
    plan: &Plan,
    srcs: &[Src<'_>],
    scratch_tiles: usize,
    f: impl Fn(&Row<'_, '_>, usize, &mut [F], &mut [F]) + Sync,
) -> Result<Vec<E>, KernelError> {
    check_srcs(op, plan, srcs)?;
    let n = plan.numel();
    let mut out = vec![E::default(); n];
    if n == 0 {
        return Ok(out);
    }
    let inner = plan.inner;
    let task = |(start, chunk): (usize, &mut [E])| {
        let mut scratch = vec![F::ZERO; TILE * scratch_tiles.max(1)];
        let mut obuf = [F::ZERO; TILE];
        let mut pos = start;
        let end = start + chunk.len();
        while pos < end {
            let (row, j) = (pos / inner, pos % inner);
            let len = TILE.min(inner - j).min(end - pos);
            let r = Row { plan, srcs, row };
            f(&r, j, &mut scratch, &mut obuf[..len]);
            F::store(&obuf[..len], &mut chunk[pos - start..pos - start + len]);
            pos += len;
        }
    };
    if n < PAR_THRESHOLD {
        task((0, &mut out));
    } else {
        out.par_chunks_mut(TASK)
            .enumerate()
            .for_each(|(c, chunk)| task((c * TASK, chunk)));
    }
    Ok(out)
}

/// Runs a row kernel (one with last-dimension reductions): `f(row, scratch, out)` fills
/// the whole row `out`; `scratch` holds `scratch_tiles` tiles. Rows run in parallel
/// when the output is large.
pub fn run_rows<F: Compute, E: Element>(
    op: &'static str,
    plan: &Plan,
    srcs: &[Src<'_>],
    scratch_tiles: usize,
    f: impl Fn(&Row<'_, '_>, &mut [F], &mut [F]) + Sync,
) -> Result<Vec<E>, KernelError> {
    check_srcs(op, plan, srcs)?;
    let n = plan.numel();
    let inner = plan.inner;
    let mut out = vec![E::default(); n];
    if n == 0 {
        return Ok(out);
    }
    let rows_per_task = (TASK / inner).max(1);
    let task = |(first, chunk): (usize, &mut [E])| {
        let mut scratch = vec![F::ZERO; TILE * scratch_tiles.max(1)];
        let mut orow = vec![F::ZERO; inner];
        for (i, o) in chunk.chunks_mut(inner).enumerate() {
            let r = Row {
                plan,
                srcs,
                row: first + i,
            };
            f(&r, &mut scratch, &mut orow);
            F::store(&orow, o);
        }
    };
    if n < PAR_THRESHOLD {
        task((0, &mut out));
    } else {
        out.par_chunks_mut(rows_per_task * inner)
            .enumerate()
            .for_each(|(c, chunk)| task((c * rows_per_task, chunk)));
    }
    Ok(out)
}

const LANES: usize = 8;

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

    /// The total.
    #[inline]
    pub fn total(&self) -> F {
        let mut t = F::ZERO;
        for &l in &self.lanes {
            t += l;
        }
        t
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
        let mut t = F::NEG_INFINITY;
        for &l in &self.lanes {
            t = t.max_nan(l);
        }
        t
    }
}
