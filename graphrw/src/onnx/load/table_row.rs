//! Mapping a node through its row of the ONNX table (`table/mod.rs`): arguments read where
//! the row puts them at the model's opset, held attributes, legacy broadcasting.

use crate::graph::normalize_attrs;
use crate::graph::Value;
use crate::meta::normalize_axis;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::table;
use crate::onnx::table::Absent;
use crate::onnx::table::Arg;
use crate::onnx::table::OnnxKind;
use crate::onnx::table::OpMap;
use crate::onnx::table::Quirk;
use crate::onnx::tensor_pb::dtype_from_onnx;
use crate::onnx::tensor_pb::MAX_DIM;
use crate::onnx::OnnxError;
use crate::ops::AttrKind;
use crate::ops::AttrValue;
use crate::ops::Op;
use crate::ops::OpDef;
use smallvec::smallvec;
use smallvec::SmallVec;

impl<'m> Importer<'m> {
    /// Maps a node through its table row: the attributes, held values, inputs and
    /// outputs it reads are checked, each argument is read where the row puts it at
    /// this opset, and the vocabulary op is added (a chain of it for a folded variadic
    /// op). The row's quirk is the one hand-written step.
    pub(crate) fn map_row(
        &mut self,
        at: &At<'m, '_>,
        row: &'static OpMap,
    ) -> Result<Outs, OnnxError> {
        let def: &'static OpDef = row.op;
        let legacy = row.quirk == Quirk::LegacyBroadcast && self.opset < 7;
        let opset = self.opset;
        at.only_attrs_of(
            |name| row_attrs(row, opset, legacy).any(|k| k == name),
            || row_attrs(row, opset, legacy).collect(),
        )?;
        for h in row.held {
            at.held(h)?;
        }
        at.only_outputs(1)?;
        let max_inputs = row
            .args
            .iter()
            .filter_map(|a| a.place.input_at(self.opset))
            .fold(row.operands.1, |m, i| m.max(i + 1));
        at.inputs_between(row.operands.0, max_inputs)?;
        let count = at.input.len().min(row.operands.1);
        let mut operands: SmallVec<[Value; 4]> = SmallVec::with_capacity(count);
        for i in 0..count {
            if i < row.operands.0 {
                operands.push(self.req(at, i)?);
            } else if let Some(v) = self.input(at, i)? {
                operands.push(v);
            }
        }
        let mut attrs: SmallVec<[(&str, AttrValue); 4]> = SmallVec::with_capacity(row.args.len());
        for a in row.args {
            attrs.push((a.ours, self.read_arg(at, def, a, &operands)?));
        }
        match row.quirk {
            Quirk::LegacyBroadcast if legacy => self.legacy_broadcast(at, &mut operands)?,
            Quirk::ReduceNoop => {
                let dims = attrs.iter().find(|(n, _)| *n == "dims");
                let empty = matches!(dims, Some((_, AttrValue::Ints(d))) if d.is_empty());
                if empty && at.int("noop_with_empty_axes", 0)? != 0 {
                    return Ok(smallvec![self.req(at, 0)?]);
                }
            }
            Quirk::ConcatTotal => self.concat_total(at, &operands, &attrs)?,
            _ => {}
        }
        if row.fold {
            let mut rest = operands.into_iter();
            let mut acc = rest
                .next()
                .ok_or_else(|| at.bad("takes at least one input"))?;
            for x in rest {
                let values = normalize_attrs(def, &attrs).map_err(|e| graph_error(at, e))?;
                acc = self
                    .add(at, def, &[acc, x], values)?
                    .first()
                    .copied()
                    .ok_or_else(|| at.err(format!("`{}` made no output", def.name)))?;
            }
            return Ok(smallvec![acc]);
        }
        self.op_taking(at, def, &operands, &mut attrs)
    }

    /// One argument of a table row, as the vocabulary attribute: read from the
    /// attribute or constant input the row names at this opset (ONNX's default when
    /// absent), its kind, range and choices checked.
    pub(crate) fn read_arg(
        &mut self,
        at: &At<'m, '_>,
        def: &OpDef,
        a: &Arg,
        operands: &[Value],
    ) -> Result<AttrValue, OnnxError> {
        let rank = |imp: &Self| -> Result<usize, OnnxError> {
            let x = operands
                .first()
                .ok_or_else(|| at.bad(format!("`{}` needs an input", a.onnx)))?;
            Ok(imp.meta(*x)?.rank())
        };
        let kind = def
            .attrs
            .iter()
            .find(|s| s.name == a.ours)
            .map(|s| s.kind)
            .ok_or_else(|| at.err(format!("`{}` has no attribute `{}`", def.name, a.ours)))?;
        let input = a.place.input_at(self.opset);
        // An int input computed from shapes (`Trilu`'s `k` of a cache's length) is a
        // symbolic attribute.
        let symbolic = match (input, a.kind) {
            (Some(i), OnnxKind::Int | OnnxKind::Ints) => match self.const_ints(at, i, a.onnx) {
                Ok(_) => None,
                Err(e) => match self.shape_arg(at, i, a.onnx) {
                    Ok(Some(v)) => Some(v),
                    _ => return Err(e),
                },
            },
            _ => None,
        };
        let given = match (input, a.kind) {
            _ if symbolic.is_some() => match (symbolic, a.kind) {
                (Some(v), OnnxKind::Int) if v.len() == 1 => {
                    Some(AttrValue::sym_int(v.into_iter().next().unwrap_or_default()))
                }
                (Some(v), OnnxKind::Ints) => Some(AttrValue::sym_ints(v)),
                _ => return Err(at.err(format!("{} input must hold one value", a.onnx))),
            },
            (Some(i), OnnxKind::Int) => match self.const_ints(at, i, a.onnx)? {
                None => None,
                Some(v) if v.len() == 1 => Some(AttrValue::Int(v[0])),
                Some(v) => {
                    return Err(at.bad(format!(
                        "{} input must hold one value, found {}",
                        a.onnx,
                        v.len()
                    )))
                }
            },
            (Some(i), OnnxKind::Ints) => self.const_ints(at, i, a.onnx)?.map(AttrValue::Ints),
            (Some(i), _) => {
                return Err(at.err(format!("input {i} ({}) is not an int input", a.onnx)))
            }
            (None, _) if at.attr(a.onnx).is_none() => None,
            (None, OnnxKind::Int) => Some(AttrValue::Int(at.int(a.onnx, 0)?)),
            (None, OnnxKind::Ints) => {
                let v = at.ints(a.onnx)?.unwrap_or_default();
                limit_ints(at, a.onnx, &v)?;
                Some(AttrValue::Ints(v))
            }
            (None, OnnxKind::Float) => Some(AttrValue::Float(f64::from(at.float(a.onnx, 0.0)?))),
            (None, OnnxKind::Str) => Some(AttrValue::Str(at.string(a.onnx, "")?)),
        };
        let value = match (given, a.absent) {
            (Some(v), _) => v,
            (None, Absent::Required) => {
                return Err(at.bad(match input {
                    Some(i) => format!("input {i} ({}) is required", a.onnx),
                    None => format!("attribute `{}` is required", a.onnx),
                }))
            }
            (None, Absent::Int(v)) => AttrValue::Int(v),
            (None, Absent::Ints(v)) => AttrValue::Ints(v.to_vec()),
            (None, Absent::Float(v)) => AttrValue::Float(f64::from(v)),
            (None, Absent::Str(v)) => AttrValue::Str(v.to_string()),
            (None, Absent::Reversed) => AttrValue::Ints((0..rank(self)? as i64).rev().collect()),
        };
        if let Some((lo, hi)) = a.range {
            let out = match &value {
                AttrValue::Int(v) => !(lo..=hi).contains(v),
                AttrValue::Ints(v) => v.iter().any(|x| !(lo..=hi).contains(x)),
                _ => false,
            };
            let below = match &value {
                AttrValue::Int(v) => *v < lo,
                AttrValue::Ints(v) => v.iter().any(|x| *x < lo),
                _ => false,
            };
            // Below the range is against the spec (a group under 1, a negative stride);
            // above it, graphrw's own limit.
            if out {
                let e = format!("{} {value} is out of range ({lo} to {hi})", a.onnx);
                return Err(if below { at.bad(e) } else { at.err(e) });
            }
        }
        if let AttrValue::Str(v) = &value {
            if !a.choices.is_empty() && !a.choices.contains(&v.as_str()) {
                return Err(at.err(format!(
                    "{} `{v}` is not supported (graphrw reads {})",
                    a.onnx,
                    a.choices.join(", ")
                )));
            }
        }
        let value = match (value, a.shape) {
            (AttrValue::Ints(p), table::Shape::SymmetricPads) => match p.as_slice() {
                &[b0, b1, e0, e1] if b0 == e0 && b1 == e1 => AttrValue::Ints(vec![b0, b1]),
                _ => {
                    return Err(at.err(format!(
                        "{} {p:?}: only symmetric 2-D padding is supported",
                        a.onnx
                    )))
                }
            },
            (AttrValue::Ints(axes), table::Shape::SortedAxes) => {
                let r = rank(self)?;
                let mut dims = Vec::with_capacity(axes.len());
                for &x in &axes {
                    let d = normalize_axis(x, r)
                        .ok_or_else(|| at.bad(format!("axis {x} is out of range for rank {r}")))?;
                    dims.push(d as i64);
                }
                dims.sort_unstable();
                dims.dedup();
                AttrValue::Ints(dims)
            }
            (v, _) => v,
        };
        Ok(match (value, kind) {
            (AttrValue::Int(v), AttrKind::Bool) => AttrValue::Bool(v != 0),
            (AttrValue::Int(v), AttrKind::DType) => {
                let code = i32::try_from(v).unwrap_or(-1);
                AttrValue::DType(dtype_from_onnx(code).map_err(|m| {
                    // An element type ONNX does not define, or one graphrw does not have.
                    match crate::onnx::malformed::elem_type_defined(code) {
                        false => at.bad(format!("`{}` {v} is not an ONNX element type", a.onnx)),
                        true => at.err(format!("`{}`: {m}", a.onnx)),
                    }
                })?)
            }
            (v, _) => v,
        })
    }

    /// Before opset 7, with `broadcast` 1, the second operand's dims line up with the
    /// first's from `axis` (default: the trailing dims): numpy broadcasting after
    /// trailing 1s are added to it.
    pub(crate) fn legacy_broadcast(
        &mut self,
        at: &At<'m, '_>,
        operands: &mut [Value],
    ) -> Result<(), OnnxError> {
        let [a, b] = operands else {
            return Err(at.err("legacy broadcasting takes two inputs"));
        };
        if at.int("broadcast", 0)? == 0 {
            return Ok(());
        }
        let (ra, rb) = (self.meta(*a)?.rank() as i64, self.meta(*b)?.rank() as i64);
        let axis = at.int("axis", ra - rb)?;
        let axis = if axis < 0 { axis + ra } else { axis };
        if axis < 0 || axis + rb > ra {
            return Err(at.bad(format!(
                "broadcast axis {axis} does not fit ranks {ra} and {rb}"
            )));
        }
        for _ in 0..ra - axis - rb {
            *b = self.op1(at, Op::Unsqueeze, &[*b], &[("dim", int_attr(-1))])?;
        }
        Ok(())
    }

    /// Refuses a `Concat` whose known dims along the axis add up past graphrw's limit.
    pub(crate) fn concat_total(
        &self,
        at: &At<'m, '_>,
        xs: &[Value],
        attrs: &[(&str, AttrValue)],
    ) -> Result<(), OnnxError> {
        let Some((_, AttrValue::Int(axis))) = attrs.iter().find(|(n, _)| *n == "dim") else {
            return Ok(());
        };
        let mut total: u64 = 0;
        for &x in xs {
            let m = self.meta(x)?;
            if let Some(d) = normalize_axis(*axis, m.rank()).and_then(|d| m.shape.dims()[d].known())
            {
                total = total.saturating_add(d);
            }
        }
        if total > MAX_DIM {
            return Err(at.err("the concatenated dim would be larger than graphrw accepts (2^48)"));
        }
        Ok(())
    }
}
