use graphrw_kernels::{cpu, DType, Tensor};

use crate::common::*;

/// Direct convolution by nested loops over f64.
#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    g: usize,
) -> (Vec<usize>, Vec<f64>) {
    let (xs, ws) = (x.shape(), w.shape());
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let ho = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
    let wo = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let bv = b.map(|b| b.to_f64_vec());
    let og = o / g;
    let mut out = Vec::new();
    for ni in 0..n {
        for oi in 0..o {
            let gi = oi / og;
            for y in 0..ho {
                for xo in 0..wo {
                    let mut acc = bv.as_ref().map_or(0.0, |b| b[oi]);
                    for ci in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (y * s[0] + i * d[0]) as i64 - p[0] as i64;
                                let ix = (xo * s[1] + j * d[1]) as i64 - p[1] as i64;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                    continue;
                                }
                                let xi = ravel(
                                    &[ni, gi * cg + ci, iy as usize, ix as usize],
                                    &[n, c, h, wd],
                                );
                                acc += xv[xi] * wv[ravel(&[oi, ci, i, j], ws)];
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    (vec![n, o, ho, wo], out)
}

#[test]
fn conv2d_matches_direct_loops() {
    let mut rng = Rng::new(51);
    // (x shape, w shape, stride, padding, dilation, groups, bias)
    type Case = (
        &'static [usize],
        &'static [usize],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
        bool,
    );
    let cases: &[Case] = &[
        (
            &[1, 1, 5, 5],
            &[1, 1, 3, 3],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
            false,
        ),
        (
            &[2, 3, 6, 5],
            &[4, 3, 3, 2],
            [2, 1],
            [1, 2],
            [1, 1],
            1,
            true,
        ),
        (
            &[1, 4, 7, 7],
            &[6, 2, 3, 3],
            [1, 2],
            [1, 1],
            [2, 1],
            2,
            true,
        ),
        (
            &[1, 4, 4, 4],
            &[4, 1, 1, 1],
            [1, 1],
            [0, 0],
            [1, 1],
            4,
            false,
        ),
        (
            &[0, 2, 4, 4],
            &[3, 2, 3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
    ];
    for dtype in FLOATS {
        for &(xs, ws, s, p, d, g, with_bias) in cases {
            let x = rand_tensor(&mut rng, dtype, xs);
            let w = rand_tensor(&mut rng, dtype, ws);
            let b = rand_tensor(&mut rng, dtype, &[ws[0]]);
            let bias = with_bias.then_some(&b);
            let i = |a: [usize; 2]| [a[0] as i64, a[1] as i64];
            let out = cpu::conv2d(&x, &w, bias, i(s), i(p), i(d), g as i64).unwrap();
            let (shape, e) = conv_ref(&x, &w, bias, s, p, d, g);
            let e: Vec<f64> = e.into_iter().map(|v| round_to(dtype, v)).collect();
            let (atol, rtol) = match dtype {
                DType::F16 | DType::BF16 => (0.1, 2e-2),
                DType::F32 => (1e-4, 1e-5),
                _ => (1e-10, 1e-10),
            };
            assert_eq!(out.shape(), &shape[..]);
            for (gv, ev) in out.to_f64_vec().iter().zip(&e) {
                assert!(
                    (gv - ev).abs() <= atol + rtol * ev.abs(),
                    "conv {dtype} {xs:?} {ws:?}: {gv} vs {ev}"
                );
            }
        }
    }
    let x = Tensor::zeros(DType::F32, &[1, 4, 5, 5]);
    let w = Tensor::zeros(DType::F32, &[2, 4, 3, 3]);
    assert!(cpu::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 1).is_ok());
    assert!(cpu::conv2d(&x, &w, None, [0, 1], [0, 0], [1, 1], 1).is_err());
    assert!(cpu::conv2d(&x, &w, None, [1, 1], [-1, 0], [1, 1], 1).is_err());
    assert!(cpu::conv2d(&x, &w, None, [1, 1], [0, 0], [1, 1], 2).is_err());
    assert!(cpu::conv2d(&x, &w, None, [1, 1], [0, 0], [3, 3], 1).is_err());
    assert!(cpu::conv2d(
        &x,
        &Tensor::zeros(DType::F32, &[2, 4, 3]),
        None,
        [1, 1],
        [0, 0],
        [1, 1],
        1
    )
    .is_err());
    let bad_bias = Tensor::zeros(DType::F32, &[3]);
    assert!(cpu::conv2d(&x, &w, Some(&bad_bias), [1, 1], [0, 0], [1, 1], 1).is_err());
    let xi = Tensor::zeros(DType::I64, &[1, 4, 5, 5]);
    assert!(cpu::conv2d(&xi, &w, None, [1, 1], [0, 0], [1, 1], 1).is_err());
}

#[test]
fn arange_and_full() {
    let a = cpu::arange(0.0, 5.0, 1.0, DType::I64).unwrap();
    assert_eq!(a.to_i64_vec(), vec![0, 1, 2, 3, 4]);
    let a = cpu::arange(1.0, 2.0, 0.3, DType::F32).unwrap();
    assert_close(&a, &[4], DType::F32, &[1.0, 1.3, 1.6, 1.9], "arange f32");
    let a = cpu::arange(5.0, 0.0, -2.0, DType::F64).unwrap();
    assert_eq!(a.to_f64_vec(), vec![5.0, 3.0, 1.0]);
    assert_eq!(
        cpu::arange(3.0, 3.0, 1.0, DType::BF16).unwrap().shape(),
        &[0]
    );
    assert!(cpu::arange(0.0, 1.0, 0.0, DType::F32).is_err());
    assert!(cpu::arange(0.0, 1.0, -1.0, DType::F32).is_err());
    assert!(cpu::arange(0.0, f64::INFINITY, 1.0, DType::F32).is_err());
    for dtype in DType::ALL {
        let f = cpu::full(&[2, 0, 3], 1.0, dtype).unwrap();
        assert_eq!((f.shape(), f.dtype()), (&[2usize, 0, 3][..], dtype));
        let f = cpu::full(&[2], 3.0, dtype).unwrap();
        assert_eq!(f.to_f64_vec(), vec![round_to(dtype, 3.0); 2]);
    }
    assert!(cpu::full(&[-1], 0.0, DType::F32).is_err());
    assert!(cpu::full(&[1 << 40, 1 << 40], 0.0, DType::F32).is_err());
}
