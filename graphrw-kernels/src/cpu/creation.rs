//! Tensor factories: `arange` and `full`.

use crate::macros::dispatch;
use crate::tensor::checked_numel;
use crate::{DType, Element, KernelError, Tensor};

/// Largest element count a factory will allocate (guards against absurd sizes).
const MAX_ELEMS: usize = 1 << 40;

/// `[start, start + step, ...]` up to but excluding `end`, as `torch.arange`
/// (`ceil((end - start) / step)` elements, converted to `dtype`).
///
/// Errors on a zero or non-finite step, non-finite bounds, or a step pointing away
/// from `end`, or past the run budget ([`crate::budget`]), before allocating.
pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor, KernelError> {
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
        return Err(KernelError::invalid(
            "arange",
            format!("bad range start={start}, end={end}, step={step}"),
        ));
    }
    let len = ((end - start) / step).ceil();
    if len < 0.0 {
        return Err(KernelError::invalid(
            "arange",
            format!("step {step} points away from end: start={start}, end={end}"),
        ));
    }
    if len > MAX_ELEMS as f64 {
        return Err(KernelError::invalid(
            "arange",
            format!("{len} elements is too many"),
        ));
    }
    let n = len as usize;
    crate::budget::check_alloc("arange", &[n], dtype)?;
    Ok(dispatch!(dtype, |T| Tensor::from_data(
        vec![n],
        (0..n)
            .map(|i| T::from_f64(start + i as f64 * step))
            .collect::<Vec<T>>()
    )))
}

/// A tensor of `size` filled with `value` converted to `dtype`; sizes must be
/// non-negative.
///
/// Errors past the run budget ([`crate::budget`]) before allocating.
pub fn full(size: &[i64], value: f64, dtype: DType) -> Result<Tensor, KernelError> {
    if let Some(&bad) = size.iter().find(|&&s| s < 0) {
        return Err(KernelError::invalid(
            "full",
            format!("negative size {bad} in {size:?}"),
        ));
    }
    let shape: Vec<usize> = size.iter().map(|&s| s as usize).collect();
    if checked_numel("full", &shape)? > MAX_ELEMS {
        return Err(KernelError::invalid(
            "full",
            format!("size {size:?} is too large"),
        ));
    }
    crate::budget::check_alloc("full", &shape, dtype)?;
    Ok(Tensor::full(dtype, &shape, value))
}
