//! The narrow integers (u8, i8, i16, u16, u32, u64) in ONNX models: initialisers of
//! each (in `raw_data` and in the typed fields ONNX packs them in) load with their
//! values and survive a save and a load; a forged `raw_data` whose length disagrees
//! with its dims is refused in one line; the ops that move, select, compare and add
//! them run as onnxruntime runs them (`SKIPPED` without onnxruntime, a failure under
//! `CI=true`); and an op graphrw has no narrow kernel for is refused at plan time,
//! naming the node, the op and the dtype.

mod onnx_support;
mod ort_support;

use graphrw::exec::{default_stack, plan};
use graphrw::onnx::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use graphrw::onnx::{dtype_to_onnx, load_bytes, to_model};
use graphrw::{DType, Tensor};
use onnx_support::{int_attr, ints_attr, node, value_of};
use prost::Message;

const NARROW: [DType; 6] = [
    DType::U8,
    DType::I8,
    DType::I16,
    DType::U16,
    DType::U32,
    DType::U64,
];

/// Edge values of every integer type, wrapped into `dt` (as `Cast` from i64 wraps).
fn edges(dt: DType, shape: &[usize]) -> Tensor {
    let pool: [i64; 12] = [
        0,
        1,
        -1,
        127,
        -128,
        255,
        256,
        32767,
        -32768,
        65535,
        i64::MAX,
        i64::MIN,
    ];
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n).map(|i| pool[i % pool.len()]).collect();
    Tensor::from_vec(shape.to_vec(), v)
        .expect("tensor")
        .cast(dt)
}

fn model(graph: GraphProto) -> Vec<u8> {
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

fn raw(name: &str, t: &Tensor) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: dtype_to_onnx(t.dtype()),
        raw_data: t.to_raw_bytes(),
        ..Default::default()
    }
}

/// The same tensor in the typed field ONNX keeps it in: `int32_data` (one value each)
/// for the 8- and 16-bit types, `uint64_data` for u32 and u64.
fn typed(name: &str, t: &Tensor) -> TensorProto {
    let mut p = TensorProto {
        name: name.into(),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: dtype_to_onnx(t.dtype()),
        ..Default::default()
    };
    match t.dtype() {
        DType::U32 => p.uint64_data = t.to_i64_vec().iter().map(|&v| v as u64).collect(),
        DType::U64 => p.uint64_data = t.as_slice::<u64>().expect("u64").to_vec(),
        _ => p.int32_data = t.to_i64_vec().iter().map(|&v| v as i32).collect(),
    }
    p
}

/// A model whose outputs are its initialisers `a` (raw) and `b` (typed), through
/// `Identity`.
fn initialisers_model(a: &Tensor, b: &Tensor) -> Vec<u8> {
    let dt = a.dtype();
    model(GraphProto {
        name: format!("initialisers of {dt}"),
        node: vec![
            node("Identity", &["a"], &["ya"]),
            node("Identity", &["b"], &["yb"]),
        ],
        initializer: vec![raw("a", a), typed("b", b)],
        output: vec![
            value_of("ya", dt, Some(a.shape())),
            value_of("yb", dt, Some(b.shape())),
        ],
        ..Default::default()
    })
}

#[test]
fn narrow_initialisers_load_save_and_load_again_with_their_values() {
    for dt in NARROW {
        let a = edges(dt, &[3, 4]);
        let b = edges(dt, &[2, 5]);
        let g = load_bytes(&initialisers_model(&a, &b)).unwrap_or_else(|e| panic!("{dt}: {e}"));
        let (out, _) = plan(&g, &default_stack())
            .and_then(|p| p.run(&[]))
            .unwrap_or_else(|e| panic!("{dt}: run: {e}"));
        ort_support::same_all(&out, &[a.clone(), b.clone()])
            .unwrap_or_else(|e| panic!("{dt}, loaded: {e}"));
        let saved = to_model(&g).unwrap_or_else(|e| panic!("{dt}: save: {e}"));
        let again = load_bytes(&saved.encode_to_vec()).unwrap_or_else(|e| panic!("{dt}: {e}"));
        let (out, _) = plan(&again, &default_stack())
            .and_then(|p| p.run(&[]))
            .unwrap_or_else(|e| panic!("{dt}: run again: {e}"));
        ort_support::same_all(&out, &[a, b]).unwrap_or_else(|e| panic!("{dt}, saved: {e}"));
        let graph = saved.graph.expect("graph");
        assert!(
            graph.output.iter().all(|o| o
                .r#type
                .as_ref()
                .and_then(|t| t.tensor_type.as_ref())
                .is_some_and(|t| t.elem_type == dtype_to_onnx(dt))),
            "{dt}: the saved outputs lost their element type: {:?}",
            graph.output
        );
    }
}

#[test]
fn a_forged_narrow_initialiser_is_refused_in_one_line() {
    for dt in NARROW {
        let t = edges(dt, &[2, 3]);
        for delta in [-1i64, 1, 8] {
            let mut p = raw("w", &t);
            let len = (p.raw_data.len() as i64 + delta) as usize;
            p.raw_data.resize(len, 0);
            let bytes = model(GraphProto {
                node: vec![node("Identity", &["w"], &["y"])],
                initializer: vec![p],
                output: vec![value_of("y", dt, Some(&[2, 3]))],
                ..Default::default()
            });
            let err = load_bytes(&bytes)
                .err()
                .unwrap_or_else(|| panic!("{dt}: raw_data of {len} bytes was loaded"))
                .to_string();
            assert!(
                err.contains("`w`") || err.contains("w:") || err.contains("'w'"),
                "{dt}: {err}"
            );
            assert!(
                err.contains(&format!("raw_data holds {len} bytes"))
                    && err.contains(&format!("need {}", 6 * dt.size_in_bytes())),
                "{dt}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{dt}: {err}");
        }
        // A typed field with one value too few.
        let mut p = typed("w", &t);
        p.int32_data.pop();
        p.uint64_data.pop();
        let bytes = model(GraphProto {
            node: vec![node("Identity", &["w"], &["y"])],
            initializer: vec![p],
            output: vec![value_of("y", dt, Some(&[2, 3]))],
            ..Default::default()
        });
        let err = load_bytes(&bytes).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("holds 5 elements")),
            "{dt}: {err:?}"
        );
    }
}

/// Every dtype-agnostic op graphrw runs on narrow integers, and the comparisons and
/// arithmetic onnxruntime has kernels for, on one input `x` of `dt`.
fn ops_model(dt: DType) -> Vec<u8> {
    let i64s = |name: &str, v: &[i64]| {
        raw(
            name,
            &Tensor::from_vec(vec![v.len()], v.to_vec()).expect("t"),
        )
    };
    let mut nodes: Vec<NodeProto> = vec![
        {
            let mut n = node("Transpose", &["x"], &["t"]);
            n.attribute.push(ints_attr("perm", &[1, 0]));
            n
        },
        node("Reshape", &["t", "flat"], &["r"]),
        node("Slice", &["r", "starts", "ends"], &["s"]),
        {
            let mut n = node("Gather", &["x", "idx"], &["g"]);
            n.attribute.push(int_attr("axis", 1));
            n
        },
        node("Unsqueeze", &["g", "axes"], &["u"]),
        node("Expand", &["u", "big"], &["e"]),
        {
            let mut n = node("Concat", &["x", "x"], &["c"]);
            n.attribute.push(int_attr("axis", 0));
            n
        },
        node("Add", &["x", "x"], &["add"]),
        node("Sub", &["x", "d"], &["sub"]),
        node("Mul", &["x", "d"], &["mul"]),
        node("Div", &["x", "d"], &["div"]),
        node("Equal", &["x", "d"], &["eq"]),
        node("Less", &["x", "d"], &["lt"]),
        node("Greater", &["x", "d"], &["gt"]),
        node("Abs", &["x"], &["abs"]),
    ];
    let mut outs = vec![
        ("r", dt),
        ("s", dt),
        ("e", dt),
        ("c", dt),
        ("add", dt),
        ("sub", dt),
        ("mul", dt),
        ("div", dt),
        ("eq", DType::Bool),
        ("lt", DType::Bool),
        ("gt", DType::Bool),
        ("abs", dt),
    ];
    // What onnxruntime 1.32 has CPU kernels for beyond the above.
    if matches!(dt, DType::U8 | DType::I8 | DType::U32) {
        nodes.push(node("Where", &["cond", "x", "d"], &["w"]));
        outs.push(("w", dt));
    }
    if !matches!(dt, DType::I16 | DType::U16) {
        nodes.push(node("Max", &["x", "d"], &["max"]));
        nodes.push(node("Min", &["x", "d"], &["min"]));
        outs.push(("max", dt));
        outs.push(("min", dt));
    }
    if matches!(dt, DType::I8 | DType::I16) {
        nodes.push(node("Neg", &["x"], &["neg"]));
        outs.push(("neg", dt));
    }
    let divisor = Tensor::from_vec(vec![2, 6], vec![1i64, 2, 3, 7, 100, 1, 5, 9, 127, 2, 3, 4])
        .expect("t")
        .cast(dt);
    let cond: Vec<bool> = (0..12).map(|i| i % 3 == 0).collect();
    model(GraphProto {
        name: format!("ops on {dt}"),
        node: nodes,
        initializer: vec![
            i64s("flat", &[12]),
            i64s("starts", &[1]),
            i64s("ends", &[9]),
            i64s("idx", &[5, 0, 3]),
            i64s("axes", &[0]),
            i64s("big", &[3, 2, 3]),
            raw("d", &divisor),
            raw("cond", &Tensor::from_vec(vec![2, 6], cond).expect("t")),
        ],
        input: vec![value_of("x", dt, Some(&[2, 6]))],
        output: outs
            .iter()
            .map(|&(name, d)| value_of(name, d, None))
            .collect(),
        ..Default::default()
    })
}

#[test]
fn moving_comparing_and_adding_narrow_integers_runs_as_onnxruntime_runs_it() {
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for dt in NARROW {
        let name = format!("ops on {dt}");
        let bytes = ops_model(dt);
        let x = edges(dt, &[2, 6]);
        let (_, out) = ort_support::load_and_run_both_ways(&name, &bytes, std::slice::from_ref(&x));
        assert!(out.iter().take(4).all(|t| t.dtype() == dt), "{name}");
        ours.push(out);
        cases.push(ort_support::Case {
            name,
            model: bytes,
            inputs: vec![x],
        });
    }
    let Some(python) = ort_support::python_or_skip("narrow ops are not compared to onnxruntime")
    else {
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
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_op_without_a_narrow_kernel_is_refused_at_plan_time_naming_node_op_and_dtype() {
    for dt in [DType::U32, DType::U64, DType::U8] {
        let bytes = model(GraphProto {
            node: vec![node("MatMul", &["x", "x"], &["y"])],
            input: vec![value_of("x", dt, Some(&[3, 3]))],
            output: vec![value_of("y", dt, Some(&[3, 3]))],
            ..Default::default()
        });
        let g = load_bytes(&bytes).unwrap_or_else(|e| panic!("{dt}: load: {e}"));
        let err = plan(&g, &default_stack())
            .err()
            .unwrap_or_else(|| panic!("{dt}: a matmul of {dt} was planned"))
            .to_string();
        // The node as the printer shows it, and the reference executor's one line.
        assert!(err.contains("matmul(x, x)"), "{dt}: {err}");
        assert!(
            err.lines().any(|l| l.contains("cpu-reference")
                && l.contains(&format!("`matmul` has no kernel for {dt}"))),
            "{dt}: {err}"
        );
    }
}
