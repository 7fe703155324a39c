//! `Softmax`/`LogSoftmax` before opset 13 (flattened to 2-D around `axis`) and
//! `BatchNormalization` (inference form: `(x - mean) / sqrt(var + eps) * scale + bias`
//! over the channel dim) in.

use crate::graph::Value;
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
