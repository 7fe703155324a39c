//! ONNX export of fused ops: ops with a standard ONNX equivalent are written as it,
//! other ops with a decomposition as model-local functions (domain `graphrw`) whose
//! body is the decomposition. The model loads back (functions inlined) with the same
//! outputs, and, where onnxruntime is installed, onnxruntime runs it with them too.
//!
//! The fused ops are declared here by hand, in the form the generated kernels declare
//! them (`like` a decomposition, tensor operands, scalar parameters as float attributes).

use std::path::Path;
use std::process::Command;

use graphrw::exec::tile::ELEMENTWISE_GROUP;
use graphrw::exec::{plan, reference_stack, run_reference, tile_executor, ReferenceCpu};
use graphrw::onnx::{from_model, load_bytes, to_bytes, to_model, FUNCTION_DOMAIN};
use graphrw::ops::{
    Arity, AttrDefault, AttrKind, AttrSpec, Attrs, Infer, OpClass, OpDef, OperandSpec, OutputCount,
};
use graphrw::{verify, Builder, DType, Graph, GraphError, Tensor, TensorMeta, Value};
use graphrw_kernels::testing::compare;

const fn operand(name: &'static str) -> OperandSpec {
    OperandSpec {
        name,
        arity: Arity::Required,
    }
}

const EPS: &[AttrSpec] = &[AttrSpec {
    name: "eps",
    kind: AttrKind::Float,
    default: AttrDefault::Float(1e-5),
}];

const fn fused(
    name: &'static str,
    operands: &'static [OperandSpec],
    attrs: &'static [AttrSpec],
    decompose: graphrw::ops::DecomposeFn,
) -> OpDef {
    OpDef {
        name,
        doc: "A fused op declared like its decomposition (test).",
        operands,
        attrs,
        outputs: OutputCount::Fixed(1),
        commutative: false,
        class: OpClass::Elementwise,
        infer: Infer::Like,
        decompose: Some(decompose),
        builtin: None,
    }
}

fn attr_err(e: graphrw::ops::InferError) -> GraphError {
    GraphError::Signature {
        op: "test",
        node: None,
        message: e.0,
    }
}

fn layer_norm_like(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let eps = a.float("eps").map_err(attr_err)?;
    let mean = b.mean_with(x[0], &[-1], true)?;
    let c = b.sub(x[0], mean)?;
    let var = b.mean_with(b.mul(c, c)?, &[-1], true)?;
    let inv = b.rsqrt(b.add(var, eps)?)?;
    Ok(vec![b.add(b.mul(b.mul(c, inv)?, x[1])?, x[2])?])
}

fn rms_norm_like(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let eps = a.float("eps").map_err(attr_err)?;
    let ms = b.mean_with(b.mul(x[0], x[0])?, &[-1], true)?;
    let inv = b.rsqrt(b.add(ms, eps)?)?;
    Ok(vec![b.mul(b.mul(x[0], inv)?, x[1])?])
}

fn gelu_tanh_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    Ok(vec![b.gelu_with(x[0], "tanh")?])
}

fn swiglu_like(b: &Builder, x: &[Value], _: &Attrs) -> Result<Vec<Value>, GraphError> {
    Ok(vec![b.mul(b.silu(x[0])?, x[1])?])
}

fn scaled_swiglu_like(b: &Builder, x: &[Value], a: &Attrs) -> Result<Vec<Value>, GraphError> {
    let s = a.float("scale").map_err(attr_err)?;
    let y = b.apply(&SWIGLU, &[x[0], x[1]], &[])?[0];
    Ok(vec![b.mul(y, s)?])
}

static LAYER_NORM: OpDef = fused(
    "fused.layer_norm",
    &[operand("input"), operand("weight"), operand("bias")],
    EPS,
    layer_norm_like,
);
static RMS_NORM: OpDef = fused(
    "fused.rms_norm",
    &[operand("input"), operand("weight")],
    EPS,
    rms_norm_like,
);
static GELU_TANH: OpDef = fused("fused.gelu_tanh", &[operand("input")], &[], gelu_tanh_like);
static SWIGLU: OpDef = fused(
    "fused.swiglu",
    &[operand("gate"), operand("up")],
    &[],
    swiglu_like,
);
/// A user op whose decomposition calls another fused op: a function calling a function.
static SCALED_SWIGLU: OpDef = fused(
    "test.scaled_swiglu",
    &[operand("gate"), operand("up")],
    &[AttrSpec {
        name: "scale",
        kind: AttrKind::Float,
        default: AttrDefault::Required,
    }],
    scaled_swiglu_like,
);

fn data(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 250.0
                - 2.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), v).unwrap()
}

/// x -> layer_norm -> gelu_tanh -> swiglu(., x) -> rms_norm, twice scaled_swiglu, and an
/// elementwise group built by the tile executor's planner.
fn model() -> (Graph, Vec<Tensor>) {
    let b = Builder::new();
    let (s, d) = (4usize, 8usize);
    let x = b
        .input("x", TensorMeta::new(DType::F32, [2usize, s, d]))
        .value();
    let w = b.constant(data(&[d], 1)).value();
    let bias = b.constant(data(&[d], 2)).value();
    let f = |op: &'static OpDef, ins: &[Value], attrs: &[(&str, graphrw::ops::AttrValue)]| {
        b.apply(op, ins, attrs).unwrap()[0]
    };
    let eps = |v: f64| ("eps", graphrw::ops::AttrValue::Float(v));
    let ln = f(&LAYER_NORM, &[x, w, bias], &[eps(1e-5)]);
    let g = f(&GELU_TANH, &[ln], &[]);
    let sw = f(&SWIGLU, &[g, x], &[]);
    let rms = f(&RMS_NORM, &[sw, w], &[eps(1e-6)]);
    let scale = |v: f64| ("scale", graphrw::ops::AttrValue::Float(v));
    let a1 = f(&SCALED_SWIGLU, &[rms, x], &[scale(0.5)]);
    let a2 = f(&SCALED_SWIGLU, &[a1, x], &[scale(0.5)]);
    let a3 = f(&SCALED_SWIGLU, &[a2, rms], &[scale(2.0)]);
    // An elementwise chain the tile executor groups into one `fused.elementwise_group`.
    let t = b
        .var(a3)
        .mul(0.25)
        .and_then(|v| v.tanh())
        .and_then(|v| v.add(b.var(x)))
        .unwrap();
    b.output(&[t, b.var(ln)]).unwrap();
    let g = b.finish();
    verify(&g).unwrap();
    (g, vec![data(&[2, s, d], 3)])
}

/// The model with its elementwise chain grouped by the tile executor's planner.
fn grouped_model() -> (Graph, Vec<Tensor>) {
    let (g, inputs) = model();
    let stack: Vec<std::sync::Arc<dyn graphrw::exec::Executor>> =
        vec![tile_executor(), std::sync::Arc::new(ReferenceCpu)];
    // Plan only the chain: the fused ops here have no kernel, so the planner decomposes
    // them too; keep its graph, which has both the group and the decomposed ops.
    let p = plan(&g, &stack).unwrap();
    let planned = p.graph().clone();
    assert!(planned.op_counts().contains_key(ELEMENTWISE_GROUP.name));
    (planned, inputs)
}

/// `a` against the reference `b`, within `tol` absolute (NaN and infinities seen: see
/// [`graphrw_kernels::testing::compare`]).
fn assert_close(a: &[Tensor], b: &[Tensor], tol: f64, what: &str) {
    compare::assert_close_tensors(a, b, compare::Tol::new(tol, 0.0), what);
}

#[test]
fn standard_ops_are_written_as_standard_onnx_and_others_as_functions() {
    let (g, _) = model();
    let m = to_model(&g).unwrap();
    let graph = m.graph.as_ref().unwrap();
    let types: Vec<&str> = graph.node.iter().map(|n| n.op_type.as_str()).collect();
    for std_op in ["LayerNormalization", "RMSNormalization", "Gelu"] {
        assert!(types.contains(&std_op), "{std_op} missing from {types:?}");
    }
    // swiglu and the two distinct scaled_swiglu bodies (scale 0.5 twice shares one).
    let names: Vec<&str> = m.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        ["fused_swiglu", "test_scaled_swiglu", "test_scaled_swiglu_2"],
        "{names:?}"
    );
    assert!(m.functions.iter().all(|f| f.domain == FUNCTION_DOMAIN));
    let calls = graph
        .node
        .iter()
        .filter(|n| n.domain == FUNCTION_DOMAIN)
        .count();
    assert_eq!(calls, 4);
    assert!(m
        .opset_import
        .iter()
        .any(|o| o.domain == FUNCTION_DOMAIN && o.version == 1));
    let rms_opset = m.opset_import.iter().find(|o| o.domain.is_empty()).unwrap();
    assert_eq!(rms_opset.version, 23);
    // The nested function calls swiglu.
    let nested = &m.functions[1];
    assert!(nested
        .node
        .iter()
        .any(|n| n.domain == FUNCTION_DOMAIN && n.op_type == "fused_swiglu"));
}

#[test]
fn saved_fused_models_load_back_with_the_same_outputs() {
    for (what, (g, inputs)) in [("fused ops", model()), ("tile group", grouped_model())] {
        let want = run_reference(&g, &inputs).unwrap();
        let bytes = to_bytes(&g).unwrap();
        let back = load_bytes(&bytes).unwrap();
        verify(&back).unwrap();
        // Functions are inlined: no call is left, standard ops came back as built-ins.
        if what == "fused ops" {
            assert!(
                back.op_counts().contains_key("layer_norm"),
                "{what}: {back}"
            );
        }
        assert!(
            !back.op_counts().keys().any(|k| k.starts_with("fused.")),
            "{back}"
        );
        let got = plan(&back, &reference_stack())
            .unwrap()
            .run(&inputs)
            .unwrap()
            .0;
        assert_close(&want, &got, 1e-4, what);
        // And the loaded model saves again.
        let again = from_model(&to_model(&back).unwrap(), None).unwrap();
        assert_close(&want, &run_reference(&again, &inputs).unwrap(), 1e-4, what);
    }
}

#[test]
fn function_calls_that_recurse_or_do_not_fit_are_errors() {
    let (g, _) = model();
    let mut m = to_model(&g).unwrap();
    // Make swiglu call itself.
    let f = &mut m.functions[0];
    let mut call = f.node[0].clone();
    call.op_type = "fused_swiglu".into();
    call.domain = FUNCTION_DOMAIN.into();
    call.input = vec![f.input[0].clone(), f.input[1].clone()];
    f.node.insert(0, call);
    let err = from_model(&m, None).unwrap_err().to_string();
    assert!(err.contains("nest deeper"), "{err}");

    let mut m = to_model(&g).unwrap();
    let graph = m.graph.as_mut().unwrap();
    let call = graph
        .node
        .iter_mut()
        .find(|n| n.domain == FUNCTION_DOMAIN)
        .unwrap();
    call.input.push("x".into());
    call.input.push("x".into());
    let err = from_model(&m, None).unwrap_err().to_string();
    assert!(err.contains("calls function"), "{err}");
}

/// A Python with onnxruntime and numpy: `GRAPHRW_PYTHON` (CI sets it), else the
/// workspace's `.venv/bin/python` (what `.ci/run` makes), else `python3`.
fn python() -> Result<String, String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("GRAPHRW_PYTHON") {
        candidates.push(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.exists() {
        candidates.push(venv.display().to_string());
    }
    candidates.push("python3".into());
    for p in &candidates {
        let probe = Command::new(p)
            .args(["-c", "import onnxruntime, numpy"])
            .output();
        if probe.is_ok_and(|o| o.status.success()) {
            return Ok(p.clone());
        }
    }
    Err(format!(
        "no Python with onnxruntime and numpy among {candidates:?} (set GRAPHRW_PYTHON)"
    ))
}

/// Runs the saved model in onnxruntime on the same inputs. Without onnxruntime it says
/// SKIPPED, except under `CI=true`, where it fails.
#[test]
fn onnxruntime_runs_the_saved_fused_model() {
    let python = match python() {
        Ok(p) => p,
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true: onnxruntime is required: {why}")
        }
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("graphrw_onnx_functions_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (what, (g, inputs)) in [("fused", model()), ("grouped", grouped_model())] {
        let want = run_reference(&g, &inputs).unwrap();
        let path = dir.join(format!("{what}.onnx"));
        std::fs::write(&path, to_bytes(&g).unwrap()).unwrap();
        let x = &inputs[0];
        let raw: Vec<u8> = x
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        std::fs::write(dir.join("x.bin"), raw).unwrap();
        let script = format!(
            "import numpy as np, onnxruntime as ort\n\
             d = {dir:?}\n\
             s = ort.InferenceSession(d + '/{what}.onnx', providers=['CPUExecutionProvider'])\n\
             x = np.fromfile(d + '/x.bin', dtype=np.float32).reshape({shape:?})\n\
             outs = s.run(None, {{'x': x}})\n\
             for i, o in enumerate(outs): np.asarray(o, dtype=np.float32).tofile(d + '/out%d.bin' % i)\n",
            dir = dir.to_str().unwrap(),
            shape = x.shape(),
        );
        let run = Command::new(&python)
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{what}: onnxruntime failed:\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let got: Vec<Tensor> = want
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let bytes = std::fs::read(dir.join(format!("out{i}.bin"))).unwrap();
                let v: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Tensor::from_vec(w.shape().to_vec(), v).unwrap()
            })
            .collect();
        assert_close(&want, &got, 1e-4, what);
    }
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
