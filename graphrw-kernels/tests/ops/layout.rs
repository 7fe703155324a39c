use graphrw_kernels::{cpu, DType, Tensor};

use crate::common::*;

/// Reference permute: output index `o` reads input index with `in[perm[i]] = o[i]`.
fn permute_ref(x: &Tensor, perm: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let xv = x.to_f64_vec();
    let out = (0..shape.iter().product())
        .map(|i| {
            let o = unravel(i, &shape);
            let mut idx = vec![0; perm.len()];
            for (k, &p) in perm.iter().enumerate() {
                idx[p] = o[k];
            }
            xv[ravel(&idx, x.shape())]
        })
        .collect();
    (shape, out)
}

#[test]
fn permute_and_transpose_match_reference() {
    let mut rng = Rng::new(21);
    let cases: &[(&[usize], &[i64])] = &[
        (&[2, 3], &[1, 0]),
        (&[2, 3, 4], &[2, 0, 1]),
        (&[2, 3, 4], &[0, 2, 1]),
        (&[1, 3, 1, 2], &[3, 1, 0, 2]),
        (&[2, 0, 3], &[2, 1, 0]),
        (&[], &[]),
        (&[4, 5, 6], &[-1, 0, 1]),
    ];
    for dtype in DType::ALL {
        for &(shape, perm) in cases {
            let x = rand_tensor(&mut rng, dtype, shape);
            let out = cpu::permute(&x, perm).unwrap();
            let p: Vec<usize> = perm
                .iter()
                .map(|&d| {
                    if d < 0 {
                        (d + shape.len() as i64) as usize
                    } else {
                        d as usize
                    }
                })
                .collect();
            let (s, e) = permute_ref(&x, &p);
            assert_close(
                &out,
                &s,
                dtype,
                &e,
                &format!("permute {dtype} {shape:?} {perm:?}"),
            );
        }
        let x = rand_tensor(&mut rng, dtype, &[2, 3, 4]);
        let t = cpu::transpose(&x, -1, 0).unwrap();
        let (s, e) = permute_ref(&x, &[2, 1, 0]);
        assert_close(&t, &s, dtype, &e, "transpose");
    }
    let big = rand_tensor(&mut rng, DType::F32, &[64, 40, 33]);
    let out = cpu::permute(&big, &[2, 0, 1]).unwrap();
    let (s, e) = permute_ref(&big, &[2, 0, 1]);
    assert_close(&out, &s, DType::F32, &e, "large permute");
    let x = Tensor::zeros(DType::F32, &[2, 3]);
    assert!(cpu::permute(&x, &[0]).is_err());
    assert!(cpu::permute(&x, &[0, 0]).is_err());
    assert!(cpu::permute(&x, &[0, 2]).is_err());
    assert!(cpu::transpose(&x, 0, 2).is_err());
}

#[test]
fn reshape_infers_and_validates() {
    let x = Tensor::from_vec(vec![2, 3, 4], (0..24).collect::<Vec<i64>>()).unwrap();
    assert_eq!(cpu::reshape(&x, &[4, -1]).unwrap().shape(), &[4, 6]);
    assert_eq!(
        cpu::reshape(&x, &[24]).unwrap().to_i64_vec(),
        x.to_i64_vec()
    );
    assert!(cpu::reshape(&x, &[5, -1]).is_err());
    assert!(cpu::reshape(&x, &[-1, -1]).is_err());
    assert!(cpu::reshape(&x, &[-2, 12]).is_err());
    assert!(cpu::reshape(&x, &[25]).is_err());
    let e = Tensor::zeros(DType::F32, &[0, 3]);
    assert_eq!(cpu::reshape(&e, &[3, 0, 5]).unwrap().shape(), &[3, 0, 5]);
    assert!(cpu::reshape(&e, &[0, -1]).is_err());
    let s = Tensor::scalar(1.0f32);
    assert_eq!(cpu::reshape(&s, &[1, 1]).unwrap().shape(), &[1, 1]);
    assert_eq!(cpu::reshape(&s, &[]).unwrap().shape(), &[] as &[usize]);
}

#[test]
fn expand_matches_broadcast() {
    let mut rng = Rng::new(22);
    let cases: &[(&[usize], &[i64], &[usize])] = &[
        (&[3, 1], &[3, 4], &[3, 4]),
        (&[3, 1], &[2, -1, 4], &[2, 3, 4]),
        (&[], &[2, 2], &[2, 2]),
        (&[1], &[0], &[0]),
        (&[2, 3], &[2, 3], &[2, 3]),
    ];
    for dtype in DType::ALL {
        for &(shape, sizes, out_shape) in cases {
            let x = rand_tensor(&mut rng, dtype, shape);
            let out = cpu::expand(&x, sizes).unwrap();
            let xv = x.to_f64_vec();
            let e: Vec<f64> = (0..out_shape.iter().product())
                .map(|i| xv[broadcast_index(&unravel(i, out_shape), shape)])
                .collect();
            assert_close(
                &out,
                out_shape,
                dtype,
                &e,
                &format!("expand {shape:?} {sizes:?}"),
            );
        }
    }
    let x = Tensor::zeros(DType::F32, &[2, 3]);
    assert!(cpu::expand(&x, &[2, 4]).is_err());
    assert!(cpu::expand(&x, &[3]).is_err());
    assert!(cpu::expand(&x, &[-1, 2, 3]).is_err());
}

#[test]
fn squeeze_unsqueeze_share_storage() {
    let x = Tensor::zeros(DType::BF16, &[1, 3, 1, 2]);
    let s = cpu::squeeze(&x, &[]).unwrap();
    assert_eq!(s.shape(), &[3, 2]);
    assert!(s.shares_storage_with(&x));
    assert_eq!(cpu::squeeze(&x, &[-2]).unwrap().shape(), &[1, 3, 2]);
    assert_eq!(
        cpu::squeeze(&x, &[1]).unwrap().shape(),
        &[1, 3, 1, 2],
        "non-1 dims stay"
    );
    assert!(cpu::squeeze(&x, &[4]).is_err());
    let u = cpu::unsqueeze(&x, -1).unwrap();
    assert_eq!(u.shape(), &[1, 3, 1, 2, 1]);
    assert_eq!(cpu::unsqueeze(&x, 0).unwrap().shape(), &[1, 1, 3, 1, 2]);
    assert_eq!(
        cpu::unsqueeze(&Tensor::scalar(1i64), 0).unwrap().shape(),
        &[1]
    );
    assert!(cpu::unsqueeze(&x, 5).is_err());
    assert!(cpu::unsqueeze(&x, -6).is_err());
}

#[test]
fn concat_split_slice_round_trip() {
    let mut rng = Rng::new(23);
    for dtype in DType::ALL {
        let a = rand_tensor(&mut rng, dtype, &[2, 3, 4]);
        let b = rand_tensor(&mut rng, dtype, &[2, 1, 4]);
        let c = rand_tensor(&mut rng, dtype, &[2, 0, 4]);
        let cat = cpu::concat(&[&a, &b, &c], 1).unwrap();
        assert_eq!(cat.shape(), &[2, 4, 4]);
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        let e: Vec<f64> = (0..32)
            .map(|i| {
                let idx = unravel(i, &[2, 4, 4]);
                if idx[1] < 3 {
                    av[ravel(&idx, &[2, 3, 4])]
                } else {
                    bv[ravel(&[idx[0], 0, idx[2]], &[2, 1, 4])]
                }
            })
            .collect();
        assert_close(&cat, &[2, 4, 4], dtype, &e, "concat");
        let parts = cpu::split(&cat, &[3, 1, 0], -2).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].to_f64_vec(), av);
        assert_eq!(parts[1].to_f64_vec(), bv);
        assert_eq!(parts[2].shape(), &[2, 0, 4]);
        let lead = cpu::split(&a, &[1, 1], 0).unwrap();
        assert!(lead[1].shares_storage_with(&a));
        assert_eq!(lead[1].to_f64_vec(), av[12..].to_vec());
    }
    let a = Tensor::zeros(DType::F32, &[2, 3]);
    assert!(cpu::concat(&[], 0).is_err());
    assert!(cpu::concat(&[&a, &Tensor::zeros(DType::F32, &[3, 3])], 1).is_err());
    assert!(cpu::concat(&[&a, &Tensor::zeros(DType::F64, &[2, 3])], 0).is_err());
    assert!(cpu::concat(&[&a, &a], 2).is_err());
    assert!(cpu::split(&a, &[1, 1], 1).is_err());
    assert!(cpu::split(&a, &[4, -1], 1).is_err());
}

#[test]
fn slice_follows_python() {
    let x = Tensor::from_vec(vec![2, 5], (0..10).collect::<Vec<i32>>()).unwrap();
    let cases: &[(i64, i64, i64, Vec<i64>)] = &[
        (0, 5, 1, vec![0, 1, 2, 3, 4]),
        (1, 4, 2, vec![1, 3]),
        (-2, i64::MAX, 1, vec![3, 4]),
        (i64::MIN, -3, 1, vec![0, 1]),
        (3, 1, 1, vec![]),
        (0, 100, 3, vec![0, 3]),
        (7, 9, 1, vec![]),
    ];
    for (start, end, step, row) in cases {
        let out = cpu::slice(&x, 1, *start, *end, *step).unwrap();
        let mut e: Vec<i64> = row.clone();
        e.extend(row.iter().map(|v| v + 5));
        assert_eq!(out.shape(), &[2, row.len()]);
        assert_eq!(out.to_i64_vec(), e, "{start}:{end}:{step}");
    }
    let r = cpu::slice(&x, 0, 1, 2, 1).unwrap();
    assert_eq!(r.to_i64_vec(), vec![5, 6, 7, 8, 9]);
    assert!(cpu::slice(&x, 0, 0, 1, 0).is_err());
    assert!(cpu::slice(&x, 0, 0, 1, -1).is_err());
    assert!(cpu::slice(&x, 2, 0, 1, 1).is_err());
}

#[test]
fn tril_triu_match_reference() {
    let mut rng = Rng::new(24);
    for dtype in DType::ALL {
        for shape in [&[3, 4][..], &[2, 4, 3], &[0, 2], &[1, 1]] {
            for diag in [-1i64, 0, 2] {
                let x = rand_tensor(&mut rng, dtype, shape);
                let xv = x.to_f64_vec();
                let r = shape.len();
                let keep = |i: usize, lower: bool| {
                    let idx = unravel(i, shape);
                    let off = idx[r - 1] as i64 - idx[r - 2] as i64;
                    if lower {
                        off <= diag
                    } else {
                        off >= diag
                    }
                };
                let lo: Vec<f64> = (0..xv.len())
                    .map(|i| if keep(i, true) { xv[i] } else { 0.0 })
                    .collect();
                let up: Vec<f64> = (0..xv.len())
                    .map(|i| if keep(i, false) { xv[i] } else { 0.0 })
                    .collect();
                assert_close(&cpu::tril(&x, diag).unwrap(), shape, dtype, &lo, "tril");
                assert_close(&cpu::triu(&x, diag).unwrap(), shape, dtype, &up, "triu");
            }
        }
    }
    assert!(cpu::tril(&Tensor::zeros(DType::F32, &[3]), 0).is_err());
}
