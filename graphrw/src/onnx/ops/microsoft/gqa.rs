//! `GroupQueryAttention` (com.microsoft) as graphrw's fused attention with grouped kv
//! heads (`enable_gqa`), its caches and mask written around it (see `attention.rs` for
//! what is read and how the caches are placed).

use super::heads::Sdpa;
use crate::graph::Value;
use crate::meta::{DType, Dim, SymExpr};
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::{AttrValue, Op};
use smallvec::smallvec;

/// The inputs of a `GroupQueryAttention` graphrw does not read, by index.
const UNREAD: [(usize, &str); 7] = [
    (9, "position_ids"),
    (11, "head_sink"),
    (12, "k_scale of a quantised cache"),
    (13, "v_scale of a quantised cache"),
    (14, "q_norm_weight"),
    (15, "k_norm_weight"),
    (16, "query_seqlens"),
];

/// The head layout of one node.
struct Layout {
    nkv: i64,
    d: i64,
}

impl<'m> Importer<'m> {
    /// A runtime i64 scalar of the size `e`.
    fn sym_scalar(&mut self, at: &At<'m, '_>, e: SymExpr) -> Result<Value, OnnxError> {
        let attrs = [
            ("values", AttrValue::sym_ints(vec![e])),
            ("scalar", AttrValue::Bool(true)),
        ];
        self.op1(at, Op::SymInts, &[], &attrs)
    }

    /// `GroupQueryAttention`.
    pub(super) fn group_query_attention(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[
            "num_heads",
            "kv_num_heads",
            "scale",
            "local_window_size",
            "do_rotary",
            "rotary_interleaved",
            "softcap",
            "smooth_softmax",
            "qk_output",
            "causal",
            "sliding_window_cache",
            "k_quant_type",
            "v_quant_type",
            "kv_cache_bit_width",
            "qk_norm_epsilon",
            "q_norm_epsilon",
            "k_norm_epsilon",
        ])?;
        at.inputs_between(7, 17)?;
        if at.output.len() > 4 {
            return Err(at.bad(format!("{} outputs, expected at most 4", at.output.len())));
        }
        Self::unread_outputs(at, 3, "the attention scores")?;
        if at.float("softcap", 0.0)? != 0.0 {
            return Err(at.err("softcap is not supported"));
        }
        Self::int_is(at, "smooth_softmax", 0, "a smooth softmax")?;
        Self::int_is(at, "qk_output", 0, "the attention scores")?;
        Self::int_is(at, "sliding_window_cache", 0, "a window-sized cache")?;
        for q in ["k_quant_type", "v_quant_type"] {
            let v = at.string(q, "NONE")?;
            if v != "NONE" {
                return Err(at.err(format!(
                    "attribute `{q}` `{v}` (a quantised cache) is not supported"
                )));
            }
        }
        for (i, what) in UNREAD {
            Self::unread_input(at, i, what)?;
        }
        let n = Self::positive(at, "num_heads")?;
        let nkv = Self::positive(at, "kv_num_heads")?;
        if n % nkv != 0 {
            return Err(at.bad(format!(
                "num_heads {n} is not a multiple of kv_num_heads {nkv}"
            )));
        }
        let causal = match at.int("causal", 1)? {
            0 => false,
            1 => true,
            c => return Err(at.bad(format!("attribute `causal` is {c}, expected 0 or 1"))),
        };
        let window = at.int("local_window_size", -1)?;
        if window == 0 || window < -1 || (window > 0 && !causal) {
            return Err(at.bad(format!(
                "local_window_size {window}: expected -1, or positive with causal"
            )));
        }
        let query = self.float_input(at, 0, None)?;
        let qd = self.dims(query)?;
        if qd.len() != 3 {
            return Err(at.bad(format!("input 0 has rank {}, expected 3", qd.len())));
        }
        let (q, k, v, d) = self.gqa_projections(at, query, n, nkv)?;
        let lay = Layout { nkv, d };
        let seqlens = self.req(at, 5)?;
        let total = self.req(at, 6)?;
        for (i, x) in [(5, seqlens), (6, total)] {
            let dt = self.meta(x)?.dtype;
            if !dt.is_int() {
                return Err(at.bad(format!("input {i} is {dt}, expected int32")));
            }
        }
        let s = qd[1].clone();
        let past = match (self.opt_float(at, 3, query)?, self.opt_float(at, 4, query)?) {
            (Some(pk), Some(pv)) => {
                let pd = self.dims(pk)?;
                if pd.len() != 4 || self.dims(pv)?.len() != 4 {
                    return Err(at.bad("past_key and past_value must be 4-D ([B, N_kv, P, D])"));
                }
                let want = [
                    qd[0].clone(),
                    Dim::Known(nkv as u64),
                    pd[2].clone(),
                    Dim::Known(d as u64),
                ];
                for (i, p) in [(3, pk), (4, pv)] {
                    for (j, (f, w)) in self.dims(p)?.iter().zip(&want).enumerate() {
                        Self::dim_is(at, i, j, f, w)?;
                    }
                }
                // An empty past (the first prompt) is no past.
                (pd[2].known() != Some(0)).then_some((pk, pv, pd[2].clone()))
            }
            (None, None) => None,
            _ => return Err(at.bad("past_key and past_value go together")),
        };
        // Each entry's cached length before this step, `[B, 1]`.
        let offset = match &past {
            Some(_) => {
                let lens = self.cast_i64(at, seqlens)?;
                let one = self.scalar(DType::I64, 1.0);
                let lens = self.op1(at, Op::Add, &[lens, one], &[])?;
                let s_now = self.sym_scalar(at, s.to_expr())?;
                let p = self.op1(at, Op::Sub, &[lens, s_now], &[])?;
                let zero = self.scalar(DType::I64, 0.0);
                let p = self.op1(at, Op::Maximum, &[p, zero], &[])?;
                Some(self.unsqueeze_at(at, p, &[1])?)
            }
            None => None,
        };
        // Each query's absolute position, `[B or 1, S]`.
        let rows = self.range_of(at, SymExpr::int(0), s.to_expr())?;
        let rows = self.unsqueeze_at(at, rows, &[0])?;
        let positions = match offset {
            Some(p) => self.op1(at, Op::Add, &[rows, p], &[])?,
            None => rows,
        };
        let (mut q, mut k) = (q, k);
        if at.int("do_rotary", 0)? != 0 {
            let cos = self.float_input(at, 7, Some(query))?;
            let sin = self.float_input(at, 8, Some(query))?;
            let half = self.known_last(at, 7, cos)?;
            if 2 * half > d || self.dims(sin)? != self.dims(cos)? {
                return Err(at.bad(format!(
                    "cos_cache and sin_cache must be alike, half as wide as at most the head size {d}"
                )));
            }
            let interleaved = at.int("rotary_interleaved", 0)? != 0;
            let mut caches = [cos, sin];
            for c in &mut caches {
                let g = self.op1(at, Op::Gather, &[*c, positions], &[("dim", int_attr(0))])?;
                *c = self.unsqueeze_at(at, g, &[2])?;
            }
            q = self.rope(at, q, (caches[0], caches[1]), (2 * half, d), interleaved)?;
            k = self.rope(at, k, (caches[0], caches[1]), (2 * half, d), interleaved)?;
        }
        let q = self.swap_1_2(at, q)?;
        let (k, v) = (self.swap_1_2(at, k)?, self.swap_1_2(at, v)?);
        let (k, v, t) = match (&past, offset) {
            (Some((pk, pv, p)), Some(off)) => {
                self.gqa_caches(at, (*pk, *pv, p), (k, v), off, &s, &lay)?
            }
            _ => (k, v, s.clone()),
        };
        // Keys visible to each query: up to its position (causal), the last `window` of
        // those, and (not causal) up to the entry's length.
        let keys = self.range_of(at, SymExpr::int(0), t.to_expr())?;
        let pos3 = self.unsqueeze_at(at, positions, &[2])?;
        let mut keep = None;
        if causal && past.is_some() {
            keep = Some(self.op1(at, Op::Le, &[keys, pos3], &[])?);
        }
        if window > 0 {
            // onnxruntime's window holds `window` keys, the query's own included.
            let end = t.to_expr().add(&SymExpr::int(window - 1));
            let end = end.ok_or_else(|| at.err("the key length is too large an expression"))?;
            let shifted = self.range_of(at, SymExpr::int(window - 1), end)?;
            let inside = self.op1(at, Op::Ge, &[shifted, pos3], &[])?;
            keep = Some(match keep {
                Some(k) => self.op1(at, Op::And, &[k, inside], &[])?,
                None => inside,
            });
        }
        if !causal {
            let lens = self.cast_i64(at, seqlens)?;
            let lens = self.unsqueeze_at(at, lens, &[1, 2])?;
            keep = Some(self.op1(at, Op::Le, &[keys, lens], &[])?);
        }
        let dtype = self.meta(query)?.dtype;
        let keep = match keep {
            Some(k) => Some(self.unsqueeze_at(at, k, &[1])?),
            None => None,
        };
        let mask = match (keep, self.opt_float(at, 10, query)?) {
            (Some(k), Some(b)) => {
                let low = self.scalar(dtype, f64::NEG_INFINITY);
                Some(self.op1(at, Op::Where, &[k, b, low], &[])?)
            }
            (k, b) => k.or(b),
        };
        let how = Sdpa {
            gqa: n != nkv,
            causal: causal && past.is_none(),
            scale: Self::contrib_scale(at)?,
        };
        let o = self.contrib_sdpa(at, (q, k, v), mask, &how)?;
        let out = self.merge_heads(at, o)?;
        Ok(smallvec![out, k, v])
    }

    /// q `[B, S, n, d]`, k and v `[B, S, nkv, d]` (heads not yet before the sequence)
    /// of separate or packed (input 1 and 2 absent) inputs, and the head size.
    fn gqa_projections(
        &mut self,
        at: &At<'m, '_>,
        query: Value,
        n: i64,
        nkv: i64,
    ) -> Result<(Value, Value, Value, i64), OnnxError> {
        let hq = self.known_last(at, 0, query)?;
        let (key, value) = (self.opt_float(at, 1, query)?, self.opt_float(at, 2, query)?);
        let (q, k, v, d) = match (key, value) {
            (Some(k), Some(v)) => {
                if hq % n != 0 {
                    return Err(at.bad(format!(
                        "hidden size {hq} is not a multiple of num_heads {n}"
                    )));
                }
                let d = hq / n;
                for (i, x) in [(1, k), (2, v)] {
                    let h = self.known_last(at, i, x)?;
                    if h != nkv * d || self.dims(x)?.len() != 3 {
                        return Err(at.bad(format!(
                            "input {i} must be [B, S, {}] (kv_num_heads {nkv} x head size {d}), found width {h}",
                            nkv * d
                        )));
                    }
                }
                (query, k, v, d)
            }
            (None, None) => {
                let parts = n + 2 * nkv;
                if hq % parts != 0 {
                    return Err(at.bad(format!(
                        "packed width {hq} is not (num_heads + 2 kv_num_heads) x head size"
                    )));
                }
                let d = hq / parts;
                let q = self.slice_dim(at, query, 2, 0, n * d)?;
                let k = self.slice_dim(at, query, 2, n * d, (n + nkv) * d)?;
                let v = self.slice_dim(at, query, 2, (n + nkv) * d, hq)?;
                (q, k, v, d)
            }
            _ => return Err(at.bad("key and value go together")),
        };
        let mut heads = |x: Value, h: i64| -> Result<Value, OnnxError> {
            let dims = self.dims(x)?;
            let shape = vec![
                dims[0].to_expr(),
                dims[1].to_expr(),
                SymExpr::int(h),
                SymExpr::int(d),
            ];
            self.op1(
                at,
                Op::Reshape,
                &[x],
                &[("shape", AttrValue::sym_ints(shape))],
            )
        };
        Ok((heads(q, n)?, heads(k, nkv)?, heads(v, nkv)?, d))
    }

    /// The present caches `[B, nkv, P + S, d]`: per entry `b`, its first `off[b]` past
    /// rows, then the `S` new ones, then zeros; and their length.
    fn gqa_caches(
        &mut self,
        at: &At<'m, '_>,
        (pk, pv, p): (Value, Value, &Dim),
        (k, v): (Value, Value),
        off: Value,
        s: &Dim,
        lay: &Layout,
    ) -> Result<(Value, Value, Dim), OnnxError> {
        let too_large = || at.err("the cache length is too large an expression");
        let t_expr = p.to_expr().add(&s.to_expr()).ok_or_else(too_large)?;
        let t = Dim::from_expr(t_expr.clone()).ok_or_else(too_large)?;
        let rows = self.range_of(at, SymExpr::int(0), t_expr.clone())?;
        // Row `r` of the present reads row `r` of the past while `r < off`, else new row
        // `r - off`, which is row `P + r - off` of `concat(past, new)`.
        let shifted = self.range_of(
            at,
            p.to_expr(),
            p.to_expr().add(&t_expr).ok_or_else(too_large)?,
        )?;
        let from_new = self.op1(at, Op::Sub, &[shifted, off], &[])?;
        let last = self.sym_scalar(at, t_expr.sub(&SymExpr::int(1)).ok_or_else(too_large)?)?;
        let from_new = self.op1(at, Op::Minimum, &[from_new, last], &[])?;
        let in_past = self.op1(at, Op::Lt, &[rows, off], &[])?;
        let index = self.op1(at, Op::Where, &[in_past, rows, from_new], &[])?;
        let index = self.unsqueeze_at(at, index, &[1, 3])?;
        let size = AttrValue::Ints(vec![-1, lay.nkv, -1, lay.d]);
        let index = self.op1(at, Op::Expand, &[index], &[("size", size)])?;
        let s_now = self.sym_scalar(at, s.to_expr())?;
        let end = self.op1(at, Op::Add, &[off, s_now], &[])?;
        let valid = self.op1(at, Op::Lt, &[rows, end], &[])?;
        let valid = self.unsqueeze_at(at, valid, &[1, 3])?;
        let dtype = self.meta(k)?.dtype;
        let zero = self.scalar(dtype, 0.0);
        let mut out = [k, v];
        for (x, past) in out.iter_mut().zip([pk, pv]) {
            let ext = self.op1(at, Op::Concat, &[past, *x], &[("dim", int_attr(2))])?;
            let placed = self.op1(
                at,
                Op::GatherElements,
                &[ext, index],
                &[("dim", int_attr(2))],
            )?;
            *x = self.op1(at, Op::Where, &[valid, placed, zero], &[])?;
        }
        Ok((out[0], out[1], t))
    }
}
