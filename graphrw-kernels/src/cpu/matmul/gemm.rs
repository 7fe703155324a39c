//! The strided GEMM every float product runs on: the `gemm` crate or `matrixmultiply`
//! ([`GemmBackend`]), split into row bands per thread where that was measured to win,
//! and the packed-weight GEMM ([`Gemm::gemm_packed`]) where a weight was packed.

use rayon::prelude::*;

use super::activation::{activate_f32, activate_scalar, Activation};
use super::tile_store::TileStore;
use crate::cpu::{Isa, PackedWeight};
use crate::Real;

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

    /// Applies `act` to every element of `xs` in place, with the generated kernels'
    /// instruction set `isa` (chosen on the thread that called the matmul: the
    /// activation may run on rayon's).
    fn activate(act: Activation, isa: Isa, xs: &mut [Self]);

    /// `c = act(a @ w + bias + residual (+ c))` ([`TileStore`]) for `m` rows of `a` (row stride
    /// `w`'s depth) on the packed-weight GEMM, the result laid out by `layout`
    /// (`(ldc, block, block_stride)`, see `packed_gemm::Layout`). False, having done
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
    use crate::cpu::packed_gemm::{gemm, Layout};
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
pub(super) const SEQUENTIAL_WORK: usize = 1 << 16;

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
pub(super) const ROW_BAND: usize = 64;

/// Whether a parallel product runs as one band of rows per thread, each band a
/// sequential `gemm` call, rather than on `gemm`'s own rayon split: where every thread
/// gets at least two bands' worth of rows (each band packs `b` itself, a small cost
/// beside its `rows x k x n` products). Measured on a quiet 2-core Zen 4, builds
/// alternated, 3 rounds (`gemm_rate --repeat 5`, GFLOP/s): `[512, 768] x [768, 768]`
/// 190-219 -> 222, `x [768, 2304]` 199-215 -> 215-218, the other shapes of the main
/// model within the noise (210-220 both); MLAS (`ort_matmul_compare.py --threads 2`)
/// 205-231. The main example's model (`graphrw run --repeat 5`, 4 rounds): 89.7-93.2
/// -> 85.4-88.3 ms.
pub(super) fn row_split(m: usize, k: usize, n: usize) -> bool {
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
            fn activate(act: Activation, isa: Isa, xs: &mut [Self]) {
                $activate(act, isa, xs)
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
