//! Fused scaled dot-product attention on the CPU: blocked, online softmax
//! (flash-attention 2 style), threads over batch x heads x query blocks.
//!
//! For each work item (one batch entry, one query head, a block of [`BLOCK_Q`] query
//! rows) the kernel walks the keys [`BLOCK_K`] at a time: it computes the score tile,
//! applies the scale, mask and causal triangle, updates a running row maximum `m` and
//! row sum `l`, rescales the `[BLOCK_Q, Dv]` accumulator and adds `P V`; at the end it
//! divides by `l`. The extra memory is a few tiles per thread
//! (`BLOCK_Q x (D + Dv + BLOCK_K)` compute-type elements, plus `BLOCK_K x (D + Dv)` for
//! f16/bf16 key/value blocks converted to f32; on the packed path below, one head of
//! packed keys and values per thread instead, kept between calls up to 16 MiB), never
//! the `Sq x Skv` score matrix.
//!
//! Layout:
//! - the query block is packed once per work item, transposed (`[D, Bq]`) and
//!   pre-multiplied by the scale, so the score tile is computed transposed
//!   (`S^T = K Q^T`, `[Bk, Bq]`) straight from K's contiguous rows, and the softmax
//!   statistics (max, sum over keys) are vertical, vectorised over query rows;
//!   `P V` reads P^T's rows in place.
//!
//! Paths, chosen at run time ([`selected_kernel`] says which runs):
//! - **AVX-512** (x86-64 with AVX-512 F, BW and BF16: Zen 4, Sapphire Rapids;
//!   `avx512::available`): the packed path on AVX-512 micro-kernels (`packed512.rs`,
//!   `avx512/`): `8 x 48` tiles (24 `zmm` accumulators; keys in panels of 8, query and
//!   value columns in 16-lane vectors), the softmax step 16 columns at a time
//!   (`exp16_shifted`: `vscalefps` for `2^n`). f32 and f16 compute in f32 FMAs. bf16
//!   runs both products on AVX-512 BF16 dot products (`vdpbf16ps`: two bf16 products
//!   per f32 lane, f32 sums): keys, queries and values keep their bf16 bits, packed in
//!   pairs along the reduction dimension (keys `[Skv/8][D/2][8][2]`, queries
//!   `[Bq/16][D/2][16][2]`, values `[Dv/16][Skv/2][16][2]`), the scale is applied to the
//!   f32 scores, the online softmax runs in f32 and the probabilities are rounded to
//!   bf16 (nearest even) in key pairs for `P V`, as PyTorch's CPU kernel does. The
//!   depth loops come in two forms with the same results, timed by the chooser
//!   (`choice`): each key element or probability broadcast inside every FMA that reads
//!   it, or into a register once (`asm`; [`SdpaKernel::PackedAvx512InRegister`]).
//! - **AVX2+FMA, packed** (`packed.rs`): keys and values packed once per key/value head
//!   and thread, in the panels the micro-tiles read (keys `[Skv/6][D][6]`, values
//!   `[Dv/16][Skv][16]`, f16/bf16 converted on the way), the query block in 16-column
//!   panels. Both products of a tile run on register-blocked `6 x 16` micro-kernels
//!   (`avx2/`: 12 `ymm` accumulators). A key block with no mask and off the causal
//!   diagonal runs the softmax step inside the score pass
//!   (`avx2::scores_softmax_packed`: column maxima from the micro-tile's registers,
//!   exponentials and sums over each `Bk x 16` strip while it is in L1, with
//!   `avx2::exp8_shifted`); masked blocks and the diagonal block take the separate
//!   step (`avx2::softmax_update`).
//! - **Decode** (`decode/`, f32/f16/bf16, at most [`DECODE_MAX_QUERIES`] query rows
//!   over enough keys: see [`selected_kernel_for`]): a generation step over a key/value
//!   cache, work split over key blocks and the query heads of a key/value head taken
//!   together, so each key and value row is read once per key/value head; the partial
//!   results merged by log-sum-exp.
//! - **Unpacked** (elsewhere, and for f64): K and V are read in place, the products run
//!   on portable loops written for LLVM's auto-vectoriser (on x86-64 the whole work item
//!   is compiled a second time with `avx2,fma` enabled), and f16/bf16 key and value
//!   tiles are converted to f32 once per tile, in bulk.
//!
//! Speed against PyTorch's CPU SDPA, with the commands: `BENCHMARKS.md` in the
//! repository.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub mod choice;
mod decode;
mod kernel;
mod mask;
#[cfg(target_arch = "x86_64")]
mod packed;
#[cfg(target_arch = "x86_64")]
mod packed512;
mod select;
mod tile;
mod unpacked;
mod work;

use crate::cpu::attention_ref::Dims;
/// The FMA probe, where it was first needed (now [`crate::cpu::probe`]).
pub use crate::cpu::probe::fma_peak_gflops;
use crate::macros::dispatch_float;
use crate::{DType, Element, KernelError, KernelOptions, Tensor};
pub use decode::{DECODE_FEW_QUERIES, DECODE_MAX_QUERIES, DECODE_MIN_KEYS, DECODE_MIN_KEYS_FEW};
pub use kernel::SdpaKernel;
use mask::{MaskData, MaskView};
use select::{path_of, Path};
pub use select::{selected_kernel, selected_kernel_for, selected_kernel_with};
use tile::HalfSrc;

/// Query rows per work item: a multiple of both the 16 query columns of the score
/// micro-tile and the 6 rows of the value micro-tile, so no micro-tile is partial.
///
/// Measured ([`SdpaTuning::blocks`](crate::SdpaTuning::blocks), one thread, CPU time of
/// `examples/sdpa_time --cpu-time`, B=1 H=8, f32, each configuration interleaved and
/// repeated 3 times on the shared 2-core AVX2 machine). With the AVX2 softmax step,
/// 96 x 96 took 3-5% less than 48 x 96 at D=64 and 128, S=1024, and less at S=2048
/// (full and causal), about the same at S=512; 64 x 96 and 96 x 48 were in between.
/// (Before that step, with the auto-vectorised softmax, 48 x 96 had been 2-14% faster
/// than 64 x 128 and 96 x 96 in between; on a 2-core Zen 3 earlier, 64 and 128 rows
/// were within a few percent and better than 32.)
pub const BLOCK_Q: usize = 96;
/// Query rows per work item under a causal mask: fewer than [`BLOCK_Q`], so that the
/// diagonal blocks (computed whole, then masked) waste less, and still a multiple of
/// 16 and 6. Measured (`sdpa_time --cpu-time --heads 12`, one thread, causal, two
/// interleaved runs on a 2-core Zen 4) against 96: AVX-512 path f32 D=64 S=512
/// 79.6-80.8 -> 85.9-86.3 GFLOP/s, S=1024 about the same, bf16 S=512 122-123 ->
/// 131-132; AVX2 path (SDPA capped at AVX2) f32 S=512 55-73 -> 76-79, D=128
/// S=2048 85-93 -> 94-95. 32 rows measured within 2% of 48 (better on AVX-512, a
/// partial value micro-tile on AVX2), 16 rows worse for bf16. Without a causal mask
/// every block is full and 96 stays (the same runs: within the noise of 32 and 48).
/// The AVX-512 kernels take [`BLOCK_Q_CAUSAL_AVX512`] instead.
pub const BLOCK_Q_CAUSAL: usize = 48;
/// [`BLOCK_Q_CAUSAL`] for the AVX-512 kernels (whose score micro-tiles are 8 query
/// rows, so 32 leaves none partial). Measured (`sdpa_time --heads 12 --repeat 20`, wall time,
/// both threads, three interleaved runs on a 2-core Zen 4) against 48: f32 D=64 S=512
/// 167-175 -> 171-178 GFLOP/s (better in two runs of three), D=128 S=512 173-176 ->
/// 177-184, bf16 D=64 S=512 264-272 -> 269-279; one run each at larger sizes: f32 D=64
/// S=1024 184-186 -> 188, S=2048 195 -> 200, D=128 S=1024 187 -> 198, S=4096 210 ->
/// 210, bf16 D=128 S=2048 355 -> 358, f16 D=64 S=1024 174 -> 177. 16 rows was better
/// still for f32 but 12% worse for bf16.
pub const BLOCK_Q_CAUSAL_AVX512: usize = 32;
/// Keys per tile: a multiple of the 6 key rows of the score micro-tile (see
/// [`BLOCK_Q`] for the measurement). The `[Bk, Bq]` score tile is 36 KiB (f32).
pub const BLOCK_K: usize = 96;

/// Multiply-adds (`B Hq Sq Skv (D + Dv)`) below which [`sdpa`] runs on the calling
/// thread.
const SEQUENTIAL_WORK: usize = 1 << 18;

/// What a query row whose every key is masked out produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FullyMaskedRows {
    /// An all-zero output row: what the exporters' guard
    /// `where(isnan(softmax(x)), 0, softmax(x))` (and PyTorch's `_safe_softmax`) gives.
    Zero,
    /// An all-NaN output row: what a plain softmax over all `-inf` gives (the semantics
    /// of [`crate::cpu::sdpa_reference`]).
    #[default]
    Nan,
}

/// Options of [`sdpa`] (`Default`: not causal, scale `1/sqrt(D)`, no grouped heads,
/// NaN for fully masked rows).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SdpaOptions {
    /// Mask key `j` for query `i` when `j > i` (top-left aligned, as PyTorch).
    pub is_causal: bool,
    /// The factor applied to `q k^T`; `None` means `1 / sqrt(D)`.
    pub scale: Option<f64>,
    /// Allow `Hq` to be a multiple of `Hkv` (grouped-query attention): query head `h`
    /// reads key/value head `h / (Hq / Hkv)`.
    pub enable_gqa: bool,
    /// The output of a row whose keys are all masked out (`-inf` scores). A float mask
    /// with large finite negatives does not mask a row fully.
    pub fully_masked_rows: FullyMaskedRows,
}

/// Fused scaled dot-product attention: `softmax(q k^T * scale + mask) v`, computed
/// tile by tile without materialising the scores.
///
/// - Shapes: `q` is `[.., Hq, Sq, D]`, `k` is `[.., Hkv, Skv, D]`, `v` is
///   `[.., Hkv, Skv, Dv]`, with equal leading (batch) dims, any number of them (rank-2
///   operands have one implicit head). The result is `[.., Hq, Sq, Dv]` in `q`'s dtype.
/// - Dtypes: f32, f16, bf16 (loaded into f32, accumulated in f32, stored once) and f64
///   (computed in f64); `q`, `k`, `v` must agree.
/// - `mask`: bool (`true` attends) or `q`'s dtype (added to the scaled scores), of any
///   shape that broadcasts to `[.., Hq, Sq, Skv]`; it is read through broadcast strides.
/// - `opts.is_causal`: key `j` is visible to query `i` iff `j <= i`; it may be combined
///   with `mask` (both apply). Key blocks entirely above the diagonal are skipped.
/// - A row with every key masked gives [`SdpaOptions::fully_masked_rows`]. With
///   `Skv = 0` the output is zeros (the product with an empty `v`).
///
/// Errors, never panics, on mismatched ranks, shapes, head counts or dtypes.
///
/// ```
/// use graphrw_kernels::fused::{sdpa, SdpaOptions};
/// use graphrw_kernels::Tensor;
///
/// let q = Tensor::from_vec(vec![1, 2, 2], vec![1.0f32, 0.0, 0.0, 1.0])?;
/// let k = q.clone();
/// let v = Tensor::from_vec(vec![1, 2, 1], vec![10.0f32, 20.0])?;
/// let opts = SdpaOptions { is_causal: true, ..Default::default() };
/// let out = sdpa(&q, &k, &v, None, &opts)?;
/// assert_eq!(out.shape(), &[1, 2, 1]);
/// assert_eq!(out.as_slice::<f32>()?[0], 10.0); // the first query sees only key 0
/// # Ok::<(), graphrw_kernels::KernelError>(())
/// ```
pub fn sdpa(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    opts: &SdpaOptions,
) -> Result<Tensor, KernelError> {
    sdpa_tuned(q, k, v, mask, opts, &KernelOptions::current())
}

/// [`sdpa`] with the kernel options `kernel` (its instruction set and
/// [`SdpaTuning`](crate::SdpaTuning)) instead of the thread's current ones.
pub fn sdpa_tuned(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    opts: &SdpaOptions,
    kernel: &KernelOptions,
) -> Result<Tensor, KernelError> {
    sdpa_keys(q, k, v, None, mask, opts, kernel)
}

/// [`sdpa_tuned`] over a key/value cache with spare capacity: `k` is `[.., Hkv, C, D]`
/// and `v` `[.., Hkv, C, Dv]` in storage, of which the first `keys` rows of each head
/// are the keys and values (`keys <= C`; the rest is never read). The mask, if any,
/// broadcasts to `[.., Hq, Sq, keys]`, and the result is that of [`sdpa_tuned`] on the
/// first `keys` rows of each head, bit for bit.
///
/// ```
/// use graphrw_kernels::fused::{sdpa, sdpa_prefix, SdpaOptions};
/// use graphrw_kernels::{KernelOptions, Tensor};
///
/// let q = Tensor::from_vec(vec![1, 1, 2], vec![1.0f32, 0.5])?;
/// // Two keys in use out of a capacity of three (the third row is spare).
/// let k = Tensor::from_vec(vec![1, 3, 2], vec![1.0f32, 0.0, 0.0, 1.0, 9.0, 9.0])?;
/// let v = Tensor::from_vec(vec![1, 3, 1], vec![10.0f32, 20.0, 99.0])?;
/// let opts = SdpaOptions::default();
/// let got = sdpa_prefix(&q, &k, &v, 2, None, &opts, &KernelOptions::current())?;
/// let k2 = Tensor::from_vec(vec![1, 2, 2], vec![1.0f32, 0.0, 0.0, 1.0])?;
/// let v2 = Tensor::from_vec(vec![1, 2, 1], vec![10.0f32, 20.0])?;
/// let want = sdpa(&q, &k2, &v2, None, &opts)?;
/// assert_eq!(got.as_slice::<f32>()?, want.as_slice::<f32>()?);
/// # Ok::<(), graphrw_kernels::KernelError>(())
/// ```
pub fn sdpa_prefix(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    keys: usize,
    mask: Option<&Tensor>,
    opts: &SdpaOptions,
    kernel: &KernelOptions,
) -> Result<Tensor, KernelError> {
    sdpa_keys(q, k, v, Some(keys), mask, opts, kernel)
}

/// [`sdpa_tuned`], with `keys` rows of each K/V head in use where `Some`.
fn sdpa_keys(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    keys: Option<usize>,
    mask: Option<&Tensor>,
    opts: &SdpaOptions,
    kernel: &KernelOptions,
) -> Result<Tensor, KernelError> {
    let path = path_of(kernel);
    if kernel.sdpa.choose && path == Path::Best && q.dtype() != DType::F64 {
        let dims = check(q, k, v, opts.enable_gqa, keys)?;
        let key = choice::SdpaKey {
            dtype: q.dtype(),
            sq: dims.sq.next_power_of_two(),
            skv: dims.skv.next_power_of_two(),
            d: (dims.d, dims.dv),
            group: dims.hq / dims.hkv.max(1),
            causal_mask: (opts.is_causal, mask.is_some()),
            isa: kernel.sdpa_isa(),
            threads: rayon::current_num_threads(),
        };
        return choice::global().run_chosen(
            key,
            (q.dtype(), dims.sq, dims.skv),
            kernel,
            &|o: &KernelOptions| sdpa_on(q, k, v, keys, mask, opts, o, Path::Best),
        );
    }
    sdpa_on(q, k, v, keys, mask, opts, kernel, path)
}

/// [`sdpa`] with the default options on the implementation `path` (tests force each).
#[cfg(test)]
pub(crate) fn sdpa_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    opts: &SdpaOptions,
    path: Path,
) -> Result<Tensor, KernelError> {
    sdpa_on(q, k, v, None, mask, opts, &KernelOptions::default(), path)
}

/// [`sdpa`] with `kernel` on the implementation `path`.
#[allow(clippy::too_many_arguments)]
fn sdpa_on(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    keys: Option<usize>,
    mask: Option<&Tensor>,
    opts: &SdpaOptions,
    kernel: &KernelOptions,
    path: Path,
) -> Result<Tensor, KernelError> {
    let dims = check(q, k, v, opts.enable_gqa, keys)?;
    let r = q.rank();
    let mut score_shape = q.shape()[..r - 1].to_vec();
    score_shape.push(dims.skv);
    if let Some(m) = mask {
        if m.dtype() != DType::Bool && m.dtype() != q.dtype() {
            return Err(KernelError::DTypeMismatch {
                op: "sdpa",
                lhs: q.dtype(),
                rhs: m.dtype(),
            });
        }
    }
    let scale = opts.scale.unwrap_or(1.0 / (dims.d.max(1) as f64).sqrt());
    let mut out_shape = q.shape().to_vec();
    out_shape[r - 1] = dims.dv;
    dispatch_float!(q.dtype(), "sdpa", |T| {
        let mask = match mask {
            None => None,
            Some(m) => {
                let data = if m.dtype() == DType::Bool {
                    MaskData::Bool(m.as_slice::<bool>()?)
                } else {
                    MaskData::Add(m.as_slice::<T>()?)
                };
                Some(MaskView::new(data, m.shape(), &score_shape)?)
            }
        };
        let out = work::run::<T>(&dims, q, k, v, mask.as_ref(), opts, kernel, scale, path)?;
        Ok(Tensor::from_data(out_shape, out))
    })
}

/// Validates dtypes and shapes; returns the sizes (with `keys` of the K/V rows in use
/// where `Some`).
fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    enable_gqa: bool,
    keys: Option<usize>,
) -> Result<Dims, KernelError> {
    let op = "sdpa";
    if !q.dtype().is_float() {
        return Err(KernelError::UnsupportedDType {
            op,
            dtype: q.dtype(),
            expected: "f32, f64, f16 or bf16",
        });
    }
    for t in [k, v] {
        if t.dtype() != q.dtype() {
            return Err(KernelError::DTypeMismatch {
                op,
                lhs: q.dtype(),
                rhs: t.dtype(),
            });
        }
    }
    let mut dims = crate::cpu::attention_ref::check(q, k, v, enable_gqa)?.0;
    if let Some(keys) = keys {
        if keys > dims.kv_pitch {
            return Err(KernelError::shape(
                op,
                format!(
                    "{keys} keys in use, but k and v hold {} rows a head",
                    dims.kv_pitch
                ),
            ));
        }
        dims.skv = keys;
    }
    Ok(dims)
}

/// Everything a work item reads.
struct Problem<'a, T: Element> {
    dims: Dims,
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    /// `k` and `v` as the compute type when they already are (f32, f64): no copies.
    k_direct: Option<&'a [T::Acc]>,
    v_direct: Option<&'a [T::Acc]>,
    /// `k` and `v` when they are f16/bf16: converted a tile at a time in bulk.
    k_half: HalfSrc<'a>,
    v_half: HalfSrc<'a>,
    /// `q`, `k` and `v` when they are f32 (the packed path reads them without
    /// conversion), and `q` when f16/bf16.
    q_f32: Option<&'a [f32]>,
    k_f32: Option<&'a [f32]>,
    v_f32: Option<&'a [f32]>,
    q_half: HalfSrc<'a>,
    /// A number of its own for each call (the packed path's per-thread scratch keeps
    /// a head of keys and values between items of one call).
    call: u64,
    mask: Option<&'a MaskView<'a, T>>,
    causal: bool,
    scale: T::Acc,
    fully_masked: FullyMaskedRows,
    block_q: usize,
    block_k: usize,
    /// On the packed path, a key block with no mask and no causal diagonal runs the
    /// softmax step inside the score pass (`avx2::scores_softmax_packed`).
    fuse_softmax: bool,
    /// The in-place path's f32 tiles run the AVX2+FMA micro-kernels (`avx2/`): true
    /// only where the options' instruction set, never above the CPU's, has both.
    micro: bool,
    /// The packed path's loop orders.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    loop_order: crate::SdpaLoopOrder,
    /// The AVX-512 packed path's depth loops broadcast into a register
    /// ([`SdpaKernel::broadcast`]).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    in_register: bool,
    /// The AVX-512 packed path runs bf16 inputs on BF16 dot products (else converted to
    /// f32, as f16).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    bf16_dot: bool,
}

/// Per-thread tiles, reused across work items.
struct Scratch<F> {
    /// The query block, transposed and scaled: `[D, Bqp]`.
    qt: Vec<F>,
    /// Scores, then probabilities, transposed: `[Bk, Bqp]`.
    s: Vec<F>,
    /// The output accumulator: `[Bqp, Dv]`.
    o: Vec<F>,
    /// Running max, running sum, rescale factor, and this block's max (per query row).
    m: Vec<F>,
    l: Vec<F>,
    alpha: Vec<F>,
    mnew: Vec<F>,
    /// Key and value blocks converted to the compute type (f16/bf16 only).
    kbuf: Vec<F>,
    vbuf: Vec<F>,
}

impl<F> Default for Scratch<F> {
    fn default() -> Self {
        Scratch {
            qt: Vec::new(),
            s: Vec::new(),
            o: Vec::new(),
            m: Vec::new(),
            l: Vec::new(),
            alpha: Vec::new(),
            mnew: Vec::new(),
            kbuf: Vec::new(),
            vbuf: Vec::new(),
        }
    }
}

/// Resizes `buf` to `n` elements of `fill` (keeping the allocation).
fn reset<F: Copy>(buf: &mut Vec<F>, n: usize, fill: F) {
    buf.clear();
    buf.resize(n, fill);
}
