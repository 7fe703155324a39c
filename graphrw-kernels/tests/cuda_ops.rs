//! The graph-op CUDA kernels against the CPU reference kernels (feature `cuda`), on many
//! shapes: size 1, sizes that are not multiples of a block, empty tensors, broadcasting,
//! f32/f16/bf16 with per-dtype tolerances, negative and out-of-range indices. Without a
//! GPU every test prints `skipped: no CUDA device` and returns.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use graphrw_kernels::cpu::{self, BinaryOp, ReduceOp, UnaryOp};
use graphrw_kernels::cuda::{self, CudaDevice, CudaTensor};
use graphrw_kernels::{DType, Tensor};

fn gpu(test: &str) -> Option<Arc<CudaDevice>> {
    match CudaDevice::get(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: no CUDA device: {test}: {e}");
            None
        }
    }
}

fn rand_tensor(dtype: DType, shape: &[usize], seed: u64, amp: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let data: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * amp
        })
        .collect();
    Tensor::from_f64_slice(dtype, shape, &data).unwrap()
}

fn tol(d: DType) -> f64 {
    match d {
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        _ => 2e-5,
    }
}

/// Checks dtype, shape and values (relative tolerance for large values; NaN = NaN).
fn same(what: &str, got: &CudaTensor, want: &Tensor) {
    let host = got.to_host().unwrap();
    assert_eq!(host.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(host.shape(), want.shape(), "{what}: shape");
    let t = tol(want.dtype());
    for (i, (g, w)) in host
        .to_f64_vec()
        .into_iter()
        .zip(want.to_f64_vec())
        .enumerate()
    {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= t * (1.0 + w.abs());
        assert!(ok, "{what}: element {i} is {g}, the CPU gives {w}");
    }
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
fn gpu_unary_ops_match_cpu() {
    let Some(dev) = gpu("gpu_unary_ops_match_cpu") else {
        return;
    };
    let ops = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Reciprocal,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Erf,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
        UnaryOp::IsNan,
    ];
    for dtype in FLOATS {
        for shape in [vec![1], vec![257], vec![3, 5, 7], vec![0, 4], vec![]] {
            let x = rand_tensor(dtype, &shape, 7, 3.0);
            let pos = cpu::unary(UnaryOp::Abs, &x).unwrap();
            let dx = dev.upload(&x).unwrap();
            let dpos = dev.upload(&pos).unwrap();
            for op in ops {
                let (h, d) = if matches!(op, UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Log) {
                    (&pos, &dpos)
                } else {
                    (&x, &dx)
                };
                let want = cpu::unary(op, h).unwrap();
                same(
                    &format!("{op:?} {dtype} {shape:?}"),
                    &cuda::unary(op, d).unwrap(),
                    &want,
                );
            }
        }
    }
    let b = Tensor::from_vec(vec![3], vec![true, false, true]).unwrap();
    same(
        "not",
        &cuda::unary(UnaryOp::Not, &dev.upload(&b).unwrap()).unwrap(),
        &cpu::unary(UnaryOp::Not, &b).unwrap(),
    );
    let nan = Tensor::from_vec(vec![3], vec![f32::NAN, -1.0, 2.0]).unwrap();
    let dn = dev.upload(&nan).unwrap();
    same(
        "relu keeps NaN",
        &cuda::unary(UnaryOp::Relu, &dn).unwrap(),
        &cpu::unary(UnaryOp::Relu, &nan).unwrap(),
    );
    same(
        "isnan",
        &cuda::unary(UnaryOp::IsNan, &dn).unwrap(),
        &cpu::unary(UnaryOp::IsNan, &nan).unwrap(),
    );
    assert!(cuda::unary(
        UnaryOp::Exp,
        &dev.upload(&Tensor::from_vec(vec![1], vec![1i64]).unwrap())
            .unwrap()
    )
    .is_err());
}

#[test]
fn gpu_binary_ops_broadcast_like_cpu() {
    let Some(dev) = gpu("gpu_binary_ops_broadcast_like_cpu") else {
        return;
    };
    let shapes: [(&[usize], &[usize]); 6] = [
        (&[1], &[1]),
        (&[1000], &[1000]),
        (&[2, 3, 17], &[17]),
        (&[4, 1, 5], &[1, 3, 1]),
        (&[2, 1, 1, 65], &[2, 3, 9, 1]),
        (&[0, 3], &[3]),
    ];
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
    ];
    for dtype in FLOATS {
        for (i, (sa, sb)) in shapes.iter().enumerate() {
            let a = rand_tensor(dtype, sa, i as u64, 2.0);
            let b = rand_tensor(dtype, sb, 50 + i as u64, 2.0);
            let apos = cpu::unary(UnaryOp::Abs, &a).unwrap();
            let (da, db, dapos) = (
                dev.upload(&a).unwrap(),
                dev.upload(&b).unwrap(),
                dev.upload(&apos).unwrap(),
            );
            for op in ops {
                let (h, d) = if op == BinaryOp::Pow {
                    (&apos, &dapos)
                } else {
                    (&a, &da)
                };
                let want = cpu::binary(op, h, &b).unwrap();
                same(
                    &format!("{op:?} {dtype} {sa:?} {sb:?}"),
                    &cuda::binary(op, d, &db).unwrap(),
                    &want,
                );
            }
        }
    }
    // Integers and bools.
    let a = Tensor::from_vec(vec![2, 3], vec![1i64, -5, 7, i64::MAX, 0, 3]).unwrap();
    let b = Tensor::from_vec(vec![3], vec![2i64, 3, -1]).unwrap();
    let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Maximum,
        BinaryOp::Lt,
        BinaryOp::Eq,
    ] {
        same(
            &format!("{op:?} i64"),
            &cuda::binary(op, &da, &db).unwrap(),
            &cpu::binary(op, &a, &b).unwrap(),
        );
    }
    assert!(
        cuda::binary(BinaryOp::Div, &da, &db).is_err(),
        "integer division stays on the CPU"
    );
    let p = Tensor::from_vec(vec![4], vec![true, true, false, false]).unwrap();
    let q = Tensor::from_vec(vec![4], vec![true, false, true, false]).unwrap();
    let (dp, dq) = (dev.upload(&p).unwrap(), dev.upload(&q).unwrap());
    for op in [BinaryOp::And, BinaryOp::Or] {
        same(
            &format!("{op:?}"),
            &cuda::binary(op, &dp, &dq).unwrap(),
            &cpu::binary(op, &p, &q).unwrap(),
        );
    }
    let bad = dev
        .upload(&rand_tensor(DType::F32, &[3, 4], 1, 1.0))
        .unwrap();
    let bad2 = dev.upload(&rand_tensor(DType::F32, &[5], 1, 1.0)).unwrap();
    assert!(
        cuda::binary(BinaryOp::Add, &bad, &bad2).is_err(),
        "shapes that do not broadcast"
    );
}

#[test]
fn gpu_where_and_cast_match_cpu() {
    let Some(dev) = gpu("gpu_where_and_cast_match_cpu") else {
        return;
    };
    let cond: Vec<bool> = (0..35).map(|i| i % 3 != 0).collect();
    let c = Tensor::from_vec(vec![5, 7], cond).unwrap();
    for dtype in FLOATS {
        let a = rand_tensor(dtype, &[3, 5, 1], 1, 1.0);
        let b = rand_tensor(dtype, &[7], 2, 1.0);
        let got = cuda::where_(
            &dev.upload(&c).unwrap(),
            &dev.upload(&a).unwrap(),
            &dev.upload(&b).unwrap(),
        )
        .unwrap();
        same(
            &format!("where {dtype}"),
            &got,
            &cpu::where_(&c, &a, &b).unwrap(),
        );
    }
    let x = Tensor::from_vec(vec![6], vec![1.7f32, -2.5, 0.0, 3e9, -0.4, 65504.0]).unwrap();
    let dx = dev.upload(&x).unwrap();
    for to in [
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::Bool,
        DType::F64,
    ] {
        same(
            &format!("cast f32 -> {to}"),
            &cuda::cast(&dx, to).unwrap(),
            &cpu::cast(&x, to).unwrap(),
        );
    }
    let i = Tensor::from_vec(vec![4], vec![0i64, 1, -3, 1 << 40]).unwrap();
    let di = dev.upload(&i).unwrap();
    for to in [DType::F32, DType::Bool, DType::I32, DType::F64] {
        same(
            &format!("cast i64 -> {to}"),
            &cuda::cast(&di, to).unwrap(),
            &cpu::cast(&i, to).unwrap(),
        );
    }
}

#[test]
fn gpu_layout_ops_match_cpu() {
    let Some(dev) = gpu("gpu_layout_ops_match_cpu") else {
        return;
    };
    for dtype in [DType::F32, DType::F16, DType::I64, DType::Bool] {
        let x = rand_tensor(DType::F32, &[2, 3, 5, 7], 3, 10.0);
        let x = cpu::cast(&x, dtype).unwrap();
        let dx = dev.upload(&x).unwrap();
        let w = |s: &str| format!("{s} {dtype}");
        same(
            &w("permute"),
            &cuda::permute(&dx, &[2, 0, 3, 1]).unwrap(),
            &cpu::permute(&x, &[2, 0, 3, 1]).unwrap(),
        );
        same(
            &w("transpose"),
            &cuda::transpose(&dx, -1, -2).unwrap(),
            &cpu::transpose(&x, -1, -2).unwrap(),
        );
        for (d, s, e, st) in [
            (0, 0, 1, 1),
            (1, 1, 3, 1),
            (3, -4, 100, 2),
            (2, 4, 2, 1),
            (3, 0, 7, 3),
        ] {
            same(
                &w(&format!("slice {d} {s}:{e}:{st}")),
                &cuda::slice(&dx, d, s, e, st).unwrap(),
                &cpu::slice(&x, d, s, e, st).unwrap(),
            );
        }
        let parts = cuda::split(&dx, &[1, 0, 4], 2).unwrap();
        for (g, w2) in parts.iter().zip(cpu::split(&x, &[1, 0, 4], 2).unwrap()) {
            same(&w("split"), g, &w2);
        }
        let y = cpu::slice(&x, 1, 0, 2, 1).unwrap();
        let dy = dev.upload(&y).unwrap();
        same(
            &w("concat"),
            &cuda::concat(&[&dx, &dy, &dx], 1).unwrap(),
            &cpu::concat(&[&x, &y, &x], 1).unwrap(),
        );
        let z = cpu::slice(&x, 0, 0, 1, 1).unwrap();
        let dz = dev.upload(&z).unwrap();
        same(
            &w("expand"),
            &cuda::expand(&dz, &[4, 3, 5, -1]).unwrap(),
            &cpu::expand(&z, &[4, 3, 5, -1]).unwrap(),
        );
        same(
            &w("expand lead"),
            &cuda::expand(&dz, &[2, 2, 3, 5, 7]).unwrap(),
            &cpu::expand(&z, &[2, 2, 3, 5, 7]).unwrap(),
        );
    }
    let x = dev
        .upload(&rand_tensor(DType::F32, &[2, 3], 1, 1.0))
        .unwrap();
    assert!(cuda::permute(&x, &[0, 0]).is_err());
    assert!(cuda::expand(&x, &[4, 3]).is_err());
    assert!(cuda::split(&x, &[1, 1], 1).is_err());
    assert!(cuda::slice(&x, 5, 0, 1, 1).is_err());
}

#[test]
fn gpu_gathers_match_cpu_and_reject_bad_indices() {
    let Some(dev) = gpu("gpu_gathers_match_cpu_and_reject_bad_indices") else {
        return;
    };
    let x = rand_tensor(DType::F32, &[5, 4, 3], 9, 1.0);
    let dx = dev.upload(&x).unwrap();
    let idx = Tensor::from_vec(vec![2, 3], vec![0i64, 4, -1, 2, 2, -5]).unwrap();
    let didx = dev.upload(&idx).unwrap();
    same(
        "gather 0",
        &cuda::gather(&dx, &didx, 0).unwrap(),
        &cpu::gather(&x, &idx, 0).unwrap(),
    );
    let idx1 = Tensor::from_vec(vec![2], vec![3i32, -4]).unwrap();
    same(
        "gather 1 i32",
        &cuda::gather(&dx, &dev.upload(&idx1).unwrap(), 1).unwrap(),
        &cpu::gather(&x, &idx1, 1).unwrap(),
    );
    let ge = Tensor::from_vec(
        vec![5, 2, 3],
        (0..30).map(|i| (i * 7 % 4) as i64 - 1).collect(),
    )
    .unwrap();
    same(
        "gather_elements",
        &cuda::gather_elements(&dx, &dev.upload(&ge).unwrap(), 1).unwrap(),
        &cpu::gather_elements(&x, &ge, 1).unwrap(),
    );
    let nd = Tensor::from_vec(vec![3, 2], vec![0i64, 1, 4, -1, 2, 2]).unwrap();
    same(
        "gather_nd",
        &cuda::gather_nd(&dx, &dev.upload(&nd).unwrap(), 0).unwrap(),
        &cpu::gather_nd(&x, &nd, 0).unwrap(),
    );
    let ndb = Tensor::from_vec(vec![5, 1], vec![0i64, 3, 1, 2, -1]).unwrap();
    same(
        "gather_nd batch",
        &cuda::gather_nd(&dx, &dev.upload(&ndb).unwrap(), 1).unwrap(),
        &cpu::gather_nd(&x, &ndb, 1).unwrap(),
    );
    let bad = dev
        .upload(&Tensor::from_vec(vec![2], vec![1i64, 5]).unwrap())
        .unwrap();
    let err = cuda::gather(&dx, &bad, 0).unwrap_err().to_string();
    assert!(err.contains("index 5"), "{err}");
    let bad_nd = dev
        .upload(&Tensor::from_vec(vec![1, 2], vec![0i64, 9]).unwrap())
        .unwrap();
    assert!(cuda::gather_nd(&dx, &bad_nd, 0).is_err());
}

#[test]
fn gpu_rows_match_cpu() {
    let Some(dev) = gpu("gpu_rows_match_cpu") else {
        return;
    };
    for dtype in FLOATS {
        for shape in [
            vec![1],
            vec![3, 1000],
            vec![2, 5, 33],
            vec![4, 2049],
            vec![0, 8],
        ] {
            let x = rand_tensor(dtype, &shape, 11, 4.0);
            let dx = dev.upload(&x).unwrap();
            let w = |s: &str| format!("{s} {dtype} {shape:?}");
            for dim in [-1, 0] {
                same(
                    &w("softmax"),
                    &cuda::softmax(&dx, dim).unwrap(),
                    &cpu::softmax(&x, dim).unwrap(),
                );
                same(
                    &w("log_softmax"),
                    &cuda::log_softmax(&dx, dim).unwrap(),
                    &cpu::log_softmax(&x, dim).unwrap(),
                );
            }
            let last = *shape.last().unwrap();
            let g = rand_tensor(dtype, &[last], 12, 1.0);
            let b = rand_tensor(dtype, &[last], 13, 1.0);
            let (dg, db) = (dev.upload(&g).unwrap(), dev.upload(&b).unwrap());
            same(
                &w("layer_norm"),
                &cuda::layer_norm(&dx, Some(&dg), Some(&db), -1, 1e-5).unwrap(),
                &cpu::layer_norm(&x, Some(&g), Some(&b), -1, 1e-5).unwrap(),
            );
            same(
                &w("layer_norm bare"),
                &cuda::layer_norm(&dx, None, None, 0, 1e-5).unwrap(),
                &cpu::layer_norm(&x, None, None, 0, 1e-5).unwrap(),
            );
            same(
                &w("rms_norm"),
                &cuda::rms_norm(&dx, Some(&dg), -1, 1e-6).unwrap(),
                &cpu::rms_norm(&x, Some(&g), -1, 1e-6).unwrap(),
            );
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Amax] {
                for (dims, keep) in [(vec![-1], true), (vec![0], false), (vec![], false)] {
                    if op == ReduceOp::Amax && x.numel() == 0 {
                        continue;
                    }
                    let want = cpu::reduce(op, &x, &dims, keep).unwrap();
                    same(
                        &w(&format!("{op:?} {dims:?} {keep}")),
                        &cuda::reduce(op, &dx, &dims, keep).unwrap(),
                        &want,
                    );
                }
            }
        }
    }
    // Fully masked softmax rows give NaN like the CPU; amax propagates NaN.
    let x = Tensor::from_vec(
        vec![2, 3],
        vec![
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            1.0,
            f32::NAN,
            0.0,
        ],
    )
    .unwrap();
    let dx = dev.upload(&x).unwrap();
    same(
        "softmax -inf row",
        &cuda::softmax(&dx, -1).unwrap(),
        &cpu::softmax(&x, -1).unwrap(),
    );
    same(
        "amax NaN",
        &cuda::reduce(ReduceOp::Amax, &dx, &[-1], false).unwrap(),
        &cpu::reduce(ReduceOp::Amax, &x, &[-1], false).unwrap(),
    );
    let r4 = dev
        .upload(&rand_tensor(DType::F32, &[2, 3, 4, 5], 3, 1.0))
        .unwrap();
    let h4 = r4.to_host().unwrap();
    same(
        "sum dims 1,3",
        &cuda::reduce(ReduceOp::Sum, &r4, &[1, 3], true).unwrap(),
        &cpu::reduce(ReduceOp::Sum, &h4, &[1, 3], true).unwrap(),
    );
}

#[test]
fn gpu_matmul_matches_cpu() {
    let Some(dev) = gpu("gpu_matmul_matches_cpu") else {
        return;
    };
    let shapes: [(&[usize], &[usize]); 8] = [
        (&[1, 1], &[1, 1]),
        (&[7], &[7]),
        (&[5], &[5, 3]),
        (&[4, 5], &[5]),
        (&[3, 17, 33], &[33, 9]),
        (&[2, 1, 6, 8], &[3, 8, 5]),
        (&[6, 8], &[2, 3, 8, 5]),
        (&[2, 0, 4], &[4, 3]),
    ];
    for dtype in FLOATS {
        for (sa, sb) in shapes {
            let a = rand_tensor(dtype, sa, 1, 1.0);
            let b = rand_tensor(dtype, sb, 2, 1.0);
            let got = cuda::matmul(&dev.upload(&a).unwrap(), &dev.upload(&b).unwrap()).unwrap();
            let want = cpu::matmul(&a, &b).unwrap();
            same(&format!("matmul {dtype} {sa:?} {sb:?}"), &got, &want);
        }
    }
    let a = dev
        .upload(&rand_tensor(DType::F32, &[2, 3], 1, 1.0))
        .unwrap();
    assert!(cuda::matmul(&a, &a).is_err(), "inner dims differ");
}
