//! Shape arithmetic folded at import.
//!
//! Exporters compute reshape targets and mask sizes at run time:
//! `Shape → Gather → Unsqueeze → Concat → Reshape` is what every TorchScript export
//! does before a head split. Here each such value is tracked as a list of symbolic
//! integers ([`SymTensor`]): `Shape(x)` of an `f32[batch, seq, 768]` is
//! `[batch, seq, 768]`, and `Gather`, `Slice`, `Concat`, `Unsqueeze`, `Squeeze`,
//! `Reshape`, `Cast`, arithmetic, comparisons, `Where`, `Max` and `Min` on such values are
//! evaluated symbolically. The value becomes a constant where it is static, else one
//! `sym_ints` node; the ops that read it as a shape (`Reshape`, `Expand`,
//! `ConstantOfShape`, `Range`, `Slice`) read the symbolic value instead and become
//! ordinary vocabulary ops with symbolic attributes, so the `sym_ints` nodes are dead and
//! dead-code removal drops the shape subgraph.
//!
//! What cannot be decided (a comparison of two unrelated symbols, a value read from
//! data) is not folded: the node is imported as it stands.

use crate::graph::Graph;
use crate::graph::Value;
use crate::ir::sym::bounds::Bounds;
use crate::ir::sym::in_force;
use crate::meta::DType;
use crate::meta::Sign;
use crate::meta::SymExpr;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use graphrw_kernels::Tensor;
use smallvec::smallvec;

/// The most entries a tracked shape value may have (a shape, a few indices).
pub(crate) const MAX_SHAPE_VALUES: usize = 64;

/// A small integer (or bool) tensor of rank 0 or 1 whose entries are symbolic.
#[derive(Clone, Debug)]
pub(crate) struct SymTensor {
    pub(crate) values: Vec<SymExpr>,
    /// Rank 0 (one value) rather than rank 1.
    pub(crate) scalar: bool,
    /// `I64`, `I32` or `Bool` (bools are 0 and 1).
    pub(crate) dtype: DType,
}

impl SymTensor {
    /// The symbolic value of `v`: a small int or bool constant, or a `sym_ints` node.
    pub(crate) fn of(graph: &Graph, v: Value) -> Option<SymTensor> {
        let node = graph.node(v.node)?;
        if node.op().is(Op::SymInts) {
            let a = node.attrs();
            return Some(SymTensor {
                values: a.sym_ints("values").ok()?.into_owned(),
                scalar: a.bool("scalar").ok()?,
                dtype: DType::I64,
            });
        }
        if !node.op().is(Op::Constant) {
            return None;
        }
        let t = node.payload()?;
        let int = matches!(t.dtype(), DType::I64 | DType::I32 | DType::Bool);
        if !int || t.rank() > 1 || t.numel() > MAX_SHAPE_VALUES {
            return None;
        }
        Some(SymTensor {
            values: t.to_i64_vec().into_iter().map(SymExpr::int).collect(),
            scalar: t.rank() == 0,
            dtype: t.dtype(),
        })
    }

    pub(crate) fn list(values: Vec<SymExpr>, dtype: DType) -> SymTensor {
        SymTensor {
            values,
            scalar: false,
            dtype,
        }
    }

    /// The entries when every one is a constant.
    pub(crate) fn consts(&self) -> Option<Vec<i64>> {
        self.values.iter().map(SymExpr::as_const).collect()
    }
}

/// True for the ONNX ops folded here (a `match`: it runs for every node imported).
pub(crate) fn folds(op_type: &str) -> bool {
    matches!(
        op_type,
        "Shape"
            | "Size"
            | "Identity"
            | "Gather"
            | "Unsqueeze"
            | "Squeeze"
            | "Concat"
            | "Slice"
            | "Cast"
            | "Reshape"
            | "Add"
            | "Sub"
            | "Mul"
            | "Div"
            | "Mod"
            | "Neg"
            | "Max"
            | "Min"
            | "Equal"
            | "Less"
            | "Greater"
            | "LessOrEqual"
            | "GreaterOrEqual"
            | "Not"
            | "And"
            | "Or"
            | "Where"
            | "ConstantOfShape"
            | "Range"
    )
}

impl<'m> Importer<'m> {
    /// Folds a node of shape arithmetic into a constant or a `sym_ints` node; `None`
    /// when it is not shape arithmetic (or not decidable), to import as it stands.
    pub(crate) fn fold_shape(&mut self, at: &At<'m, '_>) -> Result<Option<Outs>, OnnxError> {
        if at.output.len() != 1 || !folds(at.op_type) {
            return Ok(None);
        }
        let folded = match at.op_type {
            "Shape" => self.shape_of(at)?,
            "Where" => match self.broadcast_of(at) {
                Some(t) => Some(t),
                None => self.fold_inputs(at)?,
            },
            "Size" => {
                let x = self.req(at, 0)?;
                let known = self
                    .graph
                    .node(x.node)
                    .is_some_and(|n| n.is_known(x.output as usize));
                let numel = self.meta(x)?.shape.numel_expr();
                match (known, numel) {
                    (true, Some(n)) => Some(SymTensor {
                        values: vec![n],
                        scalar: true,
                        dtype: DType::I64,
                    }),
                    _ => None,
                }
            }
            _ => self.fold_inputs(at)?,
        };
        let Some(t) = folded else {
            return Ok(None);
        };
        Ok(Some(smallvec![self.materialise(at, t)?]))
    }

    /// A node of shape arithmetic over inputs that are all symbolic values, evaluated.
    fn fold_inputs(&mut self, at: &At<'m, '_>) -> Result<Option<SymTensor>, OnnxError> {
        let mut ins = Vec::with_capacity(at.input.len());
        for i in 0..at.input.len() {
            if at.input[i].is_empty() {
                ins.push(None);
                continue;
            }
            let v = self.req(at, i)?;
            match SymTensor::of(&self.graph, v) {
                Some(t) => ins.push(Some(t)),
                None => return Ok(None),
            }
        }
        if ins.iter().all(Option::is_none) {
            return Ok(None);
        }
        Ok(eval(at, &ins))
    }

    /// `Where(Equal(x, 1), y, x)` where `x == 1` is not decided: numpy's broadcast of
    /// the sizes `x` and `y`, as the exporter writes a `broadcast(x, y)` dim
    /// (`shape_arith/write.rs`), read back into that atom.
    fn broadcast_of(&mut self, at: &At<'m, '_>) -> Option<SymTensor> {
        if at.input.len() != 3 {
            return None;
        }
        let (c, y, x) = (
            self.req(at, 0).ok()?,
            self.req(at, 1).ok()?,
            self.req(at, 2).ok()?,
        );
        let eq = self.graph.node(c.node)?;
        let [a, one] = eq.operands() else {
            return None;
        };
        let is_one = SymTensor::of(&self.graph, *one)?
            .values
            .iter()
            .all(|v| v.as_const() == Some(1));
        if eq.op().name != "eq" || *a != x || !is_one {
            return None;
        }
        let (x, y) = (
            SymTensor::of(&self.graph, x)?,
            SymTensor::of(&self.graph, y)?,
        );
        elementwise(&x, &y, x.dtype, |a, b| {
            SymExpr::broadcast(&[a.clone(), b.clone()])
        })
    }

    /// `Shape(x)` from the metadata of `x` (`start`/`end` since opset 15).
    pub(crate) fn shape_of(&mut self, at: &At<'m, '_>) -> Result<Option<SymTensor>, OnnxError> {
        let x = self.req(at, 0)?;
        if !self
            .graph
            .node(x.node)
            .is_some_and(|n| n.is_known(x.output as usize))
        {
            return Ok(None);
        }
        let dims: Vec<SymExpr> = self
            .meta(x)?
            .shape
            .dims()
            .iter()
            .map(|d| d.to_expr())
            .collect();
        let r = dims.len() as i64;
        let clamp = |p: i64| if p < 0 { (p + r).max(0) } else { p.min(r) };
        let start = clamp(at.int("start", 0)?);
        let end = clamp(at.int("end", r)?).max(start);
        Ok(Some(SymTensor::list(
            dims[start as usize..end as usize].to_vec(),
            DType::I64,
        )))
    }

    /// A constant where every entry is known, else a `sym_ints` node (cast to `i32`
    /// where the value is `i32`).
    pub(crate) fn materialise(
        &mut self,
        at: &At<'m, '_>,
        t: SymTensor,
    ) -> Result<Value, OnnxError> {
        let shape = if t.scalar {
            vec![]
        } else {
            vec![t.values.len()]
        };
        if let Some(c) = t.consts() {
            let data = Tensor::from_vec(shape, c)
                .and_then(|x| graphrw_kernels::cpu::cast(&x, t.dtype))
                .map_err(|e| at.err(e.to_string()))?;
            let v = self.graph.add_constant(data);
            self.made.push(v.node);
            return Ok(v);
        }
        let v = self.op1(
            at,
            Op::SymInts,
            &[],
            &[
                ("values", AttrValue::Dims(t.values)),
                ("scalar", AttrValue::Bool(t.scalar)),
            ],
        )?;
        if t.dtype == DType::I64 {
            return Ok(v);
        }
        self.op1(at, Op::Cast, &[v], &[("dtype", AttrValue::DType(t.dtype))])
    }

    /// Input `i` as an int list that may be symbolic: a constant (`None` where absent)
    /// or a folded shape value. A value computed from data is the error `const_ints`
    /// gives.
    pub(crate) fn shape_arg(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        what: &str,
    ) -> Result<Option<Vec<SymExpr>>, OnnxError> {
        match self.const_ints_unlimited(at, i, what) {
            Ok(v) => Ok(v.map(|v| v.into_iter().map(SymExpr::int).collect())),
            Err(e) => {
                let Some(v) = self.input(at, i)? else {
                    return Err(e);
                };
                match SymTensor::of(&self.graph, v) {
                    Some(t) if t.dtype != DType::Bool => Ok(Some(t.values)),
                    _ => Err(e),
                }
            }
        }
    }
}

/// The symbolic result of `at` on `ins` (each `Some` where the input is present), or
/// `None` where it is not decided.
pub(crate) fn eval(at: &At, ins: &[Option<SymTensor>]) -> Option<SymTensor> {
    let get = |i: usize| ins.get(i).and_then(Option::as_ref);
    let x = get(0)?;
    match at.op_type {
        "Identity" => Some(x.clone()),
        "Gather" => {
            let axis = at.int("axis", 0).ok()?;
            let idx = get(1)?;
            if !(axis == 0 || axis == -1) || x.scalar {
                return None;
            }
            let n = x.values.len() as i64;
            let values = idx
                .consts()?
                .into_iter()
                .map(|i| {
                    let i = if i < 0 { i + n } else { i };
                    (0..n).contains(&i).then(|| x.values[i as usize].clone())
                })
                .collect::<Option<Vec<_>>>()?;
            Some(SymTensor {
                values,
                scalar: idx.scalar,
                dtype: x.dtype,
            })
        }
        "Unsqueeze" => {
            let axes = match get(1) {
                Some(a) => a.consts()?,
                None => at.ints("axes").ok()??,
            };
            (x.scalar && matches!(axes.as_slice(), [0] | [-1]))
                .then(|| SymTensor::list(x.values.clone(), x.dtype))
        }
        "Squeeze" => {
            let axes = match get(1) {
                Some(a) => a.consts()?,
                None => at.ints("axes").ok()?.unwrap_or_default(),
            };
            let ok = !x.scalar && x.values.len() == 1 && matches!(axes.as_slice(), [] | [0] | [-1]);
            ok.then(|| SymTensor {
                values: x.values.clone(),
                scalar: true,
                dtype: x.dtype,
            })
        }
        "Concat" => {
            let axis = at.int("axis", 0).ok()?;
            if !(axis == 0 || axis == -1) {
                return None;
            }
            let mut values = Vec::new();
            for t in ins {
                let t = t.as_ref()?;
                if t.scalar {
                    return None;
                }
                values.extend(t.values.iter().cloned());
            }
            (values.len() <= MAX_SHAPE_VALUES).then(|| SymTensor::list(values, x.dtype))
        }
        "Slice" => {
            if x.scalar {
                return None;
            }
            let one = |i: usize| -> Option<i64> {
                match get(i) {
                    None => None,
                    Some(t) => match t.consts()?.as_slice() {
                        [v] => Some(*v),
                        _ => None,
                    },
                }
            };
            let (start, end) = (one(1)?, one(2)?);
            let axis = if get(3).is_some() { one(3)? } else { 0 };
            let step = if get(4).is_some() { one(4)? } else { 1 };
            if !(axis == 0 || axis == -1) || step == 0 {
                return None;
            }
            let idx = python_slice(x.values.len() as i64, start, end, step);
            Some(SymTensor::list(
                idx.into_iter().map(|i| x.values[i].clone()).collect(),
                x.dtype,
            ))
        }
        "Cast" => {
            let dtype = match at.int("to", 0).ok()? {
                6 => DType::I32,
                7 => DType::I64,
                _ => return None,
            };
            Some(SymTensor {
                values: x.values.clone(),
                scalar: x.scalar,
                dtype,
            })
        }
        "Reshape" => {
            let target = get(1)?.consts()?;
            let n = x.values.len() as i64;
            match target.as_slice() {
                [] if n == 1 => Some(SymTensor {
                    values: x.values.clone(),
                    scalar: true,
                    dtype: x.dtype,
                }),
                [d] if *d == n || *d == -1 => Some(SymTensor::list(x.values.clone(), x.dtype)),
                _ => None,
            }
        }
        "Neg" => Some(SymTensor {
            values: x.values.iter().map(SymExpr::neg).collect::<Option<_>>()?,
            scalar: x.scalar,
            dtype: x.dtype,
        }),
        "Not" if x.dtype == DType::Bool => Some(SymTensor {
            values: x
                .values
                .iter()
                .map(|v| SymExpr::int(1).sub(v))
                .collect::<Option<_>>()?,
            scalar: x.scalar,
            dtype: DType::Bool,
        }),
        "Max" | "Min" => {
            let mut acc = x.clone();
            for t in &ins[1..] {
                let op = if at.op_type == "Max" {
                    SymExpr::maximum
                } else {
                    SymExpr::minimum
                };
                acc = elementwise(&acc, t.as_ref()?, acc.dtype, op)?;
            }
            Some(acc)
        }
        "Where" => {
            let (a, b) = (get(1)?, get(2)?);
            if x.dtype != DType::Bool {
                return None;
            }
            let lens = [x.values.len(), a.values.len(), b.values.len()];
            let len = lens.iter().copied().max()?;
            if lens.iter().any(|&n| n != 1 && n != len) {
                return None;
            }
            let at = |t: &SymTensor, i: usize| t.values[i.min(t.values.len() - 1)].clone();
            let values = (0..len)
                .map(|i| {
                    Some(if at(x, i).as_const()? != 0 {
                        at(a, i)
                    } else {
                        at(b, i)
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            Some(SymTensor {
                values,
                scalar: x.scalar && a.scalar && b.scalar,
                dtype: a.dtype,
            })
        }
        "ConstantOfShape" => {
            let size = x.consts()?;
            let n: i64 = match size.as_slice() {
                [] => 1,
                [n] => *n,
                _ => return None,
            };
            if !(0..=MAX_SHAPE_VALUES as i64).contains(&n) {
                return None;
            }
            let (value, dtype) = constant_of_shape_value(at)?;
            Some(SymTensor {
                values: vec![SymExpr::int(value); n as usize],
                scalar: size.is_empty(),
                dtype,
            })
        }
        "Range" => None,
        op => {
            let y = get(1)?;
            let cmp = |f: fn(std::cmp::Ordering) -> bool| {
                move |a: &SymExpr, b: &SymExpr| -> Option<SymExpr> {
                    let ord = a.compare(b)?;
                    Some(SymExpr::int(i64::from(f(ord))))
                }
            };
            use std::cmp::Ordering::*;
            match op {
                "Add" => elementwise(x, y, x.dtype, SymExpr::add),
                "Sub" => elementwise(x, y, x.dtype, SymExpr::sub),
                "Mul" => elementwise(x, y, x.dtype, SymExpr::mul),
                "Div" => elementwise(x, y, x.dtype, int_div),
                "Mod" if at.int("fmod", 0).ok()? == 0 => elementwise(x, y, x.dtype, |a, b| {
                    a.rem_const(b.as_const().filter(|&d| d > 0)?)
                }),
                "Equal" => elementwise(x, y, DType::Bool, |a, b| {
                    Some(SymExpr::int(i64::from(a.equals(b)?)))
                }),
                "Less" => elementwise(x, y, DType::Bool, cmp(|o| o == Less)),
                "Greater" => elementwise(x, y, DType::Bool, cmp(|o| o == Greater)),
                "LessOrEqual" => elementwise(x, y, DType::Bool, cmp(|o| o != Greater)),
                "GreaterOrEqual" => elementwise(x, y, DType::Bool, cmp(|o| o != Less)),
                "And" | "Or" if x.dtype == DType::Bool && y.dtype == DType::Bool => {
                    let and = op == "And";
                    elementwise(x, y, DType::Bool, move |a, b| {
                        let (a, b) = (a.as_const()? != 0, b.as_const()? != 0);
                        Some(SymExpr::int(i64::from(if and { a && b } else { a || b })))
                    })
                }
                _ => None,
            }
        }
    }
}

/// ONNX integer division (truncating), where its value is decided: exact or by a
/// positive constant of a value that is never negative (there truncation is floor).
///
/// The model divides by `b` at run time, and integer division by 0 fails: a divisor
/// that is one term over symbols (`s`, `b*s`) proves each of them at least 1 for the
/// whole graph ([`in_force::prove`]), so that `(b*s) / s` is `b`.
pub(crate) fn int_div(a: &SymExpr, b: &SymExpr) -> Option<SymExpr> {
    if let (Some(x), Some(y)) = (a.as_const(), b.as_const()) {
        return (y != 0).then(|| SymExpr::int(x.wrapping_div(y)));
    }
    if b.as_const().is_none() {
        in_force::prove(&Bounds::divisor(b));
    }
    let bounds = in_force::current();
    let nonneg = matches!(
        a.sign_within(&bounds),
        Sign::Zero | Sign::Positive | Sign::NonNegative
    );
    let positive = b.as_const().is_some_and(|d| d > 0);
    if nonneg && positive {
        return a.div_floor(b);
    }
    // An exact quotient is the same under every rounding.
    let q = a.div_floor(b)?;
    (q.mul(b)? == *a).then_some(q)
}

/// `f` over `a` and `b` with numpy broadcasting of rank 0/1 values.
pub(crate) fn elementwise(
    a: &SymTensor,
    b: &SymTensor,
    dtype: DType,
    f: impl Fn(&SymExpr, &SymExpr) -> Option<SymExpr>,
) -> Option<SymTensor> {
    let (n, m) = (a.values.len(), b.values.len());
    let len = match (n, m) {
        _ if n == m => n,
        (1, _) => m,
        (_, 1) => n,
        _ => return None,
    };
    let values = (0..len)
        .map(|i| f(&a.values[i.min(n - 1)], &b.values[i.min(m - 1)]))
        .collect::<Option<Vec<_>>>()?;
    Some(SymTensor {
        values,
        scalar: a.scalar && b.scalar,
        dtype,
    })
}

/// The indices python's `x[start:end:step]` reads of a sequence of length `n`.
pub(crate) fn python_slice(n: i64, start: i64, end: i64, step: i64) -> Vec<usize> {
    let norm = |p: i64, lo: i64, hi: i64| {
        let p = if p < 0 { p.saturating_add(n) } else { p };
        p.clamp(lo, hi)
    };
    let mut out = Vec::new();
    if step > 0 {
        let (mut i, e) = (norm(start, 0, n), norm(end, 0, n));
        while i < e {
            out.push(i as usize);
            i += step;
        }
    } else {
        let (mut i, e) = (norm(start, -1, n - 1), norm(end, -1, n - 1));
        while i > e {
            out.push(i as usize);
            i += step;
        }
    }
    out
}

/// The integer value (and its dtype) of `ConstantOfShape`'s `value` attribute; `None`
/// for a float value or no attribute (float zeros are not a shape).
pub(crate) fn constant_of_shape_value(at: &At) -> Option<(i64, DType)> {
    let t = at.attr("value")?.t.as_ref()?;
    let t = crate::onnx::tensor_pb::tensor_from_proto(t, "value", None).ok()?;
    if t.numel() != 1 || !matches!(t.dtype(), DType::I64 | DType::I32 | DType::Bool) {
        return None;
    }
    Some((t.to_i64_vec()[0], t.dtype()))
}
