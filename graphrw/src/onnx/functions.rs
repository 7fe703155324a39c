//! Model-local ONNX functions on import: every call of a function the model defines
//! (a node whose `(domain, op_type)` is a function's `(domain, name)`) is replaced by
//! the function's body, its values renamed apart, before the graph is imported.

use std::collections::HashMap;

use super::proto::{FunctionProto, GraphProto, ModelProto, NodeProto};
use super::OnnxError;

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
