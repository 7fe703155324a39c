//! The products themselves: float products (with their epilogue: bias, residual,
//! activation; head-major results; packed weights; f16/bf16 weights converted a block
//! at a time) and integer products.

use std::borrow::Cow;

use rayon::prelude::*;

use super::activation::Activation;
use super::broadcast::Broadcast;
use super::gemm::{Gemm, GemmBackend, Strided, SEQUENTIAL_WORK};
use super::shapes::Plan;
use super::tile_store::TileStore;
use super::Epilogue;
use crate::cpu::{Isa, PackedWeight};
use crate::KernelError;
use crate::{DType, Element, IntElement, Tensor};

/// Per-matrix work (`m * k * n`) below which a batched matmul runs its matrices in
/// parallel with rayon rather than relying on the GEMM's own threading.
const SMALL_GEMM: usize = 1 << 21;

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
    (act, packed, broadcast): (Activation, Option<&PackedWeight>, Broadcast),
    out: &mut [T::Acc],
) where
    T::Acc: Gemm,
{
    let (a, b, bias) = operands;
    let (k, n, col0) = (plan.k, plan.n, plan.col0);
    let d = n / heads;
    if out.is_empty() || d == 0 {
        return;
    }
    // Read here: the activation may run on rayon's threads.
    let isa = crate::elementwise::isa();
    // With the weight packed: one product per batch entry, written head by head
    // (column blocks of `d`), where the packed GEMM takes blocks of that width.
    // The bias is added and the activation applied as each tile is stored.
    if let Some(w) = packed {
        let store = TileStore {
            accumulate: false,
            bias,
            residual: None,
            activation: (act != Activation::Identity).then_some((act, isa)),
            broadcast,
        };
        let done = out
            .chunks_mut(heads * rows * d)
            .enumerate()
            .all(|(entry, c)| {
                let a = &a[entry * rows * k..];
                T::Acc::gemm_packed(w, rows, a, c, (d, d, rows * d), store)
            });
        if done {
            return;
        }
    }
    let block = |i: usize, c: &mut [T::Acc]| {
        let (entry, h) = (i / heads, i % heads);
        if let Some(bias) = bias {
            head_bias(c, bias, h, d);
        }
        let (rsb, csb) = plan.b_strides();
        let s = Strided {
            m: rows,
            k,
            n: d,
            rsa: k,
            csa: 1,
            rsb,
            csb,
        };
        let a = &a[entry * rows * k..];
        let b = &b[plan.b_column(col0 + h * d)..];
        T::Acc::gemm_with(backend, bias.is_some(), s, a, b, c);
        if act != Activation::Identity {
            T::Acc::activate(act, isa, c);
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
pub(super) fn float_matmul<T: Element>(
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
    // One weight matrix, packed beforehand for these columns: the packed-weight GEMM,
    // for any number of rows (the caller packs from `PackedWeight::MIN_ROWS` rows, and
    // passes a weight whose mapped pages were given back for fewer too).
    let packed = epilogue.packed.filter(|w| {
        T::DTYPE == DType::F32
            && matches!(plan.offsets[..], [[_, 0]])
            && w.packs_as(b, epilogue.columns, plan.b_transposed)
    });
    let a = a.acc_cow::<T>();
    // A large f16/bf16 right operand (the weights) is converted a block of rows at a
    // time instead of whole, so a model of f16 weights runs in the weights' memory,
    // not twice it again in f32.
    let b_blocks = (T::DTYPE != <T::Acc as Element>::DTYPE
        && plan.heads.is_none()
        && !plan.b_transposed
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
            (act, packed, epilogue.broadcast),
            &mut out,
        );
        return Ok(out.into_iter().map(T::from_acc).collect());
    }
    let small = out.len() < SEQUENTIAL_WORK;
    // With the weight packed, the bias and residual are added and the activation
    // applied as each tile of the result is stored (no pass of their own). Where the
    // packed GEMM refuses (it does not on shapes checked above), the plain route below
    // runs.
    if let Some(w) = packed {
        let store = TileStore {
            accumulate: false,
            bias,
            residual: residual.as_deref(),
            activation: (act != Activation::Identity).then(|| (act, crate::elementwise::isa())),
            broadcast: epilogue.broadcast,
        };
        let oa = plan.offsets[0][0];
        if T::Acc::gemm_packed(w, m, &a[oa..], &mut out, (n, n.max(1), 0), store) {
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
        let (rsb, csb) = plan.b_strides();
        let one = |c: &mut [T::Acc], &[oa, ob]: &[usize; 2]| {
            let s = Strided {
                m,
                k,
                n,
                rsa: k,
                csa: 1,
                rsb,
                csb,
            };
            let b = &b[ob + plan.b_column(col0)..];
            T::Acc::gemm_with(backend, accumulate, s, &a[oa..], b, c);
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
    // Read here: `finish` may run on rayon's threads.
    let isa: Isa = crate::elementwise::isa();
    let finish = |rows: &mut [T::Acc]| {
        if let Some(bias) = bias {
            for row in rows.chunks_mut(n.max(1)) {
                for (o, &b) in row.iter_mut().zip(bias) {
                    *o += b;
                }
            }
        }
        T::Acc::activate(act, isa, rows);
    };
    if small {
        finish(out);
    } else {
        out.par_chunks_mut(n.max(1) * EPILOGUE_ROWS)
            .for_each(finish);
    }
}

pub(super) fn int_matmul<T: IntElement>(plan: &Plan, a: &Tensor, b: &Tensor) -> Vec<T> {
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
