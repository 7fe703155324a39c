//! ONNX export: a [`Graph`] becomes a valid ONNX model again.
//!
//! Nodes are written in the printer's deterministic topological order, so that
//! `load(save(g))` prints the same program as `g`. Constants become initialisers, with
//! `raw_data` or in external data (see [`save_with`] and [`super::external`]), named
//! after the initialiser they came from when there is one; graph
//! inputs and outputs keep their names. Vocabulary ops map onto ONNX opset 18 ops
//! (`permute` to `Transpose`, `slice` to `Slice` with constant bounds, ...), through the
//! mapping table the importer reads too (`table/mod.rs`) where one op is one op; a few ops
//! need newer opsets and raise the model's opset: `gelu` (`Gelu`, 20), `rms_norm`
//! (`RMSNormalization`, 23) and `scaled_dot_product_attention`, written as the
//! standard ONNX `Attention` op (23). The IR version stays 10 so that current
//! onnxruntime loads the model.
//!
//! onnxruntime's CPU `Attention` kernel rejects a mask without its full query dim (a
//! padding mask `(B, 1, 1, Skv)`), so such a mask is first expanded to
//! `(.., .., Sq, Skv)` by an `Expand` node named `<attention node>/mask_expand`; the
//! importer recognises that node and gives the attention its original mask back. When
//! the query length is symbolic the mask is written as it is.
//!
//! Opaque nodes are written back as they came (attributes byte for byte), with their
//! domain's opset imported. One from the default domain read at an older opset is
//! written unchanged where its op kept its meaning up to the opset written (the schema
//! table of `schemas.rs`), upgraded where only the form changed (attributes that became
//! inputs, `upgrade.rs`), and refused otherwise, naming the op and the opsets; the
//! model's opset is never below such a node's own.
//!
//! [`save`], [`save_with`] and [`to_bytes`] encode each node as it is written, straight
//! from the graph into one byte buffer (`encode.rs`), with every name the exporter gives
//! kept as a span of one string: no `NodeProto` of owned strings is built for a big
//! graph. Small int64 initialisers (reshape targets, axes, slice bounds) are encoded
//! straight to bytes the same way (`encode::InitBytes`). [`to_model`] builds the prost
//! messages from the same exporter; both give the same bytes (`tests/onnx_encode.rs`,
//! and the table round trip).
//!
//! Every writer verifies the graph first. From a few thousand nodes up the verifier's
//! checks run on a second thread while the exporter writes the nodes in the same
//! topological order a little behind it, reading only nodes that checked out
//! (`verify::verify_ordered_with`); a graph with any problem is refused with the error
//! `graphrw::verify` gives (`tests/onnx_save_verify.rs`).
//!
//! Fused ops (the generated kernels' `fused.*` ops, user ops declared `like` a
//! decomposition, the tile executor's `fused.elementwise_group`) are written as their
//! standard ONNX op where one exists (`fused.layer_norm` as `LayerNormalization`,
//! `fused.rms_norm` as `RMSNormalization`, `fused.gelu_erf`/`fused.gelu_tanh` as
//! `Gelu`, `fused.rotary_embedding` as `RotaryEmbedding` where its caches provably
//! have equal halves, `ops/rotary.rs`), and otherwise as a call of a model-local ONNX function in domain
//! [`FUNCTION_DOMAIN`](super::FUNCTION_DOMAIN) whose body is the op's decomposition (one function per distinct
//! body), so that onnxruntime still runs the model; [`load`](super::load) inlines such
//! functions back.

use std::path::Path;

use super::encode::{fill_inline, Exported, InitBytes, NodeSink};
use super::external::{SaveOptions, Saved};
use super::proto::ModelProto;
use super::OnnxError;
use crate::graph::{Graph, NodeId};
use crate::verify::Gate;

mod attrs;
pub(crate) mod exporter;
pub(crate) mod names;

use exporter::*;
use names::*;

/// Writes `graph` as an ONNX model file, keeping the weights' layout
/// ([`WeightLayout::Keep`](super::WeightLayout::Keep)): constants mapped from external data go to
/// `<file name>.data` next to the model, by copying their file ranges; a graph with no
/// such constants is written as one file. A model that would not fit protobuf's 2 GiB
/// limit is refused, never written corrupt. See [`save_with`] for the options.
///
/// ```no_run
/// let graph = graphrw::onnx::load("model.onnx")?;
/// graphrw::onnx::save(&graph, "out.onnx")?;
/// # Ok::<(), graphrw::onnx::OnnxError>(())
/// ```
pub fn save(graph: &Graph, path: impl AsRef<Path>) -> Result<(), OnnxError> {
    save_with(graph, path, &SaveOptions::default()).map(|_| ())
}

/// Writes `graph` as an ONNX model file with the given weight layout, and says where
/// the bytes went. See [`super::external`] for the external data layout.
///
/// ```no_run
/// use graphrw::onnx::{save_with, SaveOptions, WeightLayout};
/// let graph = graphrw::onnx::load("model.onnx")?;
/// let options = SaveOptions { layout: WeightLayout::External, ..SaveOptions::default() };
/// let saved = save_with(&graph, "out.onnx", &options)?;
/// println!("{saved}");
/// # Ok::<(), graphrw::onnx::OnnxError>(())
/// ```
pub fn save_with(
    graph: &Graph,
    path: impl AsRef<Path>,
    options: &SaveOptions,
) -> Result<Saved, OnnxError> {
    super::external::write(export(graph, true)?, path.as_ref(), options)
}

/// The ONNX model of `graph`, encoded, with every constant inline. Refused when it
/// would pass protobuf's 2 GiB limit (save such a model with external data).
pub fn to_bytes(graph: &Graph) -> Result<Vec<u8>, OnnxError> {
    let exported = export(graph, true)?;
    // Refused before any weight is read.
    super::external::check_inline_estimate(&exported, &exported.payloads)?;
    super::external::encode_model(exported)
}

/// The ONNX model of `graph`, every constant inline (`raw_data`). The graph is verified
/// first; an op with no ONNX form is an error naming the node.
///
/// [`save`] and [`to_bytes`] do not build this message: they encode the nodes
/// straight from the graph (the same bytes prost gives for this model).
pub fn to_model(graph: &Graph) -> Result<ModelProto, OnnxError> {
    let Exported {
        mut model,
        nodes,
        inits,
        payloads,
    } = export(graph, false)?;
    // Message initialisers only: the exporter encodes them only for the writers.
    debug_assert!(inits.bytes.is_empty());
    if let Some(g) = model.graph.as_mut() {
        fill_inline(&mut g.initializer, payloads);
        if let NodeSink::Protos(nodes) = nodes {
            g.node = nodes;
        }
    }
    Ok(model)
}

/// Exports `graph`: its nodes encoded as they are written (`encoded`) or as prost
/// messages.
///
/// Node names are first given on the guess that no two graph nodes ask for the same
/// one (see [`NameSet::defer`]), checked at the end; where that does not hold, or
/// the export fails, it is done again checking each name as it comes, which gives
/// the names (and errors) the guess would have had to.
pub(super) fn export(graph: &Graph, encoded: bool) -> Result<Exported, OnnxError> {
    // The verifier orders the nodes (the order they are written in); on a big graph it
    // checks them on a second thread as they are written, a little ahead.
    crate::verify::verify_ordered_with(graph, |order, gate| {
        if let Ok(Some(exported)) = export_in(graph, encoded, order, true, gate) {
            return Ok(exported);
        }
        export_in(graph, encoded, order, false, gate)?
            .ok_or_else(|| OnnxError::Model("node names checked one by one were not unique".into()))
    })
    .map_err(OnnxError::verify)?
}

/// [`export`] in `order`, with node names checked at the end (`defer`; `None` when
/// two were the same) or one by one.
fn export_in(
    graph: &Graph,
    encoded: bool,
    order: &[NodeId],
    defer: bool,
    gate: &Gate,
) -> Result<Option<Exported>, OnnxError> {
    let mut ex = Exporter::new(graph, Vec::new());
    if defer {
        ex.node_names.defer(graph.node_count());
    } else {
        ex.node_names = NameSet::with_capacity(graph.node_count());
    }
    if encoded {
        // Room for the usual encoded node (55 bytes in a transformer export) so that
        // the buffer is not copied as it grows; pages not written are never touched.
        ex.nodes = NodeSink::Bytes {
            bytes: Vec::with_capacity(graph.node_count() * 96),
            held: Vec::new(),
        };
        ex.init_bytes = Some(InitBytes::default());
    }
    // Every node's first output is named by its index: the list sized once, so that
    // naming a graph output (a late node) does not grow it.
    let bound = order.iter().map(|id| id.index() + 1).max().unwrap_or(0);
    ex.names.first.resize(bound, None);
    ex.reserve_io()?;
    for (i, &id) in order.iter().enumerate() {
        if !gate.ready(i) {
            return Err(unverified());
        }
        ex.node(id)?;
        if ex.arena.overflow {
            return Err(super::external::too_large(ex.arena.text.len() as u64));
        }
    }
    if !gate.ready(order.len()) {
        return Err(unverified());
    }
    let payloads = std::mem::take(&mut ex.payloads);
    let inits = ex.init_bytes.take().unwrap_or_default();
    let (model, nodes, names_unique) = ex.finish()?;
    Ok(names_unique.then_some(Exported {
        model,
        nodes,
        inits,
        payloads,
    }))
}

/// The export's answer when the verifier's second thread found a problem (never
/// returned: the verifier's error is).
fn unverified() -> OnnxError {
    OnnxError::Model("the graph does not verify".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Value;
    use crate::meta::DType;
    use crate::meta::TensorMeta;
    use crate::ops::lookup;

    /// `x -> neg "dup" -> neg "dup" -> neg "dup_1" -> rsqrt "r" (two ONNX nodes)
    /// -> neg "r_1"`, output `y`.
    fn named_chain(names: [&str; 5]) -> Graph {
        let mut g = Graph::new();
        let mut v = g.add_input("x", TensorMeta::new(DType::F32, [4usize]));
        let ops = ["neg", "neg", "neg", "rsqrt", "neg"];
        for (op, name) in ops.into_iter().zip(names) {
            let op = lookup(op).expect("op");
            let id = g.add_op(op, &[v], &[]).expect("node");
            g.set_name(id, name);
            v = Value::from(id);
        }
        g.set_named_outputs(vec![("y".into(), v)]).expect("output");
        g
    }

    fn node_names(e: Exported) -> Vec<String> {
        let mut model = e.model;
        let g = model.graph.as_mut().expect("graph");
        if let NodeSink::Protos(nodes) = e.nodes {
            g.node = nodes;
        }
        g.node.iter().map(|n| n.name.clone()).collect()
    }

    /// Names given twice by different graph nodes: the deferred check finds it and the
    /// export checked name by name gives each repeat a fresh `_k`.
    #[test]
    fn deferred_node_names_fall_back_on_repeats() {
        let g = named_chain(["dup", "dup", "dup_1", "r", "r_1"]);
        let order = g.topo_order().expect("order");
        assert!(export_in(&g, false, &order, true, &Gate::checked())
            .expect("export")
            .is_none());
        let exact = export_in(&g, false, &order, false, &Gate::checked())
            .expect("export")
            .expect("checked one by one");
        let want = ["dup", "dup_1", "dup_1_1", "r", "r_1", "r_1_1", "output_y"];
        let names = node_names(exact);
        assert_eq!(names[..6], want[..6], "{names:?}");
        // `export` takes the checked path and gives the same names.
        assert_eq!(
            node_names(export(&g, false).expect("export"))[..6],
            want[..6]
        );
    }

    /// Distinct names: the deferred export is kept, and names and bytes are those of
    /// the export checked name by name (a repeat inside one graph node, the two ONNX
    /// nodes of `rsqrt`, is still found).
    #[test]
    fn deferred_node_names_match_checked_ones() {
        let g = named_chain(["a", "b", "c", "r", "s"]);
        let order = g.topo_order().expect("order");
        let deferred = export_in(&g, true, &order, true, &Gate::checked())
            .expect("export")
            .expect("names unique");
        let exact = export_in(&g, true, &order, false, &Gate::checked())
            .expect("export")
            .expect("checked one by one");
        let bytes = |e: Exported| super::super::external::encode_model(e).expect("encode");
        assert_eq!(bytes(deferred), bytes(exact));
        let names = node_names(export(&g, false).expect("export"));
        assert_eq!(names[..6], ["a", "b", "c", "r", "r_1", "s"], "{names:?}");
    }
}
