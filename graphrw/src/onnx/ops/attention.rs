//! The standard ONNX `Attention` op (opset 23) both ways: imported as
//! `scaled_dot_product_attention` (views to 4-D, the mask written by graphrw's own export
//! given back), and exported as `Attention` (masks that broadcast over the query rows
//! expanded to them for onnxruntime, by shape arithmetic at symbolic shapes; grouped kv
//! heads go in unrepeated, with `q_num_heads` and `kv_num_heads`).

use crate::graph::NodeId;
use crate::graph::Value;
use crate::meta::Dim;
use crate::meta::SymExpr;
use crate::meta::TensorMeta;
use crate::onnx::dialect::ATTENTION_OPSET;
use crate::onnx::encode::Attr;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use smallvec::smallvec;
use smallvec::SmallVec;

impl<'m> Importer<'m> {
    pub(crate) fn attention(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&[
            "is_causal",
            "kv_num_heads",
            "q_num_heads",
            "qk_matmul_output_mode",
            "scale",
            "softcap",
            "softmax_precision",
        ])?;
        at.only_outputs(1)?;
        at.inputs_between(3, 6)?;
        if at.input.iter().skip(4).any(|i| !i.is_empty()) {
            return Err(at.err("past key and value inputs are not supported"));
        }
        if at.float("softcap", 0.0)? != 0.0 {
            return Err(at.err("softcap is not supported"));
        }
        if at.int("qk_matmul_output_mode", 0)? != 0 {
            return Err(at.err("qk_matmul_output_mode is not supported"));
        }
        let (q, k, v) = (self.req(at, 0)?, self.req(at, 1)?, self.req(at, 2)?);
        let (qm, km) = (self.meta(q)?, self.meta(k)?);
        if qm.rank() != 4 || km.rank() != 4 {
            return Err(at.err(format!(
                "only 4-D query and key are supported, found {} and {}",
                qm.shape, km.shape
            )));
        }
        let mut operands = vec![q, k, v];
        let mut bypassed = None;
        if let Some(mut m) = self.input(at, 3)? {
            // graphrw's exporter expands a padding mask for onnxruntime; undo that.
            let marker = format!("{}/mask_expand", at.name);
            if let Some(n) = self.graph.node(m.node) {
                if n.op().is(Op::Expand)
                    && n.name() == Some(marker.as_str())
                    && self.graph.use_count(m) == 0
                {
                    bypassed = Some(m.node);
                    m = n.operands()[0];
                }
            }
            operands.push(m);
        }
        let gqa = matches!((qm.shape.dims()[1].known(), km.shape.dims()[1].known()), (Some(a), Some(b)) if a != b);
        let scale = match at.attr("scale") {
            Some(_) => AttrValue::Float(at.float("scale", 1.0)? as f64),
            None => AttrValue::Null,
        };
        let attrs = [
            ("is_causal", AttrValue::Bool(at.int("is_causal", 0)? != 0)),
            ("scale", scale),
            ("enable_gqa", AttrValue::Bool(gqa)),
        ];
        let out = self.op1(at, Op::ScaledDotProductAttention, &operands, &attrs)?;
        // A later node may still read the expanded mask (by its name or an alias), so
        // whether it is dead is only known at the end.
        self.bypassed.extend(bypassed);
        Ok(smallvec![out])
    }
}

/// The query and kv head counts of an attention whose kv heads are fewer than its
/// query heads (grouped, `enable_gqa`) and divide them, both known; else `None`. The
/// heads are the dim before the sequence at every rank (the 4-D views keep it).
fn grouped_heads(q: &TensorMeta, k: &TensorMeta) -> Option<(i64, i64)> {
    let heads = |m: &TensorMeta| {
        let d = m.shape.dims();
        d.len().checked_sub(3).and_then(|i| d[i].known())
    };
    let (hq, hkv) = (heads(q)?, heads(k)?);
    if hkv == 0 || hkv >= hq || hq % hkv != 0 {
        return None;
    }
    Some((i64::try_from(hq).ok()?, i64::try_from(hkv).ok()?))
}

impl<'g> Exporter<'g> {
    pub(crate) fn attention(
        &mut self,
        id: NodeId,
        mut ins: Names8,
        outs: Names8,
    ) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let attrs = node.attrs();
        if attrs.float("dropout_p").map_err(|e| self.bad(e))? != 0.0 {
            return Err(self.err("ONNX Attention has no dropout; dropout_p must be 0"));
        }
        let q = self.meta(node.operands()[0])?;
        let k = self.meta(node.operands()[1])?;
        let r = q.rank();
        if r < 3 || k.rank() != r {
            return Err(self.err(format!(
                "ONNX Attention export takes (batch.., heads, seq, dim) inputs of rank >= 3, found {} and {}",
                q.shape, k.shape
            )));
        }
        let (sq, skv) = (q.shape.dims()[r - 2].clone(), k.shape.dims()[r - 2].clone());
        let mask = match node.operands().get(3) {
            Some(&m) => Some(self.meta(m)?),
            None => None,
        };
        // ONNX Attention is 4-D: a 3-D attention (heads folded into the batch, the
        // `bmm` form) gets a leading unit dim, a higher rank has its batch dims merged.
        let out = if r == 4 {
            None
        } else {
            let out_meta = self.meta(Value::new(id, 0))?;
            let qkv = node.operands()[..3].to_vec();
            for (x, name) in qkv.into_iter().zip(ins.iter_mut()) {
                let meta = self.meta(x)?;
                *name = self.view_as_4d(*name, &meta, r, "qkv")?;
            }
            if let Some(m) = &mask {
                ins[3] = self.mask_to_4d(ins[3], m, &q, &k, r)?;
            }
            Some(out_meta)
        };
        let attn_outs: Names8 = match &out {
            Some(_) => smallvec![self.tmp("attention_4d")],
            None => outs.clone(),
        };
        self.opset = self.opset.max(ATTENTION_OPSET);
        let attn_name = self.node_name();
        if let Some(m) = &mask {
            // The mask's rank as written: 2 stays 2, anything else became 4-D.
            let mr = if m.rank() <= 2 { m.rank() } else { 4 };
            let md = m.shape.dims();
            let full = (mr == 2 || mr == 4)
                && m.rank() >= 2
                && md[m.rank() - 2] == sq
                && md[m.rank() - 1] == skv;
            // onnxruntime reads the mask's last two dims as the query and key lengths,
            // without broadcasting them: a mask that broadcasts over the query rows (a
            // `[B, 1, 1, K]` key-padding mask) is expanded to them, by shape arithmetic
            // where the lengths are known only at run time.
            if !full {
                let dims = [
                    SymExpr::int(1),
                    SymExpr::int(1),
                    sq.to_expr(),
                    skv.to_expr(),
                ];
                let shape = self.sym_list(&dims)?;
                let expanded = self.tmp("mask_expanded");
                let base = format!("{}/mask_expand", self.s(attn_name));
                let name = unique_in(&mut self.node_names, &mut self.arena, &base);
                self.push_named(name, "Expand", "", &[ins[3], shape], &[expanded], &[]);
                ins[3] = expanded;
            }
        }
        let causal = i64::from(attrs.bool("is_causal").map_err(|e| self.bad(e))?);
        let mut a: SmallVec<[Attr; 4]> = smallvec![a_int("is_causal", causal)];
        if let Some(scale) = attrs.opt_float("scale").map_err(|e| self.bad(e))? {
            a.push(a_float("scale", scale));
        }
        // Grouped kv heads (`enable_gqa`): k and v go in with their own, fewer heads
        // (read once, never repeated), and the head counts are written out, so that
        // a reader need not infer the grouping from the shapes.
        if let Some((hq, hkv)) = grouped_heads(&q, &k) {
            a.push(a_int("q_num_heads", hq));
            a.push(a_int("kv_num_heads", hkv));
        }
        self.push_named(attn_name, "Attention", "", &ins, &attn_outs, &a);
        if let Some(out_meta) = out {
            self.write_back_from_4d(attn_outs[0], &out_meta, outs[0])?;
        }
        Ok(())
    }

    /// `x` (q, k or v of rank `r` != 4) as a 4-D tensor: `Unsqueeze(0)` for rank 3,
    /// a `Reshape` to `[-1, heads, seq, dim]` above 4 (dims known only at run time
    /// computed from the shapes).
    pub(crate) fn view_as_4d(
        &mut self,
        x: Name,
        meta: &TensorMeta,
        r: usize,
        what: &str,
    ) -> Result<Name, OnnxError> {
        let out = self.tmp(&format!("{what}_4d"));
        if r == 3 {
            let axes = self.init_ints("axes", &[0])?;
            self.push("Unsqueeze", &[x, axes], &[out], &[]);
            return Ok(out);
        }
        let shape = self.sym_list(&merged_batch(meta.shape.dims()))?;
        self.push("Reshape", &[x, shape], &[out], &[]);
        Ok(out)
    }

    /// The mask of an attention of rank `r` != 4 as the 4-D attention's mask: a 2-D
    /// mask stays, a rank-3 one gets a leading unit dim, a higher rank is expanded to
    /// the scores' shape and its batch dims merged.
    pub(crate) fn mask_to_4d(
        &mut self,
        m: Name,
        meta: &TensorMeta,
        q: &TensorMeta,
        k: &TensorMeta,
        r: usize,
    ) -> Result<Name, OnnxError> {
        if meta.rank() <= 2 {
            return Ok(m);
        }
        if r == 3 {
            return self.view_as_4d(m, meta, 3, "mask");
        }
        let mut scores: Vec<Dim> = q.shape.dims()[..r - 1].to_vec();
        scores.push(k.shape.dims()[r - 2].clone());
        let exprs: Vec<SymExpr> = scores.iter().map(Dim::to_expr).collect();
        let full = self.sym_list(&exprs)?;
        let expanded = self.tmp("mask_full");
        self.push("Expand", &[m, full], &[expanded], &[]);
        let shape = self.sym_list(&merged_batch(&scores))?;
        let out = self.tmp("mask_4d");
        self.push("Reshape", &[expanded, shape], &[out], &[]);
        Ok(out)
    }

    /// Brings the 4-D attention output `x` back to `meta` (the fused node's output).
    pub(crate) fn write_back_from_4d(
        &mut self,
        x: Name,
        meta: &TensorMeta,
        out: Name,
    ) -> Result<(), OnnxError> {
        if meta.rank() == 3 {
            let axes = self.init_ints("axes", &[0])?;
            self.push("Squeeze", &[x, axes], &[out], &[]);
            return Ok(());
        }
        let dims: Vec<SymExpr> = meta.shape.dims().iter().map(Dim::to_expr).collect();
        let shape = self.sym_list(&dims)?;
        self.push("Reshape", &[x, shape], &[out], &[]);
        Ok(())
    }
}

/// The `Reshape` target that merges every dim before the last three into one:
/// `[-1, d[r-3], d[r-2], d[r-1]]`.
fn merged_batch(dims: &[Dim]) -> [SymExpr; 4] {
    let r = dims.len();
    [
        SymExpr::int(-1),
        dims[r - 3].to_expr(),
        dims[r - 2].to_expr(),
        dims[r - 1].to_expr(),
    ]
}
