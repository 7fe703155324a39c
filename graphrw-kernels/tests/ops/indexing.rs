use graphrw_kernels::{cpu, DType, KernelError, Tensor};

use crate::common::*;

fn index(dtype: DType, shape: &[usize], vals: &[i64]) -> Tensor {
    let v: Vec<f64> = vals.iter().map(|&v| v as f64).collect();
    Tensor::from_f64_slice(dtype, shape, &v).unwrap()
}

#[test]
fn gather_matches_reference() {
    let mut rng = Rng::new(31);
    let cases: &[(&[usize], i64, &[usize])] = &[
        (&[5], 0, &[3]),
        (&[4, 3], 0, &[2, 2]),
        (&[4, 3], 1, &[]),
        (&[2, 3, 4], -1, &[5]),
        (&[2, 3, 4], 1, &[0]),
        (&[2, 0, 4], 0, &[1]),
    ];
    for dtype in DType::ALL {
        for idt in [DType::I64, DType::I32] {
            for &(shape, dim, ishape) in cases {
                let x = rand_tensor(&mut rng, dtype, shape);
                let d = if dim < 0 {
                    (dim + shape.len() as i64) as usize
                } else {
                    dim as usize
                };
                let n = shape[d] as i64;
                let ivals: Vec<i64> = (0..ishape.iter().product())
                    .map(|_| rng.int(-n, n))
                    .collect();
                let idx = index(idt, ishape, &ivals);
                let out = cpu::gather(&x, &idx, dim).unwrap();
                let mut oshape = shape[..d].to_vec();
                oshape.extend_from_slice(ishape);
                oshape.extend_from_slice(&shape[d + 1..]);
                let xv = x.to_f64_vec();
                let e: Vec<f64> = (0..oshape.iter().product())
                    .map(|i| {
                        let o = unravel(i, &oshape);
                        let k = ravel(&o[d..d + ishape.len()], ishape);
                        let mut xi = o[..d].to_vec();
                        xi.push(ivals[k].rem_euclid(n) as usize);
                        xi.extend_from_slice(&o[d + ishape.len()..]);
                        xv[ravel(&xi, shape)]
                    })
                    .collect();
                assert_close(
                    &out,
                    &oshape,
                    dtype,
                    &e,
                    &format!("gather {shape:?} {dim} {ishape:?}"),
                );
            }
        }
    }
    let x = Tensor::zeros(DType::F32, &[3, 2]);
    let err = cpu::gather(&x, &index(DType::I64, &[1], &[3]), 0).unwrap_err();
    assert_eq!(
        err,
        KernelError::IndexOutOfRange {
            op: "gather",
            index: 3,
            size: 3
        }
    );
    assert!(cpu::gather(&x, &index(DType::I64, &[1], &[-4]), 0).is_err());
    assert!(cpu::gather(&x, &Tensor::zeros(DType::F32, &[1]), 0).is_err());
    assert!(cpu::gather(&x, &index(DType::I64, &[1], &[0]), 2).is_err());
}

#[test]
fn index_select_matches_gather() {
    let x = Tensor::from_vec(vec![3, 2], vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let idx = index(DType::I32, &[3], &[2, 0, 2]);
    let out = cpu::index_select(&x, 0, &idx).unwrap();
    assert_close(
        &out,
        &[3, 2],
        DType::F32,
        &[4.0, 5.0, 0.0, 1.0, 4.0, 5.0],
        "index_select",
    );
    let out = cpu::index_select(&x, -1, &index(DType::I64, &[1], &[1])).unwrap();
    assert_close(
        &out,
        &[3, 1],
        DType::F32,
        &[1.0, 3.0, 5.0],
        "index_select dim -1",
    );
    assert!(cpu::index_select(&x, 0, &index(DType::I64, &[1], &[-1])).is_err());
    assert!(cpu::index_select(&x, 0, &index(DType::I64, &[1, 1], &[0])).is_err());
    assert!(cpu::index_select(&x, 0, &index(DType::I64, &[1], &[3])).is_err());
}

#[test]
fn gather_elements_matches_reference() {
    let mut rng = Rng::new(32);
    let cases: &[(&[usize], i64, &[usize])] = &[
        (&[3, 4], 0, &[2, 4]),
        (&[3, 4], 1, &[3, 6]),
        (&[2, 3, 4], -1, &[2, 2, 1]),
        (&[2, 3, 4], 1, &[2, 0, 4]),
        (&[5], 0, &[7]),
    ];
    for dtype in DType::ALL {
        for &(shape, dim, ishape) in cases {
            let x = rand_tensor(&mut rng, dtype, shape);
            let d = if dim < 0 {
                (dim + shape.len() as i64) as usize
            } else {
                dim as usize
            };
            let n = shape[d] as i64;
            let ivals: Vec<i64> = (0..ishape.iter().product())
                .map(|_| rng.int(-n, n))
                .collect();
            let out = cpu::gather_elements(&x, &index(DType::I64, ishape, &ivals), dim).unwrap();
            let xv = x.to_f64_vec();
            let e: Vec<f64> = (0..ivals.len())
                .map(|i| {
                    let mut o = unravel(i, ishape);
                    o[d] = ivals[i].rem_euclid(n) as usize;
                    xv[ravel(&o, shape)]
                })
                .collect();
            assert_close(
                &out,
                ishape,
                dtype,
                &e,
                &format!("gather_elements {shape:?} {dim}"),
            );
        }
    }
    let x = Tensor::zeros(DType::F32, &[3, 4]);
    assert!(cpu::gather_elements(&x, &index(DType::I64, &[4, 1], &[0, 0, 0, 0]), 1).is_err());
    assert!(cpu::gather_elements(&x, &index(DType::I64, &[1], &[0]), 0).is_err());
    assert!(cpu::gather_elements(&x, &index(DType::I64, &[1, 1], &[4]), 1).is_err());
}

#[test]
fn gather_nd_follows_onnx_examples() {
    let data = Tensor::from_vec(vec![2, 2], vec![0i32, 1, 2, 3]).unwrap();
    let out = cpu::gather_nd(&data, &index(DType::I64, &[2, 2], &[0, 0, 1, 1]), 0).unwrap();
    assert_eq!((out.shape(), out.to_i64_vec()), (&[2usize][..], vec![0, 3]));
    let out = cpu::gather_nd(&data, &index(DType::I64, &[2, 1], &[1, 0]), 0).unwrap();
    assert_eq!(
        (out.shape(), out.to_i64_vec()),
        (&[2usize, 2][..], vec![2, 3, 0, 1])
    );
    let data3 = Tensor::from_vec(vec![2, 2, 2], (0..8).collect::<Vec<i64>>()).unwrap();
    let out = cpu::gather_nd(&data3, &index(DType::I64, &[2, 1, 2], &[0, 1, 1, 0]), 0).unwrap();
    assert_eq!(
        (out.shape(), out.to_i64_vec()),
        (&[2usize, 1, 2][..], vec![2, 3, 4, 5])
    );
    let out = cpu::gather_nd(&data3, &index(DType::I32, &[2, 1], &[1, 0]), 1).unwrap();
    assert_eq!(
        (out.shape(), out.to_i64_vec()),
        (&[2usize, 2][..], vec![2, 3, 4, 5])
    );
    let out = cpu::gather_nd(&data3, &index(DType::I64, &[1, 3], &[-1, 0, -1]), 0).unwrap();
    assert_eq!(out.to_i64_vec(), vec![5]);
    let f = Tensor::from_vec(vec![2, 2], vec![0.5f32, 1.5, 2.5, 3.5]).unwrap();
    let out = cpu::gather_nd(&f, &index(DType::I64, &[1, 1], &[1]), 0).unwrap();
    assert_close(&out, &[1, 2], DType::F32, &[2.5, 3.5], "gather_nd f32");

    assert!(cpu::gather_nd(&data, &index(DType::I64, &[1, 3], &[0, 0, 0]), 0).is_err());
    assert!(cpu::gather_nd(&data, &index(DType::I64, &[1, 2], &[0, 2]), 0).is_err());
    assert!(cpu::gather_nd(&data, &index(DType::I64, &[2, 1], &[0, 0]), 2).is_err());
    assert!(cpu::gather_nd(&data3, &index(DType::I64, &[3, 1], &[0, 0, 0]), 1).is_err());
    assert!(cpu::gather_nd(&data, &index(DType::I64, &[1], &[0]), -1).is_err());
}

#[test]
fn cumsum_matches_reference() {
    let mut rng = Rng::new(33);
    for dtype in DType::ALL {
        for (shape, dim) in [
            (&[5][..], 0i64),
            (&[3, 4], 1),
            (&[3, 4], 0),
            (&[2, 3, 2], -2),
            (&[0, 3], 1),
            (&[], 0),
        ] {
            let x = rand_tensor(&mut rng, dtype, shape);
            let out = cpu::cumsum(&x, dim).unwrap();
            let r = shape.len().max(1);
            let d = if dim < 0 {
                (dim + r as i64) as usize
            } else {
                dim as usize
            };
            let s1: Vec<usize> = if shape.is_empty() {
                vec![1]
            } else {
                shape.to_vec()
            };
            let xv = x.to_f64_vec();
            let e: Vec<f64> = (0..xv.len())
                .map(|i| {
                    let mut idx = unravel(i, &s1);
                    let upto = idx[d];
                    (0..=upto)
                        .map(|k| {
                            idx[d] = k;
                            xv[ravel(&idx, &s1)]
                        })
                        .sum()
                })
                .collect();
            // Every dtype but bool keeps its own (ONNX's `CumSum`), integers wrapping.
            let out_dtype = if dtype == DType::Bool {
                DType::I64
            } else {
                dtype
            };
            let e: Vec<f64> = e.into_iter().map(|v| round_to(out_dtype, v)).collect();
            assert_close(
                &out,
                shape,
                out_dtype,
                &e,
                &format!("cumsum {dtype} {shape:?} {dim}"),
            );
        }
    }
    assert!(cpu::cumsum(&Tensor::zeros(DType::F32, &[2]), 1).is_err());
}

/// An embedding lookup drawing its output from a plan's pool: a recycled buffer of
/// stale values is handed out, and every element is overwritten.
#[test]
fn gather_into_a_recycled_buffer_overwrites_it() {
    use graphrw_kernels::cpu::pool::BufferPool;
    use std::sync::Arc;
    let (vocab, width, n) = (300, 256, 70);
    let table: Vec<f32> = (0..vocab * width).map(|i| i as f32).collect();
    let table = Tensor::from_vec(vec![vocab, width], table).unwrap();
    let ids: Vec<i64> = (0..n as i64).map(|i| (i * 37) % vocab as i64).collect();
    let ids = index(DType::I64, &[n], &ids);
    let pool = Arc::new(BufferPool::new());
    pool.raise_limit(1 << 30);
    pool.recycle(Tensor::from_vec(vec![n * width], vec![f32::NAN; n * width]).unwrap());
    let _installed = pool.install();
    let got = cpu::gather(&table, &ids, 0).unwrap();
    assert!(
        pool.reused_bytes() > 0,
        "the recycled buffer was not drawn on"
    );
    let got = got.as_slice::<f32>().unwrap();
    for (r, row) in got.chunks(width).enumerate() {
        let id = (r * 37) % vocab;
        let want: Vec<f32> = (0..width).map(|j| (id * width + j) as f32).collect();
        assert_eq!(row, want.as_slice(), "row {r}");
    }
}
