//! The arithmetic of one instruction over a tile of `f32` lanes. Every value of a group
//! is held as `f32` (bools as 0 and 1); the unary and binary ops run
//! [`graphrw_kernels::elementwise::lanes`], built per instruction set, whose formulas
//! are the reference kernels' (`graphrw-kernels::cpu::elementwise`), the transcendental
//! ones in their vectorising forms (within about 2 ulp).

use graphrw_kernels::cpu::{BinaryOp, Isa, UnaryOp};
use graphrw_kernels::elementwise::lanes;

use crate::ops::Op;

/// What one instruction computes, lane by lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaneOp {
    /// A binary op of the workspace's one list ([`BinaryOp`]).
    Binary(BinaryOp),
    /// A unary op of the workspace's one list ([`UnaryOp`]).
    Unary(UnaryOp),
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
    /// The lane op of a built-in op, before its attributes are read (`approximate` of
    /// gelu, the fill value of masked_fill, a cast's target: the caller resolves them);
    /// `None` for ops a tile cannot run.
    pub fn of_builtin(op: Op) -> Option<LaneOp> {
        match op {
            Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Pow
            | Op::Maximum
            | Op::Minimum
            | Op::And
            | Op::Or
            | Op::Eq
            | Op::Ne
            | Op::Lt
            | Op::Le
            | Op::Gt
            | Op::Ge => op.binary().map(LaneOp::Binary),
            Op::Neg
            | Op::Abs
            | Op::Reciprocal
            | Op::Sqrt
            | Op::Rsqrt
            | Op::Exp
            | Op::Log
            | Op::Sin
            | Op::Cos
            | Op::Erf
            | Op::Tanh
            | Op::Sigmoid
            | Op::Relu
            | Op::Gelu
            | Op::Silu
            | Op::Not
            | Op::Isnan => op.unary().map(LaneOp::Unary),
            Op::Where => Some(LaneOp::Where),
            Op::Cast | Op::Dropout => Some(LaneOp::Copy),
            Op::MaskedFill => Some(LaneOp::MaskedFill(0.0)),
            Op::Input
            | Op::Constant
            | Op::Opaque
            | Op::Arange
            | Op::Full
            | Op::SymInts
            | Op::Zeros
            | Op::Ones
            | Op::Contiguous
            | Op::Matmul
            | Op::Conv2d
            | Op::Transpose
            | Op::Permute
            | Op::Reshape
            | Op::Expand
            | Op::Unsqueeze
            | Op::Squeeze
            | Op::Concat
            | Op::Split
            | Op::Slice
            | Op::Tril
            | Op::Triu
            | Op::Gather
            | Op::GatherElements
            | Op::GatherNd
            | Op::IndexSelect
            | Op::Cumsum
            | Op::Sum
            | Op::Mean
            | Op::Amax
            | Op::Softmax
            | Op::LogSoftmax
            | Op::LayerNorm
            | Op::RmsNorm
            | Op::ScaledDotProductAttention
            | Op::ScaledDotProductAttentionBackward
            | Op::CrossEntropy
            | Op::CrossEntropyBackward => None,
        }
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

/// Applies `op` to the lanes of `src` (one slice per operand, all as long as `dst`),
/// the unary and binary ops built for `isa` ([`graphrw_kernels::elementwise::lanes`]).
pub fn apply(isa: Isa, op: LaneOp, dst: &mut [f32], src: &[&[f32]]) {
    let a = src[0];
    match op {
        LaneOp::Binary(op) => lanes::binary_f32(isa, op, dst, a, src[1]),
        LaneOp::Unary(op) => lanes::unary_f32(isa, op, dst, a),
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

#[cfg(test)]
mod tests {
    use super::*;
    use graphrw_kernels::{cpu, Tensor};

    #[test]
    fn every_unary_op_of_the_list_runs_in_a_tile_as_the_reference_kernel_does() {
        let xs = [
            -3.0f32,
            -1.0,
            -0.5,
            -0.0,
            0.0,
            0.25,
            1.0,
            2.5,
            40.0,
            f32::NAN,
        ];
        for &op in UnaryOp::ALL {
            if op != UnaryOp::GeluTanh {
                // `gelu_tanh` is `gelu` with an attribute, chosen by the tile's compiler.
                let builtin = crate::ops::lookup(op.op()).and_then(|d| d.builtin);
                assert_eq!(
                    builtin.and_then(LaneOp::of_builtin),
                    Some(LaneOp::Unary(op)),
                    "{op:?}"
                );
            }
            let (lanes, tensor) = if op == UnaryOp::Not {
                let bools = [true, false, false, true];
                let lanes: Vec<f32> = bools.iter().map(|&b| b2f(b)).collect();
                (lanes, Tensor::from_vec(vec![bools.len()], bools.to_vec()))
            } else {
                (xs.to_vec(), Tensor::from_vec(vec![xs.len()], xs.to_vec()))
            };
            let tensor = tensor.unwrap_or_else(|e| panic!("{op:?}: {e}"));
            let mut got = vec![0f32; lanes.len()];
            apply(Isa::best(), LaneOp::Unary(op), &mut got, &[&lanes]);
            let want = cpu::unary(op, &tensor)
                .unwrap_or_else(|e| panic!("{op:?}: {e}"))
                .to_f64_vec();
            for ((&g, &w), &x) in got.iter().zip(&want).zip(&lanes) {
                let g = f64::from(g);
                let close = g == w
                    || (g.is_nan() && w.is_nan())
                    || (g - w).abs() <= 1e-6 * w.abs().max(1.0);
                assert!(close, "{op:?}({x}): tile {g}, reference {w}");
            }
        }
    }
}
