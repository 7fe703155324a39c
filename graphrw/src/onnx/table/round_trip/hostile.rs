//! Hostile arguments (a node made malformed one argument at a time stays opaque or is
//! refused, never loaded wrong) and the quirks of old opsets, row by row.

use super::*;

/// The row's model at its last opset with argument `k` (an attribute there) replaced
/// by `bad`, or its input by `bad_input`.
fn hostile_model(r: &OpMap, k: usize, bad: AttributeProto, bad_input: TensorProto) -> ModelProto {
    let opset = r.opsets.1;
    let mut m = model_of(r, opset);
    let a = &r.args[k];
    if let Some(n) = m.graph.as_mut().and_then(|g| g.node.first_mut()) {
        match a.place.input_at(opset) {
            None => {
                n.attribute.retain(|x| x.name != a.onnx);
                n.attribute.push(bad);
            }
            Some(i) => {
                n.input.resize(n.input.len().max(i + 1), String::new());
                n.input[i] = bad_input.name.clone();
            }
        }
    }
    if let Some(g) = m.graph.as_mut() {
        g.initializer.retain(|t| t.name != a.onnx);
        g.initializer.push(bad_input);
    }
    m
}

/// Loads `m`; the node must stay an opaque `r.onnx` (what graphrw cannot read passes
/// through), never a vocabulary op read with a wrong value, never a panic.
fn stays_opaque(r: &OpMap, what: &str, m: &ModelProto) -> Result<(), String> {
    let g = crate::onnx::from_model(m, None).map_err(|e| format!("{what}: {e}"))?;
    let ops = ops_of(&g);
    if ops != [format!("opaque {}", r.onnx)] {
        return Err(format!("{what}: loads as {ops:?}"));
    }
    Ok(())
}

/// Ok when `m` is refused as a malformed node `n` of the row's op.
fn refused_as_malformed(r: &OpMap, what: &str, m: &ModelProto) -> Result<(), String> {
    match crate::onnx::from_model(m, None) {
        Err(e @ crate::onnx::OnnxError::Malformed { .. }) => {
            let msg = e.to_string();
            match msg.starts_with(&format!("malformed {} node n: ", r.onnx)) {
                true => Ok(()),
                false => Err(format!("{what}: {msg}")),
            }
        }
        Err(e) => Err(format!("{what}: not a malformed-node error: {e}")),
        Ok(g) => Err(format!("{what}: loads as {:?}", ops_of(&g))),
    }
}

/// Wrong attribute kinds are malformed (refused); values past graphrw's limits, other
/// choices, other held values and unknown attributes are valid forms it does not read
/// (opaque).
#[test]
fn hostile_arguments_leave_the_node_opaque() {
    let mut failures = Vec::new();
    let mut cases = 0;
    for r in OPS.iter().filter(|r| r.dir != Dir::Save) {
        let float_input = |name: &str| TensorProto {
            name: name.into(),
            dims: vec![1],
            data_type: 1,
            float_data: vec![1.5],
            ..Default::default()
        };
        for (k, a) in r.args.iter().enumerate() {
            // The wrong kind: a string where a number is read, an int for a string.
            let wrong = match a.kind {
                OnnxKind::Str => attribute(a.onnx, &V::I(1)),
                _ => attribute(a.onnx, &V::S("x")),
            };
            // Against the spec: refused, naming the node and the op (MALFORMED.md).
            cases += 1;
            let m = hostile_model(r, k, wrong, float_input(a.onnx));
            let what = format!("{} `{}` wrong kind", r.onnx, a.onnx);
            if let Err(e) = refused_as_malformed(r, &what, &m) {
                failures.push(e);
            }
            // Valid forms graphrw does not read (past its limits, other choices).
            let mut bad = Vec::new();
            if let Some((_, hi)) = a.range {
                let v = match a.kind {
                    OnnxKind::Ints => V::Is(vec![hi + 1; 4]),
                    _ => V::I(hi + 1),
                };
                bad.push(("out of range", attribute(a.onnx, &v)));
            }
            if !a.choices.is_empty() {
                bad.push(("unknown choice", attribute(a.onnx, &V::S("quadratic"))));
            }
            for (what, attr) in bad {
                cases += 1;
                let m = hostile_model(r, k, attr, float_input(a.onnx));
                let what = format!("{} `{}` {what}", r.onnx, a.onnx);
                if let Err(e) = stays_opaque(r, &what, &m) {
                    failures.push(e);
                }
            }
        }
        for h in r.held {
            // A value no row of the op reads.
            let other = match h.values {
                HeldValues::Int { .. } => attribute(h.onnx, &V::I(7)),
                HeldValues::Str { .. } => attribute(h.onnx, &V::S("SAME_UPPER")),
            };
            let mut m = model_of(r, r.opsets.1);
            if let Some(n) = m.graph.as_mut().and_then(|g| g.node.first_mut()) {
                n.attribute.retain(|x| x.name != h.onnx);
                n.attribute.push(other);
            }
            cases += 1;
            if let Err(e) = stays_opaque(r, &format!("{} `{}` unread value", r.onnx, h.onnx), &m) {
                failures.push(e);
            }
        }
        // An attribute the row does not read.
        let mut m = model_of(r, r.opsets.1);
        if let Some(n) = m.graph.as_mut().and_then(|g| g.node.first_mut()) {
            n.attribute.push(attribute("graphrw_unknown", &V::I(1)));
        }
        cases += 1;
        if let Err(e) = stays_opaque(r, &format!("{} unknown attribute", r.onnx), &m) {
            failures.push(e);
        }
    }
    assert!(cases > OPS.len(), "only {cases} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The non-source ops of a loaded graph, opaque ones as `opaque <op_type>`.
fn ops_of(g: &Graph) -> Vec<String> {
    g.node_ids()
        .filter_map(|id| g.node(id))
        .filter(|n| !matches!(n.op_name(), "input" | "constant"))
        .map(|n| match n.attrs().str("op_type") {
            Ok(t) if n.op().is(Op::Opaque) => format!("opaque {t}"),
            _ => n.op_name().to_string(),
        })
        .collect()
}

/// A one-node model: `op_type` over f32 inputs of the given shapes, at `opset`.
fn one_node(
    op_type: &str,
    shapes: &[&[i64]],
    attrs: Vec<AttributeProto>,
    opset: i64,
) -> ModelProto {
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: op_type.into(),
                name: "n".into(),
                input: names.clone(),
                output: vec!["y".into()],
                attribute: attrs,
                ..Default::default()
            }],
            input: names
                .iter()
                .zip(shapes)
                .map(|(n, d)| value_info(n, 1, d))
                .collect(),
            output: vec![ValueInfoProto {
                name: "y".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn load_ops(m: &ModelProto) -> Vec<String> {
    ops_of(&crate::onnx::from_model(m, None).unwrap_or_else(|e| panic!("load: {e}")))
}

/// The quirks: the few hand-written steps of table-driven ops.
#[test]
fn quirks_take_their_step() {
    // Legacy broadcasting (opset < 7): `b` [3, 4] lines up with `a` from axis 1, so
    // one trailing 1 is added to it; since opset 7 the attribute is not read.
    let legacy = |opset| {
        one_node(
            "Add",
            &[&[2, 3, 4, 5], &[3, 4]],
            vec![
                attribute("broadcast", &V::I(1)),
                attribute("axis", &V::I(1)),
            ],
            opset,
        )
    };
    assert_eq!(load_ops(&legacy(6)), ["unsqueeze", "add"]);
    assert_eq!(load_ops(&legacy(7)), ["opaque Add"]);
    // ReduceSum with no axes and noop_with_empty_axes 1 is the identity; with the
    // flag 0 it sums everything.
    let noop = |flag| {
        one_node(
            "ReduceSum",
            &[&[2, 3]],
            vec![attribute("noop_with_empty_axes", &V::I(flag))],
            18,
        )
    };
    assert!(load_ops(&noop(1)).is_empty());
    assert_eq!(load_ops(&noop(0)), ["sum"]);
    // A concatenation past 2^48 elements along the axis stays opaque.
    let big = 1i64 << 47;
    let concat = |n: i64| {
        one_node(
            "Concat",
            &[&[n, 2], &[n, 2], &[n, 2]],
            vec![attribute("axis", &V::I(0))],
            18,
        )
    };
    assert_eq!(load_ops(&concat(big)), ["opaque Concat"]);
    assert_eq!(load_ops(&concat(4)), ["concat"]);
    // A layer norm without a weight is written with a scale of ones.
    let def = &crate::ops::builtin::LAYER_NORM;
    let mut g = Graph::new();
    let x = g.add_input("x", TensorMeta::new(DType::F32, [2usize, 3]));
    let attrs = normalize_attrs(def, &[]).expect("defaults");
    let id = g.add_node(def, vec![x], attrs, None).expect("layer_norm");
    g.set_outputs(vec![Value::new(id, 0)]).expect("outputs");
    let m = crate::onnx::to_model(&g).expect("save");
    let gp = m.graph.as_ref().expect("graph");
    let n = gp
        .node
        .iter()
        .find(|n| n.op_type == "LayerNormalization")
        .expect("LayerNormalization written");
    let scale = gp
        .initializer
        .iter()
        .find(|t| n.input.get(1) == Some(&t.name))
        .expect("a scale initialiser");
    assert_eq!(scale.dims, [3]);
    let values = crate::onnx::tensor_pb::tensor_from_proto(scale, "scale", None)
        .expect("scale")
        .to_f64_vec();
    assert_eq!(values, [1.0, 1.0, 1.0]);
}
