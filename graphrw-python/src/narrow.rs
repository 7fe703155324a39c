//! Narrow integers at load: graphrw's tensors hold f32, f64, f16, bf16, i64, i32 and
//! bool, not the ONNX element types `UINT8`, `INT8`, `UINT16`, `INT16`, `UINT32` and
//! `UINT64`. A model that reads one only through `Cast` (an image fed as `uint8`, a
//! mask or a quantisation table stored as `uint8` and cast to float) loses nothing if
//! the value is widened before the `Cast`: every such value is exact in `int32`
//! (`uint32` and `uint64` in `int64`), and `Cast` from the wider type gives the same
//! result. So where the model as loaded has such a value, it is decoded again and every
//! graph input, initialiser and `Constant` of those types whose only readers are `Cast`
//! nodes is widened; the session then takes the input's own dtype and widens it on the
//! way in (the Python side), and shows the input with its ONNX type.
//!
//! What stays refused, with the importer's error: a narrow value read by any other op,
//! one that is a graph output, a `Cast` *to* a narrow type, a narrow initialiser in
//! external data, and a `uint64` initialiser holding a value past `i64::MAX`.

use std::collections::{HashMap, HashSet};

use graphrw::onnx::proto::{data_type, AttributeProto, GraphProto, ModelProto, TensorProto};
use graphrw::Graph;
use prost::Message;

use crate::{Failure, Kind, Outcome, Source};

/// `INT16`, `UINT16`, `UINT32`, `UINT64` (`UINT8`, `INT8` are in `data_type`).
const INT16: i32 = 5;
const UINT16: i32 = 4;
const UINT32: i32 = 12;
const UINT64: i32 = 13;

/// A graph input's type as the caller sees it, where it was widened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Original {
    /// numpy's name of the dtype (`uint8`).
    pub numpy: &'static str,
    /// onnxruntime's type string (`tensor(uint8)`).
    pub ort: &'static str,
}

/// The narrow element type `elem` as the wider type it is read in, and its names.
fn widening(elem: i32) -> Option<(i32, Original)> {
    let (wide, numpy, ort) = match elem {
        data_type::UINT8 => (data_type::INT32, "uint8", "tensor(uint8)"),
        data_type::INT8 => (data_type::INT32, "int8", "tensor(int8)"),
        UINT16 => (data_type::INT32, "uint16", "tensor(uint16)"),
        INT16 => (data_type::INT32, "int16", "tensor(int16)"),
        UINT32 => (data_type::INT64, "uint32", "tensor(uint32)"),
        UINT64 => (data_type::INT64, "uint64", "tensor(uint64)"),
        _ => return None,
    };
    Some((wide, Original { numpy, ort }))
}

/// A model loaded with its narrow values widened, and per graph input (in order) its
/// own type where it was widened.
pub struct Widened {
    pub graph: Graph,
    pub inputs: Vec<Option<Original>>,
}

/// Whether a load error is about an element type this module widens.
fn narrow_error(message: &str) -> bool {
    ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "UINT64"]
        .iter()
        .any(|t| message.contains(&format!("element type {t} ")))
}

/// Whether the loaded graph holds a value graphrw does not model: an input of an
/// unknown type, or an opaque node (which a `Cast` of a narrow value becomes).
fn has_unmodelled(graph: &Graph) -> bool {
    graph
        .inputs()
        .iter()
        .any(|&id| !graph.node(id).is_some_and(|n| n.is_known(0)))
        || graph
            .node_ids()
            .any(|id| graph.node(id).is_some_and(|n| n.op_name() == "opaque"))
}

/// Loads the model; where the load fails on, or leaves unmodelled, a value that may be
/// a narrow integer, decodes it again and widens what only `Cast`s read (see the
/// [module docs](self)). Without anything to widen, the first load's result stands.
pub fn load(src: &Source<'_>) -> Outcome<Widened> {
    let first = src.load();
    let retry = match &first {
        Ok(g) => has_unmodelled(g),
        Err(f) => f.kind == Kind::Load && narrow_error(&f.message),
    };
    let unchanged = |first: Outcome<Graph>| {
        first.map(|graph| Widened {
            inputs: vec![None; graph.inputs().len()],
            graph,
        })
    };
    if !retry {
        return unchanged(first);
    }
    let (bytes, dir) = match src {
        Source::Path(p) => match std::fs::read(p) {
            Ok(b) => (
                std::borrow::Cow::Owned(b),
                p.parent().map(|d| d.to_path_buf()),
            ),
            Err(_) => return unchanged(first),
        },
        Source::Bytes(b) => (std::borrow::Cow::Borrowed(*b), None),
    };
    let Ok(mut model) = ModelProto::decode(&bytes[..]) else {
        return unchanged(first);
    };
    let Some(graph) = model.graph.as_mut() else {
        return unchanged(first);
    };
    let widened = widen(graph);
    if widened.is_empty() {
        return unchanged(first);
    }
    let inputs_before: Vec<String> = graph.input.iter().map(|v| v.name.clone()).collect();
    drop(first);
    let loaded = graphrw::onnx::from_model(&model, dir.as_deref()).map_err(|e| {
        let what = match src {
            Source::Path(p) => format!(" (file {})", graphrw_cli::commands::short_path(p)),
            Source::Bytes(_) => String::new(),
        };
        Failure::new(
            Kind::Load,
            format!("{e}{what} (after widening narrow integers read by Cast)"),
        )
    })?;
    let by_name: HashMap<&str, Original> = widened
        .iter()
        .filter(|(name, _)| inputs_before.iter().any(|i| i == name))
        .map(|(name, o)| (name.as_str(), *o))
        .collect();
    let inputs = loaded
        .inputs()
        .iter()
        .map(|&id| {
            loaded
                .node(id)
                .and_then(|n| n.name())
                .and_then(|name| by_name.get(name).copied())
        })
        .collect();
    Ok(Widened {
        graph: loaded,
        inputs,
    })
}

/// Widens in `graph` every narrow graph input, initialiser and `Constant` output whose
/// only readers are `Cast` nodes; returns their names and original types.
fn widen(graph: &mut GraphProto) -> Vec<(String, Original)> {
    let mut readers: HashMap<&str, (usize, bool)> = HashMap::new();
    for n in &graph.node {
        let cast = n.op_type == "Cast" && (n.domain.is_empty() || n.domain == "ai.onnx");
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            let e = readers.entry(i.as_str()).or_insert((0, true));
            e.0 += 1;
            e.1 &= cast;
        }
    }
    let outputs: HashSet<&str> = graph.output.iter().map(|o| o.name.as_str()).collect();
    let only_cast = |name: &str| {
        !outputs.contains(name) && readers.get(name).is_some_and(|&(n, cast)| n > 0 && cast)
    };
    let mut inputs = Vec::new();
    for (k, vi) in graph.input.iter().enumerate() {
        let elem = vi
            .r#type
            .as_ref()
            .and_then(|t| t.tensor_type.as_ref())
            .map(|t| t.elem_type);
        if let Some((wide, original)) = elem.and_then(widening) {
            if only_cast(&vi.name) {
                inputs.push((k, wide, original));
            }
        }
    }
    let mut tensors = Vec::new();
    for (k, t) in graph.initializer.iter().enumerate() {
        if widening(t.data_type).is_some() && only_cast(&t.name) && widened_tensor(t).is_some() {
            tensors.push(k);
        }
    }
    let mut constants = Vec::new();
    for (k, n) in graph.node.iter().enumerate() {
        let is_constant = n.op_type == "Constant" && (n.domain.is_empty() || n.domain == "ai.onnx");
        let Some(out) = n.output.first() else {
            continue;
        };
        if !is_constant || !only_cast(out) {
            continue;
        }
        if let Some(a) = n.attribute.iter().position(|a| value_tensor(a).is_some()) {
            constants.push((k, a));
        }
    }
    let mut done = Vec::new();
    for (k, wide, original) in inputs {
        let vi = &mut graph.input[k];
        if let Some(t) = vi.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
            t.elem_type = wide;
        }
        done.push((vi.name.clone(), original));
    }
    for k in tensors {
        let t = &mut graph.initializer[k];
        if let (Some(wide), Some((_, original))) = (widened_tensor(t), widening(t.data_type)) {
            done.push((t.name.clone(), original));
            *t = wide;
        }
    }
    for (k, a) in constants {
        let node = &mut graph.node[k];
        let name = node.output[0].clone();
        if let Some(t) = node.attribute[a].t.as_mut() {
            if let (Some(wide), Some((_, original))) = (widened_tensor(t), widening(t.data_type)) {
                done.push((name, original));
                **t = wide;
            }
        }
    }
    // Type annotations of the widened values, if any, say the wider type too.
    let names: HashSet<&str> = done.iter().map(|(n, _)| n.as_str()).collect();
    for vi in graph
        .value_info
        .iter_mut()
        .filter(|v| names.contains(v.name.as_str()))
    {
        if let Some(t) = vi.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
            if let Some((wide, _)) = widening(t.elem_type) {
                t.elem_type = wide;
            }
        }
    }
    done
}

/// The narrow tensor a `Constant`'s `value` attribute holds.
fn value_tensor(a: &AttributeProto) -> Option<&TensorProto> {
    (a.name == "value")
        .then_some(a.t.as_deref())
        .flatten()
        .filter(|t| widening(t.data_type).is_some())
}

/// `t` with its elements in the wider type (`int32_data` or `int64_data`), or `None`
/// where they cannot be read here (external data, a count that does not match the
/// dims, a `uint64` past `i64::MAX`).
fn widened_tensor(t: &TensorProto) -> Option<TensorProto> {
    let (wide, _) = widening(t.data_type)?;
    if t.data_location == graphrw::onnx::proto::DATA_LOCATION_EXTERNAL {
        return None;
    }
    let numel = t
        .dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))?;
    let width = match t.data_type {
        data_type::UINT8 | data_type::INT8 => 1,
        UINT16 | INT16 => 2,
        UINT32 => 4,
        _ => 8,
    };
    let values: Vec<i128> = if !t.raw_data.is_empty() || numel == 0 {
        if t.raw_data.len() != numel.checked_mul(width)? {
            return None;
        }
        t.raw_data
            .chunks_exact(width)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(c);
                let u = u64::from_le_bytes(b);
                match t.data_type {
                    data_type::INT8 => i128::from(u as u8 as i8),
                    INT16 => i128::from(u as u16 as i16),
                    _ => i128::from(u),
                }
            })
            .collect()
    } else if matches!(t.data_type, UINT32 | UINT64) {
        // ONNX keeps uint32 and uint64 elements in `uint64_data`.
        t.uint64_data.iter().map(|&v| i128::from(v)).collect()
    } else {
        // And the narrower ones in `int32_data`, one element each.
        t.int32_data
            .iter()
            .map(|&v| match t.data_type {
                data_type::UINT8 => i128::from(v as u8),
                data_type::INT8 => i128::from(v as i8),
                UINT16 => i128::from(v as u16),
                _ => i128::from(v as i16),
            })
            .collect()
    };
    if values.len() != numel {
        return None;
    }
    let mut out = TensorProto {
        dims: t.dims.clone(),
        data_type: wide,
        name: t.name.clone(),
        doc_string: t.doc_string.clone(),
        ..TensorProto::default()
    };
    if wide == data_type::INT32 {
        out.int32_data = values.iter().map(|&v| v as i32).collect();
    } else {
        out.int64_data = values
            .iter()
            .map(|&v| i64::try_from(v).ok())
            .collect::<Option<_>>()?;
    }
    Some(out)
}
