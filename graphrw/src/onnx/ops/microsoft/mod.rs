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
//! | `Attention`, `MultiHeadAttention`, `GroupQueryAttention` | `scaled_dot_product_attention` with its projections, caches and masks (`attention.rs`, `gqa.rs`) |
//! | `RotaryEmbedding`, `EmbedLayerNormalization` | rotations of the heads; gathers, sum and `layer_norm` (`embed.rs`) |
//!
//! The normalisations' optional `mean` and `inv_std_var` outputs (training statistics,
//! which neither optimizer reads) are not computed: a node that names them passes
//! through unread, as does any other contrib op.

mod attention;
mod embed;
mod gqa;
mod heads;

use crate::graph::Value;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::{AttrValue, Op};
use smallvec::smallvec;

/// The epsilon of the skip normalisations when the node sets none (onnxruntime's).
const SKIP_NORM_EPSILON: f32 = 1e-12;

/// True for an op of [`Importer::microsoft`] in `domain` (`""` for the default one).
pub(crate) fn is_contrib(op_type: &str, domain: &str) -> bool {
    match domain {
        "com.microsoft" => matches!(
            op_type,
            "SkipLayerNormalization"
                | "SkipSimplifiedLayerNormalization"
                | "SimplifiedLayerNormalization"
                | "FastGelu"
                | "BiasGelu"
                | "Gelu"
                | "QuickGelu"
                | "BiasAdd"
                | "Attention"
                | "MultiHeadAttention"
                | "GroupQueryAttention"
                | "RotaryEmbedding"
                | "EmbedLayerNormalization"
        ),
        "" => op_type == "SimplifiedLayerNormalization",
        _ => false,
    }
}

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

    /// Refuses (as a form graphrw does not read: the node passes through) a node that
    /// names its training statistics outputs.
    fn no_statistics(at: &At<'m, '_>, outputs: std::ops::Range<usize>) -> Result<(), OnnxError> {
        let named = outputs
            .filter(|&j| at.output.get(j).is_some_and(|n| !n.is_empty()))
            .collect::<Vec<_>>();
        match named.as_slice() {
            [] => Ok(()),
            _ => Err(at.err(format!(
                "outputs {named:?} (the mean and inverse standard deviation) are not computed"
            ))),
        }
    }

    /// `SkipLayerNormalization` (`simplified`: `SkipSimplifiedLayerNormalization`).
    fn skip_norm(&mut self, at: &At<'m, '_>, simplified: bool) -> Result<Outs, OnnxError> {
        at.only_attrs(&["epsilon"])?;
        let max_inputs = if simplified { 4 } else { 5 };
        at.inputs_between(3, max_inputs)?;
        if at.output.len() > 4 {
            return Err(at.bad(format!("{} outputs, expected at most 4", at.output.len())));
        }
        Self::no_statistics(at, 1..3)?;
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
        Ok(smallvec![y, y, y, sum])
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
        Self::no_statistics(at, 1..2)?;
        let axis = at.int("axis", -1)?;
        let eps = f64::from(at.float("epsilon", 1e-5)?);
        let x = self.float_input(at, 0, None)?;
        let scale = self.float_input(at, 1, Some(x))?;
        let rank = self.meta(x)?.rank() as i64;
        if !(-rank..rank).contains(&axis) {
            return Err(at.bad(format!("axis {axis} is out of range for rank {rank}")));
        }
        let y = self.norm(at, x, (scale, None), axis, eps, true)?;
        Ok(smallvec![y, y])
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
}
