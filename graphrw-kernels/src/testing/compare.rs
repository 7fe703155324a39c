//! Element-wise comparison of results against references that sees NaN and infinities.
//!
//! An element `got` matches its reference `want` when
//!
//! - `want` is NaN and `got` is NaN;
//! - `want` is infinite and `got` is the same infinity;
//! - both are finite and `|got - want| <= atol + rtol * |want|`.
//!
//! Anything else is a mismatch: in particular a NaN or infinite `got` where `want` is
//! finite fails whatever the tolerance, which `fold(0.0, f64::max)` over differences
//! (`f64::max` drops NaN) and `if (a - b).abs() > tol { fail }` (false for NaN) miss.
//!
//! ```
//! use graphrw_kernels::testing::compare::{check_close, max_abs_diff, Tol};
//!
//! let want = [1.0, 2.0, f64::INFINITY];
//! assert_eq!(max_abs_diff(&[1.0, 2.5, f64::INFINITY], &want), Ok(0.5));
//! assert!(max_abs_diff(&[1.0, f64::NAN, f64::INFINITY], &want).is_err());
//! assert!(check_close(&[1.0, 2.0 + 1e-7, f64::INFINITY], &want, Tol::new(1e-6, 0.0)).is_ok());
//! assert!(check_close(&[1.0, f64::NAN, f64::INFINITY], &want, Tol::new(1e9, 1e9)).is_err());
//! ```

use crate::Tensor;

/// A tolerance: `|got - want| <= atol + rtol * |want|`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tol {
    /// Absolute part.
    pub atol: f64,
    /// Part relative to the reference's magnitude.
    pub rtol: f64,
}

impl Tol {
    /// `atol + rtol * |want|`.
    pub const fn new(atol: f64, rtol: f64) -> Tol {
        Tol { atol, rtol }
    }

    /// `tol * (1 + |want|)`: the same bound absolute and relative.
    pub const fn scaled(tol: f64) -> Tol {
        Tol {
            atol: tol,
            rtol: tol,
        }
    }

    /// The largest difference allowed against `want`.
    pub fn bound(&self, want: f64) -> f64 {
        self.atol + self.rtol * want.abs()
    }
}

/// Where `got` and `want` differ in kind (not merely in amount): a NaN or an infinity on
/// one side that the other side does not have. `None` where both are finite or both are
/// the same non-finite value.
fn non_finite_mismatch(got: f64, want: f64) -> Option<String> {
    if got.is_nan() && want.is_nan() || got.is_infinite() && got == want {
        return None;
    }
    if got.is_finite() && want.is_finite() {
        return None;
    }
    Some(format!("{got} where the reference is {want}"))
}

/// The largest `|got[i] - want[i]|` over elements whose reference is finite. `Err`
/// naming the first offending element where the lengths differ or where `got` and
/// `want` disagree on NaN or infinity (see the [module docs](self)).
pub fn max_abs_diff(got: &[f64], want: &[f64]) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} values where the reference has {}",
            got.len(),
            want.len()
        ));
    }
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if let Some(why) = non_finite_mismatch(g, w) {
            return Err(format!("element {i}: {why}"));
        }
        if w.is_finite() {
            worst = worst.max((g - w).abs());
        }
    }
    Ok(worst)
}

/// Checks every element of `got` against `want` within `tol` (see the
/// [module docs](self)); `Err` names the first element that does not match.
pub fn check_close(got: &[f64], want: &[f64], tol: Tol) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} values where the reference has {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if let Some(why) = non_finite_mismatch(g, w) {
            return Err(format!("element {i}: {why}"));
        }
        let d = (g - w).abs();
        if w.is_finite() && (d.is_nan() || d > tol.bound(w)) {
            return Err(format!(
                "element {i}: {g} vs {w} (difference {d}, allowed {})",
                tol.bound(w)
            ));
        }
    }
    Ok(())
}

/// [`check_close`], panicking with `what` and the mismatch.
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: Tol, what: &str) {
    if let Err(e) = check_close(got, want, tol) {
        panic!("{what}: {e}");
    }
}

/// [`max_abs_diff`] over tensors: `Err` also where the shapes differ.
pub fn max_abs_diff_tensor(got: &Tensor, want: &Tensor) -> Result<f64, String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?} where the reference has {:?}",
            got.shape(),
            want.shape()
        ));
    }
    max_abs_diff(&got.to_f64_vec(), &want.to_f64_vec())
}

/// [`max_abs_diff_tensor`] over lists of tensors (the largest of all): `Err` also where
/// the counts differ; the error names the output.
pub fn max_abs_diff_tensors(got: &[Tensor], want: &[Tensor]) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} outputs where the reference has {}",
            got.len(),
            want.len()
        ));
    }
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = max_abs_diff_tensor(g, w).map_err(|e| format!("output {i}: {e}"))?;
        worst = worst.max(d);
    }
    Ok(worst)
}

/// [`check_close`] over tensors: `Err` also where the shapes differ.
pub fn check_close_tensor(got: &Tensor, want: &Tensor, tol: Tol) -> Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?} where the reference has {:?}",
            got.shape(),
            want.shape()
        ));
    }
    check_close(&got.to_f64_vec(), &want.to_f64_vec(), tol)
}

/// [`check_close_tensor`], panicking with `what` and the mismatch.
#[track_caller]
pub fn assert_close_tensor(got: &Tensor, want: &Tensor, tol: Tol, what: &str) {
    if let Err(e) = check_close_tensor(got, want, tol) {
        panic!("{what}: {e}");
    }
}

/// [`assert_close_tensor`] over lists of tensors (the counts must match).
#[track_caller]
pub fn assert_close_tensors(got: &[Tensor], want: &[Tensor], tol: Tol, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} outputs where the reference has {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if let Err(e) = check_close_tensor(g, w, tol) {
            panic!("{what}, output {i}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_and_infinity_where_the_reference_is_finite_fail() {
        let want = [0.5, -2.0, 3.0];
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let got = [0.5, bad, 3.0];
            let e = max_abs_diff(&got, &want).expect_err("non-finite passed");
            assert!(e.contains("element 1"), "{e}");
            assert!(check_close(&got, &want, Tol::new(f64::MAX, f64::MAX)).is_err());
        }
        // A finite value where the reference is NaN or infinite fails too.
        assert!(max_abs_diff(&[1.0], &[f64::NAN]).is_err());
        assert!(max_abs_diff(&[1.0], &[f64::INFINITY]).is_err());
        assert!(max_abs_diff(&[f64::NEG_INFINITY], &[f64::INFINITY]).is_err());
    }

    #[test]
    fn matching_non_finite_values_and_small_differences_pass() {
        let want = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 100.0];
        let got = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 100.5];
        assert_eq!(max_abs_diff(&got, &want), Ok(0.5));
        assert!(check_close(&got, &want, Tol::new(0.0, 0.01)).is_ok());
        assert!(check_close(&got, &want, Tol::new(0.1, 0.001)).is_err());
        assert!(check_close(&got, &want, Tol::scaled(0.005)).is_ok());
    }

    #[test]
    fn lengths_shapes_and_counts_must_agree() {
        assert!(max_abs_diff(&[1.0], &[1.0, 2.0]).is_err());
        assert!(check_close(&[1.0, 2.0], &[1.0], Tol::scaled(1.0)).is_err());
        let a = Tensor::from_vec(vec![2, 2], vec![1.0f32; 4]).expect("a");
        let b = Tensor::from_vec(vec![4], vec![1.0f32; 4]).expect("b");
        assert!(max_abs_diff_tensor(&a, &b).is_err());
        assert!(check_close_tensor(&a, &b, Tol::scaled(1.0)).is_err());
        assert_eq!(max_abs_diff_tensor(&a, &a), Ok(0.0));
        assert!(max_abs_diff_tensors(std::slice::from_ref(&a), &[a.clone(), a.clone()]).is_err());
        let one = std::slice::from_ref(&a);
        assert_eq!(max_abs_diff_tensors(one, one), Ok(0.0));
    }
}
