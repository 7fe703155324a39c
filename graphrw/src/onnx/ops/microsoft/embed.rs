//! `RotaryEmbedding` and `EmbedLayerNormalization` (com.microsoft) as their
//! decompositions.
//!
//! - `RotaryEmbedding(x, position_ids, cos_cache, sin_cache)`: `x` is `[B, S, hidden]`
//!   (viewed as `[B, S, N, D]`) or `[B, N, S, D]`; the caches (`[max_seq, rd / 2]`) are
//!   gathered at `position_ids` (`[B, S]`, or `[1]`: the first position); the first `rd`
//!   of each head's `D` values are rotated, halves (`x * cos + rotate_half(x) * sin`,
//!   the form graphrw's `fused.rotary_embedding` rule fuses) or pairs (`interleaved`).
//! - `EmbedLayerNormalization`: `layer_norm(word[ids] + position[position_ids or
//!   0..S] (+ segment[segment_ids]))`, the mask's count of ones per row as
//!   `mask_index` (zeros without a mask), the sum before the norm as `embedding_sum`.

use crate::graph::Value;
use crate::meta::{DType, SymExpr};
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::{AttrValue, Op};
use smallvec::smallvec;

/// `EmbedLayerNormalization`'s epsilon when the node sets none (onnxruntime's).
const EMBED_EPSILON: f32 = 1e-12;

impl<'m> Importer<'m> {
    /// Rotates the first `rd` of the last dim `d` of the 4-D `x` by `cos` and `sin`
    /// (`[.., rd / 2]`, broadcasting over `x`'s leading dims).
    pub(super) fn rope(
        &mut self,
        at: &At<'m, '_>,
        x: Value,
        (cos, sin): (Value, Value),
        (rd, d): (i64, i64),
        interleaved: bool,
    ) -> Result<Value, OnnxError> {
        let last = [("dim", int_attr(-1))];
        let rot = if rd == d {
            x
        } else {
            self.slice_dim(at, x, 3, 0, rd)?
        };
        let out = if interleaved {
            let pair = |me: &mut Self, start: i64| {
                let attrs = [
                    ("dim", int_attr(3)),
                    ("start", int_attr(start)),
                    ("end", int_attr(rd)),
                    ("step", int_attr(2)),
                ];
                me.op1(at, Op::Slice, &[rot], &attrs)
            };
            let (re, im) = (pair(self, 0)?, pair(self, 1)?);
            let (rc, rs) = (
                self.op1(at, Op::Mul, &[re, cos], &[])?,
                self.op1(at, Op::Mul, &[re, sin], &[])?,
            );
            let (ic, is) = (
                self.op1(at, Op::Mul, &[im, cos], &[])?,
                self.op1(at, Op::Mul, &[im, sin], &[])?,
            );
            let even = self.op1(at, Op::Sub, &[rc, is], &[])?;
            let odd = self.op1(at, Op::Add, &[ic, rs], &[])?;
            let even = self.unsqueeze_at(at, even, &[4])?;
            let odd = self.unsqueeze_at(at, odd, &[4])?;
            let pairs = self.op1(at, Op::Concat, &[even, odd], &last)?;
            let shape: Vec<SymExpr> = self.dims(rot)?.iter().map(|d| d.to_expr()).collect();
            self.op1(
                at,
                Op::Reshape,
                &[pairs],
                &[("shape", AttrValue::sym_ints(shape))],
            )?
        } else {
            let c = self.op1(at, Op::Concat, &[cos, cos], &last)?;
            let s = self.op1(at, Op::Concat, &[sin, sin], &last)?;
            let x1 = self.slice_dim(at, rot, 3, 0, rd / 2)?;
            let x2 = self.slice_dim(at, rot, 3, rd / 2, rd)?;
            let neg = self.op1(at, Op::Neg, &[x2], &[])?;
            let half = self.op1(at, Op::Concat, &[neg, x1], &last)?;
            let a = self.op1(at, Op::Mul, &[rot, c], &[])?;
            let b = self.op1(at, Op::Mul, &[half, s], &[])?;
            self.op1(at, Op::Add, &[a, b], &[])?
        };
        if rd == d {
            return Ok(out);
        }
        let rest = self.slice_dim(at, x, 3, rd, d)?;
        self.op1(at, Op::Concat, &[out, rest], &last)
    }

    /// `RotaryEmbedding` (com.microsoft).
    pub(super) fn ms_rotary_embedding(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[
            "num_heads",
            "rotary_embedding_dim",
            "interleaved",
            "is_packed_batching",
            "scale",
        ])?;
        at.inputs_between(4, 4)?;
        at.only_outputs(1)?;
        Self::int_is(at, "is_packed_batching", 0, "ragged packed batches")?;
        if at.float("scale", 1.0)? != 1.0 {
            return Err(at.err("a scale other than 1 is not supported"));
        }
        let x = self.float_input(at, 0, None)?;
        let pos = self.req(at, 1)?;
        let cos = self.float_input(at, 2, Some(x))?;
        let sin = self.float_input(at, 3, Some(x))?;
        let (xd, cd) = (self.dims(x)?, self.dims(cos)?);
        if cd.len() != 2 || self.dims(sin)? != cd {
            return Err(at.bad("cos_cache and sin_cache must be alike and 2-D ([max_seq, rd / 2])"));
        }
        if !self.meta(pos)?.dtype.is_int() {
            return Err(at.bad("input 1 (position_ids) must be int64"));
        }
        let half = self.known_last(at, 2, cos)?;
        let heads = at.int("num_heads", 0)?;
        let dim = at.int("rotary_embedding_dim", 0)?;
        if heads < 0 || dim < 0 || (dim > 0 && heads == 0) {
            return Err(at.bad(format!(
                "num_heads {heads}, rotary_embedding_dim {dim}: expected num_heads with rotary_embedding_dim"
            )));
        }
        let hidden = self.known_last(at, 0, x)?;
        let (d, seq_dim) = match xd.len() {
            3 if dim == 0 => (2 * half, 1),
            3 => (hidden / heads, 1),
            4 => (hidden, 2),
            r => return Err(at.bad(format!("input 0 has rank {r}, expected 3 or 4"))),
        };
        let rd = if dim == 0 { d } else { dim };
        if d == 0 || hidden % d != 0 || rd > d || rd != 2 * half {
            return Err(at.bad(format!(
                "hidden size {hidden}, head size {d}, rotary dim {rd} and cache width {half}: expected the rotary dim at most the head size and twice the cache width"
            )));
        }
        let s = xd[seq_dim].clone();
        let pd = self.dims(pos)?;
        let pos = self.cast_i64(at, pos)?;
        let pos = match pd.len() {
            2 => pos,
            1 if pd[0].known() == Some(1) => {
                let rows = self.range_of(at, SymExpr::int(0), s.to_expr())?;
                let p = self.op1(at, Op::Add, &[rows, pos], &[])?;
                self.unsqueeze_at(at, p, &[0])?
            }
            _ => return Err(at.bad("position_ids must be [B, S] or [1]")),
        };
        let mut caches = [cos, sin];
        for c in &mut caches {
            let g = self.op1(at, Op::Gather, &[*c, pos], &[("dim", int_attr(0))])?;
            // [B, S, half] beside [B, S, N, D] or [B, N, S, D].
            *c = self.unsqueeze_at(at, g, &[if seq_dim == 1 { 2 } else { 1 }])?;
        }
        let x4 = if xd.len() == 3 {
            let shape = vec![
                xd[0].to_expr(),
                xd[1].to_expr(),
                SymExpr::int(hidden / d),
                SymExpr::int(d),
            ];
            self.op1(
                at,
                Op::Reshape,
                &[x],
                &[("shape", AttrValue::sym_ints(shape))],
            )?
        } else {
            x
        };
        let interleaved = at.int("interleaved", 0)? != 0;
        let out = self.rope(at, x4, (caches[0], caches[1]), (rd, d), interleaved)?;
        if xd.len() == 4 {
            return Ok(smallvec![out]);
        }
        let shape: Vec<SymExpr> = xd.iter().map(|d| d.to_expr()).collect();
        let out = self.op1(
            at,
            Op::Reshape,
            &[out],
            &[("shape", AttrValue::sym_ints(shape))],
        )?;
        Ok(smallvec![out])
    }

    /// `EmbedLayerNormalization` (com.microsoft).
    pub(super) fn embed_layer_norm(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["epsilon", "mask_index_type"])?;
        at.inputs_between(7, 9)?;
        if at.output.len() > 3 {
            return Err(at.bad(format!("{} outputs, expected at most 3", at.output.len())));
        }
        let eps = f64::from(at.float("epsilon", EMBED_EPSILON)?);
        let ids = self.req(at, 0)?;
        let word = self.float_input(at, 2, None)?;
        let pos_table = self.float_input(at, 3, Some(word))?;
        let seg_table = self.opt_float(at, 4, word)?;
        let gamma = self.float_input(at, 5, Some(word))?;
        let beta = self.float_input(at, 6, Some(word))?;
        let idd = self.dims(ids)?;
        if idd.len() != 2 || !self.meta(ids)?.dtype.is_int() {
            return Err(at.bad("input 0 (input_ids) must be 2-D int32"));
        }
        let hidden = self.known_last(at, 2, word)?;
        for (i, t) in [(3, pos_table)]
            .into_iter()
            .chain(seg_table.map(|t| (4, t)))
        {
            if self.known_last(at, i, t)? != hidden || self.dims(t)?.len() != 2 {
                return Err(at.bad(format!(
                    "input {i} must be [n, {hidden}] as the word embedding"
                )));
            }
        }
        let gather = |me: &mut Self, table: Value, index: Value| {
            me.op1(at, Op::Gather, &[table, index], &[("dim", int_attr(0))])
        };
        let mut sum = gather(self, word, ids)?;
        let positions = match self.input(at, 8)? {
            Some(p) => p,
            None => self.range_of(at, SymExpr::int(0), idd[1].to_expr())?,
        };
        let p = gather(self, pos_table, positions)?;
        sum = self.op1(at, Op::Add, &[sum, p], &[])?;
        match (self.input(at, 1)?, seg_table) {
            (Some(seg), Some(table)) => {
                let g = gather(self, table, seg)?;
                sum = self.op1(at, Op::Add, &[sum, g], &[])?;
            }
            (None, None) => {}
            _ => return Err(at.bad("segment_ids and segment_embedding go together")),
        }
        let y = self.norm(at, sum, (gamma, Some(beta)), -1, eps, false)?;
        let mask_index = match self.input(at, 7)? {
            Some(mask) => {
                let dt = self.meta(mask)?.dtype;
                let one = self.scalar(dt, 1.0);
                let ones = self.op1(at, Op::Eq, &[mask, one], &[])?;
                let ones = self.cast_i64(at, ones)?;
                let attrs = [("dims", AttrValue::Ints(vec![1]))];
                let count = self.op1(at, Op::Sum, &[ones], &attrs)?;
                self.op1(
                    at,
                    Op::Cast,
                    &[count],
                    &[("dtype", AttrValue::DType(DType::I32))],
                )?
            }
            None => {
                let attrs = [
                    ("size", AttrValue::sym_ints(vec![idd[0].to_expr()])),
                    ("dtype", AttrValue::DType(DType::I32)),
                ];
                self.op1(at, Op::Zeros, &[], &attrs)?
            }
        };
        Ok(smallvec![y, mask_index, sum])
    }
}
