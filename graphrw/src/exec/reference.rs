//! The reference CPU executor: every built-in op through `graphrw-kernels::cpu`.

use graphrw_kernels::cpu::{self, BinaryOp, ReduceOp, UnaryOp};
use graphrw_kernels::Tensor;

use super::executor::{Executor, KernelFailure, NodeView};
use crate::meta::Device;
use crate::ops::{self, InferError};

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
        if ops::lookup(node.op.name) != Some(node.op) {
            return Err(format!("`{}` is not a built-in op", node.op.name));
        }
        if let Some(m) = node.inputs.iter().find(|m| m.device != Device::Cpu) {
            return Err(format!("operand on {}, not the CPU", m.device));
        }
        if node.op.name == "opaque" {
            let op_type = node.attrs.str("op_type").unwrap_or("?");
            return Err(format!(
                "no kernel for ONNX op `{op_type}`{}: graphrw carries it as an opaque node",
                match node.attrs.str("domain") {
                    Ok(d) if !d.is_empty() => format!(" (domain `{d}`)"),
                    _ => String::new(),
                }
            ));
        }
        if node.op.name == "scaled_dot_product_attention" {
            return Err("runs attention through its decomposition".into());
        }
        if matches!(
            node.op.name,
            "scaled_dot_product_attention_backward" | "cross_entropy" | "cross_entropy_backward"
        ) {
            return Err(format!("runs `{}` through its decomposition", node.op.name));
        }
        if node.op.name == "dropout" && node.attrs.bool("train").unwrap_or(false) {
            return Err("training-mode dropout is not supported".into());
        }
        Ok(())
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        check_outputs(node)?;
        run_builtin(node, x)
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
    let name = node.op.name;
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
    // Every op of the one list of unary ops (`graphrw-ops`, `UnaryOp`) but
    // `gelu`, whose two forms share the name and differ by an attribute (below).
    if let Some(op) = UnaryOp::of_op(name).filter(|_| name != "gelu") {
        return Ok(vec![unary(op)?]);
    }
    let one = match name {
        "add" => binary(BinaryOp::Add)?,
        "sub" => binary(BinaryOp::Sub)?,
        "mul" => binary(BinaryOp::Mul)?,
        "div" => binary(BinaryOp::Div)?,
        "pow" => binary(BinaryOp::Pow)?,
        "maximum" => binary(BinaryOp::Maximum)?,
        "minimum" => binary(BinaryOp::Minimum)?,
        "and" => binary(BinaryOp::And)?,
        "or" => binary(BinaryOp::Or)?,
        "eq" => binary(BinaryOp::Eq)?,
        "ne" => binary(BinaryOp::Ne)?,
        "lt" => binary(BinaryOp::Lt)?,
        "le" => binary(BinaryOp::Le)?,
        "gt" => binary(BinaryOp::Gt)?,
        "ge" => binary(BinaryOp::Ge)?,
        "gelu" => match a.str("approximate").map_err(attr_err)? {
            "none" => unary(UnaryOp::Gelu)?,
            "tanh" => unary(UnaryOp::GeluTanh)?,
            other => return Err(format!("gelu: unknown approximation {other:?}").into()),
        },
        "where" => cpu::where_(x[0], x[1], x[2])?,
        "cast" => cpu::cast(x[0], a.dtype("dtype").map_err(attr_err)?)?,
        "masked_fill" => cpu::masked_fill(x[0], x[1], float("value")?)?,
        "dropout" => cpu::dropout(x[0], float("p")?, a.bool("train").map_err(attr_err)?)?,
        "contiguous" => cpu::contiguous(x[0])?,
        "matmul" => cpu::matmul(x[0], x[1])?,
        "conv2d" => cpu::conv2d(
            x[0],
            x[1],
            x.get(2).copied(),
            two(ints("stride")?, "stride")?,
            two(ints("padding")?, "padding")?,
            two(ints("dilation")?, "dilation")?,
            int("groups")?,
        )?,
        "transpose" => cpu::transpose(x[0], int("dim0")?, int("dim1")?)?,
        "permute" => cpu::permute(x[0], ints("dims")?)?,
        "reshape" => cpu::reshape(x[0], ints("shape")?)?,
        "expand" => cpu::expand(x[0], ints("size")?)?,
        "unsqueeze" => cpu::unsqueeze(x[0], int("dim")?)?,
        "squeeze" => cpu::squeeze(x[0], ints("dims")?)?,
        "concat" => cpu::concat(x, int("dim")?)?,
        "split" => return Ok(cpu::split(x[0], ints("split_sizes")?, int("dim")?)?),
        "slice" => cpu::slice(x[0], int("dim")?, int("start")?, int("end")?, int("step")?)?,
        "tril" => cpu::tril(x[0], int("diagonal")?)?,
        "triu" => cpu::triu(x[0], int("diagonal")?)?,
        "gather" => cpu::gather(x[0], x[1], int("dim")?)?,
        "gather_elements" => cpu::gather_elements(x[0], x[1], int("dim")?)?,
        "gather_nd" => cpu::gather_nd(x[0], x[1], int("batch_dims")?)?,
        "index_select" => cpu::index_select(x[0], int("dim")?, x[1])?,
        "cumsum" => cpu::cumsum(x[0], int("dim")?)?,
        "sum" => reduce(ReduceOp::Sum)?,
        "mean" => reduce(ReduceOp::Mean)?,
        "amax" => reduce(ReduceOp::Amax)?,
        "softmax" => cpu::softmax(x[0], int("dim")?)?,
        "log_softmax" => cpu::log_softmax(x[0], int("dim")?)?,
        "layer_norm" => cpu::layer_norm(
            x[0],
            x.get(1).copied(),
            x.get(2).copied(),
            int("axis")?,
            float("eps")?,
        )?,
        "rms_norm" => cpu::rms_norm(x[0], x.get(1).copied(), int("axis")?, float("eps")?)?,
        "arange" => cpu::arange(
            float("start")?,
            float("end")?,
            float("step")?,
            a.dtype("dtype").map_err(attr_err)?,
        )?,
        "full" => cpu::full(
            ints("size")?,
            float("value")?,
            a.dtype("dtype").map_err(attr_err)?,
        )?,
        "sym_ints" => {
            let v = ints("values")?.to_vec();
            let shape = if a.bool("scalar").map_err(attr_err)? {
                vec![]
            } else {
                vec![v.len()]
            };
            Tensor::from_vec(shape, v)?
        }
        "zeros" => cpu::full(ints("size")?, 0.0, a.dtype("dtype").map_err(attr_err)?)?,
        "ones" => cpu::full(ints("size")?, 1.0, a.dtype("dtype").map_err(attr_err)?)?,
        other => return Err(format!("the reference executor has no kernel for `{other}`").into()),
    };
    Ok(vec![one])
}
