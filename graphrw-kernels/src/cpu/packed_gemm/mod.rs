//! An f32 GEMM whose right operand, a layer's weight, is packed once ([`PackedB`],
//! held by [`super::PackedWeight`]) and reused by every call, as onnxruntime's MLAS does
//! with constant weights: the `gemm` crate packs the weight again on every call (about
//! a twentieth of a `512 x 768 x 768` projection).
//!
//! This module is the driver, the same for every instruction set: packing, checks,
//! blocking and the split over threads. The micro-kernels, one per [`Isa`], are in
//! [`avx512`] (a `12 x 32` tile in `zmm` registers) and [`avx2`] (a `6 x 16` tile in
//! `ymm` registers, for x86-64 without AVX-512); a weight is packed for one of them, in
//! panels of its tile's width ([`Kernel::NR`] columns, each `k x NR`, row by row). The
//! left operand is read in place, as MLAS does; each depth step of a micro-tile loads
//! the weight panel's row and broadcasts one element of each of its rows. Depths run in
//! blocks of [`Kernel::KC`] (a weight micro-panel stays in cache while a block of
//! [`Kernel::MC`] rows passes over it). Work is split over rayon's threads by rows (or
//! by panels when there are too few rows).
//!
//! The result can be written in column blocks (`[.., H, S, D]`, the head-major layout
//! attention reads): see [`Layout`].
//!
//! Measured against the `gemm` crate at 2 threads on a 2-core Zen 4, weight packed
//! beforehand (GFLOP/s, through `matmul_epilogue_with`, best of 30, 2 rounds, AVX-512
//! kernel): `512 x 768 x 768` 227 against 221, `512 x 768 x 3072` 225 against 214,
//! `512 x 3072 x 768` 222 against 218, `512 x 1024 x 1024` 215 against 210 (195 before
//! rows 4 KiB apart were copied, see [`aliases`]). Products deeper than eight times
//! their width stay on the `gemm` crate ([`super::PackedWeight::new`]).

mod avx2;
mod avx512;
mod pack;
pub mod prefetch;
#[cfg(test)]
mod tests;

use rayon::prelude::*;

use super::matmul::Broadcast;
use super::matmul::{activate_tile_f32, TileStore};
use crate::cpu::Isa;
pub(crate) use pack::PackedB;

/// A micro-kernel of the packed GEMM: one `MR x NR` tile of the product.
pub(crate) trait Kernel {
    /// Rows per micro-tile.
    const MR: usize;
    /// Columns per micro-tile and per packed weight panel.
    const NR: usize;
    /// Depths per block.
    const KC: usize;
    /// Rows per block: the rows that pass over one weight micro-panel before the next.
    const MC: usize;
    /// Whether the tile's depth loops prefetch the stream of [`Kernel::tile`]'s `bp.1`
    /// as they go (64 bytes every four depths), so that a tile's share of the next
    /// weight block is asked for while its FMAs run; otherwise the share is prefetched
    /// in a burst before the tile ([`panel_block`]).
    const PREFETCH_IN_LOOP: bool;

    /// One tile: `c = a @ bp + bias + add_from` over `kc` depths for the `h` rows of
    /// `a` at stride `lda` (a tile of fewer than `MR` rows computes only those), storing
    /// `w` columns at row stride `ldc`; `bias` (`w` values) and `add_from` (a tile laid
    /// out as `c`'s, which may be `c` itself) are added unless null. `bp` is the packed
    /// panel and the stream of lines to prefetch ([`Kernel::PREFETCH_IN_LOOP`]; the
    /// panel itself where there is none).
    ///
    /// # Safety
    /// The CPU has the kernel's instruction set; `a` readable for `h` rows of `kc`
    /// floats at stride `lda`, `bp` for `NR kc`, `bias` (when not null) for `w` floats,
    /// `add_from` (when not null) for `h` rows of `w` floats at stride `ldc`; `c`
    /// writable for `1 <= h <= MR` rows of `w <= NR` floats at stride `ldc`.
    unsafe fn tile(
        kc: usize,
        a: (*const f32, usize),
        bp: (*const f32, *const f32),
        add: (*const f32, *const f32),
        c: (*mut f32, usize),
        hw: (usize, usize),
    );
}

/// Columns per packed panel for `isa` (`None` where no packed GEMM runs on it).
pub(crate) fn panel_width(isa: Isa) -> Option<usize> {
    match isa {
        Isa::Avx512 => Some(<avx512::Avx512<false> as Kernel>::NR),
        Isa::Avx2Fma => Some(<avx2::Avx2 as Kernel>::NR),
        Isa::Baseline => None,
    }
}

/// Where result element `(i, j)` goes: `c[(j / block) * block_stride + i * ldc + j %
/// block]`. A plain row-major result is one block (`block = n`, `ldc = n`); the
/// head-major `[H, S, D]` result has `block = D`, `block_stride = S * D`, `ldc = D`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Row stride within a block.
    pub(crate) ldc: usize,
    /// Columns per block: `n`, or a multiple of the panel width (so no micro-tile spans
    /// two).
    pub(crate) block: usize,
    /// Distance between blocks.
    pub(crate) block_stride: usize,
}

impl Layout {
    /// The row-major `m x n` result.
    fn rows(n: usize) -> Layout {
        Layout {
            ldc: n,
            block: n.max(1),
            block_stride: 0,
        }
    }

    /// Elements of `c` the result spans, for `m` rows and `n` columns.
    fn extent(&self, m: usize, n: usize) -> usize {
        if m == 0 || n == 0 {
            return 0;
        }
        let blocks = n.div_ceil(self.block);
        let last = n - (blocks - 1) * self.block;
        (blocks - 1) * self.block_stride + (m - 1) * self.ldc + last
    }
}

/// Why [`gemm`] refused its operands (an internal bug: callers check shapes first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GemmShapeError(pub(crate) String);

/// `c = act(a @ b + bias + residual (+ c))` ([`TileStore`]) for `a` of `m` rows (row stride `lda`,
/// `b.k()` columns) and packed `b`, the result laid out by `layout`.
///
/// Refused when the CPU lacks the instruction set `b` is packed for, when a slice is too
/// short, or when the layout's blocks are neither the whole width nor a multiple of the
/// panel width.
pub(crate) fn gemm(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut [f32],
    layout: Layout,
    store: TileStore<'_, f32>,
) -> Result<(), GemmShapeError> {
    gemm_prefetching(m, (a, lda), b, c, (layout, store), None)
}

/// [`gemm`], its tiles prefetching the next weight block or not as `prefetch` says
/// (`None`: as measured on this CPU, [`prefetch::next_block`]).
pub(crate) fn gemm_prefetching(
    m: usize,
    (a, lda): (&[f32], usize),
    b: &PackedB,
    c: &mut [f32],
    (layout, store): (Layout, TileStore<'_, f32>),
    prefetch: Option<bool>,
) -> Result<(), GemmShapeError> {
    let (k, n, nr) = (b.k, b.n, b.nr);
    if !b.isa.is_available() {
        return Err(GemmShapeError(format!(
            "the CPU lacks {:?}, which the weight is packed for",
            b.isa
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k > 0 && (lda < k || (m - 1) * lda + k > a.len()) {
        return Err(GemmShapeError(format!(
            "a has {} elements, {m} rows of {k} at stride {lda} need more",
            a.len()
        )));
    }
    if layout.block < n && !layout.block.is_multiple_of(nr) {
        return Err(GemmShapeError(format!(
            "column blocks of {} are not a multiple of {nr}",
            layout.block
        )));
    }
    if layout.block < n && layout.block_stride < m.saturating_sub(1) * layout.ldc + layout.block
        || layout.ldc < layout.block.min(n)
    {
        return Err(GemmShapeError("the result's blocks or rows overlap".into()));
    }
    if store.bias.is_some_and(|bias| bias.len() < n) {
        return Err(GemmShapeError(format!("a bias of fewer than {n} values")));
    }
    let extent = layout.extent(m, n);
    if extent > c.len() {
        return Err(GemmShapeError(format!(
            "c has {} elements, the result spans {extent}",
            c.len(),
        )));
    }
    match store.residual {
        Some(_) if store.accumulate => {
            return Err(GemmShapeError("a residual and accumulate both".into()));
        }
        Some(r) if r.len() < extent => {
            return Err(GemmShapeError(format!(
                "the residual has {} elements, the result spans {extent}",
                r.len()
            )));
        }
        _ => {}
    }
    if k == 0 {
        // The product is zeros: what is left is the bias and residual.
        for j in 0..n {
            let add = store.bias.map_or(0.0, |bias| bias[j]);
            let at = (j / layout.block) * layout.block_stride + j % layout.block;
            for e in (0..m).map(|i| at + i * layout.ldc) {
                let base = match store.residual {
                    Some(r) => r[e],
                    None if store.accumulate => c[e],
                    None => 0.0,
                };
                c[e] = match store.activation {
                    Some((act, _)) => act.apply(base + add),
                    None => base + add,
                };
            }
        }
        return Ok(());
    }
    // A weight that stays in L2 between calls has nothing to prefetch, and a small model
    // should not pay for the measurement on its first run.
    let prefetch = prefetch
        .unwrap_or_else(|| b.nbytes() >= prefetch::MIN_BYTES && prefetch::next_block(b.isa));
    match b.isa {
        Isa::Avx512 => match store.broadcast {
            Broadcast::InFma => {
                drive::<avx512::Avx512<false>>(m, (a, lda), b, c, (layout, store), prefetch)
            }
            Broadcast::InRegister => {
                drive::<avx512::Avx512<true>>(m, (a, lda), b, c, (layout, store), prefetch)
            }
        },
        Isa::Avx2Fma => drive::<avx2::Avx2>(m, (a, lda), b, c, (layout, store), prefetch),
        // `b.isa.is_available()` above, and nothing is packed for the baseline.
        Isa::Baseline => return Err(GemmShapeError("no packed GEMM without AVX2".into())),
    }
    Ok(())
}

/// The checked product of [`gemm`] on kernel `K` (the one `b` is packed for), split over
/// rayon's threads.
fn drive<K: Kernel>(
    m: usize,
    (a, lda): (&[f32], usize),
    b: &PackedB,
    c: &mut [f32],
    (layout, store): (Layout, TileStore<'_, f32>),
    prefetch: bool,
) {
    let (k, n) = (b.k, b.n);
    let (mr, panels) = (K::MR, n.div_ceil(K::NR));
    let threads = rayon::current_num_threads().max(1);
    let work = m * n * k;
    let c = SharedOut(c.as_mut_ptr());
    let run = |rows: (usize, usize), cols: (usize, usize)| {
        // SAFETY: the checks above keep every element the tasks address inside `c`
        // (`layout.extent`), the residual, `a` and `b`; tasks write disjoint
        // rectangles of micro-tiles (`tile_rectangles`, or disjoint panels), and `c`
        // stays borrowed for the whole call.
        unsafe { block::<K>(a, lda, b, (rows, cols), c, (layout, store), prefetch) }
    };
    if threads == 1 || work < 1 << 20 {
        run((0, m), (0, panels));
    } else if m >= threads * 2 * mr && !splits_by_panels(m, k, panels * K::NR) {
        // Each thread an equal run of the micro-tiles, in row-major order.
        let tiles = m.div_ceil(mr);
        (0..threads).into_par_iter().for_each(|t| {
            let share = (
                tiles * panels * t / threads,
                tiles * panels * (t + 1) / threads,
            );
            for (tiles, cols) in tile_rectangles(share, panels) {
                run((tiles.0 * mr, m.min(tiles.1 * mr)), cols);
            }
        });
    } else {
        let chunk = panels.div_ceil(threads);
        (0..panels.div_ceil(chunk))
            .into_par_iter()
            .for_each(|t| run((0, m), (t * chunk, panels.min((t + 1) * chunk))));
    }
}

/// The micro-tiles `units.0..units.1` of a result of `panels` panels, numbered in
/// row-major order (tile row `u / panels`, panel `u % panels`), as at most three
/// rectangles `(tile rows, panels)`: the end of a first tile row, whole tile rows, the
/// start of a last one. Splitting the result this way gives each thread the same
/// number of micro-tiles: split by whole tile rows, 512 rows (43 tiles of 12) left
/// one of two threads a tile row more than the other, 2% of the product's time.
fn tile_rectangles(
    units: (usize, usize),
    panels: usize,
) -> impl Iterator<Item = ((usize, usize), (usize, usize))> {
    let (first_row, first_col) = (units.0 / panels, units.0 % panels);
    let (end_row, end_col) = (units.1 / panels, units.1 % panels);
    let rects = if first_row == end_row {
        [
            ((first_row, first_row + 1), (first_col, end_col)),
            EMPTY,
            EMPTY,
        ]
    } else {
        // The whole rows start after the first row when the run starts inside it.
        let whole_from = first_row + usize::from(first_col > 0);
        [
            ((first_row, first_row + 1), (first_col, panels)),
            ((whole_from, end_row), (0, panels)),
            ((end_row, end_row + 1), (0, end_col)),
        ]
    };
    let starts_inside = first_col > 0 || first_row == end_row;
    rects
        .into_iter()
        .enumerate()
        // The first rectangle only when the run starts inside a row (else the whole
        // rows hold it); none with no rows or no panels.
        .filter(move |&(i, (r, c))| (i > 0 || starts_inside) && r.0 < r.1 && c.0 < c.1)
        .map(|(_, rect)| rect)
}

/// No rectangle.
const EMPTY: ((usize, usize), (usize, usize)) = ((0, 0), (0, 0));

/// The result's base pointer, shared by the tasks of one call (each writes its own
/// elements).
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: the tasks of one `gemm` call write disjoint elements through it while the
// call holds the `&mut` borrow it came from.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

/// Rows `rows.0..rows.1` and weight panels `cols.0..cols.1` of the product. The left
/// operand is read in place (as MLAS does): a micro-tile broadcasts from its rows;
/// but where its row stride is a multiple of 4 KiB ([`aliases`]), the rows are first
/// copied at a padded stride ([`A_COPY`]): all at once where they stay in cache
/// ([`resident_rows`]), else a block at a time.
///
/// # Safety
/// The CPU has `K`'s instruction set; `a` holds the rows at stride `lda` (`k` each); `c` addresses, through
/// `layout`, every element of those rows and panels' columns, and no other thread
/// writes them during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn block<K: Kernel>(
    a: &[f32],
    lda: usize,
    b: &PackedB,
    (rows, cols): ((usize, usize), (usize, usize)),
    c: SharedOut,
    (layout, store): (Layout, TileStore<'_, f32>),
    prefetch: bool,
) {
    let k = b.k;
    let mut copy = aliases(lda).then(|| A_COPY.take());
    if resident_rows(rows.1 - rows.0, k) {
        let mine = &a[rows.0 * lda..];
        match copy {
            // SAFETY: the caller's contract, which is `block_by_panels`' (the rows
            // start at `mine`).
            None => unsafe {
                block_by_panels::<K>(mine, lda, b, (rows, cols), c, (layout, store), prefetch)
            },
            Some(mut buf) => {
                // All the rows, copied once at a padded stride, then weight panel by
                // panel over every depth as for rows read in place: a panel streams
                // from memory in one run instead of a depth block at a time.
                let ld = k + COPY_PAD;
                let m = rows.1 - rows.0;
                if buf.len() < m * ld {
                    buf.resize(m * ld, 0.0);
                }
                for (i, row) in buf[..m * ld].chunks_exact_mut(ld).enumerate() {
                    row[..k].copy_from_slice(&mine[i * lda..][..k]);
                }
                // SAFETY: the copy holds the rows' `k` depths at stride `ld`; the
                // caller's contract covers the rest.
                unsafe {
                    block_by_panels::<K>(&buf, ld, b, (rows, cols), c, (layout, store), prefetch)
                };
                A_COPY.set(buf);
            }
        }
        return;
    }
    for pc in (0..k).step_by(K::KC) {
        let kc = K::KC.min(k - pc);
        let row_block = even_row_block(rows.1 - rows.0, K::MC, K::MR);
        for ic in (rows.0..rows.1).step_by(row_block) {
            let mc = row_block.min(rows.1 - ic);
            // The block's rows: in place, or copied at stride `kc + COPY_PAD`.
            let (block_a, block_lda): (&[f32], usize) = match copy.as_mut() {
                Some(buf) => {
                    let ld = kc + COPY_PAD;
                    if buf.len() < mc * ld {
                        buf.resize(mc * ld, 0.0);
                    }
                    for (i, row) in buf[..mc * ld].chunks_exact_mut(ld).enumerate() {
                        row[..kc].copy_from_slice(&a[(ic + i) * lda + pc..][..kc]);
                    }
                    (&buf[..], ld)
                }
                None => (&a[ic * lda + pc..], lda),
            };
            for q in cols.0..cols.1 {
                // The next panel's block of the same depths, while this one runs.
                let ahead = (q + 1 < cols.1 && prefetch).then_some((q + 1, pc));
                // SAFETY: the block's rows `ic..ic + mc` start at `block_a` and hold
                // `kc` depths at stride `block_lda`; the caller's contract covers the
                // rest.
                unsafe {
                    panel_block::<K>(
                        b,
                        (q, pc, kc),
                        ahead,
                        (block_a.as_ptr(), block_lda),
                        (ic, ic + mc),
                        c,
                        layout,
                        store,
                    );
                }
            }
        }
    }
    if let Some(buf) = copy {
        A_COPY.set(buf);
    }
}

/// Bytes of the left operand that stay in cache (L2, else the last level) while the
/// weight streams past, panel by panel. A micro-tile reads 4 bytes of the left operand
/// per FMA cycle whatever the row count, which L3 delivers, so this is bounded by
/// the last-level cache a core can count on (4 MiB), not by L2. Measured on a 2-core
/// Zen 3 (512 KiB L2), 2 threads, against 256 KiB: `512 x 768 x 3072` 8-17% faster,
/// GPT-2's LM head at 512 rows 6-9%, the 128-row products within the noise.
const RESIDENT_A_BYTES: usize = 4 << 20;

/// Whether `rows` rows of depth `k` fit in [`RESIDENT_A_BYTES`]: then each weight panel
/// is run over every depth before the next ([`block_by_panels`]), so each result tile
/// is finished while in L1 instead of being written back once per depth block (the
/// `512 x 768 x 50257` LM head of GPT-2 at S = 512: a 103 MB result written three
/// times).
fn resident_rows(rows: usize, k: usize) -> bool {
    rows * k * std::mem::size_of::<f32>() <= RESIDENT_A_BYTES
}

/// Whether a product of `m` rows, depth `k` and `n` columns is split over threads by
/// weight panels rather than by rows: when each thread's rows would not stay in cache
/// but all of them together do ([`resident_rows`]), and the result is wider than tall.
/// Each thread then reads its own columns of the weight once, where a split by rows
/// made every thread stream the whole weight (154 MB for GPT-2's LM head).
fn splits_by_panels(m: usize, k: usize, n: usize) -> bool {
    n >= 2 * m && resident_rows(m, k)
}

/// Rows per row block for `rows` rows: at most `mc`, the blocks as equal as whole
/// micro-tiles of `mr` rows allow. (256 rows in blocks of at most 240 were a block of
/// 240 and one of 16, which streamed the whole weight again for 16 rows.)
fn even_row_block(rows: usize, mc: usize, mr: usize) -> usize {
    let blocks = rows.div_ceil(mc).max(1);
    rows.div_ceil(blocks)
        .next_multiple_of(mr)
        .clamp(mr, mc.max(mr))
}

/// [`block`] for rows that stay in cache ([`resident_rows`]), whose left operand `a`
/// starts at row `rows.0` (in place, or a copy): weight panel by weight panel, each
/// over every depth block, so that a result tile is stored once per depth block while
/// it is still in L1, and each panel streams in one run.
///
/// # Safety
/// As [`block`], with `a` holding rows `rows.0..rows.1` from its start.
#[allow(clippy::too_many_arguments)]
unsafe fn block_by_panels<K: Kernel>(
    a: &[f32],
    lda: usize,
    b: &PackedB,
    (rows, cols): ((usize, usize), (usize, usize)),
    c: SharedOut,
    (layout, store): (Layout, TileStore<'_, f32>),
    prefetch: bool,
) {
    let k = b.k;
    for q in cols.0..cols.1 {
        for pc in (0..k).step_by(K::KC) {
            let kc = K::KC.min(k - pc);
            // The weight streams in order: the next depth block, or the next panel's first.
            let ahead = if !prefetch {
                None
            } else if pc + kc < k {
                Some((q, pc + kc))
            } else {
                (q + 1 < cols.1).then_some((q + 1, 0))
            };
            // SAFETY: `a` holds rows `rows.0..rows.1`, `kc` depths from `pc` at stride
            // `lda` (the caller's contract, which is `panel_block`'s for the rest).
            unsafe {
                panel_block::<K>(
                    b,
                    (q, pc, kc),
                    ahead,
                    (a.as_ptr().add(pc), lda),
                    rows,
                    c,
                    layout,
                    store,
                );
            }
        }
    }
}

/// Depths `pc..pc + kc` of weight panel `q` for the result's rows `rows.0..rows.1`, whose
/// left-operand rows start at `a` (row `rows.0`, depth `pc`) at stride `lda`: one
/// micro-tile per `K::MR` rows. The bias is added in the first depth block, onto the
/// product alone; after it (or with `accumulate`) the product is added to the tile
/// itself, else to the residual's tile; the last depth block's tiles are then activated
/// ([`TileStore::activation`]) while in L1. Given a block `ahead` (where this CPU
/// measured it faster, [`prefetch::next_block`]), each tile prefetches its share of the
/// weight block `ahead` (panel, depth), the one the caller runs next, so the weight
/// streams from memory behind the tiles instead of stalling the first tile of each
/// block: spread over the tiles, the prefetches stay within the misses a core keeps
/// in flight. A kernel whose loops prefetch ([`Kernel::PREFETCH_IN_LOOP`]) is given
/// its share as a stream ([`in_loop_share`]); the others prefetch it in a burst before
/// the tile ([`prefetch_share`]; measured on a 2-core Zen 3 against one prefetch per
/// depth step in the first tile: `128 x 768 x 3072` 6-8% faster at one and two
/// threads, GPT-2's LM head at 128 rows 4%).
///
/// # Safety
/// The CPU has `K`'s instruction set; `a` holds those rows' `kc` depths at stride `lda`;
/// `c` addresses, through `layout`, every element of those rows and the panel's
/// columns, which no other thread writes during the call; the bias holds the panel's
/// columns and the residual the same elements as `c` (`gemm` checked both).
#[allow(clippy::too_many_arguments)]
unsafe fn panel_block<K: Kernel>(
    b: &PackedB,
    (q, pc, kc): (usize, usize, usize),
    ahead: Option<(usize, usize)>,
    (a, lda): (*const f32, usize),
    rows: (usize, usize),
    c: SharedOut,
    layout: Layout,
    store: TileStore<'_, f32>,
) {
    let (k, n, nr) = (b.k, b.n, K::NR);
    let j0 = q * nr;
    let w = nr.min(n - j0);
    let col = (j0 / layout.block) * layout.block_stride + j0 % layout.block;
    let bp = b.panels()[(q * k + pc) * nr..].as_ptr();
    // The next block: `KC` depths or what is left of the panel.
    let ahead = ahead.map(|(q, pc)| &b.panels()[(q * k + pc) * nr..][..K::KC.min(k - pc) * nr]);
    let tiles = (rows.1 - rows.0).div_ceil(K::MR);
    let bias = match store.bias {
        Some(bias) if pc == 0 => bias[j0..].as_ptr(),
        _ => std::ptr::null(),
    };
    for (t, i) in (rows.0..rows.1).step_by(K::MR).enumerate() {
        let h = K::MR.min(rows.1 - i);
        let pf = match ahead {
            Some(ahead) if K::PREFETCH_IN_LOOP => in_loop_share(ahead, t, kc).unwrap_or(bp),
            Some(ahead) => {
                prefetch_share(ahead, (t, tiles));
                bp
            }
            None => bp,
        };
        let at = col + i * layout.ldc;
        let tile = c.0.wrapping_add(at);
        let add_from: *const f32 = match store.residual {
            _ if pc > 0 || store.accumulate => tile,
            Some(r) => r[at..].as_ptr(),
            None => std::ptr::null(),
        };
        // SAFETY: rows `i..i + h` of `a` hold `kc` depths at stride `lda`; the packed
        // panel holds `kc` depths of `nr` floats from `bp`; `bias`, when not null, `w`
        // values; the tile's `h` rows and `w` columns are result elements of this task,
        // and, in the residual, at the same offsets; the CPU has `K`'s instructions
        // (the function's contract).
        unsafe {
            K::tile(
                kc,
                (a.add((i - rows.0) * lda), lda),
                (bp, pf),
                (bias, add_from),
                (tile, layout.ldc),
                (h, w),
            );
        }
        if let Some((act, isa)) = store.activation.filter(|_| pc + kc == k) {
            // SAFETY: the tile just stored: `h` rows of `w` result elements of this
            // task at stride `ldc`, which no other thread accesses (the contract).
            unsafe { activate_tile_f32(act, isa, tile, layout.ldc, (h, w)) };
        }
    }
}

thread_local! {
    /// Each thread's copy of a block of the left operand (at most [`Kernel::MC`] rows
    /// of `KC + COPY_PAD` floats, 1.5 MiB for AVX-512's), kept for its next product.
    static A_COPY: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Padding of a copied row (64 bytes): rows of `kc + COPY_PAD` floats do not share
/// their 4 KiB offset.
const COPY_PAD: usize = 16;

/// Whether rows `lda` floats apart all fall at the same offset of a 4 KiB page. The
/// rows a micro-tile broadcasts from then map to the same L1 sets, more than the
/// cache has ways: the rows evict each other at every step, and a product of depth
/// 3072 or 4096 ran 8% slower (202 against 222 GFLOP/s at depth 3088). Such rows are
/// copied first, at a padded stride.
fn aliases(lda: usize) -> bool {
    (lda * std::mem::size_of::<f32>()).is_multiple_of(4096)
}

/// Bytes of a cache line.
const LINE_BYTES: usize = 64;

/// Floats a tile's depth loop prefetches per four depths ([`Kernel::PREFETCH_IN_LOOP`]).
const IN_LOOP_FLOATS: usize = LINE_BYTES / std::mem::size_of::<f32>();

/// Where tile `t`'s loop over `kc` depths starts prefetching `block`: tile after tile,
/// each the lines its loop reaches (one line every four depths), so that the first
/// tiles of a block prefetch all of the next; `None` for the tiles past its end, and
/// where `kc < 4` (the loops then never prefetch).
fn in_loop_share(block: &[f32], t: usize, kc: usize) -> Option<*const f32> {
    let per_tile = kc / 4 * IN_LOOP_FLOATS;
    if per_tile == 0 {
        return None;
    }
    block
        .get(t * per_tile..)
        .filter(|s| !s.is_empty())
        .map(<[f32]>::as_ptr)
}

/// Prefetches share `t` of `tiles` of `block`'s cache lines (into L1).
fn prefetch_share(block: &[f32], (t, tiles): (usize, usize)) {
    let lines = std::mem::size_of_val(block).div_ceil(LINE_BYTES);
    let (first, end) = (lines * t / tiles, lines * (t + 1) / tiles);
    #[cfg(target_arch = "x86_64")]
    for line in first..end {
        let at = block.as_ptr().wrapping_byte_add(line * LINE_BYTES) as *const i8;
        // SAFETY: a prefetch is a hint that reads nothing architecturally; `at` lies in
        // `block` (its last line may start inside it and end past it).
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (first, end);
}
