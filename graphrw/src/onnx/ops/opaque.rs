//! Ops graphrw does not read, both ways: imported as `opaque` nodes that keep the node
//! as it came, exported byte for byte, upgraded where only the form changed between
//! opsets (`upgrade.rs`), refused where the meaning did.

use crate::graph::Foreign;
use crate::graph::NodeId;
use crate::graph::Value;
use crate::meta::DType;
use crate::meta::Shape;
use crate::meta::TensorMeta;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::load::value_info::{input_meta, modelled, placeholder};
use crate::onnx::proto::NodeProto;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::OnnxError;
use prost::Message;

impl<'m> Importer<'m> {
    /// Adds the ONNX node as an `opaque` node: its inputs (and the outer values its
    /// subgraphs read) as operands, its outputs with the metadata the model declares.
    pub(crate) fn opaque(&mut self, at: &At<'m, '_>) -> Result<(), OnnxError> {
        let decoded;
        let node: &NodeProto = match at.source {
            Source::Proto(n) => n,
            Source::Bytes(b) => {
                decoded = NodeProto::decode(b).map_err(|e| OnnxError::Decode {
                    what: format!("node {}", at.name),
                    message: e.to_string(),
                })?;
                &decoded
            }
        };
        let mut operands = Vec::with_capacity(at.input.len());
        let mut inputs = Vec::with_capacity(at.input.len());
        for (i, &name) in at.input.iter().enumerate() {
            inputs.push(!name.is_empty());
            if !name.is_empty() {
                operands.push(match at.known.get(i) {
                    Some(&Some(v)) => v,
                    _ => self.value(name, &at.name)?,
                });
            }
        }
        let captures: Vec<String> = crate::onnx::nesting::captures(node)
            .into_iter()
            .filter(|c| self.values.contains_key(c.as_str()) || self.inits.contains_key(c.as_str()))
            .collect();
        for c in &captures {
            let name: &'m str = self
                .values
                .get_key_value(c.as_str())
                .map(|(k, _)| *k)
                .or_else(|| self.inits.get_key_value(c.as_str()).map(|(k, _)| *k))
                .unwrap_or("");
            operands.push(self.value(name, &at.name)?);
        }
        let mut metas = Vec::with_capacity(at.output.len());
        let mut types = Vec::with_capacity(at.output.len());
        let mut outputs = Vec::with_capacity(at.output.len());
        for &name in at.output {
            outputs.push(!name.is_empty());
            if name.is_empty() {
                continue;
            }
            let (meta, ty) = match self.declared.get(name) {
                Some(vi) if modelled(vi) => (input_meta(vi)?, None),
                Some(vi) => {
                    let (m, t) = placeholder(vi);
                    (m, Some(t))
                }
                None => (
                    TensorMeta::new(DType::F32, Shape::default()),
                    Some(Vec::new()),
                ),
            };
            metas.push(meta);
            types.push(ty);
        }
        let domain = if at.domain == "ai.onnx" {
            ""
        } else {
            at.domain
        };
        let stripped = NodeProto {
            op_type: node.op_type.clone(),
            domain: node.domain.clone(),
            overload: node.overload.clone(),
            attribute: node.attribute.clone(),
            doc_string: node.doc_string.clone(),
            metadata_props: node.metadata_props.clone(),
            ..Default::default()
        };
        let foreign = Foreign {
            node: stripped.encode_to_vec(),
            opset: self.opsets.get(domain).copied().unwrap_or(0),
            inputs,
            outputs,
            captures,
            types,
        };
        let id = self.graph.add_opaque(
            at.op_type,
            domain,
            operands,
            metas,
            foreign,
            Some(at.name.to_string()),
        );
        let present = at.output.iter().enumerate().filter(|(_, o)| !o.is_empty());
        for (o, (j, &name)) in present.enumerate() {
            self.name_output(at, j, name, Value::new(id, o as u32))?;
        }
        Ok(())
    }
}

impl<'g> Exporter<'g> {
    /// Writes an opaque node back as it came: its recorded op type, domain and
    /// attributes, empty input and output slots where the source had them, and an
    /// `Identity` for each outer value its subgraphs read under another name.
    pub(crate) fn opaque(
        &mut self,
        id: NodeId,
        ins: Names8,
        outs: Names8,
    ) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let f = node
            .foreign()
            .ok_or_else(|| self.err("an opaque node without its foreign record"))?;
        let mut proto = NodeProto::decode(f.node.as_slice())
            .map_err(|e| self.err(format!("its recorded ONNX node does not decode: {e}")))?;
        let first = ins.len().saturating_sub(f.captures.len());
        let (own, captured) = ins.split_at(first);
        let mut own = own.iter();
        proto.input = f
            .inputs
            .iter()
            .map(|&present| match present {
                true => own.next().map_or("", |&n| self.s(n)).to_string(),
                false => String::new(),
            })
            .collect();
        for (o, &name) in outs.iter().enumerate() {
            let name = self.s(name);
            let vi = self.value_info_of(Value::new(id, o as u32), name)?;
            if vi.r#type.is_some() && !self.graph.output_names().iter().any(|n| n == name) {
                self.value_infos.push(vi);
            }
        }
        let mut outs = outs.iter();
        proto.output = f
            .outputs
            .iter()
            .map(|&present| match present {
                true => outs.next().map_or("", |&n| self.s(n)).to_string(),
                false => String::new(),
            })
            .collect();
        for (c, &have) in f.captures.iter().zip(captured) {
            if c != self.s(have) {
                let c = self.arena.add(c);
                self.push("Identity", &[have], &[c], &[]);
            }
        }
        proto.name = unique(&mut self.node_names, &self.cur);
        let domain = if proto.domain == "ai.onnx" {
            ""
        } else {
            proto.domain.as_str()
        };
        if domain.is_empty() {
            // Never below the node's own opset (its meaning there is what it has).
            self.opset = self.opset.max(f.opset);
            let key = self.nodes.push_held(proto);
            self.pinned.push((key, f.opset, id));
            return Ok(());
        } else {
            let have = *self.domains.entry(domain.to_string()).or_insert(f.opset);
            if have != f.opset {
                return Err(self.err(format!(
                    "domain `{domain}` is imported at opset {have} by another node and {} by this one",
                    f.opset
                )));
            }
        }
        self.nodes.push_proto(proto);
        Ok(())
    }

    /// Brings the opaque default-domain node `nodes[at]`, read at opset `from`, to the
    /// opset written: unchanged where its op kept its meaning, through the upgrades of
    /// [`crate::onnx::upgrade`] where only the form changed, else an error.
    pub(crate) fn upgrade(&mut self, at: usize, from: i64, id: NodeId) -> Result<(), OnnxError> {
        let to = self.opset;
        let Some(mut node) = self.nodes.held_mut(at).map(|n| n.clone()) else {
            return Ok(());
        };
        if crate::onnx::schemas::removed_by(&node.op_type, to) {
            return Err(OnnxError::node(
                &node.op_type,
                &node.name,
                format!("read at opset {from}, this op no longer exists at opset {to}, which graphrw writes; convert the model with onnx.version_converter"),
            ));
        }
        let Some(steps) = crate::onnx::schemas::barriers(&node.op_type, from, to) else {
            return Ok(()); // Not a standard op: written as it came.
        };
        let graph = self.graph;
        let gnode = graph.try_node(id).map_err(OnnxError::verify)?;
        let meta = |i: usize| {
            gnode
                .operands()
                .get(i)
                .filter(|v| {
                    graph
                        .node(v.node)
                        .is_some_and(|n| n.is_known(v.output as usize))
                })
                .and_then(|&v| graph.meta(v).ok())
        };
        let dtype = meta(0).map(|m| m.dtype);
        let ranks = [meta(0).map(TensorMeta::rank), meta(1).map(TensorMeta::rank)];
        let base = node.name.clone();
        let taken = &mut self.taken;
        let mut fresh = |what: &str| unique(taken, &format!("{base}/{what}"));
        let mut ctx = crate::onnx::upgrade::Ctx {
            dtype,
            ranks,
            fresh: &mut fresh,
            inits: &mut self.inits,
        };
        for v in steps {
            crate::onnx::upgrade::step(&mut node, v, &mut ctx).map_err(|why| {
                OnnxError::node(
                    &node.op_type,
                    &node.name,
                    format!("read at opset {from}, it changed meaning at opset {v} (graphrw writes {to}): {why}; convert the model with onnx.version_converter"),
                )
            })?;
        }
        if let Some(n) = self.nodes.held_mut(at) {
            *n = node;
        }
        Ok(())
    }
}
