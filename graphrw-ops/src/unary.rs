//! The unary elementwise ops: the one list, and [`UnaryOp`] made from it.
//!
//! Each row is `/// doc` then `Variant "op" "name" kind`: `op` is the built-in op the
//! variant computes (`gelu_tanh` is `gelu` with `approximate = "tanh"`: no op of its
//! own), `name` the name errors use, `kind` where it is available: `fused` in
//! `fused_kernel!` bodies and everywhere else, `cpu` in the CPU kernels and the tile
//! executor only. The kernels, the tile executor's lanes and `fused_kernel!` all use
//! this one enum; adding a unary op is a row here, then its formula in each `match` the
//! compiler then points to.

/// Defines [`UnaryOp`] from the rows below.
macro_rules! unary_ops {
    ($($(#[doc = $doc:literal])* $v:ident $op:literal $name:literal $kind:ident,)*) => {
        /// A unary elementwise op: one row of the list of unary ops.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryOp {
            $($(#[doc = $doc])* $v,)*
        }

        impl UnaryOp {
            /// Every unary op, in the list's order.
            pub const ALL: &'static [UnaryOp] = &[$(UnaryOp::$v),*];

            /// The op's name as used in error messages.
            pub const fn name(self) -> &'static str {
                match self {
                    $(UnaryOp::$v => $name,)*
                }
            }

            /// The built-in op it computes (`gelu` for both GELUs: `approximate` tells
            /// them apart).
            pub const fn op(self) -> &'static str {
                match self {
                    $(UnaryOp::$v => $op,)*
                }
            }

            /// Whether `fused_kernel!` bodies can use it (the others run in the CPU
            /// kernels and the tile executor only).
            pub const fn in_fused_kernels(self) -> bool {
                match self {
                    $(UnaryOp::$v => unary_ops!(@fused $kind),)*
                }
            }
        }
    };
    (@fused fused) => { true };
    (@fused cpu) => { false };
}

unary_ops! {
    /// `-x` (floats, integers).
    Neg "neg" "neg" fused,
    /// `|x|` (floats, integers).
    Abs "abs" "abs" fused,
    /// `1 / x`.
    Reciprocal "reciprocal" "reciprocal" fused,
    /// `sqrt(x)`.
    Sqrt "sqrt" "sqrt" fused,
    /// `1 / sqrt(x)`.
    Rsqrt "rsqrt" "rsqrt" fused,
    /// `e^x`.
    Exp "exp" "exp" fused,
    /// Natural logarithm.
    Log "log" "log" fused,
    /// Sine.
    Sin "sin" "sin" fused,
    /// Cosine.
    Cos "cos" "cos" fused,
    /// The error function.
    Erf "erf" "erf" fused,
    /// Hyperbolic tangent.
    Tanh "tanh" "tanh" fused,
    /// `1 / (1 + e^-x)`.
    Sigmoid "sigmoid" "sigmoid" fused,
    /// `max(x, 0)` (floats, integers; NaN stays NaN).
    Relu "relu" "relu" fused,
    /// `x * sigmoid(x)`.
    Silu "silu" "silu" fused,
    /// Exact GELU: `x/2 * (1 + erf(x / sqrt 2))`.
    Gelu "gelu" "gelu" cpu,
    /// Tanh-approximated GELU (`approximate="tanh"`).
    GeluTanh "gelu" "gelu_tanh" cpu,
    /// Logical not (bool).
    Not "not" "logical_not" cpu,
    /// True where `x` is NaN (any dtype; always false for integers and bool).
    IsNan "isnan" "isnan" cpu,
}

impl UnaryOp {
    /// The unary op of built-in op `op`, if it is one (`gelu` gives the exact GELU; the
    /// caller picks [`UnaryOp::GeluTanh`] from its `approximate` attribute).
    pub fn of_op(op: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.iter().copied().find(|u| u.op() == op)
    }
}
