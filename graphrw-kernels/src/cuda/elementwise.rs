//! Elementwise ops on the GPU: unary and binary ops with numpy broadcasting, `where`
//! and dtype casts, all through the `ew` kernel of `elementwise.cu` (one build per op,
//! dtypes and arity, cached).
//!
//! Semantics follow the CPU kernels of [`crate::cpu`]: f16/bf16 compute in f32, integer
//! arithmetic in i64; integer `div` and `pow` are not offered here (the CPU kernels
//! check for zero divisors and negative exponents).

use cudarc::driver::PushKernelArg;

use super::launch::{acc_id, dtype_id, flat, Layout};
use super::{kernels, CudaTensor};
use crate::broadcast::{broadcast_shapes, broadcast_strides, contiguous_strides};
use crate::cpu::{BinaryOp, UnaryOp};
use crate::{DType, KernelError};

fn unary_code(op: UnaryOp) -> u8 {
    match op {
        UnaryOp::Neg => 1,
        UnaryOp::Abs => 2,
        UnaryOp::Reciprocal => 3,
        UnaryOp::Sqrt => 4,
        UnaryOp::Rsqrt => 5,
        UnaryOp::Exp => 6,
        UnaryOp::Log => 7,
        UnaryOp::Sin => 8,
        UnaryOp::Cos => 9,
        UnaryOp::Erf => 10,
        UnaryOp::Tanh => 11,
        UnaryOp::Sigmoid => 12,
        UnaryOp::Relu => 13,
        UnaryOp::Gelu => 14,
        UnaryOp::GeluTanh => 15,
        UnaryOp::Silu => 16,
        UnaryOp::Not => 17,
        UnaryOp::IsNan => 18,
    }
}

fn binary_code(op: BinaryOp) -> u8 {
    match op {
        BinaryOp::Add => 20,
        BinaryOp::Sub => 21,
        BinaryOp::Mul => 22,
        BinaryOp::Div => 23,
        BinaryOp::Pow => 24,
        BinaryOp::Maximum => 25,
        BinaryOp::Minimum => 26,
        BinaryOp::And => 27,
        BinaryOp::Or => 28,
        BinaryOp::Eq => 29,
        BinaryOp::Ne => 30,
        BinaryOp::Lt => 31,
        BinaryOp::Le => 32,
        BinaryOp::Gt => 33,
        BinaryOp::Ge => 34,
    }
}

fn same_device(op: &'static str, ts: &[&CudaTensor]) -> Result<(), KernelError> {
    let first = ts[0].device().ordinal();
    if ts.iter().any(|t| t.device().ordinal() != first) {
        return Err(KernelError::invalid(op, "operands on different devices"));
    }
    Ok(())
}

/// Runs `ew` with operator `code` on `inputs` broadcast to `shape`, computing in the
/// arithmetic type of `acc`, into a new tensor of `out_dtype`.
fn launch_ew(
    op: &'static str,
    code: u8,
    inputs: &[&CudaTensor],
    shape: Vec<usize>,
    acc: DType,
    out_dtype: DType,
) -> Result<CudaTensor, KernelError> {
    same_device(op, inputs)?;
    let dev = inputs[0].device().clone();
    let out = dev.zeros(out_dtype, &shape)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let out_st = contiguous_strides(&shape);
    let st: Vec<Vec<usize>> = inputs
        .iter()
        .map(|t| broadcast_strides(t.shape(), &shape))
        .collect();
    let layout = match st.len() {
        1 => Layout::new(op, &shape, [&out_st, &st[0]], [0; 2])?,
        2 => Layout::new(op, &shape, [&out_st, &st[0], &st[1]], [0; 3])?,
        _ => Layout::new(op, &shape, [&out_st, &st[0], &st[1], &st[2]], [0; 4])?,
    };
    let id = |i: usize| dtype_id(inputs[i.min(inputs.len() - 1)].dtype()).map(|d| d.to_string());
    let defines: Vec<(&str, String)> = vec![
        ("NIN", inputs.len().to_string()),
        ("OP", code.to_string()),
        ("DT_O", dtype_id(out_dtype)?.to_string()),
        ("DT_A", id(0)?),
        ("DT_B", id(1)?),
        ("DT_C", id(2)?),
        ("ACC", acc_id(acc)?.to_string()),
    ];
    let f = dev.function("elementwise.cu", kernels::ELEMENTWISE, &defines, "ew")?;
    let ov = out.view();
    let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
    let (a, b, c) = (
        &views[0],
        &views[1.min(views.len() - 1)],
        &views[views.len() - 1],
    );
    let stream = dev.stream().clone();
    let mut args = stream.launch_builder(&f);
    args.arg(&ov).arg(a).arg(b).arg(c).arg(&layout);
    // SAFETY: `ew(void*, const void*, const void*, const void*, Layout)` takes these
    // arguments in this order; the layout walks `shape` with the output's contiguous
    // strides and each input's broadcast strides, so every offset is inside its buffer
    // (of the dtype named by DT_*); unused inputs repeat a valid pointer and are not read.
    unsafe { args.launch(flat(layout.numel())) }.map_err(|e| super::cuda_err(op, e))?;
    Ok(out)
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
}

/// A unary op (floats for the math functions; `neg`, `abs`, `relu` also on integers;
/// `not` on bool; `isnan` on anything, giving bool).
pub fn unary(op: UnaryOp, x: &CudaTensor) -> Result<CudaTensor, KernelError> {
    let name = op.name();
    let d = x.dtype();
    let out = match op {
        UnaryOp::IsNan => DType::Bool,
        _ => d,
    };
    let ok = match op {
        UnaryOp::IsNan => true,
        UnaryOp::Not => d == DType::Bool,
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => d != DType::Bool,
        _ => is_float(d),
    };
    if !ok {
        return Err(KernelError::UnsupportedDType {
            op: name,
            dtype: d,
            expected: match op {
                UnaryOp::Not => "bool",
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => "a float or integer dtype",
                _ => "a float dtype",
            },
        });
    }
    launch_ew(name, unary_code(op), &[x], x.shape().to_vec(), d, out)
}

/// A binary op with numpy broadcasting: same dtypes (except `pow`, whose exponent may
/// have any float dtype and whose result has `a`'s dtype); comparisons give bool;
/// `and`/`or` need bool; arithmetic on integers only for add, sub, mul, max, min.
pub fn binary(op: BinaryOp, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor, KernelError> {
    let name = op.name();
    let shape = broadcast_shapes(a.shape(), b.shape()).ok_or_else(|| KernelError::Broadcast {
        op: name,
        lhs: a.shape().to_vec(),
        rhs: b.shape().to_vec(),
    })?;
    let (da, db) = (a.dtype(), b.dtype());
    if op == BinaryOp::Pow {
        if !is_float(da) || !is_float(db) {
            return Err(KernelError::UnsupportedDType {
                op: name,
                dtype: if is_float(da) { db } else { da },
                expected: "float base and exponent (integer pow runs on the CPU)",
            });
        }
        return launch_ew(name, binary_code(op), &[a, b], shape, da, da);
    }
    if da != db {
        return Err(KernelError::DTypeMismatch {
            op: name,
            lhs: da,
            rhs: db,
        });
    }
    let out = match op {
        BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            DType::Bool
        }
        BinaryOp::And | BinaryOp::Or => {
            if da != DType::Bool {
                return Err(KernelError::UnsupportedDType {
                    op: name,
                    dtype: da,
                    expected: "bool",
                });
            }
            DType::Bool
        }
        BinaryOp::Div if !is_float(da) => {
            return Err(KernelError::UnsupportedDType {
                op: name,
                dtype: da,
                expected: "a float dtype (integer division runs on the CPU)",
            })
        }
        _ if da == DType::Bool => {
            return Err(KernelError::UnsupportedDType {
                op: name,
                dtype: da,
                expected: "a float or integer dtype",
            })
        }
        _ => da,
    };
    launch_ew(name, binary_code(op), &[a, b], shape, da, out)
}

/// `where(cond, a, b)` with broadcasting: `cond` bool, `a` and `b` of one dtype.
pub fn where_(
    cond: &CudaTensor,
    a: &CudaTensor,
    b: &CudaTensor,
) -> Result<CudaTensor, KernelError> {
    let op = "where";
    if cond.dtype() != DType::Bool {
        return Err(KernelError::UnsupportedDType {
            op,
            dtype: cond.dtype(),
            expected: "a bool condition",
        });
    }
    if a.dtype() != b.dtype() {
        return Err(KernelError::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    let bad = || KernelError::Broadcast {
        op,
        lhs: cond.shape().to_vec(),
        rhs: a.shape().to_vec(),
    };
    let s = broadcast_shapes(cond.shape(), a.shape()).ok_or_else(bad)?;
    let shape = broadcast_shapes(&s, b.shape()).ok_or_else(bad)?;
    launch_ew(op, 40, &[cond, a, b], shape, a.dtype(), a.dtype())
}

/// Converts to `dtype` (floats to integers truncate and saturate, NaN gives 0; to bool:
/// nonzero is true).
pub fn cast(x: &CudaTensor, dtype: DType) -> Result<CudaTensor, KernelError> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    // Arithmetic in the wider of the two kinds, so i64 <-> f64 and i64 -> i32 are exact
    // where they can be.
    let acc = match (x.dtype(), dtype) {
        (DType::F64, _) | (_, DType::F64) => DType::F64,
        (s, _) if is_float(s) => DType::F32,
        (_, t) if is_float(t) => DType::F64,
        _ => DType::I64,
    };
    launch_ew("cast", 0, &[x], x.shape().to_vec(), acc, dtype)
}
