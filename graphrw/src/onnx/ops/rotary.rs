//! The standard ONNX `RotaryEmbedding` op (opset 23) both ways.
//!
//! **Export:** `fused.rotary_embedding(x, cos, sin)` computes
//! `x * cos + rotate_half(x) * sin` with `cos`/`sin` as wide as `x`'s last dim `D`;
//! `RotaryEmbedding` (not interleaved) computes the same from caches of width `D / 2`,
//! used for both halves. So the node is written as `RotaryEmbedding` only when that is
//! exact: `x` is `(batch, heads, seq, D)` with `D` known and even, `cos` and `sin` are
//! `(batch or 1, 1, seq, D)`, and each provably has equal halves (a constant whose halves
//! are equal, or a chain of `cos`/`sin`/`cast`/`unsqueeze`/scalar products over
//! `concat([f, f], -1)`, which is how HF writes `emb = cat((freqs, freqs), -1)`). The
//! caches are the first halves with the head dim squeezed out, expanded to `x`'s batch
//! when theirs is 1 (onnxruntime wants the caches' batch to be `x`'s). Any other node is
//! written as a function call of its decomposition (`function.rs`), as before. Partial
//! rotary (`rotary_embedding_dim`) is not written: graphrw's fused node covers only the
//! rotated slice, and the slice and concat around it stay ordinary nodes.
//!
//! **Import:** `RotaryEmbedding` with a 4-D input, not interleaved, becomes its
//! decomposition in vocabulary ops (caches gathered by `position_ids` when given,
//! concatenated with themselves to width `rotary_embedding_dim`, a rotated slice and
//! the rest passed through), which the `fused.rotary_embedding` rule fuses again.

use crate::graph::{Graph, NodeId, Value};
use crate::meta::Dim;
use crate::onnx::dialect::ROTARY_OPSET;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::OnnxError;
use crate::ops::Op;
use smallvec::smallvec;

/// How many producers [`has_equal_halves`] walks back before giving up.
const MAX_WALK: usize = 16;

/// True when `v`'s last dim provably holds the same values in both halves.
pub(crate) fn has_equal_halves(graph: &Graph, mut v: Value) -> bool {
    for _ in 0..MAX_WALK {
        let Some(node) = graph.node(v.node) else {
            return false;
        };
        let Ok(meta) = graph.meta(v) else {
            return false;
        };
        let rank = meta.rank();
        let is_last = |d: i64| crate::meta::normalize_axis(d, rank) == Some(rank.wrapping_sub(1));
        match node.op().builtin {
            Some(Op::Constant) => {
                let Some(t) = node.payload() else {
                    return false;
                };
                let Some(&d) = t.shape().last() else {
                    return false;
                };
                if d % 2 != 0 {
                    return false;
                }
                let vals = t.to_f64_vec();
                return vals.chunks_exact(d).all(|row| row[..d / 2] == row[d / 2..]);
            }
            Some(Op::Concat) => {
                let ops = node.operands();
                let dim = node.attrs().int("dim").ok();
                return ops.len() == 2 && ops[0] == ops[1] && dim.is_some_and(is_last);
            }
            Some(Op::Cos | Op::Sin | Op::Cast | Op::Neg) => v = node.operands()[0],
            Some(Op::Unsqueeze) => {
                // Inserting the last dim would make a new last dim of 1.
                if node.attrs().int("dim").ok().is_none_or(is_last) {
                    return false;
                }
                v = node.operands()[0];
            }
            Some(Op::Mul | Op::Div) => {
                let ops = node.operands();
                let scalar = |w: Value| is_scalar_constant(graph, w);
                let lead = |w: Value| graph.meta(w).is_ok_and(|m| m.rank() == rank);
                v = match (scalar(ops[0]), scalar(ops[1])) {
                    (false, true) if lead(ops[0]) => ops[0],
                    (true, false) if node.op().is(Op::Mul) && lead(ops[1]) => ops[1],
                    _ => return false,
                };
            }
            _ => return false,
        }
    }
    false
}

/// True when `v` is the output of a one-element constant.
fn is_scalar_constant(graph: &Graph, v: Value) -> bool {
    graph.node(v.node).is_some_and(|n| {
        n.op().is(Op::Constant)
            && n.payload()
                .is_some_and(|t| t.shape().iter().product::<usize>() == 1)
    })
}

impl<'m> Importer<'m> {
    pub(crate) fn rotary_embedding(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["interleaved", "num_heads", "rotary_embedding_dim"])?;
        at.only_outputs(1)?;
        at.inputs_between(3, 4)?;
        if at.int("interleaved", 0)? != 0 {
            return Err(at.err("interleaved rotary embeddings are not supported"));
        }
        let x = self.req(at, 0)?;
        let xm = self.meta(x)?;
        if xm.rank() != 4 {
            return Err(at.err(format!(
                "only a 4-D input (batch, heads, seq, head_size) is supported, found {}",
                xm.shape
            )));
        }
        let Some(d) = xm.shape.dims()[3].known() else {
            return Err(at.err("the head size must be known"));
        };
        let d = d as i64;
        let rd = match at.int("rotary_embedding_dim", 0)? {
            0 => d,
            r if r > 0 && r <= d && r % 2 == 0 => r,
            r => {
                return Err(at.err(format!(
                    "rotary_embedding_dim {r} does not fit head size {d}"
                )))
            }
        };
        let mut caches = [self.req(at, 1)?, self.req(at, 2)?];
        let pos = self.input(at, 3)?;
        for c in &mut caches {
            if let Some(p) = pos {
                *c = self.op1(at, Op::Gather, &[*c, p], &[("dim", int_attr(0))])?;
            }
            // (batch, seq, rd / 2) -> (batch, 1, seq, rd), both halves the cache.
            *c = self.op1(at, Op::Concat, &[*c, *c], &[("dim", int_attr(-1))])?;
            *c = self.op1(at, Op::Unsqueeze, &[*c], &[("dim", int_attr(1))])?;
        }
        let slice = |me: &mut Self, v: Value, start: i64, end: i64| {
            let attrs = [
                ("dim", int_attr(3)),
                ("start", int_attr(start)),
                ("end", int_attr(end)),
                ("step", int_attr(1)),
            ];
            me.op1(at, Op::Slice, &[v], &attrs)
        };
        let rot = if rd == d { x } else { slice(self, x, 0, rd)? };
        let (x1, x2) = (slice(self, rot, 0, rd / 2)?, slice(self, rot, rd / 2, rd)?);
        let neg = self.op1(at, Op::Neg, &[x2], &[])?;
        let half = self.op1(at, Op::Concat, &[neg, x1], &[("dim", int_attr(-1))])?;
        let a = self.op1(at, Op::Mul, &[rot, caches[0]], &[])?;
        let b = self.op1(at, Op::Mul, &[half, caches[1]], &[])?;
        let mut out = self.op1(at, Op::Add, &[a, b], &[])?;
        if rd != d {
            let rest = slice(self, x, rd, d)?;
            out = self.op1(at, Op::Concat, &[out, rest], &[("dim", int_attr(-1))])?;
        }
        Ok(smallvec![out])
    }
}

impl<'g> Exporter<'g> {
    /// Writes `fused.rotary_embedding` node `id` as `RotaryEmbedding` when that is exact
    /// (see the module docs); false when it is not.
    pub(crate) fn standard_rotary(
        &mut self,
        id: NodeId,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<bool, OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let ops = node.operands();
        if ops.len() != 3 || ins.len() != 3 || outs.len() != 1 {
            return Ok(false);
        }
        let xm = self.meta(ops[0])?;
        let xd = xm.shape.dims();
        let Some(d) = xd.get(3).and_then(Dim::known) else {
            return Ok(false);
        };
        if xm.rank() != 4 || d == 0 || d % 2 != 0 {
            return Ok(false);
        }
        let one = Dim::Known(1);
        let mut expand = false;
        for &c in &ops[1..] {
            let cm = self.meta(c)?;
            let cd = cm.shape.dims();
            if cm.rank() != 4
                || cm.dtype != xm.dtype
                || cd[1] != one
                || cd[2] != xd[2]
                || cd[3] != xd[3]
            {
                return Ok(false);
            }
            if cd[0] != xd[0] {
                if cd[0] != one {
                    return Ok(false);
                }
                expand = true;
            }
            if !has_equal_halves(graph, c) {
                return Ok(false);
            }
        }
        self.opset = self.opset.max(ROTARY_OPSET);
        let half = d as i64 / 2;
        let starts = self.init_ints("rope_starts", &[0])?;
        let ends = self.init_ints("rope_ends", &[half])?;
        let axes = self.init_ints("rope_axes", &[3])?;
        let head = self.init_ints("rope_head_axis", &[1])?;
        let shape = if expand {
            let b = self.tmp("rope_batch");
            let s = self.tmp("rope_seq");
            self.push(
                "Shape",
                &[ins[0]],
                &[b],
                &[a_int("start", 0), a_int("end", 1)],
            );
            self.push(
                "Shape",
                &[ins[0]],
                &[s],
                &[a_int("start", 2), a_int("end", 3)],
            );
            let h = self.init_ints("rope_half", &[half])?;
            let shape = self.tmp("rope_shape");
            self.push("Concat", &[b, s, h], &[shape], &[a_int("axis", 0)]);
            Some(shape)
        } else {
            None
        };
        let mut caches = [ins[1], ins[2]];
        for (k, c) in caches.iter_mut().enumerate() {
            let what = if k == 0 { "cos" } else { "sin" };
            let sliced = self.tmp(&format!("rope_{what}_half"));
            self.push("Slice", &[*c, starts, ends, axes], &[sliced], &[]);
            let cache = self.tmp(&format!("rope_{what}_cache"));
            self.push("Squeeze", &[sliced, head], &[cache], &[]);
            *c = cache;
            if let Some(shape) = shape {
                let wide = self.tmp(&format!("rope_{what}_expanded"));
                self.push("Expand", &[cache, shape], &[wide], &[]);
                *c = wide;
            }
        }
        self.push(
            "RotaryEmbedding",
            &[ins[0], caches[0], caches[1]],
            outs,
            &[],
        );
        Ok(true)
    }
}
