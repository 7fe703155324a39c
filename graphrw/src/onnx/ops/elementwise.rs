//! Elementwise ops without a one-to-one table row: `Identity`, `Dropout`, `Clip` and the
//! parametric activations in; `ne`, `rsqrt`, `silu`, `dropout` and `masked_fill` out.

use crate::graph::Node;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use crate::Tensor;
use smallvec::smallvec;

impl<'m> Importer<'m> {
    /// Activations written with vocabulary ops: `PRelu` and `LeakyRelu` as
    /// `relu(x) - slope * relu(-x)`, `Elu`/`Selu` as `where(x > 0, x, alpha * (exp(x) - 1))`
    /// (times `gamma`), `Softplus` as `log(exp(x) + 1)`. Before opset 7 a PRelu slope of
    /// one value per channel applies along dim 1.
    pub(crate) fn activation(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let op_type = at.op_type;
        match op_type {
            "PRelu" | "Softplus" => at.only_attrs(&[])?,
            "LeakyRelu" | "Elu" => at.only_attrs(&["alpha"])?,
            _ => at.only_attrs(&["alpha", "gamma"])?,
        }
        at.inputs_between(
            if op_type == "PRelu" { 2 } else { 1 },
            if op_type == "PRelu" { 2 } else { 1 },
        )?;
        let x = self.req(at, 0)?;
        let m = self.meta(x)?;
        if !m.dtype.is_float() {
            return Err(at.err(format!("{} input", m.dtype)));
        }
        let c = |imp: &mut Self, v: f64| imp.scalar(m.dtype, v);
        match op_type {
            "PRelu" | "LeakyRelu" => {
                let mut slope = match op_type {
                    "PRelu" => self.req(at, 1)?,
                    _ => {
                        let alpha = f64::from(at.float("alpha", 0.01)?);
                        c(self, alpha)
                    }
                };
                let sm = self.meta(slope)?;
                let per_channel = sm.rank() == 1
                    && m.rank() > 2
                    && sm.shape.dims()[0] == m.shape.dims()[1]
                    && !sm.shape.dims()[0].is_one();
                if op_type == "PRelu" && self.opset < 7 && per_channel {
                    for _ in 2..m.rank() {
                        slope = self.op1(at, Op::Unsqueeze, &[slope], &[("dim", int_attr(-1))])?;
                    }
                }
                let pos = self.op1(at, Op::Relu, &[x], &[])?;
                let negx = self.op1(at, Op::Neg, &[x], &[])?;
                let neg = self.op1(at, Op::Relu, &[negx], &[])?;
                let scaled = self.op1(at, Op::Mul, &[neg, slope], &[])?;
                Ok(smallvec![self.op1(at, Op::Sub, &[pos, scaled], &[])?])
            }
            "Softplus" => {
                let e = self.op1(at, Op::Exp, &[x], &[])?;
                let one = c(self, 1.0);
                let s = self.op1(at, Op::Add, &[e, one], &[])?;
                Ok(smallvec![self.op1(at, Op::Log, &[s], &[])?])
            }
            _ => {
                let selu = op_type == "Selu";
                let alpha = f64::from(at.float("alpha", if selu { 1.673_263_2 } else { 1.0 })?);
                let gamma = f64::from(at.float("gamma", 1.050_701)?);
                let zero = c(self, 0.0);
                let pos = self.op1(at, Op::Gt, &[x, zero], &[])?;
                let e = self.op1(at, Op::Exp, &[x], &[])?;
                let one = c(self, 1.0);
                let em1 = self.op1(at, Op::Sub, &[e, one], &[])?;
                let a = c(self, alpha);
                let neg = self.op1(at, Op::Mul, &[em1, a], &[])?;
                let mut y = self.op1(at, Op::Where, &[pos, x, neg], &[])?;
                if selu {
                    let g = c(self, gamma);
                    y = self.op1(at, Op::Mul, &[y, g], &[])?;
                }
                Ok(smallvec![y])
            }
        }
    }

    /// Clip: `min`/`max` attributes before opset 11, optional constant inputs since; a
    /// `maximum` and/or `minimum` with scalars of the input's dtype.
    pub(crate) fn clip(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let x = self.req(at, 0)?;
        let dtype = self.meta(x)?.dtype;
        let (lo, hi) = if self.opset < 11 {
            at.only_attrs(&["min", "max"])?;
            at.inputs_between(1, 1)?;
            let lo = at.attr("min").map(|_| at.float("min", 0.0)).transpose()?;
            let hi = at.attr("max").map(|_| at.float("max", 0.0)).transpose()?;
            (lo.map(f64::from), hi.map(f64::from))
        } else {
            at.only_attrs(&[])?;
            at.inputs_between(1, 3)?;
            let mut bound = |i: usize, what: &str| -> Result<Option<f64>, OnnxError> {
                match self.const_input(at, i, what)? {
                    None => Ok(None),
                    Some(t) if t.numel() == 1 => Ok(t.to_f64_vec().first().copied()),
                    Some(_) => Err(at.bad(format!("{what} must be a scalar"))),
                }
            };
            (bound(1, "min")?, bound(2, "max")?)
        };
        let mut y = x;
        if let Some(lo) = lo {
            let s = self.scalar(dtype, lo);
            y = self.op1(at, Op::Maximum, &[y, s], &[])?;
        }
        if let Some(hi) = hi {
            let s = self.scalar(dtype, hi);
            y = self.op1(at, Op::Minimum, &[y, s], &[])?;
        }
        Ok(smallvec![y])
    }
}

impl<'m> Importer<'m> {
    /// ONNX `Identity`.
    pub(crate) fn identity(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[])?;
        at.inputs_between(1, 1)?;
        Ok(smallvec![self.req(at, 0)?])
    }

    /// ONNX `Dropout`.
    pub(crate) fn dropout(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        // Before 12 the ratio is an attribute; before 7 `is_test` says inference.
        match self.opset {
            ..=6 => {
                at.only_attrs(&["is_test", "ratio"])?;
                if at.int("is_test", 0)? == 0 {
                    return Err(at.err("is_test is 0 (training mode)"));
                }
            }
            7..=11 => at.only_attrs(&["ratio", "seed"])?,
            _ => at.only_attrs(&["seed"])?,
        }
        at.only_outputs(1)?;
        if let Some(t) = self.const_input(at, 2, "training_mode")? {
            if t.to_f64_vec().iter().any(|&v| v != 0.0) {
                return Err(at.err("training_mode is true; graphrw imports inference graphs"));
            }
        }
        Ok(smallvec![self.req(at, 0)?])
    }
}

impl<'g> Exporter<'g> {
    pub(crate) fn write_ne(&mut self, ins: &[Name], outs: &[Name]) -> Result<(), OnnxError> {
        let t = self.tmp("eq");
        self.push("Equal", ins, &[t], &[]);
        self.push("Not", &[t], outs, &[]);
        Ok(())
    }

    pub(crate) fn write_rsqrt(&mut self, ins: &[Name], outs: &[Name]) -> Result<(), OnnxError> {
        let t = self.tmp("sqrt");
        self.push("Sqrt", ins, &[t], &[]);
        self.push("Reciprocal", &[t], outs, &[]);
        Ok(())
    }

    pub(crate) fn write_silu(&mut self, ins: &[Name], outs: &[Name]) -> Result<(), OnnxError> {
        let t = self.tmp("sigmoid");
        self.push("Sigmoid", ins, &[t], &[]);
        self.push("Mul", &[ins[0], t], outs, &[]);
        Ok(())
    }

    pub(crate) fn write_dropout(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        // Inference-mode dropout is the identity whatever `p` is (a symbolic `p` too).
        let train = attrs.bool("train").map_err(|e| self.bad(e))?;
        if train && attrs.get("p") != Some(&AttrValue::Float(0.0)) {
            return Err(self.err("training-mode dropout has no ONNX inference form"));
        }
        self.push("Identity", ins, outs, &[]);
        Ok(())
    }

    pub(crate) fn write_masked_fill(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let dtype = self.meta(node.operands()[0])?.dtype;
        // A fill value known only at run time (`seq`) is computed from the shapes.
        let value = match attrs.get("value") {
            Some(AttrValue::Sym(e)) => self.sym_scalar_as(e, dtype)?,
            _ => {
                let fill = attrs.float("value").map_err(|e| self.bad(e))?;
                self.init("value", &Tensor::full(dtype, &[], fill))
            }
        };
        self.push("Where", &[ins[1], value, ins[0]], outs, &[]);
        Ok(())
    }
}
