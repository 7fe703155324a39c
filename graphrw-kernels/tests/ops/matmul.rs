use graphrw_kernels::cpu::{Activation, BinaryOp, GemmBackend, UnaryOp};
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
        (&[3, 37, 129], &[129, 17]),
        (&[2, 3, 1, 5], &[5, 1]),
    ];
    let backends = [
        GemmBackend::Auto,
        GemmBackend::Gemm,
        GemmBackend::MatrixMultiply,
    ];
    let mut rng = Rng::new(5);
    for dtype in NUMERIC {
        for &(sa, sb) in cases {
            for backend in backends {
                let a = rand_tensor(&mut rng, dtype, sa);
                let b = rand_tensor(&mut rng, dtype, sb);
                let out = cpu::matmul_with(&a, &b, backend).unwrap();
                let (shape, expected) = reference(&a, &b);
                // Sums of k products: widen the absolute tolerance for the low-precision types.
                let expected: Vec<f64> = expected.into_iter().map(|v| round_to(dtype, v)).collect();
                let what = format!("matmul {dtype} {sa:?} @ {sb:?} on {backend:?}");
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
}

/// The activation as the separate unary kernel computes it.
fn unary_of(act: Activation) -> Option<UnaryOp> {
    match act {
        Activation::Identity => None,
        Activation::Relu => Some(UnaryOp::Relu),
        Activation::Gelu => Some(UnaryOp::Gelu),
        Activation::GeluTanh => Some(UnaryOp::GeluTanh),
        Activation::Silu => Some(UnaryOp::Silu),
    }
}

/// A fused epilogue's result `got` against the separate kernels' `want`: same shape and
/// dtype, values within the dtype's tolerance (the fused kernel rounds once, the
/// separate ones after each op).
fn assert_fused_close(got: &Tensor, want: &Tensor, dtype: DType, what: &str) {
    assert_fused_close_at_depth(got, want, dtype, 0, what);
}

/// [`assert_fused_close`] for products of depth `k`: f32 within the larger of its fixed
/// tolerance and the `2 k ε` bound of two summation orders (the backends block the
/// depth differently).
fn assert_fused_close_at_depth(got: &Tensor, want: &Tensor, dtype: DType, k: usize, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    assert_eq!(got.dtype(), dtype, "{what}");
    let depth = 2.0 * k as f64 * f32::EPSILON as f64;
    let (atol, rtol) = match dtype {
        DType::F16 | DType::BF16 => (0.1, 3e-2),
        DType::F32 => (depth.max(1e-5), depth.max(1e-5)),
        _ => (1e-12, 1e-12),
    };
    for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((g - w).abs() <= atol + rtol * w.abs(), "{what}: {g} vs {w}");
    }
}

/// Whether this CPU runs a packed GEMM kernel (x86-64 with AVX2+FMA or AVX-512F, as
/// the thread's options allow).
fn packed_gemm_here() -> bool {
    graphrw_kernels::KernelOptions::current().isa() >= graphrw_kernels::Isa::Avx2Fma
}

/// The product of `epilogue` again with the weight packed beforehand, against `want`
/// (f32 matrices, where the CPU has the packed GEMM). Elsewhere nothing is packed (the
/// unpacked products were checked by the caller), which is checked, and the skip is
/// printed once per test binary.
fn check_packed(
    (a, b): (&Tensor, &Tensor),
    epilogue: cpu::Epilogue<'_>,
    backend: GemmBackend,
    want: &Tensor,
    what: &str,
) {
    let packed = cpu::PackedWeight::new(b, epilogue.columns);
    if !packed_gemm_here() {
        assert!(packed.is_none(), "{what}: packed without the packed GEMM");
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            println!("SKIPPED: the packed-weight products need AVX2+FMA or AVX-512F (checked: none is packed)")
        });
        return;
    }
    let Some(w) = packed else {
        return;
    };
    let packed = cpu::Epilogue {
        packed: Some(&w),
        ..epilogue
    };
    let got = cpu::matmul_epilogue_with(a, b, &packed, backend)
        .unwrap_or_else(|e| panic!("{what}, packed: {e}"));
    let what = format!("{what}, packed");
    assert_fused_close_at_depth(&got, want, b.dtype(), b.shape()[0], &what);
    // The AVX-512 kernel's other form computes the same sums in the same order.
    let in_register = cpu::Epilogue {
        broadcast: cpu::Broadcast::InRegister,
        ..packed
    };
    let again = cpu::matmul_epilogue_with(a, b, &in_register, backend)
        .unwrap_or_else(|e| panic!("{what}, broadcast in a register: {e}"));
    let bits = |t: &Tensor| -> Vec<u64> { t.to_f64_vec().iter().map(|x| x.to_bits()).collect() };
    assert_eq!(
        again.shape(),
        got.shape(),
        "{what}: broadcast in a register"
    );
    assert!(
        bits(&again) == bits(&got),
        "{what}: broadcast in a register"
    );
}

#[test]
fn matmul_epilogue_matches_separate_kernels() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[3, 5], &[5, 7]),
        (&[2, 9, 33], &[33, 17]),
        (&[4, 6, 8], &[4, 8, 3]),
        (&[1, 64, 40], &[40, 96]),
    ];
    let acts = [
        Activation::Identity,
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ];
    let mut rng = Rng::new(11);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for &(sa, sb) in cases {
            for act in acts {
                for backend in [GemmBackend::Gemm, GemmBackend::MatrixMultiply] {
                    let a = rand_tensor(&mut rng, dtype, sa);
                    let b = rand_tensor(&mut rng, dtype, sb);
                    let n = sb[sb.len() - 1];
                    // A 1-D bias and one with leading ones: both run along the columns.
                    let bias_shape: Vec<usize> = if n % 2 == 0 { vec![1, n] } else { vec![n] };
                    let bias = rand_tensor(&mut rng, dtype, &bias_shape);
                    let got = cpu::matmul_epilogue(&a, &b, Some(&bias), act, backend).unwrap();
                    let mut want =
                        cpu::binary(BinaryOp::Add, &cpu::matmul(&a, &b).unwrap(), &bias).unwrap();
                    if let Some(op) = unary_of(act) {
                        want = cpu::unary(op, &want).unwrap();
                    }
                    let what = format!("{dtype} {sa:?} @ {sb:?} + bias, {act:?} on {backend:?}");
                    assert_fused_close(&got, &want, dtype, &what);
                }
            }
        }
    }
}

/// `matmul_epilogue_with`'s column ranges and residual against the separate kernels:
/// `matmul(a, slice(b)) + slice(bias) + residual`, then the activation.
#[test]
fn matmul_epilogue_columns_and_residual_match_separate_kernels() {
    // (a, b, column range): ranges at the start, middle and end, one column, all of
    // them, odd widths; a batched `b`; a 1-row product; a parallel one.
    type Case = (&'static [usize], &'static [usize], (usize, usize));
    let cases: &[Case] = &[
        (&[3, 5], &[5, 7], (2, 5)),
        (&[2, 9, 33], &[33, 48], (0, 16)),
        (&[2, 9, 33], &[33, 48], (16, 32)),
        (&[2, 9, 33], &[33, 48], (32, 48)),
        (&[1, 64, 40], &[40, 96], (95, 96)),
        (&[1, 64, 40], &[40, 96], (0, 96)),
        (&[4, 6, 8], &[4, 8, 5], (1, 4)),
        (&[1, 130], &[130, 67], (3, 66)),
        // Tall enough for the parallel product (row bands on 2+ threads).
        (&[300, 64], &[64, 80], (8, 72)),
        // Deeper than the packed GEMM's depth block, a ragged last panel and row tile.
        (&[100, 800], &[800, 450], (5, 430)),
    ];
    let mut rng = Rng::new(23);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for &(sa, sb, (start, end)) in cases {
            for (act, with_residual) in [
                (Activation::Identity, false),
                (Activation::Identity, true),
                (Activation::Gelu, false),
            ] {
                for backend in [GemmBackend::Gemm, GemmBackend::MatrixMultiply] {
                    let a = rand_tensor(&mut rng, dtype, sa);
                    let b = rand_tensor(&mut rng, dtype, sb);
                    let n = sb[sb.len() - 1];
                    let bias = rand_tensor(&mut rng, dtype, &[n]);
                    let (s, e) = (start as i64, end as i64);
                    let part = cpu::slice(&b, -1, s, e, 1).unwrap();
                    let mut want = cpu::matmul(&a, &part).unwrap();
                    want = cpu::binary(
                        BinaryOp::Add,
                        &want,
                        &cpu::slice(&bias, -1, s, e, 1).unwrap(),
                    )
                    .unwrap();
                    let residual = rand_tensor(&mut rng, dtype, want.shape());
                    if with_residual {
                        want = cpu::binary(BinaryOp::Add, &want, &residual).unwrap();
                    }
                    if let Some(op) = unary_of(act) {
                        want = cpu::unary(op, &want).unwrap();
                    }
                    let epilogue = cpu::Epilogue {
                        bias: Some(&bias),
                        activation: act,
                        columns: Some((start, end)),
                        residual: with_residual.then_some(&residual),
                        heads: None,
                        packed: None,
                        transposed: false,
                        broadcast: cpu::Broadcast::InFma,
                    };
                    let got = cpu::matmul_epilogue_with(&a, &b, &epilogue, backend).unwrap();
                    let what = format!(
                        "{dtype} {sa:?} @ {sb:?}[.., {start}..{end}], {act:?}, residual \
                         {with_residual} on {backend:?}"
                    );
                    assert_fused_close_at_depth(&got, &want, dtype, sb[0], &what);
                    check_packed((&a, &b), epilogue, backend, &want, &what);
                }
            }
        }
    }
}

/// A column range of an f16 weight too large to convert at once (it is converted a
/// block of rows at a time, each row read from the range's first column).
#[test]
fn matmul_epilogue_columns_of_a_large_half_weight() {
    let mut rng = Rng::new(5);
    let (m, k, n) = (3, 9, 500_000);
    let a = rand_tensor(&mut rng, DType::F16, &[m, k]);
    let b = rand_tensor(&mut rng, DType::F16, &[k, n]);
    let (start, end) = (123_457, 123_457 + 301);
    let epilogue = cpu::Epilogue {
        columns: Some((start, end)),
        ..Default::default()
    };
    let got = cpu::matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto).unwrap();
    let part = cpu::slice(&b, -1, start as i64, end as i64, 1).unwrap();
    let want = cpu::matmul(&a, &part).unwrap();
    assert_eq!(got.shape(), &[m, end - start]);
    for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((g - w).abs() <= 1e-2 + 1e-2 * w.abs(), "{g} vs {w}");
    }
}

#[test]
fn matmul_epilogue_rejects_bad_columns_and_residuals() {
    let a = Tensor::zeros(DType::F32, &[2, 3]);
    let b = Tensor::zeros(DType::F32, &[3, 4]);
    for columns in [(2, 2), (3, 1), (0, 5)] {
        let epilogue = cpu::Epilogue {
            columns: Some(columns),
            ..Default::default()
        };
        let e = cpu::matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a range of the 4 columns"),
            "{columns:?}: {e}"
        );
    }
    let good = Tensor::zeros(DType::F32, &[2, 4]);
    let bad_shape = Tensor::zeros(DType::F32, &[2, 3]);
    let bad_dtype = Tensor::zeros(DType::F64, &[2, 4]);
    for (residual, act) in [
        (&bad_shape, Activation::Identity),
        (&bad_dtype, Activation::Identity),
        (&good, Activation::Relu),
    ] {
        let epilogue = cpu::Epilogue {
            residual: Some(residual),
            activation: act,
            ..Default::default()
        };
        assert!(
            cpu::matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto).is_err(),
            "{:?} {act:?}",
            residual.shape()
        );
    }
    // With a column range, the residual has the range's width.
    let x = Tensor::from_vec(vec![1, 1], vec![2.0f32]).unwrap();
    let w = Tensor::from_vec(vec![1, 3], vec![1.0f32, 10.0, 100.0]).unwrap();
    let r = Tensor::from_vec(vec![1, 2], vec![0.5f32, 0.25]).unwrap();
    let epilogue = cpu::Epilogue {
        columns: Some((1, 3)),
        residual: Some(&r),
        ..Default::default()
    };
    let got = cpu::matmul_epilogue_with(&x, &w, &epilogue, GemmBackend::Auto).unwrap();
    assert_eq!(got.as_slice::<f32>().unwrap(), &[20.5, 200.25]);
}

/// `Epilogue::heads` against the separate kernels: the product (of a column range),
/// plus bias, activated, reshaped to `[.., S, H, D]` and transposed to `[.., H, S, D]`.
#[test]
fn matmul_epilogue_heads_match_reshape_and_transpose() {
    // (a, b, columns, heads): one head, many, a batch of entries, a column range of a
    // fused QKV weight, rows not a multiple of any tile, a rank-2 `a`.
    type Case = (
        &'static [usize],
        &'static [usize],
        Option<(usize, usize)>,
        usize,
    );
    let cases: &[Case] = &[
        (&[1, 5, 8], &[8, 12], None, 1),
        (&[1, 5, 8], &[8, 12], None, 3),
        (&[2, 7, 16], &[16, 24], None, 4),
        (&[2, 33, 24], &[24, 72], Some((24, 48)), 3),
        (&[1, 130, 64], &[64, 192], Some((128, 192)), 4),
        (&[9, 20], &[20, 10], None, 5),
        // Heads of 32 and 64 columns: the packed GEMM's column blocks.
        (&[1, 70, 48], &[48, 96], None, 3),
        (&[2, 67, 40], &[40, 192], Some((64, 192)), 2),
    ];
    let mut rng = Rng::new(31);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for &(sa, sb, columns, heads) in cases {
            for act in [Activation::Identity, Activation::GeluTanh] {
                let a = rand_tensor(&mut rng, dtype, sa);
                let b = rand_tensor(&mut rng, dtype, sb);
                let bias = rand_tensor(&mut rng, dtype, &[sb[1]]);
                let (start, end) = columns.unwrap_or((0, sb[1]));
                let (s, e) = (start as i64, end as i64);
                let mut want = cpu::matmul(&a, &cpu::slice(&b, -1, s, e, 1).unwrap()).unwrap();
                want = cpu::binary(
                    BinaryOp::Add,
                    &want,
                    &cpu::slice(&bias, -1, s, e, 1).unwrap(),
                )
                .unwrap();
                if let Some(op) = unary_of(act) {
                    want = cpu::unary(op, &want).unwrap();
                }
                let r = want.rank();
                let mut split: Vec<i64> = want.shape()[..r - 1].iter().map(|&d| d as i64).collect();
                split.extend([heads as i64, ((end - start) / heads) as i64]);
                let want = cpu::transpose(&cpu::reshape(&want, &split).unwrap(), -3, -2).unwrap();
                let epilogue = cpu::Epilogue {
                    bias: Some(&bias),
                    activation: act,
                    columns,
                    heads: Some(heads),
                    ..Default::default()
                };
                let what = format!("{dtype} {sa:?} @ {sb:?} {columns:?}, {heads} heads, {act:?}");
                let got = cpu::matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_fused_close(&got, &want, dtype, &what);
                check_packed((&a, &b), epilogue, GemmBackend::Auto, &want, &what);
            }
        }
    }
    // Bad head counts and a residual are errors.
    let a = Tensor::zeros(DType::F32, &[1, 3, 4]);
    let b = Tensor::zeros(DType::F32, &[4, 6]);
    let r = Tensor::zeros(DType::F32, &[1, 3, 6]);
    for (heads, residual) in [(0, None), (4, None), (2, Some(&r))] {
        let epilogue = cpu::Epilogue {
            heads: Some(heads),
            residual,
            ..Default::default()
        };
        assert!(
            cpu::matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto).is_err(),
            "{heads} heads"
        );
    }
}

#[test]
fn matmul_epilogue_rejects_bad_bias() {
    let a = Tensor::zeros(DType::F32, &[2, 3]);
    let b = Tensor::zeros(DType::F32, &[3, 4]);
    for bad in [&[3usize][..], &[2, 4], &[4, 1]] {
        let bias = Tensor::zeros(DType::F32, bad);
        let e = cpu::matmul_epilogue(&a, &b, Some(&bias), Activation::Relu, GemmBackend::Auto)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not run along the 4 columns"),
            "{bad:?}: {e}"
        );
    }
    let bias = Tensor::zeros(DType::F64, &[4]);
    assert!(
        cpu::matmul_epilogue(&a, &b, Some(&bias), Activation::Relu, GemmBackend::Auto).is_err()
    );
    let ints = Tensor::zeros(DType::I64, &[2, 2]);
    assert!(
        cpu::matmul_epilogue(&ints, &ints, None, Activation::Identity, GemmBackend::Auto).is_err()
    );
    // Without a bias it is the activation of the product.
    let x = Tensor::from_vec(vec![1, 2], vec![1.0f32, -2.0]).unwrap();
    let y = Tensor::from_vec(vec![2, 1], vec![1.0f32, 1.0]).unwrap();
    let r = cpu::matmul_epilogue(&x, &y, None, Activation::Relu, GemmBackend::Auto).unwrap();
    assert_eq!(r.as_slice::<f32>().unwrap(), &[0.0]);
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

/// A large f16/bf16 right operand (`k * n` past the 4 Mi-element conversion block) is
/// converted to f32 a block of rows at a time; the blocks must add up to the whole
/// product, with and without a bias epilogue. The values are multiples of 1/8 below 1,
/// so every product and sum is exact in f32 and the result equals the reference
/// rounded to the storage type.
#[test]
fn low_precision_weights_converted_by_row_blocks_match_reference() {
    let (m, k, n) = (3usize, 2100usize, 2048usize); // two row blocks: 2048 + 52 rows
    let value = |i: usize, mul: usize| ((i * mul) % 11) as f64 / 8.0 - 0.625;
    for dtype in [DType::F16, DType::BF16] {
        let make = |shape: &[usize], mul: usize| {
            let values: Vec<f64> = (0..shape.iter().product()).map(|i| value(i, mul)).collect();
            Tensor::from_f64_slice(dtype, shape, &values).unwrap()
        };
        let (a, b, bias) = (make(&[m, k], 7), make(&[k, n], 5), make(&[n], 3));
        let (shape, expected) = reference(&a, &b);
        let bias_v = bias.to_f64_vec();
        for backend in [GemmBackend::Gemm, GemmBackend::MatrixMultiply] {
            let out = cpu::matmul_with(&a, &b, backend).unwrap();
            assert_eq!(out.shape(), &shape[..]);
            let want: Vec<f64> = expected.iter().map(|&v| round_to(dtype, v)).collect();
            assert_eq!(out.to_f64_vec(), want, "matmul {dtype} on {backend:?}");
            let out =
                cpu::matmul_epilogue(&a, &b, Some(&bias), Activation::Identity, backend).unwrap();
            let want: Vec<f64> = expected
                .iter()
                .enumerate()
                .map(|(i, &v)| round_to(dtype, v + bias_v[i % n]))
                .collect();
            assert_eq!(out.to_f64_vec(), want, "matmul+bias {dtype} on {backend:?}");
        }
    }
}

/// `a @ bt^T` with the epilogue (bias, activation, residual, columns, heads) of a
/// weight stored transposed (`[N, K]`, [`cpu::Epilogue::transposed`]) against the
/// separate kernels on the transposed copy: every float dtype, both backends, and on
/// every packed kernel the CPU has, packed from the transposed storage (partial
/// panels: widths not a multiple of 16 or 32).
#[test]
fn matmul_epilogue_by_a_transposed_weight_matches_separate_kernels() {
    type Case = (
        &'static [usize],
        [usize; 2],
        Option<(usize, usize)>,
        Option<usize>,
    );
    let cases: &[Case] = &[
        (&[1, 1], [1, 1], None, None),
        (&[3, 5], [7, 5], None, None),
        (&[2, 9, 33], [17, 33], Some((3, 17)), None),
        (&[1, 64, 40], [96, 40], None, Some(4)),
        (&[70, 48], [100, 48], Some((20, 90)), None),
        (&[2, 13, 300], [64, 300], Some((32, 64)), Some(2)),
    ];
    let mut rng = Rng::new(41);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for &(sa, sbt, columns, heads) in cases {
            for act in [Activation::Identity, Activation::GeluTanh] {
                let a = rand_tensor(&mut rng, dtype, sa);
                let bt = rand_tensor(&mut rng, dtype, &sbt);
                let b = cpu::contiguous(&cpu::transpose(&bt, 0, 1).unwrap()).unwrap();
                let bias = rand_tensor(&mut rng, dtype, &[sbt[0]]);
                let (start, end) = columns.unwrap_or((0, sbt[0]));
                let (s, e) = (start as i64, end as i64);
                let mut want = cpu::matmul(&a, &cpu::slice(&b, -1, s, e, 1).unwrap()).unwrap();
                want = cpu::binary(
                    BinaryOp::Add,
                    &want,
                    &cpu::slice(&bias, -1, s, e, 1).unwrap(),
                )
                .unwrap();
                if let Some(op) = unary_of(act) {
                    want = cpu::unary(op, &want).unwrap();
                }
                let residual = (act == Activation::Identity && heads.is_none())
                    .then(|| rand_tensor(&mut rng, dtype, want.shape()));
                if let Some(r) = &residual {
                    want = cpu::binary(BinaryOp::Add, &want, r).unwrap();
                }
                if let Some(heads) = heads {
                    let r = want.rank();
                    let mut split: Vec<i64> =
                        want.shape()[..r - 1].iter().map(|&d| d as i64).collect();
                    split.extend([heads as i64, ((end - start) / heads) as i64]);
                    want = cpu::transpose(&cpu::reshape(&want, &split).unwrap(), -3, -2).unwrap();
                }
                let epilogue = cpu::Epilogue {
                    bias: Some(&bias),
                    activation: act,
                    columns,
                    residual: residual.as_ref(),
                    heads,
                    transposed: true,
                    ..Default::default()
                };
                let what =
                    format!("{dtype} {sa:?} @ {sbt:?}^T {columns:?}, {heads:?} heads, {act:?}");
                for backend in [
                    GemmBackend::Gemm,
                    GemmBackend::MatrixMultiply,
                    GemmBackend::Auto,
                ] {
                    let got = cpu::matmul_epilogue_with(&a, &bt, &epilogue, backend)
                        .unwrap_or_else(|e| panic!("{what} on {backend:?}: {e}"));
                    let what = format!("{what} on {backend:?}");
                    assert_fused_close_at_depth(&got, &want, dtype, sbt[1], &what);
                }
                // A plain packing of the same tensor is not this product's: ignored.
                if let Some(plain) = cpu::PackedWeight::new_any_depth(&bt, None, cpu::Isa::Avx2Fma)
                {
                    assert!(!plain.packs_as(&bt, None, true) && plain.packs(&bt, None));
                    let ignored = cpu::Epilogue {
                        packed: Some(&plain),
                        ..epilogue
                    };
                    let got = cpu::matmul_epilogue_with(&a, &bt, &ignored, GemmBackend::Auto)
                        .unwrap_or_else(|e| panic!("{what}, plain packing: {e}"));
                    let what = format!("{what}, plain packing");
                    assert_fused_close_at_depth(&got, &want, dtype, sbt[1], &what);
                }
                for isa in [cpu::Isa::Avx512, cpu::Isa::Avx2Fma] {
                    let packed = cpu::PackedWeight::new_transposed(&bt, columns, isa);
                    if dtype != DType::F32 || !isa.is_available() {
                        assert!(packed.is_none(), "{what}: packed for {isa:?}");
                        continue;
                    }
                    let w = packed.unwrap_or_else(|| panic!("{what}: not packed for {isa:?}"));
                    assert!(w.is_transposed() && w.packs_transposed(&bt, columns));
                    assert!(
                        !w.packs(&bt, columns),
                        "a transposed packing is not the plain one"
                    );
                    let packed = cpu::Epilogue {
                        packed: Some(&w),
                        ..epilogue
                    };
                    let got = cpu::matmul_epilogue_with(&a, &bt, &packed, GemmBackend::Auto)
                        .unwrap_or_else(|e| panic!("{what}, packed for {isa:?}: {e}"));
                    let what = format!("{what}, packed for {isa:?}");
                    assert_fused_close_at_depth(&got, &want, dtype, sbt[1], &what);
                }
            }
        }
    }
    // A transposed weight must be a matrix, of the product's depth.
    let a = Tensor::zeros(DType::F32, &[2, 3]);
    let epilogue = cpu::Epilogue {
        transposed: true,
        ..Default::default()
    };
    for bad in [&[2usize, 4, 3][..], &[3, 4], &[3]] {
        let bt = Tensor::zeros(DType::F32, bad);
        assert!(
            cpu::matmul_epilogue_with(&a, &bt, &epilogue, GemmBackend::Auto).is_err(),
            "{bad:?}"
        );
    }
}
