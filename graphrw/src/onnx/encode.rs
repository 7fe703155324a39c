//! Protobuf encoding of ONNX nodes straight from borrowed parts, without building a
//! `NodeProto` of owned strings first: the exporter's fast path writes each node of a
//! big graph into one byte buffer this way ([`NodeSink::Bytes`]).
//!
//! The bytes are those prost writes for the same `NodeProto` (fields in tag order,
//! proto3 defaults left out, int lists packed), so a model written through here
//! decodes to the model [`to_model`](super::to_model) builds; the tests compare the two.
//!
//! What the exporter hands the writers ([`Exported`]: the model, its nodes and its
//! constants' tensors, placed inline with [`fill_inline`] or in external data by
//! `external.rs`) is defined here, below both.

use std::borrow::Cow;

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;

use super::proto::{attribute_type, data_type, AttributeProto, ModelProto, NodeProto, TensorProto};
use crate::Tensor;

/// The tag of `GraphProto.node`.
pub(super) const NODE_TAG: u32 = 1;
/// The tag of `GraphProto.initializer`.
pub(super) const INITIALIZER_TAG: u32 = 5;

/// A node attribute by reference: what the exporter writes. [`Attr::Tensor`] is the
/// rare owned case (`ConstantOfShape`'s value).
#[derive(Clone, Debug)]
pub(super) enum Attr<'a> {
    /// `INT`.
    Int(&'a str, i64),
    /// `FLOAT`.
    Float(&'a str, f32),
    /// `INTS`.
    Ints(&'a str, Vec<i64>),
    /// `STRING`.
    Str(&'a str, Cow<'a, str>),
    /// `TENSOR`.
    Tensor(&'a str, Box<TensorProto>),
}

impl Attr<'_> {
    /// The attribute as the prost message.
    pub(super) fn to_proto(&self) -> AttributeProto {
        match self {
            Attr::Int(name, i) => AttributeProto {
                name: (*name).into(),
                r#type: attribute_type::INT,
                i: *i,
                ..Default::default()
            },
            Attr::Float(name, f) => AttributeProto {
                name: (*name).into(),
                r#type: attribute_type::FLOAT,
                f: *f,
                ..Default::default()
            },
            Attr::Ints(name, ints) => AttributeProto {
                name: (*name).into(),
                r#type: attribute_type::INTS,
                ints: ints.clone(),
                ..Default::default()
            },
            Attr::Str(name, s) => AttributeProto {
                name: (*name).into(),
                r#type: attribute_type::STRING,
                s: s.as_bytes().to_vec(),
                ..Default::default()
            },
            Attr::Tensor(name, t) => AttributeProto {
                name: (*name).into(),
                r#type: attribute_type::TENSOR,
                t: Some(t.clone()),
                ..Default::default()
            },
        }
    }

    /// Writes the attribute message's body (fields in tag order).
    fn encode_body(&self, buf: &mut Vec<u8>) {
        let (name, ty) = match self {
            Attr::Int(n, _) => (n, attribute_type::INT),
            Attr::Float(n, _) => (n, attribute_type::FLOAT),
            Attr::Ints(n, _) => (n, attribute_type::INTS),
            Attr::Str(n, _) => (n, attribute_type::STRING),
            Attr::Tensor(n, _) => (n, attribute_type::TENSOR),
        };
        put_str(1, name, buf);
        match self {
            Attr::Float(_, f) if *f != 0.0 => {
                encode_key(2, WireType::ThirtyTwoBit, buf);
                buf.extend_from_slice(&f.to_le_bytes());
            }
            Attr::Int(_, i) if *i != 0 => {
                encode_key(3, WireType::Varint, buf);
                encode_varint(*i as u64, buf);
            }
            Attr::Str(_, s) => put_str(4, s, buf),
            Attr::Tensor(_, t) => {
                encode_key(5, WireType::LengthDelimited, buf);
                encode_varint(t.encoded_len() as u64, buf);
                t.encode_raw(buf);
            }
            Attr::Ints(_, v) if !v.is_empty() => {
                encode_key(8, WireType::LengthDelimited, buf);
                encode_varint(packed_len(v) as u64, buf);
                for &i in v {
                    encode_varint(i as u64, buf);
                }
            }
            _ => {}
        }
        encode_key(20, WireType::Varint, buf);
        encode_varint(ty as u64, buf);
    }
}

/// The parts of one node, borrowed.
pub(super) struct NodeParts<'a, I, O> {
    /// Input names (`""` for an absent optional input).
    pub inputs: I,
    /// Output names.
    pub outputs: O,
    /// The node's name.
    pub name: &'a str,
    /// The ONNX op type.
    pub op_type: &'a str,
    /// The op's domain (`""`: the default domain).
    pub domain: &'a str,
    /// The attributes, in the order written.
    pub attrs: &'a [Attr<'a>],
}

impl<'a, I, O> NodeParts<'a, I, O>
where
    I: Iterator<Item = &'a str> + Clone,
    O: Iterator<Item = &'a str> + Clone,
{
    /// The node as the prost message.
    pub(super) fn to_proto(&self) -> NodeProto {
        NodeProto {
            input: self.inputs.clone().map(str::to_string).collect(),
            output: self.outputs.clone().map(str::to_string).collect(),
            name: self.name.to_string(),
            op_type: self.op_type.to_string(),
            domain: self.domain.to_string(),
            attribute: self.attrs.iter().map(Attr::to_proto).collect(),
            ..Default::default()
        }
    }

    /// Appends the node as field [`NODE_TAG`] of a graph (key, length, body): the bytes
    /// prost's `message::encode(NODE_TAG, &self.to_proto(), buf)` gives. The body is
    /// written once, behind a one-byte length that is widened in the rare case that it
    /// is 128 bytes or more, rather than measured first and then written.
    pub(super) fn encode(&self, buf: &mut Vec<u8>) {
        encode_key(NODE_TAG, WireType::LengthDelimited, buf);
        let at = open_len(buf);
        for s in self.inputs.clone() {
            put_str_always(1, s, buf);
        }
        for s in self.outputs.clone() {
            put_str_always(2, s, buf);
        }
        put_str(3, self.name, buf);
        put_str(4, self.op_type, buf);
        for a in self.attrs {
            encode_key(5, WireType::LengthDelimited, buf);
            let at = open_len(buf);
            a.encode_body(buf);
            close_len(buf, at);
        }
        put_str(7, self.domain, buf);
        close_len(buf, at);
    }
}

/// Makes room for a length-delimited field's length (one byte, what bodies under 128
/// bytes take); returns where it is, for [`close_len`].
fn open_len(buf: &mut Vec<u8>) -> usize {
    buf.push(0);
    buf.len() - 1
}

/// Writes the length of the body that follows the byte [`open_len`] made room for at
/// `at` (the body runs to the end of `buf`), as a minimal varint: widened, the body
/// moved along, when it takes more than one byte.
fn close_len(buf: &mut Vec<u8>, at: usize) {
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
        return;
    }
    let mut head = [0u8; 10];
    let (mut v, mut n) = (len as u64, 0);
    while v >= 0x80 {
        head[n] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        n += 1;
    }
    head[n] = v as u8;
    buf.splice(at..at + 1, head[..=n].iter().copied());
}

/// Length of a packed int64 list's body.
fn packed_len(v: &[i64]) -> usize {
    v.iter().map(|&i| encoded_len_varint(i as u64)).sum()
}

fn put_str(tag: u32, s: &str, buf: &mut Vec<u8>) {
    if !s.is_empty() {
        put_str_always(tag, s, buf);
    }
}

fn put_str_always(tag: u32, s: &str, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(s.len() as u64, buf);
    buf.extend_from_slice(s.as_bytes());
}

/// Where the exporter's nodes go: prost messages (for [`to_model`](super::to_model) and
/// function bodies), or their encoding, appended node by node (the writers' fast path).
pub(super) enum NodeSink {
    /// Whole messages, in order.
    Protos(Vec<NodeProto>),
    /// The encoded nodes (each as field [`NODE_TAG`] of the graph), and the nodes held
    /// as messages until the end (opaque default-domain nodes that may still be
    /// upgraded), each with the byte offset it goes at.
    Bytes {
        /// The encoded nodes.
        bytes: Vec<u8>,
        /// `(offset into bytes, node)`, offsets ascending.
        held: Vec<(usize, NodeProto)>,
    },
}

impl NodeSink {
    /// Appends a node given by its parts.
    pub(super) fn push_parts<'a, I, O>(&mut self, parts: NodeParts<'a, I, O>)
    where
        I: Iterator<Item = &'a str> + Clone,
        O: Iterator<Item = &'a str> + Clone,
    {
        match self {
            NodeSink::Protos(nodes) => nodes.push(parts.to_proto()),
            NodeSink::Bytes { bytes, .. } => parts.encode(bytes),
        }
    }

    /// Appends a node message.
    pub(super) fn push_proto(&mut self, node: NodeProto) {
        match self {
            NodeSink::Protos(nodes) => nodes.push(node),
            NodeSink::Bytes { bytes, .. } => {
                prost::encoding::message::encode(NODE_TAG, &node, bytes)
            }
        }
    }

    /// Appends a node that may still change before the model is written; returns its
    /// key for [`NodeSink::held_mut`].
    pub(super) fn push_held(&mut self, node: NodeProto) -> usize {
        match self {
            NodeSink::Protos(nodes) => {
                nodes.push(node);
                nodes.len() - 1
            }
            NodeSink::Bytes { bytes, held } => {
                held.push((bytes.len(), node));
                held.len() - 1
            }
        }
    }

    /// The node [`NodeSink::push_held`] returned `key` for.
    pub(super) fn held_mut(&mut self, key: usize) -> Option<&mut NodeProto> {
        match self {
            NodeSink::Protos(nodes) => nodes.get_mut(key),
            NodeSink::Bytes { held, .. } => held.get_mut(key).map(|(_, n)| n),
        }
    }

    /// The encoded length of all the nodes as repeated field [`NODE_TAG`].
    pub(super) fn encoded_len(&self) -> usize {
        match self {
            NodeSink::Protos(nodes) => {
                prost::encoding::message::encoded_len_repeated(NODE_TAG, nodes)
            }
            NodeSink::Bytes { bytes, held } => {
                bytes.len()
                    + held
                        .iter()
                        .map(|(_, n)| prost::encoding::message::encoded_len(NODE_TAG, n))
                        .sum::<usize>()
            }
        }
    }

    /// Writes the nodes in order to `out` through `buf` (bytes already pending in
    /// `buf` go first), `chunk` bytes at a time or more, dropping each message once
    /// written; what is left pending stays in `buf`.
    pub(super) fn write_to(
        self,
        buf: &mut Vec<u8>,
        chunk: usize,
        out: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        match self {
            NodeSink::Protos(nodes) => {
                for node in nodes {
                    prost::encoding::message::encode(NODE_TAG, &node, buf);
                    if buf.len() >= chunk {
                        out.write_all(buf)?;
                        buf.clear();
                    }
                }
            }
            NodeSink::Bytes { bytes, held } => {
                out.write_all(buf)?;
                buf.clear();
                let mut at = 0;
                for (offset, node) in held {
                    out.write_all(&bytes[at..offset])?;
                    prost::encoding::message::encode(NODE_TAG, &node, buf);
                    out.write_all(buf)?;
                    buf.clear();
                    at = offset;
                }
                out.write_all(&bytes[at..])?;
            }
        }
        Ok(())
    }
}

/// Small initialisers encoded straight into bytes, each as field [`INITIALIZER_TAG`]
/// of the graph (the bytes prost gives for its `TensorProto` there), interleaved with
/// the initialisers kept as messages (the graph's constants, whose data the writer
/// places): no message, name or data buffer is built for each of a big graph's
/// thousands of reshape targets and axes.
#[derive(Debug, Default)]
pub(super) struct InitBytes {
    /// The encoded initialisers, in order.
    pub bytes: Vec<u8>,
    /// For each initialiser message, in order, how many of `bytes` come before it; a
    /// message past the end of the list comes after all of them.
    marks: Vec<usize>,
}

impl InitBytes {
    /// Records that the next initialiser message comes after the bytes so far.
    pub(super) fn mark(&mut self) {
        self.marks.push(self.bytes.len());
    }

    /// How many of the bytes come before initialiser message `i`.
    pub(super) fn before(&self, i: usize) -> usize {
        self.marks.get(i).copied().unwrap_or(self.bytes.len())
    }

    /// Appends an int64 tensor of shape `dims` holding `v` (as `raw_data`), named
    /// `name`.
    pub(super) fn push_i64s(&mut self, name: &str, dims: &[i64], v: &[i64]) {
        let buf = &mut self.bytes;
        encode_key(INITIALIZER_TAG, WireType::LengthDelimited, buf);
        let at = open_len(buf);
        if !dims.is_empty() {
            encode_key(1, WireType::LengthDelimited, buf);
            encode_varint(packed_len(dims) as u64, buf);
            for &d in dims {
                encode_varint(d as u64, buf);
            }
        }
        encode_key(2, WireType::Varint, buf);
        encode_varint(data_type::INT64 as u64, buf);
        put_str(8, name, buf);
        if !v.is_empty() {
            encode_key(9, WireType::LengthDelimited, buf);
            encode_varint(8 * v.len() as u64, buf);
            for &x in v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        }
        close_len(buf, at);
    }
}

/// An exported model before it is written: the model without its graph's nodes, the
/// nodes, and the constants' tensors.
pub(super) struct Exported {
    /// The model; its graph's `node` list is empty (the nodes are in `nodes`), and the
    /// initialisers of `payloads` have no data yet.
    pub model: ModelProto,
    /// The graph's nodes, in order.
    pub nodes: NodeSink,
    /// Initialisers encoded already, around those of the model's graph.
    pub inits: InitBytes,
    /// The graph's constants as `(initializer index, tensor)`, for the writer to place
    /// inline or in external data without copying them first.
    pub payloads: Vec<(usize, Tensor)>,
}

/// Fills the `raw_data` of the initialisers `payloads` name.
pub(super) fn fill_inline(inits: &mut [TensorProto], payloads: Vec<(usize, Tensor)>) {
    for (i, t) in payloads {
        if let Some(p) = inits.get_mut(i) {
            p.raw_data = t.to_raw_bytes();
        }
    }
}
