//! ONNX ops that need more than a table row, one file per family, each with both sides:
//! the import (`impl Importer`: an ONNX node becomes vocabulary ops) and the export
//! (`impl Exporter`: a vocabulary op becomes ONNX nodes).
//!
//! Ops that map one to one go through the mapping table (`onnx/table/`) both ways;
//! this module's two dispatchers, [`Importer::map_node`] and [`Exporter::op`], try the
//! table first and send the rest here:
//!
//! | file | import | export |
//! |---|---|---|
//! | `elementwise.rs` | `Identity`, `Dropout`, `Clip`, `PRelu`/`LeakyRelu`/`Elu`/`Selu`/`Softplus` | `ne`, `rsqrt`, `silu`, `dropout`, `masked_fill` |
//! | `contraction.rs` | `Gemm`, `Einsum` | (through the table) |
//! | `normalization.rs` | `Softmax`/`LogSoftmax` before opset 13, `BatchNormalization`, `ReduceLogSumExp` (decomposed) | (through the table, or `function.rs`) |
//! | `shape.rs` | `Reshape`, `Expand`, `Flatten`, `Unsqueeze`, `Split`, `Slice`, `Tile` of dims of 1, `Pad` (constant) | `transpose`, `reshape`, `expand`, `unsqueeze`, `split`, `slice` |
//! | `source.rs` | `Constant`, `ConstantOfShape`, `Range` | `full`/`zeros`/`ones`, `arange`, `sym_ints` |
//! | `shape_arith/` | `Shape`, `Gather`, `Concat`, ... of shapes, folded symbolically (`fold.rs`) | symbolic attributes as `Shape`/`Gather`/arithmetic (`write.rs`) |
//! | `attention.rs` | `Attention` (opset 23) | `scaled_dot_product_attention` |
//! | `rotary.rs` | `RotaryEmbedding` (opset 23), as its decomposition | `fused.rotary_embedding` where exact |
//! | `function.rs` | model-local functions, inlined | fused ops as standard ops or function calls |
//! | `microsoft/` | onnxruntime's contrib ops its optimizers write (`SkipLayerNormalization`, `FastGelu`, `Attention`, `GroupQueryAttention`, ...), as their decompositions (attentions as the fused attention) | (as the ops they became) |
//! | `opaque.rs` | what graphrw does not read, kept as it came | opaque nodes, upgraded where only the form changed |

mod attention;
mod contraction;
mod elementwise;
mod function;
pub(crate) use function::inline_functions;
mod microsoft;
mod normalization;
mod opaque;
mod rotary;
pub(crate) mod shape;
pub(crate) mod shape_arith;
mod source;

use crate::graph::NodeId;
use crate::onnx::dialect::is_contrib;
use crate::onnx::load::importer::*;
use crate::onnx::load::node::*;
use crate::onnx::name_key::NameKey;
use crate::onnx::save::exporter::*;
use crate::onnx::save::names::*;
use crate::onnx::table;
use crate::onnx::OnnxError;
use crate::ops::Op;
use std::rc::Rc;

impl<'m> Importer<'m> {
    /// Maps one ONNX node; returns a value per ONNX output (in order). Ops in the table
    /// (`table/mod.rs`) go through [`Importer::map_row`]; the rest are special cases.
    pub(crate) fn map_node(&mut self, at: &At<'m, '_>) -> Result<Outs, OnnxError> {
        let op_type = at.op_type;
        // The first row whose held attributes fit; failing that, the first row, which
        // says what does not fit.
        let domain = at.domain;
        let domain = if domain == "ai.onnx" { "" } else { domain };
        let opset = self.opset;
        let rows = Rc::clone(
            self.rows
                .entry((NameKey(op_type), NameKey(domain)))
                .or_insert_with(|| table::loading(op_type, domain, opset).collect()),
        );
        if let Some(&first) = rows.first() {
            let fits = rows
                .iter()
                .find(|r| r.held.iter().all(|h| at.held(h).is_ok()));
            return self.map_row(at, fits.copied().unwrap_or(first));
        }
        if is_contrib(op_type, domain) {
            return self.microsoft(at);
        }
        match op_type {
            "Identity" => self.identity(at),
            "Dropout" => self.dropout(at),
            // Since opset 13 through the table.
            "Softmax" | "LogSoftmax" => self.softmax_legacy(at),
            "Flatten" => self.flatten(at),
            "Clip" => self.clip(at),
            "Einsum" => self.einsum(at),
            "PRelu" | "LeakyRelu" | "Elu" | "Selu" | "Softplus" => self.activation(at),
            "BatchNormalization" => self.batch_norm(at),
            "ReduceLogSumExp" => self.reduce_log_sum_exp(at),
            "Gemm" => self.gemm(at),
            "Reshape" => self.reshape(at),
            "Slice" => self.slice(at),
            "Unsqueeze" => self.unsqueeze(at),
            "Expand" => self.expand(at),
            "Tile" => self.tile(at),
            "Pad" => self.pad(at),
            "Split" => self.split(at),
            "Constant" => self.constant(at),
            "ConstantOfShape" => self.constant_of_shape(at),
            "Range" => self.range(at),
            "Attention" => self.attention(at),
            "RotaryEmbedding" => self.rotary_embedding(at),
            _ => Err(OnnxError::UnknownOp {
                op_type: op_type.to_string(),
                domain: at.domain.to_string(),
                node: at.name.to_string(),
            }),
        }
    }
}

impl<'g> Exporter<'g> {
    /// Writes one vocabulary node: through its table row when it has one, else its
    /// family's writer here, else as a standard ONNX op or a function call of its
    /// decomposition (`function.rs`); an op with none of these is an error naming it.
    pub(crate) fn op(&mut self, id: NodeId, ins: Names8, outs: Names8) -> Result<(), OnnxError> {
        let graph = self.graph;
        let node = graph.try_node(id).map_err(OnnxError::verify)?;
        let _attrs = node.attrs();
        if let Some(row) = crate::onnx::table::saving(node.op_name()) {
            return self.write_row(id, row, ins, outs);
        }
        let symbolic = node
            .attrs()
            .iter()
            .find(|(n, v)| v.is_symbolic() && !computes_symbolic(node.op().builtin, n));
        if let Some((name, v)) = symbolic {
            let form = format!("the ONNX form of `{}`", node.op_name());
            return Err(self.symbolic_attr_err(name, v, &form));
        }
        match node.op().builtin {
            Some(Op::Ne) => self.write_ne(&ins, &outs)?,
            Some(Op::Rsqrt) => self.write_rsqrt(&ins, &outs)?,
            Some(Op::Silu) => self.write_silu(&ins, &outs)?,
            Some(Op::Dropout) => self.write_dropout(node, &ins, &outs)?,
            Some(Op::MaskedFill) => self.write_masked_fill(node, &ins, &outs)?,
            Some(Op::Transpose) => self.write_transpose(node, &ins, &outs)?,
            // A static size is one initialiser; a symbolic one, shape arithmetic.
            Some(Op::Full | Op::Zeros | Op::Ones) => self.write_full(node, &ins, &outs)?,
            Some(Op::SymInts) => self.write_sym_ints(node, &ins, &outs)?,
            Some(Op::Reshape) => self.write_reshape(node, &ins, &outs)?,
            Some(Op::Expand) => self.write_expand(node, &ins, &outs)?,
            Some(Op::Unsqueeze) => self.write_unsqueeze(node, &ins, &outs)?,
            Some(Op::Split) => self.write_split(node, &ins, &outs)?,
            Some(Op::Slice) => self.write_slice(node, &ins, &outs)?,
            Some(Op::Arange) => self.write_arange(node, &ins, &outs)?,
            Some(Op::ScaledDotProductAttention) => self.attention(id, ins, outs)?,
            Some(Op::Opaque) => self.opaque(id, ins, outs)?,
            _ => {
                let other = node.op_name();
                if self.standard_fused(id, &ins, &outs)? {
                    return Ok(());
                }
                if node.op().decompose.is_some() {
                    return self.function_call(id, ins, outs);
                }
                return Err(self.err(format!(
                    "op `{other}` has no ONNX form and no decomposition"
                )));
            }
        }
        Ok(())
    }
}

/// True where the writer of `op` (this module's families) computes attribute `attr`
/// from the graph's shapes when it is known only at run time: each of these feeds an
/// input of the ONNX op written (`Reshape`'s shape, `Slice`'s bounds, `Range`'s
/// bounds, `Where`'s fill value, `Expand` of a filled value), or, for inference-mode
/// `dropout`, is not written at all. The table's rows do the same for every argument
/// that is an ONNX input (`write_row`). Any other symbolic attribute has no ONNX form.
fn computes_symbolic(op: Option<Op>, attr: &str) -> bool {
    let Some(op) = op else {
        return false;
    };
    matches!(
        (op, attr),
        (Op::Reshape, "shape")
            | (Op::Expand, "size")
            | (Op::Slice, "start" | "end" | "dim" | "step")
            | (Op::Full, "size" | "value")
            | (Op::Zeros | Op::Ones, "size")
            | (Op::Arange, "start" | "end" | "step")
            | (Op::SymInts, "values")
            | (Op::MaskedFill, "value")
            | (Op::Dropout, "p")
    )
}
