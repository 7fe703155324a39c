//! Runs one built-in op with the CUDA kernels of `graphrw_kernels::cuda`.

use graphrw_kernels::cpu::{BinaryOp, ReduceOp, UnaryOp};
use graphrw_kernels::cuda::{self, CudaTensor, SdpaOptions};
use graphrw_kernels::KernelError;

use super::super::executor::{KernelFailure, NodeView};
use crate::ops::Op;

fn attr(e: crate::ops::InferError) -> KernelFailure {
    e.0.into()
}

/// The shape `reshape(shape)` gives a tensor of `numel` elements (one `-1` inferred).
fn reshape_to(numel: usize, shape: &[i64]) -> Result<Vec<usize>, KernelFailure> {
    let bad =
        || -> KernelFailure { format!("cannot reshape {numel} elements into {shape:?}").into() };
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => infer = Some(i),
            d if d >= 0 => known = known.checked_mul(d as usize).ok_or_else(bad)?,
            _ => return Err(bad()),
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    match infer {
        Some(i) if known > 0 && numel.is_multiple_of(known) => out[i] = numel / known,
        Some(_) => return Err(bad()),
        None if known != numel => return Err(bad()),
        None => {}
    }
    Ok(out)
}

fn norm_dim(dim: i64, rank: usize) -> Result<usize, KernelFailure> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(format!("dim {dim} is out of range for rank {rank}").into());
    }
    Ok(d as usize)
}

fn unsqueeze(x: &CudaTensor, dim: i64) -> Result<CudaTensor, KernelFailure> {
    let d = norm_dim(dim, x.rank() + 1)?;
    let mut shape = x.shape().to_vec();
    shape.insert(d, 1);
    Ok(x.reshape(shape)?)
}

fn squeeze(x: &CudaTensor, dims: &[i64]) -> Result<CudaTensor, KernelFailure> {
    let listed = dims
        .iter()
        .map(|&d| norm_dim(d, x.rank()))
        .collect::<Result<Vec<_>, _>>()?;
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .filter(|&(i, &s)| !(s == 1 && (dims.is_empty() || listed.contains(&i))))
        .map(|(_, &s)| s)
        .collect();
    Ok(x.reshape(shape)?)
}

/// Runs `node` on device operands `x`.
pub(super) fn run_op(
    node: &NodeView<'_>,
    x: &[&CudaTensor],
) -> Result<Vec<CudaTensor>, KernelFailure> {
    let a = &node.attrs;
    let int = |n: &str| a.int(n).map_err(attr);
    let ints = |n: &str| a.ints(n).map_err(attr);
    let float = |n: &str| a.float(n).map_err(attr);
    let unary = |op: UnaryOp| cuda::unary(op, x[0]);
    let binary = |op: BinaryOp| cuda::binary(op, x[0], x[1]);
    let reduce = |op: ReduceOp| -> Result<CudaTensor, KernelFailure> {
        Ok(cuda::reduce(
            op,
            x[0],
            ints("dims")?,
            a.bool("keepdim").map_err(attr)?,
        )?)
    };
    let Some(op) = node.op.builtin else {
        return Err(format!("the CUDA executor has no kernel for `{}`", node.op.name).into());
    };
    let one: Result<CudaTensor, KernelError> = match op {
        Op::Add => binary(BinaryOp::Add),
        Op::Sub => binary(BinaryOp::Sub),
        Op::Mul => binary(BinaryOp::Mul),
        Op::Div => binary(BinaryOp::Div),
        Op::Pow => binary(BinaryOp::Pow),
        Op::Maximum => binary(BinaryOp::Maximum),
        Op::Minimum => binary(BinaryOp::Minimum),
        Op::And => binary(BinaryOp::And),
        Op::Or => binary(BinaryOp::Or),
        Op::Eq => binary(BinaryOp::Eq),
        Op::Ne => binary(BinaryOp::Ne),
        Op::Lt => binary(BinaryOp::Lt),
        Op::Le => binary(BinaryOp::Le),
        Op::Gt => binary(BinaryOp::Gt),
        Op::Ge => binary(BinaryOp::Ge),
        Op::Neg => unary(UnaryOp::Neg),
        Op::Abs => unary(UnaryOp::Abs),
        Op::Reciprocal => unary(UnaryOp::Reciprocal),
        Op::Sqrt => unary(UnaryOp::Sqrt),
        Op::Rsqrt => unary(UnaryOp::Rsqrt),
        Op::Exp => unary(UnaryOp::Exp),
        Op::Log => unary(UnaryOp::Log),
        Op::Sin => unary(UnaryOp::Sin),
        Op::Cos => unary(UnaryOp::Cos),
        Op::Erf => unary(UnaryOp::Erf),
        Op::Tanh => unary(UnaryOp::Tanh),
        Op::Sigmoid => unary(UnaryOp::Sigmoid),
        Op::Relu => unary(UnaryOp::Relu),
        Op::Silu => unary(UnaryOp::Silu),
        Op::Not => unary(UnaryOp::Not),
        Op::Isnan => unary(UnaryOp::IsNan),
        Op::Gelu => unary(a.gelu_approximation().map_err(attr)?.unary()),
        Op::Where => cuda::where_(x[0], x[1], x[2]),
        Op::Cast => cuda::cast(x[0], a.dtype("dtype").map_err(attr)?),
        Op::Dropout | Op::Contiguous => Ok(x[0].clone()),
        Op::Matmul => cuda::matmul(x[0], x[1]),
        Op::Transpose => cuda::transpose(x[0], int("dim0")?, int("dim1")?),
        Op::Permute => cuda::permute(x[0], ints("dims")?),
        Op::Reshape => Ok(x[0].reshape(reshape_to(x[0].numel(), ints("shape")?)?)?),
        Op::Expand => cuda::expand(x[0], ints("size")?),
        Op::Unsqueeze => Ok(unsqueeze(x[0], int("dim")?)?),
        Op::Squeeze => Ok(squeeze(x[0], ints("dims")?)?),
        Op::Concat => cuda::concat(x, int("dim")?),
        Op::Split => return Ok(cuda::split(x[0], ints("split_sizes")?, int("dim")?)?),
        Op::Slice => cuda::slice(x[0], int("dim")?, int("start")?, int("end")?, int("step")?),
        Op::Gather => cuda::gather(x[0], x[1], int("dim")?),
        Op::GatherElements => cuda::gather_elements(x[0], x[1], int("dim")?),
        Op::GatherNd => cuda::gather_nd(x[0], x[1], int("batch_dims")?),
        Op::IndexSelect => cuda::index_select(x[0], int("dim")?, x[1]),
        Op::Sum => return Ok(vec![reduce(ReduceOp::Sum)?]),
        Op::Mean => return Ok(vec![reduce(ReduceOp::Mean)?]),
        Op::Amax => return Ok(vec![reduce(ReduceOp::Amax)?]),
        Op::Softmax => cuda::softmax(x[0], int("dim")?),
        Op::LogSoftmax => cuda::log_softmax(x[0], int("dim")?),
        Op::LayerNorm => cuda::layer_norm(
            x[0],
            x.get(1).copied(),
            x.get(2).copied(),
            int("axis")?,
            float("eps")?,
        ),
        Op::RmsNorm => cuda::rms_norm(x[0], x.get(1).copied(), int("axis")?, float("eps")?),
        Op::ScaledDotProductAttention => {
            let opts = SdpaOptions {
                is_causal: a.bool("is_causal").map_err(attr)?,
                scale: a.opt_float("scale").map_err(attr)?,
                enable_gqa: a.bool("enable_gqa").map_err(attr)?,
            };
            cuda::sdpa(x[0], x[1], x[2], x.get(3).copied(), &opts)
        }
        no_cuda_kernel!() => {
            return Err(format!("the CUDA executor has no kernel for `{op}`").into())
        }
    };
    Ok(vec![one?])
}
