//! ONNX `Cast` between every pair of graphrw's dtypes (f32, f64, f16, bf16, i64, i32,
//! bool, u8, i8, i16, u16, u32, u64: 169 pairs, each dtype to itself included) loads
//! and runs, on the reference and the default stack, as onnxruntime runs the same model
//! (floats within `1e-4` plus `1e-3` of the largest magnitude, integers and bools
//! exactly; `SKIPPED` without onnxruntime, a failure under `CI=true`). numpy has no
//! bfloat16, so a bf16 value goes in as f32 through a `Cast` to bf16, and comes out
//! through a `Cast` to f32.
//!
//! The values cover what every pair defines. From an integer: the edges of every
//! integer type (0, ±1, 127, -128, 255, 256, 32767, -32768, 65535, 65536, the 32- and
//! 64-bit extremes) as the source type holds them, so a cast to a narrower integer
//! wraps and one to a float rounds. From a float: fractions truncated toward zero, and
//! the largest and smallest value of an 8-bit target; into an unsigned integer only
//! non-negative values (ONNX leaves a float out of the target's range undefined; what
//! graphrw does there is on [`graphrw::Element`]).

mod onnx_support;
mod ort_support;

use graphrw::exec::{default_stack, plan, reference_stack};
use graphrw::onnx::proto::{
    attribute_type, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
};
use graphrw::onnx::{dtype_to_onnx, load_bytes};
use graphrw::{rules, DType, Tensor};
use onnx_support::value_of;
use prost::Message;

const SHAPE: [usize; 2] = [5, 4];

/// The integer edges, each wrapped into the source type by the cast from i64.
const INT_EDGES: [i64; 20] = [
    0,
    1,
    -1,
    2,
    127,
    -128,
    255,
    256,
    -129,
    32767,
    -32768,
    65535,
    65536,
    i32::MAX as i64,
    i32::MIN as i64,
    u32::MAX as i64,
    i64::MAX,
    i64::MIN,
    (1 << 40) + 3,
    -(1 << 33) - 7,
];

/// Values every cast from `from` to `to` defines, as `from` (bf16 as f32: it is cast
/// on the way in).
fn input(from: DType, to: DType) -> Tensor {
    let shape = SHAPE.to_vec();
    if from.is_int() {
        let wide = Tensor::from_vec(shape, INT_EDGES.to_vec()).expect("tensor");
        return wide.cast(from);
    }
    let mut floats: [f32; 20] = [
        -3.75, -2.5, -1.0, -0.5, 0.0, 0.25, 0.75, 1.0, 2.5, 7.0, 100.0, -100.0, 99.5, -99.5, 3.0,
        64.0, 42.0, -42.0, 0.0, 0.0,
    ];
    // The extremes of an 8-bit target (exact in every float type).
    match to {
        DType::U8 => floats[18..].copy_from_slice(&[255.0, 200.0]),
        DType::I8 => floats[18..].copy_from_slice(&[127.0, -128.0]),
        _ => {}
    }
    if to.is_unsigned_int() {
        for v in &mut floats {
            *v = v.abs();
        }
    }
    let t = Tensor::from_vec(shape.clone(), floats.to_vec()).expect("tensor");
    match from {
        DType::BF16 => t,
        DType::Bool => {
            let v: Vec<bool> = floats.iter().map(|&x| x > 0.0).collect();
            Tensor::from_vec(shape, v).expect("tensor")
        }
        dt => t.cast(dt),
    }
}

fn cast(input: &str, output: &str, to: DType, name: &str) -> NodeProto {
    NodeProto {
        op_type: "Cast".into(),
        name: name.into(),
        input: vec![input.into()],
        output: vec![output.into()],
        attribute: vec![AttributeProto {
            name: "to".into(),
            r#type: attribute_type::INT,
            i: i64::from(dtype_to_onnx(to)),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// `Cast(from -> to)` as a model, with bf16 brought in and out through f32.
fn model(from: DType, to: DType) -> Vec<u8> {
    let fed = if from == DType::BF16 {
        DType::F32
    } else {
        from
    };
    let shown = if to == DType::BF16 { DType::F32 } else { to };
    let mut graph = GraphProto {
        name: format!("cast {from} -> {to}"),
        input: vec![value_of("x", fed, Some(&SHAPE))],
        output: vec![value_of("y", shown, Some(&SHAPE))],
        ..Default::default()
    };
    let mut x = "x";
    if from == DType::BF16 {
        graph.node.push(cast("x", "x_bf16", DType::BF16, "in"));
        x = "x_bf16";
    }
    if to == DType::BF16 {
        graph.node.push(cast(x, "y_bf16", to, "under_test"));
        graph.node.push(cast("y_bf16", "y", DType::F32, "out"));
    } else {
        graph.node.push(cast(x, "y", to, "under_test"));
    }
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 19,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn every_cast_between_graphrw_dtypes_runs_as_onnxruntime_runs_it() {
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for from in DType::ALL {
        for to in DType::ALL {
            let name = format!("cast {from} -> {to}");
            let bytes = model(from, to);
            let x = input(from, to);
            let g = load_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: load: {e}"));
            assert!(
                !g.op_counts().contains_key("opaque"),
                "{name}: {:?}",
                g.op_counts()
            );
            let (reference, _) = plan(&g, &reference_stack())
                .and_then(|p| p.run(std::slice::from_ref(&x)))
                .unwrap_or_else(|e| panic!("{name}: reference stack: {e}"));
            let mut optimised = g.clone();
            rules::optimize(&mut optimised).unwrap_or_else(|e| panic!("{name}: optimize: {e}"));
            let (fast, _) = plan(&optimised, &default_stack())
                .and_then(|p| p.run(std::slice::from_ref(&x)))
                .unwrap_or_else(|e| panic!("{name}: default stack: {e}"));
            ort_support::same_all(&fast, &reference)
                .unwrap_or_else(|e| panic!("{name}: optimised against the reference: {e}"));
            ours.push(reference);
            cases.push(ort_support::Case {
                name,
                model: bytes,
                inputs: vec![x],
            });
        }
    }
    assert_eq!(cases.len(), 169);
    let Some(python) = ort_support::python_or_skip("casts are not compared to onnxruntime") else {
        return;
    };
    let mut failures = Vec::new();
    for ((c, got), want) in cases
        .iter()
        .zip(&ours)
        .zip(ort_support::run_all(&python, &cases))
    {
        if let Err(e) = want.and_then(|want| ort_support::same_all(got, &want)) {
            failures.push(format!("{}: {e}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 169 casts differ from onnxruntime:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
