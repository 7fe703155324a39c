//! The weight packed for the packed GEMM's micro-kernels ([`PackedB`]): panels of a
//! kernel's tile width, packed from the weight as stored or from its transpose, a block
//! at a time so that a weight mapped from a file gives its pages back as it goes.

use super::panel_width;
use crate::cpu::Isa;

/// Rows of the weight [`PackedB::pack_by_rows`] packs before it reports them done: 64
/// rows of a `[768, 50257]` LM head are 12 MiB.
pub(crate) const PACK_ROWS: usize = 64;

/// Depths of a transposed weight [`PackedB::pack_transposed_by_columns`] copies at a
/// time per panel: a `64 x 32` block (8 KiB) of the panel stays in L1 while its 32
/// source rows are read 256 bytes each.
pub(crate) const PACK_DEPTHS: usize = 64;

/// Floats of alignment of a packed matrix's start (64 bytes: a cache line, so no
/// panel row's vector load crosses one).
const ALIGN: usize = 16;

/// A `k x n` f32 matrix packed for [`gemm`](super::gemm) on one [`Isa`]'s kernel: panels of `NR`
/// columns (the kernel's [`Kernel::NR`](super::Kernel::NR)), each `k` rows of `NR` floats (zero past
/// column `n`), from a 64-byte boundary of `data`.
#[derive(Debug, Clone)]
pub(crate) struct PackedB {
    pub(super) isa: Isa,
    pub(super) nr: usize,
    pub(super) k: usize,
    pub(super) n: usize,
    /// The panels from `start` on (the floats before it align them).
    data: Vec<f32>,
    start: usize,
}

impl PackedB {
    /// Packs columns `col0..col0 + n` of the `k`-row matrix `b` (row stride `ldb`) for
    /// `isa`'s kernel; `None` where no packed GEMM runs on `isa` ([`Isa::Baseline`]).
    ///
    /// Panics when `b` is too short for that (an internal bug: callers check shapes).
    #[cfg(test)]
    pub(crate) fn pack(
        b: &[f32],
        kn: (usize, usize),
        ldb: usize,
        col0: usize,
        isa: Isa,
    ) -> Option<PackedB> {
        PackedB::pack_by_rows(b, kn, ldb, col0, isa, &mut |_| {})
    }

    /// [`PackedB::pack`], [`PACK_ROWS`] rows of `b` at a time, calling `rows_done` with
    /// each block of rows once they are packed (and not read again): a weight mapped
    /// from a file gives those pages back as it goes.
    pub(crate) fn pack_by_rows(
        b: &[f32],
        (k, n): (usize, usize),
        ldb: usize,
        col0: usize,
        isa: Isa,
        rows_done: &mut dyn FnMut(std::ops::Range<usize>),
    ) -> Option<PackedB> {
        let nr = panel_width(isa)?;
        if k > 0 && n > 0 {
            assert!(
                col0 + n <= ldb && (k - 1) * ldb + col0 + n <= b.len(),
                "packed weight out of bounds"
            );
        }
        let panels = n.div_ceil(nr);
        let mut data = vec![0f32; panels * k * nr + ALIGN];
        let start = data.as_ptr().align_offset(ALIGN * 4).min(ALIGN);
        for p0 in (0..k).step_by(PACK_ROWS) {
            let p1 = k.min(p0 + PACK_ROWS);
            for (q, panel) in data[start..]
                .chunks_exact_mut((k * nr).max(1))
                .enumerate()
                .take(panels)
            {
                let j0 = q * nr;
                let w = nr.min(n - j0);
                for (p, row) in panel.chunks_exact_mut(nr).enumerate().take(p1).skip(p0) {
                    let src = p * ldb + col0 + j0;
                    row[..w].copy_from_slice(&b[src..src + w]);
                }
            }
            rows_done(p0..p1);
        }
        Some(PackedB {
            isa,
            nr,
            k,
            n,
            data,
            start,
        })
    }

    /// Packs columns `col0..col0 + n` of the `k x N` matrix whose transpose `bt` holds
    /// (`bt` stores it `[N, k]`, row stride `ld >= k`: column `j` of the matrix is row
    /// `j` of `bt`), for `isa`'s kernel, one panel at a time: each panel's `NR` rows of
    /// `bt` are read [`PACK_DEPTHS`] depths at a time (a `PACK_DEPTHS x NR` block of the
    /// panel is written while it sits in L1), then `cols_done` is called with the rows
    /// of `bt` (`col0 + j0..col0 + j1`) the panel packed, which are not read again.
    /// `None` where no packed GEMM runs on `isa`.
    ///
    /// Panics when `bt` is too short for that (an internal bug: callers check shapes).
    pub(crate) fn pack_transposed_by_columns(
        bt: &[f32],
        (k, n): (usize, usize),
        ld: usize,
        col0: usize,
        isa: Isa,
        cols_done: &mut dyn FnMut(std::ops::Range<usize>),
    ) -> Option<PackedB> {
        let nr = panel_width(isa)?;
        if k > 0 && n > 0 {
            assert!(
                k <= ld && (col0 + n - 1) * ld + k <= bt.len(),
                "packed transposed weight out of bounds"
            );
        }
        let panels = n.div_ceil(nr);
        let mut data = vec![0f32; panels * k * nr + ALIGN];
        let start = data.as_ptr().align_offset(ALIGN * 4).min(ALIGN);
        for (q, panel) in data[start..]
            .chunks_exact_mut((k * nr).max(1))
            .enumerate()
            .take(panels)
        {
            let j0 = q * nr;
            let w = nr.min(n - j0);
            for p0 in (0..k).step_by(PACK_DEPTHS) {
                let p1 = k.min(p0 + PACK_DEPTHS);
                let block = &mut panel[p0 * nr..p1 * nr];
                for jj in 0..w {
                    let src = (col0 + j0 + jj) * ld;
                    let column = &bt[src + p0..src + p1];
                    for (row, &v) in block.chunks_exact_mut(nr).zip(column) {
                        row[jj] = v;
                    }
                }
            }
            cols_done(col0 + j0..col0 + j0 + w);
        }
        Some(PackedB {
            isa,
            nr,
            k,
            n,
            data,
            start,
        })
    }

    /// Depth (rows of the packed matrix).
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// The instruction set whose kernel this is packed for.
    pub(crate) fn isa(&self) -> Isa {
        self.isa
    }

    /// Bytes held.
    pub(crate) fn nbytes(&self) -> usize {
        self.data.len() * 4
    }

    /// The packed panels.
    pub(super) fn panels(&self) -> &[f32] {
        &self.data[self.start..]
    }
}
