//! Helpers for the workspace's tests (public, not behind `cfg(test)`, so that
//! integration tests in every crate share them).
//!
//! [`compare`]: the one element-wise comparison every test uses, which fails where an
//! output is NaN or infinite and the reference is not (the `fold(0.0, f64::max)` and
//! `if (a - b).abs() > tol` idioms let such an output pass).

pub mod compare;
