//! Matrix multiplication with `torch.matmul` rules, on a strided GEMM: the `gemm`
//! crate (runtime-dispatched AVX2/FMA and AVX-512 micro-kernels) by default, or
//! `matrixmultiply` where it was measured to win (see [`GemmBackend::Auto`]); plus the
//! matmul with a fused epilogue (bias accumulated by the GEMM, then an activation) that
//! the planner's epilogue executor runs.

use std::borrow::Cow;

use rayon::prelude::*;

use crate::broadcast::{broadcast_shapes, broadcast_strides, Odometer};
use crate::cpu::util::{prod, same_dtype};
use crate::cpu::PackedWeight;
use crate::macros::dispatch_float;
use crate::{DType, Element, IntElement, KernelError, Real, Tensor};

/// Per-matrix work (`m * k * n`) below which a batched matmul runs its matrices in
/// parallel with rayon rather than relying on the GEMM's own threading.
const SMALL_GEMM: usize = 1 << 21;

/// Per-matrix work (`m * k * n`) below which [`GemmBackend::Auto`] takes
/// `matrixmultiply`: on tiny products its lower call overhead wins (measured with
/// `cargo bench -p graphrw-kernels --bench matmul`, see the README).
const TINY_GEMM: usize = 1 << 12;

/// Which GEMM library runs a float product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GemmBackend {
    /// The measured choice: `gemm` except for tiny products (`m * k * n` below 4096),
    /// where `matrixmultiply` is faster.
    #[default]
    Auto,
    /// The `gemm` crate (AVX-512 / AVX2+FMA micro-kernels chosen at run time).
    Gemm,
    /// The `matrixmultiply` crate.
    MatrixMultiply,
}

impl GemmBackend {
    /// The backend that runs an `m x k x n` product.
    fn resolve(self, m: usize, k: usize, n: usize) -> GemmBackend {
        match self {
            GemmBackend::Auto if m.saturating_mul(k).saturating_mul(n) < TINY_GEMM => {
                GemmBackend::MatrixMultiply
            }
            GemmBackend::Auto => GemmBackend::Gemm,
            other => other,
        }
    }
}

/// A float type with a strided GEMM: `c = a @ b` (or `c += a @ b`) for row-major
/// contiguous `c` (`m x n`) and `a` (`m x k`), `b` (`k x n`) read through element
/// strides, so transposed operands need no copy.
pub(crate) trait Gemm: Real {
    /// `c[i * n + j] = sum_p a[i * rsa + p * csa] * b[p * rsb + j * csb]`.
    ///
    /// Panics (an internal bug, never input-dependent) when a stride walks outside a slice.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: &[Self],
        rsa: usize,
        csa: usize,
        b: &[Self],
        rsb: usize,
        csb: usize,
        c: &mut [Self],
    ) {
        Self::gemm_with(
            GemmBackend::Auto,
            false,
            Strided {
                m,
                k,
                n,
                rsa,
                csa,
                rsb,
                csb,
            },
            a,
            b,
            c,
        )
    }

    /// The product on `backend`; with `accumulate`, `c += a @ b` instead of `c = a @ b`.
    fn gemm_with(
        backend: GemmBackend,
        accumulate: bool,
        s: Strided,
        a: &[Self],
        b: &[Self],
        c: &mut [Self],
    );

    /// Applies `act` to every element of `xs` in place.
    fn activate(act: Activation, xs: &mut [Self]);

    /// `c = a @ w + bias + residual (+ c)` ([`TileStore`]) for `m` rows of `a` (row stride
    /// `w`'s depth) on the packed-weight GEMM, the result laid out by `layout`
    /// (`(ldc, block, block_stride)`, see `sgemm512::Layout`). False, having done
    /// nothing, where it does not run (every type but f32, or shapes it refuses).
    fn gemm_packed(
        _w: &PackedWeight,
        _m: usize,
        _a: &[Self],
        _c: &mut [Self],
        _layout: (usize, usize, usize),
        _store: TileStore<'_, Self>,
    ) -> bool {
        false
    }
}

/// What the packed-weight GEMM does as it stores each tile of its result: add the
/// product to what the result holds, and add a bias per column and a residual (no
/// pass of their own: the tile is in registers).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TileStore<'a, T> {
    /// Add the product to what `c` holds (a residual written first) instead of
    /// overwriting it.
    pub(crate) accumulate: bool,
    /// Added to each row, as the first depth block's tiles are stored (instead of
    /// written into the result beforehand): a value per column of the product (its
    /// column count or more).
    pub(crate) bias: Option<&'a [T]>,
    /// Added as the first depth block's tiles are stored: a tensor laid out as the
    /// result (a residual connection), not with `accumulate`.
    pub(crate) residual: Option<&'a [T]>,
}

/// [`Gemm::gemm_packed`] for f32.
#[cfg(target_arch = "x86_64")]
fn gemm_packed_f32(
    w: &PackedWeight,
    m: usize,
    a: &[f32],
    c: &mut [f32],
    (ldc, block, block_stride): (usize, usize, usize),
    store: TileStore<'_, f32>,
) -> bool {
    use crate::cpu::sgemm512::{gemm, Layout};
    let layout = Layout {
        ldc,
        block,
        block_stride,
    };
    gemm(m, a, w.packed.k(), &w.packed, c, layout, store).is_ok()
}

#[cfg(not(target_arch = "x86_64"))]
fn gemm_packed_f32(
    _: &PackedWeight,
    _: usize,
    _: &[f32],
    _: &mut [f32],
    _: (usize, usize, usize),
    _: TileStore<'_, f32>,
) -> bool {
    false
}

/// The sizes and operand strides of one strided product (`c` is row-major `m x n`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Strided {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub rsa: usize,
    pub csa: usize,
    pub rsb: usize,
    pub csb: usize,
}

impl Strided {
    /// Panics (an internal bug, never input-dependent) unless every element the
    /// strides reach lies inside `a` and `b`, and `c` holds the `m x n` result.
    fn assert_fits<T>(&self, a: &[T], b: &[T], c: &[T]) {
        assert!(
            fits(a.len(), self.m, self.k, self.rsa, self.csa)
                && fits(b.len(), self.k, self.n, self.rsb, self.csb)
                && c.len() >= self.m * self.n
        );
    }
}

/// Checks that the strided `rows x cols` view fits in `len` elements.
fn fits(len: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < len
}

/// Work (multiply-adds, or elements for the epilogue passes) below which a product or
/// an epilogue pass runs on the calling thread: handing a few microseconds of work to
/// the rayon pool and waiting for it costs more (a thread wake-up; the small corpus
/// models spent about a tenth of their time switching threads).
const SEQUENTIAL_WORK: usize = 1 << 16;

/// The `gemm` crate's threading for `work` multiply-adds: its own rayon parallelism
/// from outside the pool, none from inside a rayon task (the caller already runs
/// products in parallel) or for small products.
fn parallelism(work: usize) -> gemm::Parallelism {
    if work < SEQUENTIAL_WORK * 4 || rayon::current_thread_index().is_some() {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    }
}

/// Rows of the bands [`row_split`] gives each thread: a multiple of the 64 rows of
/// `gemm`'s AVX-512 f32 micro-tile (48 with AVX2), so no band ends on a partial tile.
const ROW_BAND: usize = 64;

/// Whether a parallel product runs as one band of rows per thread, each band a
/// sequential `gemm` call, rather than on `gemm`'s own rayon split: where every thread
/// gets at least two bands' worth of rows (each band packs `b` itself, a small cost
/// beside its `rows x k x n` products). Measured on a quiet 2-core Zen 4, builds
/// alternated, 3 rounds (`gemm_rate --repeat 5`, GFLOP/s): `[512, 768] x [768, 768]`
/// 190-219 -> 222, `x [768, 2304]` 199-215 -> 215-218, the other shapes of the main
/// model within the noise (210-220 both); MLAS (`ort_matmul_compare.py --threads 2`)
/// 205-231. The main example's model (`graphrw run --repeat 5`, 4 rounds): 89.7-93.2
/// -> 85.4-88.3 ms.
fn row_split(m: usize, k: usize, n: usize) -> bool {
    let threads = rayon::current_num_threads();
    threads > 1
        && m >= 2 * ROW_BAND * threads
        && matches!(parallelism(m * k * n), gemm::Parallelism::Rayon(_))
}

/// `c = a @ b` (`c += a @ b` when `accumulate`) on the `gemm` crate, `c` row-major
/// `s.m x s.n`, `a` and `b` read through the strides of `s`; `one` is the type's 1.
///
/// Panics (an internal bug, never input-dependent) when a stride walks outside a slice.
fn gemm_crate<T: 'static + Copy>(
    s: Strided,
    accumulate: bool,
    a: &[T],
    b: &[T],
    c: &mut [T],
    one: T,
    parallelism: gemm::Parallelism,
) {
    let Strided {
        m,
        k,
        n,
        rsa,
        csa,
        rsb,
        csb,
    } = s;
    s.assert_fits(a, b, c);
    // SAFETY: the assert bounds every element reached through the strides inside `a`
    // and `b` (read) and `c` (written, exclusively borrowed); `gemm` computes
    // `dst = alpha * dst + beta * lhs @ rhs` and reads `dst` only when `read_dst`
    // (here: `accumulate`, with `c` initialised by the caller).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            csa as isize,
            rsa as isize,
            b.as_ptr(),
            csb as isize,
            rsb as isize,
            one,
            one,
            false,
            false,
            false,
            parallelism,
        );
    }
}

macro_rules! impl_gemm {
    ($t:ty, $mm:path, $activate:path $(, $packed:path)?) => {
        impl Gemm for $t {
            fn activate(act: Activation, xs: &mut [Self]) {
                $activate(act, xs)
            }
            $(
                fn gemm_packed(
                    w: &PackedWeight,
                    m: usize,
                    a: &[Self],
                    c: &mut [Self],
                    layout: (usize, usize, usize),
                    store: TileStore<'_, Self>,
                ) -> bool {
                    $packed(w, m, a, c, layout, store)
                }
            )?

            fn gemm_with(
                backend: GemmBackend,
                accumulate: bool,
                s: Strided,
                a: &[Self],
                b: &[Self],
                c: &mut [Self],
            ) {
                let Strided {
                    m,
                    k,
                    n,
                    rsa,
                    csa,
                    rsb,
                    csb,
                } = s;
                s.assert_fits(a, b, c);
                if m == 0 || n == 0 {
                    return;
                }
                if k == 0 {
                    if !accumulate {
                        c[..m * n].fill(0.0);
                    }
                    return;
                }
                match backend.resolve(m, k, n) {
                    GemmBackend::MatrixMultiply | GemmBackend::Auto => {
                        let beta = if accumulate { 1.0 } else { 0.0 };
                        // SAFETY: the assert above bounds every element the strides reach
                        // inside `a`, `b` (read) and `c` (written, exclusively borrowed);
                        // strides are small enough to be `isize` since they index live
                        // slices.
                        unsafe {
                            $mm(
                                m,
                                k,
                                n,
                                1.0,
                                a.as_ptr(),
                                rsa as isize,
                                csa as isize,
                                b.as_ptr(),
                                rsb as isize,
                                csb as isize,
                                beta,
                                c.as_mut_ptr(),
                                n as isize,
                                1,
                            );
                        }
                    }
                    GemmBackend::Gemm if row_split(m, k, n) => {
                        // One band of rows per thread, each a sequential product: see
                        // `row_split`. Bands start on a row of `a` inside it (`i0 < m`
                        // and `fits` above), so the sub-slices exist.
                        let band = m
                            .div_ceil(rayon::current_num_threads())
                            .next_multiple_of(ROW_BAND);
                        c[..m * n]
                            .par_chunks_mut(band * n)
                            .enumerate()
                            .for_each(|(i, cc)| {
                                let rows = Strided {
                                    m: cc.len() / n,
                                    ..s
                                };
                                let a = &a[i * band * rsa..];
                                gemm_crate(
                                    rows,
                                    accumulate,
                                    a,
                                    b,
                                    cc,
                                    1.0,
                                    gemm::Parallelism::None,
                                );
                            });
                    }
                    GemmBackend::Gemm => {
                        gemm_crate(s, accumulate, a, b, c, 1.0, parallelism(m * k * n));
                    }
                }
            }
        }
    };
}

impl_gemm!(f32, matrixmultiply::sgemm, activate_f32, gemm_packed_f32);
impl_gemm!(f64, matrixmultiply::dgemm, activate_scalar::<f64>);

/// [`Activation::apply`] over a slice, one scalar call per element.
fn activate_scalar<F: Real>(act: Activation, xs: &mut [F]) {
    if act != Activation::Identity {
        for x in xs {
            *x = act.apply(*x);
        }
    }
}

/// The f32 activation on the branch-free functions of [`crate::elementwise::math`]
/// (the loop vectorises; `libm`'s `tanhf`/`erff`/`expf` calls kept it scalar), in the
/// build of the generated kernels' [`Isa`](crate::elementwise::Isa): AVX-512 or
/// AVX2+FMA where the CPU has them. Measured (`[512, 64] x [64, 3072]` with an erf-GELU
/// epilogue against none, best of 20, one Zen 4 thread, processes alternated with
/// the fused kernels capped at AVX2): the GELU pass 2.1 ms with AVX2, 1.2 ms with AVX-512.
fn activate_f32(act: Activation, xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::elementwise::{isa, Isa};
        match isa() {
            // SAFETY: `activate_f32_avx512` only requires the target features it
            // enables, and `isa()` gives `Avx512` only where the CPU has them all.
            Isa::Avx512 => return unsafe { activate_f32_avx512(act, xs) },
            // SAFETY: `activate_f32_fma` only requires avx2 and fma, and `isa()` gives
            // `Avx2Fma` only where the CPU has both.
            Isa::Avx2Fma => return unsafe { activate_f32_fma(act, xs) },
            Isa::Baseline => {}
        }
    }
    activate_f32_with::<false>(act, xs);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn activate_f32_avx512(act: Activation, xs: &mut [f32]) {
    activate_f32_with::<true>(act, xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn activate_f32_fma(act: Activation, xs: &mut [f32]) {
    activate_f32_with::<true>(act, xs)
}

#[inline(always)]
fn activate_f32_with<const FMA: bool>(act: Activation, xs: &mut [f32]) {
    use crate::elementwise::math::{erf_with, exp_with, tanh_with};
    match act {
        Activation::Identity => {}
        // `max` maps NaN to 0, as the scalar form does.
        Activation::Relu => xs.iter_mut().for_each(|x| *x = x.max(0.0)),
        Activation::Gelu => xs.iter_mut().for_each(|x| {
            *x = 0.5 * *x * (1.0 + erf_with::<FMA>(*x * std::f32::consts::FRAC_1_SQRT_2))
        }),
        Activation::GeluTanh => xs.iter_mut().for_each(|x| {
            let inner = 0.797_884_6 * (*x + 0.044_715 * *x * *x * *x);
            *x = 0.5 * *x * (1.0 + tanh_with::<FMA>(inner))
        }),
        Activation::Silu => xs
            .iter_mut()
            .for_each(|x| *x = *x / (1.0 + exp_with::<FMA>(-*x))),
    }
}

/// The matrix product with `torch.matmul` rules.
///
/// 1-D operands are promoted to a row (left) or column (right) and the added dim is
/// removed from the result; dims before the last two are batch dims and broadcast.
/// Both operands must share a float or integer dtype. f16/bf16 are multiplied in f32
/// with f32 accumulation; integers accumulate in i64 and wrap.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    matmul_with(a, b, GemmBackend::Auto)
}

/// [`matmul`] on a chosen GEMM backend (for benchmarks and tests; integer products
/// ignore it).
pub fn matmul_with(a: &Tensor, b: &Tensor, backend: GemmBackend) -> Result<Tensor, KernelError> {
    let p = shapes(a, b)?;
    match p.dtype {
        DType::I64 => Ok(Tensor::from_data(
            p.out_shape,
            int_matmul::<i64>(&p.plan, a, b),
        )),
        DType::I32 => Ok(Tensor::from_data(
            p.out_shape,
            int_matmul::<i32>(&p.plan, a, b),
        )),
        dt => dispatch_float!(dt, "matmul", |T| Ok(Tensor::from_data(
            p.out_shape,
            float_matmul::<T>(&p.plan, a, b, &Epilogue::default(), backend)?
        ))),
    }
}

/// An activation applied elementwise to a product in the epilogue of
/// [`matmul_epilogue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// No activation.
    #[default]
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// Exact GELU: `x/2 (1 + erf(x / sqrt 2))`.
    Gelu,
    /// GELU's tanh approximation: `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x sigmoid(x)` (SiLU / swish).
    Silu,
}

impl Activation {
    /// The activation on one compute-type value.
    #[inline]
    fn apply<F: Real>(self, x: F) -> F {
        let c = F::from_f64;
        match self {
            Activation::Identity => x,
            Activation::Relu => {
                if x > F::ZERO {
                    x
                } else {
                    F::ZERO
                }
            }
            Activation::Gelu => {
                c(0.5) * x * (F::ONE + (x * c(std::f64::consts::FRAC_1_SQRT_2)).erf())
            }
            Activation::GeluTanh => {
                let inner = c(0.797_884_560_802_865_4) * (x + c(0.044_715) * x * x * x);
                c(0.5) * x * (F::ONE + inner.tanh())
            }
            Activation::Silu => x / (F::ONE + (F::ZERO - x).exp()),
        }
    }
}

/// `act(a @ b + bias)` in one kernel: without an activation the bias (shape `[N]`,
/// broadcast over rows) is written into the result first and the GEMM accumulates onto
/// it; with one, the bias is added in the activation's pass, which runs in place over
/// the result in parallel row blocks. No intermediate tensor is allocated. Float dtypes only; `bias` must share `a`'s dtype. Shapes follow
/// [`matmul`]; `b` must have rank 2 or more (the bias runs along its columns).
/// [`matmul_epilogue_with`] also takes a column range and a residual.
pub fn matmul_epilogue(
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    act: Activation,
    backend: GemmBackend,
) -> Result<Tensor, KernelError> {
    let epilogue = Epilogue {
        bias,
        activation: act,
        ..Epilogue::default()
    };
    matmul_epilogue_with(a, b, &epilogue, backend)
}

/// What [`matmul_epilogue_with`] does around the product `a @ b` (`Default`: nothing,
/// a plain product).
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    /// Added along the columns: shape `[N]` (or `[1, .., N]`) for `N` columns of `b`
    /// (all of them, even when [`columns`](Self::columns) picks some).
    pub bias: Option<&'a Tensor>,
    /// Applied last, elementwise.
    pub activation: Activation,
    /// Only the columns `start..end` of `b` (and of `bias`): the product with
    /// `b[.., start..end]`, read in place. A linear layer whose output is split along
    /// its last dim (a fused QKV projection) runs as one product per piece, writing
    /// each piece without a copy.
    pub columns: Option<(usize, usize)>,
    /// Added to the product (after the bias, before an activation, so only with
    /// [`Activation::Identity`]): a tensor of the result's shape and dtype. The
    /// residual connection after a projection, written into the result before the
    /// GEMM accumulates onto it instead of added by a pass of its own.
    pub residual: Option<&'a Tensor>,
    /// Write the result head-major: for `a` of shape `[.., S, K]` and `N` columns
    /// (after [`columns`](Self::columns)), the result is `[.., H, S, N / H]`, the
    /// layout `reshape(., [.., S, H, N / H]).transpose(-3, -2)` gives, which attention
    /// reads its queries, keys and values in. Each head is its own product with `N / H`
    /// columns of `b`, written in place: no transpose is copied. `b` must be a matrix
    /// (rank 2), `H` must divide `N`, and there is no residual.
    pub heads: Option<usize>,
    /// The weight `b` (with [`columns`](Self::columns)) packed beforehand
    /// ([`PackedWeight::new`]): an f32 product then runs on the packed-weight GEMM,
    /// which does not pack `b` again. Ignored where it does not pack this `b` and
    /// these columns ([`PackedWeight::packs`]), for a batch of weights, and for
    /// products of fewer than [`PackedWeight::MIN_ROWS`] rows.
    pub packed: Option<&'a PackedWeight>,
}

/// `act(a @ b[.., columns] + bias[columns] + residual)` in one kernel (see
/// [`Epilogue`]): the bias and residual are written into the result first and the
/// GEMM accumulates onto them (before an activation, the bias is added in its pass),
/// then the activation runs in place. Shapes follow
/// [`matmul`] with `b` of rank 2 or more; errors, never panics, on a bias that does not
/// run along `b`'s columns, a column range outside them, a residual of another shape
/// or dtype, or a residual with an activation.
pub fn matmul_epilogue_with(
    a: &Tensor,
    b: &Tensor,
    epilogue: &Epilogue<'_>,
    backend: GemmBackend,
) -> Result<Tensor, KernelError> {
    let op = "matmul_epilogue";
    let mut p = shapes(a, b)?;
    if !p.dtype.is_float() {
        return Err(KernelError::UnsupportedDType {
            op,
            dtype: p.dtype,
            expected: "f32, f64, f16 or bf16",
        });
    }
    if let Some(bias) = epilogue.bias {
        same_dtype(op, a, bias)?;
        if b.rank() < 2
            || bias.numel() != p.plan.n
            || bias.shape().iter().rev().skip(1).any(|&d| d != 1)
        {
            return Err(KernelError::shape(
                op,
                format!(
                    "bias {:?} does not run along the {} columns of {:?} @ {:?}",
                    bias.shape(),
                    p.plan.n,
                    a.shape(),
                    b.shape()
                ),
            ));
        }
    }
    if let Some((start, end)) = epilogue.columns {
        if b.rank() < 2 || start >= end || end > p.plan.n {
            return Err(KernelError::shape(
                op,
                format!(
                    "columns {start}..{end} are not a range of the {} columns of {:?}",
                    p.plan.n,
                    b.shape()
                ),
            ));
        }
        p.plan.col0 = start;
        p.plan.n = end - start;
        if let Some(last) = p.out_shape.last_mut() {
            *last = end - start;
        }
    }
    if let Some(r) = epilogue.residual {
        same_dtype(op, a, r)?;
        if r.shape() != p.out_shape.as_slice() || epilogue.activation != Activation::Identity {
            return Err(KernelError::shape(
                op,
                format!(
                    "a residual {:?} needs the result's shape {:?} and no activation ({:?})",
                    r.shape(),
                    p.out_shape,
                    epilogue.activation
                ),
            ));
        }
    }
    if let Some(heads) = epilogue.heads {
        let n = p.plan.n;
        if heads == 0
            || !n.is_multiple_of(heads)
            || b.rank() != 2
            || a.rank() < 2
            || epilogue.residual.is_some()
        {
            return Err(KernelError::shape(
                op,
                format!(
                    "{heads} heads of the {n} columns of {:?} @ {:?} (needs a matrix `b`, \
                     `a` of rank 2 or more, heads dividing the columns, no residual)",
                    a.shape(),
                    b.shape()
                ),
            ));
        }
        let rows = a.shape()[a.rank() - 2];
        p.plan.heads = Some((heads, rows));
        let lead = a.rank() - 2;
        p.out_shape.truncate(lead);
        p.out_shape.extend([heads, rows, n / heads]);
    }
    dispatch_float!(p.dtype, op, |T| Ok(Tensor::from_data(
        p.out_shape,
        float_matmul::<T>(&p.plan, a, b, epilogue, backend)?
    )))
}

/// A checked product: its common dtype, batch plan and output shape.
struct Shapes {
    dtype: DType,
    plan: Plan,
    out_shape: Vec<usize>,
}

/// Validates the operands of a product and lays out its batch.
fn shapes(a: &Tensor, b: &Tensor) -> Result<Shapes, KernelError> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(KernelError::shape(
            "matmul",
            format!(
                "both operands need at least 1 dim: {:?} @ {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let dtype = same_dtype("matmul", a, b)?;
    let a_shape: Vec<usize> = if a.rank() == 1 {
        vec![1, a.shape()[0]]
    } else {
        a.shape().to_vec()
    };
    let b_shape: Vec<usize> = if b.rank() == 1 {
        vec![b.shape()[0], 1]
    } else {
        b.shape().to_vec()
    };
    let (ar, br) = (a_shape.len(), b_shape.len());
    let (m, k) = (a_shape[ar - 2], a_shape[ar - 1]);
    let (k2, n) = (b_shape[br - 2], b_shape[br - 1]);
    if k != k2 {
        return Err(KernelError::shape(
            "matmul",
            format!("inner dimensions differ: {:?} @ {:?}", a.shape(), b.shape()),
        ));
    }
    let (a_batch, b_batch) = (&a_shape[..ar - 2], &b_shape[..br - 2]);
    let batch = broadcast_shapes(a_batch, b_batch).ok_or_else(|| {
        KernelError::shape(
            "matmul",
            format!(
                "batch dimensions do not broadcast: {:?} @ {:?}",
                a.shape(),
                b.shape()
            ),
        )
    })?;
    // A right operand without batch (a weight): the batch of `a` is folded into its
    // rows, one tall product instead of many short ones.
    let plan = if a.rank() > 1 && prod(b_batch) == 1 {
        Plan {
            m: prod(a_batch) * m,
            k,
            n,
            offsets: vec![[0, 0]],
            ldb: n,
            col0: 0,
            heads: None,
        }
    } else {
        Plan {
            m,
            k,
            n,
            offsets: batch_offsets(&batch, a_batch, b_batch, m * k, k * n),
            ldb: n,
            col0: 0,
            heads: None,
        }
    };
    let mut out_shape = batch.clone();
    if a.rank() > 1 {
        out_shape.push(m);
    }
    if b.rank() > 1 {
        out_shape.push(n);
    }
    Ok(Shapes {
        dtype,
        plan,
        out_shape,
    })
}

/// The matrices of one batched product.
struct Plan {
    m: usize,
    k: usize,
    n: usize,
    /// Element offsets of each batch entry's `a` and `b` matrices.
    offsets: Vec<[usize; 2]>,
    /// The row stride of `b`'s matrices: `n`, or more when the product reads only
    /// some of `b`'s columns ([`Epilogue::columns`]).
    ldb: usize,
    /// The first column of `b` the product reads.
    col0: usize,
    /// `(heads, rows)` when the result is written head-major ([`Epilogue::heads`]):
    /// `rows` rows of `a` per batch entry.
    heads: Option<(usize, usize)>,
}

/// The element offsets of the `a` and `b` matrices of every entry of `batch`.
fn batch_offsets(
    batch: &[usize],
    a_batch: &[usize],
    b_batch: &[usize],
    a_mat: usize,
    b_mat: usize,
) -> Vec<[usize; 2]> {
    let nb = prod(batch);
    let sa: Vec<usize> = broadcast_strides(a_batch, batch)
        .iter()
        .map(|s| s * a_mat)
        .collect();
    let sb: Vec<usize> = broadcast_strides(b_batch, batch)
        .iter()
        .map(|s| s * b_mat)
        .collect();
    let strides: Vec<[usize; 2]> = sa.iter().zip(&sb).map(|(&x, &y)| [x, y]).collect();
    let mut odo = Odometer::new(batch, &strides, [0, 0], 0);
    let mut out = Vec::with_capacity(nb);
    for _ in 0..nb {
        out.push(odo.offsets);
        odo.advance();
    }
    out
}

/// Rows of the result per task of the parallel epilogue.
const EPILOGUE_ROWS: usize = 16;

/// Elements of an f16/bf16 right operand converted to f32 at a time
/// ([`multiply_by_row_blocks`]): 16 MiB of f32.
const CONVERT_BLOCK: usize = 1 << 22;

/// `c (+)= a @ b` for one `m x k` by `k x n` product whose right operand `b` (row-major,
/// in its storage type) is converted to the compute type [`CONVERT_BLOCK`] elements of
/// whole rows at a time: each block of `b`'s rows multiplies the matching columns of
/// `a`, accumulating onto `c` (onto the bias already there when `accumulate`).
///
/// `b`'s rows are `ldb` apart, and the product reads `n` columns of each from its
/// start (a column range of a wider matrix when `ldb > n`).
fn multiply_by_row_blocks<T: Element>(
    backend: GemmBackend,
    accumulate: bool,
    (m, k, n): (usize, usize, usize),
    a: &[T::Acc],
    (b, ldb): (&[T], usize),
    c: &mut [T::Acc],
) where
    T::Acc: Gemm,
{
    let rows = (CONVERT_BLOCK / n.max(1)).clamp(1, k.max(1));
    let mut block: Vec<T::Acc> = Vec::with_capacity(rows * n);
    for k0 in (0..k).step_by(rows) {
        let k1 = (k0 + rows).min(k);
        block.clear();
        for r in k0..k1 {
            block.extend(b[r * ldb..r * ldb + n].iter().map(|v| v.to_acc()));
        }
        let s = Strided {
            m,
            k: k1 - k0,
            n,
            rsa: k,
            csa: 1,
            rsb: n,
            csb: 1,
        };
        T::Acc::gemm_with(backend, accumulate || k0 > 0, s, &a[k0..], &block, c);
    }
}

/// `a`, `b` and the bias of a product, in the compute type.
type Operands<'s, F> = (&'s [F], &'s [F], Option<&'s [F]>);

/// The product written head-major into `out` (`[B, H, rows, D]`, see
/// [`Epilogue::heads`]): one product per batch entry and head, each `rows x k` by the
/// head's `D` columns of `b` (read in place), onto its bias block, activated in place.
/// The `B H` blocks run in parallel when there are threads and work for them.
fn by_heads<T: Element>(
    plan: &Plan,
    (heads, rows): (usize, usize),
    backend: GemmBackend,
    operands: Operands<'_, T::Acc>,
    (act, packed): (Activation, Option<&PackedWeight>),
    out: &mut [T::Acc],
) where
    T::Acc: Gemm,
{
    let (a, b, bias) = operands;
    let (k, n, ldb, col0) = (plan.k, plan.n, plan.ldb, plan.col0);
    let d = n / heads;
    if out.is_empty() || d == 0 {
        return;
    }
    // With the weight packed: one product per batch entry, written head by head
    // (column blocks of `d`), where the packed GEMM takes blocks of that width.
    // The bias is added as each tile is stored; the activation follows.
    if let Some(w) = packed {
        let store = TileStore {
            accumulate: false,
            bias,
            residual: None,
        };
        let done = out
            .chunks_mut(heads * rows * d)
            .enumerate()
            .all(|(entry, c)| {
                let a = &a[entry * rows * k..];
                T::Acc::gemm_packed(w, rows, a, c, (d, d, rows * d), store)
            });
        if done {
            if act != Activation::Identity {
                T::Acc::activate(act, out);
            }
            return;
        }
    }
    let block = |i: usize, c: &mut [T::Acc]| {
        let (entry, h) = (i / heads, i % heads);
        if let Some(bias) = bias {
            head_bias(c, bias, h, d);
        }
        let s = Strided {
            m: rows,
            k,
            n: d,
            rsa: k,
            csa: 1,
            rsb: ldb,
            csb: 1,
        };
        let a = &a[entry * rows * k..];
        T::Acc::gemm_with(backend, bias.is_some(), s, a, &b[col0 + h * d..], c);
        if act != Activation::Identity {
            T::Acc::activate(act, c);
        }
    };
    if rayon::current_num_threads() > 1 && out.len() * k >= SEQUENTIAL_WORK * 4 {
        out.par_chunks_mut(rows * d)
            .enumerate()
            .for_each(|(i, c)| block(i, c));
    } else {
        out.chunks_mut(rows * d)
            .enumerate()
            .for_each(|(i, c)| block(i, c));
    }
}

/// Writes head `h`'s `d` values of `bias` into every row of its result block `c`, for
/// the product to accumulate onto.
fn head_bias<T: Copy>(c: &mut [T], bias: &[T], h: usize, d: usize) {
    for row in c.chunks_mut(d) {
        row.copy_from_slice(&bias[h * d..(h + 1) * d]);
    }
}

/// The float product of every batch entry; with an epilogue, the bias (plus the
/// residual) is written first and accumulated onto, and the activation applied after
/// (before an activation, the bias is added in the activation's pass instead).
fn float_matmul<T: Element>(
    plan: &Plan,
    a: &Tensor,
    b: &Tensor,
    epilogue: &Epilogue<'_>,
    backend: GemmBackend,
) -> Result<Vec<T>, KernelError>
where
    T::Acc: Gemm,
{
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let (ldb, col0) = (plan.ldb, plan.col0);
    // One weight matrix, packed beforehand for these columns: the packed-weight GEMM.
    let packed = epilogue.packed.filter(|w| {
        T::DTYPE == DType::F32
            && m >= PackedWeight::MIN_ROWS
            && matches!(plan.offsets[..], [[_, 0]])
            && w.packs(b, epilogue.columns)
    });
    let a = a.acc_cow::<T>();
    // A large f16/bf16 right operand (the weights) is converted a block of rows at a
    // time instead of whole, so a model of f16 weights runs in the weights' memory,
    // not twice it again in f32.
    let b_blocks = (T::DTYPE != <T::Acc as Element>::DTYPE
        && plan.heads.is_none()
        && plan.offsets.len() == 1
        && k > 1
        && k * n > CONVERT_BLOCK)
        .then(|| b.slice_of::<T>());
    let b = match b_blocks {
        Some(_) => Cow::Borrowed(&[][..]),
        None => b.acc_cow::<T>(),
    };
    let bias = epilogue.bias.map(|bias| bias.acc_cow::<T>());
    let bias = bias.as_deref().map(|all| &all[col0..col0 + n]);
    let residual = epilogue.residual.map(|r| r.acc_cow::<T>());
    let act = epilogue.activation;
    // Every element is written below: by the bias or residual copy, or by a GEMM that
    // does not read its destination (`accumulate` false; zeros when `k == 0`).
    let mut out = crate::cpu::pool::buffer::<T::Acc>(plan.offsets.len() * m * n);
    if let Some((heads, rows)) = plan.heads {
        by_heads::<T>(
            plan,
            (heads, rows),
            backend,
            (&a, &b, bias),
            (act, packed),
            &mut out,
        );
        return Ok(out.into_iter().map(T::from_acc).collect());
    }
    let small = out.len() < SEQUENTIAL_WORK;
    // With the weight packed, the bias and residual are added as each tile of the
    // result is stored (no pass of their own); an activation follows. Where the packed
    // GEMM refuses (it does not on shapes checked above), the plain route below runs.
    if let Some(w) = packed {
        let store = TileStore {
            accumulate: false,
            bias,
            residual: residual.as_deref(),
        };
        let oa = plan.offsets[0][0];
        if T::Acc::gemm_packed(w, m, &a[oa..], &mut out, (n, n.max(1), 0), store) {
            if act != Activation::Identity {
                activate_rows::<T>(act, None, n, small, &mut out);
            }
            return Ok(out.into_iter().map(T::from_acc).collect());
        }
    }
    // Before an activation (and without a residual) the bias is added in the
    // activation's pass, each row while it is in cache, rather than written first for
    // the GEMM to read back: one pass over the result fewer.
    let (bias_after, bias) = if act != Activation::Identity && residual.is_none() {
        (bias, None)
    } else {
        (None, bias)
    };
    let accumulate = bias.is_some() || residual.is_some();
    if accumulate {
        // `rows` starts at row `first` of the result (of `n` columns).
        let fill = |first: usize, rows: &mut [T::Acc]| {
            for (i, row) in rows.chunks_mut(n.max(1)).enumerate() {
                match (&residual, bias) {
                    (Some(r), Some(bias)) => {
                        let r = &r[(first + i) * n..][..row.len()];
                        for ((o, &x), &y) in row.iter_mut().zip(r).zip(bias) {
                            *o = x + y;
                        }
                    }
                    (Some(r), None) => {
                        row.copy_from_slice(&r[(first + i) * n..][..row.len()]);
                    }
                    (None, Some(bias)) => row.copy_from_slice(&bias[..row.len()]),
                    (None, None) => {}
                }
            }
        };
        if small {
            fill(0, &mut out);
        } else {
            out.par_chunks_mut(n.max(1) * EPILOGUE_ROWS)
                .enumerate()
                .for_each(|(c, rows)| fill(c * EPILOGUE_ROWS, rows));
        }
    }
    if let (Some(src), true) = (b_blocks, m * n > 0) {
        let [oa, ob] = plan.offsets[0];
        multiply_by_row_blocks::<T>(
            backend,
            accumulate,
            (m, k, n),
            &a[oa..],
            (&src[ob + col0..], ldb),
            &mut out,
        );
    } else if m * n > 0 {
        let one = |c: &mut [T::Acc], &[oa, ob]: &[usize; 2]| {
            let s = Strided {
                m,
                k,
                n,
                rsa: k,
                csa: 1,
                rsb: ldb,
                csb: 1,
            };
            T::Acc::gemm_with(backend, accumulate, s, &a[oa..], &b[ob + col0..], c);
        };
        let batch = plan.offsets.len();
        if batch > 1 && m * k * n <= SMALL_GEMM && batch * m * k * n >= SEQUENTIAL_WORK {
            out.par_chunks_mut(m * n)
                .zip(&plan.offsets)
                .for_each(|(c, o)| one(c, o));
        } else {
            out.chunks_mut(m * n)
                .zip(&plan.offsets)
                .for_each(|(c, o)| one(c, o));
        }
    }
    if act != Activation::Identity {
        activate_rows::<T>(act, bias_after, n, small, &mut out);
    }
    Ok(out.into_iter().map(T::from_acc).collect())
}

/// `out = act(out + bias)` for a result of rows of `n` (`small`: on this thread),
/// [`EPILOGUE_ROWS`] rows at a time, each block while it is in cache.
fn activate_rows<T: Element>(
    act: Activation,
    bias: Option<&[T::Acc]>,
    n: usize,
    small: bool,
    out: &mut [T::Acc],
) where
    T::Acc: Gemm,
{
    let finish = |rows: &mut [T::Acc]| {
        if let Some(bias) = bias {
            for row in rows.chunks_mut(n.max(1)) {
                for (o, &b) in row.iter_mut().zip(bias) {
                    *o += b;
                }
            }
        }
        T::Acc::activate(act, rows);
    };
    if small {
        finish(out);
    } else {
        out.par_chunks_mut(n.max(1) * EPILOGUE_ROWS)
            .for_each(finish);
    }
}

fn int_matmul<T: IntElement>(plan: &Plan, a: &Tensor, b: &Tensor) -> Vec<T> {
    let (m, k, n) = (plan.m, plan.k, plan.n);
    let (a, b) = (a.slice_of::<T>(), b.slice_of::<T>());
    let mut out = Vec::with_capacity(plan.offsets.len() * m * n);
    let mut row = vec![0i64; n];
    for &[oa, ob] in &plan.offsets {
        for i in 0..m {
            row.fill(0);
            for p in 0..k {
                let x = a[oa + i * k + p].to_i64();
                for (r, y) in row.iter_mut().zip(&b[ob + p * n..ob + (p + 1) * n]) {
                    *r = r.wrapping_add(x.wrapping_mul(y.to_i64()));
                }
            }
            out.extend(row.iter().map(|&v| T::from_i64(v)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::compare::{assert_close, assert_close_tensor, Tol};

    /// Inputs covering the branches of the fast functions: zero, both signs, tiny and
    /// large magnitudes, the polynomial/exp split points, infinities and NaN.
    fn inputs() -> Vec<f32> {
        let mut xs = vec![
            0.0,
            -0.0,
            1e-8,
            -1e-8,
            0.3,
            0.625,
            -0.625,
            1.0,
            -1.0,
            3.9,
            4.1,
            -7.5,
            20.0,
            -20.0,
            90.0,
            -90.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        xs.extend((0..997).map(|i| (i as f32 - 498.0) * 0.0173));
        xs
    }

    /// Every activation, every f32 path (plain, and AVX2+FMA and AVX-512 when the CPU
    /// has them) against the scalar `libm` form computed in f64.
    #[test]
    fn f32_activation_paths_match_the_f64_scalar_form() {
        let acts = [
            Activation::Identity,
            Activation::Relu,
            Activation::Gelu,
            Activation::GeluTanh,
            Activation::Silu,
        ];
        let xs = inputs();
        for act in acts {
            let want: Vec<f64> = xs.iter().map(|&x| act.apply(x as f64)).collect();
            let mut paths: Vec<(&str, Vec<f32>)> = Vec::new();
            let mut plain = xs.clone();
            activate_f32_with::<false>(act, &mut plain);
            paths.push(("plain", plain));
            #[cfg(target_arch = "x86_64")]
            if crate::cpu::Isa::Avx2Fma.is_available() {
                let mut fast = xs.clone();
                // SAFETY: avx2 and fma detected just above.
                unsafe { activate_f32_fma(act, &mut fast) };
                paths.push(("avx2+fma", fast));
            } else {
                println!("SKIPPED: the {act:?} avx2+fma path needs AVX2 and FMA");
            }
            #[cfg(target_arch = "x86_64")]
            if crate::cpu::Isa::Avx512.is_available() {
                let mut wide = xs.clone();
                // SAFETY: `is_available` detected every feature the function enables.
                unsafe { activate_f32_avx512(act, &mut wide) };
                paths.push(("avx512", wide));
            } else {
                println!("SKIPPED: the {act:?} avx512 path needs AVX-512 F, VL, BW and DQ");
            }
            #[cfg(not(target_arch = "x86_64"))]
            println!("SKIPPED: the {act:?} avx2+fma and avx512 paths need x86-64");
            let mut dispatched = xs.clone();
            f32::activate(act, &mut dispatched);
            paths.push(("dispatched", dispatched));
            for (name, got) in &paths {
                let got: Vec<f64> = got.iter().map(|&g| g as f64).collect();
                assert_close(
                    &got,
                    &want,
                    Tol::new(1e-6, 2e-6),
                    &format!("{act:?} {name}"),
                );
            }
        }
    }

    /// Products split into one band of rows per thread (`row_split`) equal the
    /// sequential `matrixmultiply` product: row counts that are not a multiple of the
    /// band (a short last band), with and without the accumulated bias of the epilogue
    /// (`epilogue_case` on a split size).
    #[test]
    fn row_bands_match_the_sequential_product() {
        let threads = rayon::current_num_threads();
        for (m, k, n) in [(389, 70, 53), (2 * ROW_BAND * threads + 1, 9, 130)] {
            if threads == 1 {
                println!("SKIPPED: row bands need two threads, this machine has one");
                return;
            }
            assert!(row_split(m, k, n), "{m}x{k}x{n} should be split");
            let ramp = |len: usize, s: f32| -> Vec<f32> {
                (0..len)
                    .map(|i| ((i * 29 % 97) as f32 - 48.0) * s)
                    .collect()
            };
            let a = Tensor::from_vec(vec![m, k], ramp(m * k, 0.01)).expect("a");
            let b = Tensor::from_vec(vec![k, n], ramp(k * n, 0.02)).expect("b");
            let got = matmul_with(&a, &b, GemmBackend::Gemm).expect("bands");
            let want = matmul_with(&a, &b, GemmBackend::MatrixMultiply).expect("plain");
            assert_close_tensor(&got, &want, Tol::new(1e-4, 1e-5), &format!("{m}x{k}x{n}"));
            epilogue_case(m, k, n);
        }
    }

    /// The epilogue output equals the unfused `act(a @ b + bias)` on odd sizes, with
    /// a pooled output buffer holding stale values; the first size runs the epilogue
    /// passes on the calling thread, the second in parallel (see `SEQUENTIAL_WORK`).
    #[test]
    fn epilogue_overwrites_a_reused_buffer() {
        for (m, k, n) in [(67, 33, 259), (301, 17, 261)] {
            assert_eq!(m * n < SEQUENTIAL_WORK, m == 67);
            epilogue_case(m, k, n);
        }
    }

    fn epilogue_case(m: usize, k: usize, n: usize) {
        use crate::cpu::{binary, BinaryOp, BufferPool};
        use std::sync::Arc;
        let ramp = |len: usize, s: f32| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * s)
                .collect()
        };
        let a = Tensor::from_vec(vec![m, k], ramp(m * k, 0.01)).expect("a");
        let b = Tensor::from_vec(vec![k, n], ramp(k * n, 0.02)).expect("b");
        let bias = Tensor::from_vec(vec![n], ramp(n, 0.1)).expect("bias");
        let pool = Arc::new(BufferPool::new());
        pool.raise_limit(1 << 30);
        let _g = pool.install();
        for act in [Activation::Identity, Activation::GeluTanh] {
            for bias in [None, Some(&bias)] {
                pool.recycle(Tensor::from_vec(vec![m * n], vec![f32::NAN; m * n]).expect("x"));
                let got = matmul_epilogue(&a, &b, bias, act, GemmBackend::Auto).expect("fused");
                assert_eq!(pool.held_bytes(), 0, "the stale buffer was used");
                let mut want = matmul(&a, &b).expect("product");
                if let Some(bias) = bias {
                    want = binary(BinaryOp::Add, &want, bias).expect("bias");
                }
                let want: Vec<f64> = want
                    .to_f64_vec()
                    .into_iter()
                    .map(|x| act.apply(x))
                    .collect();
                assert_close(
                    &got.to_f64_vec(),
                    &want,
                    Tol::scaled(1e-4),
                    &format!("{act:?}"),
                );
            }
        }
    }
}
