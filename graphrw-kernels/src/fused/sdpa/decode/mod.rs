//! The decode path of the fused attention: a few query rows (a generation step, up to
//! [`DECODE_MAX_QUERIES`]) over a long key/value cache, flash-decoding style.
//!
//! The prefill kernel splits work over query heads and query blocks; with one query
//! row that leaves a 16-row query tile almost empty and reads every key and value row
//! once per *query* head. Here the work is split over key blocks instead:
//!
//! - A task is one batch entry, one key/value head, (a chunk of at most [`MAX_ROWS`] of)
//!   the query rows of every query head that reads that key/value head (`Hq / Hkv`
//!   heads x `Sq` rows, packed together as the columns of one transposed query tile),
//!   and one block of keys. So each key and value row is read once per key/value head,
//!   not once per query head. The task walks its block [`TILE_K`] keys at a time (score
//!   tile, mask, online-softmax step, value tile; f16/bf16 keys and values converted to
//!   f32 a tile at a time), and leaves its block-local row maxima, row sums and
//!   unnormalised `P V`.
//! - The key block size is chosen so that there are about [`TASKS_PER_THREAD`] tasks
//!   per thread of the pool, but never fewer than [`MIN_BLOCK_KEYS`] keys a block.
//! - A combine step merges each row's partials (log-sum-exp: each block's sum and
//!   `P V` rescaled by `e^(m_block - m)`) and normalises.
//!
//! Masks, the causal triangle (top-left aligned: with one query row only key 0 is
//! visible), the scale and fully masked rows behave as in the prefill kernel.
//!
//! Tiles by instruction set: AVX-512F in-place tiles (`avx512.rs`: `8 x 48`, nothing
//! packed; for one or two query rows the scores as dot products along `D` instead) at
//! the AVX-512 level, the general kernel's AVX2+FMA in-place tiles at AVX2 (or with
//! [`SdpaTuning::micro_kernels`](crate::SdpaTuning::micro_kernels) off, its portable
//! loops compiled for AVX2+FMA), its portable loops at the baseline. f64 runs the
//! general kernel.
//!
//! Measured: `RAYON_NUM_THREADS=1 cargo run --release -p graphrw-kernels --example
//! sdpa_time -- --decode --cpu-time --repeat 20 f32,32,4,64,1,1024 ...` (B=1 Hq=32
//! Hkv=4 D=64; best of 20, the three calls interleaved; Intel Xeon, family 6 model 167,
//! AVX-512, a 2-core VM shared with other builds, load average 5-9). General kernel on
//! the grouped K/V / the same on K/V materialised to 32 heads / decode path, in
//! microseconds of CPU time on one thread, then the decode path's wall time on two
//! threads (`RAYON_NUM_THREADS=2`, without `--cpu-time`):
//!
//! | dtype | Sq | Skv | one thread | decode, two threads |
//! |---|---|---|---|---|
//! | f32 | 1 | 256 | 293 / 592 / 58 | 86 |
//! | f32 | 1 | 1024 | 1116 / 2335 / 185 | 235 |
//! | f32 | 1 | 4096 | 5897 / 15273 / 1842 | 1954 |
//! | f32 | 16 | 256 | 298 / 606 / 361 | 334 |
//! | f32 | 16 | 1024 | 1222 / 3912 / 1272 | 1389 |
//! | f32 | 16 | 4096 | 5674 / 15173 / 5335 | 6439 |
//! | bf16 | 1 | 1024 | 1466 / 2599 / 252 | 246 |
//! | bf16 | 16 | 1024 | 1689 / 2926 / 1297 | 1501 |
//! | f16 | 1 | 1024 | 1223 / 3867 / 315 | 372 |
//! | f32, Hkv=32 | 1 | 1024 | 3226 / 3647 / 1434 | 1924 |
//!
//! One query row: 3-6x faster than the general kernel and 10-13x faster than the
//! materialised heads, reading K/V at 9-11 GB/s while they fit in L2 (2 MiB a core),
//! 5 GB/s beyond. Sixteen query rows are compute bound (about 100 GFLOP/s, as the
//! general kernel's AVX-512 packed path on the same shape, which it matches), 3x
//! faster than the materialised heads. Two threads were no faster than one: the VM's
//! two cores were busy with other builds (the wall times varied by 2x between runs).
//! Capped at AVX2 (`GRAPHRW_SDPA_NO_AVX512=1`), Sq=1 Skv=1024 took 225 us, Sq=16
//! 1694 us (the general kernel 1692 us).

#[cfg(target_arch = "x86_64")]
mod avx512;
mod tiles;

use rayon::prelude::*;

use super::mask::MaskData;
use super::tile::{Acc, NR_Q};
use super::{FullyMaskedRows, Problem};
use crate::{Element, Real};
pub(super) use tiles::{Level, Tiles};

/// The most query rows (`Sq`) the decode path takes.
pub const DECODE_MAX_QUERIES: usize = 16;
/// The fewest keys (`Skv`) for which the decode path runs with more than
/// [`DECODE_FEW_QUERIES`] query rows (below, the general kernel is as fast or faster).
/// Measured (one thread, CPU time, `sdpa_time --decode --cpu-time`, f32 Hq=32 Hkv=4
/// D=64, general kernel -> decode path): Sq=16 Skv=64 88 -> 136 us, Skv=128 279 ->
/// 225 us; Sq=8 Skv=16 34 -> 38 us, Skv=64 89 -> 70 us.
pub const DECODE_MIN_KEYS: usize = 128;
/// Query rows up to which the decode path runs from [`DECODE_MIN_KEYS_FEW`] keys on.
pub const DECODE_FEW_QUERIES: usize = 4;
/// The fewest keys for which the decode path runs with at most [`DECODE_FEW_QUERIES`]
/// query rows. Measured as [`DECODE_MIN_KEYS`]: Sq=1 Skv=16 23 -> 9 us, Sq=4 Skv=16
/// 32 -> 22 us (Hq=Hkv=32 D=128 Sq=1 Skv=16: 58 -> 41 us).
pub const DECODE_MIN_KEYS_FEW: usize = 16;
/// Keys per tile inside a task (the score tile is `TILE_K x rows`).
const TILE_K: usize = 96;
/// The fewest keys a task's block holds (fewer costs more in partials than it gains).
const MIN_BLOCK_KEYS: usize = 64;
/// Tasks per pool thread the key blocks aim at (balance on a shared machine).
const TASKS_PER_THREAD: usize = 4;
/// The most query rows (query heads of a group x `Sq`) in one task: bounds the
/// transposed query tile, the score tile and the accumulator.
const MAX_ROWS: usize = 128;
/// Multiply-adds below which the tasks run on the calling thread (one block each).
const SEQUENTIAL_WORK: usize = 1 << 18;

/// How the problem is cut into tasks.
#[derive(Debug, Clone, Copy)]
struct Split {
    /// Query heads per key/value head.
    group: usize,
    /// Query rows per key/value head: `group * sq`.
    rows: usize,
    /// Row chunks per key/value head, and rows per chunk (the last may have fewer).
    chunks: usize,
    chunk_rows: usize,
    /// Keys visible to any row: `skv`, or `min(skv, sq)` when causal.
    kend: usize,
    /// Keys per block, and blocks.
    block: usize,
    blocks: usize,
    /// Compute-type elements of one task's partial: `chunk_rows * (dv + 2)`.
    stride: usize,
}

impl Split {
    fn new<T: Element>(prob: &Problem<'_, T>, parallel: bool) -> Split {
        let dm = &prob.dims;
        let group = dm.hq / dm.hkv;
        let rows = group * dm.sq;
        let chunks = rows.div_ceil(MAX_ROWS);
        let chunk_rows = rows.div_ceil(chunks);
        let kend = if prob.causal {
            dm.skv.min(dm.sq)
        } else {
            dm.skv
        };
        let groups = dm.batch * dm.hkv * chunks;
        let want = if parallel {
            (TASKS_PER_THREAD * rayon::current_num_threads()).div_ceil(groups)
        } else {
            1
        };
        let block = kend
            .div_ceil(want.max(1))
            .max(MIN_BLOCK_KEYS)
            .next_multiple_of(16)
            .max(1);
        Split {
            group,
            rows,
            chunks,
            chunk_rows,
            kend,
            block,
            blocks: kend.div_ceil(block),
            stride: chunk_rows * (dm.dv + 2),
        }
    }

    fn tasks(&self, batch: usize, hkv: usize) -> usize {
        batch * hkv * self.chunks * self.blocks
    }
}

/// Per-thread buffers, reused across tasks.
struct Scratch<F> {
    /// The chunk's query rows, transposed and scaled: `[D, cols]`.
    qt: Vec<F>,
    /// The same, row-major (`[rows, D]`), where [`Tiles::dot_rows`].
    qrows: Vec<F>,
    /// Scores, then probabilities, transposed: `[TILE_K, cols]`.
    s: Vec<F>,
    /// The accumulator `[cols, Dv]`.
    o: Vec<F>,
    m: Vec<F>,
    l: Vec<F>,
    alpha: Vec<F>,
    mnew: Vec<F>,
    /// Key and value tiles converted to the compute type (f16/bf16).
    kbuf: Vec<F>,
    vbuf: Vec<F>,
    /// Each row's mask offset (its head's, plus its query row's).
    mask_off: Vec<usize>,
}

impl<F> Default for Scratch<F> {
    fn default() -> Self {
        Scratch {
            qt: Vec::new(),
            qrows: Vec::new(),
            s: Vec::new(),
            o: Vec::new(),
            m: Vec::new(),
            l: Vec::new(),
            alpha: Vec::new(),
            mnew: Vec::new(),
            kbuf: Vec::new(),
            vbuf: Vec::new(),
            mask_off: Vec::new(),
        }
    }
}

/// Runs the decode path into `out` (`[batch, Hq, Sq, Dv]`, every row written) with the
/// tasks compiled for `level` (at most the SDPA instruction set, never above the
/// CPU's).
pub(super) fn run<T: Element>(prob: &Problem<'_, T>, level: Level, out: &mut [T])
where
    T::Acc: Tiles,
{
    let dm = &prob.dims;
    let work = dm.batch * dm.hq * dm.sq * dm.skv * (dm.d + dm.dv);
    let parallel = work >= SEQUENTIAL_WORK && rayon::current_num_threads() > 1;
    let split = Split::new(prob, parallel);
    let (task, combine) = kernels::<T>(level);
    let ntasks = split.tasks(dm.batch, dm.hkv);
    let mut parts = vec![<T::Acc as Real>::ZERO; ntasks * split.stride];
    let head_len = dm.sq * dm.dv;
    if parallel {
        parts
            .par_chunks_mut(split.stride)
            .enumerate()
            .for_each_init(Scratch::default, |scratch, (t, part)| {
                task(prob, &split, scratch, t, part)
            });
        out.par_chunks_mut(head_len)
            .enumerate()
            .for_each(|(bh, head)| combine(prob, &split, &parts, bh, head));
    } else {
        let mut scratch = Scratch::default();
        for (t, part) in parts.chunks_mut(split.stride).enumerate() {
            task(prob, &split, &mut scratch, t, part);
        }
        for (bh, head) in out.chunks_mut(head_len).enumerate() {
            combine(prob, &split, &parts, bh, head);
        }
    }
}

type TaskFn<T> = fn(
    &Problem<'_, T>,
    &Split,
    &mut Scratch<<T as Element>::Acc>,
    usize,
    &mut [<T as Element>::Acc],
);
type CombineFn<T> = fn(&Problem<'_, T>, &Split, &[<T as Element>::Acc], usize, &mut [T]);

/// The task and combine functions compiled for `level`.
fn kernels<T: Element>(level: Level) -> (TaskFn<T>, CombineFn<T>)
where
    T::Acc: Tiles,
{
    #[cfg(target_arch = "x86_64")]
    match level {
        Level::Avx512 => {
            return (
                |p, sp, s, t, part| {
                    // SAFETY: `Level::Avx512` only where the SDPA instruction set, never
                    // above the CPU's (`KernelOptions::sdpa_isa`), is AVX-512 (with
                    // AVX2 and FMA).
                    unsafe { task_avx512::<T>(p, sp, s, t, part) }
                },
                |p, sp, parts, bh, out| {
                    // SAFETY: as for the task: the CPU has AVX2 and FMA.
                    unsafe { combine_avx2::<T>(p, sp, parts, bh, out) }
                },
            );
        }
        Level::Avx2 => {
            return (
                |p, sp, s, t, part| {
                    // SAFETY: `Level::Avx2` only where the SDPA instruction set, never
                    // above the CPU's, has AVX2 and FMA.
                    unsafe { task_avx2::<T>(p, sp, s, t, part) }
                },
                |p, sp, parts, bh, out| {
                    // SAFETY: as for the task: the CPU has AVX2 and FMA.
                    unsafe { combine_avx2::<T>(p, sp, parts, bh, out) }
                },
            );
        }
        Level::Plain => {}
    }
    let _ = level;
    (task::<T, false, false>, combine::<T, false>)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn task_avx2<T: Element>(
    prob: &Problem<'_, T>,
    split: &Split,
    scratch: &mut Scratch<T::Acc>,
    t: usize,
    part: &mut [T::Acc],
) where
    T::Acc: Tiles,
{
    task::<T, true, false>(prob, split, scratch, t, part)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f")]
unsafe fn task_avx512<T: Element>(
    prob: &Problem<'_, T>,
    split: &Split,
    scratch: &mut Scratch<T::Acc>,
    t: usize,
    part: &mut [T::Acc],
) where
    T::Acc: Tiles,
{
    task::<T, true, true>(prob, split, scratch, t, part)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn combine_avx2<T: Element>(
    prob: &Problem<'_, T>,
    split: &Split,
    parts: &[T::Acc],
    bh: usize,
    out: &mut [T],
) where
    T::Acc: Acc,
{
    combine::<T, true>(prob, split, parts, bh, out)
}

/// Resizes `buf` to `n` elements of `fill` (keeping the allocation).
fn reset<F: Copy>(buf: &mut Vec<F>, n: usize, fill: F) {
    buf.clear();
    buf.resize(n, fill);
}

/// Task `t`: one (batch, key/value head, row chunk, key block); writes the chunk's
/// rows' block maximum, block sum and unnormalised `P V` to `part` (`[m: rows][l:
/// rows][o: rows x Dv]`, `rows` = the split's chunk rows).
#[inline(always)]
fn task<T: Element, const FMA: bool, const WIDE: bool>(
    prob: &Problem<'_, T>,
    split: &Split,
    scratch: &mut Scratch<T::Acc>,
    t: usize,
    part: &mut [T::Acc],
) where
    T::Acc: Tiles,
{
    let dm = &prob.dims;
    let (hq, hkv, sq, d, dv) = (dm.hq, dm.hkv, dm.sq, dm.d, dm.dv);
    let neg_inf = <T::Acc as Real>::NEG_INFINITY;
    let zero = <T::Acc as Real>::ZERO;
    let blk = t % split.blocks;
    let chunk = (t / split.blocks) % split.chunks;
    let grp = t / (split.blocks * split.chunks);
    let (b, kvh) = (grp / hkv, grp % hkv);
    let r0 = chunk * split.chunk_rows;
    let nr = split.chunk_rows.min(split.rows - r0);
    let cols = nr.div_ceil(NR_Q) * NR_Q;
    let Scratch {
        qt,
        qrows,
        s,
        o,
        m,
        l,
        alpha,
        mnew,
        kbuf,
        vbuf,
        mask_off,
    } = scratch;

    // Row r of the chunk is query row i of query head h (of this key/value head).
    let row_of = |r: usize| {
        let (hh, i) = ((r0 + r) / sq, (r0 + r) % sq);
        (b * hq + kvh * split.group + hh, i)
    };
    reset(qt, d * cols, zero);
    for r in 0..nr {
        let (bh, i) = row_of(r);
        let row = &prob.q[(bh * sq + i) * d..(bh * sq + i + 1) * d];
        for (dst, &x) in qt[r..].iter_mut().step_by(cols).zip(row) {
            *dst = x.to_acc() * prob.scale;
        }
    }
    let dot = T::Acc::dot_rows::<WIDE>(nr);
    qrows.clear();
    if dot {
        for r in 0..nr {
            qrows.extend(qt[r..].iter().step_by(cols).take(d));
        }
    }
    if let Some(mask) = prob.mask {
        mask_off.clear();
        mask_off.extend((0..nr).map(|r| {
            let (bh, i) = row_of(r);
            mask.head_offsets[bh] + i * mask.row_stride
        }));
    }
    reset(m, cols, neg_inf);
    reset(l, cols, zero);
    reset(alpha, cols, zero);
    reset(mnew, cols, zero);
    reset(o, cols * dv, zero);
    reset(s, TILE_K * cols, zero);

    let head = (b * hkv + kvh) * prob.dims.kv_pitch;
    let (k_off, v_off) = (head * d, head * dv);
    let jend = split.kend.min((blk + 1) * split.block);
    let mut j0 = blk * split.block;
    while j0 < jend {
        let nk = TILE_K.min(jend - j0);
        let kb: &[T::Acc] = match prob.k_direct {
            Some(all) => &all[k_off + j0 * d..k_off + (j0 + nk) * d],
            None => {
                let range = k_off + j0 * d..k_off + (j0 + nk) * d;
                if !T::Acc::from_half(prob.k_half, range.clone(), kbuf) {
                    kbuf.clear();
                    kbuf.extend(prob.k[range].iter().map(|x| x.to_acc()));
                }
                kbuf
            }
        };
        // S^T = K Q^T on the tile: one row per key, one column per query row.
        T::Acc::scores::<FMA, WIDE>(prob.micro, nk, d, kb, qt, cols, qrows, nr, s);

        if let Some(mask) = prob.mask {
            let cs = mask.col_stride;
            for (jj, srow) in s.chunks_exact_mut(cols).take(nk).enumerate() {
                let at = (j0 + jj) * cs;
                let srow = &mut srow[..nr];
                match mask.data {
                    MaskData::Bool(bits) => {
                        for (x, &off) in srow.iter_mut().zip(mask_off.iter()) {
                            if !bits[off + at] {
                                *x = neg_inf;
                            }
                        }
                    }
                    MaskData::Add(add) => {
                        for (x, &off) in srow.iter_mut().zip(mask_off.iter()) {
                            *x += add[off + at].to_acc();
                        }
                    }
                }
            }
        }
        if prob.causal {
            // Key j is hidden from query row i when j > i (top-left aligned).
            for (jj, srow) in s.chunks_exact_mut(cols).take(nk).enumerate() {
                for (r, x) in srow[..nr].iter_mut().enumerate() {
                    if j0 + jj > (r0 + r) % sq {
                        *x = neg_inf;
                    }
                }
            }
        }

        T::Acc::softmax_update::<FMA>(prob.micro, s, cols, nk, m, l, alpha, mnew);

        let vb: &[T::Acc] = match prob.v_direct {
            Some(all) => &all[v_off + j0 * dv..v_off + (j0 + nk) * dv],
            None => {
                let range = v_off + j0 * dv..v_off + (j0 + nk) * dv;
                if !T::Acc::from_half(prob.v_half, range.clone(), vbuf) {
                    vbuf.clear();
                    vbuf.extend(prob.v[range].iter().map(|x| x.to_acc()));
                }
                vbuf
            }
        };
        // O = alpha * O + P V, on the chunk's rows only.
        T::Acc::values::<FMA, WIDE>(prob.micro, nk, nr, cols, dv, s, vb, alpha, o);
        j0 += nk;
    }

    let (pm, rest) = part.split_at_mut(split.chunk_rows);
    let (pl, po) = rest.split_at_mut(split.chunk_rows);
    pm[..nr].copy_from_slice(&m[..nr]);
    pl[..nr].copy_from_slice(&l[..nr]);
    po[..nr * dv].copy_from_slice(&o[..nr * dv]);
}

/// Merges the partials of batch-head `bh`'s rows into `out` (`[Sq, Dv]`): each block's
/// sum and `P V` rescaled to the rows' overall maximum, then divided by the total sum.
#[inline(always)]
fn combine<T: Element, const FMA: bool>(
    prob: &Problem<'_, T>,
    split: &Split,
    parts: &[T::Acc],
    bh: usize,
    out: &mut [T],
) where
    T::Acc: Acc,
{
    let dm = &prob.dims;
    let (sq, dv) = (dm.sq, dm.dv);
    let zero = <T::Acc as Real>::ZERO;
    let (b, h) = (bh / dm.hq, bh % dm.hq);
    let (kvh, hh) = (h / split.group, h % split.group);
    let masked_fill = match prob.fully_masked {
        FullyMaskedRows::Zero => T::from_f64(0.0),
        FullyMaskedRows::Nan => T::from_f64(f64::NAN),
    };
    let cr = split.chunk_rows;
    let mut acc = vec![zero; dv];
    for (i, dst) in out.chunks_exact_mut(dv).enumerate() {
        let r = hh * sq + i;
        let (chunk, rr) = (r / cr, r % cr);
        let first = ((b * dm.hkv + kvh) * split.chunks + chunk) * split.blocks;
        let part = |t: usize| &parts[(first + t) * split.stride..(first + t + 1) * split.stride];
        let mx = (0..split.blocks).fold(<T::Acc as Real>::NEG_INFINITY, |mx, t| {
            T::Acc::vmax(mx, part(t)[rr])
        });
        acc.fill(zero);
        let mut total = zero;
        if mx != <T::Acc as Real>::NEG_INFINITY {
            for t in 0..split.blocks {
                let p = part(t);
                let e = T::Acc::exp_fast::<FMA>(p[rr] - mx);
                total = T::Acc::fmadd::<FMA>(e, p[cr + rr], total);
                let o = &p[2 * cr + rr * dv..2 * cr + (rr + 1) * dv];
                for (a, &x) in acc.iter_mut().zip(o) {
                    *a = T::Acc::fmadd::<FMA>(e, x, *a);
                }
            }
        }
        if total == zero {
            dst.fill(masked_fill);
        } else {
            let inv = <T::Acc as Real>::ONE / total;
            for (y, &x) in dst.iter_mut().zip(&acc) {
                *y = T::from_acc(x * inv);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::attention_ref::Dims;
    use crate::fused::sdpa::tile::HalfSrc;
    use crate::SdpaLoopOrder;

    /// A problem of these sizes with no data (enough for [`Split::new`]).
    fn problem(dims: Dims, causal: bool) -> Problem<'static, f32> {
        Problem {
            dims,
            q: &[],
            k: &[],
            v: &[],
            k_direct: None,
            v_direct: None,
            k_half: HalfSrc::None,
            v_half: HalfSrc::None,
            q_f32: None,
            k_f32: None,
            v_f32: None,
            q_half: HalfSrc::None,
            call: 0,
            mask: None,
            causal,
            scale: 1.0,
            fully_masked: FullyMaskedRows::Nan,
            block_q: 1,
            block_k: 1,
            fuse_softmax: false,
            micro: false,
            loop_order: SdpaLoopOrder::default(),
            in_register: false,
            bf16_dot: false,
        }
    }

    #[test]
    fn blocks_are_not_tiny_and_cover_the_keys() {
        let dims = |hq, hkv, sq, skv| Dims {
            batch: 1,
            hq,
            hkv,
            sq,
            skv,
            kv_pitch: skv,
            d: 64,
            dv: 64,
        };
        let threads = rayon::current_num_threads();
        for (hq, hkv, sq, skv) in [(32, 4, 1, 4096), (32, 32, 16, 1000), (32, 1, 16, 100)] {
            let split = Split::new(&problem(dims(hq, hkv, sq, skv), false), true);
            assert!(split.block >= MIN_BLOCK_KEYS && split.block.is_multiple_of(16));
            assert!(split.blocks * split.block >= skv && (split.blocks - 1) * split.block < skv);
            assert!(split.chunk_rows <= MAX_ROWS && split.chunks * split.chunk_rows >= split.rows);
            let tasks = split.tasks(1, hkv);
            assert!(tasks >= (TASKS_PER_THREAD * threads).min(skv / MIN_BLOCK_KEYS));
        }
        // One block on the calling thread; causal sees the first `sq` keys only.
        let split = Split::new(&problem(dims(32, 4, 16, 4096), false), false);
        assert_eq!((split.blocks, split.chunks, split.rows), (1, 1, 128));
        let split = Split::new(&problem(dims(32, 4, 5, 4096), true), true);
        assert_eq!((split.kend, split.blocks), (5, 1));
        // 32 heads of 16 rows over one key/value head: four chunks of 128 rows.
        let split = Split::new(&problem(dims(32, 1, 16, 4096), false), true);
        assert_eq!((split.chunks, split.chunk_rows), (4, 128));
    }
}
