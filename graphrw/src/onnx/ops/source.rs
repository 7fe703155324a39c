//! Ops that make a tensor from nothing: `Constant`, `ConstantOfShape` and `Range` in;
//! `full`/`zeros`/`ones`, `arange` and `sym_ints` out.

use crate::graph::Node;
use crate::meta::DType;
use crate::meta::SymExpr;
use crate::onnx::encode::Attr;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::ops::shape_arith::SymTensor;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::tensor_pb::{dtype_to_onnx, tensor_from_proto, tensor_to_proto};
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use crate::Tensor;
use smallvec::smallvec;

impl<'m> Importer<'m> {
    /// ONNX `Constant`.
    pub(crate) fn constant(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let t = self.constant_attr(at)?;
        let v = self.graph.add_constant(t);
        self.graph.set_name(v.node, at.name.to_string());
        Ok(smallvec![v])
    }

    /// ONNX `ConstantOfShape`.
    pub(crate) fn constant_of_shape(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["value"])?;
        let size = self
            .shape_arg(at, 0, "shape")?
            .ok_or_else(|| at.bad("input 0 (shape) is required"))?;
        limit_sym(at, "shape", &size)?;
        let size = AttrValue::sym_ints(size);
        let (dtype, value) = match at.attr("value") {
            Some(a) => {
                let t =
                    a.t.as_ref()
                        .ok_or_else(|| at.bad("attribute `value` holds no tensor"))?;
                let t = tensor_from_proto(t, &format!("{}/value", at.name), None)?;
                if t.numel() != 1 {
                    return Err(at.bad("attribute `value` must hold one element"));
                }
                (t.dtype(), t.to_f64_vec().first().copied().unwrap_or(0.0))
            }
            None => (DType::F32, 0.0),
        };
        let attrs = [
            ("size", size),
            ("value", AttrValue::Float(value)),
            ("dtype", AttrValue::DType(dtype)),
        ];
        Ok(smallvec![self.op1(at, Op::Full, &[], &attrs)?])
    }

    /// ONNX `Range`.
    pub(crate) fn range(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[])?;
        let mut bounds = [AttrValue::Float(0.0), AttrValue::Null, AttrValue::Null];
        let mut dtype = DType::I64;
        for (i, what) in ["start", "limit", "delta"].into_iter().enumerate() {
            match self.const_input(at, i, what) {
                Ok(Some(t)) => {
                    if t.numel() != 1 {
                        return Err(at.bad(format!("{what} must be a scalar")));
                    }
                    dtype = t.dtype();
                    bounds[i] = AttrValue::Float(t.to_f64_vec().first().copied().unwrap_or(0.0));
                }
                Ok(None) => return Err(at.bad(format!("input {i} ({what}) is required"))),
                // A bound computed from shapes (`arange(seq)`), or such a bound cast to
                // a float (`arange(seq - 1, -1, -1.0)`: the exporters cast the size).
                Err(e) => match self.shape_arg(at, i, what) {
                    Ok(Some(b)) if b.len() == 1 => {
                        bounds[i] = AttrValue::sym_int(b[0].clone());
                    }
                    _ => match self.cast_shape_scalar(at, i) {
                        Some((b, cast)) => {
                            bounds[i] = AttrValue::sym_int(b);
                            dtype = cast;
                        }
                        None => return Err(e),
                    },
                },
            }
        }
        let [start, end, step] = bounds;
        let float = |v: AttrValue| match v {
            AttrValue::Int(n) => AttrValue::Float(n as f64),
            v => v,
        };
        let attrs = [
            ("start", float(start)),
            ("end", float(end)),
            ("step", float(step)),
            ("dtype", AttrValue::DType(dtype)),
        ];
        Ok(smallvec![self.op1(at, Op::Arange, &[], &attrs)?])
    }
}

impl<'m> Importer<'m> {
    /// When input `i` is `cast(n, dtype)` of one symbolic size `n`: `n` and the dtype.
    fn cast_shape_scalar(&mut self, at: &At<'m, '_>, i: usize) -> Option<(SymExpr, DType)> {
        let v = self.input(at, i).ok()??;
        let node = self.graph.node(v.node)?;
        if !node.op().is(Op::Cast) {
            return None;
        }
        let dtype = node.attrs().dtype("dtype").ok()?;
        let size = SymTensor::of(&self.graph, *node.operands().first()?)?;
        match (size.dtype, size.values.as_slice()) {
            (DType::I64 | DType::I32, [n]) => Some((n.clone(), dtype)),
            _ => None,
        }
    }
}

impl<'g> Exporter<'g> {
    /// `arange` with symbolic arguments: written as shape arithmetic.
    fn write_arange_sym(
        &mut self,
        node: &Node,
        _ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let dtype = attrs.dtype("dtype").map_err(|e| self.bad(e))?;
        let mut i = Names8::new();
        for what in ["start", "end", "step"] {
            let v = attrs.sym_int(what).map_err(|e| self.bad(e))?;
            i.push(self.sym_scalar(&v)?);
        }
        if dtype == DType::I64 {
            self.push("Range", &i, outs, &[]);
        } else {
            let r = self.tmp("range");
            self.push("Range", &i, &[r], &[]);
            self.push(
                "Cast",
                &[r],
                outs,
                &[a_int("to", dtype_to_onnx(dtype) as i64)],
            );
        }
        Ok(())
    }

    pub(crate) fn write_full(
        &mut self,
        node: &Node,
        _ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let size = attrs.sym_ints("size").map_err(|e| self.bad(e))?;
        let dtype = attrs.dtype("dtype").map_err(|e| self.bad(e))?;
        // `ConstantOfShape`'s value is an attribute: a value known only at run time is a
        // scalar computed from the shapes, expanded.
        if let Some(AttrValue::Sym(e)) = attrs.get("value") {
            let v = self.sym_scalar_as(e, dtype)?;
            let s = self.sym_list(&size)?;
            self.push("Expand", &[v, s], outs, &[]);
            return Ok(());
        }
        let value = match node.builtin() {
            Some(Op::Full) => attrs.float("value").map_err(|e| self.bad(e))?,
            Some(Op::Zeros) => 0.0,
            _ => 1.0,
        };
        let s = self.sym_list(&size)?;
        let v = tensor_to_proto("value", &Tensor::full(dtype, &[1], value));
        self.push(
            "ConstantOfShape",
            &[s],
            outs,
            &[Attr::Tensor("value", Box::new(v))],
        );
        Ok(())
    }

    pub(crate) fn write_sym_ints(
        &mut self,
        node: &Node,
        _ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let values = attrs.sym_ints("values").map_err(|e| self.bad(e))?;
        let v = self.sym_list(&values)?;
        if attrs.bool("scalar").map_err(|e| self.bad(e))? {
            let empty = self.init_ints("scalar_shape", &[])?;
            self.push("Reshape", &[v, empty], outs, &[]);
        } else {
            self.push("Identity", &[v], outs, &[]);
        }
        Ok(())
    }

    pub(crate) fn write_arange(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        if ["start", "end", "step"]
            .iter()
            .any(|n| attrs.get(n).is_some_and(AttrValue::is_symbolic))
        {
            return self.write_arange_sym(node, ins, outs);
        }
        let dtype = attrs.dtype("dtype").map_err(|e| self.bad(e))?;
        let mut i = Names8::new();
        for what in ["start", "end", "step"] {
            let v = attrs.float(what).map_err(|e| self.bad(e))?;
            i.push(self.init(what, &Tensor::full(dtype, &[], v)));
        }
        self.push("Range", &i, outs, &[]);
        Ok(())
    }
}
