//! Thunder's executor seed examples, ported: custom ops with a `like` decomposition,
//! execution transforms with a prologue, checkers that fall back to the next executor,
//! the "no executor" error, executor order, and memory freed after last use.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use graphrw::exec::{plan, ExecError, Executor, NodeView, OpExecutor, ReferenceCpu};
use graphrw::kernels::cpu::{self, BinaryOp};
use graphrw::ops::{builtin, Arity, Attrs, Infer, OpClass, OpDef, OperandSpec, OutputCount};
use graphrw::{Builder, DType, Device, GraphError, Shape, Tensor, TensorMeta, Value};

fn multimul_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    Ok(vec![b.mul(x[0], x[1])?, b.mul(x[2], x[3])?])
}

const FOUR: &[OperandSpec] = &[
    OperandSpec {
        name: "a",
        arity: Arity::Required,
    },
    OperandSpec {
        name: "b",
        arity: Arity::Required,
    },
    OperandSpec {
        name: "c",
        arity: Arity::Required,
    },
    OperandSpec {
        name: "d",
        arity: Arity::Required,
    },
];

/// `multimul(a, b, c, d) -> (a * b, c * d)`, metadata `like` its decomposition.
static MULTIMUL: OpDef = OpDef {
    name: "seed.multimul",
    doc: "Two products in one call.",
    operands: FOUR,
    attrs: &[],
    outputs: OutputCount::Fixed(2),
    commutative: false,
    class: OpClass::Elementwise,
    infer: Infer::Like,
    decompose: Some(multimul_like),
    builtin: None,
};

static MULTIMUL_CALLS: AtomicUsize = AtomicUsize::new(0);

/// The executor that implements `multimul` with a kernel.
fn multimul_executor() -> OpExecutor {
    OpExecutor::new("multimul").with_kernel(&MULTIMUL, |_, x| {
        MULTIMUL_CALLS.fetch_add(1, Ordering::SeqCst);
        Ok(vec![
            cpu::binary(BinaryOp::Mul, x[0], x[1])?,
            cpu::binary(BinaryOp::Mul, x[2], x[3])?,
        ])
    })
}

/// Execution transform: `mul(a, b)` becomes `multimul(contiguous(a), contiguous(b), a, b)[0]`
/// — a "prologue" of layout ops before the call.
fn mul_to_multimul(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    let (a, c) = (b.contiguous(x[0])?, b.contiguous(x[1])?);
    let outs = b.apply(&MULTIMUL, &[a, c, x[0], x[1]], &[])?;
    Ok(vec![outs[0]])
}

fn cpu_only(n: &NodeView<'_>) -> Result<(), String> {
    match n.inputs.iter().find(|m| m.device != Device::Cpu) {
        Some(m) => Err(format!("operand on {}", m.device)),
        None => Ok(()),
    }
}

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

fn t(shape: &[usize], data: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), data).unwrap()
}

fn stack(list: Vec<Arc<dyn Executor>>) -> Vec<Arc<dyn Executor>> {
    list
}

#[test]
fn multimul_with_like_and_kernel() {
    let b = Builder::new();
    let x: Vec<Value> = (0..4)
        .map(|i| b.input(&format!("x{i}"), f32s(&[2])).value())
        .collect();
    let outs = b.apply(&MULTIMUL, &x, &[]).unwrap();
    b.output(&[b.var(outs[0]), b.var(outs[1])]).unwrap();
    let g = b.finish();
    let p = plan(
        &g,
        &stack(vec![Arc::new(multimul_executor()), Arc::new(ReferenceCpu)]),
    )
    .unwrap();
    assert!(
        p.to_string()
            .contains("seed.multimul(x0, x1, x2, x3)  # f32[2], f32[2]  | multimul"),
        "{p}"
    );
    let inputs = [
        t(&[2], vec![1., 2.]),
        t(&[2], vec![3., 4.]),
        t(&[2], vec![5., 6.]),
        t(&[2], vec![7., 8.]),
    ];
    let (out, _) = p.run(&inputs).unwrap();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[3., 8.]);
    assert_eq!(out[1].as_slice::<f32>().unwrap(), &[35., 48.]);
}

#[test]
fn custom_op_without_kernel_runs_through_its_decomposition() {
    let b = Builder::new();
    let x: Vec<Value> = (0..4)
        .map(|i| b.input(&format!("x{i}"), f32s(&[2])).value())
        .collect();
    let outs = b.apply(&MULTIMUL, &x, &[]).unwrap();
    b.output(&[b.var(outs[0]), b.var(outs[1])]).unwrap();
    let p = plan(&b.finish(), &stack(vec![Arc::new(ReferenceCpu)])).unwrap();
    let text = p.to_string();
    // The op runs nowhere as itself: only the comment that says so names it.
    assert_eq!(text.matches("multimul").count(), 2, "{text}");
    assert!(
        text.contains("# runs as its decomposition (no executor took it): ")
            && text.contains("seed.multimul(x0, x1, x2, x3)"),
        "{text}"
    );
    assert!(
        text.contains("#   refused by cpu-reference: `seed.multimul` is not a built-in op"),
        "{text}"
    );
    assert_eq!(text.matches("= mul(").count(), 2, "{text}");
    let inputs = [
        t(&[2], vec![1., 2.]),
        t(&[2], vec![3., 4.]),
        t(&[2], vec![5., 6.]),
        t(&[2], vec![7., 8.]),
    ];
    let (out, _) = p.run(&inputs).unwrap();
    assert_eq!(out[1].as_slice::<f32>().unwrap(), &[35., 48.]);
}

#[test]
fn execution_transform_turns_mul_into_multimul_with_a_prologue() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[3]));
    let y = b.input("y", f32s(&[3]));
    let z = x.mul(y).unwrap().add(x).unwrap();
    b.output(&[z]).unwrap();
    let g = b.finish();
    let transformer =
        OpExecutor::new("mul->multimul").with_transform(&builtin::MUL, cpu_only, mul_to_multimul);
    let before = MULTIMUL_CALLS.load(Ordering::SeqCst);
    let p = plan(
        &g,
        &stack(vec![
            Arc::new(transformer),
            Arc::new(multimul_executor()),
            Arc::new(ReferenceCpu),
        ]),
    )
    .unwrap();
    let text = p.to_string();
    assert_eq!(text.matches("contiguous(").count(), 2, "{text}");
    assert!(text.contains("seed.multimul(t0, t1, x, y)"), "{text}");
    assert!(!text.contains("= mul("), "{text}");
    let (out, _) = p
        .run(&[t(&[3], vec![1., 2., 3.]), t(&[3], vec![4., 5., 6.])])
        .unwrap();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[5., 12., 21.]);
    assert_eq!(MULTIMUL_CALLS.load(Ordering::SeqCst), before + 1);
}

static ADD2_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Seed `add_numpy`: only f32 2-D tensors whose first dim is 2.
fn add_2xn() -> OpExecutor {
    OpExecutor::new("add_2xn").with_checked_kernel(
        &builtin::ADD,
        |n| {
            let ok = n.inputs.iter().all(|m| {
                m.dtype == DType::F32 && m.rank() == 2 && m.shape.dims()[0].known() == Some(2)
            });
            if ok {
                Ok(())
            } else {
                Err("needs f32 tensors of shape [2, n]".into())
            }
        },
        |_, x| {
            ADD2_CALLS.fetch_add(1, Ordering::SeqCst);
            Ok(vec![cpu::binary(BinaryOp::Add, x[0], x[1])?])
        },
    )
}

#[test]
fn checker_accepts_matching_inputs_and_falls_back_for_others() {
    let b = Builder::new();
    let a = b.input("a", f32s(&[2, 3]));
    let c = b.input("c", f32s(&[3, 3]));
    let s1 = a.add(a).unwrap();
    let s2 = c.add(c).unwrap();
    b.output(&[s1, s2]).unwrap();
    let g = b.finish();
    let p = plan(
        &g,
        &stack(vec![Arc::new(add_2xn()), Arc::new(ReferenceCpu)]),
    )
    .unwrap();
    let text = p.to_string();
    assert!(text.contains("add(a, a)  # f32[2, 3]  | add_2xn"), "{text}");
    assert!(
        text.contains("add(c, c)  # f32[3, 3]  | cpu-reference"),
        "{text}"
    );
    let before = ADD2_CALLS.load(Ordering::SeqCst);
    let (out, _) = p
        .run(&[t(&[2, 3], vec![1.; 6]), t(&[3, 3], vec![2.; 9])])
        .unwrap();
    assert_eq!(ADD2_CALLS.load(Ordering::SeqCst), before + 1);
    assert_eq!(out[0].to_f64_vec(), vec![2.; 6]);
    assert_eq!(out[1].to_f64_vec(), vec![4.; 9]);
}

#[test]
fn no_executor_error_names_the_node_and_every_reason() {
    let b = Builder::new();
    let a = b.input("a", f32s(&[3, 3]));
    let s = a.add(a).unwrap();
    b.output(&[s]).unwrap();
    let e = plan(
        &b.finish(),
        &stack(vec![Arc::new(add_2xn()), Arc::new(multimul_executor())]),
    )
    .unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, ExecError::NoExecutor { .. }));
    assert!(m.contains("t0 = add(a, a)  # f32[3, 3]"), "{m}");
    assert!(
        m.contains("add_2xn: needs f32 tensors of shape [2, n]"),
        "{m}"
    );
    assert!(
        m.contains("multimul: has no implementation of `add`"),
        "{m}"
    );
}

#[test]
fn executor_order_changes_which_kernel_runs() {
    let b = Builder::new();
    let a = b.input("a", f32s(&[2, 3]));
    let s = a.add(a).unwrap();
    b.output(&[s]).unwrap();
    let g = b.finish();
    let first = plan(
        &g,
        &stack(vec![Arc::new(add_2xn()), Arc::new(ReferenceCpu)]),
    )
    .unwrap();
    let second = plan(
        &g,
        &stack(vec![Arc::new(ReferenceCpu), Arc::new(add_2xn())]),
    )
    .unwrap();
    let node = g.nodes_with_op("add").next().unwrap();
    assert_eq!(first.executor_of(node), Some("add_2xn"));
    assert_eq!(second.executor_of(node), Some("cpu-reference"));
}

#[test]
fn intermediates_are_freed_after_last_use() {
    // A chain of 10 ops over a 1 MiB tensor keeps about two intermediates alive.
    let n = 256 * 1024;
    let b = Builder::new();
    let x = b.input("x", f32s(&[n as u64]));
    let mut v = x;
    for i in 0..10 {
        v = if i % 2 == 0 {
            v.exp().unwrap()
        } else {
            v.neg().unwrap()
        };
    }
    b.output(&[v]).unwrap();
    let p = plan(&b.finish(), &stack(vec![Arc::new(ReferenceCpu)])).unwrap();
    let (_, report) = p.run(&[t(&[n], vec![0.0; n])]).unwrap();
    let one = n * 4;
    assert!(report.peak_live_bytes >= one, "{report}");
    assert!(
        report.peak_live_bytes <= 2 * one,
        "peak {} > two intermediates {}",
        report.peak_live_bytes,
        2 * one
    );
    // Plain runs keep no per-op table; profiled runs count every call.
    assert!(report.per_op.is_empty(), "{report}");
    let (_, profiled) = p.run_profiled(&[t(&[n], vec![0.0; n])]).unwrap();
    assert_eq!(profiled.per_op["exp"].1, 5);
    assert_eq!(profiled.per_op["neg"].1, 5);
    assert_eq!(profiled.per_op.len(), 2, "{profiled}");
}

#[test]
fn inputs_that_do_not_fit_are_rejected_before_running() {
    let b = Builder::new();
    let x = b.input(
        "x",
        TensorMeta::new(DType::F32, Shape::from(vec!["n".into(), 4u64.into()])),
    );
    let y = b.input(
        "y",
        TensorMeta::new(DType::F32, Shape::from(vec!["n".into(), 4u64.into()])),
    );
    let s = x.add(y).unwrap();
    b.output(&[s]).unwrap();
    let p = plan(&b.finish(), &stack(vec![Arc::new(ReferenceCpu)])).unwrap();
    let ok = p
        .run(&[t(&[3, 4], vec![1.; 12]), t(&[3, 4], vec![1.; 12])])
        .unwrap();
    assert_eq!(ok.0[0].shape(), &[3, 4]);
    let e = p.run(&[t(&[3, 4], vec![1.; 12])]).unwrap_err().to_string();
    assert!(e.contains("takes 2 inputs, 1 given"), "{e}");
    let e = p
        .run(&[t(&[3, 5], vec![1.; 15]), t(&[3, 4], vec![1.; 12])])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input x") && e.contains("f32[n, 4]") && e.contains("[3, 5]"),
        "{e}"
    );
    let e = p
        .run(&[t(&[3, 4], vec![1.; 12]), t(&[2, 4], vec![1.; 8])])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input y") && e.contains("symbol `n` is 2 here but was bound to 3"),
        "{e}"
    );
    let e = p
        .run(&[
            Tensor::from_vec(vec![3, 4], vec![1i64; 12]).unwrap(),
            t(&[3, 4], vec![1.; 12]),
        ])
        .unwrap_err()
        .to_string();
    assert!(e.contains("got a i64 tensor"), "{e}");
}

/// An executor that has a `multimul` kernel but refuses every node of it.
fn refusing_multimul() -> OpExecutor {
    OpExecutor::new("picky").with_checked_kernel(
        &MULTIMUL,
        |_| Err("only runs on the accelerator".into()),
        |_, _| unreachable_kernel(),
    )
}

fn unreachable_kernel() -> Result<Vec<Tensor>, graphrw::exec::KernelFailure> {
    Err("the checker refuses every node".into())
}

fn one_multimul() -> graphrw::Graph {
    let b = Builder::new();
    let x: Vec<Value> = (0..4)
        .map(|i| b.input(&format!("x{i}"), f32s(&[2])).value())
        .collect();
    let outs = b.apply(&MULTIMUL, &x, &[]).unwrap();
    b.output(&[b.var(outs[0]), b.var(outs[1])]).unwrap();
    b.finish()
}

#[test]
fn a_fallback_to_the_decomposition_is_recorded_with_every_refusal() {
    let p = plan(
        &one_multimul(),
        &stack(vec![Arc::new(refusing_multimul()), Arc::new(ReferenceCpu)]),
    )
    .unwrap();
    let fallbacks = p.fallbacks();
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    let f = &fallbacks[0];
    assert_eq!(f.op, "seed.multimul");
    assert!(f.node.contains("seed.multimul(x0, x1, x2, x3)"), "{f}");
    assert_eq!(f.refusals.len(), 2, "{f}");
    assert!(
        f.refusals[0].contains("picky: only runs on the accelerator"),
        "{f}"
    );
    assert!(f.refusals[1].starts_with("cpu-reference:"), "{f}");
    // The plan's printout says it too, with the user checker's reason.
    let text = p.to_string();
    assert!(
        text.contains("# runs as its decomposition (no executor took it): ")
            && text.contains("#   refused by picky: only runs on the accelerator"),
        "{text}"
    );
    // A plan with a kernel for every node records none.
    let direct = plan(
        &one_multimul(),
        &stack(vec![Arc::new(multimul_executor()), Arc::new(ReferenceCpu)]),
    )
    .unwrap();
    assert!(direct.fallbacks().is_empty());
}

#[test]
fn no_executor_for_a_decomposed_node_names_the_op_the_user_wrote() {
    // Nothing runs `mul` either: the error is about a node of the decomposition, and
    // names `seed.multimul` and why it was decomposed.
    let e = plan(&one_multimul(), &stack(vec![Arc::new(refusing_multimul())]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("= mul("), "{e}");
    assert!(
        e.contains("decomposition of `") && e.contains("seed.multimul(x0, x1, x2, x3)"),
        "{e}"
    );
    assert!(e.contains("picky: only runs on the accelerator"), "{e}");
    assert!(e.contains("picky: has no implementation of `mul`"), "{e}");
}
