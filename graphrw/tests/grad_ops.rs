//! Finite-difference checks (f64) of the vjp rule of every differentiable built-in op,
//! including broadcasting, 1-D matmul operands, multi-output ops and index operands.

mod grad_support;

use grad_support::{f64s, fd_check, input};
use graphrw::grad::{grad, GradError};
use graphrw::ops;
use graphrw::{Builder, DType, Tensor, Var};

type R<'b> = Result<Var<'b>, graphrw::GraphError>;
type Unary = for<'b> fn(Var<'b>) -> R<'b>;

#[test]
fn binary_arithmetic_with_broadcasting() {
    let (a, b) = ([2usize, 3], [3usize]);
    fd_check(&[input(&a, -2.0, 2.0), input(&b, -2.0, 2.0)], |_, x| {
        x[0].add(x[1])
    });
    fd_check(&[input(&b, -2.0, 2.0), input(&a, -2.0, 2.0)], |_, x| {
        x[0].sub(x[1])
    });
    fd_check(
        &[input(&[2, 1], -2.0, 2.0), input(&b, -2.0, 2.0)],
        |_, x| x[0].mul(x[1]),
    );
    fd_check(&[input(&a, -2.0, 2.0), input(&b, 0.5, 2.0)], |_, x| {
        x[0].div(x[1])
    });
    fd_check(&[input(&a, 0.5, 2.0), input(&b, -1.5, 1.5)], |_, x| {
        x[0].pow(x[1])
    });
    // A scalar constant operand gets no gradient and needs none.
    fd_check(&[input(&a, 0.5, 2.0)], |_, x| x[0].pow(3.0));
    fd_check(
        &[input(&a, -2.0, 2.0), input(&[2, 1], -2.0, 2.0)],
        |_, x| x[0].maximum(x[1]),
    );
    fd_check(&[input(&a, -2.0, 2.0), input(&a, -2.0, 2.0)], |_, x| {
        x[0].minimum(x[1])
    });
}

#[test]
fn unary_elementwise() {
    let s = [2usize, 3];
    let any = || input(&s, -2.0, 2.0);
    let pos = || input(&s, 0.3, 2.0);
    let unary: &[(&str, bool, Unary)] = &[
        ("neg", false, |x| x.neg()),
        ("abs", false, |x| x.abs()),
        ("reciprocal", true, |x| x.reciprocal()),
        ("sqrt", true, |x| x.sqrt()),
        ("rsqrt", true, |x| x.rsqrt()),
        ("exp", false, |x| x.exp()),
        ("log", true, |x| x.log()),
        ("sin", false, |x| x.sin()),
        ("cos", false, |x| x.cos()),
        ("erf", false, |x| x.erf()),
        ("tanh", false, |x| x.tanh()),
        ("sigmoid", false, |x| x.sigmoid()),
        ("relu", false, |x| x.relu()),
        ("gelu", false, |x| x.gelu()),
        ("gelu tanh", false, |x| x.gelu_with("tanh")),
        ("silu", false, |x| x.silu()),
        ("contiguous", false, |x| x.contiguous()),
        ("dropout", false, |x| x.dropout()),
        ("cast", false, |x| x.cast(DType::F64)),
        ("tril", false, |x| x.tril()),
        ("triu", false, |x| x.triu_with(1)),
    ];
    for (name, positive, f) in unary {
        let x = if *positive { pos() } else { any() };
        let err = fd_check(&[x], |_, x| f(x[0]));
        assert!(err < 1e-5, "{name}");
    }
}

#[test]
fn where_masked_fill_and_cast_through_f32() {
    fd_check(
        &[input(&[2, 3], -2.0, 2.0), input(&[3], -2.0, 2.0)],
        |_, x| x[0].gt(0.0)?.where_(x[0], x[1]),
    );
    fd_check(&[input(&[2, 3], -2.0, 2.0)], |_, x| {
        x[0].masked_fill(x[0].lt(0.5)?, 7.0)
    });
    // Through a lower precision and back: the cast's vjp casts the cotangent back.
    let b = Builder::new();
    let x = b.input("x", f64s(&[3]));
    let loss = x.cast(DType::F32).unwrap().sum().unwrap();
    b.output(&[loss]).unwrap();
    let x = x.value();
    let g = grad(&b.finish(), &[x]).unwrap();
    let text = g.to_string();
    assert!(
        text.contains("cast(") && text.contains("dtype=f64"),
        "{text}"
    );
}

#[test]
fn matmul_all_ranks() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 4], &[4, 2]),
        (&[2, 3, 4], &[4, 2]),
        (&[2, 1, 3, 4], &[3, 4, 2]),
        (&[4], &[4, 2]),
        (&[2, 3, 4], &[4]),
        (&[4], &[4]),
        (&[1, 4], &[2, 4, 1]),
    ];
    for (a, b) in cases {
        let err = fd_check(&[input(a, -1.0, 1.0), input(b, -1.0, 1.0)], |_, x| {
            x[0].matmul(x[1])
        });
        assert!(err < 1e-5, "{a:?} @ {b:?}");
    }
}

#[test]
fn layout_ops() {
    let x = || input(&[2, 3, 4], -1.0, 1.0);
    fd_check(&[x()], |_, x| x[0].transpose(0, -1));
    fd_check(&[x()], |_, x| x[0].permute(&[2, 0, 1]));
    fd_check(&[x()], |_, x| x[0].reshape(&[6, -1]));
    fd_check(&[input(&[3, 1], -1.0, 1.0)], |_, x| x[0].expand(&[2, 3, 4]));
    fd_check(&[x()], |_, x| x[0].unsqueeze(-2));
    fd_check(&[input(&[2, 1, 4], -1.0, 1.0)], |_, x| x[0].squeeze());
    fd_check(&[x(), input(&[2, 1, 4], -1.0, 1.0)], |b, x| {
        Ok(b.var(b.concat_with(&[x[0].value(), x[1].value(), x[0].value()], 1)?))
    });
    // split: only some pieces reach the loss; the others' cotangents are zeros.
    fd_check(&[x()], |_, x| {
        let parts = x[0].split_with(&[1, 2, 1], -1)?;
        parts[2].mul(parts[1].sum_with(&[-1], true)?)
    });
    fd_check(&[x()], |_, x| x[0].slice_with(1, 1, 3, 1));
    fd_check(&[x()], |_, x| x[0].slice_with(-1, -3, i64::MAX, 2));
}

#[test]
fn indexing_ops() {
    let idx = |shape: &[usize], v: Vec<i64>| Tensor::from_vec(shape.to_vec(), v).unwrap();
    // Repeated and negative indices accumulate.
    fd_check(&[input(&[4, 3], -1.0, 1.0)], |b, x| {
        x[0].index_select(b.constant(idx(&[5], vec![0, 2, 2, 3, 1])), 0)
    });
    fd_check(&[input(&[2, 4], -1.0, 1.0)], |b, x| {
        x[0].gather_with(b.constant(idx(&[2, 2], vec![3, -1, 0, 0])), 1)
    });
    fd_check(&[input(&[3, 4], -1.0, 1.0)], |b, x| {
        let index = idx(&[3, 4], vec![0, 1, 2, 0, 2, 2, 1, 0, 1, 1, 1, 2]);
        x[0].gather_elements(b.constant(index))
    });
}

#[test]
fn reductions_and_normalisation() {
    let x = || input(&[2, 3, 4], -1.0, 1.0);
    fd_check(&[x()], |_, x| x[0].sum());
    fd_check(&[x()], |_, x| x[0].sum_with(&[0, -1], false));
    fd_check(&[x()], |_, x| x[0].mean_with(&[1], true));
    fd_check(&[x()], |_, x| x[0].mean_with(&[-1], false));
    fd_check(&[x()], |_, x| x[0].amax_with(&[-1], false));
    fd_check(&[x()], |_, x| x[0].amax_with(&[], true));
    fd_check(&[x()], |_, x| x[0].cumsum(1));
    fd_check(&[x()], |_, x| x[0].softmax(-1));
    fd_check(&[x()], |_, x| x[0].log_softmax(1));
    // layer_norm and rms_norm have no rule: they go through their decompositions.
    fd_check(
        &[x(), input(&[4], 0.5, 1.5), input(&[4], -1.0, 1.0)],
        |_, x| x[0].layer_norm(Some(x[1]), Some(x[2])),
    );
    fd_check(&[x(), input(&[3, 4], 0.5, 1.5)], |_, x| {
        x[0].layer_norm_with(Some(x[1]), None, -2, 1e-5)
    });
    fd_check(&[x(), input(&[4], 0.5, 1.5)], |_, x| {
        x[0].rms_norm(Some(x[1]))
    });
}

#[test]
fn attention_and_cross_entropy_through_their_backward_ops() {
    let q = || input(&[1, 2, 3, 4], -1.0, 1.0);
    fd_check(&[q(), q(), q()], |_, x| {
        x[0].scaled_dot_product_attention_with(x[1], x[2], None, 0.0, true, None, false)
    });
    fd_check(&[input(&[3, 5], -2.0, 2.0)], |b, x| {
        let target = b.constant(Tensor::from_vec(vec![3], vec![4i64, 0, 2]).unwrap());
        x[0].cross_entropy_with(target, -100, 0.1, "none")
    });
}

#[test]
fn ops_without_a_rule_name_the_op_and_node() {
    let b = Builder::new();
    let x = b.input("x", f64s(&[1, 1, 4, 4]));
    let w = b.input("w", f64s(&[1, 1, 3, 3]));
    let y = x.conv2d(w, None).unwrap();
    b.output(&[y.sum().unwrap()]).unwrap();
    let x = x.value();
    let e = grad(&b.finish(), &[x]).unwrap_err();
    assert!(matches!(e, GradError::NoRule { op: "conv2d", .. }), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("`conv2d` (node t0)") && m.contains("no vjp rule"),
        "{m}"
    );
}

#[test]
fn every_differentiable_op_is_checked_here() {
    // Ops whose outputs carry no gradient (bool/int results, sources), the backward
    // ops themselves, and ops with no rule yet (their error is tested above).
    let exempt = [
        "input",
        "constant",
        "arange",
        "full",
        "zeros",
        "ones",
        "and",
        "or",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "not",
        "isnan",
        "conv2d",
        "gather_nd",
        "scaled_dot_product_attention_backward",
        "cross_entropy_backward",
        // An ONNX op graphrw does not model: no meaning, so no gradient.
        "opaque",
        // Sizes known at run time: integers, no gradient.
        "sym_ints",
    ];
    // `where` is spelled `where_` in Rust: "where".
    let source = include_str!("grad_ops.rs");
    for op in ops::BUILTIN {
        if exempt.contains(&op.name) {
            continue;
        }
        assert!(
            source.contains(&format!(".{}(", op.name))
                || source.contains(&format!(".{}_with(", op.name))
                || source.contains(&format!("\"{}\"", op.name)),
            "no gradient check mentions `{}`",
            op.name
        );
    }
}
