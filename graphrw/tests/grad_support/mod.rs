//! Shared helpers of the gradient tests: deterministic data and a finite-difference
//! check of one small graph.
#![allow(dead_code)]

use std::sync::Arc;

use graphrw::exec::{Executor, ReferenceCpu};
use graphrw::grad::GradRegistry;
use graphrw::gradcheck::check_grad;
use graphrw::{Builder, DType, GraphError, Shape, Tensor, TensorMeta, Value, Var};

/// `n` deterministic pseudo-random values in `[lo, hi)`.
pub fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// An f64 tensor.
pub fn tensor(shape: &[usize], d: Vec<f64>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), d).unwrap()
}

/// f64 metadata.
pub fn f64s(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(
        DType::F64,
        Shape::known(&shape.iter().map(|&d| d as u64).collect::<Vec<_>>()),
    )
}

/// One f64 input of the checked graph: its shape and the range of its values.
pub struct In<'a> {
    pub shape: &'a [usize],
    pub lo: f64,
    pub hi: f64,
}

/// An input of `shape` with values in `[lo, hi)`.
pub fn input(shape: &[usize], lo: f64, hi: f64) -> In<'_> {
    In { shape, lo, hi }
}

/// Builds `body` on f64 inputs, reduces its output to a scalar loss
/// `sum(out * w)` with a fixed random `w`, and checks the gradients with respect to
/// every input against central differences; returns the largest relative error.
pub fn fd_check(
    inputs: &[In<'_>],
    body: impl for<'b> Fn(&'b Builder, &[Var<'b>]) -> Result<Var<'b>, GraphError>,
) -> f64 {
    fd_check_with(
        inputs,
        &GradRegistry::with_builtins(),
        &[Arc::new(ReferenceCpu)],
        body,
    )
}

/// [`fd_check`] with a registry and an executor stack.
pub fn fd_check_with(
    inputs: &[In<'_>],
    registry: &GradRegistry,
    executors: &[Arc<dyn Executor>],
    body: impl for<'b> Fn(&'b Builder, &[Var<'b>]) -> Result<Var<'b>, GraphError>,
) -> f64 {
    let b = Builder::new();
    let xs: Vec<Var<'_>> = inputs
        .iter()
        .enumerate()
        .map(|(i, x)| b.input(&format!("x{i}"), f64s(x.shape)))
        .collect();
    let out = body(&b, &xs).unwrap();
    let shape: Vec<usize> = out
        .meta()
        .unwrap()
        .shape
        .as_known()
        .unwrap()
        .iter()
        .map(|&d| d as usize)
        .collect();
    let n: usize = shape.iter().product();
    let w = b.constant(tensor(&shape, data(n, 99, 0.5, 1.5)));
    let loss = out.mul(w).unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    let wrt: Vec<Value> = xs.iter().map(|v| v.value()).collect();
    drop(xs);
    let graph = b.finish();
    let values: Vec<Tensor> = inputs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let n = x.shape.iter().product();
            tensor(x.shape, data(n, i as u64 + 1, x.lo, x.hi))
        })
        .collect();
    let report = check_grad(&graph, &wrt, &values, registry, executors, 1e-6)
        .unwrap_or_else(|e| panic!("{e}\n{graph}"));
    assert!(report.max_error() < 1e-5, "{report}\n{graph}");
    report.max_error()
}
