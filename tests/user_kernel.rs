//! A user's own generated kernels, end to end: two kernels defined here with
//! `fused_kernel!` (not built-ins), wired by one `Kernels::new` call, are fused into a
//! graph written in decomposed form, planned on their generated executor, run and
//! compared with the decomposition, differentiated through their derived vjp kernels
//! (compared with the gradient of the decomposition), saved to ONNX, loaded back, run
//! and fused again.

use std::sync::Arc;

use graphrw::exec::GENERATED_CPU;
use graphrw::exec::{plan, reference_stack, Executor, Plan};
use graphrw::grad::{grad_with, Cotangents, GradRegistry};
use graphrw::onnx::{load_bytes, to_bytes};
use graphrw::Kernels;
use graphrw::{fused_kernel, Builder, DType, Graph, Tensor, TensorMeta, Value};
use graphrw_kernels::testing::compare;

fused_kernel! {
    /// A gated activation: `x * sigmoid(gate * beta)` (`gate` broadcast along rows).
    #[op = "user.swish_gate"]
    #[grad]
    pub fn swish_gate(x: Tensor, gate: Tensor, beta: f64) -> Tensor {
        x.mul(gate.mul(beta).sigmoid())
    }

    /// L2 normalisation over the last dimension: `x / sqrt(sum(x^2) + eps)`.
    #[op = "user.l2_normalize"]
    #[grad]
    pub fn l2_normalize(x: Tensor, eps: f64) -> Tensor {
        x.div(x.mul(x).sum(dims = [-1], keepdim = true).add(eps).sqrt())
    }
}

const ROWS: usize = 5;
const WIDTH: usize = 7;
const BETA: f64 = 1.25;
const EPS: f64 = 1e-3;

fn kernels() -> Kernels {
    Kernels::new(&[&swish_gate::KERNEL, &l2_normalize::KERNEL])
}

/// `loss = sum(l2_normalize(swish_gate(x, gate)) * w)`, spelled as its decomposition;
/// the second output is the normalised tensor. Returns the graph and the wrt values.
fn decomposed() -> (Graph, Vec<Value>) {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [ROWS, WIDTH]));
    let gate = b.input("gate", TensorMeta::new(DType::F32, [WIDTH]));
    let h = x.mul(gate.mul(BETA).unwrap().sigmoid().unwrap()).unwrap();
    let ss = h.mul(h).unwrap().sum_with(&[-1], true).unwrap();
    let y = h.div(ss.add(EPS).unwrap().sqrt().unwrap()).unwrap();
    let w = b.constant(data(&[ROWS, WIDTH], 9, 0.5, 1.5));
    let loss = y.mul(w).unwrap().sum().unwrap();
    b.output(&[loss, y]).unwrap();
    let wrt = vec![x.value(), gate.value()];
    (b.finish(), wrt)
}

/// Deterministic values in `[lo, hi)`.
fn data(shape: &[usize], seed: u64, lo: f64, hi: f64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect();
    Tensor::from_f64_slice(DType::F32, shape, &v).unwrap()
}

fn inputs() -> Vec<Tensor> {
    vec![
        data(&[ROWS, WIDTH], 1, -2.0, 2.0),
        data(&[WIDTH], 2, -1.0, 1.0),
    ]
}

fn run(p: &Plan, x: &[Tensor]) -> Vec<Tensor> {
    p.run(x).unwrap().0
}

fn assert_close(what: &str, got: &[Tensor], want: &[Tensor], tol: f64) {
    compare::assert_close_tensors(got, want, compare::Tol::scaled(tol), what);
}

/// The ops of `p`'s graph that `executor` runs, with their count.
fn ops_on(p: &Plan, executor: &str) -> Vec<String> {
    let mut ops: Vec<String> = p
        .assignments()
        .filter(|(_, e)| *e == executor)
        .map(|(n, _)| p.graph().try_node(n).unwrap().op_name().to_string())
        .collect();
    ops.sort();
    ops
}

fn fused() -> Graph {
    let (mut g, _) = decomposed();
    let report = kernels().fuse(&mut g).unwrap();
    assert_eq!(
        report.counts().values().sum::<usize>(),
        2,
        "one rewrite per kernel: {report:?}"
    );
    g
}

#[test]
fn the_rules_fuse_each_decomposed_form_into_one_node() {
    let g = fused();
    assert_eq!(g.nodes_with_op("user.swish_gate").count(), 1, "{g}");
    assert_eq!(g.nodes_with_op("user.l2_normalize").count(), 1, "{g}");
    // Nothing of the chains is left: mul/sigmoid/sum/sqrt/div were all absorbed (the
    // loss's own mul and sum remain).
    for op in ["sigmoid", "sqrt", "div"] {
        assert_eq!(g.nodes_with_op(op).count(), 0, "`{op}` left in {g}");
    }
}

#[test]
fn the_plan_runs_both_nodes_on_their_generated_kernels_and_matches_the_decomposition() {
    let g = fused();
    let p = plan(&g, &kernels().stack()).unwrap();
    assert_eq!(
        ops_on(&p, GENERATED_CPU),
        ["user.l2_normalize", "user.swish_gate"],
        "{p}"
    );
    let x = inputs();
    let (d, _) = decomposed();
    let want = run(&plan(&d, &reference_stack()).unwrap(), &x);
    assert_close("fused forward", &run(&p, &x), &want, 1e-5);
    // Without the kernels' executor the same nodes run through their decomposition.
    let p_ref = plan(&g, &reference_stack()).unwrap();
    assert!(ops_on(&p_ref, GENERATED_CPU).is_empty());
    assert_close("decomposed fused ops", &run(&p_ref, &x), &want, 1e-5);
}

#[test]
fn the_gradient_runs_the_derived_vjp_kernels_and_matches_the_decomposition() {
    let (d, wrt) = decomposed();
    let g = fused();
    let mut registry = GradRegistry::with_builtins();
    kernels().register_grads(&mut registry);
    let backward = grad_with(&g, &wrt, &registry, Cotangents::Scalar).unwrap();
    let p = plan(&backward, &kernels().stack()).unwrap();
    let vjp = ops_on(&p, GENERATED_CPU)
        .into_iter()
        .filter(|op| op.contains(".vjp_"))
        .collect::<Vec<_>>();
    assert_eq!(
        vjp,
        [
            "user.l2_normalize.vjp_x",
            "user.swish_gate.vjp_gate",
            "user.swish_gate.vjp_x"
        ],
        "{p}"
    );
    let x = inputs();
    let through_decomposition =
        grad_with(&d, &wrt, &GradRegistry::with_builtins(), Cotangents::Scalar).unwrap();
    let stack: Vec<Arc<dyn Executor>> = reference_stack();
    let want = run(&plan(&through_decomposition, &stack).unwrap(), &x);
    let got = run(&p, &x);
    // Outputs: loss, y, then d loss / d x and d loss / d gate (summed over rows).
    assert_eq!(got.len(), 4);
    assert_eq!(got[3].shape(), [WIDTH]);
    assert_close("gradients", &got, &want, 1e-4);
}

#[test]
fn the_fused_graph_saves_to_onnx_loads_back_runs_and_fuses_again() {
    let g = fused();
    let x = inputs();
    let want = run(&plan(&g, &kernels().stack()).unwrap(), &x);
    let bytes = to_bytes(&g).unwrap();
    let mut back = load_bytes(&bytes).unwrap();
    // The user ops are saved as model-local functions and come back inlined.
    assert_eq!(back.nodes_with_op("user.swish_gate").count(), 0, "{back}");
    let p = plan(&back, &reference_stack()).unwrap();
    assert_close("reloaded", &run(&p, &x), &want, 1e-5);
    let report = kernels().fuse(&mut back).unwrap();
    assert_eq!(report.counts().values().sum::<usize>(), 2, "{back}");
    let p = plan(&back, &kernels().stack()).unwrap();
    assert_eq!(
        ops_on(&p, GENERATED_CPU),
        ["user.l2_normalize", "user.swish_gate"],
        "{p}"
    );
    assert_close("reloaded and fused", &run(&p, &x), &want, 1e-5);
}
