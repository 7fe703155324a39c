//! An f32 GEMM for AVX-512 whose right operand, a layer's weight, is packed once
//! ([`PackedB`], held by [`super::PackedWeight`]) and reused by every call, as
//! onnxruntime's MLAS does with constant weights: the `gemm` crate packs the weight
//! again on every call (about a twentieth of a `512 x 768 x 768` projection).
//!
//! The weight is packed in panels of [`NR`] columns (each `k x NR`, row by row); the
//! left operand is read in place, as MLAS does. A `MR x NR` micro-tile keeps its 24
//! accumulators in `zmm` registers; each depth step loads two weight vectors and
//! broadcasts one element of each of its 12 rows. Depths run in blocks of [`KC`] (a
//! weight micro-panel, 96 KiB, stays in L2 while a block of [`MC`] rows passes over
//! it). Work is split over rayon's threads by rows (or by panels when there are too
//! few rows).
//!
//! The result can be written in column blocks (`[.., H, S, D]`, the head-major layout
//! attention reads): see [`Layout`].
//!
//! Measured against the `gemm` crate at 2 threads on a 2-core Zen 4, weight packed
//! beforehand (GFLOP/s, through `matmul_epilogue_with`, best of 30, 2 rounds):
//! `512 x 768 x 768` 227 against 221, `512 x 768 x 3072` 225 against 214,
//! `512 x 3072 x 768` 222 against 218, `512 x 1024 x 1024` 215 against 210 (195 before
//! rows 4 KiB apart were copied, see [`aliases`]). Products deeper than eight times
//! their width stay on the `gemm` crate ([`super::PackedWeight::new`]).

use std::arch::x86_64::*;

use rayon::prelude::*;

use super::matmul::TileStore;

/// Rows per micro-tile.
pub(crate) const MR: usize = 12;
/// Columns per micro-tile and per packed weight panel (two 16-lane vectors).
pub(crate) const NR: usize = 32;
/// Depths per block (measured: 256, 384 and 512 were slower on the shapes above).
const KC: usize = 768;
/// Rows per block: the rows that pass over one weight micro-panel before the next.
const MC: usize = 480;

/// Whether this GEMM may run: the CPU has what it is compiled for (AVX-512F) and the
/// thread's [`KernelOptions`](crate::KernelOptions) allow AVX-512.
pub(crate) fn available() -> bool {
    crate::KernelOptions::current().isa() >= crate::cpu::Isa::Avx512
        && crate::cpu::CpuFeatures::get().avx512f
}

/// A `k x n` f32 matrix packed for [`gemm`]: panels of [`NR`] columns, each `k` rows of
/// `NR` floats (zero past column `n`).
#[derive(Debug, Clone)]
pub(crate) struct PackedB {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedB {
    /// Packs columns `col0..col0 + n` of the `k`-row matrix `b` (row stride `ldb`).
    ///
    /// Panics when `b` is too short for that (an internal bug: callers check shapes).
    pub(crate) fn pack(b: &[f32], k: usize, n: usize, ldb: usize, col0: usize) -> PackedB {
        if k > 0 && n > 0 {
            assert!(
                col0 + n <= ldb && (k - 1) * ldb + col0 + n <= b.len(),
                "packed weight out of bounds"
            );
        }
        let panels = n.div_ceil(NR);
        let mut data = vec![0f32; panels * k * NR];
        for (q, panel) in data
            .chunks_exact_mut((k * NR).max(1))
            .enumerate()
            .take(panels)
        {
            let j0 = q * NR;
            let w = NR.min(n - j0);
            for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
                let src = p * ldb + col0 + j0;
                row[..w].copy_from_slice(&b[src..src + w]);
            }
        }
        PackedB { k, n, data }
    }

    /// Depth (rows of the packed matrix).
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub(crate) fn nbytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// Where result element `(i, j)` goes: `c[(j / block) * block_stride + i * ldc + j %
/// block]`. A plain row-major result is one block (`block = n`, `ldc = n`); the
/// head-major `[H, S, D]` result has `block = D`, `block_stride = S * D`, `ldc = D`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Row stride within a block.
    pub(crate) ldc: usize,
    /// Columns per block: `n`, or a multiple of [`NR`] (so no micro-tile spans two).
    pub(crate) block: usize,
    /// Distance between blocks.
    pub(crate) block_stride: usize,
}

impl Layout {
    /// The row-major `m x n` result.
    #[cfg(test)]
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

/// `c = a @ b + bias + residual (+ c)` ([`TileStore`]) for `a` of `m` rows (row stride `lda`,
/// `b.k()` columns) and packed `b`, the result laid out by `layout`.
///
/// Refused when the CPU lacks AVX-512F, when a slice is too short, or when the layout's
/// blocks are neither the whole width nor a multiple of [`NR`].
pub(crate) fn gemm(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut [f32],
    layout: Layout,
    store: TileStore<'_, f32>,
) -> Result<(), GemmShapeError> {
    let (k, n) = (b.k, b.n);
    if !available() {
        return Err(GemmShapeError("the CPU lacks AVX-512F".into()));
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
    if layout.block < n && !layout.block.is_multiple_of(NR) {
        return Err(GemmShapeError(format!(
            "column blocks of {} are not a multiple of {NR}",
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
                c[e] = base + add;
            }
        }
        return Ok(());
    }
    let panels = n.div_ceil(NR);
    let threads = rayon::current_num_threads().max(1);
    let work = m * n * k;
    let c = SharedOut(c.as_mut_ptr());
    let run = |rows: (usize, usize), cols: (usize, usize)| {
        // SAFETY: the checks above keep every element the tasks address inside `c`
        // (`layout.extent`), the residual, `a` and `b`; tasks write disjoint
        // rectangles of micro-tiles (`tile_rectangles`, or disjoint panels), and `c`
        // stays borrowed for the whole call.
        unsafe { block(a, lda, b, rows, cols, c, layout, store) }
    };
    if threads == 1 || work < 1 << 20 {
        run((0, m), (0, panels));
    } else if m >= threads * 2 * MR {
        // Each thread an equal run of the micro-tiles, in row-major order.
        let tiles = m.div_ceil(MR);
        (0..threads).into_par_iter().for_each(|t| {
            let share = (
                tiles * panels * t / threads,
                tiles * panels * (t + 1) / threads,
            );
            for (tiles, cols) in tile_rectangles(share, panels) {
                run((tiles.0 * MR, m.min(tiles.1 * MR)), cols);
            }
        });
    } else {
        let chunk = panels.div_ceil(threads);
        (0..panels.div_ceil(chunk))
            .into_par_iter()
            .for_each(|t| run((0, m), (t * chunk, panels.min((t + 1) * chunk))));
    }
    Ok(())
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
/// operand is read in place (as MLAS does): a micro-tile broadcasts from its 12 rows;
/// but where its row stride is a multiple of 4 KiB ([`aliases`]), each block of rows
/// is first copied at a padded stride ([`A_COPY`]).
///
/// # Safety
/// AVX-512F; `a` holds the rows at stride `lda` (`k` each); `c` addresses, through
/// `layout`, every element of those rows and panels' columns, and no other thread
/// writes them during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    a: &[f32],
    lda: usize,
    b: &PackedB,
    rows: (usize, usize),
    cols: (usize, usize),
    c: SharedOut,
    layout: Layout,
    store: TileStore<'_, f32>,
) {
    let (k, n) = (b.k, b.n);
    let mut copy = aliases(lda).then(|| A_COPY.take());
    for pc in (0..k).step_by(KC) {
        let kc = KC.min(k - pc);
        for ic in (rows.0..rows.1).step_by(MC) {
            let mc = MC.min(rows.1 - ic);
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
                let j0 = q * NR;
                let w = NR.min(n - j0);
                let col = (j0 / layout.block) * layout.block_stride + j0 % layout.block;
                let bp = b.data[(q * k + pc) * NR..].as_ptr();
                // The bias is added in the first depth block, onto the product alone.
                let bias = match store.bias {
                    Some(bias) if pc == 0 => bias[j0..].as_ptr(),
                    _ => std::ptr::null(),
                };
                for ir in (0..mc).step_by(MR) {
                    let h = MR.min(mc - ir);
                    let at = col + (ic + ir) * layout.ldc;
                    let tile = c.0.wrapping_add(at);
                    // What the product is added to: the tile itself after the first
                    // depth block (or with `accumulate`), else the residual's tile.
                    let add_from: *const f32 = match store.residual {
                        _ if pc > 0 || store.accumulate => tile,
                        Some(r) => r[at..].as_ptr(),
                        None => std::ptr::null(),
                    };
                    // SAFETY: rows `ir..ir + h` of the block hold `kc` depths at stride
                    // `block_lda`; the packed panel holds `kc` depths of `NR` floats
                    // from `bp`; `bias`, when not null, `w` values (`gemm` checked its
                    // length); the tile's `h` rows and `w` columns are result elements
                    // of this task (caller), and, in the residual, at the same offsets
                    // (`gemm` checked its extent).
                    unsafe {
                        micro(
                            kc,
                            (block_a.as_ptr().add(ir * block_lda), block_lda),
                            bp,
                            (bias, add_from),
                            (tile, layout.ldc),
                            (h, w),
                        );
                    }
                }
            }
        }
    }
    if let Some(buf) = copy {
        A_COPY.set(buf);
    }
}

thread_local! {
    /// Each thread's copy of a block of the left operand (at most [`MC`] rows of
    /// `KC + COPY_PAD` floats, 1.5 MiB), kept for its next product.
    static A_COPY: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Padding of a copied row (64 bytes): rows of `kc + COPY_PAD` floats do not share
/// their 4 KiB offset.
const COPY_PAD: usize = 16;

/// Whether rows `lda` floats apart all fall at the same offset of a 4 KiB page. The
/// 12 rows a micro-tile broadcasts from then map to the same L1 sets, more than the
/// cache has ways: the rows evict each other at every step, and a product of depth
/// 3072 or 4096 ran 8% slower (202 against 222 GFLOP/s at depth 3088). Such rows are
/// copied first, at a padded stride.
fn aliases(lda: usize) -> bool {
    (lda * std::mem::size_of::<f32>()).is_multiple_of(4096)
}

/// One `MR x NR` tile: `c = a @ bp + bias + add_from` over `kc` depths for the `h`
/// rows of `a` at stride `lda` (rows past `h` repeat the last, and are not stored),
/// storing `w` columns at row stride `ldc`; `bias` (`w` values) and `add_from` (a tile
/// laid out as `c`'s, which may be `c` itself) are added unless null.
///
/// # Safety
/// AVX-512F; `a` readable for `h` rows of `kc` floats at stride `lda`, `bp` for `NR kc`,
/// `bias` (when not null) for `w` floats, `add_from` (when not null) for `h` rows of
/// `w` floats at stride `ldc`; `c` writable for `1 <= h <= MR` rows of `w <= NR`
/// floats at stride `ldc`.
#[target_feature(enable = "avx512f")]
unsafe fn micro(
    kc: usize,
    (a, lda): (*const f32, usize),
    bp: *const f32,
    (bias, add_from): (*const f32, *const f32),
    (c, ldc): (*mut f32, usize),
    (h, w): (usize, usize),
) {
    // SAFETY: row `min(r, h - 1) < h` of the caller's rows.
    let row: [*const f32; MR] = std::array::from_fn(|r| unsafe { a.add(r.min(h - 1) * lda) });
    if !add_from.is_null() {
        for r in 0..h {
            // SAFETY: a prefetch reads nothing; the addresses are the tile's rows.
            unsafe {
                let at = add_from.add(r * ldc) as *const i8;
                _mm_prefetch::<_MM_HINT_T0>(at);
                _mm_prefetch::<_MM_HINT_T0>(at.add(64));
            }
        }
    }
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..kc {
        // SAFETY: `p < kc`: `NR` floats at `p * NR` of `bp`, one at `p` of each row.
        unsafe {
            let b0 = _mm512_loadu_ps(bp.add(p * NR));
            let b1 = _mm512_loadu_ps(bp.add(p * NR + 16));
            for (accr, &ar) in acc.iter_mut().zip(&row) {
                let x = _mm512_set1_ps(*ar.add(p));
                accr[0] = _mm512_fmadd_ps(x, b0, accr[0]);
                accr[1] = _mm512_fmadd_ps(x, b1, accr[1]);
            }
        }
    }
    let mask = |v: usize| -> __mmask16 {
        let cols = w.saturating_sub(16 * v).min(16);
        ((1u32 << cols) - 1) as __mmask16
    };
    let masks = [mask(0), mask(1)];
    if !bias.is_null() {
        for (v, &m) in masks.iter().enumerate() {
            // SAFETY: `bias` holds the tile's `w` values; lanes past `w` are masked.
            let add = unsafe { _mm512_maskz_loadu_ps(m, bias.add(16 * v)) };
            for accr in acc.iter_mut().take(h) {
                accr[v] = _mm512_add_ps(accr[v], add);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate().take(h) {
        for (v, &m) in masks.iter().enumerate() {
            if m == 0 {
                continue;
            }
            // SAFETY: row `r < h`, columns `16 v..` under mask `m` (`< w`): inside
            // the tile the caller gave.
            unsafe {
                let mut x = accr[v];
                if !add_from.is_null() {
                    let from = add_from.add(r * ldc + 16 * v);
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, from));
                }
                _mm512_mask_storeu_ps(c.add(r * ldc + 16 * v), m, x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::compare::{assert_close, Tol};

    fn widen(c: &[f32]) -> Vec<f64> {
        c.iter().map(|&x| x as f64).collect()
    }

    fn reference(m: usize, k: usize, n: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for p in 0..k {
                for j in 0..n {
                    c[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
            }
        }
        c
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i + seed * 31) * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// True where this CPU runs the packed GEMM. Elsewhere (no AVX-512F) checks the
    /// fallback's premise, that the GEMM refuses to run rather than compute, and prints
    /// the skip.
    fn runs_here(test: &str) -> bool {
        if available() {
            return true;
        }
        let packed = PackedB::pack(&values(8 * 4, 1), 8, 4, 4, 0);
        let mut c = vec![0.0; 2 * 4];
        let refused = gemm(
            2,
            &values(2 * 8, 2),
            8,
            &packed,
            &mut c,
            Layout::rows(4),
            TileStore::default(),
        )
        .expect_err("the packed GEMM ran on a CPU without AVX-512F");
        assert!(refused.0.contains("AVX-512F"), "{refused:?}");
        println!("SKIPPED: {test} needs AVX-512F (checked: the packed GEMM refuses to run)");
        false
    }

    #[test]
    fn tile_rectangles_cover_each_run_once() {
        for panels in [1, 2, 5, 24] {
            for tiles in [1, 2, 3, 43] {
                let units = tiles * panels;
                for threads in 1..=5 {
                    let mut seen = vec![0u8; units];
                    for t in 0..threads {
                        let share = (units * t / threads, units * (t + 1) / threads);
                        let mut count = 0;
                        for ((r0, r1), (c0, c1)) in tile_rectangles(share, panels) {
                            assert!(r0 < r1 && r1 <= tiles && c0 < c1 && c1 <= panels);
                            for r in r0..r1 {
                                for c in c0..c1 {
                                    let u = r * panels + c;
                                    assert!((share.0..share.1).contains(&u));
                                    seen[u] += 1;
                                    count += 1;
                                }
                            }
                        }
                        assert_eq!(count, share.1 - share.0);
                    }
                    assert!(seen.iter().all(|&s| s == 1), "{tiles}x{panels}, {threads}");
                }
            }
        }
    }

    #[test]
    fn matches_the_reference_on_odd_shapes() {
        if !runs_here("matches_the_reference_on_odd_shapes") {
            return;
        }
        for (m, k, n) in [
            (1, 1, 1),
            (13, 7, 33),
            (12, 256, 32),
            (25, 257, 65),
            (97, 300, 31),
            (200, 64, 96),
        ] {
            let a = values(m * k, 1);
            let b = values(k * n, 2);
            let packed = PackedB::pack(&b, k, n, n, 0);
            let mut c = vec![f32::NAN; m * n];
            gemm(
                m,
                &a,
                k,
                &packed,
                &mut c,
                Layout::rows(n),
                TileStore::default(),
            )
            .expect("gemm");
            let want = reference(m, k, n, &a, &b);
            assert_close(
                &widen(&c),
                &want,
                Tol::scaled(1e-4),
                &format!("{m}x{k}x{n}"),
            );
        }
    }

    /// Rows 4 KiB apart (copied at a padded stride first), more rows than a row block,
    /// several depth blocks, and thread counts whose shares end inside a tile row.
    #[test]
    fn aliased_rows_and_uneven_thread_shares_match_the_reference() {
        if !runs_here("aliased_rows_and_uneven_thread_shares_match_the_reference") {
            return;
        }
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool");
            for (m, k, n) in [(500, 1024, 40), (61, 2048, 70), (130, 1000, 96)] {
                assert_eq!(aliases(k), k % 1024 == 0);
                let a = values(m * k, 5);
                let b = values(k * n, 6);
                let packed = PackedB::pack(&b, k, n, n, 0);
                let mut c = vec![f32::NAN; m * n];
                pool.install(|| {
                    gemm(
                        m,
                        &a,
                        k,
                        &packed,
                        &mut c,
                        Layout::rows(n),
                        TileStore::default(),
                    )
                })
                .expect("gemm");
                let want = reference(m, k, n, &a, &b);
                let what = format!("{m}x{k}x{n} at {threads} threads");
                assert_close(&widen(&c), &want, Tol::scaled(1e-4), &what);
            }
        }
    }

    const ACCUMULATE: TileStore<'static, f32> = TileStore {
        accumulate: true,
        bias: None,
        residual: None,
    };

    /// The bias and a residual added as tiles are stored: one and two depth blocks, no
    /// depth at all, ragged tiles, row-major and head-major results, onto the product,
    /// onto what the result holds, or onto a residual.
    #[test]
    fn stores_tiles_with_a_bias_and_residual() {
        if !runs_here("stores_tiles_with_a_bias_and_residual") {
            return;
        }
        let shapes = [
            (13, 7, 45, 45),
            (100, 800, 70, 70),
            (30, 0, 33, 33),
            (29, 64, 128, 64),
        ];
        for (accumulate, with_residual) in [(false, false), (true, false), (false, true)] {
            for (m, k, n, block) in shapes {
                let a = values(m * k, 7);
                let b = values(k * n, 8);
                let bias = values(n, 9);
                let packed = PackedB::pack(&b, k, n, n, 0);
                let layout = Layout {
                    ldc: block,
                    block,
                    block_stride: m * block,
                };
                let mut c = vec![0.25f32; m * n];
                let residual = values(m * n, 10);
                let store = TileStore {
                    accumulate,
                    bias: Some(&bias),
                    residual: with_residual.then_some(&residual[..]),
                };
                gemm(m, &a, k, &packed, &mut c, layout, store).expect("gemm");
                let product = reference(m, k, n, &a, &b);
                let (mut got, mut want) = (Vec::new(), Vec::new());
                for i in 0..m {
                    for j in 0..n {
                        let at = (j / block) * m * block + i * block + j % block;
                        let before = match (accumulate, with_residual) {
                            (true, _) => 0.25,
                            (_, true) => residual[at] as f64,
                            _ => 0.0,
                        };
                        got.push(c[at] as f64);
                        want.push(product[i * n + j] + bias[j] as f64 + before);
                    }
                }
                let what = format!(
                    "{m}x{k}x{n}, accumulate {accumulate}, residual {with_residual} (row-major)"
                );
                assert_close(&got, &want, Tol::scaled(1e-4), &what);
            }
        }
        // A bias shorter than the product's columns, a residual shorter than the
        // result, or a residual with `accumulate`, is refused.
        let packed = PackedB::pack(&values(40, 1), 4, 10, 10, 0);
        let mut c = vec![0.0; 20];
        let full = [0.0; 20];
        let refused = [
            TileStore {
                bias: Some(&[0.0; 9]),
                ..TileStore::default()
            },
            TileStore {
                residual: Some(&[0.0; 19]),
                ..TileStore::default()
            },
            TileStore {
                residual: Some(&full),
                accumulate: true,
                ..TileStore::default()
            },
        ];
        for store in refused {
            let a = values(8, 2);
            assert!(gemm(2, &a, 4, &packed, &mut c, Layout::rows(10), store).is_err());
        }
    }

    #[test]
    fn writes_head_blocks_and_accumulates() {
        if !runs_here("writes_head_blocks_and_accumulates") {
            return;
        }
        // Columns 8..136 of a 140-column weight as 2 heads of 64, onto a result holding
        // 1.5 everywhere (accumulated), with 800 depths (two depth blocks).
        let (m, k, n_all, col0, d) = (29, 800, 140, 8, 64);
        let a = values(m * k, 3);
        let b = values(k * n_all, 4);
        let packed = PackedB::pack(&b, k, 2 * d, n_all, col0);
        let mut c = vec![1.5f32; 2 * m * d];
        let layout = Layout {
            ldc: d,
            block: d,
            block_stride: m * d,
        };
        gemm(m, &a, k, &packed, &mut c, layout, ACCUMULATE).expect("gemm");
        let part: Vec<f32> = (0..k)
            .flat_map(|p| b[p * n_all + col0..p * n_all + col0 + 2 * d].to_vec())
            .collect();
        let product = reference(m, k, 2 * d, &a, &part);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for i in 0..m {
            for j in 0..2 * d {
                got.push(c[(j / d) * m * d + i * d + j % d] as f64);
                want.push(product[i * 2 * d + j] + 1.5);
            }
        }
        assert_close(&got, &want, Tol::scaled(1e-4), "head blocks (row-major)");
        // Blocks that are not a multiple of the panel width are refused.
        let bad = Layout {
            ldc: 48,
            block: 48,
            block_stride: m * 48,
        };
        assert!(gemm(m, &a, k, &packed, &mut c, bad, TileStore::default()).is_err());
    }
}
