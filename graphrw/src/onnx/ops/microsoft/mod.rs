//! onnxruntime's contrib ops (domain `com.microsoft`, and `SimplifiedLayerNormalization`,
//! which onnxruntime registers in the default domain) that its transformer optimizer and
//! onnxscript's `optimize_for_ort` write, imported as their decompositions, so that a
//! model another optimizer fused loads, runs, and fuses again under graphrw's own rules
//! (a layer norm becomes graphrw's fused kernel, a GELU joins an elementwise group):
//!
//! | op | decomposition |
//! |---|---|
//! | `SkipLayerNormalization(x, skip, gamma, beta?, bias?)` | `s = x + skip (+ bias)`; `layer_norm(s) * gamma (+ beta)`; outputs `y` and `s` |
//! | `SkipSimplifiedLayerNormalization(x, skip, gamma, bias?)` | `s = x + skip (+ bias)`; `rms_norm(s) * gamma`; outputs `y` and `s` |
//! | `SimplifiedLayerNormalization(x, scale)` | `rms_norm(x, axis) * scale` |
//! | `FastGelu(x, bias?)` | `gelu(x (+ bias), approximate="tanh")` |
//! | `BiasGelu(x, bias)`, `Gelu(x)` | `gelu(x (+ bias))` (erf) |
//! | `QuickGelu(x)` | `x * sigmoid(alpha * x)` |
//! | `BiasAdd(x, bias, skip)` | `x + bias + skip` |
//! | `FusedMatMul(a, b)` | `alpha * matmul(a or aᵀ, b or bᵀ)` (the last two dims swapped; the batch transposes are not read) |
//! | `Attention`, `MultiHeadAttention`, `GroupQueryAttention` | `scaled_dot_product_attention` with its projections, caches and masks (`attention.rs`, `gqa.rs`) |
//! | `RotaryEmbedding`, `EmbedLayerNormalization` | rotations of the heads; gathers, sum and `layer_norm` (`embed.rs`) |
//!
//! The normalisations' optional `mean` and `inv_std_var` outputs (training statistics,
//! which onnxscript names and neither optimizer reads) are computed in float32 over the
//! normalised dims, kept as dims of 1, as onnxruntime's schema declares them; the plan
//! drops them when nothing reads them.

mod attention;
mod embed;
mod gqa;
mod heads;

use crate::graph::Value;
use crate::meta::DType;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::{AttrValue, Op};
use smallvec::smallvec;

/// The epsilon of the skip normalisations when the node sets none (onnxruntime's).
const SKIP_NORM_EPSILON: f32 = 1e-12;

impl<'m> Importer<'m> {
    /// One of the contrib ops [`is_contrib`] names, as its decomposition.
    pub(crate) fn microsoft(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        match at.op_type {
            "SkipLayerNormalization" => self.skip_norm(at, false),
            "SkipSimplifiedLayerNormalization" => self.skip_norm(at, true),
            "SimplifiedLayerNormalization" => self.simplified_layer_norm(at),
            "FastGelu" | "BiasGelu" | "Gelu" => self.contrib_gelu(at),
            "QuickGelu" => self.quick_gelu(at),
            "BiasAdd" => self.bias_add(at),
            "FusedMatMul" => self.fused_matmul(at),
            "Attention" => self.ms_attention(at),
            "MultiHeadAttention" => self.multi_head_attention(at),
            "GroupQueryAttention" => self.group_query_attention(at),
            "RotaryEmbedding" => self.ms_rotary_embedding(at),
            "EmbedLayerNormalization" => self.embed_layer_norm(at),
            other => Err(OnnxError::UnknownOp {
                op_type: other.to_string(),
                domain: at.domain.to_string(),
                node: at.name.to_string(),
            }),
        }
    }

    /// The float input `i` (required), with its dtype checked against `x`'s.
    fn float_input(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        like: Option<Value>,
    ) -> Result<Value, OnnxError> {
        let v = self.req(at, i)?;
        self.check_float(at, i, v, like)?;
        Ok(v)
    }

    fn check_float(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        v: Value,
        like: Option<Value>,
    ) -> Result<(), OnnxError> {
        let dtype = self.meta(v)?.dtype;
        if !dtype.is_float() {
            return Err(at.bad(format!("input {i} is {dtype}, expected a float dtype")));
        }
        if let Some(like) = like {
            let want = self.meta(like)?.dtype;
            if want != dtype {
                return Err(at.bad(format!("input {i} is {dtype}, expected {want} as input 0")));
            }
        }
        Ok(())
    }

    /// Input `i` when the node gives it, checked as [`Importer::float_input`].
    fn opt_float(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        like: Value,
    ) -> Result<Option<Value>, OnnxError> {
        match self.input(at, i)? {
            Some(v) => {
                self.check_float(at, i, v, Some(like))?;
                Ok(Some(v))
            }
            None => Ok(None),
        }
    }

    /// The normalisation statistics of `x` over the dims from `axis` on, in float32 with
    /// those dims kept as 1: `(mean, inv_std_var)`, where `inv_std_var` is
    /// `1 / sqrt(var + eps)`, or `1 / sqrt(mean(x²) + eps)` when `rms` (whose mean is
    /// zeros, as onnxruntime writes it).
    fn norm_statistics(
        &mut self,
        at: &At<'m, '_>,
        x: Value,
        axis: i64,
        eps: f64,
        rms: bool,
    ) -> Result<(Value, Value), OnnxError> {
        let rank = self.meta(x)?.rank() as i64;
        let first = if axis < 0 { axis + rank } else { axis };
        let x = match self.meta(x)?.dtype {
            DType::F32 => x,
            _ => self.op1(
                at,
                Op::Cast,
                &[x],
                &[("dtype", AttrValue::DType(DType::F32))],
            )?,
        };
        let over = [
            ("dims", AttrValue::Ints((first..rank).collect())),
            ("keepdim", AttrValue::Bool(true)),
        ];
        let mean = self.op1(at, Op::Mean, &[x], &over)?;
        let centred = if rms {
            x
        } else {
            self.op1(at, Op::Sub, &[x, mean], &[])?
        };
        let square = self.op1(at, Op::Mul, &[centred, centred], &[])?;
        let var = self.op1(at, Op::Mean, &[square], &over)?;
        let eps = self.scalar(DType::F32, eps);
        let var = self.op1(at, Op::Add, &[var, eps], &[])?;
        let inv_std = self.op1(at, Op::Rsqrt, &[var], &[])?;
        if !rms {
            return Ok((mean, inv_std));
        }
        // onnxruntime writes zeros for the mean of an RMS norm.
        let size = self.dims(inv_std)?.iter().map(|d| d.to_expr()).collect();
        let attrs = [
            ("size", AttrValue::sym_ints(size)),
            ("dtype", AttrValue::DType(DType::F32)),
        ];
        let zeros = self.op1(at, Op::Zeros, &[], &attrs)?;
        Ok((zeros, inv_std))
    }

    /// `SkipLayerNormalization` (`simplified`: `SkipSimplifiedLayerNormalization`).
    fn skip_norm(&mut self, at: &At<'m, '_>, simplified: bool) -> Result<Outs, OnnxError> {
        at.only_attrs(&["epsilon"])?;
        let max_inputs = if simplified { 4 } else { 5 };
        at.inputs_between(3, max_inputs)?;
        if at.output.len() > 4 {
            return Err(at.bad(format!("{} outputs, expected at most 4", at.output.len())));
        }
        let eps = f64::from(at.float("epsilon", SKIP_NORM_EPSILON)?);
        let x = self.float_input(at, 0, None)?;
        let skip = self.float_input(at, 1, Some(x))?;
        let gamma = self.float_input(at, 2, Some(x))?;
        let (beta, bias) = if simplified {
            (None, self.opt_float(at, 3, x)?)
        } else {
            (self.opt_float(at, 3, x)?, self.opt_float(at, 4, x)?)
        };
        if self.meta(x)?.rank() == 0 {
            return Err(at.bad("input 0 is a scalar, expected a hidden dim".to_string()));
        }
        let mut sum = self.op1(at, Op::Add, &[x, skip], &[])?;
        if let Some(bias) = bias {
            sum = self.op1(at, Op::Add, &[sum, bias], &[])?;
        }
        let y = self.norm(at, sum, (gamma, beta), -1, eps, simplified)?;
        if at.output.iter().skip(1).take(2).all(|n| n.is_empty()) {
            return Ok(smallvec![y, y, y, sum]);
        }
        let (mean, inv_std) = self.norm_statistics(at, sum, -1, eps, simplified)?;
        Ok(smallvec![y, mean, inv_std, sum])
    }

    /// `layer_norm` (or `rms_norm` when `rms`) of `x` over the dims from `axis` on,
    /// scaled by `gamma`, shifted by `beta`.
    fn norm(
        &mut self,
        at: &At<'m, '_>,
        x: Value,
        (gamma, beta): (Value, Option<Value>),
        axis: i64,
        eps: f64,
        rms: bool,
    ) -> Result<Value, OnnxError> {
        let attrs = [
            ("axis", AttrValue::Int(axis)),
            ("eps", AttrValue::Float(eps)),
        ];
        if rms {
            return self.op1(at, Op::RmsNorm, &[x, gamma], &attrs);
        }
        match beta {
            Some(beta) => self.op1(at, Op::LayerNorm, &[x, gamma, beta], &attrs),
            None => self.op1(at, Op::LayerNorm, &[x, gamma], &attrs),
        }
    }

    /// `SimplifiedLayerNormalization`: an RMS norm over the dims from `axis` on.
    fn simplified_layer_norm(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["axis", "epsilon", "stash_type"])?;
        at.inputs_between(2, 2)?;
        if at.output.len() > 2 {
            return Err(at.bad(format!("{} outputs, expected at most 2", at.output.len())));
        }
        let axis = at.int("axis", -1)?;
        let eps = f64::from(at.float("epsilon", 1e-5)?);
        let x = self.float_input(at, 0, None)?;
        let scale = self.float_input(at, 1, Some(x))?;
        let rank = self.meta(x)?.rank() as i64;
        if !(-rank..rank).contains(&axis) {
            return Err(at.bad(format!("axis {axis} is out of range for rank {rank}")));
        }
        let y = self.norm(at, x, (scale, None), axis, eps, true)?;
        if at.output.get(1).is_none_or(|n| n.is_empty()) {
            return Ok(smallvec![y, y]);
        }
        let (_, inv_std) = self.norm_statistics(at, x, axis, eps, true)?;
        Ok(smallvec![y, inv_std])
    }

    /// `FastGelu` (tanh), `BiasGelu` and `Gelu` (erf).
    fn contrib_gelu(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[])?;
        at.only_outputs(1)?;
        let (min, max) = match at.op_type {
            "FastGelu" => (1, 2),
            "BiasGelu" => (2, 2),
            _ => (1, 1),
        };
        at.inputs_between(min, max)?;
        let mut x = self.float_input(at, 0, None)?;
        if let Some(bias) = self.opt_float(at, 1, x)? {
            x = self.op1(at, Op::Add, &[x, bias], &[])?;
        }
        let approximate = if at.op_type == "FastGelu" {
            "tanh"
        } else {
            "none"
        };
        let attrs = [("approximate", AttrValue::Str(approximate.into()))];
        Ok(smallvec![self.op1(at, Op::Gelu, &[x], &attrs)?])
    }

    /// `QuickGelu`: `x * sigmoid(alpha * x)`.
    fn quick_gelu(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["alpha"])?;
        at.only_outputs(1)?;
        at.inputs_between(1, 1)?;
        let alpha = f64::from(at.float("alpha", 1.702)?);
        let x = self.float_input(at, 0, None)?;
        let dtype = self.meta(x)?.dtype;
        let a = self.scalar(dtype, alpha);
        let ax = self.op1(at, Op::Mul, &[x, a], &[])?;
        let gate = self.op1(at, Op::Sigmoid, &[ax], &[])?;
        Ok(smallvec![self.op1(at, Op::Mul, &[x, gate], &[])?])
    }

    /// `BiasAdd`: `x + bias + skip`.
    fn bias_add(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[])?;
        at.only_outputs(1)?;
        at.inputs_between(3, 3)?;
        let x = self.float_input(at, 0, None)?;
        let bias = self.float_input(at, 1, Some(x))?;
        let skip = self.float_input(at, 2, Some(x))?;
        let biased = self.op1(at, Op::Add, &[x, bias], &[])?;
        Ok(smallvec![self.op1(at, Op::Add, &[biased, skip], &[])?])
    }

    /// `FusedMatMul`: `alpha * matmul(a, b)`, each operand's last two dims swapped
    /// first where `transA` / `transB` say so.
    fn fused_matmul(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["alpha", "transA", "transB", "transBatchA", "transBatchB"])?;
        at.only_outputs(1)?;
        at.inputs_between(2, 2)?;
        for batch in ["transBatchA", "transBatchB"] {
            if at.int(batch, 0)? != 0 {
                return Err(at.err(format!("`{batch}` is not read")));
            }
        }
        let a = self.float_input(at, 0, None)?;
        let b = self.float_input(at, 1, Some(a))?;
        let mut operands = [a, b];
        for (v, (flag, which)) in operands.iter_mut().zip([("transA", 0), ("transB", 1)]) {
            if at.int(flag, 0)? == 0 {
                continue;
            }
            let rank = self.meta(*v)?.rank() as i64;
            if rank < 2 {
                return Err(at.bad(format!(
                    "input {which} is rank {rank} with `{flag}` set, expected rank 2 or more"
                )));
            }
            let swap = [
                ("dim0", AttrValue::Int(rank - 2)),
                ("dim1", AttrValue::Int(rank - 1)),
            ];
            *v = self.op1(at, Op::Transpose, &[*v], &swap)?;
        }
        let mut y = self.op1(at, Op::Matmul, &operands, &[])?;
        let alpha = f64::from(at.float("alpha", 1.0)?);
        if alpha != 1.0 {
            let dtype = self.meta(y)?.dtype;
            let s = self.scalar(dtype, alpha);
            y = self.op1(at, Op::Mul, &[y, s], &[])?;
        }
        Ok(smallvec![y])
    }
}
