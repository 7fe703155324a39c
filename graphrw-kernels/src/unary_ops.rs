// The unary elementwise ops: the one list. Each row is
//
//     /// doc
//     Variant "op" "name" kind,
//
// `op` is the built-in op the variant computes (`gelu_tanh` is `gelu` with
// `approximate = "tanh"`: no op of its own), `name` the name errors use, `kind` says
// where it is available: `fused` in `fused_kernel!` bodies and everywhere else, `cpu` in
// the CPU kernels and the tile executor only.
//
// Not a module: it is the argument list of a `unary_ops!` macro that each user defines
// before including this file, so every crate derives its own enum from the same rows:
// `UnaryOp` (graphrw-kernels `cpu/elementwise.rs`), the tile executor's lane ops
// (graphrw `exec/tile/lanes.rs`, through `UnaryOp`), and `Un` (graphrw-macros
// `fused/ir.rs`, the `fused` rows). Adding a unary op: a row here, then its formula in
// each `match` the compiler then points to.
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
