//! The gradient transform on composite graphs, its errors, given cotangents, custom
//! ops (through a `like` decomposition, or with their own vjp rule), and executors
//! claiming nodes of backward graphs (Thunder's `multimul` seed example).

mod grad_support;

use std::sync::Arc;

use grad_support::{data, f64s, fd_check, fd_check_with, input, tensor};
use graphrw::exec::{plan, Executor, NodeView, OpExecutor, ReferenceCpu};
use graphrw::grad::{grad, grad_with, Cotangents, GradError, GradRegistry, VjpContext, VjpResult};
use graphrw::gradcheck::check_grad;
use graphrw::kernels::cpu::{self, BinaryOp};
use graphrw::ops::{builtin, Arity, Attrs, Infer, OpClass, OpDef, OperandSpec, OutputCount};
use graphrw::{verify, Builder, DType, Device, GraphError, Value};

#[test]
fn mlp_with_broadcast_bias_norm_and_softmax() {
    fd_check(
        &[
            input(&[3, 4], -1.0, 1.0),
            input(&[4, 5], -1.0, 1.0),
            input(&[5], -0.5, 0.5),
            input(&[5, 2], -1.0, 1.0),
        ],
        |_, x| {
            let h = x[0].matmul(x[1])?.add(x[2])?.gelu_with("tanh")?;
            let h = h.layer_norm(None, None)?;
            h.matmul(x[3])?.log_softmax(-1)
        },
    );
}

#[test]
fn unfused_attention_block() {
    // The attention spelling exporters produce, differentiated node by node.
    let s = [1usize, 2, 3, 4];
    fd_check(
        &[
            input(&s, -1.0, 1.0),
            input(&s, -1.0, 1.0),
            input(&s, -1.0, 1.0),
        ],
        |b, x| {
            let scores = x[0].matmul(x[1].transpose(-2, -1)?)?.div(2.0)?;
            let causal = b.var(b.tril(b.ones_with(&[3, 3], DType::Bool)?)?);
            let p = causal.where_(scores, f64::NEG_INFINITY)?.softmax(-1)?;
            p.matmul(x[2])?.permute(&[0, 2, 1, 3])?.reshape(&[1, 3, 8])
        },
    );
}

#[test]
fn a_value_used_twice_accumulates_and_unused_inputs_get_zeros() {
    let b = Builder::new();
    let x = b.input("x", f64s(&[3]));
    let unused = b.input("unused", f64s(&[2]));
    let loss = x.mul(x).unwrap().add(x).unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    let wrt = [x.value(), unused.value()];
    let g = grad(&b.finish(), &wrt).unwrap();
    verify(&g).unwrap();
    assert_eq!(g.output_names()[1..], ["grad_x", "grad_unused"]);
    let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
    let (out, _) = plan(&g, &stack)
        .unwrap()
        .run(&[
            tensor(&[3], vec![1.0, -2.0, 0.5]),
            tensor(&[2], vec![7.0, 8.0]),
        ])
        .unwrap();
    assert_eq!(out[1].to_f64_vec(), vec![3.0, -3.0, 2.0]); // 2x + 1
    assert_eq!(out[2].to_f64_vec(), vec![0.0, 0.0]);
}

#[test]
fn given_cotangents_compute_a_vjp_of_every_output() {
    let b = Builder::new();
    let x = b.input("x", f64s(&[2, 3]));
    let y = x.mul(x).unwrap();
    let z = x.sum_with(&[1], false).unwrap();
    b.output(&[y, z]).unwrap();
    let wrt = [x.value()];
    let g = grad_with(
        &b.finish(),
        &wrt,
        &GradRegistry::with_builtins(),
        Cotangents::Given,
    )
    .unwrap();
    verify(&g).unwrap();
    assert_eq!(g.inputs().len(), 3, "{g}");
    let text = g.to_string();
    assert!(
        text.contains("d_output_0") && text.contains("d_output_1"),
        "{text}"
    );
    let xv = data(6, 1, -1.0, 1.0);
    let dy = data(6, 2, -1.0, 1.0);
    let dz = [0.5, -2.0];
    let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
    let (out, _) = plan(&g, &stack)
        .unwrap()
        .run(&[
            tensor(&[2, 3], xv.clone()),
            tensor(&[2, 3], dy.clone()),
            tensor(&[2], dz.to_vec()),
        ])
        .unwrap();
    let got = out[2].to_f64_vec();
    for i in 0..6 {
        let want = 2.0 * xv[i] * dy[i] + dz[i / 3];
        assert!((got[i] - want).abs() < 1e-12, "{i}: {} vs {want}", got[i]);
    }
}

#[test]
fn errors_name_what_is_wrong() {
    let b = Builder::new();
    let x = b.input("x", f64s(&[2, 3]));
    let i = b.input(
        "i",
        graphrw::TensorMeta::new(DType::I64, graphrw::Shape::known(&[2])),
    );
    let y = x.exp().unwrap();
    b.output(&[y]).unwrap();
    let (xv, yv, iv) = (x.value(), y.value(), i.value());
    let g = b.finish();
    let e = grad(&g, &[xv]).unwrap_err();
    assert!(
        matches!(e, GradError::NonScalarOutput { output: 0, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("f64[2, 3]"), "{e}");
    let e = grad(&g, &[yv]).unwrap_err().to_string();
    assert!(e.contains("t0") && e.contains("output of `exp`"), "{e}");
    let e = grad(&g, &[iv]).unwrap_err().to_string();
    assert!(e.contains("i64") && e.contains("only float inputs"), "{e}");

    let b = Builder::new();
    let x = b.input("x", f64s(&[4]));
    let loss = x.dropout_with(0.1, true).unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    let xv = x.value();
    let e = grad(&b.finish(), &[xv]).unwrap_err().to_string();
    assert!(
        e.contains("vjp of `dropout` (node t0)") && e.contains("random mask"),
        "{e}"
    );
}

/// A deliberately wrong vjp for `exp` (`2 g` instead of `g exp(x)`).
fn wrong_exp_vjp<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    Ok(vec![Some(cx.cotangent(0)?.mul(2.0)?)])
}

#[test]
fn the_finite_difference_check_catches_a_wrong_rule() {
    let mut registry = GradRegistry::with_builtins();
    registry.register(&builtin::EXP, wrong_exp_vjp);
    let b = Builder::new();
    let x = b.input("x", f64s(&[3]));
    let loss = x.exp().unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    let wrt = [x.value()];
    let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(ReferenceCpu)];
    let inputs = [tensor(&[3], vec![0.1, 0.5, 1.5])];
    let report = check_grad(&b.finish(), &wrt, &inputs, &registry, &stack, 1e-6).unwrap();
    assert!(report.max_error() > 0.1, "{report}");
    assert_eq!(report.inputs[0].input, "x");
}

// --- custom ops ---------------------------------------------------------------------

const TWO: &[OperandSpec] = &[
    OperandSpec {
        name: "a",
        arity: Arity::Required,
    },
    OperandSpec {
        name: "b",
        arity: Arity::Required,
    },
];

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

fn mymul_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    Ok(vec![b.mul(x[0], x[1])?])
}

fn multimul_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    Ok(vec![b.mul(x[0], x[1])?, b.mul(x[2], x[3])?])
}

/// `mymul(a, b) = a * b`, declared `like` its decomposition.
static MYMUL: OpDef = OpDef {
    name: "seed.mymul",
    doc: "A product.",
    operands: TWO,
    attrs: &[],
    outputs: OutputCount::Fixed(1),
    commutative: false,
    class: OpClass::Elementwise,
    infer: Infer::Like,
    decompose: Some(mymul_like),
    builtin: None,
};

/// `multimul(a, b, c, d) -> (a * b, c * d)`, declared `like` its decomposition.
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

/// Thunder's `grad_transform` of `mymul`: `get_grad(c)`, then both operand gradients
/// from one `multimul(b, g, a, g)` call, `put_grads((a, b), (ga, gb))`.
fn mymul_vjp<'b>(cx: &VjpContext<'b>) -> VjpResult<'b> {
    let g = cx.cotangent(0)?.value();
    let (a, b) = (cx.input(0).value(), cx.input(1).value());
    let bl = cx.builder();
    let grads = bl.apply(&MULTIMUL, &[b, g, a, g], &[])?;
    Ok(vec![Some(bl.var(grads[0])), Some(bl.var(grads[1]))])
}

fn multimul_executor() -> OpExecutor {
    OpExecutor::new("multimul").with_kernel(&MULTIMUL, |_, x| {
        Ok(vec![
            cpu::binary(BinaryOp::Mul, x[0], x[1])?,
            cpu::binary(BinaryOp::Mul, x[2], x[3])?,
        ])
    })
}

#[test]
fn custom_ops_with_like_are_differentiable_with_no_extra_code() {
    let s = [2usize, 3];
    let e = fd_check(&[input(&s, -1.0, 1.0), input(&[3], -1.0, 1.0)], |b, x| {
        Ok(b.var(b.apply(&MYMUL, &[x[0].value(), x[1].value()], &[])?[0]))
    });
    assert!(e < 1e-5);
    // A multi-output custom op where only one output reaches the loss.
    let e = fd_check(
        &[
            input(&s, -1.0, 1.0),
            input(&s, -1.0, 1.0),
            input(&s, 0.5, 1.0),
        ],
        |b, x| {
            let v: Vec<Value> = vec![x[0].value(), x[1].value(), x[2].value(), x[2].value()];
            let outs = b.apply(&MULTIMUL, &v, &[])?;
            b.var(outs[0]).exp()
        },
    );
    assert!(e < 1e-5);
}

#[test]
fn custom_grad_rule_turns_the_gradient_of_a_times_b_into_one_multimul() {
    let mut registry = GradRegistry::with_builtins();
    registry.register(&MYMUL, mymul_vjp);
    let b = Builder::new();
    let a = b.input("a", f64s(&[3]));
    let bb = b.input("b", f64s(&[3]));
    let c = b.apply(&MYMUL, &[a.value(), bb.value()], &[]).unwrap()[0];
    let loss = b.var(c).sum().unwrap();
    b.output(&[loss]).unwrap();
    let wrt = [a.value(), bb.value()];
    let forward = b.finish();
    let backward = grad_with(&forward, &wrt, &registry, Cotangents::Scalar).unwrap();
    verify(&backward).unwrap();
    let text = backward.to_string();
    println!("{text}");
    assert_eq!(text.matches("seed.multimul(").count(), 1, "{text}");
    assert!(!text.contains("= mul("), "{text}");
    // The gradient g reaches multimul as its 2nd and 4th operands: multimul(b, g, a, g).
    let line = text.lines().find(|l| l.contains("seed.multimul(")).unwrap();
    let args = &line[line.find('(').unwrap() + 1..line.find(')').unwrap()];
    let args: Vec<&str> = args.split(", ").collect();
    assert!(
        args[0] == "b" && args[2] == "a" && args[1] == args[3],
        "{line}"
    );

    // The multimul executor claims the backward node; it runs and gives b and a.
    let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(multimul_executor()), Arc::new(ReferenceCpu)];
    let p = plan(&backward, &stack).unwrap();
    let ptext = p.to_string();
    println!("{ptext}");
    assert!(
        ptext.contains("seed.multimul(b, ") && ptext.contains("| multimul"),
        "{ptext}"
    );
    let (av, bv) = (vec![1.0, 2.0, 3.0], vec![-4.0, 5.0, 0.5]);
    let (out, _) = p
        .run(&[tensor(&[3], av.clone()), tensor(&[3], bv.clone())])
        .unwrap();
    assert_eq!(out[1].to_f64_vec(), bv);
    assert_eq!(out[2].to_f64_vec(), av);
    // And it agrees with finite differences.
    let e = fd_check_with(
        &[input(&[3], -1.0, 1.0), input(&[3], -1.0, 1.0)],
        &registry,
        &[Arc::new(multimul_executor()), Arc::new(ReferenceCpu)],
        |b, x| Ok(b.var(b.apply(&MYMUL, &[x[0].value(), x[1].value()], &[])?[0])),
    );
    assert!(e < 1e-5);
}

fn cpu_only(n: &NodeView<'_>) -> Result<(), String> {
    match n.inputs.iter().find(|m| m.device != Device::Cpu) {
        Some(m) => Err(format!("operand on {}", m.device)),
        None => Ok(()),
    }
}

fn mul_to_multimul(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    Ok(vec![b.apply(&MULTIMUL, &[x[0], x[1], x[0], x[1]], &[])?[0]])
}

#[test]
fn execution_transforms_claim_backward_nodes() {
    // The built-in vjp of mul gives two muls; an executor's transform claims each.
    let b = Builder::new();
    let x = b.input("x", f64s(&[3]));
    let y = b.input("y", f64s(&[3]));
    let loss = x.mul(y).unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    let wrt = [x.value(), y.value()];
    let backward = grad(&b.finish(), &wrt).unwrap();
    let transformer =
        OpExecutor::new("mul->multimul").with_transform(&builtin::MUL, cpu_only, mul_to_multimul);
    let stack: Vec<Arc<dyn Executor>> = vec![
        Arc::new(transformer),
        Arc::new(multimul_executor()),
        Arc::new(ReferenceCpu),
    ];
    let p = plan(&backward, &stack).unwrap();
    let text = p.to_string();
    assert_eq!(text.matches("| multimul").count(), 3, "{text}");
    let (out, _) = p
        .run(&[
            tensor(&[3], vec![1.0, 2.0, 3.0]),
            tensor(&[3], vec![4.0, 5.0, 6.0]),
        ])
        .unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![32.0]);
    assert_eq!(out[1].to_f64_vec(), vec![4.0, 5.0, 6.0]);
    assert_eq!(out[2].to_f64_vec(), vec![1.0, 2.0, 3.0]);
}
