use graphrw_kernels::cpu::{self, BinaryOp, UnaryOp};
use graphrw_kernels::{DType, KernelError, Tensor};

use crate::common::*;

const PAIRS: &[(&[usize], &[usize])] = &[
    (&[2, 3], &[2, 3]),
    (&[2, 3], &[3]),
    (&[2, 3], &[]),
    (&[], &[2, 3]),
    (&[4, 1, 3], &[2, 1]),
    (&[0, 3], &[3]),
    (&[1], &[5]),
    (&[2, 0], &[1, 1]),
    (&[3, 1, 4, 2], &[1, 5, 4, 1]),
    (&[2, 1], &[1, 2, 3]),
];

/// Runs `op` on every shape pair and compares with `reference` on the f64 inputs.
fn check_binary(
    op: BinaryOp,
    dtype: DType,
    out_dtype: DType,
    reference: impl Fn(f64, f64) -> f64,
    fix_b: impl Fn(f64) -> f64,
) {
    let mut rng = Rng::new(op as u64 * 31 + dtype as u64);
    for &(sa, sb) in PAIRS {
        let a = rand_tensor(&mut rng, dtype, sa);
        let b = rand_tensor(&mut rng, dtype, sb);
        let bv: Vec<f64> = b.to_f64_vec().into_iter().map(&fix_b).collect();
        let b = Tensor::from_f64_slice(dtype, sb, &bv).unwrap();
        let out = cpu::binary(op, &a, &b).unwrap();
        let shape = broadcast(sa, sb).unwrap();
        let (av, n) = (a.to_f64_vec(), shape.iter().product::<usize>());
        let expected: Vec<f64> = (0..n)
            .map(|i| {
                let idx = unravel(i, &shape);
                round_to(
                    out_dtype,
                    reference(av[broadcast_index(&idx, sa)], bv[broadcast_index(&idx, sb)]),
                )
            })
            .collect();
        assert_close(
            &out,
            &shape,
            out_dtype,
            &expected,
            &format!("{op:?} {dtype} {sa:?} {sb:?}"),
        );
    }
}

fn id(v: f64) -> f64 {
    v
}

fn nonzero(v: f64) -> f64 {
    if v == 0.0 {
        1.0
    } else {
        v
    }
}

fn maximum(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.max(y)
    }
}

fn minimum(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.min(y)
    }
}

#[test]
fn arithmetic_matches_reference_for_numeric_dtypes() {
    for dtype in NUMERIC {
        check_binary(BinaryOp::Add, dtype, dtype, |x, y| x + y, id);
        check_binary(BinaryOp::Sub, dtype, dtype, |x, y| x - y, id);
        check_binary(BinaryOp::Mul, dtype, dtype, |x, y| x * y, id);
        check_binary(BinaryOp::Maximum, dtype, dtype, maximum, id);
        check_binary(BinaryOp::Minimum, dtype, dtype, minimum, id);
        if dtype.is_int() {
            check_binary(BinaryOp::Div, dtype, dtype, |x, y| (x / y).trunc(), nonzero);
            check_binary(
                BinaryOp::Pow,
                dtype,
                dtype,
                |x, y| x.powf(y),
                |v: f64| v.abs(),
            );
        } else {
            check_binary(BinaryOp::Div, dtype, dtype, |x, y| x / y, nonzero);
            check_binary(BinaryOp::Pow, dtype, dtype, f64::powf, id);
        }
    }
}

#[test]
fn comparisons_give_bool_for_every_dtype() {
    for dtype in DType::ALL {
        let b = DType::Bool;
        check_binary(BinaryOp::Eq, dtype, b, |x, y| (x == y) as u8 as f64, id);
        check_binary(BinaryOp::Ne, dtype, b, |x, y| (x != y) as u8 as f64, id);
        check_binary(BinaryOp::Lt, dtype, b, |x, y| (x < y) as u8 as f64, id);
        check_binary(BinaryOp::Le, dtype, b, |x, y| (x <= y) as u8 as f64, id);
        check_binary(BinaryOp::Gt, dtype, b, |x, y| (x > y) as u8 as f64, id);
        check_binary(BinaryOp::Ge, dtype, b, |x, y| (x >= y) as u8 as f64, id);
    }
    let b = DType::Bool;
    check_binary(
        BinaryOp::And,
        b,
        b,
        |x, y| (x != 0.0 && y != 0.0) as u8 as f64,
        id,
    );
    check_binary(
        BinaryOp::Or,
        b,
        b,
        |x, y| (x != 0.0 || y != 0.0) as u8 as f64,
        id,
    );
}

#[test]
fn large_tensors_take_the_parallel_paths() {
    let mut rng = Rng::new(7);
    for (sa, sb) in [
        (vec![300, 257], vec![257]),
        (vec![300, 257], vec![300, 257]),
        (vec![300, 257], vec![300, 1]),
    ] {
        let a = rand_tensor(&mut rng, DType::F32, &sa);
        let b = rand_tensor(&mut rng, DType::F32, &sb);
        let out = cpu::binary(BinaryOp::Mul, &a, &b).unwrap();
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        let expected: Vec<f64> = (0..out.numel())
            .map(|i| {
                let idx = unravel(i, &sa);
                av[i] * bv[broadcast_index(&idx, &sb)]
            })
            .collect();
        assert_close(&out, &sa, DType::F32, &expected, "large mul");
    }
}

#[test]
fn integer_division_truncates_and_rejects_zero() {
    let a = Tensor::from_vec(vec![4], vec![7i64, -7, 7, i64::MIN]).unwrap();
    let b = Tensor::from_vec(vec![4], vec![2i64, 2, -2, -1]).unwrap();
    let q = cpu::binary(BinaryOp::Div, &a, &b).unwrap();
    assert_eq!(q.to_i64_vec(), vec![3, -3, -3, i64::MIN]);
    let z = Tensor::from_vec(vec![1], vec![0i32]).unwrap();
    let a32 = Tensor::from_vec(vec![1], vec![1i32]).unwrap();
    assert_eq!(
        cpu::binary(BinaryOp::Div, &a32, &z).unwrap_err(),
        KernelError::DivisionByZero { op: "div" }
    );
}

#[test]
fn pow_keeps_lhs_dtype_with_other_exponent_dtypes() {
    let a = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let e = Tensor::scalar(2i64);
    let out = cpu::binary(BinaryOp::Pow, &a, &e).unwrap();
    assert_close(&out, &[3], DType::F32, &[1.0, 4.0, 9.0], "pow f32^i64");
    let ai = Tensor::from_vec(vec![2], vec![2i64, 3]).unwrap();
    let half = Tensor::scalar(0.5f64);
    assert_eq!(
        cpu::binary(BinaryOp::Pow, &ai, &half).unwrap().to_i64_vec(),
        vec![1, 1]
    );
    let neg = Tensor::scalar(-1i64);
    assert!(cpu::binary(BinaryOp::Pow, &ai, &neg).is_err());
}

#[test]
fn binary_rejects_bad_inputs() {
    let f = Tensor::zeros(DType::F32, &[2, 3]);
    let g = Tensor::zeros(DType::F32, &[4]);
    let err = cpu::binary(BinaryOp::Add, &f, &g).unwrap_err();
    assert_eq!(
        err.to_string(),
        "add: shapes [2, 3] and [4] cannot be broadcast together"
    );
    let i = Tensor::zeros(DType::I64, &[2, 3]);
    assert!(matches!(
        cpu::binary(BinaryOp::Mul, &f, &i),
        Err(KernelError::DTypeMismatch { .. })
    ));
    assert!(cpu::binary(BinaryOp::And, &f, &f).is_err());
    let b = Tensor::zeros(DType::Bool, &[3]);
    assert!(cpu::binary(BinaryOp::Add, &b, &b).is_err());
    assert!(cpu::binary(BinaryOp::Pow, &b, &b).is_err());
}

type Ref = fn(f64) -> f64;

fn erf_ref(x: f64) -> f64 {
    libm::erf(x)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn float_unary_ops_match_reference() {
    let cases: &[(UnaryOp, Ref)] = &[
        (UnaryOp::Neg, |x| -x),
        (UnaryOp::Abs, f64::abs),
        (UnaryOp::Reciprocal, |x| 1.0 / x),
        (UnaryOp::Sqrt, f64::sqrt),
        (UnaryOp::Rsqrt, |x| 1.0 / x.sqrt()),
        (UnaryOp::Exp, f64::exp),
        (UnaryOp::Log, f64::ln),
        (UnaryOp::Sin, f64::sin),
        (UnaryOp::Cos, f64::cos),
        (UnaryOp::Erf, erf_ref),
        (UnaryOp::Tanh, f64::tanh),
        (UnaryOp::Sigmoid, sigmoid),
        (UnaryOp::Relu, |x| x.max(0.0)),
        (UnaryOp::Gelu, |x| {
            0.5 * x * (1.0 + erf_ref(x / 2f64.sqrt()))
        }),
        (UnaryOp::GeluTanh, |x| {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }),
        (UnaryOp::Silu, |x| x * sigmoid(x)),
    ];
    let shapes: &[&[usize]] = &[&[], &[0], &[1], &[3, 4], &[2, 1, 5]];
    let mut rng = Rng::new(3);
    for dtype in FLOATS {
        for &(op, f) in cases {
            for &shape in shapes {
                let x = rand_tensor(&mut rng, dtype, shape);
                let out = cpu::unary(op, &x).unwrap();
                let expected: Vec<f64> = x
                    .to_f64_vec()
                    .into_iter()
                    .map(|v| round_to(dtype, f(v)))
                    .collect();
                assert_close(
                    &out,
                    shape,
                    dtype,
                    &expected,
                    &format!("{op:?} {dtype} {shape:?}"),
                );
            }
        }
    }
}

#[test]
fn erf_is_precise() {
    let x = Tensor::from_vec(vec![3], vec![0.5f64, -1.5, 3.0]).unwrap();
    let out = cpu::unary(UnaryOp::Erf, &x).unwrap().to_f64_vec();
    let expected = [
        0.520_499_877_813_046_5,
        -0.966_105_146_475_310_7,
        0.999_977_909_503_001_4,
    ];
    for (g, e) in out.iter().zip(expected) {
        assert!((g - e).abs() < 1e-14, "{g} vs {e}");
    }
}

#[test]
fn integer_and_bool_unary_ops() {
    let i = Tensor::from_vec(vec![4], vec![-3i32, 0, 5, i32::MIN]).unwrap();
    assert_eq!(
        cpu::unary(UnaryOp::Neg, &i).unwrap().to_i64_vec(),
        vec![3, 0, -5, i32::MIN as i64]
    );
    assert_eq!(
        cpu::unary(UnaryOp::Abs, &i).unwrap().to_i64_vec(),
        vec![3, 0, 5, i32::MIN as i64]
    );
    assert_eq!(
        cpu::unary(UnaryOp::Relu, &i).unwrap().to_i64_vec(),
        vec![0, 0, 5, 0]
    );
    assert_eq!(
        cpu::unary(UnaryOp::IsNan, &i).unwrap().to_i64_vec(),
        vec![0, 0, 0, 0]
    );
    let b = Tensor::from_vec(vec![2], vec![true, false]).unwrap();
    assert_eq!(
        cpu::unary(UnaryOp::Not, &b)
            .unwrap()
            .as_slice::<bool>()
            .unwrap(),
        &[false, true]
    );
    for dtype in FLOATS {
        let f = Tensor::from_f64_slice(dtype, &[3], &[1.0, f64::NAN, f64::INFINITY]).unwrap();
        let n = cpu::unary(UnaryOp::IsNan, &f).unwrap();
        assert_eq!(
            n.as_slice::<bool>().unwrap(),
            &[false, true, false],
            "{dtype}"
        );
        assert!(cpu::unary(UnaryOp::Relu, &f).unwrap().to_f64_vec()[1].is_nan());
    }
}

#[test]
fn unary_rejects_bad_dtypes() {
    let i = Tensor::zeros(DType::I64, &[2]);
    let f = Tensor::zeros(DType::F32, &[2]);
    let b = Tensor::zeros(DType::Bool, &[2]);
    assert_eq!(
        cpu::unary(UnaryOp::Exp, &i).unwrap_err().to_string(),
        "exp: unsupported dtype i64 (expected a float dtype (f32, f64, f16, bf16))"
    );
    assert!(cpu::unary(UnaryOp::Not, &f).is_err());
    assert!(cpu::unary(UnaryOp::Neg, &b).is_err());
}

#[test]
fn where_broadcasts_three_ways() {
    let mut rng = Rng::new(11);
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[2, 3], &[2, 3], &[2, 3]),
        (&[3], &[2, 1], &[]),
        (&[2, 1, 4], &[3, 1], &[4]),
        (&[0], &[1], &[1]),
    ];
    for dtype in DType::ALL {
        for &(sc, sa, sb) in cases {
            let c = rand_tensor(&mut rng, DType::Bool, sc);
            let a = rand_tensor(&mut rng, dtype, sa);
            let b = rand_tensor(&mut rng, dtype, sb);
            let out = cpu::where_(&c, &a, &b).unwrap();
            let shape = broadcast(sc, &broadcast(sa, sb).unwrap()).unwrap();
            let (cv, av, bv) = (c.to_f64_vec(), a.to_f64_vec(), b.to_f64_vec());
            let expected: Vec<f64> = (0..shape.iter().product())
                .map(|i| {
                    let idx = unravel(i, &shape);
                    if cv[broadcast_index(&idx, sc)] != 0.0 {
                        av[broadcast_index(&idx, sa)]
                    } else {
                        bv[broadcast_index(&idx, sb)]
                    }
                })
                .collect();
            assert_close(
                &out,
                &shape,
                dtype,
                &expected,
                &format!("where {dtype} {sc:?}"),
            );
        }
    }
    let f = Tensor::zeros(DType::F32, &[2]);
    assert!(cpu::where_(&f, &f, &f).is_err());
    let c = Tensor::zeros(DType::Bool, &[3]);
    assert!(cpu::where_(&c, &f, &f).is_err());
    assert!(cpu::where_(
        &Tensor::zeros(DType::Bool, &[2]),
        &f,
        &Tensor::zeros(DType::I64, &[2])
    )
    .is_err());
}

#[test]
fn masked_fill_and_dropout() {
    for dtype in NUMERIC {
        let x = Tensor::from_f64_slice(dtype, &[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let m = Tensor::from_vec(vec![2], vec![true, false]).unwrap();
        let out = cpu::masked_fill(&x, &m, -1.0).unwrap();
        assert_close(&out, &[2, 2], dtype, &[-1.0, 2.0, -1.0, 4.0], "masked_fill");
        let inf = cpu::masked_fill(&x, &m, f64::NEG_INFINITY).unwrap();
        if dtype.is_float() {
            assert_eq!(inf.to_f64_vec()[0], f64::NEG_INFINITY);
        }
        assert!(cpu::masked_fill(&x, &x, 0.0).is_err());
        let bad = Tensor::zeros(DType::Bool, &[3]);
        assert!(cpu::masked_fill(&x, &bad, 0.0).is_err());
    }
    let x = Tensor::zeros(DType::F32, &[3]);
    assert!(cpu::dropout(&x, 0.5, false)
        .unwrap()
        .shares_storage_with(&x));
    assert!(matches!(
        cpu::dropout(&x, 0.5, true),
        Err(KernelError::Unsupported { .. })
    ));
    assert!(cpu::dropout(&x, 1.5, false).is_err());
}
