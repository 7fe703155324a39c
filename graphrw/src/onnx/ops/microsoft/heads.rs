//! The pieces the contrib attentions share: heads split off and merged back, the masks
//! onnxruntime builds from a key padding mask (`mask_index`, `key_padding_mask`) and
//! from `unidirectional` with a past, and the fused attention node they all end in.

use crate::graph::Value;
use crate::meta::{DType, Dim, SymExpr};
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::{AttrValue, Op};

/// onnxruntime's `mask_filter_value` when the node sets none: what a padded key adds.
pub(super) const MASK_FILTER: f32 = -10000.0;

/// The fused attention of one contrib node.
pub(super) struct Sdpa {
    /// Grouped kv heads (fewer than the query's).
    pub(super) gqa: bool,
    /// Top-left causal (`is_causal`): key `j` hidden from query `i` when `j > i`.
    pub(super) causal: bool,
    /// The node's `scale`; `None` for `1/sqrt(head_size)`.
    pub(super) scale: Option<f32>,
}

impl<'m> Importer<'m> {
    /// The dims of `v`.
    pub(super) fn dims(&self, v: Value) -> Result<Vec<Dim>, OnnxError> {
        Ok(self.meta(v)?.shape.dims().to_vec())
    }

    /// `x` of shape `[B, S, n * d]` as `[B, n, S, d]`.
    pub(super) fn split_heads(
        &mut self,
        at: &At<'m, '_>,
        x: Value,
        n: i64,
        d: i64,
    ) -> Result<Value, OnnxError> {
        let dims = self.dims(x)?;
        let shape = vec![
            dims[0].to_expr(),
            dims[1].to_expr(),
            SymExpr::int(n),
            SymExpr::int(d),
        ];
        let r = self.op1(
            at,
            Op::Reshape,
            &[x],
            &[("shape", AttrValue::sym_ints(shape))],
        )?;
        self.swap_1_2(at, r)
    }

    /// Swaps dims 1 and 2 (`[B, S, n, d]` and `[B, n, S, d]`).
    pub(super) fn swap_1_2(&mut self, at: &At<'m, '_>, x: Value) -> Result<Value, OnnxError> {
        let attrs = [("dim0", int_attr(1)), ("dim1", int_attr(2))];
        self.op1(at, Op::Transpose, &[x], &attrs)
    }

    /// `o` of shape `[B, n, S, d]` as `[B, S, n * d]`.
    pub(super) fn merge_heads(&mut self, at: &At<'m, '_>, o: Value) -> Result<Value, OnnxError> {
        let t = self.swap_1_2(at, o)?;
        let dims = self.dims(t)?;
        let width = dims[2]
            .to_expr()
            .mul(&dims[3].to_expr())
            .ok_or_else(|| at.err("the output width is too large an expression"))?;
        let shape = vec![dims[0].to_expr(), dims[1].to_expr(), width];
        self.op1(
            at,
            Op::Reshape,
            &[t],
            &[("shape", AttrValue::sym_ints(shape))],
        )
    }

    /// `x[..., start:end]` along `dim`.
    pub(super) fn slice_dim(
        &mut self,
        at: &At<'m, '_>,
        x: Value,
        dim: i64,
        start: i64,
        end: i64,
    ) -> Result<Value, OnnxError> {
        let attrs = [
            ("dim", int_attr(dim)),
            ("start", int_attr(start)),
            ("end", int_attr(end)),
            ("step", int_attr(1)),
        ];
        self.op1(at, Op::Slice, &[x], &attrs)
    }

    /// `arange(start, end)` as i64, either bound symbolic.
    pub(super) fn range_of(
        &mut self,
        at: &At<'m, '_>,
        start: SymExpr,
        end: SymExpr,
    ) -> Result<Value, OnnxError> {
        let float = |e: SymExpr| match AttrValue::sym_int(e) {
            AttrValue::Int(n) => AttrValue::Float(n as f64),
            v => v,
        };
        let attrs = [
            ("start", float(start)),
            ("end", float(end)),
            ("step", AttrValue::Float(1.0)),
            ("dtype", AttrValue::DType(DType::I64)),
        ];
        self.op1(at, Op::Arange, &[], &attrs)
    }

    /// `x` as i64.
    pub(super) fn cast_i64(&mut self, at: &At<'m, '_>, x: Value) -> Result<Value, OnnxError> {
        if self.meta(x)?.dtype == DType::I64 {
            return Ok(x);
        }
        self.op1(
            at,
            Op::Cast,
            &[x],
            &[("dtype", AttrValue::DType(DType::I64))],
        )
    }

    /// `x` with dims of 1 inserted at each of `dims` (in order).
    pub(super) fn unsqueeze_at(
        &mut self,
        at: &At<'m, '_>,
        mut x: Value,
        dims: &[i64],
    ) -> Result<Value, OnnxError> {
        for &d in dims {
            x = self.op1(at, Op::Unsqueeze, &[x], &[("dim", int_attr(d))])?;
        }
        Ok(x)
    }

    /// The additive mask (`dtype`, 0 to keep, `filter` to hide) onnxruntime makes of a
    /// key padding mask `mask` (input `i`) for `b` batches over `t` keys,
    /// shaped to broadcast over `[B, heads, S, T]`: `[B, T]` or `[B, S, T]` of 1 (keep)
    /// and 0; `[B]` key lengths (right padding); `[2B]` ends then starts (left padding).
    pub(super) fn padding_mask(
        &mut self,
        at: &At<'m, '_>,
        (i, mask): (usize, Value),
        (b, t): (&Dim, &Dim),
        filter: f64,
        dtype: DType,
    ) -> Result<Value, OnnxError> {
        let m = self.meta(mask)?;
        if !m.dtype.is_int() {
            return Err(at.bad(format!(
                "input {i} (the mask) is {}, expected int32",
                m.dtype
            )));
        }
        let dims = m.shape.dims().to_vec();
        let keep_value = self.scalar(dtype, 0.0);
        let hide_value = self.scalar(dtype, filter);
        let mismatch = |what: &str, found: &Dim, want: &Dim| {
            at.bad(format!(
                "input {i} (the mask) has {what} {found}, expected {want}"
            ))
        };
        let keep = match dims.len() {
            2 | 3 => {
                if dims[0] != *b && dims[0].known().is_some() && b.known().is_some() {
                    return Err(mismatch("batch", &dims[0], b));
                }
                let last = &dims[dims.len() - 1];
                if last != t {
                    if last.known().is_some() && t.known().is_some() {
                        return Err(mismatch("key length", last, t));
                    }
                    return Err(at.err(format!(
                        "input {i} (the mask) has key length {last}, not provably the {t} keys"
                    )));
                }
                let zero = self.scalar(m.dtype, 0.0);
                let keep = self.op1(at, Op::Gt, &[mask, zero], &[])?;
                let at_dims: &[i64] = if dims.len() == 2 { &[1, 1] } else { &[1] };
                self.unsqueeze_at(at, keep, at_dims)?
            }
            1 => {
                let keys = self.range_of(at, SymExpr::int(0), t.to_expr())?;
                let lens = self.cast_i64(at, mask)?;
                let n = dims[0].to_expr();
                let two_b = b.to_expr().scale(2);
                let keep = if dims[0] == *b {
                    let ends = self.unsqueeze_at(at, lens, &[1])?;
                    self.op1(at, Op::Lt, &[keys, ends], &[])?
                } else if Some(n) == two_b {
                    let bi = b.known().map(|v| v as i64);
                    let Some(bi) = bi else {
                        return Err(at.err("a [2 * batch] mask needs a known batch"));
                    };
                    let ends = self.slice_dim(at, lens, 0, 0, bi)?;
                    let starts = self.slice_dim(at, lens, 0, bi, 2 * bi)?;
                    let ends = self.unsqueeze_at(at, ends, &[1])?;
                    let starts = self.unsqueeze_at(at, starts, &[1])?;
                    let before = self.op1(at, Op::Lt, &[keys, ends], &[])?;
                    let after = self.op1(at, Op::Ge, &[keys, starts], &[])?;
                    self.op1(at, Op::And, &[before, after], &[])?
                } else {
                    return Err(at.err(format!(
                        "a 1-D mask of {} entries (graphrw reads [batch] lengths and [2 * batch] ends and starts)",
                        dims[0]
                    )));
                };
                self.unsqueeze_at(at, keep, &[1, 1])?
            }
            r => {
                return Err(at.err(format!(
                    "a mask of rank {r} (graphrw reads [B, T], [B, S, T], [B] and [2B])"
                )))
            }
        };
        self.op1(at, Op::Where, &[keep, keep_value, hide_value], &[])
    }

    /// The bool mask `[S, T]` of a causal attention whose queries follow `past` keys
    /// (bottom-right aligned when `past = T - S`): key `j` visible to query `i` iff
    /// `j <= past + i`.
    pub(super) fn causal_after(
        &mut self,
        at: &At<'m, '_>,
        past: &SymExpr,
        s: &Dim,
        t: &Dim,
    ) -> Result<Value, OnnxError> {
        let end = past
            .add(&s.to_expr())
            .ok_or_else(|| at.err("the sequence length is too large an expression"))?;
        let rows = self.range_of(at, past.clone(), end)?;
        let rows = self.unsqueeze_at(at, rows, &[1])?;
        let keys = self.range_of(at, SymExpr::int(0), t.to_expr())?;
        self.op1(at, Op::Le, &[keys, rows], &[])
    }

    /// The fused attention of `q`, `k`, `v` (`[B, heads, S, d]`) under `mask`.
    pub(super) fn contrib_sdpa(
        &mut self,
        at: &At<'m, '_>,
        (q, k, v): (Value, Value, Value),
        mask: Option<Value>,
        how: &Sdpa,
    ) -> Result<Value, OnnxError> {
        let scale = match how.scale {
            Some(s) => AttrValue::Float(f64::from(s)),
            None => AttrValue::Null,
        };
        let attrs = [
            ("is_causal", AttrValue::Bool(how.causal)),
            ("scale", scale),
            ("enable_gqa", AttrValue::Bool(how.gqa)),
        ];
        let mut operands = vec![q, k, v];
        operands.extend(mask);
        self.op1(at, Op::ScaledDotProductAttention, &operands, &attrs)
    }

    /// The node's `scale`: `None` when absent or 0 (onnxruntime's `1/sqrt(head_size)`).
    pub(super) fn contrib_scale(at: &At<'m, '_>) -> Result<Option<f32>, OnnxError> {
        let s = at.float("scale", 0.0)?;
        if !s.is_finite() {
            return Err(at.bad(format!("scale {s} is not finite")));
        }
        Ok((s != 0.0).then_some(s))
    }

    /// The int attribute `name`, required and positive.
    pub(super) fn positive(at: &At<'m, '_>, name: &str) -> Result<i64, OnnxError> {
        if at.attr(name).is_none() {
            return Err(at.bad(format!("attribute `{name}` is required")));
        }
        match at.int(name, 0)? {
            n if n > 0 => Ok(n),
            n => Err(at.bad(format!(
                "attribute `{name}` is {n}, expected a positive int"
            ))),
        }
    }

    /// The known last dim of `v` (input `i`).
    pub(super) fn known_last(
        &mut self,
        at: &At<'m, '_>,
        i: usize,
        v: Value,
    ) -> Result<i64, OnnxError> {
        let m = self.meta(v)?;
        match m.shape.dims().last().and_then(Dim::known) {
            Some(n) => Ok(n as i64),
            None => Err(at.err(format!(
                "input {i} has shape {}; graphrw reads a known hidden size",
                m.shape
            ))),
        }
    }
}
