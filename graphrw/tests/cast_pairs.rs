//! ONNX `Cast` between every pair of graphrw's dtypes (f32, f64, f16, bf16, i64, i32,
//! bool: 49 pairs, each dtype to itself included) loads and runs, on the reference and
//! the default stack, as onnxruntime runs the same model (floats within `1e-4` plus
//! `1e-3` of the largest magnitude, integers and bools exactly; `SKIPPED` without
//! onnxruntime, a failure under `CI=true`). The values cover what every pair defines:
//! negative and positive fractions (truncated toward zero into integers), zeros (false),
//! and integers exact in every float type. numpy has no bfloat16, so a bf16 value goes
//! in as f32 through a `Cast` to bf16, and comes out through a `Cast` to f32.
//!
//! The narrow integers (int8, int16, uint8, uint16, uint32, uint64) are not graphrw
//! dtypes: a model that casts *to* one is refused (or passes through unread); one that
//! only casts *from* one is widened on the way in by the Python package
//! (`graphrw-python/src/narrow.rs`).

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

const SHAPE: [usize; 2] = [3, 4];

/// Values every cast from `dt` defines, as `dt` (bf16 as f32: it is cast on the way in).
fn input(dt: DType) -> Tensor {
    let floats: [f32; 12] = [
        -3.75, -2.5, -1.0, -0.5, 0.0, 0.25, 0.75, 1.0, 2.5, 7.0, 100.0, -100.0,
    ];
    let n = SHAPE.iter().product();
    let t = Tensor::from_vec(SHAPE.to_vec(), floats[..n].to_vec()).expect("tensor");
    match dt {
        DType::BF16 => t,
        DType::Bool => {
            let v: Vec<bool> = floats[..n].iter().map(|&x| x > 0.0).collect();
            Tensor::from_vec(SHAPE.to_vec(), v).expect("tensor")
        }
        DType::I64 | DType::I32 => {
            let v: Vec<f32> = floats[..n].iter().map(|x| x.trunc()).collect();
            let t = Tensor::from_vec(SHAPE.to_vec(), v).expect("tensor");
            t.cast(dt)
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
            let x = input(from);
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
    assert_eq!(cases.len(), 49);
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
        "{} of 49 casts differ from onnxruntime:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
