//! GELU spellings the pipeline carries to the fused kernel: the plain one
//! (`x * 0.5 * (1 + erf(x / sqrt(2)))`), and the one TorchScript's ELECTRA and GPT-NeoX
//! exports write, whose `0.5` is applied after the next product
//! (`(x * (1 + erf(x / sqrt(2)))) @ w * 0.5`, with or without a bias on `x`). Each is
//! fused by `rules::optimize`, leaves no `erf` and no `* 1`, and gives the unfused
//! graph's values at two shapes of a symbolic batch.

use graphrw::exec::{default_stack, plan, reference_stack};
use graphrw::{rules, Builder, DType, Dim, Graph, Shape, Tensor, TensorMeta};
use graphrw_kernels::testing::compare::{assert_close_tensors, Tol};
use std::f64::consts::SQRT_2;

fn ramp(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| (((i + seed * 13) * 7919) % 1000) as f64 / 250.0 - 2.0)
        .collect();
    Tensor::from_f64_slice(DType::F32, shape, &vals).expect("shape and data agree")
}

/// `x: f32[n, 8]`, `h = x @ w1 (+ b)`, the GELU of `h` spelled by `gelu`, then `@ w2`.
fn mlp(gelu: for<'a> fn(graphrw::Var<'a>) -> graphrw::Var<'a>, bias: bool) -> Graph {
    let g = Builder::new();
    let x = g.input(
        "x",
        TensorMeta::new(
            DType::F32,
            Shape::from(vec![Dim::sym("n"), Dim::from(8usize)]),
        ),
    );
    let w1 = g.var(g.constant(ramp(&[8, 16], 1)).value());
    let w2 = g.var(g.constant(ramp(&[16, 4], 2)).value());
    let mut h = x.matmul(w1).expect("matmul");
    if bias {
        let b = g.var(g.constant(ramp(&[16], 3)).value());
        h = h.add(b).expect("bias");
    }
    let y = gelu(h).matmul(w2).expect("matmul");
    g.output(&[y]).expect("output");
    g.finish()
}

/// `x * (1 + erf(x / sqrt(2)))` (no `0.5`).
fn unhalved(x: graphrw::Var<'_>) -> graphrw::Var<'_> {
    let e = x.div(SQRT_2).unwrap().erf().unwrap().add(1.0).unwrap();
    x.mul(e).unwrap()
}

/// TorchScript's spelling: the `0.5` after the product, as `(x * (1 + erf(..))) * 0.5`
/// that the canonical pass moves past the next `matmul`.
fn torchscript(x: graphrw::Var<'_>) -> graphrw::Var<'_> {
    unhalved(x).mul(0.5).unwrap()
}

/// `x * 0.5 * (1 + erf(x * (1 / sqrt(2))))`.
fn plain(x: graphrw::Var<'_>) -> graphrw::Var<'_> {
    let e = x
        .mul(std::f64::consts::FRAC_1_SQRT_2)
        .unwrap()
        .erf()
        .unwrap()
        .add(1.0)
        .unwrap();
    x.mul(0.5).unwrap().mul(e).unwrap()
}

#[test]
fn each_gelu_spelling_fuses_and_keeps_its_values_at_two_shapes() {
    type Spelling = for<'a> fn(graphrw::Var<'a>) -> graphrw::Var<'a>;
    for (name, gelu) in [
        ("torchscript", torchscript as Spelling),
        ("unhalved", unhalved),
        ("plain", plain),
    ] {
        for bias in [false, true] {
            let before = mlp(gelu, bias);
            let mut g = before.clone();
            let report = rules::optimize(&mut g).expect("optimize");
            let ops = g.op_counts();
            let fused = ["fused.gelu_erf", "fused.bias_gelu"]
                .iter()
                .filter_map(|k| ops.get(k))
                .sum::<usize>();
            assert_eq!(fused, 1, "{name} (bias {bias}): {report}\n{g}");
            assert!(!ops.contains_key("erf"), "{name}: an erf is left\n{g}");
            let ones = g
                .node_ids()
                .filter_map(|id| g.node(id))
                .filter(|n| n.op_name() == "mul")
                .filter(|n| {
                    n.operands().iter().any(|v| {
                        g.node(v.node)
                            .and_then(|c| c.payload())
                            .is_some_and(|t| t.numel() == 1 && t.to_f64_vec()[0] == 1.0)
                    })
                })
                .count();
            assert_eq!(ones, 0, "{name}: a `* 1` is left\n{g}");
            let want_plan = plan(&before, &reference_stack()).expect("plan");
            let got_plan = plan(&g, &default_stack()).expect("plan");
            for n in [3, 10] {
                let x = [ramp(&[n, 8], n)];
                let want = want_plan.run(&x).expect("run").0;
                let got = got_plan.run(&x).expect("run").0;
                assert_eq!(got[0].shape(), &[n, 4]);
                let what = format!("{name} (bias {bias}) at n = {n}");
                assert_close_tensors(&got, &want, Tol::new(1e-5, 1e-5), &what);
            }
        }
    }
}
