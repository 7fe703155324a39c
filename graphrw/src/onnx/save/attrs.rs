//! The small builders of ONNX records the exporter and the op families write with:
//! attributes (`a_int`, `a_str`, ...) and a value's `ValueInfoProto`.

use std::borrow::Cow;

use crate::meta::{Dim, TensorMeta};
use crate::onnx::encode::Attr;
use crate::onnx::proto::{
    attribute_type, AttributeProto, Dimension, DimensionValue, TensorProto, TensorShapeProto,
    TypeProto, TypeProtoTensor, ValueInfoProto,
};
use crate::onnx::tensor_pb::dtype_to_onnx;

/// An int attribute.
pub(crate) fn a_int(name: &str, i: i64) -> Attr<'_> {
    Attr::Int(name, i)
}

/// A float attribute (ONNX floats are f32).
pub(crate) fn a_float(name: &str, f: f64) -> Attr<'_> {
    Attr::Float(name, f as f32)
}

/// An int-list attribute.
pub(crate) fn a_ints(name: &str, ints: Vec<i64>) -> Attr<'_> {
    Attr::Ints(name, ints)
}

/// A string attribute.
pub(crate) fn a_str<'a>(name: &'a str, s: impl Into<Cow<'a, str>>) -> Attr<'a> {
    Attr::Str(name, s.into())
}

/// A tensor attribute.
pub(crate) fn a_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::TENSOR,
        t: Some(Box::new(t)),
        ..Default::default()
    }
}

/// The value info of a value named `name` with metadata `meta` (symbolic dims as
/// `dim_param`s).
pub(crate) fn value_info(name: &str, meta: &TensorMeta) -> ValueInfoProto {
    let dim = meta
        .shape
        .dims()
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Dim::Known(n) => DimensionValue::DimValue(*n as i64),
                Dim::Sym(s) => DimensionValue::DimParam(s.to_string()),
                Dim::Expr(e) => DimensionValue::DimParam(e.to_string()),
            }),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: dtype_to_onnx(meta.dtype),
                shape: Some(TensorShapeProto { dim }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}
