use graphrw_kernels::cpu::{self, ReduceOp};
use graphrw_kernels::{DType, Tensor};

use crate::common::*;

/// Reference reduction: groups input elements by their output index.
fn reduce_ref(x: &Tensor, dims: &[usize], keepdim: bool, op: ReduceOp) -> (Vec<usize>, Vec<f64>) {
    let shape = x.shape();
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let nout: usize = kshape.iter().product();
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); nout];
    for (i, v) in x.to_f64_vec().into_iter().enumerate() {
        let idx = unravel(i, shape);
        let k: Vec<usize> = kept.iter().map(|&d| idx[d]).collect();
        groups[ravel(&k, &kshape)].push(v);
    }
    let vals = groups
        .into_iter()
        .map(|g| match op {
            ReduceOp::Sum => g.iter().sum(),
            ReduceOp::Mean => g.iter().sum::<f64>() / g.len() as f64,
            ReduceOp::Amax => g.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        })
        .collect();
    let out_shape = (0..shape.len())
        .filter_map(|d| match (dims.contains(&d), keepdim) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            _ => None,
        })
        .collect();
    (out_shape, vals)
}

#[test]
fn reductions_match_reference() {
    let mut rng = Rng::new(41);
    let cases: &[(&[usize], &[i64])] = &[
        (&[3, 4], &[1]),
        (&[3, 4], &[0]),
        (&[3, 4], &[]),
        (&[2, 3, 4], &[0, 2]),
        (&[2, 3, 4], &[-1, -2]),
        (&[2, 1, 4], &[1]),
        (&[0, 3], &[1]),
        (&[4, 0], &[0]),
        (&[70, 1000], &[1]),
        (&[1000, 70], &[0]),
    ];
    for dtype in DType::ALL {
        for &(shape, dims) in cases {
            if dtype != DType::F32 && shape.iter().product::<usize>() > 1000 {
                continue;
            }
            let x = rand_tensor(&mut rng, dtype, shape);
            let nd: Vec<usize> = if dims.is_empty() {
                (0..shape.len()).collect()
            } else {
                dims.iter()
                    .map(|&d| {
                        if d < 0 {
                            (d + shape.len() as i64) as usize
                        } else {
                            d as usize
                        }
                    })
                    .collect()
            };
            for keepdim in [false, true] {
                for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Amax] {
                    let what = format!("{op:?} {dtype} {shape:?} {dims:?} keepdim={keepdim}");
                    let got = cpu::reduce(op, &x, dims, keepdim);
                    let empty_lane = nd.iter().any(|&d| shape[d] == 0);
                    let out_nonempty = (0..shape.len())
                        .filter(|d| !nd.contains(d))
                        .all(|d| shape[d] > 0);
                    match op {
                        ReduceOp::Mean if dtype == DType::Bool => {
                            assert!(got.is_err(), "{what}");
                            continue;
                        }
                        ReduceOp::Mean if dtype.is_int() && empty_lane && out_nonempty => {
                            assert!(got.is_err(), "{what}");
                            continue;
                        }
                        ReduceOp::Amax if empty_lane && out_nonempty => {
                            assert!(got.is_err(), "{what}");
                            continue;
                        }
                        _ => {}
                    }
                    let got = got.unwrap();
                    let (s, mut e) = reduce_ref(&x, &nd, keepdim, op);
                    // Integers keep their dtype (ONNX's rule); their mean truncates.
                    let out_dtype = if op == ReduceOp::Sum && dtype == DType::Bool {
                        DType::I64
                    } else {
                        dtype
                    };
                    if op == ReduceOp::Mean && dtype.is_int() {
                        e.iter_mut().for_each(|v| *v = v.trunc());
                    }
                    let e: Vec<f64> = e.into_iter().map(|v| round_to(out_dtype, v)).collect();
                    assert_close(&got, &s, out_dtype, &e, &what);
                }
            }
        }
    }
    let x = Tensor::zeros(DType::F32, &[2, 3]);
    assert!(cpu::reduce(ReduceOp::Sum, &x, &[2], false).is_err());
    assert!(cpu::reduce(ReduceOp::Sum, &x, &[0, -2], false).is_err());
    let s = Tensor::scalar(3.0f32);
    assert_eq!(
        cpu::reduce(ReduceOp::Sum, &s, &[0], false)
            .unwrap()
            .to_f64_vec(),
        vec![3.0]
    );
    let nan = Tensor::from_vec(vec![3], vec![1.0f32, f32::NAN, 2.0]).unwrap();
    assert!(cpu::reduce(ReduceOp::Amax, &nan, &[], false)
        .unwrap()
        .to_f64_vec()[0]
        .is_nan());
}

/// Reference softmax over `dim` by plain loops.
fn softmax_ref(x: &Tensor, d: usize, log: bool) -> Vec<f64> {
    let shape = x.shape();
    let xv = x.to_f64_vec();
    (0..xv.len())
        .map(|i| {
            let mut idx = unravel(i, shape);
            let lane: Vec<f64> = (0..shape[d])
                .map(|k| {
                    idx[d] = k;
                    xv[ravel(&idx, shape)]
                })
                .collect();
            let m = lane.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = lane.iter().map(|v| (v - m).exp()).sum();
            if log {
                xv[i] - m - s.ln()
            } else {
                (xv[i] - m).exp() / s
            }
        })
        .collect()
}

#[test]
fn softmax_and_log_softmax_match_reference() {
    let mut rng = Rng::new(42);
    let cases: &[(&[usize], i64)] = &[
        (&[3, 5], -1),
        (&[3, 5], 0),
        (&[2, 3, 4], 1),
        (&[1], 0),
        (&[0, 4], 1),
        (&[4, 0], 1),
        (&[], 0),
        (&[300, 300], -1),
        (&[300, 4, 60], 1),
    ];
    for dtype in FLOATS {
        for &(shape, dim) in cases {
            let x = rand_tensor(&mut rng, dtype, shape);
            let d = if shape.is_empty() {
                0
            } else if dim < 0 {
                (dim + shape.len() as i64) as usize
            } else {
                dim as usize
            };
            let xs = if shape.is_empty() {
                cpu::reshape(&x, &[1]).unwrap()
            } else {
                x.clone()
            };
            for log in [false, true] {
                let got = if log {
                    cpu::log_softmax(&x, dim)
                } else {
                    cpu::softmax(&x, dim)
                }
                .unwrap();
                let e: Vec<f64> = softmax_ref(&xs, d, log)
                    .into_iter()
                    .map(|v| round_to(dtype, v))
                    .collect();
                assert_close(
                    &got,
                    shape,
                    dtype,
                    &e,
                    &format!("softmax log={log} {dtype} {shape:?} {dim}"),
                );
            }
        }
    }
    let x = Tensor::from_vec(
        vec![2, 2],
        vec![f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY],
    )
    .unwrap();
    let s = cpu::softmax(&x, -1).unwrap().to_f64_vec();
    assert!(
        s[0].is_nan() && s[1].is_nan(),
        "all -inf row gives NaN: {s:?}"
    );
    assert_eq!(&s[2..], &[1.0, 0.0]);
    assert!(cpu::softmax(&Tensor::zeros(DType::I64, &[2]), 0).is_err());
    assert!(cpu::softmax(&Tensor::zeros(DType::F32, &[2]), 1).is_err());
    assert!(cpu::log_softmax(&Tensor::zeros(DType::F32, &[2, 2]), -3).is_err());
}

fn norm_ref(
    x: &[f64],
    w: Option<&[f64]>,
    b: Option<&[f64]>,
    inner: usize,
    eps: f64,
    rms: bool,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(inner.max(1)) {
        let n = row.len() as f64;
        let mean = if rms {
            0.0
        } else {
            row.iter().sum::<f64>() / n
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        for (i, v) in row.iter().enumerate() {
            let mut y = (v - mean) / (var + eps).sqrt();
            if let Some(w) = w {
                y *= w[i];
            }
            if let Some(b) = b {
                y += b[i];
            }
            out.push(y);
        }
    }
    out
}

#[test]
fn layer_norm_and_rms_norm_match_reference() {
    let mut rng = Rng::new(43);
    let cases: &[(&[usize], i64)] = &[
        (&[3, 8], -1),
        (&[2, 3, 4], 1),
        (&[2, 3, 4], 0),
        (&[1, 1], 1),
        (&[0, 4], 1),
        (&[300, 256], 1),
    ];
    for dtype in FLOATS {
        for &(shape, axis) in cases {
            let x = rand_tensor(&mut rng, dtype, shape);
            let d = if axis < 0 {
                (axis + shape.len() as i64) as usize
            } else {
                axis as usize
            };
            let inner: usize = shape[d..].iter().product();
            let w = rand_tensor(&mut rng, dtype, &shape[d..]);
            // The bias broadcasts over the normalised dims (a trailing vector).
            let b = rand_tensor(&mut rng, dtype, &shape[shape.len() - 1..]);
            let bv_full: Vec<f64> = (0..inner)
                .map(|i| b.to_f64_vec()[i % shape[shape.len() - 1]])
                .collect();
            let xv = x.to_f64_vec();
            let wv = w.to_f64_vec();
            let what = format!("{dtype} {shape:?} axis {axis}");
            let ln = cpu::layer_norm(&x, Some(&w), Some(&b), axis, 1e-5).unwrap();
            let e: Vec<f64> = norm_ref(&xv, Some(&wv), Some(&bv_full), inner, 1e-5, false)
                .into_iter()
                .map(|v| round_to(dtype, v))
                .collect();
            assert_close(&ln, shape, dtype, &e, &format!("layer_norm {what}"));
            let plain = cpu::layer_norm(&x, None, None, axis, 1e-5).unwrap();
            let e: Vec<f64> = norm_ref(&xv, None, None, inner, 1e-5, false)
                .into_iter()
                .map(|v| round_to(dtype, v))
                .collect();
            assert_close(
                &plain,
                shape,
                dtype,
                &e,
                &format!("layer_norm plain {what}"),
            );
            let rms = cpu::rms_norm(&x, Some(&w), axis, 1e-6).unwrap();
            let e: Vec<f64> = norm_ref(&xv, Some(&wv), None, inner, 1e-6, true)
                .into_iter()
                .map(|v| round_to(dtype, v))
                .collect();
            assert_close(&rms, shape, dtype, &e, &format!("rms_norm {what}"));
        }
    }
    let x = Tensor::zeros(DType::F32, &[2, 4]);
    assert!(cpu::layer_norm(&x, Some(&Tensor::zeros(DType::F32, &[3])), None, -1, 1e-5).is_err());
    assert!(cpu::layer_norm(&x, Some(&Tensor::zeros(DType::F64, &[4])), None, -1, 1e-5).is_err());
    assert!(cpu::layer_norm(&x, None, None, 2, 1e-5).is_err());
    assert!(cpu::rms_norm(&Tensor::zeros(DType::I64, &[2]), None, 0, 1e-5).is_err());
    assert!(cpu::layer_norm(&Tensor::scalar(1.0f32), None, None, 0, 1e-5).is_err());
}
