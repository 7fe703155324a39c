//! The fused softmax cross-entropy kernels against a plain f64 reference, over row and
//! class counts (incl. 1 and large class counts), reductions, label smoothing, ignored
//! rows, dtypes and extreme logits, plus errors.

use graphrw_kernels::fused::cross_entropy::{
    cross_entropy, cross_entropy_backward, CrossEntropyOptions, Reduction,
};
use graphrw_kernels::{DType, Tensor};

fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// Per-row losses and the input gradient for per-row cotangents `g`, in f64.
fn reference(
    x: &[f64],
    c: usize,
    t: &[i64],
    o: &CrossEntropyOptions,
    g: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let ls = o.label_smoothing;
    let mut loss = vec![0.0; t.len()];
    let mut dx = vec![0.0; x.len()];
    for (r, &tr) in t.iter().enumerate() {
        if tr == o.ignore_index {
            continue;
        }
        let row = &x[r * c..(r + 1) * c];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        let logp: Vec<f64> = row.iter().map(|v| v - lse).collect();
        loss[r] = -(1.0 - ls) * logp[tr as usize] - ls * logp.iter().sum::<f64>() / c as f64;
        for j in 0..c {
            let target = (1.0 - ls) * f64::from(j == tr as usize) + ls / c as f64;
            dx[r * c + j] = (logp[j].exp() - target) * g[r];
        }
    }
    (loss, dx)
}

fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 4e-3,
        _ => 3e-2,
    }
}

fn check(
    dtype: DType,
    rows: usize,
    c: usize,
    reduction: Reduction,
    ls: f64,
    ignore: i64,
    spread: f64,
) {
    let what = format!("{dtype} rows {rows} c {c} {reduction:?} ls {ls} ignore {ignore}");
    let x = Tensor::from_f64_slice(
        dtype,
        &[rows, c],
        &data(rows * c, c as u64, -spread, spread),
    )
    .unwrap();
    let t: Vec<i64> = (0..rows).map(|r| ((r * 7 + 3) % c) as i64).collect();
    let target = Tensor::from_vec(vec![rows], t.clone()).unwrap();
    let o = CrossEntropyOptions {
        ignore_index: ignore,
        label_smoothing: ls,
        reduction,
    };
    let valid = t.iter().filter(|&&v| v != ignore).count() as f64;
    let gv = data(rows, 5, -1.0, 1.0);
    let (grad, per_row): (Tensor, Vec<f64>) = match reduction {
        Reduction::None => (
            Tensor::from_f64_slice(dtype, &[rows], &gv).unwrap(),
            gv.clone(),
        ),
        Reduction::Sum => (
            Tensor::from_f64_slice(dtype, &[], &[0.7]).unwrap(),
            vec![0.7; rows],
        ),
        Reduction::Mean => (
            Tensor::from_f64_slice(dtype, &[], &[0.7]).unwrap(),
            vec![0.7 / valid; rows],
        ),
    };
    let xr = x.to_f64_vec();
    let (loss, dx) = reference(&xr, c, &t, &o, &per_row);
    let want_loss: Vec<f64> = match reduction {
        Reduction::None => loss,
        Reduction::Sum => vec![loss.iter().sum()],
        Reduction::Mean => vec![loss.iter().sum::<f64>() / valid],
    };
    let got = cross_entropy(&x, &target, &o).unwrap();
    assert_eq!(got.dtype(), dtype);
    for (a, b) in got.to_f64_vec().iter().zip(&want_loss) {
        // The mean over no valid rows is NaN, as in PyTorch.
        let same_nan = a.is_nan() && b.is_nan();
        assert!(
            same_nan || (a - b).abs() <= tol(dtype) * b.abs().max(1.0),
            "{what} loss: {a} vs {b}"
        );
    }
    let gx = cross_entropy_backward(&grad, &x, &target, &o).unwrap();
    assert_eq!(gx.shape(), &[rows, c]);
    let scale = dx.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in gx.to_f64_vec().iter().zip(&dx).enumerate() {
        assert!(
            (a - b).abs() <= tol(dtype) * scale,
            "{what} dx[{i}]: {a} vs {b}"
        );
    }
}

#[test]
fn matches_the_reference() {
    for (rows, c) in [(1, 1), (1, 5), (7, 5), (33, 1000)] {
        for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
            for (ls, ignore) in [(0.0, -100), (0.1, 3), (1.0, 0)] {
                check(DType::F32, rows, c, reduction, ls, ignore, 3.0);
            }
        }
    }
}

#[test]
fn every_float_dtype_and_extreme_logits() {
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        check(dtype, 9, 17, Reduction::Mean, 0.1, 2, 3.0);
        check(dtype, 4, 3, Reduction::None, 0.0, -100, 3.0);
    }
    // Logits of magnitude 1e4 stay finite (max-subtracted log-sum-exp).
    check(DType::F32, 5, 6, Reduction::Sum, 0.0, -100, 1e4);
}

#[test]
fn bad_inputs_are_errors() {
    let x = Tensor::from_vec(vec![2, 3], vec![0f32; 6]).unwrap();
    let o = CrossEntropyOptions::default();
    let t = Tensor::from_vec(vec![2], vec![0i64, 3]).unwrap();
    let e = cross_entropy(&x, &t, &o).unwrap_err().to_string();
    assert!(e.contains("target 3 is out of range for 3 classes"), "{e}");
    let t = Tensor::from_vec(vec![3], vec![0i64, 1, 2]).unwrap();
    assert!(cross_entropy(&x, &t, &o).is_err());
    let t = Tensor::from_vec(vec![2], vec![0i64, 1]).unwrap();
    let bad = CrossEntropyOptions {
        label_smoothing: 1.5,
        ..o
    };
    assert!(cross_entropy(&x, &t, &bad).is_err());
    let g = Tensor::from_vec(vec![2], vec![1f32, 1.0]).unwrap();
    let e = cross_entropy_backward(&g, &x, &t, &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("grad"), "{e}");
    assert!(Reduction::parse("max").is_err());
    let tf = Tensor::from_vec(vec![2], vec![0f32, 1.0]).unwrap();
    assert!(cross_entropy(&x, &tf, &o).is_err());
}
