//! Reverse-mode automatic differentiation as a graph transform.
//!
//! [`grad`] takes a forward [`Graph`](crate::Graph) and the inputs to differentiate
//! with respect to, and returns a new graph that computes the forward outputs and then
//! the gradients, in `wrt` order. Each op is differentiated by its vjp rule from a
//! [`GradRegistry`] (a plain `fn` that builds the backward nodes with the ordinary
//! [`Builder`](crate::Builder)/[`Var`](crate::Var) API), or, when it has no rule,
//! through its decomposition (so a custom op declared `like` its decomposition is
//! differentiable with no extra code). The result is an ordinary graph: rewrites and
//! executor claiming run on it like on any other.
//!
//! ```
//! use graphrw::grad::grad;
//! use graphrw::{verify, Builder, DType, TensorMeta};
//!
//! let b = Builder::new();
//! let x = b.input("x", TensorMeta::new(DType::F32, [3usize]));
//! let y = b.input("y", TensorMeta::new(DType::F32, [3usize]));
//! let loss = x.mul(y)?.sum()?;
//! b.output(&[loss])?;
//! let wrt = [x.value(), y.value()];
//! let g = grad(&b.finish(), &wrt)?;
//! verify(&g)?;
//! assert_eq!(g.outputs().len(), 3); // loss, dloss/dx, dloss/dy
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod context;
mod error;
mod registry;
mod transform;
pub mod vjp_rules;

pub use context::{VjpContext, VjpFn, VjpResult};
pub use error::GradError;
pub use registry::GradRegistry;
pub use transform::{grad, grad_with, sum_to_shape, Cotangents};
