//! A borrowing decoder for the loader's fast route: the model is read straight from the
//! input bytes (the memory-mapped file), one node at a time, without building a whole
//! `ModelProto`.
//!
//! - [`scan_model`] walks the model and its graph once: every field but the graph's
//!   nodes goes through prost as usual (they are few), the nodes are kept as slices of
//!   the input, and an initialiser's `raw_data` of at least a given size is left out
//!   of its `TensorProto` and kept as a byte range of the input instead (the loader
//!   maps it in place).
//! - [`NodeScratch::decode`] reads one node: its names are `&str` slices of the input,
//!   its attributes decoded by prost into messages reused from node to node, so a node
//!   costs no allocation once the scratch has grown.
//! - [`NodeReader::fill`] reads the next nodes into a [`Batch`] and numbers their value
//!   names ([`Numbering`]): an operand read before it is defined, or an output defined
//!   twice, is refused there. The loader runs it on a second thread for big graphs.
//!
//! The decoder is strict: anything it does not read exactly as prost would (a group,
//! a wrong wire type on a known field, a varint past 64 bits, a length past the end, a
//! string that is not UTF-8, a subgraph, the graph field given twice) is [`Refused`],
//! and the loader then takes the plain route (prost's decoder and `from_model`), which
//! reads the model or says what is wrong with it. So the fast route never decides an
//! error message, and never reads a model differently from the plain route.

use super::name_key::NameKey;
use foldhash::HashMap as FastMap;
use prost::Message;

use super::proto::{AttributeProto, GraphProto, ModelProto, StringStringEntryProto, TensorProto};

/// The input is not one the fast route reads; the plain route decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused;

type Result<T> = std::result::Result<T, Refused>;

/// Wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// One field of a message: its tag, wire type, payload (for `LEN` fields; empty
/// otherwise) and its whole bytes, key included.
#[derive(Clone, Copy)]
pub(crate) struct Field<'a> {
    pub tag: u32,
    pub wire: u8,
    pub payload: &'a [u8],
    pub whole: &'a [u8],
}

/// The fields of one message, in order.
pub(crate) struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes, pos: 0 }
    }

    /// Reads a varint as prost does: at most ten bytes, the tenth at most 1.
    fn varint(&mut self) -> Result<u64> {
        // One byte: keys and the lengths of names.
        if let Some(&b) = self.bytes.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        let mut value = 0u64;
        for i in 0..10 {
            let b = *self.bytes.get(self.pos).ok_or(Refused)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(Refused);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(Refused)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Refused)?;
        let s = self.bytes.get(self.pos..end).ok_or(Refused)?;
        self.pos = end;
        Ok(s)
    }

    /// The next field, `None` at the end.
    pub(crate) fn next_field(&mut self) -> Result<Option<Field<'a>>> {
        if self.pos >= self.bytes.len() {
            return Ok(None);
        }
        let start = self.pos;
        let key = self.varint()?;
        if key > u64::from(u32::MAX) {
            return Err(Refused);
        }
        let tag = (key >> 3) as u32;
        if tag == 0 {
            return Err(Refused);
        }
        let wire = (key & 7) as u8;
        let payload: &[u8] = match wire {
            VARINT => {
                self.varint()?;
                &[]
            }
            FIXED64 => {
                self.take(8)?;
                &[]
            }
            FIXED32 => {
                self.take(4)?;
                &[]
            }
            LEN => {
                let len = usize::try_from(self.varint()?).map_err(|_| Refused)?;
                self.take(len)?
            }
            // Groups (prost skips them, but they are nowhere in ONNX) and invalid types.
            _ => return Err(Refused),
        };
        let whole = self.bytes.get(start..self.pos).ok_or(Refused)?;
        Ok(Some(Field {
            tag,
            wire,
            payload,
            whole,
        }))
    }

    /// Byte offset of `payload` within the bytes this reader was made over.
    fn offset_of(&self, payload: &[u8]) -> usize {
        payload.as_ptr() as usize - self.bytes.as_ptr() as usize
    }
}

/// A `LEN` field's payload as UTF-8.
fn utf8<'a>(f: &Field<'a>) -> Result<&'a str> {
    if f.wire != LEN {
        return Err(Refused);
    }
    std::str::from_utf8(f.payload).map_err(|_| Refused)
}

/// A `LEN` field's payload as UTF-8, cut out of `text` (the whole message's bytes, when
/// they are UTF-8 themselves, which `base` starts) where it can be: one check of a
/// node's bytes instead of one per name. A payload is UTF-8 exactly when it lies on
/// char boundaries of a UTF-8 whole, so a cut that fails is checked on its own, and
/// the answer is always `utf8`'s.
fn utf8_in<'a>(f: &Field<'a>, text: Option<&'a str>, base: &'a [u8]) -> Result<&'a str> {
    if f.wire != LEN {
        return Err(Refused);
    }
    let offset = (f.payload.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
    match text.and_then(|t| t.get(offset..offset.checked_add(f.payload.len())?)) {
        Some(s) if s.len() == f.payload.len() && s.as_ptr() == f.payload.as_ptr() => Ok(s),
        _ => utf8(f),
    }
}

/// `ModelProto.graph`, `GraphProto.node`, `GraphProto.initializer`,
/// `TensorProto.raw_data`.
const MODEL_GRAPH: u32 = 7;
const GRAPH_NODE: u32 = 1;
const GRAPH_INITIALIZER: u32 = 5;
const TENSOR_RAW_DATA: u32 = 9;

/// A model read by [`scan_model`].
pub(crate) struct ScannedModel<'a> {
    /// Every field of the model but its graph.
    pub head: ModelProto,
    /// Every field of the graph but its nodes (initialisers without the `raw_data`
    /// left in `raw`).
    pub graph: GraphProto,
    /// The graph's nodes, each the bytes of one `NodeProto`.
    pub nodes: Vec<&'a [u8]>,
    /// Per initialiser (same index as `graph.initializer`), the byte range
    /// `(offset, len)` of the input that holds its `raw_data`, when it was left out.
    pub raw: Vec<Option<(usize, usize)>>,
}

/// Reads a model's fields and its graph's fields, keeping the nodes as slices and
/// each initialiser's `raw_data` of at least `raw_from` bytes as a range of `bytes`.
/// Refused for a model without a graph, with the graph given twice (protobuf would
/// merge them), or anything malformed.
pub(crate) fn scan_model(bytes: &[u8], raw_from: usize) -> Result<ScannedModel<'_>> {
    let mut head = ModelProto::default();
    let mut graph_bytes = None;
    let mut fields = Fields::new(bytes);
    while let Some(f) = fields.next_field()? {
        if f.tag == MODEL_GRAPH {
            if graph_bytes.is_some() || f.wire != LEN {
                return Err(Refused);
            }
            graph_bytes = Some(f.payload);
        } else {
            head.merge(f.whole).map_err(|_| Refused)?;
        }
    }
    let graph_bytes = graph_bytes.ok_or(Refused)?;
    let mut graph = GraphProto::default();
    let mut count = 0;
    let mut fields = Fields::new(graph_bytes);
    while let Some(f) = fields.next_field()? {
        count += usize::from(f.tag == GRAPH_NODE);
    }
    let mut nodes = Vec::with_capacity(count);
    let mut raw = Vec::new();
    let mut fields = Fields::new(graph_bytes);
    while let Some(f) = fields.next_field()? {
        match f.tag {
            GRAPH_NODE => {
                if f.wire != LEN {
                    return Err(Refused);
                }
                nodes.push(f.payload);
            }
            GRAPH_INITIALIZER => {
                if f.wire != LEN {
                    return Err(Refused);
                }
                let (tensor, range) = initializer(f.payload, raw_from)?;
                graph.initializer.push(tensor);
                let base = graph_bytes.as_ptr() as usize - bytes.as_ptr() as usize;
                raw.push(range.map(|(o, l)| (base + fields.offset_of(f.payload) + o, l)));
            }
            _ => graph.merge(f.whole).map_err(|_| Refused)?,
        }
    }
    Ok(ScannedModel {
        head,
        graph,
        nodes,
        raw,
    })
}

/// One initialiser; its `raw_data`, when at least `raw_from` bytes, is left out and
/// returned as a range of `payload` (the last occurrence wins, as in protobuf).
pub(crate) fn initializer(
    payload: &[u8],
    raw_from: usize,
) -> Result<(TensorProto, Option<(usize, usize)>)> {
    let mut last_raw = None;
    let mut fields = Fields::new(payload);
    while let Some(f) = fields.next_field()? {
        if f.tag == TENSOR_RAW_DATA {
            if f.wire != LEN {
                return Err(Refused);
            }
            last_raw = Some(f.payload);
        }
    }
    match last_raw {
        Some(r) if r.len() >= raw_from => {
            let mut tensor = TensorProto::default();
            let mut fields = Fields::new(payload);
            while let Some(f) = fields.next_field()? {
                if f.tag != TENSOR_RAW_DATA {
                    tensor.merge(f.whole).map_err(|_| Refused)?;
                }
            }
            let offset = r.as_ptr() as usize - payload.as_ptr() as usize;
            Ok((tensor, Some((offset, r.len()))))
        }
        _ => Ok((TensorProto::decode(payload).map_err(|_| Refused)?, None)),
    }
}

/// `NodeProto` fields.
const NODE_INPUT: u32 = 1;
const NODE_OUTPUT: u32 = 2;
const NODE_NAME: u32 = 3;
const NODE_OP_TYPE: u32 = 4;
const NODE_ATTRIBUTE: u32 = 5;
const NODE_DOC_STRING: u32 = 6;
const NODE_DOMAIN: u32 = 7;
const NODE_OVERLOAD: u32 = 8;
const NODE_METADATA: u32 = 9;

/// One node as the importer reads it, decoded into buffers reused from node to node.
#[derive(Default)]
pub(crate) struct NodeScratch<'a> {
    pub input: Vec<&'a str>,
    pub output: Vec<&'a str>,
    pub name: &'a str,
    pub op_type: &'a str,
    pub domain: &'a str,
    attribute: Vec<AttributeProto>,
    attributes: usize,
}

impl<'a> NodeScratch<'a> {
    /// The attributes of the node last decoded.
    #[cfg(test)]
    pub(crate) fn attribute(&self) -> &[AttributeProto] {
        &self.attribute[..self.attributes]
    }

    /// Decodes the node `bytes` (a `NodeProto`). Refused for malformed bytes and for a
    /// node with a subgraph (the plain route reads those, with their captures).
    pub(crate) fn decode(&mut self, bytes: &'a [u8]) -> Result<()> {
        self.input.clear();
        self.output.clear();
        self.name = "";
        self.op_type = "";
        self.domain = "";
        self.attributes = 0;
        // A node without attributes of big numbers is ASCII throughout (keys, short
        // lengths and names): checked once here, its names are cut out of it.
        let text = std::str::from_utf8(bytes).ok();
        let utf8 = |f: &Field<'a>| utf8_in(f, text, bytes);
        let mut fields = Fields::new(bytes);
        while let Some(f) = fields.next_field()? {
            match f.tag {
                NODE_INPUT => self.input.push(utf8(&f)?),
                NODE_OUTPUT => self.output.push(utf8(&f)?),
                NODE_NAME => self.name = utf8(&f)?,
                NODE_OP_TYPE => self.op_type = utf8(&f)?,
                NODE_DOMAIN => self.domain = utf8(&f)?,
                NODE_DOC_STRING | NODE_OVERLOAD => {
                    utf8(&f)?;
                }
                NODE_METADATA => {
                    if f.wire != LEN {
                        return Err(Refused);
                    }
                    StringStringEntryProto::decode(f.payload).map_err(|_| Refused)?;
                }
                NODE_ATTRIBUTE => {
                    if f.wire != LEN {
                        return Err(Refused);
                    }
                    if self.attributes == self.attribute.len() {
                        self.attribute.push(AttributeProto::default());
                    }
                    let a = &mut self.attribute[self.attributes];
                    a.clear();
                    a.merge(f.payload).map_err(|_| Refused)?;
                    if a.g.is_some() || !a.graphs.is_empty() {
                        return Err(Refused);
                    }
                    self.attributes += 1;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The number of an absent (empty) name in [`Batch`]'s lists.
pub(crate) const ABSENT: u32 = u32::MAX;

/// Every value name of a graph numbered in order of definition: the names defined
/// before the nodes (graph inputs, initialisers) first, then each node's outputs as the
/// node is read. Numbering as the nodes are decoded takes the value-name hash map off
/// the importer's hands: it reads a node's operands by number from a vector.
pub(crate) struct Numbering<'a> {
    map: FastMap<NameKey<'a>, u32>,
    next: u32,
}

impl<'a> Numbering<'a> {
    /// The names defined before the nodes, numbered from 0 in order (a name given
    /// twice keeps its first number); room for `more` node outputs.
    pub(crate) fn new(predefined: impl IntoIterator<Item = &'a str>, more: usize) -> Numbering<'a> {
        let mut n = Numbering {
            map: FastMap::default(),
            next: 0,
        };
        let predefined = predefined.into_iter();
        n.map.reserve(predefined.size_hint().0 + more);
        for name in predefined {
            if let std::collections::hash_map::Entry::Vacant(e) = n.map.entry(NameKey(name)) {
                e.insert(n.next);
                n.next += 1;
            }
        }
        n
    }

    /// How many names are numbered.
    pub(crate) fn len(&self) -> usize {
        self.next as usize
    }

    /// The number of `name`, if it is defined.
    pub(crate) fn get(&self, name: &str) -> Option<u32> {
        self.map.get(&NameKey(name)).copied()
    }

    /// The number of an operand name: [`ABSENT`] for `""`; refused when undefined
    /// (the plain route sorts the nodes or says what is undefined).
    fn operand(&self, name: &str) -> Result<u32> {
        if name.is_empty() {
            return Ok(ABSENT);
        }
        self.get(name).ok_or(Refused)
    }

    /// A new number for a node output named `name`: [`ABSENT`] for `""`; refused when
    /// the name is already defined (the plain route says which definitions clash).
    fn define(&mut self, name: &'a str) -> Result<u32> {
        if name.is_empty() {
            return Ok(ABSENT);
        }
        match self.map.entry(NameKey(name)) {
            std::collections::hash_map::Entry::Occupied(_) => Err(Refused),
            std::collections::hash_map::Entry::Vacant(e) => {
                let n = self.next;
                e.insert(n);
                self.next = n.checked_add(1).filter(|&m| m != ABSENT).ok_or(Refused)?;
                Ok(n)
            }
        }
    }
}

/// One node of a [`Batch`]: its names, and where its lists lie in the batch.
#[derive(Clone, Copy)]
pub(crate) struct BatchNode<'a> {
    /// The node's index in the graph.
    pub index: usize,
    /// The `NodeProto`'s bytes.
    pub bytes: &'a [u8],
    pub name: &'a str,
    pub op_type: &'a str,
    pub domain: &'a str,
    inputs: (u32, u32),
    outputs: (u32, u32),
    attributes: (u32, u32),
}

/// Consecutive nodes of a graph, decoded, their value names numbered ([`Numbering`]).
/// Made by a [`NodeReader`], possibly on another thread, and reused batch after batch
/// (the attribute messages keep their buffers).
#[derive(Default)]
pub(crate) struct Batch<'a> {
    pub nodes: Vec<BatchNode<'a>>,
    /// Input names then output names, node after node.
    names: Vec<&'a str>,
    /// The number of each name in `names` ([`ABSENT`] for `""`).
    numbers: Vec<u32>,
    attribute: Vec<AttributeProto>,
    attributes: usize,
}

fn span<T>(list: &[T], (start, end): (u32, u32)) -> &[T] {
    list.get(start as usize..end as usize).unwrap_or(&[])
}

impl<'a> Batch<'a> {
    fn clear(&mut self) {
        self.nodes.clear();
        self.names.clear();
        self.numbers.clear();
        self.attributes = 0;
    }

    /// The input names of `node` (`""` for an absent optional input).
    pub(crate) fn inputs(&self, node: &BatchNode<'a>) -> &[&'a str] {
        span(&self.names, node.inputs)
    }

    /// The numbers of `node`'s inputs.
    pub(crate) fn input_numbers(&self, node: &BatchNode<'a>) -> &[u32] {
        span(&self.numbers, node.inputs)
    }

    /// The output names of `node`.
    pub(crate) fn outputs(&self, node: &BatchNode<'a>) -> &[&'a str] {
        span(&self.names, node.outputs)
    }

    /// The numbers of `node`'s outputs.
    pub(crate) fn output_numbers(&self, node: &BatchNode<'a>) -> &[u32] {
        span(&self.numbers, node.outputs)
    }

    /// The attributes of `node`.
    pub(crate) fn attributes(&self, node: &BatchNode<'a>) -> &[AttributeProto] {
        span(&self.attribute[..self.attributes], node.attributes)
    }
}

/// Reads a graph's nodes into [`Batch`]es, numbering their value names.
pub(crate) struct NodeReader<'a> {
    nodes: &'a [&'a [u8]],
    next: usize,
    scratch: NodeScratch<'a>,
    numbering: Numbering<'a>,
}

impl<'a> NodeReader<'a> {
    /// A reader of `nodes` (each a `NodeProto`'s bytes), the names defined before them
    /// numbered by `numbering`.
    pub(crate) fn new(nodes: &'a [&'a [u8]], numbering: Numbering<'a>) -> NodeReader<'a> {
        NodeReader {
            nodes,
            next: 0,
            scratch: NodeScratch::default(),
            numbering,
        }
    }

    /// True when every node was read.
    pub(crate) fn done(&self) -> bool {
        self.next >= self.nodes.len()
    }

    /// Refills `batch` with the next nodes (at most `max`, at least one unless done).
    /// Refused for a node the fast route does not read, an input read before it is
    /// defined, or an output defined twice.
    pub(crate) fn fill(&mut self, batch: &mut Batch<'a>, max: usize) -> Result<()> {
        batch.clear();
        let end = self.nodes.len().min(self.next.saturating_add(max.max(1)));
        while self.next < end {
            let index = self.next;
            let bytes = self.nodes[index];
            self.next += 1;
            let s = &mut self.scratch;
            s.decode(bytes)?;
            let start = batch.names.len() as u32;
            for &name in &s.input {
                batch.names.push(name);
                batch.numbers.push(self.numbering.operand(name)?);
            }
            let mid = batch.names.len() as u32;
            for &name in &s.output {
                batch.names.push(name);
                batch.numbers.push(self.numbering.define(name)?);
            }
            let end_names = batch.names.len() as u32;
            let first = batch.attributes as u32;
            for a in &mut s.attribute[..s.attributes] {
                if batch.attributes == batch.attribute.len() {
                    batch.attribute.push(AttributeProto::default());
                }
                // Swapped, not cloned: the scratch takes the batch's old message (its
                // buffers reused by the next node that has as many attributes).
                std::mem::swap(a, &mut batch.attribute[batch.attributes]);
                batch.attributes += 1;
            }
            batch.nodes.push(BatchNode {
                index,
                bytes,
                name: s.name,
                op_type: s.op_type,
                domain: s.domain,
                inputs: (start, mid),
                outputs: (mid, end_names),
                attributes: (first, batch.attributes as u32),
            });
        }
        Ok(())
    }

    /// The numbering of every name read so far.
    pub(crate) fn into_numbering(self) -> Numbering<'a> {
        self.numbering
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::{NodeProto, TensorProto};

    fn node() -> NodeProto {
        NodeProto {
            input: vec!["x".into(), String::new(), "w".into()],
            output: vec!["y".into()],
            name: "n0".into(),
            op_type: "Gemm".into(),
            domain: "ai.onnx".into(),
            doc_string: "doc".into(),
            attribute: vec![AttributeProto {
                name: "alpha".into(),
                f: 2.0,
                r#type: 1,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_node_reads_as_prost_reads_it() {
        let n = node();
        let bytes = n.encode_to_vec();
        let mut s = NodeScratch::default();
        s.decode(&bytes).expect("a plain node decodes");
        assert_eq!(s.input, ["x", "", "w"]);
        assert_eq!(s.output, ["y"]);
        assert_eq!((s.name, s.op_type, s.domain), ("n0", "Gemm", "ai.onnx"));
        assert_eq!(s.attribute(), n.attribute.as_slice());
        // The scratch is reused: a second node leaves nothing of the first behind.
        let other = NodeProto {
            input: vec!["a".into()],
            op_type: "Relu".into(),
            ..Default::default()
        }
        .encode_to_vec();
        s.decode(&other).expect("decodes");
        assert_eq!(s.input, ["a"]);
        assert!(s.output.is_empty() && s.attribute().is_empty() && s.name.is_empty());
    }

    #[test]
    fn broken_or_unusual_nodes_are_refused() {
        let bytes = node().encode_to_vec();
        let mut s = NodeScratch::default();
        for cut in 1..bytes.len() {
            // Every cut either still parses (a field boundary) or is refused, and
            // agrees with prost on which.
            let ok = s.decode(&bytes[..cut]).is_ok();
            assert_eq!(ok, NodeProto::decode(&bytes[..cut]).is_ok(), "cut at {cut}");
        }
        // Not UTF-8, a group, a varint name field, an 11-byte varint.
        assert_eq!(s.decode(&[0x0a, 0x01, 0xff]), Err(Refused));
        assert_eq!(s.decode(&[0x0b, 0x0c]), Err(Refused));
        assert_eq!(s.decode(&[0x18, 0x01]), Err(Refused));
        assert_eq!(s.decode(&[0x80; 11]), Err(Refused));
        // The node's bytes are UTF-8 as a whole, but the input's payload ends inside a
        // char (0xc3 0xa8 is `è`; 0xa8 0x01 is the key of an unknown varint field): the
        // name alone is not UTF-8, as prost finds.
        let split = [0x0a, 0x01, 0xc3, 0xa8, 0x01, 0x00];
        assert!(std::str::from_utf8(&split).is_ok());
        assert!(NodeProto::decode(&split[..]).is_err());
        assert_eq!(s.decode(&split), Err(Refused));
        // Names that are UTF-8 but not ASCII are cut out of the node as they are.
        let wide = NodeProto {
            input: vec!["è".into(), "x".into()],
            output: vec!["ÿ🙂".into()],
            name: "nœud".into(),
            op_type: "Relu".into(),
            ..Default::default()
        };
        let bytes = wide.encode_to_vec();
        s.decode(&bytes).expect("decodes");
        assert_eq!(
            (s.input.as_slice(), s.output.as_slice()),
            (&["è", "x"][..], &["ÿ🙂"][..])
        );
        assert_eq!(s.name, "nœud");
        // A subgraph attribute.
        let sub = NodeProto {
            attribute: vec![AttributeProto {
                name: "body".into(),
                g: Some(Box::default()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(s.decode(&sub.encode_to_vec()), Err(Refused));
    }

    #[test]
    fn big_raw_data_is_left_out_as_a_range() {
        let t = TensorProto {
            dims: vec![4],
            data_type: 1,
            name: "w".into(),
            raw_data: (0u8..16).collect(),
            ..Default::default()
        };
        let payload = t.encode_to_vec();
        let (kept, range) = initializer(&payload, 16).expect("decodes");
        let (o, l) = range.expect("16 bytes are left out");
        assert_eq!(&payload[o..o + l], t.raw_data.as_slice());
        assert_eq!(
            kept,
            TensorProto {
                raw_data: Vec::new(),
                ..t.clone()
            }
        );
        let (whole, range) = initializer(&payload, 17).expect("decodes");
        assert_eq!((whole, range), (t, None));
    }
}
