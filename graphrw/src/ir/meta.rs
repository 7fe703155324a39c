//! Tensor metadata: dtype, shape (known and symbolic dims) and device.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

pub use graphrw_kernels::DType;

pub use super::sym::{symbol, EvalError, Factor, Sign, SymExpr, Symbol};

/// One dimension of a shape: a known size, a named symbol (`batch`, `seq`), or an
/// expression over symbols (`past + seq`, `batch*12`, `seq // 2`).
///
/// Always in its simplest form ([`Dim::from_expr`]): an expression that is a constant is
/// `Known`, one that is a single symbol is `Sym`, so equal dims compare equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A size known when the graph is built.
    Known(u64),
    /// A size known only at run time, named so that equal names are equal sizes.
    Sym(Symbol),
    /// A size computed from symbols (canonical, never a constant or a lone symbol).
    Expr(Arc<SymExpr>),
}

impl Dim {
    /// A symbolic dim named `name`.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(symbol(name))
    }

    /// The size when known.
    pub fn known(&self) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(*n),
            _ => None,
        }
    }

    /// True when this dim is known to be 1.
    pub fn is_one(&self) -> bool {
        matches!(self, Dim::Known(1))
    }

    /// True when the dim is a symbol or an expression.
    pub fn is_symbolic(&self) -> bool {
        !matches!(self, Dim::Known(_))
    }

    /// The dim as an expression.
    pub fn to_expr(&self) -> SymExpr {
        match self {
            Dim::Known(n) => SymExpr::int(i64::try_from(*n).unwrap_or(i64::MAX)),
            Dim::Sym(s) => SymExpr::sym_arc(s.clone()),
            Dim::Expr(e) => (**e).clone(),
        }
    }

    /// The dim an expression stands for, in simplest form; `None` for an expression
    /// that is negative for every binding (no size).
    pub fn from_expr(e: SymExpr) -> Option<Dim> {
        if let Some(n) = e.as_const() {
            return u64::try_from(n).ok().map(Dim::Known);
        }
        if matches!(e.sign(), Sign::Negative | Sign::NonPositive) {
            return None;
        }
        if let Some(s) = e.as_sym() {
            return Some(Dim::Sym(s.clone()));
        }
        Some(Dim::Expr(Arc::new(e)))
    }

    /// The size under a binding of the symbols.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<i64>) -> Result<u64, EvalError> {
        match self {
            Dim::Known(n) => Ok(*n),
            Dim::Sym(s) => env(s)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| EvalError::Unbound(s.clone())),
            Dim::Expr(e) => {
                let v = e.eval(env)?;
                u64::try_from(v).map_err(|_| EvalError::Negative(v))
            }
        }
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Dim {
        Dim::Known(n)
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Known(n as u64)
    }
}

impl From<&str> for Dim {
    fn from(name: &str) -> Dim {
        Dim::sym(name)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Expr(e) => write!(f, "{e}"),
        }
    }
}

/// The dims of a shape: up to [`INLINE_RANK`] of them are stored inline, so the
/// metadata of most tensors needs no allocation of its own (it is read on every node
/// a rewrite builds, and a pointer to chase there is a cache miss on big graphs).
pub type Dims = SmallVec<[Dim; INLINE_RANK]>;

/// How many dims a [`Shape`] holds without allocating.
pub const INLINE_RANK: usize = 4;

/// A shape: one [`Dim`] per axis. The rank is always known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shape(pub Dims);

impl Shape {
    /// A shape of known sizes.
    pub fn known(dims: &[u64]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    /// The rank (number of dims).
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// All sizes, when every dim is known.
    pub fn as_known(&self) -> Option<Vec<u64>> {
        self.0.iter().map(Dim::known).collect()
    }

    /// The number of elements, when every dim is known (saturating on overflow).
    pub fn numel(&self) -> Option<u64> {
        self.0
            .iter()
            .try_fold(1u64, |acc, d| d.known().map(|n| acc.saturating_mul(n)))
    }

    /// The number of elements as an expression (`None` on overflow).
    pub fn numel_expr(&self) -> Option<SymExpr> {
        self.0
            .iter()
            .try_fold(SymExpr::int(1), |acc, d| acc.mul(&d.to_expr()))
    }

    /// True when some dim is symbolic.
    pub fn is_symbolic(&self) -> bool {
        self.0.iter().any(Dim::is_symbolic)
    }

    /// The sizes under a binding of the symbols.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<i64>) -> Result<Vec<usize>, EvalError> {
        self.0
            .iter()
            .map(|d| {
                let n = d.eval(env)?;
                usize::try_from(n).map_err(|_| EvalError::Overflow)
            })
            .collect()
    }

    /// Resolves a possibly negative axis against this rank.
    pub fn axis(&self, dim: i64) -> Option<usize> {
        normalize_axis(dim, self.rank())
    }
}

/// Resolves a possibly negative axis (`-1` is the last) against `rank`.
pub fn normalize_axis(dim: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    (0..r).contains(&d).then_some(d as usize)
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl<D: Into<Dim>, const N: usize> From<[D; N]> for Shape {
    fn from(dims: [D; N]) -> Shape {
        Shape(dims.into_iter().map(Into::into).collect())
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Shape {
        Shape(dims.into_iter().collect())
    }
}

impl From<&[Dim]> for Shape {
    fn from(dims: &[Dim]) -> Shape {
        Shape(dims.iter().cloned().collect())
    }
}

impl FromIterator<Dim> for Shape {
    fn from_iter<I: IntoIterator<Item = Dim>>(dims: I) -> Shape {
        Shape(dims.into_iter().collect())
    }
}

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    #[default]
    Cpu,
    /// A CUDA device by ordinal.
    Cuda(u32),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// What is known of a value before it is computed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Shape,
    /// Device.
    pub device: Device,
}

impl TensorMeta {
    /// Metadata of a CPU tensor.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorMeta {
        TensorMeta {
            dtype,
            shape: shape.into(),
            device: Device::Cpu,
        }
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Metadata of a concrete tensor.
    pub fn of(t: &graphrw_kernels::Tensor) -> TensorMeta {
        TensorMeta::new(
            t.dtype(),
            Shape(t.shape().iter().map(|&d| Dim::Known(d as u64)).collect()),
        )
    }
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)?;
        if self.device != Device::Cpu {
            write!(f, " @{}", self.device)?;
        }
        Ok(())
    }
}
