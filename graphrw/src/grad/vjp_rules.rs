//! The vjp rules of the built-in ops.
//!
//! Each rule builds the gradients of its node's operands from the output cotangents
//! with ordinary builder calls. Gradients may keep a broadcast shape: the transform
//! sums them back to the operand's shape. Ops not listed are differentiated through
//! their decomposition (`layer_norm`, `rms_norm`) or are not differentiable along
//! their outputs (comparisons, logic, `isnan`, sources); `conv2d` and `gather_nd` have
//! no rule yet and are a clear error.

use std::f64::consts::PI;

use super::{GradError, VjpContext, VjpFn, VjpResult};
use crate::builder::{Builder, Var};
use crate::meta::{normalize_axis, DType};
use crate::ops::builtin as op;
use crate::ops::{AttrValue, GeluApproximation, Op};
use crate::Tensor;
use graphrw_ops::vocab::Grad;

/// The vjp rule of built-in op `op`: `Some` exactly for the ops whose `grad` column in
/// the op table is [`Grad::Rule`]; `None` for those
/// differentiated through their decomposition, with no gradient along their outputs,
/// or with no rule yet.
pub fn builtin_rule(op: Op) -> Option<VjpFn> {
    if op.grad() != Grad::Rule {
        return None;
    }
    let rule: VjpFn = match op {
        Op::Add => add,
        Op::Sub => sub,
        Op::Mul => mul,
        Op::Div => div,
        Op::Pow => pow,
        Op::Maximum => maximum,
        Op::Minimum => minimum,
        Op::Neg => neg,
        Op::Abs => abs,
        Op::Reciprocal => reciprocal,
        Op::Sqrt => sqrt,
        Op::Rsqrt => rsqrt,
        Op::Exp => exp,
        Op::Log => log,
        Op::Sin => sin,
        Op::Cos => cos,
        Op::Erf => erf,
        Op::Tanh => tanh,
        Op::Sigmoid => sigmoid,
        Op::Relu => relu,
        Op::Gelu => gelu,
        Op::Silu => silu,
        Op::Where => where_,
        Op::Cast => cast,
        Op::MaskedFill => masked_fill,
        Op::Dropout => dropout,
        Op::Contiguous => identity,
        Op::Matmul => matmul,
        Op::Transpose => transpose,
        Op::Permute => permute,
        Op::Reshape => reshape,
        Op::Expand => identity,
        Op::Unsqueeze => unsqueeze,
        Op::Squeeze => reshape,
        Op::Concat => concat,
        Op::Split => split,
        Op::Slice => slice,
        Op::Tril => tril,
        Op::Triu => triu,
        Op::Gather => gather,
        Op::GatherElements => gather_elements,
        Op::IndexSelect => index_select,
        Op::Cumsum => cumsum,
        Op::Sum => sum,
        Op::Mean => mean,
        Op::Amax => amax,
        Op::Softmax => softmax,
        Op::LogSoftmax => log_softmax,
        Op::ScaledDotProductAttention => sdpa,
        Op::CrossEntropy => cross_entropy,
        // The table's `grad` column says which ops have no rule (differentiated
        // through their decomposition, with no gradient, or not yet); the test below
        // holds this list of rules to it.
        _ => return None,
    };
    Some(rule)
}

fn g<'b>(cx: &VjpContext<'b>) -> Result<Var<'b>, GradError> {
    cx.cotangent(0)
}

fn bad(message: String) -> GradError {
    GradError::unsupported(message)
}

/// Known dims of `v`'s shape as `i64`s.
fn dims_of(v: Var<'_>) -> Result<Vec<i64>, GradError> {
    let m = v.meta()?;
    m.shape
        .dims()
        .iter()
        .map(|d| {
            d.known()
                .map(|n| n as i64)
                .ok_or_else(|| bad(format!("needs a known shape, found {}", m.shape)))
        })
        .collect()
}

fn axis(dim: i64, rank: usize) -> Result<usize, GradError> {
    normalize_axis(dim, rank).ok_or_else(|| bad(format!("dim {dim} out of range for rank {rank}")))
}

fn add<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let g = g(cx)?;
    Ok(vec![Some(g), Some(g)])
}

fn sub<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let g = g(cx)?;
    Ok(vec![Some(g), Some(g.neg()?)])
}

fn mul<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let g = g(cx)?;
    Ok(vec![Some(g.mul(cx.input(1))?), Some(g.mul(cx.input(0))?)])
}

fn div<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let (g, b) = (g(cx)?, cx.input(1));
    let ga = g.div(b)?;
    let gb = if cx.needs_grad(1) {
        Some(ga.mul(cx.output(0))?.neg()?)
    } else {
        None
    };
    Ok(vec![Some(ga), gb])
}

fn pow<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let (g, a, e) = (g(cx)?, cx.input(0), cx.input(1));
    let dtype = a.meta()?.dtype;
    let ga = if cx.needs_grad(0) {
        let ef = if e.meta()?.dtype == dtype {
            e
        } else {
            e.cast(dtype)?
        };
        Some(g.mul(ef)?.mul(a.pow(ef.sub(1.0)?)?)?)
    } else {
        None
    };
    let ge = if cx.needs_grad(1) {
        Some(g.mul(cx.output(0))?.mul(a.log()?)?)
    } else {
        None
    };
    Ok(vec![ga, ge])
}

/// `maximum`/`minimum`: the cotangent goes to the selected operand, split evenly on ties.
fn select<'b>(cx: &VjpContext<'b>, first_wins: Var<'b>, second_wins: Var<'b>) -> VjpResult<'b> {
    let (g, a, b) = (g(cx)?, cx.input(0), cx.input(1));
    let half = g.mul(0.5)?;
    let tie = a.eq(b)?;
    let ga = first_wins.where_(g, tie.where_(half, 0.0)?)?;
    let gb = second_wins.where_(g, tie.where_(half, 0.0)?)?;
    Ok(vec![Some(ga), Some(gb)])
}

fn maximum<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let (a, b) = (cx.input(0), cx.input(1));
    select(cx, a.gt(b)?, a.lt(b)?)
}

fn minimum<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let (a, b) = (cx.input(0), cx.input(1));
    select(cx, a.lt(b)?, a.gt(b)?)
}

fn neg<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(g(cx)?.neg()?)])
}

fn abs<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let (g, a) = (g(cx)?, cx.input(0));
    let neg = a.lt(0.0)?.where_(g.neg()?, 0.0)?;
    Ok(vec![Some(a.gt(0.0)?.where_(g, neg)?)])
}

fn reciprocal<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let out = cx.output(0);
    Ok(vec![Some(g(cx)?.mul(out.mul(out)?)?.neg()?)])
}

fn sqrt<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(g(cx)?.div(cx.output(0).mul(2.0)?)?)])
}

fn rsqrt<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let out = cx.output(0);
    let cube = out.mul(out)?.mul(out)?;
    Ok(vec![Some(g(cx)?.mul(cube)?.mul(-0.5)?)])
}

fn exp<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(g(cx)?.mul(cx.output(0))?)])
}

fn log<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(g(cx)?.div(cx.input(0))?)])
}

fn sin<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(g(cx)?.mul(cx.input(0).cos()?)?)])
}

fn cos<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(g(cx)?.mul(cx.input(0).sin()?)?.neg()?)])
}

fn erf<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let a = cx.input(0);
    let d = a.mul(a)?.neg()?.exp()?.mul(2.0 / PI.sqrt())?;
    Ok(vec![Some(g(cx)?.mul(d)?)])
}

fn tanh<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let out = cx.output(0);
    Ok(vec![Some(g(cx)?.mul(out.mul(out)?.neg()?.add(1.0)?)?)])
}

fn sigmoid<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let out = cx.output(0);
    Ok(vec![Some(g(cx)?.mul(out.neg()?.add(1.0)?.mul(out)?)?)])
}

fn relu<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(cx.input(0).gt(0.0)?.where_(g(cx)?, 0.0)?)])
}

fn gelu<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let a = cx.input(0);
    let d = match cx.attrs().gelu_approximation().map_err(|e| bad(e.0))? {
        GeluApproximation::None => {
            // Phi(a) + a * phi(a)
            let cdf = a
                .mul(std::f64::consts::FRAC_1_SQRT_2)?
                .erf()?
                .add(1.0)?
                .mul(0.5)?;
            let pdf = a.mul(a)?.mul(-0.5)?.exp()?.mul(1.0 / (2.0 * PI).sqrt())?;
            cdf.add(a.mul(pdf)?)?
        }
        GeluApproximation::Tanh => {
            // 0.5 (1 + t) + 0.5 a (1 - t^2) k (1 + 3 c a^2), t = tanh(k (a + c a^3))
            let (k, c) = ((2.0 / PI).sqrt(), 0.044715);
            let a2 = a.mul(a)?;
            let t = a2.mul(c)?.add(1.0)?.mul(a)?.mul(k)?.tanh()?;
            let left = t.add(1.0)?.mul(0.5)?;
            let du = a2.mul(3.0 * c)?.add(1.0)?.mul(k)?;
            let right = t.mul(t)?.neg()?.add(1.0)?.mul(du)?.mul(a)?.mul(0.5)?;
            left.add(right)?
        }
    };
    Ok(vec![Some(g(cx)?.mul(d)?)])
}

fn silu<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let a = cx.input(0);
    let s = a.sigmoid()?;
    let d = s.mul(a.mul(s.neg()?.add(1.0)?)?.add(1.0)?)?;
    Ok(vec![Some(g(cx)?.mul(d)?)])
}

fn where_<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let (g, c) = (g(cx)?, cx.input(0));
    Ok(vec![None, Some(c.where_(g, 0.0)?), Some(c.where_(0.0, g)?)])
}

fn cast<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dtype = cx.input_meta(0)?.dtype;
    Ok(vec![if dtype.is_float() {
        Some(g(cx)?.cast(dtype)?)
    } else {
        None
    }])
}

fn masked_fill<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(cx.input(1).where_(0.0, g(cx)?)?), None])
}

fn dropout<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    if cx.attrs().bool("train").map_err(|e| bad(e.0))? {
        return Err(bad(
            "training-mode dropout: its random mask is not an output, so it has no gradient".into(),
        ));
    }
    identity(cx)
}

fn identity<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(g(cx)?)])
}

fn matmul<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let (g, a, b) = (g(cx)?, cx.input(0), cx.input(1));
    let (ra, rb) = (a.meta()?.rank(), b.meta()?.rank());
    if ra == 1 && rb == 1 {
        return Ok(vec![Some(g.mul(b)?), Some(g.mul(a)?)]);
    }
    // Promote 1-D operands as torch.matmul does, and the cotangent with them.
    let (a2, g) = if ra == 1 {
        (a.unsqueeze(0)?, g.unsqueeze(-2)?)
    } else {
        (a, g)
    };
    let (b2, g) = if rb == 1 {
        (b.unsqueeze(-1)?, g.unsqueeze(-1)?)
    } else {
        (b, g)
    };
    let mut ga = if cx.needs_grad(0) {
        Some(g.matmul(b2.transpose(-2, -1)?)?)
    } else {
        None
    };
    let mut gb = if cx.needs_grad(1) {
        Some(a2.transpose(-2, -1)?.matmul(g)?)
    } else {
        None
    };
    if ra == 1 {
        ga = ga.map(|t| t.squeeze_with(&[-2])).transpose()?;
    }
    if rb == 1 {
        gb = gb.map(|t| t.squeeze_with(&[-1])).transpose()?;
    }
    Ok(vec![ga, gb])
}

fn transpose<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let a = cx.attrs();
    let (d0, d1) = (
        a.int("dim0").map_err(|e| bad(e.0))?,
        a.int("dim1").map_err(|e| bad(e.0))?,
    );
    Ok(vec![Some(g(cx)?.transpose(d0, d1)?)])
}

fn permute<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dims = cx.attrs().ints("dims").map_err(|e| bad(e.0))?.to_vec();
    let mut inverse = vec![0i64; dims.len()];
    for (i, &d) in dims.iter().enumerate() {
        inverse[axis(d, dims.len())?] = i as i64;
    }
    Ok(vec![Some(g(cx)?.permute(&inverse)?)])
}

/// `reshape`/`squeeze`: back to the operand's (known) shape.
fn reshape<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let shape = dims_of(cx.input(0))?;
    Ok(vec![Some(g(cx)?.reshape(&shape)?)])
}

fn unsqueeze<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dim = cx.attrs().int("dim").map_err(|e| bad(e.0))?;
    Ok(vec![Some(g(cx)?.squeeze_with(&[dim])?)])
}

fn concat<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let g = g(cx)?;
    let rank = g.meta()?.rank();
    let dim = axis(cx.attrs().int("dim").map_err(|e| bad(e.0))?, rank)?;
    let mut start = 0i64;
    let mut out = Vec::with_capacity(cx.num_inputs());
    for i in 0..cx.num_inputs() {
        let len = dims_of(cx.input(i))?[dim];
        out.push(if cx.needs_grad(i) {
            Some(g.slice_with(dim as i64, start, start + len, 1)?)
        } else {
            None
        });
        start += len;
    }
    Ok(out)
}

fn split<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dim = cx.attrs().int("dim").map_err(|e| bad(e.0))?;
    let parts = (0..cx.num_outputs())
        .map(|i| cx.cotangent(i).map(Var::value))
        .collect::<Result<Vec<_>, _>>()?;
    let b = cx.builder();
    Ok(vec![Some(b.var(b.concat_with(&parts, dim)?))])
}

/// Adds the rows of `g` along `dim` into a tensor of size `n` there, row `j` going to
/// position `index[j]` (a 1-D i64 index, negative counting from the end): the
/// gradient of selecting by index, as `g` times a one-hot matrix.
fn scatter_rows<'b>(g: Var<'b>, dim: usize, index: Var<'b>, n: i64) -> Result<Var<'b>, GradError> {
    let b = g.builder();
    let rank = g.meta()?.rank();
    let index = index.lt(0i64)?.where_(index.add(n)?, index)?;
    let classes = b.var(b.arange(n as f64)?);
    let dtype = g.meta()?.dtype;
    let onehot = index.unsqueeze(1)?.eq(classes)?.cast(dtype)?;
    let last = rank - 1;
    let moved = if dim == last {
        g
    } else {
        g.transpose(dim as i64, last as i64)?
    };
    let out = moved.matmul(onehot)?;
    Ok(if dim == last {
        out
    } else {
        out.transpose(dim as i64, last as i64)?
    })
}

fn index_const(b: &Builder, index: Vec<i64>) -> Result<Var<'_>, GradError> {
    let n = index.len();
    let t = Tensor::from_vec(vec![n], index).map_err(|e| bad(e.to_string()))?;
    Ok(b.constant(t))
}

fn slice<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let a = cx.attrs();
    let int = |n: &str| a.int(n).map_err(|e| bad(e.0));
    let shape = dims_of(cx.input(0))?;
    let dim = axis(int("dim")?, shape.len())?;
    let (n, step) = (shape[dim], int("step")?);
    if step <= 0 {
        return Err(bad(format!("step {step} must be positive")));
    }
    let clamp = |i: i64| if i < 0 { (i + n).max(0) } else { i.min(n) };
    let (start, end) = (clamp(int("start")?), clamp(int("end")?));
    let index: Vec<i64> = (start..end).step_by(step as usize).collect();
    let g = g(cx)?;
    let index = index_const(cx.builder(), index)?;
    Ok(vec![Some(scatter_rows(g, dim, index, n)?)])
}

fn tril<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let d = cx.attrs().int("diagonal").map_err(|e| bad(e.0))?;
    Ok(vec![Some(g(cx)?.tril_with(d)?)])
}

fn triu<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let d = cx.attrs().int("diagonal").map_err(|e| bad(e.0))?;
    Ok(vec![Some(g(cx)?.triu_with(d)?)])
}

fn gather<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let shape = dims_of(cx.input(0))?;
    let dim = axis(cx.attrs().int("dim").map_err(|e| bad(e.0))?, shape.len())?;
    let index = cx.input(1);
    let count: i64 = dims_of(index)?.iter().product();
    let mut rows = shape[..dim].to_vec();
    rows.push(count);
    rows.extend(&shape[dim + 1..]);
    let g = g(cx)?.reshape(&rows)?;
    let index = index.reshape(&[count])?;
    Ok(vec![Some(scatter_rows(g, dim, index, shape[dim])?), None])
}

fn index_select<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let shape = dims_of(cx.input(0))?;
    let dim = axis(cx.attrs().int("dim").map_err(|e| bad(e.0))?, shape.len())?;
    let g = g(cx)?;
    Ok(vec![
        Some(scatter_rows(g, dim, cx.input(1), shape[dim])?),
        None,
    ])
}

fn gather_elements<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let shape = dims_of(cx.input(0))?;
    let index = cx.input(1);
    let ishape = dims_of(index)?;
    let r = shape.len();
    let dim = axis(cx.attrs().int("dim").map_err(|e| bad(e.0))?, r)?;
    if (0..r).any(|d| d != dim && ishape[d] != shape[d]) {
        return Err(bad(format!(
            "index {ishape:?} smaller than input {shape:?} outside dim {dim} is not supported"
        )));
    }
    let n = shape[dim];
    let b = cx.builder();
    let mut at = vec![1i64; r + 1];
    at[dim + 1] = n;
    let classes = b.var(b.arange(n as f64)?).reshape(&at)?;
    let index = index.lt(0i64)?.where_(index.add(n)?, index)?;
    let hit = index.unsqueeze(dim as i64 + 1)?.eq(classes)?;
    let g = g(cx)?.unsqueeze(dim as i64 + 1)?;
    let spread = hit.where_(g, 0.0)?.sum_with(&[dim as i64], false)?;
    Ok(vec![Some(spread), None])
}

fn cumsum<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    // Reverse cumulative sum: total - cumsum(g) + g.
    let dim = cx.attrs().int("dim").map_err(|e| bad(e.0))?;
    let g = g(cx)?;
    let total = g.sum_with(&[dim], true)?;
    Ok(vec![Some(total.sub(g.cumsum(dim)?)?.add(g)?)])
}

/// The reduced dims (normalised, ascending) of a reduction node.
fn reduced_dims(cx: &VjpContext<'_>) -> Result<Vec<usize>, GradError> {
    let rank = cx.input_meta(0)?.rank();
    let dims = cx.attrs().ints("dims").map_err(|e| bad(e.0))?.to_vec();
    let mut out: Vec<usize> = if dims.is_empty() {
        (0..rank).collect()
    } else {
        dims.iter()
            .map(|&d| axis(d, rank))
            .collect::<Result<_, _>>()?
    };
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `v` (a reduction's result) with the reduced dims back as size 1.
fn keep_dims<'b>(cx: &VjpContext<'b>, v: Var<'b>, dims: &[usize]) -> Result<Var<'b>, GradError> {
    if cx.attrs().bool("keepdim").map_err(|e| bad(e.0))? {
        return Ok(v);
    }
    let mut v = v;
    for &d in dims {
        v = v.unsqueeze(d as i64)?;
    }
    Ok(v)
}

/// `v` (keepdim-shaped) broadcast to the operand's shape.
fn expand_back<'b>(cx: &VjpContext<'b>, v: Var<'b>, dims: &[usize]) -> Result<Var<'b>, GradError> {
    let shape = cx.input_meta(0)?.shape;
    let mut size = vec![-1i64; shape.rank()];
    for &d in dims {
        size[d] = shape.dims()[d]
            .known()
            .ok_or_else(|| bad(format!("needs known reduced dims, found {shape}")))?
            as i64;
    }
    Ok(v.expand(&size)?)
}

fn sum<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dims = reduced_dims(cx)?;
    let gk = keep_dims(cx, g(cx)?, &dims)?;
    Ok(vec![Some(expand_back(cx, gk, &dims)?)])
}

fn mean<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dims = reduced_dims(cx)?;
    let shape = dims_of(cx.input(0))?;
    let count: i64 = dims.iter().map(|&d| shape[d]).product();
    let gk = keep_dims(cx, g(cx)?, &dims)?.div(count.max(1) as f64)?;
    Ok(vec![Some(expand_back(cx, gk, &dims)?)])
}

fn amax<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    // The cotangent is shared evenly by the entries equal to the maximum.
    let dims = reduced_dims(cx)?;
    let a = cx.input(0);
    let outk = keep_dims(cx, cx.output(0), &dims)?;
    let gk = keep_dims(cx, g(cx)?, &dims)?;
    let hit = a.eq(outk)?.cast(a.meta()?.dtype)?;
    let dl: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let count = hit.sum_with(&dl, true)?;
    Ok(vec![Some(hit.mul(gk.div(count)?)?)])
}

fn softmax<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dim = cx.attrs().int("dim").map_err(|e| bad(e.0))?;
    let (g, out) = (g(cx)?, cx.output(0));
    let dot = g.mul(out)?.sum_with(&[dim], true)?;
    Ok(vec![Some(out.mul(g.sub(dot)?)?)])
}

fn log_softmax<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let dim = cx.attrs().int("dim").map_err(|e| bad(e.0))?;
    let (g, out) = (g(cx)?, cx.output(0));
    let total = g.sum_with(&[dim], true)?;
    Ok(vec![Some(g.sub(out.exp()?.mul(total)?)?)])
}

/// Attributes of a node by name, for passing them on to a backward op.
fn attrs_by_name<'a>(cx: &'a VjpContext<'_>, names: &[&'a str]) -> Vec<(&'a str, AttrValue)> {
    let a = cx.attrs();
    names
        .iter()
        .filter_map(|&n| a.get(n).map(|v| (n, v.clone())))
        .collect()
}

fn sdpa<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    if cx.attrs().float("dropout_p").map_err(|e| bad(e.0))? != 0.0 {
        return Err(bad(
            "attention dropout has no gradient (its mask is not recorded)".into(),
        ));
    }
    let mask = cx.try_input(3);
    if let Some(m) = mask {
        if m.meta()?.dtype != DType::Bool && cx.needs_grad(3) {
            return Err(bad(
                "the gradient with respect to an additive attention mask is not supported".into(),
            ));
        }
    }
    let b = cx.builder();
    let mut operands = vec![g(cx)?.value()];
    operands.extend((0..3).map(|i| cx.input(i).value()));
    operands.push(cx.output(0).value());
    operands.extend(mask.map(Var::value));
    let attrs = attrs_by_name(cx, &["is_causal", "scale", "enable_gqa"]);
    let grads = b.apply(
        &op::SCALED_DOT_PRODUCT_ATTENTION_BACKWARD,
        &operands,
        &attrs,
    )?;
    let mut out: Vec<Option<Var<'b>>> = grads.into_iter().map(|v| Some(b.var(v))).collect();
    if mask.is_some() {
        out.push(None);
    }
    Ok(out)
}

fn cross_entropy<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let b = cx.builder();
    let operands = [g(cx)?.value(), cx.input(0).value(), cx.input(1).value()];
    let attrs = attrs_by_name(cx, &["ignore_index", "label_smoothing", "reduction"]);
    let d = b.apply(&op::CROSS_ENTROPY_BACKWARD, &operands, &attrs)?;
    Ok(vec![Some(b.var(d[0])), None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_for_exactly_the_ops_the_table_says_have_one() {
        for &op in Op::ALL {
            assert_eq!(
                builtin_rule(op).is_some(),
                op.grad() == Grad::Rule,
                "`{op}`: its grad column is {:?}",
                op.grad()
            );
        }
    }
}
