//! ONNX in and out: [`load`] a model file (with its external data) as a [`Graph`](crate::Graph)
//! over the torch-like vocabulary (the file, its inline weights and its external data
//! memory-mapped, not read), [`save`] a
//! graph as a valid ONNX model (weights inline or as external data: [`external`]), and read or
//! write the `TensorProto` files of the ONNX test-data layout ([`read_tensor_pb`]).
//!
//! The protobuf messages are `prost` derive structs written from the ONNX spec's field
//! numbers ([`proto`]): no `protoc`, no build script, no generated files.
//!
//! ```no_run
//! let graph = graphrw::onnx::load("model.onnx")?;
//! println!("{graph}");
//! graphrw::onnx::save(&graph, "copy.onnx")?;
//! # Ok::<(), graphrw::onnx::OnnxError>(())
//! ```
//!
//! Bad input is an [`OnnxError`] naming the node, input or initialiser and the problem;
//! it never panics and never allocates a declared size before checking it against the
//! bytes present.

mod decode;
mod dialect;
mod encode;
mod error;
pub mod external;
mod load;
pub mod malformed;
mod name_key;
mod nesting;
mod ops;
pub mod proto;
mod save;
mod schemas;
mod table;
mod tensor_chunks;
mod tensor_pb;
mod test_set;
mod upgrade;

pub use dialect::{
    ATTENTION_OPSET, BASE_OPSET, FUNCTION_DOMAIN, IR_VERSION, MAX_OPSET, MIN_OPSET, ROTARY_OPSET,
};
pub use error::OnnxError;
pub use external::{SaveOptions, Saved, WeightLayout, MAX_PROTO_BYTES};
pub use load::{from_model, load, load_assuming, load_bytes, load_bytes_in};
pub use save::{save, save_with, to_bytes, to_model};
pub use tensor_chunks::{open_tensor_pb, TensorPbChunks, CHUNK_BYTES};
pub use tensor_pb::{
    decode_tensor_pb, dtype_from_onnx, dtype_to_onnx, encode_tensor_pb, read_tensor_pb,
    write_tensor_pb, MAX_DIM,
};
pub use test_set::{read_test_set, read_test_sets, TestSet};
