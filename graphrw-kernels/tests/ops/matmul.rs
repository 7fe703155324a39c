use graphrw_kernels::{cpu, DType, Tensor};

use crate::common::*;

/// torch.matmul by plain loops over f64.
fn reference(a: &Tensor, b: &Tensor) -> (Vec<usize>, Vec<f64>) {
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let a2 = if sa.len() == 1 {
        vec![1, sa[0]]
    } else {
        sa.clone()
    };
    let b2 = if sb.len() == 1 {
        vec![sb[0], 1]
    } else {
        sb.clone()
    };
    let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
    let (ba, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let batch = broadcast(ba, bb).unwrap();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let mut out = Vec::new();
    for bi in 0..batch.iter().product::<usize>() {
        let idx = unravel(bi, &batch);
        let (oa, ob) = (
            broadcast_index(&idx, ba) * m * k,
            broadcast_index(&idx, bb) * k * n,
        );
        for i in 0..m {
            for j in 0..n {
                out.push(
                    (0..k)
                        .map(|p| av[oa + i * k + p] * bv[ob + p * n + j])
                        .sum(),
                );
            }
        }
    }
    let mut shape = batch;
    if sa.len() > 1 {
        shape.push(m);
    }
    if sb.len() > 1 {
        shape.push(n);
    }
    (shape, out)
}

#[test]
fn matmul_matches_reference() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3], &[3, 4]),
        (&[3], &[3]),
        (&[3], &[3, 4]),
        (&[2, 3], &[3]),
        (&[5, 2, 3], &[3, 4]),
        (&[3], &[5, 3, 2]),
        (&[2, 1, 4, 3], &[5, 3, 2]),
        (&[0, 3], &[3, 4]),
        (&[2, 0], &[0, 4]),
        (&[1, 1], &[1, 1]),
        (&[2, 3, 0], &[0, 2]),
        (&[16, 8, 8], &[16, 8, 8]),
        (&[70, 33], &[33, 65]),
    ];
    let mut rng = Rng::new(5);
    for dtype in NUMERIC {
        for &(sa, sb) in cases {
            let a = rand_tensor(&mut rng, dtype, sa);
            let b = rand_tensor(&mut rng, dtype, sb);
            let out = cpu::matmul(&a, &b).unwrap();
            let (shape, expected) = reference(&a, &b);
            // Sums of k products: widen the absolute tolerance for the low-precision types.
            let expected: Vec<f64> = expected.into_iter().map(|v| round_to(dtype, v)).collect();
            let what = format!("matmul {dtype} {sa:?} @ {sb:?}");
            let (atol, rtol) = match dtype {
                DType::F16 | DType::BF16 => (0.1, 2e-2),
                DType::F32 => (1e-4, 1e-5),
                DType::F64 => (1e-10, 1e-10),
                _ => (0.0, 0.0),
            };
            assert_eq!(out.shape(), &shape[..], "{what}");
            assert_eq!(out.dtype(), dtype, "{what}");
            for (g, e) in out.to_f64_vec().iter().zip(&expected) {
                assert!((g - e).abs() <= atol + rtol * e.abs(), "{what}: {g} vs {e}");
            }
        }
    }
}

#[test]
fn matmul_rejects_bad_inputs() {
    let a = Tensor::zeros(DType::F32, &[2, 3]);
    let b = Tensor::zeros(DType::F32, &[4, 5]);
    assert_eq!(
        cpu::matmul(&a, &b).unwrap_err().to_string(),
        "matmul: inner dimensions differ: [2, 3] @ [4, 5]"
    );
    assert!(cpu::matmul(&Tensor::scalar(1.0f32), &a).is_err());
    assert!(cpu::matmul(&a, &Tensor::zeros(DType::F64, &[3, 2])).is_err());
    let bb = Tensor::zeros(DType::Bool, &[2, 2]);
    assert!(cpu::matmul(&bb, &bb).is_err());
    let x = Tensor::zeros(DType::F32, &[2, 2, 3]);
    let y = Tensor::zeros(DType::F32, &[3, 3, 2]);
    assert!(cpu::matmul(&x, &y)
        .unwrap_err()
        .to_string()
        .contains("batch dimensions"));
}
