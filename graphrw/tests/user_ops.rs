//! Users declare their own ops through the same mechanism as the built-ins: a
//! `static OpDef`, with an inference function or `like` a decomposition.

use graphrw::ops::{
    Arity, AttrDefault, AttrKind, AttrSpec, AttrValue, Attrs, Infer, InferError, OpClass, OpDef,
    OpRegistry, OperandSpec, OutputCount,
};
use graphrw::{verify, Builder, DType, GraphError, Shape, TensorMeta, Value};

fn infer_scale(inputs: &[&TensorMeta], attrs: &Attrs) -> Result<Vec<TensorMeta>, InferError> {
    if !inputs[0].dtype.is_float() {
        return Err(InferError(format!(
            "expected a float tensor, found {}",
            inputs[0].dtype
        )));
    }
    attrs.float("factor")?;
    Ok(vec![inputs[0].clone()])
}

/// `input * factor`, with its own inference.
static SCALE: OpDef = OpDef {
    name: "test.scale",
    doc: "Multiplies by a constant factor.",
    operands: &[OperandSpec {
        name: "input",
        arity: Arity::Required,
    }],
    attrs: &[AttrSpec {
        name: "factor",
        kind: AttrKind::Float,
        default: AttrDefault::Float(1.0),
    }],
    outputs: OutputCount::Fixed(1),
    commutative: false,
    class: OpClass::Elementwise,
    infer: Infer::Fn(infer_scale),
    decompose: None,
    builtin: None,
};

fn multimul_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    Ok(vec![b.mul(x[0], x[1])?, b.mul(x[2], x[3])?])
}

/// Thunder's seed example: `multimul(a, b, c, d) -> (a * b, c * d)`, metadata `like`
/// its decomposition.
static MULTIMUL: OpDef = OpDef {
    name: "test.multimul",
    doc: "Two products at once.",
    operands: &[
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
    ],
    attrs: &[],
    outputs: OutputCount::Fixed(2),
    commutative: false,
    class: OpClass::Elementwise,
    infer: Infer::Like,
    decompose: Some(multimul_like),
    builtin: None,
};

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

#[test]
fn user_op_with_inference_fn() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = b
        .apply(&SCALE, &[x.value()], &[("factor", AttrValue::Float(0.5))])
        .unwrap();
    assert_eq!(b.meta(y[0]).unwrap(), f32s(&[2, 3]));
    // Defaults are filled in: the node carries every attribute.
    let z = b.apply(&SCALE, &[y[0]], &[]).unwrap();
    b.output(&[b.var(z[0])]).unwrap();
    let g = b.finish();
    verify(&g).unwrap();
    let text = g.to_string();
    assert!(text.contains("t0 = test.scale(x, factor=0.5)"), "{text}");
    assert!(text.contains("t1 = test.scale(t0, factor=1.0)"), "{text}");
}

#[test]
fn user_op_rejects_bad_input_with_its_own_message() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::I64, Shape::known(&[2])));
    let e = b.apply(&SCALE, &[x.value()], &[]).unwrap_err().to_string();
    assert!(
        e.contains("test.scale") && e.contains("expected a float tensor, found i64"),
        "{e}"
    );
    let e = b
        .apply(&SCALE, &[x.value()], &[("factor", AttrValue::Int(2))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`factor` should be float"), "{e}");
}

#[test]
fn like_decomposition_infers_metadata() {
    let b = Builder::new();
    let a = b.input("a", f32s(&[2, 1]));
    let c = b.input("c", f32s(&[3]));
    let outs = b
        .apply(
            &MULTIMUL,
            &[a.value(), c.value(), c.value(), c.value()],
            &[],
        )
        .unwrap();
    assert_eq!(outs.len(), 2);
    assert_eq!(b.meta(outs[0]).unwrap(), f32s(&[2, 3]));
    assert_eq!(b.meta(outs[1]).unwrap(), f32s(&[3]));
    b.output(&[b.var(outs[0]), b.var(outs[1])]).unwrap();
    let g = b.finish();
    verify(&g).unwrap();
    assert!(g.to_string().contains("t0, t1 = test.multimul(a, c, c, c)"));
    // The decomposition's errors surface too.
    let b = Builder::new();
    let a = b.input("a", f32s(&[2]));
    let c = b.input("c", f32s(&[3]));
    let e = b
        .apply(
            &MULTIMUL,
            &[a.value(), c.value(), a.value(), a.value()],
            &[],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("mul") && e.contains("do not broadcast"), "{e}");
}

#[test]
fn registry_resolves_user_ops_by_name() {
    let mut reg = OpRegistry::with_builtins();
    reg.register(&SCALE).unwrap();
    assert!(reg.get("test.scale").is_some());
    assert!(reg.get("softmax").is_some());
    assert!(matches!(
        reg.register(&SCALE),
        Err(GraphError::DuplicateOp(_))
    ));
}

#[test]
fn a_typed_call_takes_attributes_by_name_and_defaults_the_rest() {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2, 3]));
    let y = b.call(&SCALE).arg(x).attr("factor", 0.5).build().unwrap();
    let z = b.call(&SCALE).arg(y).build().unwrap();
    // A number operand becomes a scalar constant, as in the generated methods.
    let outs = b
        .call(&MULTIMUL)
        .arg(z)
        .arg(2.0)
        .args([z, z])
        .build_all()
        .unwrap();
    assert_eq!(outs.len(), 2);
    b.output(&[outs[0], outs[1]]).unwrap();
    let g = b.finish();
    verify(&g).unwrap();
    let text = g.to_string();
    assert!(text.contains("t0 = test.scale(x, factor=0.5)"), "{text}");
    assert!(text.contains("t1 = test.scale(t0, factor=1.0)"), "{text}");
    assert!(text.contains("= test.multimul(t1, c0, t1, t1)"), "{text}");
    // A wrong attribute name or kind is an error naming the op and the attribute.
    let e = b_err(|b, x| b.call(&SCALE).arg(x).attr("fctor", 0.5).build().map(drop));
    assert!(e.contains("test.scale") && e.contains("fctor"), "{e}");
    let e = b_err(|b, x| {
        b.call(&SCALE)
            .arg(x)
            .attr("factor", "big")
            .build()
            .map(drop)
    });
    assert!(e.contains("factor"), "{e}");
}

/// The error of `f` on a fresh builder with one f32 input.
fn b_err(f: impl Fn(&Builder, graphrw::Var<'_>) -> Result<(), GraphError>) -> String {
    let b = Builder::new();
    let x = b.input("x", f32s(&[2]));
    f(&b, x).unwrap_err().to_string()
}
