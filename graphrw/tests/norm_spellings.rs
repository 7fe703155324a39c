//! RMS norm in every spelling fuses into one `fused.rms_norm` (issue #52): rsqrt,
//! `1 / sqrt`, `reciprocal(sqrt)` and `x / sqrt` forms, `pow(x, 2)` and `x * x`, mean
//! and `sum / N`, with and without the weight, with and without the casts to f32 and
//! back that HF Llama writes, and (as ONNX files, `tests/models/rms_norm/`) opset 17
//! and 18 `ReduceMean`. The outputs are unchanged.

use std::path::PathBuf;

use graphrw::exec::run_reference;
use graphrw::{rules, Builder, DType, Graph, GraphError, Tensor, TensorMeta, Value, Var};
use graphrw_kernels::testing::compare;

const H: usize = 16;
const EPS: f64 = 1e-6;

/// How the inverse root is written.
#[derive(Clone, Copy, Debug)]
enum Inverse {
    Rsqrt,
    OneOverSqrt,
    ReciprocalSqrt,
    DivBySqrt,
}

/// One spelling of `rms_norm(x) [* w]`.
#[derive(Clone, Copy, Debug)]
struct Spelling {
    inverse: Inverse,
    pow: bool,
    sum: bool,
    weight: bool,
    casts: bool,
}

fn norm<'b>(g: &'b Builder, x: Var<'b>, s: Spelling) -> Result<Var<'b>, GraphError> {
    let sq = if s.pow { x.pow(2.0)? } else { x.mul(x)? };
    let ms = if s.sum {
        sq.sum_with(&[-1], true)?.div(H as f64)?
    } else {
        sq.mean_with(&[-1], true)?
    };
    let ms = ms.add(EPS)?;
    Ok(match s.inverse {
        Inverse::Rsqrt => x.mul(ms.rsqrt()?)?,
        Inverse::OneOverSqrt => x.mul(g.var(g.div(1.0, ms.sqrt()?)?))?,
        Inverse::ReciprocalSqrt => ms.sqrt()?.reciprocal()?.mul(x)?,
        Inverse::DivBySqrt => x.div(ms.sqrt()?)?,
    })
}

/// `y = rms_norm(x) [* w]` in spelling `s`, `x: [2, 3, H]` (f16 with casts).
fn build(s: Spelling) -> Result<Graph, GraphError> {
    let g = Builder::new();
    let dt = if s.casts { DType::F16 } else { DType::F32 };
    let x = g.input("x", TensorMeta::new(dt, [2usize, 3, H]));
    let mut y = if s.casts {
        norm(&g, x.cast(DType::F32)?, s)?.cast(DType::F16)?
    } else {
        norm(&g, x, s)?
    };
    if s.weight {
        let w: Vec<f32> = (0..H).map(|i| 0.5 + i as f32 / H as f32).collect();
        let w = g.constant(Tensor::from_vec(vec![H], w).unwrap().cast(dt));
        y = w.mul(y)?;
    }
    g.output(&[y])?;
    Ok(g.finish())
}

fn input(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 97) as f32 - 48.0) / 17.0)
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap().cast(dtype)
}

/// Optimises `graph`; checks one `fused.rms_norm` and unchanged outputs on `inputs`.
fn check_fuses(mut graph: Graph, inputs: &[Tensor], what: &str) {
    let want = run_reference(&graph, inputs).unwrap();
    let done = rules::optimize(&mut graph).unwrap();
    assert_eq!(
        done.fused_nodes.get("fused.rms_norm"),
        Some(&1),
        "{what}: {done}\n{graph}"
    );
    assert_eq!(done.fused_nodes.len(), 1, "{what}: {done}");
    let got = run_reference(&graph, inputs).unwrap();
    let tol = if inputs[0].dtype() == DType::F16 {
        1e-2
    } else {
        1e-5
    };
    compare::assert_close_tensors(&want, &got, compare::Tol::new(tol, 0.0), what);
}

#[test]
fn every_builder_spelling_fuses_into_one_rms_norm() {
    let inverses = [
        Inverse::Rsqrt,
        Inverse::OneOverSqrt,
        Inverse::ReciprocalSqrt,
        Inverse::DivBySqrt,
    ];
    let mut n = 0;
    for inverse in inverses {
        for bits in 0..16u32 {
            let s = Spelling {
                inverse,
                pow: bits & 1 != 0,
                sum: bits & 2 != 0,
                weight: bits & 4 != 0,
                casts: bits & 8 != 0,
            };
            let graph = build(s).unwrap();
            let dt = if s.casts { DType::F16 } else { DType::F32 };
            check_fuses(graph, &[input(dt, &[2, 3, H])], &format!("{s:?}"));
            n += 1;
        }
    }
    assert_eq!(n, 64);
}

#[test]
fn a_positive_reduce_dim_and_a_sum_times_inverse_size_fuse() {
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(DType::F32, [2usize, H]));
    let ms = x.mul(x).unwrap().sum_with(&[1], true).unwrap();
    let ms = ms.mul(1.0 / H as f64).unwrap().add(EPS).unwrap();
    let y = x.mul(ms.rsqrt().unwrap()).unwrap();
    g.output(&[y]).unwrap();
    check_fuses(
        g.finish(),
        &[input(DType::F32, &[2, H])],
        "sum(x*x, 1) * (1/H)",
    );
}

#[test]
fn a_sum_over_another_size_is_not_a_mean() {
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(DType::F32, [2usize, H]));
    let ms = x.mul(x).unwrap().sum_with(&[-1], true).unwrap();
    let ms = ms.div(H as f64 + 1.0).unwrap().add(EPS).unwrap();
    let y = x.mul(ms.rsqrt().unwrap()).unwrap();
    g.output(&[y]).unwrap();
    let mut graph = g.finish();
    let done = rules::optimize(&mut graph).unwrap();
    assert!(done.fused_nodes.is_empty(), "{done}\n{graph}");
}

fn model(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/models/rms_norm")
        .join(format!("{name}.onnx"))
}

/// The ONNX spellings (`tests/models/rms_norm/make.py`): HF Llama's TorchScript export
/// at opsets 17 and 18, and the other forms; each fuses, at two shapes, unchanged.
#[test]
fn every_onnx_spelling_fuses_into_one_rms_norm() {
    for name in [
        "llama_torchscript_17",
        "llama_torchscript_18",
        "div_sqrt_17",
        "reciprocal_sum_18",
        "no_weight_18",
        "no_weight_cast_17",
    ] {
        let graph = graphrw::onnx::load(model(name)).unwrap();
        let dt = graph.meta(Value::new(graph.inputs()[0], 0)).unwrap().dtype;
        for shape in [[2usize, 3, H], [1, 7, H]] {
            check_fuses(
                graph.clone(),
                &[input(dt, &shape)],
                &format!("{name} {shape:?}"),
            );
        }
    }
}
