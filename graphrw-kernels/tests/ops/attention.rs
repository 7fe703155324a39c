use graphrw_kernels::{cpu, DType, Tensor};

use crate::common::*;

struct Case {
    q: &'static [usize],
    k: &'static [usize],
    v: &'static [usize],
    mask: Option<(&'static [usize], DType)>,
    causal: bool,
    scale: Option<f64>,
    gqa: bool,
}

/// Attention by plain loops over f64.
fn sdpa_ref(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    c: &Case,
) -> (Vec<usize>, Vec<f64>) {
    let r = c.q.len();
    let (sq, d) = (c.q[r - 2], c.q[r - 1]);
    let (skv, dv) = (c.k[r - 2], c.v[r - 1]);
    let (hq, hkv) = if r >= 3 {
        (c.q[r - 3], c.k[r - 3])
    } else {
        (1, 1)
    };
    let batch: usize = c.q[..r.saturating_sub(3)].iter().product();
    let scale = c.scale.unwrap_or(1.0 / (d as f64).sqrt());
    let (qv, kv, vv) = (q.to_f64_vec(), k.to_f64_vec(), v.to_f64_vec());
    let mv = mask.map(|m| (m.to_f64_vec(), m.shape().to_vec(), m.dtype()));
    let mut score_shape = c.q[..r - 1].to_vec();
    score_shape.push(skv);
    let mut out = Vec::new();
    for b in 0..batch {
        for h in 0..hq {
            let kh = b * hkv + h / (hq / hkv);
            for i in 0..sq {
                let mut s: Vec<f64> = (0..skv)
                    .map(|j| {
                        let dot: f64 = (0..d)
                            .map(|p| {
                                qv[((b * hq + h) * sq + i) * d + p] * kv[(kh * skv + j) * d + p]
                            })
                            .sum();
                        let mut x = dot * scale;
                        if c.causal && j > i {
                            x = f64::NEG_INFINITY;
                        }
                        if let Some((m, ms, mdt)) = &mv {
                            let flat = (b * hq + h) * sq * skv + i * skv + j;
                            let mval = m[broadcast_index(&unravel(flat, &score_shape), ms)];
                            if *mdt == DType::Bool {
                                if mval == 0.0 {
                                    x = f64::NEG_INFINITY;
                                }
                            } else {
                                x += mval;
                            }
                        }
                        x
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for x in s.iter_mut() {
                    *x = (*x - m).exp();
                    sum += *x;
                }
                for e in 0..dv {
                    out.push(
                        (0..skv)
                            .map(|j| s[j] / sum * vv[(kh * skv + j) * dv + e])
                            .sum(),
                    );
                }
            }
        }
    }
    let mut shape = c.q.to_vec();
    shape[r - 1] = dv;
    (shape, out)
}

#[test]
fn sdpa_matches_reference() {
    let f = DType::F32;
    let cases = [
        Case {
            q: &[2, 3, 4, 8],
            k: &[2, 3, 5, 8],
            v: &[2, 3, 5, 6],
            mask: None,
            causal: false,
            scale: None,
            gqa: false,
        },
        Case {
            q: &[1, 2, 5, 4],
            k: &[1, 2, 5, 4],
            v: &[1, 2, 5, 4],
            mask: None,
            causal: true,
            scale: Some(0.3),
            gqa: false,
        },
        Case {
            q: &[1, 2, 3, 4],
            k: &[1, 2, 6, 4],
            v: &[1, 2, 6, 4],
            mask: None,
            causal: true,
            scale: None,
            gqa: false,
        },
        Case {
            q: &[2, 4, 3, 4],
            k: &[2, 2, 3, 4],
            v: &[2, 2, 3, 2],
            mask: Some((&[3, 3], DType::Bool)),
            causal: false,
            scale: None,
            gqa: true,
        },
        Case {
            q: &[2, 2, 3, 4],
            k: &[2, 2, 5, 4],
            v: &[2, 2, 5, 4],
            mask: Some((&[2, 1, 1, 5], f)),
            causal: false,
            scale: None,
            gqa: false,
        },
        Case {
            q: &[3, 4],
            k: &[5, 4],
            v: &[5, 2],
            mask: Some((&[5], f)),
            causal: false,
            scale: None,
            gqa: false,
        },
        Case {
            q: &[1, 1, 0, 4],
            k: &[1, 1, 3, 4],
            v: &[1, 1, 3, 4],
            mask: None,
            causal: false,
            scale: None,
            gqa: false,
        },
        Case {
            q: &[2, 3, 2, 4],
            k: &[2, 1, 2, 4],
            v: &[2, 1, 2, 4],
            mask: None,
            causal: true,
            scale: None,
            gqa: true,
        },
    ];
    let mut rng = Rng::new(61);
    for dtype in FLOATS {
        for c in &cases {
            let q = rand_tensor(&mut rng, dtype, c.q);
            let k = rand_tensor(&mut rng, dtype, c.k);
            let v = rand_tensor(&mut rng, dtype, c.v);
            let mask = c.mask.map(|(shape, mdt)| {
                if mdt == DType::Bool {
                    // Keep at least one position per row so no row is fully masked.
                    let n: usize = shape.iter().product();
                    let cols = *shape.last().unwrap();
                    let vals: Vec<bool> = (0..n)
                        .map(|i| i % cols == 0 || rng.int(0, 2) == 1)
                        .collect();
                    Tensor::from_vec(shape.to_vec(), vals).unwrap()
                } else {
                    rand_tensor(&mut rng, dtype, shape)
                }
            });
            let out =
                cpu::sdpa_reference(&q, &k, &v, mask.as_ref(), c.causal, c.scale, c.gqa).unwrap();
            let (shape, e) = sdpa_ref(&q, &k, &v, mask.as_ref(), c);
            let e: Vec<f64> = e.into_iter().map(|x| round_to(dtype, x)).collect();
            assert_close(
                &out,
                &shape,
                dtype,
                &e,
                &format!("sdpa {dtype} q{:?} k{:?}", c.q, c.k),
            );
        }
    }
}

#[test]
fn sdpa_fully_masked_row_is_nan() {
    let q = Tensor::zeros(DType::F32, &[1, 1, 2, 2]);
    let mask = Tensor::from_vec(vec![2, 2], vec![false, false, true, false]).unwrap();
    let out = cpu::sdpa_reference(&q, &q, &q, Some(&mask), false, None, false)
        .unwrap()
        .to_f64_vec();
    assert!(out[0].is_nan() && out[1].is_nan());
    assert_eq!(&out[2..], &[0.0, 0.0]);
}

#[test]
fn sdpa_rejects_bad_inputs() {
    let q = Tensor::zeros(DType::F32, &[1, 4, 3, 8]);
    let kv = Tensor::zeros(DType::F32, &[1, 2, 3, 8]);
    let sdpa = |q: &Tensor, k: &Tensor, v: &Tensor, m: Option<&Tensor>, causal: bool, gqa: bool| {
        cpu::sdpa_reference(q, k, v, m, causal, None, gqa)
    };
    assert!(
        sdpa(&q, &kv, &kv, None, false, false).is_err(),
        "heads differ without gqa"
    );
    assert!(sdpa(&q, &kv, &kv, None, false, true).is_ok());
    let kv3 = Tensor::zeros(DType::F32, &[1, 3, 3, 8]);
    assert!(
        sdpa(&q, &kv3, &kv3, None, false, true).is_err(),
        "4 heads over 3"
    );
    let k_bad = Tensor::zeros(DType::F32, &[1, 4, 3, 7]);
    assert!(sdpa(&q, &k_bad, &q, None, false, false).is_err());
    let mask = Tensor::zeros(DType::Bool, &[3, 3]);
    assert!(
        sdpa(&q, &q, &q, Some(&mask), true, false).is_err(),
        "mask with causal"
    );
    let bad_mask = Tensor::zeros(DType::Bool, &[2, 3, 3]);
    assert!(sdpa(&q, &q, &q, Some(&bad_mask), false, false).is_err());
    let int_mask = Tensor::zeros(DType::I64, &[3, 3]);
    assert!(sdpa(&q, &q, &q, Some(&int_mask), false, false).is_err());
    let qi = Tensor::zeros(DType::I64, &[1, 1, 2, 2]);
    assert!(sdpa(&qi, &qi, &qi, None, false, false).is_err());
    assert!(sdpa(&q, &kv.cast(DType::F16), &kv, None, false, true).is_err());
    let v1 = Tensor::zeros(DType::F32, &[4]);
    assert!(sdpa(&v1, &v1, &v1, None, false, false).is_err());
}
