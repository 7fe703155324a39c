//! Inference of indexing, reductions, normalisations and the cross-entropy loss.

use super::*;
use crate::ops::Reduction;

fn index_dtype(t: &TensorMeta) -> Result<(), InferError> {
    if !matches!(t.dtype, DType::I64 | DType::I32) {
        infer_bail!("index must be i64 or i32, found {}", t.dtype);
    }
    Ok(())
}

/// ONNX `Gather`.
pub fn gather(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    let d = axis(a.int("dim")?, x[0].rank(), "gather dim")?;
    let mut s: Dims = x[0].shape.0[..d].into();
    s.extend(x[1].shape.0.iter().cloned());
    s.extend(x[0].shape.0[d + 1..].iter().cloned());
    one(x[0].dtype, Shape(s), x[0])
}

/// `torch.gather` / ONNX `GatherElements`: the output has the index's shape.
pub fn gather_elements(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    let d = axis(a.int("dim")?, x[0].rank().max(1), "gather_elements dim")?;
    if x[0].rank() != x[1].rank() {
        infer_bail!(
            "input {} and index {} must have the same rank",
            x[0].shape,
            x[1].shape
        );
    }
    for (i, (n, m)) in x[0].shape.0.iter().zip(&x[1].shape.0).enumerate() {
        if let (Some(n), Some(m)) = (n.known(), m.known()) {
            if i != d && m > n {
                infer_bail!(
                    "index {} is larger than input {} outside dim {d} (dim {i}: {m} > {n})",
                    x[1].shape,
                    x[0].shape
                );
            }
        }
    }
    one(x[0].dtype, x[1].shape.clone(), x[0])
}

/// ONNX `GatherND`.
pub fn gather_nd(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    let b = a.int("batch_dims")?;
    let (data, idx) = (&x[0].shape, &x[1].shape);
    if b < 0 || idx.rank() == 0 || b as usize >= idx.rank() || b as usize >= data.rank() {
        infer_bail!("gather_nd: batch_dims {b} does not fit data {data} and index {idx}");
    }
    let b = b as usize;
    let Some(k) = idx.0[idx.rank() - 1].known() else {
        infer_bail!("gather_nd: the index's last dim must be known, found {idx}");
    };
    if b + k as usize > data.rank() {
        infer_bail!(
            "gather_nd: index depth {k} + batch_dims {b} exceeds data rank {}",
            data.rank()
        );
    }
    let mut s: Dims = idx.0[..idx.rank() - 1].into();
    s.extend(data.0[b + k as usize..].iter().cloned());
    one(x[0].dtype, Shape(s), x[0])
}

/// `index_select(dim, index)` with a 1-D index.
pub fn index_select(x: &[&TensorMeta], a: &Attrs) -> Out {
    index_dtype(x[1])?;
    if x[1].rank() != 1 {
        infer_bail!("index_select needs a 1-D index, found {}", x[1].shape);
    }
    let d = axis(a.int("dim")?, x[0].rank(), "index_select dim")?;
    let mut s = x[0].shape.clone();
    s.0[d] = x[1].shape.0[0].clone();
    one(x[0].dtype, s, x[0])
}

/// `sum`/`mean`/`amax(dims, keepdim)`; empty dims reduce all.
pub fn reduce(x: &[&TensorMeta], a: &Attrs) -> Out {
    if x[0].dtype == DType::Bool {
        infer_bail!("cannot reduce a bool tensor (cast first)");
    }
    let r = x[0].rank();
    let dims = a.ints("dims")?;
    let keep = a.bool("keepdim")?;
    let mut reduced = vec![dims.is_empty(); r];
    for &d in dims {
        reduced[axis(d, r, "reduction dim")?] = true;
    }
    let s = x[0]
        .shape
        .0
        .iter()
        .zip(&reduced)
        .filter_map(|(d, &red)| match (red, keep) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect();
    one(x[0].dtype, Shape(s), x[0])
}

/// `layer_norm`/`rms_norm(input, weight?, bias?, axis, eps)`.
pub fn norm(x: &[&TensorMeta], a: &Attrs) -> Out {
    if !x[0].dtype.is_float() {
        infer_bail!("expected a floating-point input, found {}", x[0].dtype);
    }
    let r = x[0].rank();
    let ax = axis(a.int("axis")?, r, "normalisation axis")?;
    let normalized = Shape(x[0].shape.0[ax..].into());
    for (i, p) in x.iter().enumerate().skip(1) {
        if !broadcasts_into(&p.shape, &normalized)? {
            infer_bail!(
                "operand {i} ({}) does not broadcast to the normalised shape {normalized}",
                p.shape
            );
        }
    }
    Ok(vec![x[0].clone()])
}

/// The loss shape of `cross_entropy(input, target)` after checking both.
fn cross_entropy_loss(x: &[&TensorMeta], a: &Attrs) -> Result<TensorMeta, InferError> {
    let (input, target) = (x[0], x[1]);
    if !input.dtype.is_float() || input.rank() == 0 {
        infer_bail!("input must be float logits [.., C], found {input}");
    }
    if target.dtype != DType::I64 {
        infer_bail!("target must be i64 class indices, found {}", target.dtype);
    }
    let rows = Shape(input.shape.0[..input.rank() - 1].into());
    if target.shape != rows {
        infer_bail!(
            "target {} must have the input's shape without the class dim, {rows}",
            target.shape
        );
    }
    let ls = a.float("label_smoothing")?;
    if !(0.0..=1.0).contains(&ls) {
        infer_bail!("label_smoothing must be in [0, 1], found {ls}");
    }
    a.int("ignore_index")?;
    Ok(match a.reduction()? {
        Reduction::None => TensorMeta {
            dtype: input.dtype,
            shape: rows,
            device: input.device,
        },
        Reduction::Mean | Reduction::Sum => TensorMeta {
            dtype: input.dtype,
            shape: Shape::default(),
            device: input.device,
        },
    })
}

/// `cross_entropy(input, target)`: a scalar, or one loss per row with `reduction="none"`.
pub fn cross_entropy(x: &[&TensorMeta], a: &Attrs) -> Out {
    Ok(vec![cross_entropy_loss(x, a)?])
}

/// `cross_entropy_backward(grad_out, input, target)`: the input's metadata.
pub fn cross_entropy_backward(x: &[&TensorMeta], a: &Attrs) -> Out {
    let loss = cross_entropy_loss(&x[1..], a)?;
    if x[0].dtype != loss.dtype || x[0].shape != loss.shape {
        infer_bail!("grad_out is {}, expected the loss's {loss}", x[0]);
    }
    Ok(vec![x[1].clone()])
}
