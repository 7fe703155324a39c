//! The generated vjp of every built-in `#[grad]` kernel as its gradient rule: the
//! backward graph holds the vjp ops, the generated executor runs them on the vjp
//! kernels, and the gradients equal central differences (f64), the vjp ops'
//! decompositions and the gradient through the forward op's decomposition (f64, f32).

use std::sync::Arc;

use graphrw::exec::{generated_executor, GENERATED_CPU};
use graphrw::exec::{plan, Executor, ReferenceCpu};
use graphrw::generated::{builtin, register_grads, FusedKernel};
use graphrw::grad::{grad_with, Cotangents, GradRegistry};
use graphrw::gradcheck::check_grad;
use graphrw::ops::AttrValue;
use graphrw::{Builder, DType, Dim, Graph, Tensor, TensorMeta, Value};
use graphrw_kernels::testing::compare;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
}

/// Broadcast parameters (weight, bias, mask) get broadcast shapes, so that the
/// transform's sum back to the operand's shape is exercised.
fn shape_of(param: &str, rows: usize, n: usize) -> Vec<usize> {
    match param {
        "weight" | "bias" => vec![n],
        "mask" | "cos" | "sin" => vec![1, n],
        _ => vec![rows, n],
    }
}

fn scalar_of(name: &str) -> f64 {
    match name {
        "eps" => 1e-3,
        "scale" => 0.5,
        _ => 1.0,
    }
}

fn grad_kernels() -> Vec<&'static FusedKernel> {
    builtin::ALL
        .iter()
        .copied()
        .filter(|k| k.grad.is_some())
        .collect()
}

/// `loss = sum(op(params) * w)` with a fixed `w`; the wrt values are every parameter.
fn loss_graph(k: &FusedKernel, rows: usize, n: usize, dtype: DType) -> (Graph, Vec<Value>) {
    let b = Builder::new();
    let ins: Vec<Value> = k
        .tensors
        .iter()
        .map(|t| {
            let s: Vec<Dim> = shape_of(t, rows, n).into_iter().map(Dim::from).collect();
            b.input(t, TensorMeta::new(dtype, s)).value()
        })
        .collect();
    let attrs: Vec<(&str, AttrValue)> = k
        .scalars
        .iter()
        .map(|s| (*s, AttrValue::Float(scalar_of(s))))
        .collect();
    let out = b.apply(k.op, &ins, &attrs).expect("fused node");
    let mut rng = Lcg(77);
    let w: Vec<f64> = (0..rows * n).map(|_| 1.0 + 0.25 * rng.next()).collect();
    let w = b.constant(Tensor::from_f64_slice(dtype, &[rows, n], &w).unwrap());
    let loss = b.var(out[0]).mul(w).unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    (b.finish(), ins)
}

fn inputs(k: &FusedKernel, rows: usize, n: usize, dtype: DType, seed: u64) -> Vec<Tensor> {
    let mut rng = Lcg(seed);
    k.tensors
        .iter()
        .map(|t| {
            let s = shape_of(t, rows, n);
            let v: Vec<f64> = (0..s.iter().product::<usize>())
                .map(|_| rng.next())
                .collect();
            Tensor::from_f64_slice(dtype, &s, &v).unwrap()
        })
        .collect()
}

fn with_fused() -> GradRegistry {
    let mut reg = GradRegistry::with_builtins();
    register_grads(&mut reg);
    reg
}

fn generated() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(generated_executor()), Arc::new(ReferenceCpu)]
}

fn reference() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(ReferenceCpu)]
}

/// The gradients (outputs after the loss) of `backward` run on `stack`.
fn gradients(backward: &Graph, stack: &[Arc<dyn Executor>], x: &[Tensor]) -> Vec<Tensor> {
    let (mut outs, _) = plan(backward, stack).unwrap().run(x).unwrap();
    outs.remove(0);
    outs
}

fn assert_close(what: &str, got: &[Tensor], want: &[Tensor], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (p, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.dtype(), w.dtype(), "{what}: gradient {p} dtype");
        let tol = compare::Tol::scaled(tol);
        compare::assert_close_tensor(g, w, tol, &format!("{what}: gradient {p}"));
    }
}

#[test]
fn backward_graphs_hold_the_vjp_ops() {
    let reg = with_fused();
    // Every built-in kernel declares `#[grad]`.
    assert_eq!(grad_kernels().len(), builtin::ALL.len());
    for k in grad_kernels() {
        let (graph, wrt) = loss_graph(k, 3, 5, DType::F64);
        let backward = grad_with(&graph, &wrt, &reg, Cotangents::Scalar).unwrap();
        if k.op.name == "fused.layer_norm" {
            println!("backward graph of {}:\n{backward}", k.op.name);
        }
        for v in k.vjp {
            assert_eq!(v.op.name, format!("{}.vjp_{}", k.op.name, v.param));
            assert_eq!(
                backward.nodes_with_op(v.op.name).count(),
                1,
                "{}: no single `{}` node in\n{backward}",
                k.op.name,
                v.op.name
            );
        }
        // The forward op is not differentiated through its decomposition.
        for op in backward.op_counts().keys() {
            assert!(
                op.starts_with(k.op.name) || !op.starts_with("fused."),
                "{}: unexpected {op}",
                k.op.name
            );
        }
    }
}

#[test]
fn only_needed_vjp_ops_are_built() {
    let k = &builtin::rms_norm::KERNEL;
    let (graph, wrt) = loss_graph(k, 2, 4, DType::F64);
    let backward = grad_with(&graph, &wrt[1..], &with_fused(), Cotangents::Scalar).unwrap();
    assert_eq!(backward.nodes_with_op("fused.rms_norm.vjp_x").count(), 0);
    assert_eq!(
        backward.nodes_with_op("fused.rms_norm.vjp_weight").count(),
        1
    );
}

#[test]
fn the_generated_executor_claims_the_vjp_nodes() {
    let reg = with_fused();
    for k in grad_kernels() {
        let (graph, wrt) = loss_graph(k, 3, 6, DType::F32);
        let backward = grad_with(&graph, &wrt, &reg, Cotangents::Scalar).unwrap();
        let p = plan(&backward, &generated()).unwrap();
        for v in k.vjp {
            let nodes: Vec<_> = p.graph().nodes_with_op(v.op.name).collect();
            assert_eq!(nodes.len(), 1, "{}: {p}", v.op.name);
            assert_eq!(
                p.executor_of(nodes[0]),
                Some(GENERATED_CPU),
                "{}: {p}",
                v.op.name
            );
        }
    }
}

#[test]
fn vjp_ops_match_finite_differences_in_f64() {
    let reg = with_fused();
    for k in grad_kernels() {
        // Odd rows and even ones (rotate_half kernels take even rows only).
        for (rows, n) in [(1, 1), (2, 3), (3, 7), (3, 4)] {
            let (graph, wrt) = loss_graph(k, rows, n, DType::F64);
            let x = inputs(k, rows, n, DType::F64, 5);
            for (stack, name) in [(generated(), "vjp kernels"), (reference(), "decomposition")] {
                let report = check_grad(&graph, &wrt, &x, &reg, &stack, 1e-6)
                    .unwrap_or_else(|e| panic!("{}: {e}", k.op.name));
                assert!(
                    report.max_error() < 1e-6,
                    "{} [{rows}, {n}] on the {name}:\n{report}",
                    k.op.name
                );
            }
        }
    }
}

#[test]
fn vjp_ops_match_the_gradient_through_the_decomposition() {
    let fused = with_fused();
    let plain = GradRegistry::with_builtins();
    for k in grad_kernels() {
        for (dtype, tol) in [(DType::F64, 1e-9), (DType::F32, 1e-4)] {
            for (rows, n) in [(1, 1), (2, 5), (4, 33), (3, 32)] {
                let (graph, wrt) = loss_graph(k, rows, n, dtype);
                let x = inputs(k, rows, n, dtype, 11);
                let with_vjp = grad_with(&graph, &wrt, &fused, Cotangents::Scalar).unwrap();
                let through = grad_with(&graph, &wrt, &plain, Cotangents::Scalar).unwrap();
                assert!(through.nodes_with_op(k.vjp[0].op.name).next().is_none());
                let want = gradients(&through, &reference(), &x);
                let what = format!("{} {dtype} [{rows}, {n}]", k.op.name);
                let kernels = gradients(&with_vjp, &generated(), &x);
                assert_close(&format!("{what}, vjp kernels"), &kernels, &want, tol);
                let decomposed = gradients(&with_vjp, &reference(), &x);
                assert_close(
                    &format!("{what}, vjp decomposition"),
                    &decomposed,
                    &want,
                    tol,
                );
            }
        }
    }
}

#[test]
fn vjp_kernels_match_the_vjp_decomposition_in_half_precision() {
    let reg = with_fused();
    for k in grad_kernels() {
        for (dtype, tol) in [(DType::F16, 3e-2), (DType::BF16, 1.5e-1)] {
            for (rows, n) in [(1, 1), (3, 40)] {
                let (graph, wrt) = loss_graph(k, rows, n, dtype);
                let x = inputs(k, rows, n, dtype, 13);
                let backward = grad_with(&graph, &wrt, &reg, Cotangents::Scalar).unwrap();
                let what = format!("{} {dtype} [{rows}, {n}]", k.op.name);
                let kernels = gradients(&backward, &generated(), &x);
                let decomposed = gradients(&backward, &reference(), &x);
                assert_close(&what, &kernels, &decomposed, tol);
            }
        }
    }
}

#[test]
fn rotary_vjp_kernels_match_finite_differences_in_f64() {
    let k = &builtin::rotary_embedding::KERNEL;
    let reg = with_fused();
    // Even rows: the vjp kernels (not their decompositions) run; d = 2 and rows longer
    // than a tile; cos/sin broadcast over the rows (their gradients are summed back).
    for (rows, n) in [(3, 2), (2, 8), (1, 2050)] {
        let (graph, wrt) = loss_graph(k, rows, n, DType::F64);
        let backward = grad_with(&graph, &wrt, &reg, Cotangents::Scalar).unwrap();
        let p = plan(&backward, &generated()).unwrap();
        for v in k.vjp {
            let node = p.graph().nodes_with_op(v.op.name).next().expect("vjp node");
            assert_eq!(
                p.executor_of(node),
                Some(GENERATED_CPU),
                "{}: {p}",
                v.op.name
            );
        }
        let x = inputs(k, rows, n, DType::F64, 17);
        let report = check_grad(&graph, &wrt, &x, &reg, &generated(), 1e-6).unwrap();
        assert!(report.max_error() < 1e-6, "[{rows}, {n}]:\n{report}");
    }
    // By hand: d/dx of sum(rotate_half(x) * w) is rotate_half^T(w) = -rotate_half(w) for
    // an even row, so with cos = 0, sin = 1 and g = e_j the gradient of x is -e_{j+h}
    // for j < h and e_{j-h} otherwise.
    let vjp_x = k.vjp[0];
    assert_eq!(vjp_x.param, "x");
    let x = Tensor::from_f64_slice(DType::F64, &[1, 4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let cos = Tensor::from_f64_slice(DType::F64, &[1, 4], &[0.0; 4]).unwrap();
    let sin = Tensor::from_f64_slice(DType::F64, &[1, 4], &[1.0; 4]).unwrap();
    for j in 0..4 {
        let mut g = [0.0; 4];
        g[j] = 1.0;
        let g = Tensor::from_f64_slice(DType::F64, &[1, 4], &g).unwrap();
        let got = (vjp_x.cpu)(&[&x, &cos, &sin, &g], &[], DType::F64)
            .unwrap()
            .to_f64_vec();
        let mut want = vec![0.0; 4];
        if j < 2 {
            want[j + 2] = -1.0;
        } else {
            want[j - 2] = 1.0;
        }
        assert_eq!(got, want, "g = e_{j}");
    }
}
