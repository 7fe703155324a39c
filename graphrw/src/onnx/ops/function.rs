//! Fused ops as model-local ONNX functions, both ways.
//!
//! **Export:** a fused op with a standard ONNX form (`fused.layer_norm` as
//! `LayerNormalization`, `fused.rms_norm` as `RMSNormalization`, the GELUs as `Gelu`,
//! `fused.rotary_embedding` as `RotaryEmbedding` where that is exact, `rotary.rs`) is
//! written as that op; any other op with a decomposition becomes a call of a function in
//! domain [`FUNCTION_DOMAIN`] whose body is the decomposition, one function per distinct
//! body.
//!
//! **Import:** model-local ONNX functions: every call of a function the model defines
//! (a node whose `(domain, op_type)` is a function's `(domain, name)`) is replaced by
//! the function's body, its values renamed apart, before the graph is imported.

use crate::builder::Builder;
use crate::graph::NodeId;
use crate::graph::Value;
use crate::onnx::dialect::FUNCTION_DOMAIN;
use crate::onnx::encode::fill_inline;
use crate::onnx::encode::NodeSink;
use crate::onnx::proto::{FunctionProto, GraphProto, ModelProto, NodeProto};
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::OnnxError;
use crate::ops::{AttrValue, GeluApproximation};
use prost::Message;
use std::collections::HashMap;
use std::collections::HashSet;
use std::fmt::Write as _;

impl<'g> Exporter<'g> {
    /// Writes a fused op as its standard ONNX op when it has one and the node has the
    /// usual form; false when it does not.
    pub(crate) fn standard_fused(
        &mut self,
        id: NodeId,
        ins: &[Name],
        outs: &[Name],
    ) -> Result<bool, OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        if outs.len() != 1 {
            return Ok(false);
        }
        // The epsilon: the op's float attribute named like `eps`.
        let eps = node
            .attrs()
            .iter()
            .find(|(n, _)| n.contains("eps"))
            .and_then(|(_, v)| match v {
                AttrValue::Float(f) => Some(*f),
                _ => None,
            });
        match (node.op_name(), ins.len(), eps) {
            ("fused.layer_norm", 2 | 3, Some(eps)) => self.push(
                "LayerNormalization",
                ins,
                outs,
                &[a_int("axis", -1), a_float("epsilon", eps)],
            ),
            ("fused.rms_norm", 2, Some(eps)) => {
                self.opset = self.opset.max(23);
                self.push(
                    "RMSNormalization",
                    ins,
                    outs,
                    &[a_int("axis", -1), a_float("epsilon", eps)],
                );
            }
            ("fused.rotary_embedding", 3, _) => return self.standard_rotary(id, ins, outs),
            ("fused.gelu_erf" | "fused.gelu_tanh", 1, _) => {
                self.opset = self.opset.max(20);
                let approximate = if node.op_name() == "fused.gelu_tanh" {
                    GeluApproximation::Tanh
                } else {
                    GeluApproximation::None
                }
                .word();
                self.push("Gelu", ins, outs, &[a_str("approximate", approximate)]);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Writes node `id` as a call of a model-local function whose body is the op's
    /// decomposition for this node's operands and attributes.
    pub(crate) fn function_call(
        &mut self,
        id: NodeId,
        ins: Names8,
        outs: Names8,
    ) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let Some(decompose) = node.op().decompose else {
            return Err(self.err("the op has no decomposition"));
        };
        // The body depends only on the op, the operands' metadata and the attributes:
        // a node like one written before calls the same function, without building
        // and encoding the body again (a big graph has thousands of such nodes).
        let mut call_key = format!("{:p} {}", node.op(), node.op_name());
        for &v in node.operands() {
            let _ = write!(call_key, " {:?}", self.meta(v)?);
        }
        for (n, v) in node.attrs().iter() {
            let _ = write!(call_key, " {n}={v:?}");
        }
        if let Some(name) = self.function_calls.get(&call_key).cloned() {
            let node_name = self.node_name();
            self.push_named(node_name, &name, FUNCTION_DOMAIN, &ins, &outs, &[]);
            return Ok(());
        }
        let b = Builder::new();
        let params: Vec<Value> = node
            .operands()
            .iter()
            .enumerate()
            .map(|(i, &v)| Ok(b.input(&format!("in{i}"), self.meta(v)?).value()))
            .collect::<Result<_, OnnxError>>()?;
        let results = decompose(&b, &params, &node.attrs())
            .map_err(|e| self.err(format!("its decomposition failed: {e}")))?;
        let named = results
            .iter()
            .enumerate()
            .map(|(i, &v)| (format!("out{i}"), v))
            .collect();
        let mut body = b.finish();
        body.set_named_outputs(named).map_err(OnnxError::verify)?;
        body.remove_dead();
        let order = crate::verify::verify_ordered(&body)
            .map_err(|e| self.err(format!("its decomposition: {e}")))?;

        let mut child = Exporter::new(&body, order);
        child.functions = std::mem::take(&mut self.functions);
        child.function_names = std::mem::take(&mut self.function_names);
        let written = child.function_body();
        self.functions = std::mem::take(&mut child.functions);
        self.function_names = std::mem::take(&mut child.function_names);
        let mut f = written?;
        self.opset = self.opset.max(child.opset);
        f.doc_string = node.op().doc.to_string();
        let key = f.encode_to_vec();
        let name = match self.function_names.get(&key) {
            Some(n) => n.clone(),
            None => {
                let base: String = node
                    .op_name()
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                let taken: HashSet<&str> = self.functions.iter().map(|f| f.name.as_str()).collect();
                let mut n = base.clone();
                let mut k = 2;
                while taken.contains(n.as_str()) {
                    n = format!("{base}_{k}");
                    k += 1;
                }
                f.name = n.clone();
                self.function_names.insert(key, n.clone());
                self.functions.push(f);
                n
            }
        };
        let node_name = self.node_name();
        self.push_named(node_name, &name, FUNCTION_DOMAIN, &ins, &outs, &[]);
        self.function_calls.insert(call_key, name);
        Ok(())
    }

    /// This exporter's graph as a function body (unnamed): constants become `Constant`
    /// nodes (functions have no initialisers).
    pub(crate) fn function_body(&mut self) -> Result<FunctionProto, OnnxError> {
        self.reserve_io()?;
        let order = std::mem::take(&mut self.order);
        for id in order {
            self.node(id)?;
        }
        self.write_identities();
        let payloads = std::mem::take(&mut self.payloads);
        fill_inline(&mut self.inits, payloads);
        let mut nodes: Vec<NodeProto> = std::mem::take(&mut self.inits)
            .into_iter()
            .map(|t| NodeProto {
                output: vec![t.name.clone()],
                name: format!("{}/const", t.name),
                op_type: "Constant".into(),
                attribute: vec![a_tensor("value", t)],
                ..Default::default()
            })
            .collect();
        if let NodeSink::Protos(own) = &mut self.nodes {
            nodes.append(own);
        }
        let input = self
            .graph
            .inputs()
            .iter()
            .map(|&id| self.input_name(id))
            .collect();
        Ok(FunctionProto {
            name: String::new(),
            input,
            output: self.graph.output_names().to_vec(),
            node: nodes,
            domain: FUNCTION_DOMAIN.into(),
            ..Default::default()
        })
    }
}

/// How deeply function calls may nest (a function calling itself is an error).
pub const MAX_FUNCTION_DEPTH: usize = 16;

/// `graph` with every call of one of `model`'s functions inlined; `None` when the model
/// defines no functions.
pub fn inline_functions(
    model: &ModelProto,
    graph: &GraphProto,
) -> Result<Option<GraphProto>, OnnxError> {
    if model.functions.is_empty() {
        return Ok(None);
    }
    let mut table: HashMap<(&str, &str), &FunctionProto> = HashMap::new();
    for f in &model.functions {
        if table
            .insert((f.domain.as_str(), f.name.as_str()), f)
            .is_some()
        {
            return Err(OnnxError::Model(format!(
                "function `{}` of domain `{}` is defined twice",
                f.name, f.domain
            )));
        }
    }
    let mut out = graph.clone();
    out.node = Vec::with_capacity(graph.node.len());
    let mut calls = 0usize;
    for n in &graph.node {
        expand(n, &table, &mut out.node, 0, &mut calls)?;
    }
    Ok(Some(out))
}

fn expand(
    n: &NodeProto,
    table: &HashMap<(&str, &str), &FunctionProto>,
    out: &mut Vec<NodeProto>,
    depth: usize,
    calls: &mut usize,
) -> Result<(), OnnxError> {
    let Some(f) = table.get(&(n.domain.as_str(), n.op_type.as_str())) else {
        out.push(n.clone());
        return Ok(());
    };
    let caller = if n.name.is_empty() {
        &n.op_type
    } else {
        &n.name
    };
    if depth >= MAX_FUNCTION_DEPTH {
        return Err(OnnxError::node(
            &n.op_type,
            caller,
            format!("function calls nest deeper than {MAX_FUNCTION_DEPTH} (a recursive function?)"),
        ));
    }
    if n.input.len() > f.input.len() || n.output.len() > f.output.len() {
        return Err(OnnxError::node(
            &n.op_type,
            caller,
            format!(
                "calls function `{}` ({} inputs, {} outputs) with {} inputs and {} outputs",
                f.name,
                f.input.len(),
                f.output.len(),
                n.input.len(),
                n.output.len()
            ),
        ));
    }
    *calls += 1;
    let prefix = format!("{caller}/{}#{}", f.name, calls);
    let mut rename: HashMap<&str, String> = HashMap::new();
    for (i, p) in f.input.iter().enumerate() {
        rename.insert(p, n.input.get(i).cloned().unwrap_or_default());
    }
    for (i, p) in f.output.iter().enumerate() {
        let name = match n.output.get(i) {
            Some(o) if !o.is_empty() => o.clone(),
            _ => format!("{prefix}/{p}"),
        };
        rename.insert(p, name);
    }
    let map = |name: &String| -> String {
        if name.is_empty() {
            return String::new();
        }
        rename
            .get(name.as_str())
            .cloned()
            .unwrap_or_else(|| format!("{prefix}/{name}"))
    };
    for b in &f.node {
        let mut b2 = b.clone();
        b2.input = b.input.iter().map(map).collect();
        b2.output = b.output.iter().map(map).collect();
        b2.name = format!("{prefix}/{}", b.name);
        expand(&b2, table, out, depth + 1, calls)?;
    }
    Ok(())
}
