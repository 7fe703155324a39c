//! Elementwise kernels: binary ops with broadcasting, unary ops, `where`, casts,
//! `masked_fill` and inference-mode `dropout`.

use rayon::prelude::*;

use crate::broadcast::{
    broadcast_shapes, broadcast_zip, broadcast_zip3, map_slice, PAR_CHUNK, PAR_THRESHOLD,
};
use crate::cpu::util::{expect_bool, same_dtype};
use crate::elementwise::lanes;
use crate::macros::{dispatch, dispatch_float, dispatch_int};
use crate::{DType, Element, IntElement, KernelError, Real, Tensor};

/// The binary and unary elementwise ops (see [`binary`], [`unary`]): the workspace's
/// one list of each, in `graphrw-ops`, which the tile executor and `fused_kernel!` read
/// too.
pub use graphrw_ops::{BinaryOp, UnaryOp};

fn zip_tensors<A: Element, B: Element, O: Element>(
    a: &Tensor,
    b: &Tensor,
    shape: Vec<usize>,
    f: impl Fn(A, B) -> O + Sync,
) -> Tensor {
    let out = broadcast_zip(
        a.slice_of::<A>(),
        a.shape(),
        b.slice_of::<B>(),
        b.shape(),
        &shape,
        f,
    );
    Tensor::from_data(shape, out)
}

/// Applies a binary op with numpy broadcasting.
///
/// Both operands must have the same dtype, except for [`BinaryOp::Pow`] whose result
/// has the dtype of `a` (any exponent dtype). Arithmetic accepts floats and integers
/// (integers wrap on overflow; integer division truncates toward zero and errors on a
/// zero divisor; a negative integer exponent is an error), comparisons accept every
/// dtype and give bool, `And`/`Or` need bool.
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    let name = op.name();
    let shape = broadcast_shapes(a.shape(), b.shape()).ok_or_else(|| KernelError::Broadcast {
        op: name,
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
    })?;
    if op == BinaryOp::Pow {
        return pow(a, b, shape);
    }
    let dtype = same_dtype(name, a, b)?;
    match op {
        BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            Ok(dispatch!(dtype, |T| compare::<T>(op, a, b, shape)))
        }
        BinaryOp::And | BinaryOp::Or => {
            expect_bool(name, a)?;
            Ok(if op == BinaryOp::And {
                zip_tensors(a, b, shape, |x: bool, y: bool| x && y)
            } else {
                zip_tensors(a, b, shape, |x: bool, y: bool| x || y)
            })
        }
        _ => match dtype {
            DType::Bool => Err(KernelError::UnsupportedDType {
                op: name,
                dtype,
                expected: "a float or integer dtype",
            }),
            dt if dt.is_int() => dispatch_int!(dt, name, |T| int_arith::<T>(op, a, b, shape)),
            _ => dispatch_float!(dtype, name, |T| Ok(float_arith::<T>(op, a, b, shape))),
        },
    }
}

fn compare<T: Element>(op: BinaryOp, a: &Tensor, b: &Tensor, shape: Vec<usize>) -> Tensor {
    match op {
        BinaryOp::Eq => zip_tensors(a, b, shape, |x: T, y: T| x == y),
        BinaryOp::Ne => zip_tensors(a, b, shape, |x: T, y: T| x != y),
        BinaryOp::Lt => zip_tensors(a, b, shape, |x: T, y: T| x < y),
        BinaryOp::Le => zip_tensors(a, b, shape, |x: T, y: T| x <= y),
        BinaryOp::Gt => zip_tensors(a, b, shape, |x: T, y: T| x > y),
        _ => zip_tensors(a, b, shape, |x: T, y: T| x >= y),
    }
}

/// NaN-propagating maximum (`torch.maximum`).
#[inline]
fn nan_max<A: Real>(x: A, y: A) -> A {
    if x.is_nan() || y.is_nan() {
        A::NAN
    } else if x >= y {
        x
    } else {
        y
    }
}

/// NaN-propagating minimum (`torch.minimum`).
#[inline]
fn nan_min<A: Real>(x: A, y: A) -> A {
    if x.is_nan() || y.is_nan() {
        A::NAN
    } else if x <= y {
        x
    } else {
        y
    }
}

/// Lifts a binary function on the compute type to one on the storage type.
#[inline]
fn lift2<T: Element>(g: impl Fn(T::Acc, T::Acc) -> T::Acc + Sync) -> impl Fn(T, T) -> T + Sync {
    move |x, y| T::from_acc(g(x.to_acc(), y.to_acc()))
}

fn float_arith<T: Element>(op: BinaryOp, a: &Tensor, b: &Tensor, shape: Vec<usize>) -> Tensor {
    match op {
        BinaryOp::Add => zip_tensors(a, b, shape, lift2::<T>(|x, y| x + y)),
        BinaryOp::Sub => zip_tensors(a, b, shape, lift2::<T>(|x, y| x - y)),
        BinaryOp::Mul => zip_tensors(a, b, shape, lift2::<T>(|x, y| x * y)),
        BinaryOp::Div => zip_tensors(a, b, shape, lift2::<T>(|x, y| x / y)),
        BinaryOp::Maximum => zip_tensors(a, b, shape, lift2::<T>(nan_max)),
        _ => zip_tensors(a, b, shape, lift2::<T>(nan_min)),
    }
}

fn int_arith<T: IntElement>(
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    shape: Vec<usize>,
) -> Result<Tensor, KernelError> {
    Ok(match op {
        BinaryOp::Add => zip_tensors(a, b, shape, |x: T, y: T| x.wadd(y)),
        BinaryOp::Sub => zip_tensors(a, b, shape, |x: T, y: T| x.wsub(y)),
        BinaryOp::Mul => zip_tensors(a, b, shape, |x: T, y: T| x.wmul(y)),
        BinaryOp::Div => {
            if b.slice_of::<T>().contains(&T::ZERO) {
                return Err(KernelError::DivisionByZero { op: "div" });
            }
            zip_tensors(a, b, shape, |x: T, y: T| x.wdiv(y))
        }
        BinaryOp::Maximum => zip_tensors(a, b, shape, |x: T, y: T| x.max(y)),
        _ => zip_tensors(a, b, shape, |x: T, y: T| x.min(y)),
    })
}

fn pow(a: &Tensor, b: &Tensor, shape: Vec<usize>) -> Result<Tensor, KernelError> {
    match a.dtype() {
        DType::Bool => Err(KernelError::UnsupportedDType {
            op: "pow",
            dtype: DType::Bool,
            expected: "a float or integer base",
        }),
        DType::F64 => {
            let e = b.cast(DType::F64);
            Ok(zip_tensors(a, &e, shape, |x: f64, y: f64| x.powf(y)))
        }
        dt if dt.is_float() => dispatch_float!(dt, "pow", |T| {
            let e = b.cast(DType::F32);
            Ok(zip_tensors(a, &e, shape, |x: T, y: f32| {
                T::from_f32(x.to_f32().powf(y))
            }))
        }),
        dt => {
            if b.dtype().is_float() {
                let e = b.cast(DType::F64);
                return Ok(dispatch!(dt, |T| zip_tensors(
                    a,
                    &e,
                    shape,
                    |x: T, y: f64| T::from_f64(x.to_f64().powf(y))
                )));
            }
            let e = b.cast(DType::I64);
            if e.slice_of::<i64>().iter().any(|&v| v < 0) {
                return Err(KernelError::invalid(
                    "pow",
                    "integers to negative integer powers are not allowed",
                ));
            }
            Ok(dispatch!(dt, |T| zip_tensors(
                a,
                &e,
                shape,
                |x: T, y: i64| {
                    let y = u32::try_from(y).unwrap_or(u32::MAX);
                    T::from_i64(x.to_i64().wrapping_pow(y))
                }
            )))
        }
    }
}

fn map_tensor<T: Element, O: Element>(x: &Tensor, f: impl Fn(T) -> O + Sync) -> Tensor {
    Tensor::from_data(x.shape().to_vec(), map_slice(x.slice_of::<T>(), f))
}

/// Applies a unary op elementwise.
///
/// `Neg`, `Abs`, `Relu` accept floats and integers, `Not` needs bool, `IsNan` accepts
/// every dtype (and gives bool); the rest need a float dtype.
pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor, KernelError> {
    let name = op.name();
    let dtype = x.dtype();
    match op {
        UnaryOp::Not => {
            expect_bool(name, x)?;
            return Ok(map_tensor(x, |v: bool| !v));
        }
        UnaryOp::IsNan => return Ok(dispatch!(dtype, |T| map_tensor(x, |v: T| v.is_nan_value()))),
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu if dtype.is_int() => {
            return dispatch_int!(dtype, name, |T| Ok(int_unary::<T>(op, x)));
        }
        _ => {}
    }
    match dtype {
        DType::F32 => Ok(lanes_unary::<f32>(op, x)),
        DType::F16 => Ok(lanes_unary::<half::f16>(op, x)),
        DType::BF16 => Ok(lanes_unary::<half::bf16>(op, x)),
        _ => dispatch_float!(dtype, name, |T| Ok(float_unary::<T>(op, x))),
    }
}

/// A float unary op on a dtype computed in `f32`: each element is widened, run
/// through [`lanes::unary_f32`] built for [`crate::elementwise::isa`] (the
/// vectorising transcendental forms) and rounded back. An elementwise group of the
/// tile executor runs the same lanes on the same instruction set, so an op gives the
/// same bits inside a fused group as on its own.
fn lanes_unary<T: Element<Acc = f32>>(op: UnaryOp, x: &Tensor) -> Tensor {
    /// Elements widened per pass (on the stack).
    const BLOCK: usize = 256;
    let isa = crate::elementwise::isa();
    let src = x.slice_of::<T>();
    // Every element is written by `body`.
    let mut out = crate::cpu::pool::buffer::<T>(src.len());
    let body = |(dst, src): (&mut [T], &[T])| {
        let (mut wide, mut result) = ([0f32; BLOCK], [0f32; BLOCK]);
        for (dst, src) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)) {
            let n = src.len();
            for (w, &s) in wide.iter_mut().zip(src) {
                *w = s.to_acc();
            }
            lanes::unary_f32(isa, op, &mut result[..n], &wide[..n]);
            for (d, &r) in dst.iter_mut().zip(&result[..n]) {
                *d = T::from_acc(r);
            }
        }
    };
    if src.len() < PAR_THRESHOLD {
        body((&mut out, src));
    } else {
        out.par_chunks_mut(PAR_CHUNK)
            .zip(src.par_chunks(PAR_CHUNK))
            .for_each(body);
    }
    Tensor::from_data(x.shape().to_vec(), out)
}

/// [`unary`] with the scalar `libm` formulas on every float dtype: the plain reference
/// the vectorised lanes are tested against.
#[cfg(test)]
pub(crate) fn unary_scalar(op: UnaryOp, x: &Tensor) -> Result<Tensor, KernelError> {
    dispatch_float!(x.dtype(), op.name(), |T| Ok(float_unary::<T>(op, x)))
}

fn int_unary<T: IntElement>(op: UnaryOp, x: &Tensor) -> Tensor {
    match op {
        UnaryOp::Neg => map_tensor(x, |v: T| v.wneg()),
        UnaryOp::Abs => map_tensor(x, |v: T| v.wabs()),
        _ => map_tensor(x, |v: T| v.max(T::ZERO)),
    }
}

#[inline]
fn sigmoid<A: Real>(x: A) -> A {
    if x >= A::ZERO {
        A::ONE / (A::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (A::ONE + e)
    }
}

/// Lifts a unary function on the compute type to one on the storage type.
#[inline]
fn lift1<T: Element>(g: impl Fn(T::Acc) -> T::Acc + Sync) -> impl Fn(T) -> T + Sync {
    move |v| T::from_acc(g(v.to_acc()))
}

fn float_unary<T: Element>(op: UnaryOp, x: &Tensor) -> Tensor {
    let one = T::Acc::ONE;
    let zero = T::Acc::ZERO;
    let half = T::Acc::from_f64(0.5);
    let inv_sqrt2 = T::Acc::from_f64(std::f64::consts::FRAC_1_SQRT_2);
    let k = T::Acc::from_f64((2.0 / std::f64::consts::PI).sqrt());
    let c = T::Acc::from_f64(0.044715);
    match op {
        UnaryOp::Neg => map_tensor(x, lift1::<T>(|v| -v)),
        UnaryOp::Abs => map_tensor(x, lift1::<T>(|v| v.abs())),
        UnaryOp::Reciprocal => map_tensor(x, lift1::<T>(|v| one / v)),
        UnaryOp::Sqrt => map_tensor(x, lift1::<T>(|v| v.sqrt())),
        UnaryOp::Rsqrt => map_tensor(x, lift1::<T>(|v| one / v.sqrt())),
        UnaryOp::Exp => map_tensor(x, lift1::<T>(|v| v.exp())),
        UnaryOp::Log => map_tensor(x, lift1::<T>(|v| v.ln())),
        UnaryOp::Sin => map_tensor(x, lift1::<T>(|v| v.sin())),
        UnaryOp::Cos => map_tensor(x, lift1::<T>(|v| v.cos())),
        UnaryOp::Erf => map_tensor(x, lift1::<T>(|v| v.erf())),
        UnaryOp::Tanh => map_tensor(x, lift1::<T>(|v| v.tanh())),
        UnaryOp::Sigmoid => map_tensor(x, lift1::<T>(sigmoid)),
        UnaryOp::Relu => map_tensor(x, lift1::<T>(|v| if v < zero { zero } else { v })),
        UnaryOp::Gelu => map_tensor(x, lift1::<T>(|v| half * v * (one + (v * inv_sqrt2).erf()))),
        UnaryOp::GeluTanh => map_tensor(
            x,
            lift1::<T>(|v| half * v * (one + (k * (v + c * v * v * v)).tanh())),
        ),
        UnaryOp::Silu => map_tensor(x, lift1::<T>(|v| v * sigmoid(v))),
        // Not and IsNan are handled before dispatch.
        UnaryOp::Not | UnaryOp::IsNan => x.clone(),
    }
}

/// `cond ? a : b` elementwise, with numpy broadcasting of all three operands.
///
/// `cond` must be bool; `a` and `b` must share a dtype, which the result has.
pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    expect_bool("where", cond)?;
    let dtype = same_dtype("where", a, b)?;
    let broadcast_err = |l: &[usize], r: &[usize]| KernelError::Broadcast {
        op: "where",
        lhs: l.to_vec(),
        rhs: r.to_vec(),
    };
    let ab = broadcast_shapes(a.shape(), b.shape())
        .ok_or_else(|| broadcast_err(a.shape(), b.shape()))?;
    let shape =
        broadcast_shapes(cond.shape(), &ab).ok_or_else(|| broadcast_err(cond.shape(), &ab))?;
    Ok(dispatch!(dtype, |T| {
        let out = broadcast_zip3(
            cond.slice_of::<bool>(),
            cond.shape(),
            a.slice_of::<T>(),
            a.shape(),
            b.slice_of::<T>(),
            b.shape(),
            &shape,
            |c, x, y| if c { x } else { y },
        );
        Tensor::from_data(shape, out)
    }))
}

/// Converts `x` to `dtype` (see [`Tensor::cast`]); never fails.
pub fn cast(x: &Tensor, dtype: DType) -> Result<Tensor, KernelError> {
    Ok(x.cast(dtype))
}

/// `x` with `value` (converted to `x`'s dtype) where the bool `mask` is true; `mask`
/// and `x` broadcast together.
pub fn masked_fill(x: &Tensor, mask: &Tensor, value: f64) -> Result<Tensor, KernelError> {
    expect_bool("masked_fill", mask)?;
    let shape =
        broadcast_shapes(x.shape(), mask.shape()).ok_or_else(|| KernelError::Broadcast {
            op: "masked_fill",
            lhs: x.shape().to_vec(),
            rhs: mask.shape().to_vec(),
        })?;
    Ok(dispatch!(x.dtype(), |T| {
        let v = T::from_f64(value);
        zip_tensors(x, mask, shape, move |e: T, m: bool| if m { v } else { e })
    }))
}

/// Dropout with probability `p`: the identity when `train` is false.
///
/// Errors when `p` is outside `[0, 1]`, and for training mode with `p > 0`
/// (random dropout is not supported by these reference kernels).
pub fn dropout(x: &Tensor, p: f64, train: bool) -> Result<Tensor, KernelError> {
    if !(0.0..=1.0).contains(&p) {
        return Err(KernelError::invalid(
            "dropout",
            format!("probability {p} is outside [0, 1]"),
        ));
    }
    if train && p > 0.0 {
        return Err(KernelError::Unsupported {
            op: "dropout",
            msg: "training dropout is not supported".into(),
        });
    }
    Ok(x.clone())
}
