//! Fused softmax cross-entropy, forward and backward (the kernels of apex's
//! `xentropy`): one pass per row over the logits, never materialising the
//! log-probabilities; the backward recomputes the row's log-sum-exp.

use rayon::prelude::*;

use crate::cpu::util::index_values;
use crate::macros::dispatch_float;
use crate::{Element, KernelError, Real, Tensor};

/// How the per-row losses are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The mean over rows whose target is not ignored.
    #[default]
    Mean,
    /// The sum over rows.
    Sum,
    /// One loss per row.
    None,
}

impl Reduction {
    /// Parses `"mean"`, `"sum"` or `"none"`.
    pub fn parse(s: &str) -> Result<Reduction, KernelError> {
        match s {
            "mean" => Ok(Reduction::Mean),
            "sum" => Ok(Reduction::Sum),
            "none" => Ok(Reduction::None),
            other => Err(KernelError::invalid(
                "cross_entropy",
                format!("reduction must be \"mean\", \"sum\" or \"none\", found {other:?}"),
            )),
        }
    }
}

/// Options of [`cross_entropy`] and [`cross_entropy_backward`], as in
/// `torch.nn.functional.cross_entropy`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyOptions {
    /// Rows with this target count zero (and are not counted by `Mean`).
    pub ignore_index: i64,
    /// Weight of the uniform distribution mixed into the target, in `[0, 1]`.
    pub label_smoothing: f64,
    /// How per-row losses are combined.
    pub reduction: Reduction,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            ignore_index: -100,
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

/// Checked sizes: rows, classes, and the targets.
fn check(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    opts: &CrossEntropyOptions,
) -> Result<(usize, usize, Vec<i64>), KernelError> {
    let r = input.rank();
    if r == 0 || target.shape() != &input.shape()[..r - 1] {
        return Err(KernelError::shape(
            op,
            format!(
                "input {:?} must be [.., C] and target {:?} its shape without the class dim",
                input.shape(),
                target.shape()
            ),
        ));
    }
    if !(0.0..=1.0).contains(&opts.label_smoothing) {
        return Err(KernelError::invalid(
            op,
            format!("label_smoothing {} is not in [0, 1]", opts.label_smoothing),
        ));
    }
    let c = input.shape()[r - 1];
    let targets = index_values(op, target)?;
    if let Some(&t) = targets
        .iter()
        .find(|&&t| t != opts.ignore_index && (t < 0 || t as usize >= c))
    {
        return Err(KernelError::invalid(
            op,
            format!("target {t} is out of range for {c} classes"),
        ));
    }
    Ok((targets.len(), c, targets))
}

/// `log(sum(exp(row)))`, stable.
fn logsumexp<C: Real>(row: &[C]) -> C {
    let m = row
        .iter()
        .fold(C::NEG_INFINITY, |a, &x| if x > a { x } else { a });
    if m == C::NEG_INFINITY {
        return m;
    }
    let s: C = row.iter().map(|&x| (x - m).exp()).sum();
    m + s.ln()
}

/// Softmax cross-entropy of logits `input` `[.., C]` against class indices `target`
/// `[..]` (i64 or i32): per row `(1 - ls) * (lse - x[t]) + ls * (lse - mean(x))`, zero
/// for ignored rows, then reduced (a 0-d tensor, or `target`'s shape for `None`).
/// Float dtypes; f16/bf16 are computed in f32. Errors on bad shapes or targets.
pub fn cross_entropy(
    input: &Tensor,
    target: &Tensor,
    opts: &CrossEntropyOptions,
) -> Result<Tensor, KernelError> {
    let op = "cross_entropy";
    let (rows, c, targets) = check(op, input, target, opts)?;
    dispatch_float!(input.dtype(), op, |T| {
        let x = input.acc_cow::<T>();
        let ls = <T as Element>::Acc::from_f64(opts.label_smoothing);
        let mut losses = vec![<T as Element>::Acc::ZERO; rows];
        if c > 0 {
            losses
                .par_iter_mut()
                .zip(x.par_chunks(c))
                .zip(&targets)
                .for_each(|((loss, row), &t)| {
                    if t == opts.ignore_index {
                        return;
                    }
                    let lse = logsumexp(row);
                    let mut l = (lse - row[t as usize]) * (<T as Element>::Acc::ONE - ls);
                    if opts.label_smoothing != 0.0 {
                        let mean = row.iter().copied().sum::<<T as Element>::Acc>()
                            / <T as Element>::Acc::from_f64(c as f64);
                        l += ls * (lse - mean);
                    }
                    *loss = l;
                });
        }
        let valid = targets.iter().filter(|&&t| t != opts.ignore_index).count();
        let total = || losses.iter().copied().sum::<<T as Element>::Acc>();
        Ok(match opts.reduction {
            Reduction::None => Tensor::from_data(
                target.shape().to_vec(),
                losses.into_iter().map(T::from_acc).collect::<Vec<T>>(),
            ),
            Reduction::Sum => Tensor::from_data(vec![], vec![T::from_acc(total())]),
            Reduction::Mean => Tensor::from_data(
                vec![],
                vec![T::from_acc(
                    total() / <T as Element>::Acc::from_f64(valid as f64),
                )],
            ),
        })
    })
}

/// The gradient of [`cross_entropy`] with respect to `input`, given the loss's
/// cotangent `grad` (0-d for `Mean`/`Sum`, `target`'s shape for `None`): per row
/// `(softmax(x) - (1 - ls) * onehot(t) - ls / C) * g`, zero for ignored rows.
pub fn cross_entropy_backward(
    grad: &Tensor,
    input: &Tensor,
    target: &Tensor,
    opts: &CrossEntropyOptions,
) -> Result<Tensor, KernelError> {
    let op = "cross_entropy_backward";
    let (rows, c, targets) = check(op, input, target, opts)?;
    let want: &[usize] = match opts.reduction {
        Reduction::None => target.shape(),
        _ => &[],
    };
    if grad.shape() != want || grad.dtype() != input.dtype() {
        return Err(KernelError::shape(
            op,
            format!(
                "grad is {} {:?}, expected the loss's {} {want:?}",
                grad.dtype(),
                grad.shape(),
                input.dtype()
            ),
        ));
    }
    dispatch_float!(input.dtype(), op, |T| {
        type A = <T as Element>::Acc;
        let x = input.acc_cow::<T>();
        let g = grad.acc_cow::<T>();
        let valid = targets.iter().filter(|&&t| t != opts.ignore_index).count();
        let row_grad = |r: usize| -> A {
            match opts.reduction {
                Reduction::None => g[r],
                Reduction::Sum => g[0],
                Reduction::Mean => g[0] / A::from_f64(valid as f64),
            }
        };
        let ls = A::from_f64(opts.label_smoothing);
        let uniform = A::from_f64(opts.label_smoothing / c.max(1) as f64);
        let mut out = vec![A::ZERO; rows * c];
        if c > 0 {
            out.par_chunks_mut(c)
                .zip(x.par_chunks(c))
                .enumerate()
                .for_each(|(r, (d, row))| {
                    let t = targets[r];
                    if t == opts.ignore_index {
                        return;
                    }
                    let gr = row_grad(r);
                    let lse = logsumexp(row);
                    for (o, &v) in d.iter_mut().zip(row) {
                        *o = ((v - lse).exp() - uniform) * gr;
                    }
                    d[t as usize] += -(A::ONE - ls) * gr;
                });
        }
        Ok(Tensor::from_data(
            input.shape().to_vec(),
            out.into_iter().map(T::from_acc).collect::<Vec<T>>(),
        ))
    })
}
