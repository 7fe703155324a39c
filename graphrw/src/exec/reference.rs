//! The reference CPU executor: every built-in op through `graphrw-kernels::cpu`.

use graphrw_kernels::cpu::{self, BinaryOp, ReduceOp, UnaryOp};
use graphrw_kernels::Tensor;

use super::executor::{run_on_host, Executor, KernelFailure, NodeView};
use super::kv_cache::append_to_cache;
use super::value::RunValue;
use crate::meta::Device;
use crate::ops::{InferError, Op};

/// Runs every built-in op on the CPU with the reference kernels.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceCpu;

/// The name the reference executor shows in plans.
pub const REFERENCE_CPU: &str = "cpu-reference";

impl Executor for ReferenceCpu {
    fn name(&self) -> &str {
        REFERENCE_CPU
    }

    fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        let Some(op) = node.op.builtin else {
            return Err(format!("`{}` is not a built-in op", node.op.name));
        };
        if let Some(m) = node.inputs.iter().find(|m| m.device != Device::Cpu) {
            return Err(format!("operand on {}, not the CPU", m.device));
        }
        check_narrow(op, node)?;
        match op {
            Op::Opaque => {
                let op_type = node.attrs.str("op_type").unwrap_or("?");
                Err(format!(
                    "no kernel for ONNX op `{op_type}`{}: graphrw carries it as an opaque node",
                    match node.attrs.str("domain") {
                        Ok(d) if !d.is_empty() => format!(" (domain `{d}`)"),
                        _ => String::new(),
                    }
                ))
            }
            Op::ScaledDotProductAttention => Err("runs attention through its decomposition".into()),
            Op::ScaledDotProductAttentionBackward | Op::CrossEntropy | Op::CrossEntropyBackward => {
                Err(format!("runs `{op}` through its decomposition"))
            }
            Op::Dropout if node.attrs.bool("train").unwrap_or(false) => {
                Err("training-mode dropout is not supported".into())
            }
            _ => Ok(()),
        }
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        check_outputs(node)?;
        run_builtin(node, x)
    }

    /// As [`Executor::run`], but a `concat` onto a [`KvCache`](super::KvCache) appends
    /// to it in place.
    fn run_values(
        &self,
        node: &NodeView<'_>,
        inputs: &[&RunValue],
    ) -> Result<Vec<RunValue>, KernelFailure> {
        if node.op.builtin == Some(Op::Concat) {
            let dim = node.attrs.int("dim").map_err(attr_err)?;
            if let Some(appended) = append_to_cache(inputs, dim) {
                return Ok(vec![appended?]);
            }
        }
        run_on_host(self, node, inputs)
    }
}

/// Whether the reference kernels take the narrow integers (`u8`, `i8`, `i16`, `u16`,
/// `u32`, `u64`) for `op`: moving and selecting elements, comparisons, `cast`, and the
/// wrapping integer arithmetic (`add`, `sub`, `mul`, `div`, `maximum`, `minimum`,
/// `neg`, `abs`, `relu`, `sum`, `mean`, `amax`).
fn takes_narrow(op: Op) -> bool {
    matches!(
        op,
        Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Maximum
            | Op::Minimum
            | Op::Eq
            | Op::Ne
            | Op::Lt
            | Op::Le
            | Op::Gt
            | Op::Ge
            | Op::Neg
            | Op::Abs
            | Op::Relu
            | Op::Isnan
            | Op::Where
            | Op::Cast
            | Op::MaskedFill
            | Op::Dropout
            | Op::Contiguous
            | Op::Transpose
            | Op::Permute
            | Op::Reshape
            | Op::Expand
            | Op::Unsqueeze
            | Op::Squeeze
            | Op::Concat
            | Op::Split
            | Op::Slice
            | Op::Tril
            | Op::Triu
            | Op::Gather
            | Op::GatherElements
            | Op::GatherNd
            | Op::IndexSelect
            | Op::Sum
            | Op::Mean
            | Op::Amax
            | Op::Full
            | Op::Zeros
            | Op::Ones
            | Op::Input
            | Op::Constant
    )
}

/// Refuses, at plan time, a node with a narrow integer operand or output that its
/// reference kernel does not take (see [`takes_narrow`]).
fn check_narrow(op: Op, node: &NodeView<'_>) -> Result<(), String> {
    if takes_narrow(op) {
        return Ok(());
    }
    match node
        .inputs
        .iter()
        .copied()
        .chain(node.outputs)
        .find(|m| m.dtype.is_narrow_int())
    {
        Some(m) => Err(format!(
            "`{}` has no kernel for {} (the narrow integers are moved, compared, cast and \
             added; cast to i32, i64 or a float first)",
            node.op.name, m.dtype
        )),
        None => Ok(()),
    }
}

/// Refuses a node whose outputs of known size are past the run budget
/// ([`graphrw_kernels::budget`]) before any kernel allocates them. (Sizes known only at
/// run time are checked by the kernels that make tensors from attributes or values.)
fn check_outputs(node: &NodeView<'_>) -> Result<(), KernelFailure> {
    for m in node.outputs {
        let Some(dims) = m.shape.as_known() else {
            continue;
        };
        let Ok(dims) = dims
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<_>, _>>()
        else {
            continue;
        };
        graphrw_kernels::budget::check_alloc(node.op.name, &dims, m.dtype)?;
    }
    Ok(())
}

fn attr_err(e: InferError) -> KernelFailure {
    e.0.into()
}

fn two(v: &[i64], what: &str) -> Result<[i64; 2], KernelFailure> {
    match v {
        [a, b] => Ok([*a, *b]),
        _ => Err(format!("{what} needs two entries, found {v:?}").into()),
    }
}

fn run_builtin(node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
    let a = &node.attrs;
    let int = |n: &str| a.int(n).map_err(attr_err);
    let ints = |n: &str| a.ints(n).map_err(attr_err);
    let float = |n: &str| a.float(n).map_err(attr_err);
    let Some(op) = node.op.builtin else {
        return Err(format!("`{}` is not a built-in op", node.op.name).into());
    };
    let binary = |op: BinaryOp| cpu::binary(op, x[0], x[1]);
    let unary = |op: UnaryOp| cpu::unary(op, x[0]);
    let reduce = |op: ReduceOp| -> Result<Tensor, KernelFailure> {
        Ok(cpu::reduce(
            op,
            x[0],
            ints("dims")?,
            a.bool("keepdim").map_err(attr_err)?,
        )?)
    };
    let one = match op {
        Op::Add => binary(BinaryOp::Add)?,
        Op::Sub => binary(BinaryOp::Sub)?,
        Op::Mul => binary(BinaryOp::Mul)?,
        Op::Div => binary(BinaryOp::Div)?,
        Op::Pow => binary(BinaryOp::Pow)?,
        Op::Maximum => binary(BinaryOp::Maximum)?,
        Op::Minimum => binary(BinaryOp::Minimum)?,
        Op::And => binary(BinaryOp::And)?,
        Op::Or => binary(BinaryOp::Or)?,
        Op::Eq => binary(BinaryOp::Eq)?,
        Op::Ne => binary(BinaryOp::Ne)?,
        Op::Lt => binary(BinaryOp::Lt)?,
        Op::Le => binary(BinaryOp::Le)?,
        Op::Gt => binary(BinaryOp::Gt)?,
        Op::Ge => binary(BinaryOp::Ge)?,
        Op::Neg => unary(UnaryOp::Neg)?,
        Op::Abs => unary(UnaryOp::Abs)?,
        Op::Reciprocal => unary(UnaryOp::Reciprocal)?,
        Op::Sqrt => unary(UnaryOp::Sqrt)?,
        Op::Rsqrt => unary(UnaryOp::Rsqrt)?,
        Op::Exp => unary(UnaryOp::Exp)?,
        Op::Log => unary(UnaryOp::Log)?,
        Op::Sin => unary(UnaryOp::Sin)?,
        Op::Cos => unary(UnaryOp::Cos)?,
        Op::Erf => unary(UnaryOp::Erf)?,
        Op::Tanh => unary(UnaryOp::Tanh)?,
        Op::Sigmoid => unary(UnaryOp::Sigmoid)?,
        Op::Relu => unary(UnaryOp::Relu)?,
        Op::Silu => unary(UnaryOp::Silu)?,
        Op::Not => unary(UnaryOp::Not)?,
        Op::Isnan => unary(UnaryOp::IsNan)?,
        Op::Gelu => unary(a.gelu_approximation().map_err(attr_err)?.unary())?,
        Op::Where => cpu::where_(x[0], x[1], x[2])?,
        Op::Cast => cpu::cast(x[0], a.dtype("dtype").map_err(attr_err)?)?,
        Op::MaskedFill => cpu::masked_fill(x[0], x[1], float("value")?)?,
        Op::Dropout => cpu::dropout(x[0], float("p")?, a.bool("train").map_err(attr_err)?)?,
        Op::Contiguous => cpu::contiguous(x[0])?,
        Op::Matmul => cpu::matmul(x[0], x[1])?,
        Op::Conv2d => cpu::conv2d(
            x[0],
            x[1],
            x.get(2).copied(),
            two(ints("stride")?, "stride")?,
            two(ints("padding")?, "padding")?,
            two(ints("dilation")?, "dilation")?,
            int("groups")?,
        )?,
        Op::Transpose => cpu::transpose(x[0], int("dim0")?, int("dim1")?)?,
        Op::Permute => cpu::permute(x[0], ints("dims")?)?,
        Op::Reshape => cpu::reshape(x[0], ints("shape")?)?,
        Op::Expand => cpu::expand(x[0], ints("size")?)?,
        Op::Unsqueeze => cpu::unsqueeze(x[0], int("dim")?)?,
        Op::Squeeze => cpu::squeeze(x[0], ints("dims")?)?,
        Op::Concat => cpu::concat(x, int("dim")?)?,
        Op::Split => return Ok(cpu::split(x[0], ints("split_sizes")?, int("dim")?)?),
        Op::Slice => cpu::slice(x[0], int("dim")?, int("start")?, int("end")?, int("step")?)?,
        Op::Tril => cpu::tril(x[0], int("diagonal")?)?,
        Op::Triu => cpu::triu(x[0], int("diagonal")?)?,
        Op::Gather => cpu::gather(x[0], x[1], int("dim")?)?,
        Op::GatherElements => cpu::gather_elements(x[0], x[1], int("dim")?)?,
        Op::GatherNd => cpu::gather_nd(x[0], x[1], int("batch_dims")?)?,
        Op::IndexSelect => cpu::index_select(x[0], int("dim")?, x[1])?,
        Op::Cumsum => cpu::cumsum(x[0], int("dim")?)?,
        Op::Sum => reduce(ReduceOp::Sum)?,
        Op::Mean => reduce(ReduceOp::Mean)?,
        Op::Amax => reduce(ReduceOp::Amax)?,
        Op::Softmax => cpu::softmax(x[0], int("dim")?)?,
        Op::LogSoftmax => cpu::log_softmax(x[0], int("dim")?)?,
        Op::LayerNorm => cpu::layer_norm(
            x[0],
            x.get(1).copied(),
            x.get(2).copied(),
            int("axis")?,
            float("eps")?,
        )?,
        Op::RmsNorm => cpu::rms_norm(x[0], x.get(1).copied(), int("axis")?, float("eps")?)?,
        Op::Arange => cpu::arange(
            float("start")?,
            float("end")?,
            float("step")?,
            a.dtype("dtype").map_err(attr_err)?,
        )?,
        Op::Full => cpu::full(
            ints("size")?,
            float("value")?,
            a.dtype("dtype").map_err(attr_err)?,
        )?,
        Op::SymInts => {
            let v = ints("values")?.to_vec();
            let shape = if a.bool("scalar").map_err(attr_err)? {
                vec![]
            } else {
                vec![v.len()]
            };
            Tensor::from_vec(shape, v)?
        }
        Op::Zeros => cpu::full(ints("size")?, 0.0, a.dtype("dtype").map_err(attr_err)?)?,
        Op::Ones => cpu::full(ints("size")?, 1.0, a.dtype("dtype").map_err(attr_err)?)?,
        Op::Input
        | Op::Constant
        | Op::Opaque
        | Op::ScaledDotProductAttention
        | Op::ScaledDotProductAttentionBackward
        | Op::CrossEntropy
        | Op::CrossEntropyBackward => {
            return Err(format!("the reference executor has no kernel for `{op}`").into())
        }
    };
    Ok(vec![one])
}
