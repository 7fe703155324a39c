//! Reductions: sum/mean/amax over dims, softmax and log-softmax along a dim, cumsum.

use rayon::prelude::*;

use crate::broadcast::{collapse_dims, contiguous_strides, Odometer, PAR_THRESHOLD};
use crate::cpu::util::{norm_dim, norm_dims, prod};
use crate::macros::{dispatch, dispatch_float};
use crate::{DType, Element, KernelError, Real, Tensor};

/// Outputs per rayon task, aiming at about this many input elements per task.
const TASK_ELEMS: usize = 1 << 14;

/// A reduction over dims (see [`reduce`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (the input's dtype, bool summing to i64; floats accumulate in f64).
    Sum,
    /// Mean (floats: NaN over zero elements; integers: truncated toward zero).
    Mean,
    /// Maximum (any dtype; NaN propagates; error over zero elements).
    Amax,
}

impl ReduceOp {
    /// The op's name as used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Amax => "amax",
        }
    }
}

/// The reduction layout of a tensor: kept dims (one output each) and reduced dims.
struct Lanes {
    kept_shape: Vec<usize>,
    kept_strides: Vec<[usize; 1]>,
    red_shape: Vec<usize>,
    red_strides: Vec<[usize; 1]>,
    red_numel: usize,
    out_numel: usize,
}

impl Lanes {
    fn new(shape: &[usize], reduced: &[bool]) -> Lanes {
        let strides = contiguous_strides(shape);
        let pick = |want: bool| -> (Vec<usize>, Vec<usize>) {
            (0..shape.len())
                .filter(|&i| reduced[i] == want)
                .map(|i| (shape[i], strides[i]))
                .unzip()
        };
        let (ks, kst) = pick(false);
        let (rs, rst) = pick(true);
        let (kept_shape, kept_strides) = collapse_dims(&ks, [&kst]);
        let (red_shape, red_strides) = collapse_dims(&rs, [&rst]);
        Lanes {
            out_numel: prod(&ks),
            red_numel: prod(&rs),
            kept_shape,
            kept_strides,
            red_shape,
            red_strides,
        }
    }

    /// Folds every lane of `src` with `fold`, starting from `init`, one output per lane.
    fn fold<T: Copy + Sync, A: Copy + Send + Sync>(
        &self,
        src: &[T],
        init: A,
        fold: impl Fn(A, T) -> A + Sync,
    ) -> Vec<A> {
        let mut out = vec![init; self.out_numel];
        if self.out_numel == 0 {
            return out;
        }
        let (mut rshape, mut rst) = (self.red_shape.clone(), self.red_strides.clone());
        let (inner, [ist]) = match (rshape.pop(), rst.pop()) {
            (Some(n), Some(s)) => (n, s),
            _ => (1, [0]),
        };
        let red_rows = if self.red_numel == 0 {
            0
        } else {
            self.red_numel / inner
        };
        let run = |chunk: &mut [A], start: usize| {
            let mut kept = Odometer::new(&self.kept_shape, &self.kept_strides, [0], start);
            for o in chunk.iter_mut() {
                let mut acc = init;
                let mut rows = Odometer::new(&rshape, &rst, kept.offsets, 0);
                for _ in 0..red_rows {
                    let base = rows.offsets[0];
                    if ist == 1 {
                        for &v in &src[base..base + inner] {
                            acc = fold(acc, v);
                        }
                    } else {
                        for i in 0..inner {
                            acc = fold(acc, src[base + i * ist]);
                        }
                    }
                    rows.advance();
                }
                *o = acc;
                kept.advance();
            }
        };
        let work = self.out_numel.saturating_mul(self.red_numel.max(1));
        if work < PAR_THRESHOLD || self.out_numel == 1 {
            run(&mut out, 0);
        } else {
            let per_task = (TASK_ELEMS / self.red_numel.max(1)).max(1);
            out.par_chunks_mut(per_task)
                .enumerate()
                .for_each(|(c, chunk)| run(chunk, c * per_task));
        }
        out
    }
}

/// Reduces `x` over `dims` (all dims when empty), keeping them as size 1 when `keepdim`.
///
/// Every result keeps the input's dtype, as ONNX's `ReduceSum`/`ReduceMean`/`ReduceMax`
/// do, except `Sum` of bool, which gives i64. `Sum` and `Mean` of floats accumulate in
/// f64; `Sum` of integers wraps at their width; `Mean` of integers is the sum divided by
/// the count, truncated toward zero (an error over zero elements); `Amax` propagates NaN
/// and errors when reducing zero elements.
pub fn reduce(
    op: ReduceOp,
    x: &Tensor,
    dims: &[i64],
    keepdim: bool,
) -> Result<Tensor, KernelError> {
    let name = op.name();
    let rank = x.rank();
    let reduced: Vec<bool> = if rank == 0 {
        norm_dims(name, dims, 1)?;
        Vec::new()
    } else if dims.is_empty() {
        vec![true; rank]
    } else {
        let mut mask = vec![false; rank];
        for d in norm_dims(name, dims, rank)? {
            mask[d] = true;
        }
        mask
    };
    let shape: Vec<usize> = x
        .shape()
        .iter()
        .zip(&reduced)
        .filter_map(|(&s, &r)| match (r, keepdim) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    let lanes = Lanes::new(x.shape(), &reduced);
    let dtype = x.dtype();
    match op {
        ReduceOp::Sum if dtype == DType::Bool => {
            let out = lanes.fold(x.slice_of::<bool>(), 0i64, |a, v: bool| a + i64::from(v));
            Ok(Tensor::from_data(shape, out))
        }
        ReduceOp::Mean if dtype.is_int() && lanes.red_numel == 0 && lanes.out_numel > 0 => {
            Err(KernelError::shape(
                name,
                format!(
                    "an integer mean over zero elements divides by zero: shape {:?}, dims {dims:?}",
                    x.shape()
                ),
            ))
        }
        ReduceOp::Sum | ReduceOp::Mean if dtype.is_int() => Ok(dispatch!(dtype, |T| {
            let sums = lanes.fold(x.slice_of::<T>(), 0i64, |a, v: T| {
                a.wrapping_add(v.to_i64())
            });
            let count = (lanes.red_numel as i64).max(1);
            let div = if op == ReduceOp::Mean { count } else { 1 };
            // Wrapping in i64 and then at T's width is wrapping at T's width; `/`
            // truncates toward zero, as ONNX runtimes do.
            let out: Vec<T> = sums.into_iter().map(|s| T::from_i64(s / div)).collect();
            Tensor::from_data(shape, out)
        })),
        ReduceOp::Sum | ReduceOp::Mean => dispatch_float!(dtype, name, |T| {
            let sums = lanes.fold(x.slice_of::<T>(), 0f64, |a, v: T| a + v.to_f64());
            let div = if op == ReduceOp::Mean {
                lanes.red_numel as f64
            } else {
                1.0
            };
            Ok(Tensor::from_data(
                shape,
                sums.into_iter()
                    .map(|s| T::from_f64(s / div))
                    .collect::<Vec<T>>(),
            ))
        }),
        ReduceOp::Amax => {
            if lanes.red_numel == 0 && lanes.out_numel > 0 {
                return Err(KernelError::shape(
                    name,
                    format!(
                        "cannot reduce over zero elements: shape {:?}, dims {dims:?}",
                        x.shape()
                    ),
                ));
            }
            Ok(dispatch!(dtype, |T| {
                let lowest = match dtype {
                    DType::Bool => T::from_f64(0.0),
                    // -inf goes through i64 and wraps into the narrow integers: their
                    // least value instead.
                    DType::I8 => T::from_i64(i8::MIN.into()),
                    DType::I16 => T::from_i64(i16::MIN.into()),
                    d if d.is_unsigned_int() => T::from_i64(0),
                    _ => T::from_f64(f64::NEG_INFINITY),
                };
                let out = lanes.fold(x.slice_of::<T>(), lowest, amax_step::<T>);
                Tensor::from_data(shape, out)
            }))
        }
    }
}

/// One step of a NaN-propagating maximum.
#[inline]
fn amax_step<T: Element>(acc: T, v: T) -> T {
    if acc.is_nan_value() || !(v.is_nan_value() || v > acc) {
        acc
    } else {
        v
    }
}

/// `(outer, axis, inner)` sizes around dim `d`.
fn split3(shape: &[usize], d: usize) -> (usize, usize, usize) {
    (prod(&shape[..d]), shape[d], prod(&shape[d + 1..]))
}

/// Softmax along `dim` (float dtypes; f16/bf16 computed in f32).
///
/// Numerically stable (the lane maximum is subtracted first). A lane of all `-inf`
/// gives NaN, as in PyTorch.
pub fn softmax(x: &Tensor, dim: i64) -> Result<Tensor, KernelError> {
    softmax_impl("softmax", x, dim, false)
}

/// Log-softmax along `dim` (float dtypes; f16/bf16 computed in f32); a lane of all
/// `-inf` gives NaN, as in PyTorch.
pub fn log_softmax(x: &Tensor, dim: i64) -> Result<Tensor, KernelError> {
    softmax_impl("log_softmax", x, dim, true)
}

fn softmax_impl(op: &'static str, x: &Tensor, dim: i64, log: bool) -> Result<Tensor, KernelError> {
    let d = norm_dim(op, dim, x.rank().max(1))?;
    let shape = if x.rank() == 0 {
        vec![1]
    } else {
        x.shape().to_vec()
    };
    let (_, axis, inner) = split3(&shape, d);
    dispatch_float!(x.dtype(), op, |T| {
        let src = x.slice_of::<T>();
        // Every block is written by `softmax_block`.
        let mut out = if axis * inner > 0 {
            crate::cpu::pool::buffer::<T>(src.len())
        } else {
            vec![T::default(); src.len()]
        };
        let block = axis * inner;
        if block > 0 {
            let body = |scratch: &mut Vec<<T as Element>::Acc>, (o, s): (&mut [T], &[T])| {
                softmax_block(s, o, inner, log, scratch)
            };
            if src.len() < PAR_THRESHOLD {
                let mut scratch = Vec::new();
                out.chunks_mut(block)
                    .zip(src.chunks(block))
                    .for_each(|p| body(&mut scratch, p));
            } else {
                out.par_chunks_mut(block)
                    .zip(src.par_chunks(block))
                    .with_min_len((TASK_ELEMS / block).max(1))
                    .for_each_init(Vec::new, body);
            }
        }
        Ok(Tensor::from_data(x.shape().to_vec(), out))
    })
}

/// Softmax of one `[axis, inner]` block along `axis`; `scratch` holds the exponentials.
fn softmax_block<T: Element>(
    src: &[T],
    out: &mut [T],
    inner: usize,
    log: bool,
    scratch: &mut Vec<T::Acc>,
) {
    let neg_inf = T::Acc::NEG_INFINITY;
    scratch.clear();
    scratch.extend(src.iter().map(|v| v.to_acc()));
    if inner == 1 {
        let m = scratch
            .iter()
            .fold(neg_inf, |m, &v| if v > m { v } else { m });
        let mut sum = T::Acc::ZERO;
        for e in scratch.iter_mut() {
            *e = (*e - m).exp();
            sum += *e;
        }
        if log {
            let ls = sum.ln();
            for (o, &v) in out.iter_mut().zip(src) {
                *o = T::from_acc(v.to_acc() - m - ls);
            }
        } else {
            let inv = T::Acc::ONE / sum;
            for (o, &e) in out.iter_mut().zip(scratch.iter()) {
                *o = T::from_acc(e * inv);
            }
        }
        return;
    }
    let mut m = vec![neg_inf; inner];
    for row in scratch.chunks(inner) {
        for (m, &v) in m.iter_mut().zip(row) {
            if v > *m {
                *m = v;
            }
        }
    }
    let mut sum = vec![T::Acc::ZERO; inner];
    for row in scratch.chunks_mut(inner) {
        for ((e, s), &m) in row.iter_mut().zip(sum.iter_mut()).zip(&m) {
            *e = (*e - m).exp();
            *s += *e;
        }
    }
    for (a, (orow, erow)) in out.chunks_mut(inner).zip(scratch.chunks(inner)).enumerate() {
        for i in 0..inner {
            orow[i] = if log {
                T::from_acc(src[a * inner + i].to_acc() - m[i] - sum[i].ln())
            } else {
                T::from_acc(erow[i] / sum[i])
            };
        }
    }
}

/// Cumulative sum along `dim`. Every dtype but bool keeps its dtype, as ONNX `CumSum`
/// does: floats accumulate in f64, integers wrap at their own width (an `i32` input gives
/// `i32`, not PyTorch's `i64`); bool gives i64.
pub fn cumsum(x: &Tensor, dim: i64) -> Result<Tensor, KernelError> {
    let d = norm_dim("cumsum", dim, x.rank().max(1))?;
    let shape = if x.rank() == 0 {
        vec![1]
    } else {
        x.shape().to_vec()
    };
    let (outer, axis, inner) = split3(&shape, d);
    let dtype = x.dtype();
    if dtype.is_float() {
        dispatch_float!(dtype, "cumsum", |T| {
            let out = scan(
                x.slice_of::<T>(),
                outer,
                axis,
                inner,
                0f64,
                |a, v: T| a + v.to_f64(),
                T::from_f64,
            );
            Ok(Tensor::from_data(x.shape().to_vec(), out))
        })
    } else if dtype == DType::Bool {
        let out = scan(
            x.slice_of::<bool>(),
            outer,
            axis,
            inner,
            0i64,
            |a, v: bool| a + i64::from(v),
            |a| a,
        );
        Ok(Tensor::from_data(x.shape().to_vec(), out))
    } else {
        Ok(dispatch!(dtype, |T| {
            // Wrapping in i64 and then at T's width is wrapping at T's width.
            let out = scan(
                x.slice_of::<T>(),
                outer,
                axis,
                inner,
                0i64,
                |a, v: T| a.wrapping_add(v.to_i64()),
                T::from_i64,
            );
            Tensor::from_data(x.shape().to_vec(), out)
        }))
    }
}

/// Inclusive scan along the middle axis of an `[outer, axis, inner]` layout.
fn scan<T: Copy, A: Copy, O>(
    src: &[T],
    outer: usize,
    axis: usize,
    inner: usize,
    zero: A,
    add: impl Fn(A, T) -> A,
    finish: impl Fn(A) -> O,
) -> Vec<O> {
    let mut out = Vec::with_capacity(src.len());
    let mut acc = vec![zero; inner];
    for o in 0..outer {
        acc.fill(zero);
        for a in 0..axis {
            let base = (o * axis + a) * inner;
            for (i, s) in acc.iter_mut().enumerate() {
                *s = add(*s, src[base + i]);
                out.push(finish(*s));
            }
        }
    }
    out
}
