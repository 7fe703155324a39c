//! The ONNX protobuf messages graphrw reads and writes, as `prost` derive structs.
//!
//! Written by hand from the field numbers of the ONNX spec (`onnx.proto`, IR version
//! 10/11), keeping only the messages and fields an importer of inference graphs needs.
//! Fields not declared here (training info, sparse tensors, device configurations,
//! function attributes) are skipped by the decoder. No `protoc`, no build script: the structs are
//! plain Rust, so a fresh machine builds them.
//!
//! prost decodes defensively: a truncated or corrupt buffer, a length prefix past the
//! end, or messages nested deeper than its recursion limit are a `DecodeError`, and it
//! never allocates more than the bytes it was given.

#![allow(missing_docs)] // field names and numbers are those of onnx.proto

/// `TensorProto.DataType` values graphrw maps onto its dtypes.
pub mod data_type {
    /// `FLOAT` (f32).
    pub const FLOAT: i32 = 1;
    /// `UINT8`.
    pub const UINT8: i32 = 2;
    /// `INT8`.
    pub const INT8: i32 = 3;
    /// `UINT16`.
    pub const UINT16: i32 = 4;
    /// `INT16`.
    pub const INT16: i32 = 5;
    /// `INT32`.
    pub const INT32: i32 = 6;
    /// `INT64`.
    pub const INT64: i32 = 7;
    /// `STRING`.
    pub const STRING: i32 = 8;
    /// `BOOL`.
    pub const BOOL: i32 = 9;
    /// `FLOAT16`.
    pub const FLOAT16: i32 = 10;
    /// `DOUBLE`.
    pub const DOUBLE: i32 = 11;
    /// `UINT32`.
    pub const UINT32: i32 = 12;
    /// `UINT64`.
    pub const UINT64: i32 = 13;
    /// `BFLOAT16`.
    pub const BFLOAT16: i32 = 16;
}

/// `AttributeProto.AttributeType` values.
pub mod attribute_type {
    /// `FLOAT`.
    pub const FLOAT: i32 = 1;
    /// `INT`.
    pub const INT: i32 = 2;
    /// `STRING`.
    pub const STRING: i32 = 3;
    /// `TENSOR`.
    pub const TENSOR: i32 = 4;
    /// `GRAPH`.
    pub const GRAPH: i32 = 5;
    /// `FLOATS`.
    pub const FLOATS: i32 = 6;
    /// `INTS`.
    pub const INTS: i32 = 7;
    /// `STRINGS`.
    pub const STRINGS: i32 = 8;
}

/// `TensorProto.DataLocation.EXTERNAL`: the bytes live in another file.
pub const DATA_LOCATION_EXTERNAL: i32 = 1;

/// A model: the graph, the opsets it uses and who made it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(string, tag = "3")]
    pub producer_version: String,
    #[prost(string, tag = "4")]
    pub domain: String,
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
    #[prost(message, repeated, tag = "25")]
    pub functions: Vec<FunctionProto>,
}

/// A key/value pair (metadata, external data locations).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// An operator set a model imports: `("", 18)` is the default domain at opset 18.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// A graph: nodes in topological order, initialisers, inputs and outputs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(string, tag = "10")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// One op application; values are named by strings, `""` is an absent optional input.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    #[prost(string, tag = "7")]
    pub domain: String,
    #[prost(string, tag = "8")]
    pub overload: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "9")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A named attribute of a node; `type` says which field holds the value. The rare
/// message fields (a tensor, a type, a sparse tensor) are boxed: inline they made each
/// attribute over a kilobyte, and a million-node model holds millions of attributes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    #[prost(string, tag = "13")]
    pub doc_string: String,
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    #[prost(float, tag = "2")]
    pub f: f32,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    #[prost(message, optional, boxed, tag = "5")]
    pub t: Option<Box<TensorProto>>,
    #[prost(message, optional, boxed, tag = "6")]
    pub g: Option<Box<GraphProto>>,
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
    #[prost(message, optional, boxed, tag = "14")]
    pub tp: Option<Box<TypeProto>>,
    #[prost(message, repeated, tag = "15")]
    pub type_protos: Vec<TypeProto>,
    #[prost(message, optional, boxed, tag = "22")]
    pub sparse_tensor: Option<Box<SparseTensorProto>>,
    #[prost(message, repeated, tag = "23")]
    pub sparse_tensors: Vec<SparseTensorProto>,
}

/// A named value with its type (graph inputs, outputs, value_info).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    #[prost(string, tag = "3")]
    pub doc_string: String,
}

/// A value's type. graphrw models tensor types; sequences, maps, optionals and sparse
/// tensors are decoded only so that opaque nodes and foreign values keep them.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
    #[prost(message, optional, boxed, tag = "4")]
    pub sequence_type: Option<Box<TypeProtoElem>>,
    #[prost(message, optional, boxed, tag = "5")]
    pub map_type: Option<Box<TypeProtoMap>>,
    #[prost(string, tag = "6")]
    pub denotation: String,
    #[prost(message, optional, tag = "8")]
    pub sparse_tensor_type: Option<TypeProtoTensor>,
    #[prost(message, optional, boxed, tag = "9")]
    pub optional_type: Option<Box<TypeProtoElem>>,
}

/// `TypeProto.Sequence` and `TypeProto.Optional`: the element type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoElem {
    #[prost(message, optional, boxed, tag = "1")]
    pub elem_type: Option<Box<TypeProto>>,
}

/// `TypeProto.Map`: key element type and value type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoMap {
    #[prost(int32, tag = "1")]
    pub key_type: i32,
    #[prost(message, optional, boxed, tag = "2")]
    pub value_type: Option<Box<TypeProto>>,
}

/// A sparse tensor (kept for attributes of opaque nodes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SparseTensorProto {
    #[prost(message, optional, tag = "1")]
    pub values: Option<TensorProto>,
    #[prost(message, optional, tag = "2")]
    pub indices: Option<TensorProto>,
    #[prost(int64, repeated, tag = "3")]
    pub dims: Vec<i64>,
}

/// `TypeProto.Tensor`: element type and (optional) shape.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoTensor {
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// A shape: one dimension per axis.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// `TensorShapeProto.Dimension`: a size, a symbol, or neither (unknown).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    #[prost(oneof = "DimensionValue", tags = "1, 2")]
    pub value: Option<DimensionValue>,
    #[prost(string, tag = "3")]
    pub denotation: String,
}

/// The `value` oneof of a [`Dimension`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum DimensionValue {
    #[prost(int64, tag = "1")]
    DimValue(i64),
    #[prost(string, tag = "2")]
    DimParam(String),
}

/// A tensor: dims, element type, and its elements in one of the data fields, in
/// `raw_data` (little-endian), or in an external file (`data_location = EXTERNAL`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub string_data: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    pub name: String,
    #[prost(string, tag = "12")]
    pub doc_string: String,
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    #[prost(int32, tag = "14")]
    pub data_location: i32,
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
}

/// A model-local function: a node whose `(domain, op_type)` is the function's
/// `(domain, name)` stands for the function's body (graphrw writes fused ops without a
/// standard ONNX form this way, and the loader inlines them back).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FunctionProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "4")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "5")]
    pub output: Vec<String>,
    #[prost(message, repeated, tag = "7")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "8")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "9")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "10")]
    pub domain: String,
}
