//! Inference of the contractions: `matmul`, `conv2d`, and attention with its backward.

use super::*;

/// `matmul` with torch's rules: 1-D operands are promoted and the added dim removed;
/// batch dims broadcast.
pub fn matmul(x: &[&TensorMeta], _: &Attrs) -> Out {
    let (a, b) = (&x[0].shape, &x[1].shape);
    let dtype = same_dtype(x[0], x[1])?;
    if dtype == DType::Bool {
        infer_bail!("matmul of bool tensors is not defined");
    }
    if a.rank() == 0 || b.rank() == 0 {
        infer_bail!("matmul needs operands of rank >= 1, found {a} and {b}");
    }
    // Rank-1 operands read as [1, k] and [k, 1]; the others in place, not copied.
    let (a1, b1);
    let a2: &[Dim] = if a.rank() == 1 {
        a1 = [Dim::Known(1), a.0[0].clone()];
        &a1
    } else {
        &a.0
    };
    let b2: &[Dim] = if b.rank() == 1 {
        b1 = [b.0[0].clone(), Dim::Known(1)];
        &b1
    } else {
        &b.0
    };
    let k_a = &a2[a2.len() - 1];
    let k_b = &b2[b2.len() - 2];
    if !dims_agree(k_a, k_b) {
        infer_bail!("matmul inner dimensions differ: {k_a} vs {k_b} ({a} @ {b})");
    }
    let mut out = broadcast_dims(&a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .map_err(|e| InferError(format!("matmul batch dims: {}", e.0)))?;
    if a.rank() > 1 {
        out.push(a2[a2.len() - 2].clone());
    }
    if b.rank() > 1 {
        out.push(b2[b2.len() - 1].clone());
    }
    one(dtype, Shape(out), x[0])
}

/// `conv2d(input, weight, bias?)` on NCHW / OIHW.
pub fn conv2d(x: &[&TensorMeta], a: &Attrs) -> Out {
    let (inp, w) = (&x[0].shape, &x[1].shape);
    let dtype = same_dtype(x[0], x[1])?;
    if inp.rank() != 4 || w.rank() != 4 {
        infer_bail!("conv2d takes a 4-D input and weight, found {inp} and {w}");
    }
    let (stride, pad, dil, groups) = (
        a.ints("stride")?,
        a.ints("padding")?,
        a.ints("dilation")?,
        a.int("groups")?,
    );
    if stride.len() != 2 || pad.len() != 2 || dil.len() != 2 {
        infer_bail!("stride, padding and dilation need two entries each");
    }
    if groups < 1 || stride.iter().chain(dil).any(|&s| s < 1) || pad.iter().any(|&p| p < 0) {
        infer_bail!("groups, stride and dilation must be >= 1 and padding >= 0");
    }
    if let (Some(c), Some(wc)) = (inp.0[1].known(), w.0[1].known()) {
        if c != wc * groups as u64 {
            infer_bail!("input has {c} channels but weight expects {wc} x {groups} groups");
        }
    }
    if let Some(b) = x.get(2) {
        if b.rank() != 1 {
            infer_bail!("bias must be 1-D, found {}", b.shape);
        }
    }
    let mut out = smallvec![inp.0[0].clone(), w.0[0].clone()];
    for i in 0..2 {
        let size = match (inp.0[2 + i].known(), w.0[2 + i].known()) {
            (Some(n), Some(k)) => {
                let eff = (dil[i] as u64)
                    .saturating_mul(k.saturating_sub(1))
                    .saturating_add(1);
                let padded = n.saturating_add((pad[i] as u64).saturating_mul(2));
                if padded < eff {
                    infer_bail!("conv2d kernel {w} is larger than the padded input {inp}");
                }
                Dim::Known((padded - eff) / stride[i] as u64 + 1)
            }
            _ => Dim::sym(&format!("conv({})", inp.0[2 + i])),
        };
        out.push(size);
    }
    one(dtype, Shape(out), x[0])
}

/// `scaled_dot_product_attention(query, key, value, attn_mask?)`.
pub fn sdpa(x: &[&TensorMeta], a: &Attrs) -> Out {
    let (q, k, v) = (x[0], x[1], x[2]);
    if !q.dtype.is_float() || k.dtype != q.dtype || v.dtype != q.dtype {
        infer_bail!(
            "query, key and value must share one float dtype, found {}, {}, {}",
            q.dtype,
            k.dtype,
            v.dtype
        );
    }
    let r = q.rank();
    if r < 2 || k.rank() != r || v.rank() != r {
        infer_bail!(
            "query {}, key {} and value {} must have one rank >= 2",
            q.shape,
            k.shape,
            v.shape
        );
    }
    let (qs, ks, vs) = (&q.shape.0, &k.shape.0, &v.shape.0);
    let differ = |p: &Dim, q: &Dim| !dims_agree(p, q);
    if differ(&qs[r - 1], &ks[r - 1]) {
        infer_bail!("query {} and key {} head dims differ", q.shape, k.shape);
    }
    if differ(&ks[r - 2], &vs[r - 2]) {
        infer_bail!(
            "key {} and value {} sequence lengths differ",
            k.shape,
            v.shape
        );
    }
    let gqa = a.bool("enable_gqa")?;
    if r >= 3 {
        match (qs[r - 3].known(), ks[r - 3].known()) {
            (Some(hq), Some(hk)) if hq != hk && !(gqa && hk > 0 && hq % hk == 0) => infer_bail!(
                "query has {hq} heads and key {hk}: equal counts, or enable_gqa with a divisor"
            ),
            _ => {}
        }
        if differ(&ks[r - 3], &vs[r - 3]) {
            infer_bail!("key {} and value {} head counts differ", k.shape, v.shape);
        }
    }
    if let Some(scale) = a.opt_float("scale")? {
        if !scale.is_finite() {
            infer_bail!("scale must be finite, found {scale}");
        }
    }
    let mut out = qs.clone();
    out[r - 1] = vs[r - 1].clone();
    let out = Shape(out);
    if let Some(m) = x.get(3) {
        if m.dtype != DType::Bool && m.dtype != q.dtype {
            infer_bail!("attn_mask must be bool or {}, found {}", q.dtype, m.dtype);
        }
        let mut scores = qs.clone();
        scores[r - 1] = ks[r - 2].clone();
        let scores = Shape(scores);
        if !broadcasts_into(&m.shape, &scores)? {
            infer_bail!(
                "attn_mask {} does not broadcast to the scores' shape {scores}",
                m.shape
            );
        }
    }
    one(q.dtype, out, q)
}

/// `scaled_dot_product_attention_backward(grad_out, query, key, value, out,
/// attn_mask?)`: the forward's checks, `grad_out` and `out` of the forward's output
/// metadata; outputs the metadata of query, key and value.
pub fn sdpa_backward(x: &[&TensorMeta], a: &Attrs) -> Out {
    let mut fwd: Vec<&TensorMeta> = vec![x[1], x[2], x[3]];
    fwd.extend(x.get(5).copied());
    let out = sdpa(&fwd, a)?.remove(0);
    for (what, m) in [("grad_out", x[0]), ("out", x[4])] {
        if m.dtype != out.dtype || m.shape != out.shape {
            infer_bail!("{what} is {m}, expected the attention output's {out}");
        }
    }
    Ok(vec![x[1].clone(), x[2].clone(), x[3].clone()])
}
