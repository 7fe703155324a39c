//! onnxruntime's contrib attentions, each imported as graphrw's fused
//! `scaled_dot_product_attention` with its projections, head views, caches and masks
//! written in vocabulary ops around it:
//!
//! | op | reads |
//! |---|---|
//! | `Attention` | `input @ weights (+ bias)` split by `qkv_hidden_sizes` (equal thirds without it), `mask_index` (`[B, T]`, `[B, S, T]`, `[B]` lengths, `[2B]` ends and starts), `past` `[2, B, N, P, D]` and `present`, `attention_bias`, `unidirectional`, `scale`, `mask_filter_value` |
//! | `MultiHeadAttention` | q/k/v `[B, S, hidden]` (`+ bias`), packed QKV `[B, S, N, 3, D]`, packed KV `[B, L, N, 2, D]`, k/v already `[B, N, L, D]`; `key_padding_mask` (as `mask_index`), `attention_bias`, `past_key`/`past_value` and the `present` outputs, `unidirectional` |
//! | `GroupQueryAttention` | q/k/v (or packed QKV), `past_key`/`past_value` with `seqlens_k`, `do_rotary` with `cos_cache`/`sin_cache`, `local_window_size`, `causal`, `attention_bias` |
//!
//! The masks are onnxruntime's: a padded key adds `mask_filter_value` (finite, so a
//! row whose keys are all padded averages them, as onnxruntime does), a key after a
//! query under `unidirectional` is hidden. Without a past the causal mask is the fused
//! node's `is_causal`; with one it is bottom-right aligned (query `i` sees the past and
//! keys up to its own position), built from `arange`s.
//!
//! `GroupQueryAttention` places each batch entry's new keys after its own past
//! (`seqlens_k[b] + 1 - S` of them; 0 on the first prompt), as onnxruntime does, so a
//! batch of caches of different lengths is read as onnxruntime reads it: the present
//! cache is `concat(past, new)` reordered by one `gather_elements` per cache, with
//! zeros past each entry's length. Its present length is the past's plus `S`
//! (onnxruntime's when `total_sequence_length` is that sum, that is when past and
//! present are separate buffers).
//!
//! What graphrw does not read passes through unread with a line naming it: rotary
//! inside `Attention`, shared past/present buffers, `cache_indirection`, the `qk`
//! outputs, `GroupQueryAttention`'s quantised caches, `softcap`, `smooth_softmax`,
//! `head_sink`, q/k norms, `position_ids` and `query_seqlens`.

use super::heads::{Sdpa, MASK_FILTER};
use crate::graph::Value;
use crate::meta::{DType, Dim, SymExpr};
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::{AttrValue, Op};
use smallvec::smallvec;

/// The most negative finite value of `dtype` (what onnxruntime hides a causal key with).
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MIN,
        DType::F16 => -65504.0,
        DType::BF16 => -3.38e38,
        _ => f64::from(f32::MIN),
    }
}

/// q, k and v as `[B, heads, seq, d]`, with their head counts and sizes.
struct Qkv {
    q: Value,
    k: Value,
    v: Value,
}

impl<'m> Importer<'m> {
    /// Refuses (as a form graphrw does not read) a named output from `first` on.
    pub(super) fn unread_outputs(
        at: &At<'m, '_>,
        first: usize,
        what: &str,
    ) -> Result<(), OnnxError> {
        match at.output.iter().skip(first).find(|o| !o.is_empty()) {
            Some(o) => Err(at.err(format!("output `{o}` ({what}) is not computed"))),
            None => Ok(()),
        }
    }

    /// Refuses (as a form graphrw does not read) input `i` when given.
    pub(super) fn unread_input(at: &At<'m, '_>, i: usize, what: &str) -> Result<(), OnnxError> {
        match at.input_name(i) {
            Some(_) => Err(at.err(format!("input {i} ({what}) is not supported"))),
            None => Ok(()),
        }
    }

    /// Refuses (as a form graphrw does not read) an int attribute set to other than
    /// `want`.
    pub(super) fn int_is(
        at: &At<'m, '_>,
        name: &str,
        want: i64,
        what: &str,
    ) -> Result<(), OnnxError> {
        match at.int(name, want)? {
            v if v == want => Ok(()),
            v => Err(at.err(format!("attribute `{name}` {v} ({what}) is not supported"))),
        }
    }

    /// Checks that dim `k` of input `i` (`found`) is `want` where both are known.
    pub(super) fn dim_is(
        at: &At<'m, '_>,
        i: usize,
        k: usize,
        found: &Dim,
        want: &Dim,
    ) -> Result<(), OnnxError> {
        match (found.known(), want.known()) {
            (Some(a), Some(b)) if a != b => {
                Err(at.bad(format!("input {i} has {a} in dim {k}, expected {b}")))
            }
            _ => Ok(()),
        }
    }

    /// The mask of the scores (`[.., S, T]`, broadcasting over batch and heads) and
    /// whether the attention is top-left causal: the padding mask `pad` (additive),
    /// `attention_bias`, and under `causal` the keys after each query hidden (after
    /// `past` keys: top-left when `past` is 0, else a mask).
    #[allow(clippy::too_many_arguments)]
    fn scores_mask(
        &mut self,
        at: &At<'m, '_>,
        pad: Option<Value>,
        bias: Option<Value>,
        causal: bool,
        past: &SymExpr,
        (s, t): (&Dim, &Dim),
        dtype: DType,
    ) -> Result<(Option<Value>, bool), OnnxError> {
        let top_left = causal && past.as_const() == Some(0);
        let mut keep = None;
        if causal && !top_left {
            keep = Some(self.causal_after(at, past, s, t)?);
        }
        let additive = match (pad, bias) {
            (Some(p), Some(b)) => Some(self.op1(at, Op::Add, &[p, b], &[])?),
            (p, b) => p.or(b),
        };
        let mask = match (keep, additive) {
            (Some(k), Some(a)) => {
                let low = self.scalar(dtype, lowest(dtype));
                Some(self.op1(at, Op::Where, &[k, a, low], &[])?)
            }
            (k, a) => k.or(a),
        };
        Ok((mask, top_left))
    }

    /// `Attention` (com.microsoft): packed QKV projection, then attention.
    pub(super) fn ms_attention(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[
            "num_heads",
            "qkv_hidden_sizes",
            "unidirectional",
            "scale",
            "mask_filter_value",
            "do_rotary",
            "past_present_share_buffer",
            "rotary_embedding_dim",
        ])?;
        at.inputs_between(2, 7)?;
        if at.output.len() > 2 {
            return Err(at.bad(format!("{} outputs, expected at most 2", at.output.len())));
        }
        Self::int_is(at, "do_rotary", 0, "rotary embedding inside the attention")?;
        Self::int_is(at, "past_present_share_buffer", 0, "a shared past buffer")?;
        Self::unread_input(at, 6, "past_sequence_length of a shared past buffer")?;
        let n = Self::positive(at, "num_heads")?;
        let x = self.float_input(at, 0, None)?;
        let w = self.float_input(at, 1, Some(x))?;
        let (xd, wd) = (self.dims(x)?, self.dims(w)?);
        if xd.len() != 3 || wd.len() != 2 {
            return Err(at.bad(format!(
                "input 0 has rank {} and input 1 rank {}, expected 3 and 2",
                xd.len(),
                wd.len()
            )));
        }
        Self::dim_is(at, 1, 0, &wd[0], &xd[2])?;
        let width = self.known_last(at, 1, w)?;
        let sizes = match at.ints("qkv_hidden_sizes")? {
            Some(v) => v,
            None if width % 3 == 0 => vec![width / 3; 3],
            None => {
                return Err(at.bad(format!(
                    "weights width {width} is not three equal parts, and no qkv_hidden_sizes"
                )))
            }
        };
        let fits = sizes.len() == 3
            && sizes.iter().all(|&h| h > 0 && h % n == 0)
            && sizes.iter().sum::<i64>() == width
            && sizes[0] == sizes[1];
        if !fits {
            return Err(at.bad(format!(
                "qkv_hidden_sizes {sizes:?} for num_heads {n} and weights width {width}: expected three positive multiples of num_heads, q's equal to k's, summing to the width"
            )));
        }
        let mut qkv = self.op1(at, Op::Matmul, &[x, w], &[])?;
        if let Some(bias) = self.opt_float(at, 2, x)? {
            let bd = self.dims(bias)?;
            if bd.len() != 1 || bd[0].known() != Some(width as u64) {
                return Err(at.bad(format!("input 2 has dims {bd:?}, expected [{width}]")));
            }
            qkv = self.op1(at, Op::Add, &[qkv, bias], &[])?;
        }
        let (h0, h1) = (sizes[0], sizes[0] + sizes[1]);
        let q = self.slice_dim(at, qkv, 2, 0, h0)?;
        let k = self.slice_dim(at, qkv, 2, h0, h1)?;
        let v = self.slice_dim(at, qkv, 2, h1, width)?;
        let (d, dv) = (sizes[0] / n, sizes[2] / n);
        let q = self.split_heads(at, q, n, d)?;
        let mut k = self.split_heads(at, k, n, d)?;
        let mut v = self.split_heads(at, v, n, dv)?;
        let mut past_len = SymExpr::int(0);
        if let Some(past) = self.opt_float(at, 4, x)? {
            let pd = self.dims(past)?;
            if pd.len() != 5 || d != dv {
                return Err(at.bad(format!(
                    "input 4 (past) has rank {}, expected 5 ([2, B, N, P, D]) with q, k and v of one head size",
                    pd.len()
                )));
            }
            let want = [
                Dim::Known(2),
                xd[0].clone(),
                Dim::Known(n as u64),
                pd[3].clone(),
                Dim::Known(d as u64),
            ];
            for (j, (f, w)) in pd.iter().zip(&want).enumerate() {
                Self::dim_is(at, 4, j, f, w)?;
            }
            let attrs = [("dims", AttrValue::Ints(vec![0]))];
            let pk = self.slice_dim(at, past, 0, 0, 1)?;
            let pk = self.op1(at, Op::Squeeze, &[pk], &attrs)?;
            let pv = self.slice_dim(at, past, 0, 1, 2)?;
            let pv = self.op1(at, Op::Squeeze, &[pv], &attrs)?;
            k = self.op1(at, Op::Concat, &[pk, k], &[("dim", int_attr(2))])?;
            v = self.op1(at, Op::Concat, &[pv, v], &[("dim", int_attr(2))])?;
            past_len = pd[3].to_expr();
        }
        let (mask, bias) = (self.input(at, 3)?, self.opt_float(at, 5, x)?);
        let out = self.finish_attention(at, Qkv { q, k, v }, (mask, 3), bias, &past_len)?;
        let present = match at.output.get(1).filter(|o| !o.is_empty()) {
            Some(_) => {
                let ks = self.unsqueeze_at(at, k, &[0])?;
                let vs = self.unsqueeze_at(at, v, &[0])?;
                self.op1(at, Op::Concat, &[ks, vs], &[("dim", int_attr(0))])?
            }
            None => out,
        };
        Ok(smallvec![out, present])
    }

    /// The attention of `qkv` (`[B, N, S, d]`, keys after `past` cached ones) under the
    /// node's mask (input `mask.1`), `attention_bias` and `unidirectional`, as
    /// `[B, S, N * dv]`.
    fn finish_attention(
        &mut self,
        at: &At<'m, '_>,
        qkv: Qkv,
        mask: (Option<Value>, usize),
        bias: Option<Value>,
        past: &SymExpr,
    ) -> Result<Value, OnnxError> {
        let (qd, kd) = (self.dims(qkv.q)?, self.dims(qkv.k)?);
        let dtype = self.meta(qkv.q)?.dtype;
        let filter = f64::from(at.float("mask_filter_value", MASK_FILTER)?);
        let pad = match mask.0 {
            Some(m) => Some(self.padding_mask(at, (mask.1, m), (&qd[0], &kd[2]), filter, dtype)?),
            None => None,
        };
        let causal = at.int("unidirectional", 0)? != 0;
        let (mask, top_left) =
            self.scores_mask(at, pad, bias, causal, past, (&qd[2], &kd[2]), dtype)?;
        let how = Sdpa {
            gqa: false,
            causal: top_left,
            scale: Self::contrib_scale(at)?,
        };
        let o = self.contrib_sdpa(at, (qkv.q, qkv.k, qkv.v), mask, &how)?;
        self.merge_heads(at, o)
    }

    /// `x[:, :, :, j]` of a packed `[B, S, N, parts, D]` input, as `[B, N, S, D]`.
    fn packed_part(&mut self, at: &At<'m, '_>, x: Value, j: i64) -> Result<Value, OnnxError> {
        let part = self.slice_dim(at, x, 3, j, j + 1)?;
        let attrs = [("dims", AttrValue::Ints(vec![3]))];
        let part = self.op1(at, Op::Squeeze, &[part], &attrs)?;
        self.swap_1_2(at, part)
    }

    /// `MultiHeadAttention` (com.microsoft).
    pub(super) fn multi_head_attention(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["num_heads", "unidirectional", "scale", "mask_filter_value"])?;
        at.inputs_between(1, 10)?;
        if at.output.len() > 4 {
            return Err(at.bad(format!("{} outputs, expected at most 4", at.output.len())));
        }
        Self::unread_outputs(at, 3, "the attention probabilities")?;
        Self::unread_input(at, 8, "past_sequence_length of a shared past buffer")?;
        Self::unread_input(at, 9, "cache_indirection")?;
        let n = Self::positive(at, "num_heads")?;
        let query = self.float_input(at, 0, None)?;
        let key = self.opt_float(at, 1, query)?;
        let value = self.opt_float(at, 2, query)?;
        let bias = self.opt_float(at, 3, query)?;
        let qd = self.dims(query)?;
        let ranks = (
            qd.len(),
            match key {
                Some(k) => self.meta(k)?.rank(),
                None => 0,
            },
            value.is_some(),
        );
        let Qkv { q, mut k, mut v } = match ranks {
            (5, 0, false) => {
                if bias.is_some() {
                    return Err(at.err("a bias with packed QKV is not supported"));
                }
                Self::dim_is(at, 0, 2, &qd[2], &Dim::Known(n as u64))?;
                Self::dim_is(at, 0, 3, &qd[3], &Dim::Known(3))?;
                Qkv {
                    q: self.packed_part(at, query, 0)?,
                    k: self.packed_part(at, query, 1)?,
                    v: self.packed_part(at, query, 2)?,
                }
            }
            (3, 5, false) => {
                if bias.is_some() {
                    return Err(at.err("a bias with packed KV is not supported"));
                }
                let kv = key.ok_or_else(|| at.bad("input 1 is required"))?;
                let kvd = self.dims(kv)?;
                Self::dim_is(at, 1, 2, &kvd[2], &Dim::Known(n as u64))?;
                Self::dim_is(at, 1, 3, &kvd[3], &Dim::Known(2))?;
                let d = self.known_last(at, 1, kv)?;
                let hq = self.known_last(at, 0, query)?;
                if hq != n * d {
                    return Err(at.bad(format!(
                        "input 0 has hidden size {hq}, expected num_heads {n} x head size {d}"
                    )));
                }
                Qkv {
                    q: self.split_heads(at, query, n, d)?,
                    k: self.packed_part(at, kv, 0)?,
                    v: self.packed_part(at, kv, 1)?,
                }
            }
            (3, 3, true) | (3, 4, true) => {
                let (Some(key), Some(value)) = (key, value) else {
                    return Err(at.bad("inputs 1 and 2 are required"));
                };
                self.separate_qkv(at, n, (query, key, value), bias, ranks.1 == 4)?
            }
            (qr, kr, v) => {
                return Err(at.bad(format!(
                    "query of rank {qr}, key of rank {kr}, value {}: expected 3-D q/k/v, 5-D packed QKV alone, 3-D q with 5-D packed KV, or 3-D q with 4-D k and v",
                    if v { "given" } else { "absent" }
                )))
            }
        };
        let mut past_len = SymExpr::int(0);
        let past = (self.opt_float(at, 6, query)?, self.opt_float(at, 7, query)?);
        match past {
            (Some(pk), Some(pv)) => {
                if ranks.1 == 4 {
                    return Err(at.bad("past_key with 4-D key and value (already a past)"));
                }
                let (kd, vd) = (self.dims(k)?, self.dims(v)?);
                for (i, p, want) in [(6, pk, &kd), (7, pv, &vd)] {
                    let pd = self.dims(p)?;
                    if pd.len() != 4 {
                        return Err(at.bad(format!(
                            "input {i} has rank {}, expected 4 ([B, N, P, D])",
                            pd.len()
                        )));
                    }
                    for j in [0, 1, 3] {
                        Self::dim_is(at, i, j, &pd[j], &want[j])?;
                    }
                }
                past_len = self.dims(pk)?[2].to_expr();
                k = self.op1(at, Op::Concat, &[pk, k], &[("dim", int_attr(2))])?;
                v = self.op1(at, Op::Concat, &[pv, v], &[("dim", int_attr(2))])?;
            }
            (None, None) => {}
            _ => return Err(at.bad("past_key and past_value go together")),
        }
        let (mask, bias) = (self.input(at, 4)?, self.opt_float(at, 5, query)?);
        let out = self.finish_attention(at, Qkv { q, k, v }, (mask, 4), bias, &past_len)?;
        Ok(smallvec![out, k, v])
    }

    /// Separate q (`[B, S, Hq]`), k and v (`[B, L, H]`, or already `[B, N, L, D]` when
    /// `bnsh`) with `bias` (`[Hq + Hk + Hv]`, 3-D k and v only) as heads.
    fn separate_qkv(
        &mut self,
        at: &At<'m, '_>,
        n: i64,
        (mut q, mut k, mut v): (Value, Value, Value),
        bias: Option<Value>,
        bnsh: bool,
    ) -> Result<Qkv, OnnxError> {
        let hq = self.known_last(at, 0, q)?;
        let (hk, hv) = (self.known_last(at, 1, k)?, self.known_last(at, 2, v)?);
        let (kd, vd) = (self.dims(k)?, self.dims(v)?);
        if bnsh {
            if bias.is_some() {
                return Err(at.err("a bias with 4-D key and value is not supported"));
            }
            if vd.len() != 4 {
                return Err(at.bad(format!("input 2 has rank {}, expected 4", vd.len())));
            }
            for (i, dims) in [(1, &kd), (2, &vd)] {
                Self::dim_is(at, i, 1, &dims[1], &Dim::Known(n as u64))?;
            }
            if hq != n * hk {
                return Err(at.bad(format!(
                    "input 0 has hidden size {hq}, expected num_heads {n} x head size {hk}"
                )));
            }
            return Ok(Qkv {
                q: self.split_heads(at, q, n, hk)?,
                k,
                v,
            });
        }
        if vd.len() != 3 {
            return Err(at.bad(format!("input 2 has rank {}, expected 3", vd.len())));
        }
        if hq != hk || hq % n != 0 || hv % n != 0 {
            return Err(at.bad(format!(
                "hidden sizes q {hq}, k {hk}, v {hv} for num_heads {n}: expected q's equal to k's, each a multiple of num_heads"
            )));
        }
        if let Some(bias) = bias {
            let bd = self.dims(bias)?;
            let total = hq + hk + hv;
            if bd.len() != 1 || bd[0].known() != Some(total as u64) {
                return Err(at.bad(format!("input 3 has dims {bd:?}, expected [{total}]")));
            }
            let parts = [(0, hq), (hq, hq + hk), (hq + hk, total)];
            for (x, (start, end)) in [&mut q, &mut k, &mut v].into_iter().zip(parts) {
                let b = self.slice_dim(at, bias, 0, start, end)?;
                *x = self.op1(at, Op::Add, &[*x, b], &[])?;
            }
        }
        Ok(Qkv {
            q: self.split_heads(at, q, n, hq / n)?,
            k: self.split_heads(at, k, n, hk / n)?,
            v: self.split_heads(at, v, n, hv / n)?,
        })
    }
}
