//! The arithmetic of one instruction over a tile of `f32` lanes. Every value of a group
//! is held as `f32` (bools as 0 and 1); the formulas are those of the reference kernels
//! (`graphrw-kernels::cpu::elementwise`), so a tile computes the same numbers.

use graphrw_kernels::Real;

/// What one instruction computes, lane by lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaneOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a ^ b`.
    Pow,
    /// NaN-propagating maximum.
    Maximum,
    /// NaN-propagating minimum.
    Minimum,
    /// Logical and.
    And,
    /// Logical or.
    Or,
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
    /// `-a`.
    Neg,
    /// `|a|`.
    Abs,
    /// `1 / a`.
    Reciprocal,
    /// `sqrt(a)`.
    Sqrt,
    /// `1 / sqrt(a)`.
    Rsqrt,
    /// `e^a`.
    Exp,
    /// `ln(a)`.
    Log,
    /// `sin(a)`.
    Sin,
    /// `cos(a)`.
    Cos,
    /// `erf(a)`.
    Erf,
    /// `tanh(a)`.
    Tanh,
    /// `1 / (1 + e^-a)`.
    Sigmoid,
    /// `max(a, 0)`, NaN kept.
    Relu,
    /// Exact GELU.
    Gelu,
    /// Tanh-approximated GELU.
    GeluTanh,
    /// `a * sigmoid(a)`.
    Silu,
    /// Logical not.
    Not,
    /// `a` is NaN.
    IsNan,
    /// `c ? a : b`.
    Where,
    /// `a` unchanged (dropout in inference, casts between floats and from bool).
    Copy,
    /// `a != 0` (cast to bool).
    ToBool,
    /// `m ? value : a` (`masked_fill(a, m)`).
    MaskedFill(f32),
}

impl LaneOp {
    /// The lane op of a built-in elementwise op, given its attributes' effect
    /// (`approximate` of gelu, the fill value of masked_fill, a cast's target) where
    /// the caller resolved them; `None` for ops a tile cannot run.
    pub fn of_builtin(name: &str) -> Option<LaneOp> {
        Some(match name {
            "add" => LaneOp::Add,
            "sub" => LaneOp::Sub,
            "mul" => LaneOp::Mul,
            "div" => LaneOp::Div,
            "pow" => LaneOp::Pow,
            "maximum" => LaneOp::Maximum,
            "minimum" => LaneOp::Minimum,
            "and" => LaneOp::And,
            "or" => LaneOp::Or,
            "eq" => LaneOp::Eq,
            "ne" => LaneOp::Ne,
            "lt" => LaneOp::Lt,
            "le" => LaneOp::Le,
            "gt" => LaneOp::Gt,
            "ge" => LaneOp::Ge,
            "neg" => LaneOp::Neg,
            "abs" => LaneOp::Abs,
            "reciprocal" => LaneOp::Reciprocal,
            "sqrt" => LaneOp::Sqrt,
            "rsqrt" => LaneOp::Rsqrt,
            "exp" => LaneOp::Exp,
            "log" => LaneOp::Log,
            "sin" => LaneOp::Sin,
            "cos" => LaneOp::Cos,
            "erf" => LaneOp::Erf,
            "tanh" => LaneOp::Tanh,
            "sigmoid" => LaneOp::Sigmoid,
            "relu" => LaneOp::Relu,
            "gelu" => LaneOp::Gelu,
            "silu" => LaneOp::Silu,
            "not" => LaneOp::Not,
            "isnan" => LaneOp::IsNan,
            "where" => LaneOp::Where,
            "cast" | "dropout" => LaneOp::Copy,
            "masked_fill" => LaneOp::MaskedFill(0.0),
            _ => return None,
        })
    }
}

#[inline(always)]
fn b2f(b: bool) -> f32 {
    if b {
        1.0
    } else {
        0.0
    }
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[inline(always)]
fn nan_max(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x >= y {
        x
    } else {
        y
    }
}

#[inline(always)]
fn nan_min(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else if x <= y {
        x
    } else {
        y
    }
}

#[inline(always)]
fn map1(d: &mut [f32], a: &[f32], f: impl Fn(f32) -> f32) {
    for (d, &a) in d.iter_mut().zip(a) {
        *d = f(a);
    }
}

#[inline(always)]
fn map2(d: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
    for ((d, &a), &b) in d.iter_mut().zip(a).zip(b) {
        *d = f(a, b);
    }
}

/// Applies `op` to the lanes of `src` (one slice per operand, all as long as `dst`).
pub fn apply(op: LaneOp, dst: &mut [f32], src: &[&[f32]]) {
    let a = src[0];
    let half = 0.5f32;
    let inv_sqrt2 = std::f64::consts::FRAC_1_SQRT_2 as f32;
    let k = (2.0 / std::f64::consts::PI).sqrt() as f32;
    let c = 0.044715f64 as f32;
    match op {
        LaneOp::Add => map2(dst, a, src[1], |x, y| x + y),
        LaneOp::Sub => map2(dst, a, src[1], |x, y| x - y),
        LaneOp::Mul => map2(dst, a, src[1], |x, y| x * y),
        LaneOp::Div => map2(dst, a, src[1], |x, y| x / y),
        LaneOp::Pow => map2(dst, a, src[1], f32::powf),
        LaneOp::Maximum => map2(dst, a, src[1], nan_max),
        LaneOp::Minimum => map2(dst, a, src[1], nan_min),
        LaneOp::And => map2(dst, a, src[1], |x, y| b2f(x != 0.0 && y != 0.0)),
        LaneOp::Or => map2(dst, a, src[1], |x, y| b2f(x != 0.0 || y != 0.0)),
        LaneOp::Eq => map2(dst, a, src[1], |x, y| b2f(x == y)),
        LaneOp::Ne => map2(dst, a, src[1], |x, y| b2f(x != y)),
        LaneOp::Lt => map2(dst, a, src[1], |x, y| b2f(x < y)),
        LaneOp::Le => map2(dst, a, src[1], |x, y| b2f(x <= y)),
        LaneOp::Gt => map2(dst, a, src[1], |x, y| b2f(x > y)),
        LaneOp::Ge => map2(dst, a, src[1], |x, y| b2f(x >= y)),
        LaneOp::Neg => map1(dst, a, |x| -x),
        LaneOp::Abs => map1(dst, a, f32::abs),
        LaneOp::Reciprocal => map1(dst, a, |x| 1.0 / x),
        LaneOp::Sqrt => map1(dst, a, f32::sqrt),
        LaneOp::Rsqrt => map1(dst, a, |x| 1.0 / x.sqrt()),
        LaneOp::Exp => map1(dst, a, f32::exp),
        LaneOp::Log => map1(dst, a, f32::ln),
        LaneOp::Sin => map1(dst, a, f32::sin),
        LaneOp::Cos => map1(dst, a, f32::cos),
        LaneOp::Erf => map1(dst, a, Real::erf),
        LaneOp::Tanh => map1(dst, a, f32::tanh),
        LaneOp::Sigmoid => map1(dst, a, sigmoid),
        LaneOp::Relu => map1(dst, a, |x| if x < 0.0 { 0.0 } else { x }),
        LaneOp::Gelu => map1(dst, a, |v| half * v * (1.0 + Real::erf(v * inv_sqrt2))),
        LaneOp::GeluTanh => map1(dst, a, |v| {
            half * v * (1.0 + (k * (v + c * v * v * v)).tanh())
        }),
        LaneOp::Silu => map1(dst, a, |x| x * sigmoid(x)),
        LaneOp::Not => map1(dst, a, |x| b2f(x == 0.0)),
        LaneOp::IsNan => map1(dst, a, |x| b2f(x.is_nan())),
        LaneOp::Copy => dst.copy_from_slice(a),
        LaneOp::ToBool => map1(dst, a, |x| b2f(x != 0.0)),
        LaneOp::MaskedFill(v) => map2(dst, a, src[1], |x, m| if m != 0.0 { v } else { x }),
        LaneOp::Where => {
            let (x, y) = (src[1], src[2]);
            for (((d, &c), &x), &y) in dst.iter_mut().zip(a).zip(x).zip(y) {
                *d = if c != 0.0 { x } else { y };
            }
        }
    }
}
