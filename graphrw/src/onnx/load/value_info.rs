//! The graph's declared inputs: their dtypes and dims, `dim_param`s read as symbols or,
//! where one is written as an expression over symbols the inputs bind (`past + 1`, as
//! graphrw's exporter writes a symbolic dim), as that expression, so that saving and
//! loading keep the relations between dims.

use std::collections::HashSet;

use crate::graph::Foreign;
use crate::meta::{DType, Dim, Shape, SymExpr, TensorMeta};
use crate::onnx::load::importer::Importer;
use crate::onnx::proto::{DimensionValue, ValueInfoProto};
use crate::onnx::tensor_pb::{dtype_from_onnx, MAX_DIM};
use crate::onnx::OnnxError;
use prost::Message;

impl Importer<'_> {
    pub(crate) fn declare_inputs(&mut self) -> Result<(), OnnxError> {
        let proto = self.proto;
        let bindable = bindable_names(&proto.input);
        for vi in &proto.input {
            if self.inits.contains_key(vi.name.as_str()) {
                // An input with a default value (IR < 4 style): graphrw keeps the initialiser.
                continue;
            }
            if self.values.contains_key(vi.name.as_str()) {
                return Err(OnnxError::Input {
                    name: vi.name.clone(),
                    message: "is declared twice".into(),
                });
            }
            if let Some(message) = crate::onnx::malformed::input_elem_type(vi) {
                return Err(OnnxError::Input {
                    name: crate::onnx::error::clip(&vi.name, 60),
                    message,
                });
            }
            let v = match modelled(vi) {
                true => {
                    let dims = |p: &str| dim_of_param(p, &bindable);
                    self.graph.add_input(vi.name.clone(), meta_of(vi, &dims)?)
                }
                // A type graphrw does not model (strings, sequences, no shape): the input
                // keeps its ONNX type and everything that reads it stays opaque.
                false => {
                    let (meta, ty) = placeholder(vi);
                    let v = self.graph.add_input(vi.name.clone(), meta);
                    if let Some(n) = self.graph.node_mut(v.node) {
                        n.set_foreign(Foreign {
                            types: vec![Some(ty)],
                            outputs: vec![true],
                            ..Foreign::default()
                        });
                    }
                    v
                }
            };
            self.values.insert(vi.name.as_str(), v);
        }
        Ok(())
    }
}

/// The `dim_param`s of `inputs` that are plain symbols (not expressions): the names a
/// run binds from the inputs' sizes.
fn bindable_names(inputs: &[ValueInfoProto]) -> HashSet<&str> {
    inputs
        .iter()
        .filter_map(|vi| vi.r#type.as_ref()?.tensor_type.as_ref()?.shape.as_ref())
        .flat_map(|s| &s.dim)
        .filter_map(|d| match &d.value {
            Some(DimensionValue::DimParam(p)) => Some(p.as_str()),
            _ => None,
        })
        .filter(|p| SymExpr::parse(p).is_none_or(|e| e.as_sym().is_some()))
        .collect()
}

/// The dim a graph input's `dim_param` names: the expression it writes where it is one
/// over symbols other inputs' dims bind (`past + 1` beside a `past`), a plain symbol
/// otherwise (`unk__7`, `batch_size`, `Concatpast_sequence_length+1_dim_2`, or an
/// expression over a symbol nothing binds, which a run could not evaluate).
fn dim_of_param(p: &str, bindable: &HashSet<&str>) -> Dim {
    SymExpr::parse(p)
        .filter(|e| e.as_const().is_none() && e.as_sym().is_none())
        .filter(|e| e.symbols().iter().all(|s| bindable.contains(&***s)))
        .and_then(Dim::from_expr)
        .unwrap_or_else(|| Dim::sym(p))
}

/// True when graphrw models the value's declared type: a tensor of a supported dtype
/// with a shape (its dims are checked by `input_meta`).
pub(crate) fn modelled(vi: &ValueInfoProto) -> bool {
    vi.r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .is_some_and(|t| dtype_from_onnx(t.elem_type).is_ok() && t.shape.is_some())
}

/// Placeholder metadata for a value of a type graphrw does not model, with the
/// encoded ONNX type to write back (see [`crate::foreign`]).
pub(crate) fn placeholder(vi: &ValueInfoProto) -> (TensorMeta, Vec<u8>) {
    let dtype = vi
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .and_then(|t| dtype_from_onnx(t.elem_type).ok())
        .unwrap_or(DType::F32);
    let ty = vi
        .r#type
        .as_ref()
        .map(|t| t.encode_to_vec())
        .unwrap_or_default();
    (TensorMeta::new(dtype, Shape::default()), ty)
}

/// The metadata a declared value's type gives, each `dim_param` a plain symbol (the
/// values opaque nodes declare: nothing binds a relation there).
pub(crate) fn input_meta(vi: &ValueInfoProto) -> Result<TensorMeta, OnnxError> {
    meta_of(vi, &Dim::sym)
}

/// The metadata a declared value's type gives, each `dim_param` read by `param`.
fn meta_of(vi: &ValueInfoProto, param: &dyn Fn(&str) -> Dim) -> Result<TensorMeta, OnnxError> {
    let fail = |m: String| OnnxError::Input {
        name: vi.name.clone(),
        message: m,
    };
    let tt = vi
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .ok_or_else(|| {
            fail("is not a tensor (sequences, maps and optionals are not supported)".into())
        })?;
    let dtype = dtype_from_onnx(tt.elem_type).map_err(fail)?;
    let shape = tt
        .shape
        .as_ref()
        .ok_or_else(|| fail("has no shape (graphrw needs at least the rank)".into()))?;
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (i, d) in shape.dim.iter().enumerate() {
        dims.push(match &d.value {
            Some(DimensionValue::DimValue(n)) if *n < 0 => {
                return Err(fail(format!("dim {i} is negative ({n})")))
            }
            Some(DimensionValue::DimValue(n)) if *n as u64 > MAX_DIM => {
                return Err(fail(format!(
                    "dim {i} is {n}, larger than graphrw accepts (2^48)"
                )))
            }
            Some(DimensionValue::DimValue(n)) => Dim::Known(*n as u64),
            Some(DimensionValue::DimParam(p)) if !p.is_empty() => param(p),
            _ => Dim::sym(&format!("{}_dim{i}", vi.name)),
        });
    }
    Ok(TensorMeta::new(dtype, Shape::from(dims)))
}
