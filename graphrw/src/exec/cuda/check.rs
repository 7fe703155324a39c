//! The CUDA executor's checker: which nodes it takes, judged from metadata and
//! attributes only (op, dtypes, head dims, flags), with the reason when it does not.

use graphrw_kernels::DType;

use super::super::executor::NodeView;
use super::CUDA_MAX_HEAD_DIM;
use crate::meta::TensorMeta;
use crate::ops::Op;

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
}

fn is_half_or_f32(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

fn need(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

fn operand<'a>(node: &NodeView<'a>, i: usize) -> Result<&'a TensorMeta, String> {
    node.inputs
        .get(i)
        .copied()
        .ok_or_else(|| format!("`{}` needs operand {i}", node.op.name))
}

fn float_input(node: &NodeView<'_>, kinds: &str, ok: fn(DType) -> bool) -> Result<(), String> {
    let d = operand(node, 0)?.dtype;
    need(ok(d), || {
        format!(
            "dtype {d}: the CUDA `{}` kernel takes {kinds}",
            node.op.name
        )
    })
}

fn same_dtypes(node: &NodeView<'_>, from: usize) -> Result<DType, String> {
    let d = operand(node, from)?.dtype;
    for m in &node.inputs[from..] {
        need(m.dtype == d, || {
            format!(
                "operands of dtypes {d} and {} (the CUDA kernels take one)",
                m.dtype
            )
        })?;
    }
    Ok(d)
}

fn index_operand(node: &NodeView<'_>, i: usize) -> Result<(), String> {
    let d = operand(node, i)?.dtype;
    need(matches!(d, DType::I64 | DType::I32), || {
        format!("index dtype {d}: the CUDA gathers take i64 or i32")
    })
}

fn sdpa(node: &NodeView<'_>) -> Result<(), String> {
    need(node.inputs.len() >= 3, || "needs q, k and v".into())?;
    let dtype = node.inputs[0].dtype;
    need(is_half_or_f32(dtype), || {
        format!("dtype {dtype}: the CUDA attention kernel takes f32, f16 or bf16")
    })?;
    if let Some(mask) = node.inputs.get(3) {
        need(
            matches!(
                mask.dtype,
                DType::Bool | DType::F32 | DType::F16 | DType::BF16
            ),
            || format!("mask dtype {} is not bool or float", mask.dtype),
        )?;
    }
    for (what, m) in [("q/k", node.inputs[0]), ("v", node.inputs[2])] {
        match m.shape.dims().last().and_then(|d| d.known()) {
            Some(d) if (1..=CUDA_MAX_HEAD_DIM).contains(&d) => {}
            Some(d) => {
                return Err(format!(
                    "{what} head dim {d} is over the kernel's {CUDA_MAX_HEAD_DIM}"
                ))
            }
            None => return Err(format!("{what} head dim is not known")),
        }
    }
    match node.attrs.float("dropout_p") {
        Ok(0.0) => Ok(()),
        Ok(p) => Err(format!("dropout_p = {p} is not supported")),
        Err(e) => Err(e.0),
    }
}

/// Whether the CUDA kernels take this node (devices are checked by the executor).
pub(super) fn check_op(node: &NodeView<'_>) -> Result<(), String> {
    let name = node.op.name;
    let Some(op) = node.op.builtin else {
        return Err(format!(
            "has no CUDA kernel for `{name}` (not a built-in op)"
        ));
    };
    if let Some(m) = node
        .inputs
        .iter()
        .copied()
        .chain(node.outputs)
        .find(|m| m.dtype.is_narrow_int())
    {
        return Err(format!(
            "dtype {}: the CUDA kernels take no narrow integers (they run on the CPU)",
            m.dtype
        ));
    }
    match op {
        Op::Exp
        | Op::Log
        | Op::Sqrt
        | Op::Rsqrt
        | Op::Reciprocal
        | Op::Sin
        | Op::Cos
        | Op::Erf
        | Op::Tanh
        | Op::Sigmoid
        | Op::Silu => float_input(node, "float dtypes", is_float),
        Op::Gelu => {
            float_input(node, "float dtypes", is_float)?;
            node.attrs.gelu_approximation().map_err(|e| e.0)?;
            Ok(())
        }
        Op::Neg | Op::Abs | Op::Relu => {
            let d = operand(node, 0)?.dtype;
            need(d != DType::Bool, || format!("`{name}` of bool"))
        }
        Op::Not => float_input(node, "bool", |d| d == DType::Bool),
        Op::Isnan
        | Op::Cast
        | Op::Contiguous
        | Op::Permute
        | Op::Transpose
        | Op::Reshape
        | Op::Expand
        | Op::Unsqueeze
        | Op::Squeeze
        | Op::Slice
        | Op::Split => Ok(()),
        Op::Dropout => match node.attrs.bool("train") {
            Ok(false) => Ok(()),
            Ok(true) => Err("training-mode dropout is not supported".into()),
            Err(e) => Err(e.0),
        },
        Op::Concat => same_dtypes(node, 0).map(|_| ()),
        Op::Add | Op::Sub | Op::Mul | Op::Maximum | Op::Minimum => {
            let d = same_dtypes(node, 0)?;
            need(d != DType::Bool, || format!("`{name}` of bool"))
        }
        Op::Div => {
            let d = same_dtypes(node, 0)?;
            need(is_float(d), || {
                format!("integer division ({d}) runs on the CPU (zero divisors are checked there)")
            })
        }
        Op::Pow => {
            let (a, b) = (operand(node, 0)?.dtype, operand(node, 1)?.dtype);
            need(is_float(a) && is_float(b), || {
                format!("pow of {a} by {b}: the CUDA kernel takes floats")
            })
        }
        Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge => same_dtypes(node, 0).map(|_| ()),
        Op::And | Op::Or => {
            let d = same_dtypes(node, 0)?;
            need(d == DType::Bool, || {
                format!("`{name}` of {d} (bool needed)")
            })
        }
        Op::Where => {
            let c = operand(node, 0)?.dtype;
            need(c == DType::Bool, || format!("condition of dtype {c}"))?;
            same_dtypes(node, 1).map(|_| ())
        }
        Op::Matmul => {
            let d = same_dtypes(node, 0)?;
            need(is_float(d), || {
                format!("matmul of {d}: cuBLAS runs float dtypes")
            })
        }
        Op::Softmax | Op::LogSoftmax | Op::Sum | Op::Mean | Op::Amax => {
            float_input(node, "f32, f16 or bf16", is_half_or_f32)
        }
        Op::LayerNorm | Op::RmsNorm => {
            float_input(node, "f32, f16 or bf16", is_half_or_f32)?;
            same_dtypes(node, 0).map(|_| ())
        }
        Op::Gather | Op::GatherElements | Op::GatherNd => index_operand(node, 1),
        Op::IndexSelect => index_operand(node, 1),
        Op::ScaledDotProductAttention => sdpa(node),
        no_cuda_kernel!() => Err(format!("has no CUDA kernel for `{name}`")),
    }
}
