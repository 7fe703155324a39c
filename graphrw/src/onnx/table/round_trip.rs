//! Every table row, both ways, at each opset boundary it has: an ONNX node built from
//! the row (non-default values for the arguments, as attributes or constant inputs
//! where the row puts them at that opset) loads as the vocabulary op with the expected
//! attributes, and saving the graph writes the row's ONNX op with the same values
//! again. Save-only rows start from a graph. With Python's `onnx` package
//! (`$GRAPHRW_PYTHON`), every model built and written passes `onnx.checker` with
//! `full_check` (schemas of the opset, attribute names and kinds, shape inference).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use prost::Message;

use crate::graph::{normalize_attrs, Graph, Value};
use crate::meta::{DType, Dim, TensorMeta};
use crate::onnx::proto::{
    attribute_type, AttributeProto, Dimension, DimensionValue, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};
use crate::onnx::table::{saving, Dir, HeldValues, OnnxKind, OpMap, Place, Shape, OPS};
use crate::ops::{AttrValue, Op};

/// An ONNX argument value.
#[derive(Clone, Debug, PartialEq)]
enum V {
    I(i64),
    Is(Vec<i64>),
    F(f32),
    S(&'static str),
}

/// A non-default value for an argument: as ONNX writes it and as graphrw reads it.
fn sample(op: &str, arg: &str) -> Option<(V, AttrValue)> {
    use AttrValue as A;
    Some(match (op, arg) {
        ("Softmax" | "LogSoftmax" | "Gather" | "GatherElements" | "Concat", "axis") => {
            (V::I(1), A::Int(1))
        }
        ("GatherND", "batch_dims") => (V::I(1), A::Int(1)),
        ("Cast", "to") => (V::I(7), A::DType(DType::I64)),
        ("LayerNormalization" | "RMSNormalization", "axis") => (V::I(-2), A::Int(-2)),
        (_, "epsilon") => (V::F(1e-3), A::Float(f64::from(1e-3f32))),
        ("Trilu", "k") => (V::I(1), A::Int(1)),
        ("CumSum", "axis") => (V::I(2), A::Int(2)),
        ("Squeeze", "axes") => (V::Is(vec![0, 3]), A::Ints(vec![0, 3])),
        (_, "axes") => (V::Is(vec![1, -1]), A::Ints(vec![1, -1])),
        ("Transpose", "perm") => (V::Is(vec![0, 2, 1, 3]), A::Ints(vec![0, 2, 1, 3])),
        (_, "keepdims") => (V::I(0), A::Bool(false)),
        ("Gelu", "approximate") => (V::S("tanh"), A::Str("tanh".into())),
        ("Conv", "strides") => (V::Is(vec![2, 1]), A::Ints(vec![2, 1])),
        ("Conv", "pads") => (V::Is(vec![1, 2, 1, 2]), A::Ints(vec![1, 2])),
        ("Conv", "dilations") => (V::Is(vec![2, 1]), A::Ints(vec![2, 1])),
        ("Conv", "group") => (V::I(1), A::Int(1)),
        _ => return None,
    })
}

/// The operands of a row's node: (ONNX element type, shape) each.
fn operands(r: &OpMap) -> Vec<(i32, Vec<i64>)> {
    let x = || (1, vec![2, 3, 4, 4]);
    let b = || (9, vec![2, 3, 4, 4]);
    match r.onnx {
        "And" | "Or" => vec![b(), b()],
        // Equal-1 compares bools and ints only.
        "Equal" => vec![(7, vec![2, 3, 4, 4]); 2],
        "Squeeze" => vec![(1, vec![1, 3, 4, 1])],
        "Not" => vec![b()],
        "Where" => vec![b(), x(), x()],
        "Gather" => vec![x(), (7, vec![2])],
        "GatherElements" => vec![x(), (7, vec![2, 3, 4, 4])],
        "GatherND" => vec![x(), (7, vec![2, 3, 1])],
        "LayerNormalization" => vec![x(), (1, vec![4, 4]), (1, vec![4, 4])],
        "RMSNormalization" => vec![x(), (1, vec![4, 4])],
        "Conv" => vec![(1, vec![2, 3, 8, 8]), (1, vec![4, 3, 3, 3]), (1, vec![4])],
        _ if r.fold => vec![x(), x(), x()],
        _ if r.operands.1 == usize::MAX => vec![x(), x()],
        _ => vec![x(); r.operands.1],
    }
}

fn value_info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| Dimension {
            value: Some(DimensionValue::DimValue(d)),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type,
                shape: Some(TensorShapeProto { dim }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

fn attribute(name: &str, v: &V) -> AttributeProto {
    let mut a = AttributeProto {
        name: name.into(),
        ..Default::default()
    };
    match v {
        V::I(i) => (a.r#type, a.i) = (attribute_type::INT, *i),
        V::Is(is) => (a.r#type, a.ints) = (attribute_type::INTS, is.clone()),
        V::F(f) => (a.r#type, a.f) = (attribute_type::FLOAT, *f),
        V::S(s) => (a.r#type, a.s) = (attribute_type::STRING, s.as_bytes().to_vec()),
    }
    a
}

fn int_tensor(name: &str, v: &V) -> TensorProto {
    let (dims, data) = match v {
        V::I(i) => (vec![], vec![*i]),
        V::Is(is) => (vec![is.len() as i64], is.clone()),
        other => panic!("{name}: {other:?} is no int input"),
    };
    TensorProto {
        name: name.into(),
        dims,
        data_type: 7,
        int64_data: data,
        ..Default::default()
    }
}

fn held_attributes(r: &OpMap) -> Vec<AttributeProto> {
    r.held
        .iter()
        .filter_map(|h| match h.values {
            HeldValues::Int { accept, .. } => accept.first().map(|&v| attribute(h.onnx, &V::I(v))),
            HeldValues::Str { accept, .. } => accept.first().map(|&v| attribute(h.onnx, &V::S(v))),
        })
        .collect()
}

/// A one-node model of the row at `opset`, with the sampled arguments.
fn model_of(r: &OpMap, opset: i64) -> ModelProto {
    let ins = operands(r);
    let mut inputs: Vec<String> = (0..ins.len()).map(|i| format!("x{i}")).collect();
    let mut attrs = held_attributes(r);
    let mut inits = Vec::new();
    for a in r.args {
        let Some((v, _)) = sample(r.onnx, a.onnx) else {
            continue;
        };
        match a.place.input_at(opset) {
            None => attrs.push(attribute(a.onnx, &v)),
            Some(i) => {
                inputs.resize(inputs.len().max(i + 1), String::new());
                inputs[i] = a.onnx.to_string();
                inits.push(int_tensor(a.onnx, &v));
            }
        }
    }
    let graph = GraphProto {
        node: vec![NodeProto {
            op_type: r.onnx.into(),
            domain: r.domain.into(),
            name: "n".into(),
            input: inputs,
            output: vec!["y".into()],
            attribute: attrs,
            ..Default::default()
        }],
        name: "g".into(),
        initializer: inits,
        input: ins
            .iter()
            .enumerate()
            .map(|(i, (t, d))| value_info(&format!("x{i}"), *t, d))
            .collect(),
        output: vec![ValueInfoProto {
            name: "y".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// The opsets a row is tried at: its first (from the op's first schema), its last,
/// and both sides of each attribute-to-input move.
fn boundaries(r: &OpMap) -> BTreeSet<i64> {
    let born = crate::onnx::schemas::SCHEMA_HISTORY
        .iter()
        .find(|(name, ..)| *name == r.onnx)
        .map_or(1, |&(_, since, ..)| since);
    let (lo, hi) = (r.opsets.0.max(born), r.opsets.1);
    let mut at: BTreeSet<i64> = [lo, hi].into();
    for a in r.args {
        if let Place::Moved { at: m, .. } = a.place {
            at.extend([m - 1, m].into_iter().filter(|o| (lo..=hi).contains(o)));
        }
    }
    at
}

/// The saved model's node for the row, checked against the samples of the arguments
/// the graph got from row `from`; `Err` says how it differs.
fn check_saved(r: &OpMap, from: &OpMap, saved: &ModelProto) -> Result<(), String> {
    let g = saved.graph.as_ref().ok_or("no graph")?;
    let opset = saved
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty())
        .map_or(0, |o| o.version);
    if opset < r.write_opset {
        return Err(format!("written at opset {opset} < {}", r.write_opset));
    }
    let n = g
        .node
        .iter()
        .find(|n| n.op_type == r.onnx && n.domain == r.domain)
        .ok_or_else(|| format!("no `{}` node written: {:?}", r.onnx, g.node))?;
    for a in r.args {
        let Some((want, ours)) = sample(r.onnx, a.onnx) else {
            continue;
        };
        // Sorted axes are written as graphrw holds them (in range, sorted).
        let want = match (a.shape, ours) {
            (Shape::SortedAxes, AttrValue::Ints(v)) => V::Is(v),
            _ => want,
        };
        if !from.args.iter().any(|b| b.ours == a.ours) {
            continue;
        }
        let got = match a.place.input_at(opset) {
            None => {
                let at = n
                    .attribute
                    .iter()
                    .find(|x| x.name == a.onnx)
                    .ok_or_else(|| format!("attribute `{}` not written", a.onnx))?;
                match a.kind {
                    OnnxKind::Int => V::I(at.i),
                    OnnxKind::Ints => V::Is(at.ints.clone()),
                    OnnxKind::Float => V::F(at.f),
                    OnnxKind::Str => V::S(match at.s.as_slice() {
                        b"tanh" => "tanh",
                        _ => "?",
                    }),
                }
            }
            Some(i) => {
                let name = n.input.get(i).ok_or_else(|| format!("no input {i}"))?;
                let t = g
                    .initializer
                    .iter()
                    .find(|t| &t.name == name)
                    .ok_or_else(|| format!("input {i} `{name}` is no initialiser"))?;
                let t = crate::onnx::tensor_pb::tensor_from_proto(t, name, None)
                    .map_err(|e| e.to_string())?;
                match a.kind {
                    OnnxKind::Int if t.shape().is_empty() => V::I(t.to_i64_vec()[0]),
                    _ => V::Is(t.to_i64_vec()),
                }
            }
        };
        if got != want {
            return Err(format!("`{}` written as {got:?}, want {want:?}", a.onnx));
        }
    }
    for h in r.held {
        let written = n.attribute.iter().find(|x| x.name == h.onnx);
        let ok = match h.values {
            HeldValues::Int { default, accept } => match (written, accept.first()) {
                (Some(w), Some(&v)) => w.i == v && v != default,
                (None, Some(&v)) => v == default,
                _ => false,
            },
            HeldValues::Str { default, accept } => match (written, accept.first()) {
                (Some(w), Some(&v)) => w.s == v.as_bytes() && v != default,
                (None, Some(&v)) => v == default,
                _ => false,
            },
        };
        if !ok {
            return Err(format!("held `{}` written as {written:?}", h.onnx));
        }
    }
    Ok(())
}

/// A graph of one node of a save-only row, with the sampled attributes.
fn graph_of(r: &OpMap) -> Graph {
    let def = r.op;
    let mut g = Graph::new();
    let operands: Vec<Value> = operands(r)
        .iter()
        .enumerate()
        .map(|(i, (t, d))| {
            let dtype = crate::onnx::tensor_pb::dtype_from_onnx(*t).unwrap_or(DType::F32);
            let dims: Vec<Dim> = d.iter().map(|&x| Dim::Known(x as u64)).collect();
            g.add_input(format!("x{i}"), TensorMeta::new(dtype, dims))
        })
        .collect();
    let given: Vec<(&str, AttrValue)> = r
        .args
        .iter()
        .filter_map(|a| sample(r.onnx, a.onnx).map(|(_, v)| (a.ours, v)))
        .collect();
    let attrs = normalize_attrs(def, &given).unwrap_or_else(|e| panic!("{}: {e}", r.op.name));
    let id = g
        .add_node(def, operands, attrs, Some("n".into()))
        .unwrap_or_else(|e| panic!("{}: {e}", r.op.name));
    g.set_outputs(vec![Value::new(id, 0)])
        .unwrap_or_else(|e| panic!("{}: {e}", r.op.name));
    g
}

/// Loads the row's model at `opset` and checks the vocabulary node it makes.
fn check_loaded(r: &OpMap, opset: i64, model: &ModelProto) -> Result<Graph, String> {
    let g = crate::onnx::from_model(model, None).map_err(|e| format!("load: {e}"))?;
    let made: Vec<_> = g
        .node_ids()
        .filter_map(|id| g.node(id))
        .filter(|n| !matches!(n.op_name(), "input" | "constant"))
        .collect();
    let want = if r.fold { 2 } else { 1 };
    if made.len() != want || made.iter().any(|n| n.op().id() != r.op.id()) {
        let ops: Vec<&str> = made.iter().map(|n| n.op_name()).collect();
        return Err(format!(
            "opset {opset}: loads as {ops:?}, want {want} `{}`",
            r.op.name
        ));
    }
    for a in r.args {
        let Some((_, want)) = sample(r.onnx, a.onnx) else {
            continue;
        };
        let got = made[0].attrs().get(a.ours).cloned();
        if got.as_ref() != Some(&want) {
            return Err(format!(
                "opset {opset}: `{}` loads as {got:?}, want {want:?}",
                a.ours
            ));
        }
    }
    Ok(g)
}

/// Every loading row's model, at each of its opset boundaries, loads by the fast
/// route (the borrowing decoder) exactly as by `from_model`.
#[test]
fn every_row_loads_the_same_by_both_routes() {
    let mut cases = 0;
    for r in OPS.iter().filter(|r| r.dir != Dir::Save) {
        for opset in boundaries(r) {
            let model = model_of(r, opset);
            let bytes = model.encode_to_vec();
            let fast = crate::onnx::load::load_fast(&bytes, None, None)
                .unwrap_or_else(|| panic!("{} at {opset}: the fast route refused it", r.onnx));
            let plain = crate::onnx::from_model(&model, None)
                .unwrap_or_else(|e| panic!("{} at {opset}: {e}", r.onnx));
            assert_eq!(fast.to_string(), plain.to_string(), "{} at {opset}", r.onnx);
            cases += 1;
        }
    }
    assert!(cases > 50, "{cases} cases");
}

#[test]
fn every_row_round_trips_at_its_opset_boundaries() {
    let scratch = tempfile::Builder::new()
        .prefix("graphrw_table_")
        .tempdir()
        .expect("temp dir");
    let dir = scratch.path();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut failures = Vec::new();
    let mut cases = 0;
    for (k, r) in OPS.iter().enumerate() {
        let mut write = |tag: String, m: &ModelProto| {
            let p = dir.join(format!("{k:02}_{}_{tag}.onnx", r.onnx));
            std::fs::write(&p, m.encode_to_vec()).expect("write model");
            files.push(p);
        };
        if r.dir == Dir::Save {
            cases += 1;
            let g = graph_of(r);
            let saved = crate::onnx::to_model(&g).expect("save");
            // The writers' fast path (nodes encoded from the graph) writes this model.
            if crate::onnx::to_bytes(&g).expect("to_bytes") != saved.encode_to_vec() {
                failures.push(format!("{} ({}): to_bytes differs", r.onnx, r.op.name));
            }
            if let Err(e) = check_saved(r, r, &saved) {
                failures.push(format!("{} ({}): save: {e}", r.onnx, r.op.name));
            }
            write("out".into(), &saved);
            continue;
        }
        for opset in boundaries(r) {
            cases += 1;
            let mut model = model_of(r, opset);
            let g = match check_loaded(r, opset, &model) {
                Ok(g) => g,
                Err(e) => {
                    failures.push(format!("{} ({}): {e}", r.onnx, r.op.name));
                    continue;
                }
            };
            // The checker wants the output's type: what graphrw inferred.
            if let (Some(gp), Some(&y)) = (model.graph.as_mut(), g.outputs().first()) {
                let meta = g.meta(y).expect("output meta");
                let dims: Vec<i64> = meta
                    .shape
                    .dims()
                    .iter()
                    .map(|d| d.known().map_or(-1, |n| n as i64))
                    .collect();
                let elem = crate::onnx::tensor_pb::dtype_to_onnx(meta.dtype);
                gp.output[0] = value_info("y", elem, &dims);
            }
            write(format!("{opset}_in"), &model);
            let saved = crate::onnx::to_model(&g).expect("save");
            if crate::onnx::to_bytes(&g).expect("to_bytes") != saved.encode_to_vec() {
                failures.push(format!(
                    "{} ({}) from opset {opset}: to_bytes differs",
                    r.onnx, r.op.name
                ));
            }
            // A load-only row is written by the row that writes its vocabulary op.
            let writer = match r.dir {
                Dir::Load => {
                    saving(r.op.name).unwrap_or_else(|| panic!("no row writes `{}`", r.op.name))
                }
                _ => r,
            };
            if let Err(e) = check_saved(writer, r, &saved) {
                failures.push(format!(
                    "{} ({}) from opset {opset}: save: {e}",
                    r.onnx, r.op.name
                ));
            }
            write(format!("{opset}_out"), &saved);
        }
    }
    assert!(cases > OPS.len(), "only {cases} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    check_with_onnx(&files);
}

/// Runs `onnx.checker.check_model(full_check=True)` over the files; skipped without
/// Python's `onnx` (a failure under `CI=true`).
fn check_with_onnx(files: &[PathBuf]) {
    let python = std::env::var("GRAPHRW_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import sys, onnx\n\
        bad = []\n\
        for p in sys.argv[1:]:\n\
        \x20   try:\n\
        \x20       onnx.checker.check_model(onnx.load(p), full_check=True)\n\
        \x20   except Exception as e:\n\
        \x20       bad.append(p.rsplit('/', 1)[-1] + ': ' + str(e).splitlines()[0][:200])\n\
        print('\\n'.join(bad))\n\
        sys.exit(1 if bad else 0)\n";
    let has_onnx = Command::new(&python)
        .args(["-c", "import onnx"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_onnx {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `{python}` has no onnx package"
        );
        eprintln!("skipped the onnx.checker part: `{python}` has no onnx package");
        return;
    }
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(files)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "onnx.checker refuses:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

mod hostile;
