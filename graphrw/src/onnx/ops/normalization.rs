//! `Softmax`/`LogSoftmax` before opset 13 (flattened to 2-D around `axis`),
//! `BatchNormalization` (inference form: `(x - mean) / sqrt(var + eps) * scale + bias`
//! over the channel dim) and `ReduceLogSumExp` (as torch decomposes `logsumexp`:
//! `log(sum(exp(x - m))) + m` with `m` the max, or 0 where the max is infinite, so that
//! it neither overflows nor gives NaN on a row of `-inf`) in. The canonicalisation rules
//! read that form: `exp(x - logsumexp(x))` becomes `softmax(x)`.

use crate::graph::Value;
use crate::meta::normalize_axis;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use smallvec::smallvec;

impl<'m> Importer<'m> {
    /// Softmax and LogSoftmax before opset 13: the input is read as 2-D, dims before
    /// `axis` (default 1) against the rest; the same as the new op on the last axis, a
    /// reshape around it otherwise (known dims only).
    pub(crate) fn softmax_2d(
        &mut self,
        at: &At<'m, '_>,
        op: Op,
        x: Value,
    ) -> Result<Outs, OnnxError> {
        let shape = self.meta(x)?.shape;
        let r = shape.rank() as i64;
        let axis = at.int("axis", 1)?;
        let a = if axis < 0 { axis + r } else { axis };
        if !(0..r.max(1)).contains(&a) {
            return Err(at.bad(format!("axis {axis} is out of range for {shape}")));
        }
        if a == r - 1 || r == 0 {
            return Ok(smallvec![self.op1(
                at,
                op,
                &[x],
                &[("dim", int_attr(-1))]
            )?]);
        }
        let Some(dims) = shape.as_known() else {
            return Err(at.err(format!(
                "opset {} {} over the dims from {axis} of {shape} needs known dims",
                self.opset, at.op_type
            )));
        };
        let (head, tail) = dims.split_at(a as usize);
        let flat = [
            head.iter().product::<u64>() as i64,
            tail.iter().product::<u64>() as i64,
        ];
        let y = self.op1(
            at,
            Op::Reshape,
            &[x],
            &[("shape", AttrValue::Ints(flat.to_vec()))],
        )?;
        let y = self.op1(at, op, &[y], &[("dim", int_attr(-1))])?;
        let back: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        Ok(smallvec![self.op1(
            at,
            Op::Reshape,
            &[y],
            &[("shape", AttrValue::Ints(back))],
        )?])
    }

    /// BatchNormalization in inference mode: `(x - mean) * scale / sqrt(var + eps) + b`
    /// over dim 1, the per-channel parameters viewed as `[C, 1, ..]`. Training mode
    /// (more outputs, `is_test` 0 before 7, `training_mode` 1) and `spatial` 0 stay opaque.
    pub(crate) fn batch_norm(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[
            "epsilon",
            "momentum",
            "spatial",
            "is_test",
            "training_mode",
            "consumed_inputs",
        ])?;
        at.only_outputs(1)?;
        at.inputs_between(5, 5)?;
        if at.int("spatial", 1)? != 1 {
            return Err(at.err("spatial 0 is not supported"));
        }
        if self.opset < 7 && at.int("is_test", 0)? == 0 {
            return Err(at.err("is_test is 0 (training mode)"));
        }
        if at.int("training_mode", 0)? != 0 {
            return Err(at.err("training_mode is 1"));
        }
        let eps = f64::from(at.float("epsilon", 1e-5)?);
        let x = self.req(at, 0)?;
        let m = self.meta(x)?;
        if m.rank() < 2 {
            return Err(at.bad(format!("the input {} has no channel dim", m.shape)));
        }
        let mut view = vec![-1i64];
        view.resize(m.rank() - 1, 1);
        let mut p = Vec::with_capacity(4);
        for i in 1..5 {
            let v = self.req(at, i)?;
            if self.meta(v)?.dtype != m.dtype {
                return Err(at.err("parameters of another dtype than the input"));
            }
            p.push(self.op1(
                at,
                Op::Reshape,
                &[v],
                &[("shape", AttrValue::Ints(view.clone()))],
            )?);
        }
        let e = self.scalar(m.dtype, eps);
        let var = self.op1(at, Op::Add, &[p[3], e], &[])?;
        let sd = self.op1(at, Op::Sqrt, &[var], &[])?;
        let gain = self.op1(at, Op::Div, &[p[0], sd], &[])?;
        let centred = self.op1(at, Op::Sub, &[x, p[2]], &[])?;
        let scaled = self.op1(at, Op::Mul, &[centred, gain], &[])?;
        Ok(smallvec![self.op1(at, Op::Add, &[scaled, p[1]], &[])?])
    }
}

impl<'m> Importer<'m> {
    /// ONNX `Softmax`/`LogSoftmax`.
    pub(crate) fn softmax_legacy(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["axis"])?;
        let x = self.req(at, 0)?;
        let op = if at.op_type == "Softmax" {
            Op::Softmax
        } else {
            Op::LogSoftmax
        };
        self.softmax_2d(at, op, x)
    }
}

impl<'m> Importer<'m> {
    /// ONNX `ReduceLogSumExp` of a float tensor (`axes` an attribute before opset 18,
    /// an input from 18), as `torch.logsumexp` decomposes it:
    /// `m = amax(x, axes, keepdim)`, `m' = where(|m| == inf, 0, m)`,
    /// `log(sum(exp(x - m'), axes, keepdim)) + m'`, then the reduced dims squeezed
    /// unless `keepdims`. No axes reduce every dim, or, with `noop_with_empty_axes`,
    /// give the input back.
    pub(crate) fn reduce_log_sum_exp(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_outputs(1)?;
        let axes = if self.opset < 18 {
            at.only_attrs(&["axes", "keepdims"])?;
            at.inputs_between(1, 1)?;
            at.ints("axes")?
        } else {
            at.only_attrs(&["keepdims", "noop_with_empty_axes"])?;
            at.inputs_between(1, 2)?;
            self.const_ints(at, 1, "axes")?
        };
        let axes = axes.unwrap_or_default();
        let keep = at.int("keepdims", 1)? != 0;
        let x = self.req(at, 0)?;
        let meta = self.meta(x)?;
        if !meta.dtype.is_float() {
            return Err(at.err(format!("only a float input is read, found {}", meta.dtype)));
        }
        if axes.is_empty() && at.int("noop_with_empty_axes", 0)? != 0 {
            return Ok(smallvec![x]);
        }
        let r = meta.rank();
        let mut dims = Vec::with_capacity(axes.len());
        for &a in &axes {
            let d = normalize_axis(a, r)
                .ok_or_else(|| at.bad(format!("axis {a} is out of range for {}", meta.shape)))?;
            if dims.contains(&(d as i64)) {
                return Err(at.bad(format!("axes {axes:?} repeat axis {d}")));
            }
            dims.push(d as i64);
        }
        dims.sort_unstable();
        let reduce = |dims: &[i64]| {
            [
                ("dims", AttrValue::Ints(dims.to_vec())),
                ("keepdim", AttrValue::Bool(true)),
            ]
        };
        let m = self.op1(at, Op::Amax, &[x], &reduce(&dims))?;
        let abs = self.op1(at, Op::Abs, &[m], &[])?;
        let inf = self.scalar(meta.dtype, f64::INFINITY);
        let infinite = self.op1(at, Op::Eq, &[abs, inf], &[])?;
        let zero = self.scalar(meta.dtype, 0.0);
        let m = self.op1(at, Op::Where, &[infinite, zero, m], &[])?;
        let shifted = self.op1(at, Op::Sub, &[x, m], &[])?;
        let e = self.op1(at, Op::Exp, &[shifted], &[])?;
        let total = self.op1(at, Op::Sum, &[e], &reduce(&dims))?;
        let log = self.op1(at, Op::Log, &[total], &[])?;
        let lse = self.op1(at, Op::Add, &[log, m], &[])?;
        if keep {
            return Ok(smallvec![lse]);
        }
        // Every dim when no axes were given (all are 1 now).
        let squeezed = [("dims", AttrValue::Ints(dims))];
        Ok(smallvec![self.op1(at, Op::Squeeze, &[lse], &squeezed)?])
    }
}
