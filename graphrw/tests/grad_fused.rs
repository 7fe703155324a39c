//! Attention and cross-entropy backward: the decomposed backward ops against finite
//! differences, and the fused CPU kernels (claimed by `FusedCpu` in backward graphs)
//! against the decomposed ones.

mod grad_support;

use std::sync::Arc;

use grad_support::{data, fd_check, input};
use graphrw::exec::{plan, Executor, FusedCpu, ReferenceCpu};
use graphrw::grad::grad;
use graphrw::{Builder, DType, Graph, Shape, Tensor, TensorMeta, Value, Var};
use graphrw_kernels::testing::compare::max_abs_diff_tensor;

fn bool_mask(shape: &[usize], seed: u64, keep_first_row_masked: bool) -> Tensor {
    let n: usize = shape.iter().product();
    let last = *shape.last().unwrap();
    let rows = shape[shape.len() - 2];
    let v: Vec<bool> = data(n, seed, 0.0, 1.0)
        .into_iter()
        .enumerate()
        .map(|(i, u)| {
            let row = (i / last) % rows;
            if keep_first_row_masked && row == 0 {
                false
            } else {
                u < 0.7 || i % last == 0
            }
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap()
}

#[derive(Clone, Copy)]
struct Attn<'a> {
    q: &'a [usize],
    kv: &'a [usize],
    causal: bool,
    mask: Option<&'a [usize]>,
    scale: Option<f64>,
    gqa: bool,
}

fn attn<'b>(b: &'b Builder, x: &[Var<'b>], a: Attn<'_>) -> Result<Var<'b>, graphrw::GraphError> {
    let mask = a.mask.map(|m| b.constant(bool_mask(m, 7, true)));
    x[0].scaled_dot_product_attention_with(x[1], x[2], mask, 0.0, a.causal, a.scale, a.gqa)
}

const CASES: &[Attn<'static>] = &[
    Attn {
        q: &[1, 2, 3, 4],
        kv: &[1, 2, 5, 4],
        causal: false,
        mask: None,
        scale: None,
        gqa: false,
    },
    Attn {
        q: &[2, 1, 4, 3],
        kv: &[2, 1, 4, 3],
        causal: true,
        mask: None,
        scale: Some(0.7),
        gqa: false,
    },
    // A boolean mask with a fully masked query row (its output and gradient are zero).
    Attn {
        q: &[1, 2, 3, 2],
        kv: &[1, 2, 4, 2],
        causal: false,
        mask: Some(&[1, 1, 3, 4]),
        scale: None,
        gqa: false,
    },
    // Grouped heads: 4 query heads over 2 kv heads.
    Attn {
        q: &[1, 4, 2, 3],
        kv: &[1, 2, 3, 3],
        causal: false,
        mask: None,
        scale: None,
        gqa: true,
    },
    // Rank 2 (one implicit head).
    Attn {
        q: &[3, 2],
        kv: &[4, 2],
        causal: true,
        mask: None,
        scale: None,
        gqa: false,
    },
];

#[test]
fn decomposed_attention_backward_matches_finite_differences() {
    for (i, &a) in CASES.iter().enumerate() {
        let e = fd_check(
            &[
                input(a.q, -1.0, 1.0),
                input(a.kv, -1.0, 1.0),
                input(a.kv, -1.0, 1.0),
            ],
            |b, x| attn(b, x, a),
        );
        assert!(e < 1e-5, "case {i}");
    }
}

fn meta(dtype: DType, shape: &[usize]) -> TensorMeta {
    TensorMeta::new(
        dtype,
        Shape::known(&shape.iter().map(|&d| d as u64).collect::<Vec<_>>()),
    )
}

/// The backward graph of `sum(attention(q, k, v) * w)` and its inputs.
fn attention_backward(dtype: DType, a: Attn<'_>) -> (Graph, Vec<Tensor>) {
    let b = Builder::new();
    let x: Vec<Var<'_>> = ["q", "k", "v"]
        .iter()
        .zip([a.q, a.kv, a.kv])
        .map(|(n, s)| b.input(n, meta(dtype, s)))
        .collect();
    let out = attn(&b, &x, a).unwrap();
    let oshape: Vec<usize> = out
        .meta()
        .unwrap()
        .shape
        .as_known()
        .unwrap()
        .iter()
        .map(|&d| d as usize)
        .collect();
    let n: usize = oshape.iter().product();
    let w = b.constant(Tensor::from_f64_slice(dtype, &oshape, &data(n, 5, -1.0, 1.0)).unwrap());
    let loss = out.mul(w).unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    let wrt: Vec<Value> = x.iter().map(|v| v.value()).collect();
    drop(x);
    let g = grad(&b.finish(), &wrt).unwrap();
    let inputs = [a.q, a.kv, a.kv]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = s.iter().product();
            Tensor::from_f64_slice(dtype, s, &data(n, 11 + i as u64, -2.0, 2.0)).unwrap()
        })
        .collect();
    (g, inputs)
}

/// The largest `|a - b|`; panics where the shapes differ or `a` is NaN or infinite where
/// the reference `b` is not ([`max_abs_diff_tensor`]).
#[track_caller]
fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    max_abs_diff_tensor(a, b).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn fused_attention_backward_matches_the_decomposed_one() {
    let mut cases: Vec<Attn<'static>> = CASES.to_vec();
    // Lengths that are not multiples of the kernel's 64-row tiles.
    cases.push(Attn {
        q: &[1, 2, 70, 8],
        kv: &[1, 2, 130, 8],
        causal: true,
        mask: None,
        scale: None,
        gqa: false,
    });
    cases.push(Attn {
        q: &[2, 4, 65, 16],
        kv: &[2, 2, 65, 16],
        causal: false,
        mask: Some(&[2, 1, 65, 65]),
        scale: None,
        gqa: true,
    });
    let fused: Vec<Arc<dyn Executor>> = vec![Arc::new(FusedCpu), Arc::new(ReferenceCpu)];
    let reference: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
    for dtype in [DType::F64, DType::F32] {
        for (i, &a) in cases.iter().enumerate() {
            let (g, inputs) = attention_backward(dtype, a);
            let pf = plan(&g, &fused).unwrap();
            let text = pf.to_string();
            assert!(
                text.lines()
                    .any(|l| l.contains("scaled_dot_product_attention_backward(")
                        && l.contains("| cpu-fused")),
                "{text}"
            );
            let (want, _) = plan(&g, &reference).unwrap().run(&inputs).unwrap();
            let (got, _) = pf.run(&inputs).unwrap();
            let tol = if dtype == DType::F64 { 1e-10 } else { 2e-4 };
            for k in 1..4 {
                let scale = want[k]
                    .to_f64_vec()
                    .iter()
                    .fold(1.0f64, |m, x| m.max(x.abs()));
                let d = max_diff(&got[k], &want[k]);
                assert!(d <= tol * scale, "{dtype} case {i} grad {k}: {d}");
            }
        }
    }
}

fn targets(v: Vec<i64>) -> Tensor {
    let n = v.len();
    Tensor::from_vec(vec![n], v).unwrap()
}

#[test]
fn decomposed_cross_entropy_backward_matches_finite_differences() {
    for reduction in ["mean", "sum", "none"] {
        for (ls, ignore) in [(0.0, -100), (0.2, 1)] {
            let e = fd_check(&[input(&[4, 5], -2.0, 2.0)], |b, x| {
                let t = b.constant(targets(vec![3, 1, 0, 4]));
                x[0].cross_entropy_with(t, ignore, ls, reduction)
            });
            assert!(e < 1e-5, "{reduction} {ls} {ignore}");
        }
    }
}

#[test]
fn fused_cross_entropy_matches_the_decomposed_one() {
    let fused: Vec<Arc<dyn Executor>> = vec![Arc::new(FusedCpu), Arc::new(ReferenceCpu)];
    let reference: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
    for dtype in [DType::F64, DType::F32] {
        for reduction in ["mean", "sum", "none"] {
            for (ls, ignore) in [(0.0, -100i64), (0.1, 2)] {
                let (rows, c) = (6usize, 7usize);
                let b = Builder::new();
                let x = b.input("x", meta(dtype, &[2, 3, c]));
                let t = b.input("t", meta(DType::I64, &[2, 3]));
                let loss = x.cross_entropy_with(t, ignore, ls, reduction).unwrap();
                let loss = if reduction == "none" {
                    loss.sum().unwrap()
                } else {
                    loss
                };
                b.output(&[loss]).unwrap();
                let wrt = [x.value()];
                let g = grad(&b.finish(), &wrt).unwrap();
                let pf = plan(&g, &fused).unwrap();
                let text = pf.to_string();
                assert!(
                    text.contains("cross_entropy_backward(")
                        && text.matches("| cpu-fused").count() == 2,
                    "{text}"
                );
                let inputs = [
                    Tensor::from_f64_slice(dtype, &[2, 3, c], &data(rows * c, 3, -3.0, 3.0))
                        .unwrap(),
                    Tensor::from_vec(vec![2, 3], vec![0i64, 6, 2, 2, 5, 1]).unwrap(),
                ];
                let (want, _) = plan(&g, &reference).unwrap().run(&inputs).unwrap();
                let (got, _) = pf.run(&inputs).unwrap();
                let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
                for k in 0..2 {
                    let d = max_diff(&got[k], &want[k]);
                    assert!(d <= tol, "{dtype} {reduction} {ls} output {k}: {d}");
                }
            }
        }
    }
}
