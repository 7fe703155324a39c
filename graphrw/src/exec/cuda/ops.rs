//! Runs one built-in op with the CUDA kernels of `graphrw_kernels::cuda`.

use graphrw_kernels::cpu::{BinaryOp, ReduceOp, UnaryOp};
use graphrw_kernels::cuda::{self, CudaTensor, SdpaOptions};
use graphrw_kernels::KernelError;

use super::super::executor::{KernelFailure, NodeView};

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
    let one: Result<CudaTensor, KernelError> = match node.op.name {
        "add" => binary(BinaryOp::Add),
        "sub" => binary(BinaryOp::Sub),
        "mul" => binary(BinaryOp::Mul),
        "div" => binary(BinaryOp::Div),
        "pow" => binary(BinaryOp::Pow),
        "maximum" => binary(BinaryOp::Maximum),
        "minimum" => binary(BinaryOp::Minimum),
        "and" => binary(BinaryOp::And),
        "or" => binary(BinaryOp::Or),
        "eq" => binary(BinaryOp::Eq),
        "ne" => binary(BinaryOp::Ne),
        "lt" => binary(BinaryOp::Lt),
        "le" => binary(BinaryOp::Le),
        "gt" => binary(BinaryOp::Gt),
        "ge" => binary(BinaryOp::Ge),
        "neg" => unary(UnaryOp::Neg),
        "abs" => unary(UnaryOp::Abs),
        "reciprocal" => unary(UnaryOp::Reciprocal),
        "sqrt" => unary(UnaryOp::Sqrt),
        "rsqrt" => unary(UnaryOp::Rsqrt),
        "exp" => unary(UnaryOp::Exp),
        "log" => unary(UnaryOp::Log),
        "sin" => unary(UnaryOp::Sin),
        "cos" => unary(UnaryOp::Cos),
        "erf" => unary(UnaryOp::Erf),
        "tanh" => unary(UnaryOp::Tanh),
        "sigmoid" => unary(UnaryOp::Sigmoid),
        "relu" => unary(UnaryOp::Relu),
        "silu" => unary(UnaryOp::Silu),
        "not" => unary(UnaryOp::Not),
        "isnan" => unary(UnaryOp::IsNan),
        "gelu" => match a.str("approximate").map_err(attr)? {
            "tanh" => unary(UnaryOp::GeluTanh),
            _ => unary(UnaryOp::Gelu),
        },
        "where" => cuda::where_(x[0], x[1], x[2]),
        "cast" => cuda::cast(x[0], a.dtype("dtype").map_err(attr)?),
        "dropout" | "contiguous" => Ok(x[0].clone()),
        "matmul" => cuda::matmul(x[0], x[1]),
        "transpose" => cuda::transpose(x[0], int("dim0")?, int("dim1")?),
        "permute" => cuda::permute(x[0], ints("dims")?),
        "reshape" => Ok(x[0].reshape(reshape_to(x[0].numel(), ints("shape")?)?)?),
        "expand" => cuda::expand(x[0], ints("size")?),
        "unsqueeze" => Ok(unsqueeze(x[0], int("dim")?)?),
        "squeeze" => Ok(squeeze(x[0], ints("dims")?)?),
        "concat" => cuda::concat(x, int("dim")?),
        "split" => return Ok(cuda::split(x[0], ints("split_sizes")?, int("dim")?)?),
        "slice" => cuda::slice(x[0], int("dim")?, int("start")?, int("end")?, int("step")?),
        "gather" => cuda::gather(x[0], x[1], int("dim")?),
        "gather_elements" => cuda::gather_elements(x[0], x[1], int("dim")?),
        "gather_nd" => cuda::gather_nd(x[0], x[1], int("batch_dims")?),
        "index_select" => cuda::index_select(x[0], int("dim")?, x[1]),
        "sum" => return Ok(vec![reduce(ReduceOp::Sum)?]),
        "mean" => return Ok(vec![reduce(ReduceOp::Mean)?]),
        "amax" => return Ok(vec![reduce(ReduceOp::Amax)?]),
        "softmax" => cuda::softmax(x[0], int("dim")?),
        "log_softmax" => cuda::log_softmax(x[0], int("dim")?),
        "layer_norm" => cuda::layer_norm(
            x[0],
            x.get(1).copied(),
            x.get(2).copied(),
            int("axis")?,
            float("eps")?,
        ),
        "rms_norm" => cuda::rms_norm(x[0], x.get(1).copied(), int("axis")?, float("eps")?),
        "scaled_dot_product_attention" => {
            let opts = SdpaOptions {
                is_causal: a.bool("is_causal").map_err(attr)?,
                scale: a.opt_float("scale").map_err(attr)?,
                enable_gqa: a.bool("enable_gqa").map_err(attr)?,
            };
            cuda::sdpa(x[0], x[1], x[2], x.get(3).copied(), &opts)
        }
        other => return Err(format!("the CUDA executor has no kernel for `{other}`").into()),
    };
    Ok(vec![one?])
}
