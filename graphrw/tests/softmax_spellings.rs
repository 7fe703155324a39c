//! The canonicalisation of softmax spelled through log-sum-exp (issue #53, item 4), on
//! built graphs: `exp(x - logsumexp(x, d, keepdim))` in the forms the ONNX importer and
//! model authors give it (torch's guarded max shift, the plain max, no shift, the shift
//! added first, the reduction without its dim put back by `unsqueeze`), and
//! `exp(log_softmax(x))`, become one `softmax` over the same dim; and the forms that
//! compute something else stay as they are: a log-sum-exp over another dim than the
//! one it is broadcast along, one without its dim subtracted as it is, a shift that is
//! not constant along the reduced dim, a log-sum-exp of another tensor. Every graph's
//! outputs are the same before and after. Also Transformer-XL's `(q @ kT + bias) * s`
//! before a softmax: the attention fuses, with the bias as its mask.

use graphrw::exec::run_reference;
use graphrw::rewrite::Rewriter;
use graphrw::{rules, Builder, DType, Graph, GraphError, Tensor, TensorMeta, Var};
use graphrw_kernels::testing::compare::{check_close_tensor, Tol};

/// `n` values in about [-3, 3], the same for one `seed`.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64 * 6.0 - 3.0) as f32
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(shape.to_vec(), values(shape.iter().product(), seed)).expect("tensor")
}

/// Torch's `logsumexp(x, dims, keepdim=True)` as the importer writes `ReduceLogSumExp`:
/// the max, 0 where it is infinite, as the shift.
fn lse_guarded<'b>(b: &'b Builder, x: Var<'b>, dims: &[i64]) -> Result<Var<'b>, GraphError> {
    let m = x.amax_with(dims, true)?;
    let inf = m.abs()?.eq(b.scalar(f64::INFINITY, DType::F32))?;
    let m = inf.where_(b.scalar(0.0, DType::F32), m)?;
    x.sub(m)?.exp()?.sum_with(dims, true)?.log()?.add(m)
}

/// One way to write the probabilities of `x` (or a near miss that is not a softmax).
#[derive(Clone, Copy, Debug)]
enum Form {
    /// `exp(x - logsumexp(x, -1, keepdim=True))`, imported form.
    Guarded,
    /// The same over dim 1 of the rank-3 `x`, counted from the front.
    GuardedDimFromFront,
    /// `exp(x - (log(sum(exp(x - m))) + m))`, `m = amax(x, -1, keepdim=True)`.
    MaxShift,
    /// `exp(x - (m + log(sum(exp(x - m)))))`.
    MaxShiftAddedFirst,
    /// `exp(x - log(sum(exp(x))))`.
    NoShift,
    /// `exp(x - unsqueeze(logsumexp(x, -1), -1))` (`keepdim=False`, put back).
    Unsqueezed,
    /// The same with both dims counted from the front (`squeeze(.., [2])`,
    /// `unsqueeze(.., 2)`).
    UnsqueezedFromFront,
    /// `exp(log_softmax(x, -1))`.
    ExpLogSoftmax,
    // Near misses: not a softmax of `x`.
    /// `exp(x - unsqueeze(logsumexp(x, -2), -1))`: reduced over one dim, broadcast
    /// along another.
    OtherDimBroadcast,
    /// `exp(x - logsumexp(x, -1))` without `keepdim`: aligned with the last dims.
    KeepdimDropped,
    /// `exp(x - (log(sum(exp(x - m), -1)) + m))` with `m = amax(x, -2)`: a shift that
    /// varies along the reduced dim.
    ShiftAlongTheDim,
    /// `exp(x - logsumexp(z, -1))` with `z = 2 x`: the log-sum-exp of another tensor.
    OtherTensor,
    /// `exp(x - logsumexp(x, [-2, -1]))`: over two dims.
    TwoDims,
}

/// `y = probs(x)` over `x: f32[4, 4, 4]` (a cube, so that a wrongly aligned broadcast
/// still has a shape).
fn build(form: Form) -> Result<Graph, GraphError> {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [4usize, 4, 4]));
    let y = match form {
        Form::Guarded => x.sub(lse_guarded(&b, x, &[-1])?)?.exp()?,
        Form::GuardedDimFromFront => x.sub(lse_guarded(&b, x, &[1])?)?.exp()?,
        Form::MaxShift | Form::MaxShiftAddedFirst => {
            let m = x.amax_with(&[-1], true)?;
            let log = x.sub(m)?.exp()?.sum_with(&[-1], true)?.log()?;
            let lse = match form {
                Form::MaxShift => log.add(m)?,
                _ => m.add(log)?,
            };
            x.sub(lse)?.exp()?
        }
        Form::NoShift => x.sub(x.exp()?.sum_with(&[-1], true)?.log()?)?.exp()?,
        Form::Unsqueezed => {
            let lse = lse_guarded(&b, x, &[-1])?.squeeze_with(&[-1])?;
            x.sub(lse.unsqueeze(-1)?)?.exp()?
        }
        Form::UnsqueezedFromFront => {
            let lse = lse_guarded(&b, x, &[2])?.squeeze_with(&[2])?;
            x.sub(lse.unsqueeze(2)?)?.exp()?
        }
        Form::ExpLogSoftmax => x.log_softmax(-1)?.exp()?,
        Form::OtherDimBroadcast => {
            let lse = lse_guarded(&b, x, &[-2])?.squeeze_with(&[-2])?;
            x.sub(lse.unsqueeze(-1)?)?.exp()?
        }
        Form::KeepdimDropped => {
            let lse = lse_guarded(&b, x, &[-1])?.squeeze_with(&[-1])?;
            x.sub(lse)?.exp()?
        }
        Form::ShiftAlongTheDim => {
            let m = x.amax_with(&[-2], true)?;
            let lse = x.sub(m)?.exp()?.sum_with(&[-1], true)?.log()?.add(m)?;
            x.sub(lse)?.exp()?
        }
        Form::OtherTensor => {
            let z = x.mul(2.0)?;
            x.sub(lse_guarded(&b, z, &[-1])?)?.exp()?
        }
        Form::TwoDims => x.sub(lse_guarded(&b, x, &[-2, -1])?)?.exp()?,
    };
    b.output(&[y])?;
    Ok(b.finish())
}

/// Canonicalises `form`'s graph: the softmax nodes it has after, and that its output
/// is unchanged.
fn canonicalise(form: Form) -> usize {
    let mut g = build(form).unwrap_or_else(|e| panic!("{form:?}: build: {e}"));
    let x = tensor(&[4, 4, 4], 53);
    let before = run_reference(&g, std::slice::from_ref(&x)).expect("runs");
    Rewriter::new(&[&rules::CANONICAL])
        .run(&mut g)
        .unwrap_or_else(|e| panic!("{form:?}: {e}"));
    graphrw::verify(&g).unwrap_or_else(|e| panic!("{form:?}: {e}"));
    let after = run_reference(&g, &[x]).expect("runs");
    if let Err(e) = check_close_tensor(&after[0], &before[0], Tol::new(1e-6, 1e-5)) {
        panic!(
            "{form:?}: output changed: {e}\n{}",
            graphrw::printer::print(&g)
        );
    }
    g.nodes_with_op("softmax").count()
}

#[test]
fn log_sum_exp_spellings_become_one_softmax() {
    for form in [
        Form::Guarded,
        Form::GuardedDimFromFront,
        Form::MaxShift,
        Form::MaxShiftAddedFirst,
        Form::NoShift,
        Form::Unsqueezed,
        Form::UnsqueezedFromFront,
        Form::ExpLogSoftmax,
    ] {
        let mut g = build(form).expect("build");
        Rewriter::new(&[&rules::CANONICAL])
            .run(&mut g)
            .expect("rewrite");
        let left: Vec<&str> = ["exp", "log", "log_softmax", "sum", "amax", "squeeze"]
            .into_iter()
            .filter(|op| g.nodes_with_op(op).count() > 0)
            .collect();
        assert!(
            left.is_empty(),
            "{form:?}: {left:?} left:\n{}",
            graphrw::printer::print(&g)
        );
        assert_eq!(canonicalise(form), 1, "{form:?}: one softmax");
    }
}

#[test]
fn the_softmax_keeps_the_dim_of_the_log_sum_exp() {
    let mut g = build(Form::GuardedDimFromFront).expect("build");
    Rewriter::new(&[&rules::CANONICAL])
        .run(&mut g)
        .expect("rewrite");
    let id = g.nodes_with_op("softmax").next().expect("a softmax");
    let dim = g.node(id).expect("node").attrs().int("dim").expect("dim");
    assert_eq!(dim, -2, "dim 1 of a rank-3 tensor, counted from the end");
}

#[test]
fn near_misses_of_log_sum_exp_stay_as_they_are() {
    for form in [
        Form::OtherDimBroadcast,
        Form::KeepdimDropped,
        Form::ShiftAlongTheDim,
        Form::OtherTensor,
        Form::TwoDims,
    ] {
        assert_eq!(canonicalise(form), 0, "{form:?}: no softmax");
        let mut g = build(form).expect("build");
        Rewriter::new(&[&rules::CANONICAL])
            .run(&mut g)
            .expect("rewrite");
        assert_eq!(
            g.nodes_with_op("log_softmax").count(),
            0,
            "{form:?}: no log_softmax:\n{}",
            graphrw::printer::print(&g)
        );
    }
}

#[test]
fn a_log_sum_exp_alone_becomes_log_softmax() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [3usize, 5]));
    let y = x.sub(lse_guarded(&b, x, &[-1]).expect("lse")).expect("sub");
    b.output(&[y]).expect("output");
    let mut g = b.finish();
    let input = tensor(&[3, 5], 7);
    let before = run_reference(&g, std::slice::from_ref(&input)).expect("runs");
    Rewriter::new(&[&rules::CANONICAL])
        .run(&mut g)
        .expect("rewrite");
    assert_eq!(g.nodes_with_op("log_softmax").count(), 1);
    assert_eq!(g.nodes_with_op("exp").count(), 0);
    let after = run_reference(&g, &[input]).expect("runs");
    check_close_tensor(&after[0], &before[0], Tol::new(1e-6, 1e-5)).expect("same output");
}

/// Self-attention whose probabilities are `probs(scores)`, `q, k, v: f32[2, 2, 5, 4]`.
fn attention(form: Form) -> Result<Graph, GraphError> {
    let b = Builder::new();
    let meta = TensorMeta::new(DType::F32, [2usize, 2, 5, 4]);
    let (q, k, v) = (
        b.input("q", meta.clone()),
        b.input("k", meta.clone()),
        b.input("v", meta),
    );
    let s = q.matmul(k.transpose(-2, -1)?)?.mul(0.5)?;
    let p = match form {
        Form::Guarded => s.sub(lse_guarded(&b, s, &[-1])?)?.exp()?,
        Form::ExpLogSoftmax => s.log_softmax(-1)?.exp()?,
        other => panic!("no attention for {other:?}"),
    };
    b.output(&[p.matmul(v)?])?;
    Ok(b.finish())
}

fn qkv() -> Vec<Tensor> {
    (0..3).map(|i| tensor(&[2, 2, 5, 4], 100 + i)).collect()
}

#[test]
fn attention_with_a_log_sum_exp_softmax_fuses() {
    for form in [Form::Guarded, Form::ExpLogSoftmax] {
        let mut g = attention(form).expect("build");
        let before = run_reference(&g, &qkv()).expect("runs");
        rules::fuse_attention(&mut g).expect("fuse");
        assert_eq!(
            g.nodes_with_op("scaled_dot_product_attention").count(),
            1,
            "{form:?}:\n{}",
            graphrw::printer::print(&g)
        );
        assert_eq!(g.nodes_with_op("softmax").count(), 0, "{form:?}");
        let after = run_reference(&g, &qkv()).expect("runs");
        check_close_tensor(&after[0], &before[0], Tol::new(1e-5, 1e-4)).expect("same output");
    }
}

/// Transformer-XL's scores, `(q @ kT + bias) * 0.5 [+ mask]`, then softmax and `@ v`.
fn relative_scores(masked: bool) -> Result<Graph, GraphError> {
    let b = Builder::new();
    let meta = TensorMeta::new(DType::F32, [2usize, 2, 5, 4]);
    let (q, k, v) = (
        b.input("q", meta.clone()),
        b.input("k", meta.clone()),
        b.input("v", meta),
    );
    let bias = b.input("bias", TensorMeta::new(DType::F32, [2usize, 2, 5, 5]));
    let mut s = q.matmul(k.transpose(-2, -1)?)?.add(bias)?.mul(0.5)?;
    if masked {
        let mask = b.input("mask", TensorMeta::new(DType::F32, [5usize, 5]));
        s = s.add(mask)?;
    }
    b.output(&[s.softmax(-1)?.matmul(v)?])?;
    Ok(b.finish())
}

#[test]
fn a_scaled_score_bias_becomes_the_mask_of_the_fused_attention() {
    for masked in [false, true] {
        let mut g = relative_scores(masked).expect("build");
        let mut inputs = qkv();
        inputs.push(tensor(&[2, 2, 5, 5], 9));
        if masked {
            inputs.push(tensor(&[5, 5], 11));
        }
        let before = run_reference(&g, &inputs).expect("runs");
        rules::fuse_attention(&mut g).expect("fuse");
        let fused: Vec<_> = g.nodes_with_op("scaled_dot_product_attention").collect();
        assert_eq!(
            fused.len(),
            1,
            "masked {masked}:\n{}",
            graphrw::printer::print(&g)
        );
        let node = g.node(fused[0]).expect("node");
        assert_eq!(node.operands().len(), 4, "the bias is the mask");
        assert_eq!(node.attrs().float("scale").ok(), Some(0.5), "the scale");
        let after = run_reference(&g, &inputs).expect("runs");
        check_close_tensor(&after[0], &before[0], Tol::new(1e-5, 1e-4)).expect("same output");
    }
}
