//! Products on the row-band split and the epilogue on a reused buffer.

use super::gemm::{row_split, ROW_BAND, SEQUENTIAL_WORK};
use super::*;
use crate::testing::compare::{assert_close, assert_close_tensor, Tol};

/// Products split into one band of rows per thread (`row_split`) equal the
/// sequential `matrixmultiply` product: row counts that are not a multiple of the
/// band (a short last band), with and without the accumulated bias of the epilogue
/// (`epilogue_case` on a split size).
#[test]
fn row_bands_match_the_sequential_product() {
    let threads = rayon::current_num_threads();
    for (m, k, n) in [(389, 70, 53), (2 * ROW_BAND * threads + 1, 9, 130)] {
        if threads == 1 {
            println!("SKIPPED: row bands need two threads, this machine has one");
            return;
        }
        assert!(row_split(m, k, n), "{m}x{k}x{n} should be split");
        let ramp = |len: usize, s: f32| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 29 % 97) as f32 - 48.0) * s)
                .collect()
        };
        let a = Tensor::from_vec(vec![m, k], ramp(m * k, 0.01)).expect("a");
        let b = Tensor::from_vec(vec![k, n], ramp(k * n, 0.02)).expect("b");
        let got = matmul_with(&a, &b, GemmBackend::Gemm).expect("bands");
        let want = matmul_with(&a, &b, GemmBackend::MatrixMultiply).expect("plain");
        assert_close_tensor(&got, &want, Tol::new(1e-4, 1e-5), &format!("{m}x{k}x{n}"));
        epilogue_case(m, k, n);
    }
}

/// The epilogue output equals the unfused `act(a @ b + bias)` on odd sizes, with
/// a pooled output buffer holding stale values; the first size runs the epilogue
/// passes on the calling thread, the second in parallel (see `SEQUENTIAL_WORK`).
#[test]
fn epilogue_overwrites_a_reused_buffer() {
    for (m, k, n) in [(67, 33, 259), (301, 17, 261)] {
        assert_eq!(m * n < SEQUENTIAL_WORK, m == 67);
        epilogue_case(m, k, n);
    }
}

fn epilogue_case(m: usize, k: usize, n: usize) {
    use crate::cpu::{binary, BinaryOp, BufferPool};
    use std::sync::Arc;
    let ramp = |len: usize, s: f32| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * s)
            .collect()
    };
    let a = Tensor::from_vec(vec![m, k], ramp(m * k, 0.01)).expect("a");
    let b = Tensor::from_vec(vec![k, n], ramp(k * n, 0.02)).expect("b");
    let bias = Tensor::from_vec(vec![n], ramp(n, 0.1)).expect("bias");
    let pool = Arc::new(BufferPool::new());
    pool.raise_limit(1 << 30);
    let _g = pool.install();
    for act in [Activation::Identity, Activation::GeluTanh] {
        for bias in [None, Some(&bias)] {
            pool.recycle(Tensor::from_vec(vec![m * n], vec![f32::NAN; m * n]).expect("x"));
            let got = matmul_epilogue(&a, &b, bias, act, GemmBackend::Auto).expect("fused");
            assert_eq!(pool.held_bytes(), 0, "the stale buffer was used");
            let mut want = matmul(&a, &b).expect("product");
            if let Some(bias) = bias {
                want = binary(BinaryOp::Add, &want, bias).expect("bias");
            }
            let want: Vec<f64> = want
                .to_f64_vec()
                .into_iter()
                .map(|x| act.apply(x))
                .collect();
            assert_close(
                &got.to_f64_vec(),
                &want,
                Tol::scaled(1e-4),
                &format!("{act:?}"),
            );
        }
    }
}
