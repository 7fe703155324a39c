//! Symbolic attributes written as ONNX shape arithmetic.
//!
//! A node such as `reshape(x, [batch, seq, 12, 64])` has no static shape tensor to
//! write. Each symbol is read where the graph first has it as a whole dim (a graph
//! input's `batch` is `Gather(Shape(input_ids), [0])`), expressions become `Add`,
//! `Mul`, `Div`, `Min` and `Max` of those (a `broadcast` is `Where(Equal(x, 1), y, x)`),
//! and a list is one `Concat`: the standard
//! ops onnxruntime runs at every shape. Each symbol and each list is written once per
//! model.

use crate::graph::Value;
use crate::meta::DType;
use crate::meta::Dim;
use crate::meta::Factor;
use crate::meta::Sign;
use crate::meta::SymExpr;
use crate::meta::Symbol;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::OnnxError;
use graphrw_kernels::Tensor;
use std::collections::HashMap;

impl Exporter<'_> {
    /// Where each symbol of the graph is first a whole dim: the graph inputs first,
    /// then the nodes' outputs in order (data-dependent sizes).
    pub(crate) fn symbol_sources(&self) -> HashMap<Symbol, (Value, usize)> {
        let mut out = HashMap::new();
        let mut note = |v: Value, shape: &[Dim]| {
            for (axis, d) in shape.iter().enumerate() {
                if let Dim::Sym(s) = d {
                    out.entry(s.clone()).or_insert((v, axis));
                }
            }
        };
        for &id in self.graph.inputs() {
            if let Some(n) = self.graph.node(id) {
                note(Value::from(id), n.outputs()[0].shape.dims());
            }
        }
        for &id in &self.order {
            if let Some(n) = self.graph.node(id) {
                for (o, m) in n.outputs().iter().enumerate() {
                    note(Value::new(id, o as u32), m.shape.dims());
                }
            }
        }
        out
    }

    /// The 1-D int64 value `[size of symbol]`.
    pub(crate) fn symbol(&mut self, s: &Symbol) -> Result<Name, OnnxError> {
        let key = SymExpr::sym_arc(s.clone());
        if let Some(&n) = self.shapes.exprs.get(&key) {
            return Ok(n);
        }
        if self.shapes.sources.is_none() {
            self.shapes.sources = Some(self.symbol_sources());
        }
        let source = self.shapes.sources.as_ref().and_then(|m| m.get(s)).copied();
        let Some((v, axis)) = source else {
            return Err(self.err(format!(
                "symbol `{s}` is no dim of any graph input or node output, so its size cannot be read at run time"
            )));
        };
        let of = self.name_of(v)?;
        let shape = self.tmp("shape");
        self.push("Shape", &[of], &[shape], &[]);
        let index = self.init_ints("axis", &[axis as i64])?;
        let dim = self.tmp(s);
        self.push("Gather", &[shape, index], &[dim], &[a_int("axis", 0)]);
        self.shapes.exprs.insert(key, dim);
        Ok(dim)
    }

    /// The 1-D int64 value `[e]`.
    pub(crate) fn sym_expr(&mut self, e: &SymExpr) -> Result<Name, OnnxError> {
        if let Some(&n) = self.shapes.exprs.get(e) {
            return Ok(n);
        }
        if let Some(c) = e.as_const() {
            return self.init_ints("dim", &[c]);
        }
        if let Some(s) = e.as_sym() {
            return self.symbol(&s.clone());
        }
        let mut sum: Option<Name> = None;
        let terms: Vec<(i64, Vec<Factor<'_>>)> = e.terms().collect();
        for (coeff, factors) in terms {
            let mut product: Option<Name> = None;
            for f in factors {
                let v = match f {
                    Factor::Sym(s) => self.symbol(&s.clone())?,
                    Factor::FloorDiv(x, d) => {
                        // ONNX integer division truncates: the same as flooring where
                        // the dividend is never negative. Where it may be (`(t - s) // 2`
                        // as a slice bound), `(x - x mod d) / d`, ONNX `Mod` taking the
                        // divisor's sign (`fmod` 0), so the division is exact.
                        let sign = x.sign();
                        let x = self.sym_expr(&x.clone())?;
                        let d = self.init_ints("divisor", &[d])?;
                        if matches!(sign, Sign::Zero | Sign::Positive | Sign::NonNegative) {
                            self.binary("Div", x, d)
                        } else {
                            let rem = self.binary("Mod", x, d);
                            let whole = self.binary("Sub", x, rem);
                            self.binary("Div", whole, d)
                        }
                    }
                    Factor::Min(v) | Factor::Max(v) => {
                        let op = if matches!(f, Factor::Min(..)) {
                            "Min"
                        } else {
                            "Max"
                        };
                        // ONNX `Min`/`Max` take any number of inputs.
                        let v = v.to_vec();
                        let mut ins = Names8::new();
                        for e in &v {
                            ins.push(self.sym_expr(e)?);
                        }
                        let out = self.tmp(&op.to_lowercase());
                        self.push(op, &ins, &[out], &[]);
                        out
                    }
                    Factor::Broadcast(v) => {
                        // numpy's rule for one dim, where the sizes broadcast: the
                        // first that is not 1, `where(x == 1, y, x)` folded over them
                        // (not `Max`: `broadcast(0, 1)` is 0).
                        let v = v.to_vec();
                        let one = self.init_ints("one", &[1])?;
                        let mut acc = self.sym_expr(&v[0])?;
                        for e in &v[1..] {
                            let y = self.sym_expr(e)?;
                            let is_one = self.binary("Equal", acc, one);
                            let out = self.tmp("broadcast");
                            self.push("Where", &[is_one, y, acc], &[out], &[]);
                            acc = out;
                        }
                        acc
                    }
                };
                product = Some(match product {
                    None => v,
                    Some(p) => self.binary("Mul", p, v),
                });
            }
            let term = match product {
                None => self.init_ints("dim", &[coeff])?,
                Some(p) if coeff == 1 => p,
                Some(p) => {
                    let c = self.init_ints("coeff", &[coeff])?;
                    self.binary("Mul", p, c)
                }
            };
            sum = Some(match sum {
                None => term,
                Some(s) => self.binary("Add", s, term),
            });
        }
        let v = match sum {
            Some(v) => v,
            None => self.init_ints("dim", &[0])?,
        };
        self.shapes.exprs.insert(e.clone(), v);
        Ok(v)
    }

    /// The 1-D int64 value holding `values`.
    pub(crate) fn sym_list(&mut self, values: &[SymExpr]) -> Result<Name, OnnxError> {
        if let Some(&n) = self.shapes.lists.get(values) {
            return Ok(n);
        }
        if let Some(c) = values
            .iter()
            .map(SymExpr::as_const)
            .collect::<Option<Vec<_>>>()
        {
            return self.init_ints("shape", &c);
        }
        let parts = values
            .iter()
            .map(|e| self.sym_expr(e))
            .collect::<Result<Vec<_>, _>>()?;
        let out = self.tmp("shape");
        self.push("Concat", &parts, &[out], &[a_int("axis", 0)]);
        self.shapes.lists.insert(values.to_vec(), out);
        Ok(out)
    }

    /// The int64 scalar value `e`.
    pub(crate) fn sym_scalar(&mut self, e: &SymExpr) -> Result<Name, OnnxError> {
        if let Some(c) = e.as_const() {
            return Ok(self.init_i64("scalar", c));
        }
        let v = self.sym_expr(e)?;
        let empty = self.init_ints("scalar_shape", &[])?;
        let out = self.tmp("scalar");
        self.push("Reshape", &[v, empty], &[out], &[]);
        Ok(out)
    }

    /// The scalar value `e` of `dtype`: [`Exporter::sym_scalar`], cast where `dtype` is
    /// not int64 (a fill value known only at run time).
    pub(crate) fn sym_scalar_as(&mut self, e: &SymExpr, dtype: DType) -> Result<Name, OnnxError> {
        if let Some(c) = e.as_const() {
            return Ok(self.init("scalar", &Tensor::full(dtype, &[], c as f64)));
        }
        let v = self.sym_scalar(e)?;
        if dtype == DType::I64 {
            return Ok(v);
        }
        let out = self.tmp("scalar");
        let to = i64::from(crate::onnx::tensor_pb::dtype_to_onnx(dtype));
        self.push("Cast", &[v], &[out], &[a_int("to", to)]);
        Ok(out)
    }

    pub(crate) fn binary(&mut self, op: &str, a: Name, b: Name) -> Name {
        let out = self.tmp(&op.to_ascii_lowercase());
        self.push(op, &[a, b], &[out], &[]);
        out
    }
}
