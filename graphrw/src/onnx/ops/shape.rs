//! Layout ops both ways: `Reshape`, `Expand`, `Flatten`, `Unsqueeze`, `Split` and `Slice`
//! in (constant or symbolic shape arguments), `Tile` of dims of size 1 (as an
//! `expand`), and `Pad` in constant mode with constant pads of at least 0 (as a
//! `concat` with `full` blocks, symbolic where the other dims are); `transpose`, `reshape`, `expand`, `unsqueeze`, `split` and `slice` out,
//! their shapes as initialisers or, when symbolic, as shape arithmetic
//! (`shape_arith/`).

use crate::graph::Node;
use crate::meta::normalize_axis;
use crate::meta::Dim;
use crate::meta::SymExpr;
use crate::onnx::encode::Attr;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::tensor_pb::tensor_from_proto;
use crate::onnx::tensor_pb::MAX_DIM;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use crate::Tensor;
use smallvec::smallvec;
use std::collections::HashSet;

impl<'m> Importer<'m> {
    pub(crate) fn constant_attr(&self, at: &At) -> Result<Tensor, OnnxError> {
        let Some(a) = at.attribute.first() else {
            return Err(at.bad("has no value attribute"));
        };
        if at.attribute.len() != 1 {
            return Err(at.bad("must have exactly one value attribute"));
        }
        let name = format!("{}/{}", at.name, a.name);
        let bad = |e: graphrw_kernels::KernelError| OnnxError::tensor(&name, e.to_string());
        match a.name.as_str() {
            "value" => {
                let t =
                    a.t.as_ref()
                        .ok_or_else(|| at.bad("attribute `value` holds no tensor"))?;
                tensor_from_proto(t, &name, self.dir)
            }
            "value_float" => Ok(Tensor::scalar(a.f)),
            "value_int" => Ok(Tensor::scalar(a.i)),
            "value_floats" => Tensor::from_vec(vec![a.floats.len()], a.floats.clone()).map_err(bad),
            "value_ints" => Tensor::from_vec(vec![a.ints.len()], a.ints.clone()).map_err(bad),
            other => Err(at.err(format!(
                "attribute `{other}` is not supported (string and sparse constants are not)"
            ))),
        }
    }

    pub(crate) fn reshape(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["allowzero"])?;
        at.inputs_between(2, 2)?;
        let allowzero = at.int("allowzero", 0)? != 0;
        let x = self.req(at, 0)?;
        let mut shape = self
            .shape_arg(at, 1, "shape")?
            .ok_or_else(|| at.bad("input 1 (shape) is required"))?;
        limit_sym(at, "shape", &shape)?;
        if !allowzero {
            let meta = self.meta(x)?;
            for (i, d) in shape.iter_mut().enumerate() {
                if d.as_const() == Some(0) {
                    *d = match meta.shape.dims().get(i) {
                        Some(dim) => dim.to_expr(),
                        None => return Err(at.bad(format!("shape entry {i} is 0 (copy the input's dim), but the input {} has no dim {i}", meta.shape))),
                    };
                }
            }
        }
        Ok(smallvec![self.op1(
            at,
            Op::Reshape,
            &[x],
            &[("shape", AttrValue::sym_ints(shape))],
        )?])
    }

    pub(crate) fn slice(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let x = self.req(at, 0)?;
        let (starts, ends, axes, steps) = if self.opset < 10 {
            // Slice-1: starts, ends and axes are attributes, no steps.
            at.only_attrs(&["starts", "ends", "axes"])?;
            at.inputs_between(1, 1)?;
            let starts = at
                .ints("starts")?
                .ok_or_else(|| at.bad("attribute `starts` is required"))?;
            let ends = at
                .ints("ends")?
                .ok_or_else(|| at.bad("attribute `ends` is required"))?;
            let n = starts.len();
            let axes = at.ints("axes")?.unwrap_or_else(|| (0..n as i64).collect());
            limit_ints(at, "axes", &axes)?;
            let sym = |v: Vec<i64>| v.into_iter().map(SymExpr::int).collect::<Vec<_>>();
            (sym(starts), sym(ends), axes, vec![1; n])
        } else {
            at.only_attrs(&[])?;
            at.inputs_between(3, 5)?;
            let starts = self
                .shape_arg(at, 1, "starts")?
                .ok_or_else(|| at.bad("input 1 (starts) is required"))?;
            let ends = self
                .shape_arg(at, 2, "ends")?
                .ok_or_else(|| at.bad("input 2 (ends) is required"))?;
            let n = starts.len();
            let axes = self
                .const_ints(at, 3, "axes")?
                .unwrap_or_else(|| (0..n as i64).collect());
            let steps = self
                .const_ints(at, 4, "steps")?
                .unwrap_or_else(|| vec![1; n]);
            (starts, ends, axes, steps)
        };
        let n = starts.len();
        if ends.len() != n || axes.len() != n || steps.len() != n {
            return Err(at.bad(format!(
                "starts, ends, axes and steps must have one length, found {}, {}, {}, {}",
                n,
                ends.len(),
                axes.len(),
                steps.len()
            )));
        }
        let mut v = x;
        let rank = self.meta(x)?.rank();
        let mut seen = HashSet::new();
        for k in 0..n {
            let axis = normalize_axis(axes[k], rank).ok_or_else(|| {
                at.bad(format!("axis {} is out of range for rank {rank}", axes[k]))
            })?;
            if !seen.insert(axis) {
                return Err(at.bad(format!("axes {axes:?} repeat axis {axis}")));
            }
            if steps[k] == 0 {
                return Err(at.bad(format!("step 0 on axis {axis} (steps must not be 0)")));
            }
            if steps[k] < 1 {
                return Err(at.err(format!(
                    "step {} is not supported (only positive steps)",
                    steps[k]
                )));
            }
            let (start, end) = match (starts[k].as_const(), ends[k].as_const()) {
                (Some(s), Some(e)) => (s, e),
                _ => {
                    // A bound known only at run time (`x[:, :seq]`): taken as in range
                    // (`slice`'s inference says so; the run checks it).
                    let sym = |e: &SymExpr| match e.as_const() {
                        Some(c) => int_attr(c),
                        None => AttrValue::Sym(e.clone()),
                    };
                    let attrs = [
                        ("dim", int_attr(axis as i64)),
                        ("start", sym(&starts[k])),
                        ("end", sym(&ends[k])),
                        ("step", int_attr(steps[k])),
                    ];
                    v = self.op1(at, Op::Slice, &[v], &attrs)?;
                    continue;
                }
            };
            let (mut start, mut end) = (start, end);
            match self.meta(v)?.shape.dims()[axis] {
                Dim::Known(len) => {
                    let len = len as i64;
                    let clamp = |p: i64| if p < 0 { (p + len).max(0) } else { p.min(len) };
                    start = clamp(start);
                    end = clamp(end).max(start);
                }
                Dim::Sym(_) | Dim::Expr(_) => {
                    let lim = MAX_DIM as i64;
                    start = start.clamp(-lim, lim);
                    end = if end >= lim { i64::MAX } else { end.max(-lim) };
                }
            }
            let attrs = [
                ("dim", int_attr(axis as i64)),
                ("start", int_attr(start)),
                ("end", int_attr(end)),
                ("step", int_attr(steps[k])),
            ];
            v = self.op1(at, Op::Slice, &[v], &attrs)?;
        }
        Ok(smallvec![v])
    }

    /// The `axes` of Unsqueeze: an attribute before opset 13, input 1 since.
    pub(crate) fn axes(&mut self, at: &At<'m, '_>) -> Result<Option<Vec<i64>>, OnnxError> {
        if self.opset < 13 {
            at.only_attrs(&["axes"])?;
            at.inputs_between(1, 1)?;
            let axes = at.ints("axes")?;
            if let Some(a) = &axes {
                limit_ints(at, "axes", a)?;
            }
            return Ok(axes);
        }
        at.only_attrs(&[])?;
        self.const_ints(at, 1, "axes")
    }

    pub(crate) fn expand(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[])?;
        at.inputs_between(2, 2)?;
        let x = self.req(at, 0)?;
        let shape = self
            .shape_arg(at, 1, "shape")?
            .ok_or_else(|| at.bad("input 1 (shape) is required"))?;
        limit_sym(at, "shape", &shape)?;
        let meta = self.meta(x)?;
        let r = meta.rank();
        let out_rank = r.max(shape.len());
        let mut size = Vec::with_capacity(out_rank);
        let shown = || AttrValue::sym_ints(shape.clone());
        // ONNX broadcasts both ways: a 1 in `shape` keeps the input's dim (-1), and so
        // does an entry equal to the input's dim.
        for i in 0..out_rank {
            let s = (i + shape.len()).checked_sub(out_rank).map(|j| &shape[j]);
            let input_dim = (i + r >= out_rank).then(|| &meta.shape.dims()[i + r - out_rank]);
            size.push(match (s, input_dim) {
                (None, _) => SymExpr::int(-1),
                (Some(s), Some(_)) if s.as_const() == Some(1) => SymExpr::int(-1),
                (Some(s), Some(d)) if d.to_expr() == *s => SymExpr::int(-1),
                (Some(s), _) if s.sign() == crate::meta::Sign::Negative => {
                    return Err(at.bad(format!("shape {} has a negative size {s}", shown())))
                }
                (Some(s), _) => s.clone(),
            });
        }
        Ok(smallvec![self.op1(
            at,
            Op::Expand,
            &[x],
            &[("size", AttrValue::sym_ints(size))],
        )?])
    }

    /// `Tile` that repeats only dims of size 1 is an `expand` to those counts: the
    /// TorchScript exporter writes `repeat_interleave` by one count as unsqueeze, tile,
    /// flatten (a kv-head repetition, which the attention rules then absorb into
    /// `enable_gqa`). Any other `Tile` (a dim of size other than 1 repeated) has no
    /// vocabulary op and stays opaque.
    pub(crate) fn tile(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        if self.opset < 6 {
            return Err(at.err("Tile before opset 6 (tiles and axis inputs) is not read"));
        }
        at.only_attrs(&[])?;
        at.inputs_between(2, 2)?;
        let x = self.req(at, 0)?;
        let Some(repeats) = self.shape_arg(at, 1, "repeats")? else {
            return Err(at.bad("input 1 (repeats) is required"));
        };
        limit_sym(at, "repeats", &repeats)?;
        let meta = self.meta(x)?;
        if repeats.len() != meta.rank() {
            return Err(at.bad(format!(
                "{} repeats for an input of rank {}",
                repeats.len(),
                meta.rank()
            )));
        }
        let mut size = Vec::with_capacity(repeats.len());
        for (rep, dim) in repeats.iter().zip(meta.shape.dims()) {
            size.push(match rep.as_const() {
                Some(1) => SymExpr::int(-1),
                _ if rep.sign() == crate::meta::Sign::Negative => {
                    return Err(at.bad(format!("repeats has a negative count {rep}")))
                }
                _ if dim.is_one() => rep.clone(),
                _ => return Err(at.err(format!("repeats a dim of size {dim}, not 1"))),
            });
        }
        Ok(smallvec![self.op1(
            at,
            Op::Expand,
            &[x],
            &[("size", AttrValue::sym_ints(size))],
        )?])
    }

    pub(crate) fn split(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let split_attr = if self.opset < 13 {
            at.only_attrs(&["axis", "split"])?;
            at.ints("split")?
        } else {
            at.only_attrs(&["axis", "num_outputs"])?;
            None
        };
        at.inputs_between(1, 2)?;
        let x = self.req(at, 0)?;
        let axis = at.int("axis", 0)?;
        let meta = self.meta(x)?;
        let d = normalize_axis(axis, meta.rank())
            .ok_or_else(|| at.bad(format!("axis {axis} is out of range for {}", meta.shape)))?;
        let outputs = at.output.len();
        let sizes =
            match split_attr.map_or_else(|| self.const_ints(at, 1, "split"), |s| Ok(Some(s)))? {
                Some(s) => s,
                None => {
                    let k = match at.attr("num_outputs") {
                        Some(_) => at.int("num_outputs", 0)?,
                        None => outputs as i64,
                    };
                    if k < 1 || k as usize != outputs {
                        return Err(at.bad(format!(
                            "num_outputs {k} does not match the {outputs} outputs"
                        )));
                    }
                    let Some(n) = meta.shape.dims()[d].known() else {
                        return Err(at.err(format!(
                        "splitting symbolic dim {} into equal parts needs a constant `split` input",
                        meta.shape.dims()[d]
                    )));
                    };
                    let (n, k) = (n as i64, k);
                    let chunk = if self.opset >= 18 {
                        (n + k - 1) / k
                    } else {
                        n / k
                    };
                    if self.opset < 18 && n % k != 0 {
                        return Err(at.bad(format!("dim {n} does not split evenly into {k} parts")));
                    }
                    let last = n - chunk * (k - 1);
                    if last < 0 || (last == 0 && n > 0) {
                        return Err(at.bad(format!("dim {n} cannot be split into {k} parts")));
                    }
                    let mut s = vec![chunk; k as usize - 1];
                    s.push(last);
                    s
                }
            };
        if sizes.len() != outputs {
            return Err(at.bad(format!(
                "split {sizes:?} has {} parts but the node has {outputs} outputs",
                sizes.len()
            )));
        }
        if let Some(bad) = sizes.iter().find(|&&s| s < 0) {
            return Err(at.bad(format!(
                "split sizes {sizes:?} include a negative size {bad}"
            )));
        }
        let total = sizes.iter().try_fold(0i64, |acc, &s| acc.checked_add(s));
        match (total, meta.shape.dims()[d].known()) {
            (Some(t), Some(n)) if t as u64 == n => {}
            (Some(_), None) => {}
            _ => {
                return Err(at.bad(format!(
                    "split sizes {sizes:?} do not add up to dim {} of {}",
                    d, meta.shape
                )))
            }
        }
        self.op(
            at,
            Op::Split,
            &[x],
            &[
                ("split_sizes", AttrValue::Ints(sizes)),
                ("dim", int_attr(axis)),
            ],
        )
    }
}

impl<'m> Importer<'m> {
    /// ONNX `Flatten`.
    pub(crate) fn flatten(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["axis"])?;
        let x = self.req(at, 0)?;
        let shape = self.meta(x)?.shape;
        let axis = at.int("axis", 1)?;
        let r = shape.rank();
        let a = if axis < 0 { axis + r as i64 } else { axis };
        if !(0..=r as i64).contains(&a) {
            return Err(at.bad(format!("axis {axis} is out of range for {shape}")));
        }
        let (head, tail) = shape.dims().split_at(a as usize);
        let prod = |d: &[Dim]| d.iter().map(Dim::known).product::<Option<u64>>();
        let target = match (prod(head), prod(tail)) {
            (Some(h), Some(t)) => vec![h as i64, t as i64],
            (Some(h), None) => vec![h as i64, -1],
            (None, Some(t)) => vec![-1, t as i64],
            (None, None) => return Err(at.err(format!("both halves of {shape} are symbolic"))),
        };
        Ok(smallvec![self.op1(
            at,
            Op::Reshape,
            &[x],
            &[("shape", AttrValue::Ints(target))],
        )?])
    }

    /// ONNX `Unsqueeze`.
    pub(crate) fn unsqueeze(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let x = self.req(at, 0)?;
        let axes = self
            .axes(at)?
            .ok_or_else(|| at.bad("input 1 (axes) is required"))?;
        let out_rank = self.meta(x)?.rank() + axes.len();
        let mut norm: Vec<usize> = Vec::with_capacity(axes.len());
        for &a in &axes {
            let d = normalize_axis(a, out_rank).ok_or_else(|| {
                at.bad(format!(
                    "axis {a} is out of range for output rank {out_rank}"
                ))
            })?;
            if norm.contains(&d) {
                return Err(at.bad(format!("axes {axes:?} repeat axis {d}")));
            }
            norm.push(d);
        }
        norm.sort_unstable();
        let mut v = x;
        for d in norm {
            v = self.op1(at, Op::Unsqueeze, &[v], &[("dim", int_attr(d as i64))])?;
        }
        Ok(smallvec![v])
    }
}

impl<'m> Importer<'m> {
    /// ONNX `Pad`, constant mode, constant pads of at least 0 (`F.pad(x, (1, 0))`):
    /// per padded axis, `concat([full(before), x, full(after)], axis)`, each block as
    /// large as `x` but along the axis (symbolic sizes where `x`'s dims are). Other
    /// modes and negative pads (crops) stay opaque.
    pub(crate) fn pad(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_outputs(1)?;
        let mode = at.string("mode", "constant")?;
        if mode != "constant" {
            return Err(at.err(format!("mode `{mode}` is not lowered, only `constant`")));
        }
        let x = self.req(at, 0)?;
        let meta = self.meta(x)?;
        let r = meta.rank();
        let (pads, value, axes) = if self.opset < 11 {
            at.only_attrs(&["mode", "pads", "value"])?;
            at.inputs_between(1, 1)?;
            let pads = at
                .ints("pads")?
                .ok_or_else(|| at.bad("attribute `pads` is required"))?;
            (pads, f64::from(at.float("value", 0.0)?), None)
        } else {
            at.only_attrs(&["mode"])?;
            at.inputs_between(2, 4)?;
            let pads = self
                .const_ints(at, 1, "pads")?
                .ok_or_else(|| at.bad("input 1 (pads) is required"))?;
            let value = match self.const_input(at, 2, "constant_value")? {
                Some(t) if t.numel() == 1 => t.to_f64_vec().first().copied().unwrap_or(0.0),
                Some(t) => {
                    return Err(at.bad(format!(
                        "constant_value must be one element, found shape {:?}",
                        t.shape()
                    )))
                }
                None => 0.0,
            };
            (pads, value, self.const_ints(at, 3, "axes")?)
        };
        let axes: Vec<i64> = axes.unwrap_or_else(|| (0..r as i64).collect());
        if pads.len() != 2 * axes.len() {
            return Err(at.bad(format!(
                "{} pads for {} axes: expected two per axis",
                pads.len(),
                axes.len()
            )));
        }
        if pads.iter().any(|&p| p < 0) {
            return Err(at.err(format!("negative pads {pads:?} (a crop) are not lowered")));
        }
        let n = axes.len();
        let mut y = x;
        for (i, &a) in axes.iter().enumerate() {
            let d = normalize_axis(a, r)
                .ok_or_else(|| at.bad(format!("axis {a} is out of range for {}", meta.shape)))?;
            let (before, after) = (pads[i], pads[n + i]);
            if before == 0 && after == 0 {
                continue;
            }
            let mut parts = Vec::with_capacity(3);
            for (width, first) in [(before, true), (after, false)] {
                if width == 0 {
                    continue;
                }
                let mut size: Vec<SymExpr> = self
                    .meta(y)?
                    .shape
                    .dims()
                    .iter()
                    .map(Dim::to_expr)
                    .collect();
                size[d] = SymExpr::int(width);
                let attrs = [
                    ("size", AttrValue::sym_ints(size)),
                    ("value", AttrValue::Float(value)),
                    ("dtype", AttrValue::DType(meta.dtype)),
                ];
                let block = self.op1(at, Op::Full, &[], &attrs)?;
                if first {
                    parts.push(block);
                    parts.push(y);
                } else {
                    if parts.is_empty() {
                        parts.push(y);
                    }
                    parts.push(block);
                }
            }
            y = self.op1(at, Op::Concat, &parts, &[("dim", int_attr(d as i64))])?;
        }
        Ok(smallvec![y])
    }
}

impl<'g> Exporter<'g> {
    pub(crate) fn write_transpose(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let r = self.meta(node.operands()[0])?.rank();
        let d0 = normalize_axis(attrs.int("dim0").map_err(|e| self.bad(e))?, r)
            .ok_or_else(|| self.err("dim0 out of range"))?;
        let d1 = normalize_axis(attrs.int("dim1").map_err(|e| self.bad(e))?, r)
            .ok_or_else(|| self.err("dim1 out of range"))?;
        let mut perm: Vec<i64> = (0..r as i64).collect();
        perm.swap(d0, d1);
        self.push("Transpose", ins, outs, &[a_ints("perm", perm)]);
        Ok(())
    }

    /// `reshape` with symbolic arguments: written as shape arithmetic.
    fn write_reshape_sym(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let shape = attrs.sym_ints("shape").map_err(|e| self.bad(e))?;
        let s = self.sym_list(&shape)?;
        self.push("Reshape", &[ins[0], s], outs, &[]);
        Ok(())
    }

    /// `expand` with symbolic arguments: written as shape arithmetic.
    fn write_expand_sym(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let size: Vec<SymExpr> = attrs
            .sym_ints("size")
            .map_err(|e| self.bad(e))?
            .iter()
            .map(|d| {
                if d.as_const() == Some(-1) {
                    SymExpr::int(1)
                } else {
                    d.clone()
                }
            })
            .collect();
        let s = self.sym_list(&size)?;
        self.push("Expand", &[ins[0], s], outs, &[]);
        Ok(())
    }

    /// `slice` with symbolic arguments: written as shape arithmetic.
    fn write_slice_sym(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let mut i: Names8 = smallvec![ins[0]];
        for what in ["start", "end", "dim", "step"] {
            let v = attrs.sym_int(what).map_err(|e| self.bad(e))?;
            i.push(self.sym_list(&[v])?);
        }
        self.push("Slice", &i, outs, &[]);
        Ok(())
    }

    pub(crate) fn write_reshape(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        if attrs.get("shape").is_some_and(AttrValue::is_symbolic) {
            return self.write_reshape_sym(node, ins, outs);
        }
        let shape = attrs.ints("shape").map_err(|e| self.bad(e))?;
        let zero = shape.contains(&0);
        let s = self.init_ints("shape", shape)?;
        let allow = [a_int("allowzero", 1)];
        let a: &[Attr] = if zero { &allow } else { &[] };
        self.push("Reshape", &[ins[0], s], outs, a);
        Ok(())
    }

    pub(crate) fn write_expand(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        if attrs.get("size").is_some_and(AttrValue::is_symbolic) {
            return self.write_expand_sym(node, ins, outs);
        }
        let size: Vec<i64> = attrs
            .ints("size")
            .map_err(|e| self.bad(e))?
            .iter()
            .map(|&d| if d == -1 { 1 } else { d })
            .collect();
        let s = self.init_ints("shape", &size)?;
        self.push("Expand", &[ins[0], s], outs, &[]);
        Ok(())
    }

    pub(crate) fn write_unsqueeze(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let dim = attrs.int("dim").map_err(|e| self.bad(e))?;
        let a = self.init_ints("axes", &[dim])?;
        self.push("Unsqueeze", &[ins[0], a], outs, &[]);
        Ok(())
    }

    pub(crate) fn write_split(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        let sizes = attrs.ints("split_sizes").map_err(|e| self.bad(e))?;
        let dim = attrs.int("dim").map_err(|e| self.bad(e))?;
        let s = self.init_ints("split", sizes)?;
        self.push("Split", &[ins[0], s], outs, &[a_int("axis", dim)]);
        Ok(())
    }

    pub(crate) fn write_slice(
        &mut self,
        node: &Node,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<(), OnnxError> {
        let attrs = node.attrs();
        if ["start", "end"]
            .iter()
            .any(|n| attrs.get(n).is_some_and(AttrValue::is_symbolic))
        {
            return self.write_slice_sym(node, ins, outs);
        }
        let mut i: Names8 = smallvec![ins[0]];
        for what in ["start", "end", "dim", "step"] {
            let v = attrs.int(what).map_err(|e| self.bad(e))?;
            i.push(self.init_ints(what, &[v])?);
        }
        self.push("Slice", &i, outs, &[]);
        Ok(())
    }
}
