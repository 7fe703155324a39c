//! `Gemm` (a matmul with transposes, scaling and bias) and `Einsum` (the contractions
//! that are a matmul with permutes) in.

use crate::graph::Value;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::OnnxError;
use crate::ops::AttrValue;
use crate::ops::Op;
use smallvec::smallvec;
use std::collections::HashSet;

impl<'m> Importer<'m> {
    pub(crate) fn gemm(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        if self.opset < 7 {
            // `broadcast` 1 broadcasts C one way: numpy broadcasting does the same.
            at.only_attrs(&["alpha", "beta", "transA", "transB", "broadcast"])?;
        } else {
            at.only_attrs(&["alpha", "beta", "transA", "transB"])?;
        }
        at.inputs_between(2, 3)?;
        let alpha = at.float("alpha", 1.0)? as f64;
        let beta = at.float("beta", 1.0)? as f64;
        let mut a = self.req(at, 0)?;
        let mut b = self.req(at, 1)?;
        let c = self.input(at, 2)?;
        let swap = [("dim0", int_attr(0)), ("dim1", int_attr(1))];
        if at.int("transA", 0)? != 0 {
            a = self.op1(at, Op::Transpose, &[a], &swap)?;
        }
        if at.int("transB", 0)? != 0 {
            b = self.op1(at, Op::Transpose, &[b], &swap)?;
        }
        for (v, which) in [(a, "A"), (b, "B")] {
            let r = self.meta(v)?.rank();
            if r != 2 {
                return Err(at.bad(format!("{which} must be 2-D, found rank {r}")));
            }
        }
        let mut y = self.op1(at, Op::Matmul, &[a, b], &[])?;
        let dtype = self.meta(y)?.dtype;
        if alpha != 1.0 {
            let s = self.scalar(dtype, alpha);
            y = self.op1(at, Op::Mul, &[y, s], &[])?;
        }
        if let Some(mut c) = c {
            if beta != 1.0 {
                let s = self.scalar(dtype, beta);
                c = self.op1(at, Op::Mul, &[c, s], &[])?;
            }
            y = self.op1(at, Op::Add, &[y, c], &[])?;
        }
        Ok(smallvec![y])
    }

    /// Einsum of two operands as a batched contraction: one letter only in the first
    /// (rows), one only in the second (columns), one contracted, the others batch
    /// letters in both and the output (`bhqd,bhkd->bhqk`, `...id,...jd->...ij`); a
    /// `permute` of each operand, a `matmul` and a `permute` of the result. With no
    /// contracted letter (`i,j->ij`: `torch.outer`) the operands are unsqueezed to a
    /// contracted dim of 1. Other equations stay opaque.
    pub(crate) fn einsum(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        at.only_attrs(&["equation"])?;
        at.inputs_between(1, usize::MAX)?;
        let eq: String = at
            .string("equation", "")?
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        crate::onnx::malformed::einsum_equation(&eq, at.input.len()).map_err(|m| at.bad(m))?;
        if at.input.len() != 2 {
            return Err(at.err("only two-operand equations are lowered"));
        }
        let (lhs, out) = eq
            .split_once("->")
            .ok_or_else(|| at.err("an equation without `->` is not lowered"))?;
        let (ta, tb) = lhs
            .split_once(',')
            .ok_or_else(|| at.err("only two-operand equations are lowered"))?;
        let (a, b) = (self.req(at, 0)?, self.req(at, 1)?);
        let (ra, rb) = (self.meta(a)?.rank(), self.meta(b)?.rank());
        // `...` stands for the leading dims: spelled with digits (never einsum letters).
        let expand = |t: &str, rank: Option<usize>, n: usize| -> Result<Vec<char>, OnnxError> {
            let Some((pre, post)) = t.split_once("...") else {
                return Ok(t.chars().collect());
            };
            let named = pre.chars().count() + post.chars().count();
            let k = match rank {
                Some(r) => r
                    .checked_sub(named)
                    .ok_or_else(|| at.bad("`...` over too few dims"))?,
                None => n,
            };
            let digits = (0..k).map(|i| char::from(b'0' + (i % 10) as u8));
            Ok(pre.chars().chain(digits).chain(post.chars()).collect())
        };
        let ea = expand(ta, Some(ra), 0)?;
        let eb = expand(tb, Some(rb), 0)?;
        let n_ell = ea.iter().filter(|c| c.is_ascii_digit()).count();
        if eb.iter().filter(|c| c.is_ascii_digit()).count() != n_ell || n_ell > 10 {
            return Err(at.err("`...` must cover as many dims in both operands"));
        }
        let eo = expand(out, None, n_ell)?;
        if ea.len() != ra || eb.len() != rb {
            return Err(at.bad(format!(
                "terms `{ta}`, `{tb}` do not fit ranks {ra} and {rb}"
            )));
        }
        let unique = |t: &[char]| t.iter().collect::<HashSet<_>>().len() == t.len();
        if !unique(&ea) || !unique(&eb) || !unique(&eo) {
            return Err(at.err("repeated letters in a term (diagonals) are not lowered"));
        }
        let (ia, ib, io) = (
            |c: &char| ea.contains(c),
            |c: &char| eb.contains(c),
            |c: &char| eo.contains(c),
        );
        let batch: Vec<char> = eo.iter().copied().filter(|c| ia(c) && ib(c)).collect();
        let rows: Vec<char> = ea.iter().copied().filter(|c| !ib(c) && io(c)).collect();
        let cols: Vec<char> = eb.iter().copied().filter(|c| !ia(c) && io(c)).collect();
        let sum: Vec<char> = ea.iter().copied().filter(|c| ib(c) && !io(c)).collect();
        let covered = batch.len() + rows.len() + cols.len() == eo.len()
            && batch.len() + rows.len() + sum.len() == ea.len()
            && batch.len() + cols.len() + sum.len() == eb.len();
        // No summed letter: an outer product (`i,j->ij`, `torch.outer`), a matrix
        // product over a contracted dim of 1.
        if !covered || rows.len() != 1 || cols.len() != 1 || sum.len() > 1 {
            return Err(at.err(format!("equation `{eq}` is not a batched matrix product")));
        }
        let pos = |t: &[char], c: char| t.iter().position(|&x| x == c).unwrap_or(0) as i64;
        let permute = |imp: &mut Self, v: Value, from: &[char], to: &[char]| {
            let perm: Vec<i64> = to.iter().map(|&c| pos(from, c)).collect();
            if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                return Ok(v);
            }
            imp.op1(at, Op::Permute, &[v], &[("dims", AttrValue::Ints(perm))])
        };
        let la: Vec<char> = batch.iter().chain(&rows).chain(&sum).copied().collect();
        let lb: Vec<char> = batch.iter().chain(&sum).chain(&cols).copied().collect();
        let ly: Vec<char> = batch.iter().chain(&rows).chain(&cols).copied().collect();
        let mut pa = permute(self, a, &ea, &la)?;
        let mut pb = permute(self, b, &eb, &lb)?;
        if sum.is_empty() {
            pa = self.op1(at, Op::Unsqueeze, &[pa], &[("dim", int_attr(-1))])?;
            pb = self.op1(at, Op::Unsqueeze, &[pb], &[("dim", int_attr(-2))])?;
        }
        let y = self.op1(at, Op::Matmul, &[pa, pb], &[])?;
        Ok(smallvec![permute(self, y, &ly, &eo)?])
    }
}
