//! Upgrades of opaque default-domain nodes read at an old opset to the opset written,
//! for the steps whose only change moved attributes to inputs (`axes` of Squeeze and
//! the reductions, Split's `split`, Pad's `pads` and `value`, Clip's `min`/`max`,
//! Slice's bounds) or dropped the legacy `broadcast` flag where numpy broadcasting
//! means the same. Every other step that changed meaning stays an error (see
//! [`super::schemas`]).

use super::proto::{attribute_type, AttributeProto, NodeProto, TensorProto};
use super::tensor_pb::tensor_to_proto;
use crate::meta::DType;
use crate::Tensor;

/// What upgrading one node needs from the exporter.
pub(crate) struct Ctx<'a> {
    /// The dtype of the node's first input, when known (Pad's value, Clip's bounds).
    pub dtype: Option<DType>,
    /// The ranks of the node's first two inputs, when known (legacy broadcast axis).
    pub ranks: [Option<usize>; 2],
    /// Makes a fresh initialiser name from a suffix.
    pub fresh: &'a mut dyn FnMut(&str) -> String,
    /// Where new initialisers go.
    pub inits: &'a mut Vec<TensorProto>,
}

/// The step of `op_type` at opset `version` that moved attributes to inputs, as
/// (attribute, input position, kind) triples: `true` for an int list, `false` for a
/// scalar of the input's dtype.
pub(crate) fn attr_to_input(
    op_type: &str,
    version: i64,
) -> Option<&'static [(&'static str, usize, bool)]> {
    Some(match (op_type, version) {
        ("Squeeze" | "Unsqueeze" | "ReduceSum", 13) => &[("axes", 1, true)],
        (
            "ReduceL1" | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceMax"
            | "ReduceMean" | "ReduceMin" | "ReduceProd" | "ReduceSumSquare",
            18,
        ) => &[("axes", 1, true)],
        ("Split", 13) => &[("split", 1, true)],
        ("Pad", 11) => &[("pads", 1, true), ("value", 2, false)],
        ("Clip", 11) => &[("min", 1, false), ("max", 2, false)],
        ("Slice", 10) => &[("starts", 1, true), ("ends", 2, true), ("axes", 3, true)],
        _ => return None,
    })
}

/// Applies the step of `node`'s op at `version`; an error says why it cannot.
pub(crate) fn step(node: &mut NodeProto, version: i64, ctx: &mut Ctx) -> Result<(), String> {
    let op = node.op_type.clone();
    if let Some(moves) = attr_to_input(&op, version) {
        // Before this step the op took none of the inputs the attributes move into: a
        // node that has one was not valid at its opset, and the step would give that
        // input a meaning it never had.
        let first = moves
            .iter()
            .map(|&(_, pos, _)| pos)
            .min()
            .unwrap_or(usize::MAX);
        if node.input.iter().skip(first).any(|s| !s.is_empty()) {
            return Err(format!(
                "it has {} inputs, and `{op}` before opset {version} takes {first}",
                node.input.len()
            ));
        }
        for &(name, pos, ints) in moves {
            let Some(i) = node.attribute.iter().position(|a| a.name == name) else {
                continue;
            };
            let a = node.attribute.remove(i);
            let tensor = if ints {
                Tensor::from_vec(vec![a.ints.len()], a.ints.clone()).map_err(|e| e.to_string())?
            } else {
                let dtype = ctx
                    .dtype
                    .ok_or_else(|| format!("`{name}` needs the input's dtype, which is unknown"))?;
                Tensor::full(dtype, &[], f64::from(a.f))
            };
            let init = (ctx.fresh)(name);
            ctx.inits.push(tensor_to_proto(&init, &tensor));
            if node.input.len() <= pos {
                node.input.resize(pos + 1, String::new());
            }
            node.input[pos] = init;
        }
        return Ok(());
    }
    match (op.as_str(), version) {
        ("Split", 2) => {
            // Split-1 could take the sizes as a second input, Split-2 only as the
            // `split` attribute; without that input the two are the same op.
            if node.input.get(1).is_none_or(String::is_empty) {
                node.input.truncate(1);
                Ok(())
            } else {
                Err("the sizes are an input, which Split-2 reads only as an attribute".into())
            }
        }
        ("Split", 18) => {
            // Split-18 needs `num_outputs` when no sizes are given (once: a node may
            // already carry it).
            let has_count = node.attribute.iter().any(|a| a.name == "num_outputs");
            if node.input.get(1).is_none_or(String::is_empty) && !has_count {
                node.attribute.push(AttributeProto {
                    name: "num_outputs".into(),
                    r#type: attribute_type::INT,
                    i: node.output.len() as i64,
                    ..Default::default()
                });
            }
            Ok(())
        }
        (
            "Add" | "Sub" | "Mul" | "Div" | "Pow" | "And" | "Or" | "Xor" | "Equal" | "Greater"
            | "Less" | "Gemm",
            7,
        ) => {
            let broadcast = node
                .attribute
                .iter()
                .find(|a| a.name == "broadcast")
                .map(|a| a.i);
            let axis = node
                .attribute
                .iter()
                .find(|a| a.name == "axis")
                .map(|a| a.i);
            if broadcast == Some(1) {
                if let Some(axis) = axis {
                    let suffix = match ctx.ranks {
                        [Some(a), Some(b)] => a as i64 - b as i64,
                        _ => return Err("legacy broadcast on an axis of unknown rank".into()),
                    };
                    if axis != suffix && op != "Gemm" {
                        return Err(format!(
                            "legacy broadcast at axis {axis}, not the trailing dims"
                        ));
                    }
                }
            }
            node.attribute
                .retain(|a| a.name != "broadcast" && a.name != "axis");
            Ok(())
        }
        _ => Err(format!("no upgrade of `{op}` across opset {version}")),
    }
}
