//! What graphrw reads and writes of ONNX itself: the IR version and opsets, the contrib
//! ops of onnxruntime it reads, the domain of the functions it writes. The importer, the
//! exporter, the mapping table and the op families all read these; none of them is
//! defined by one side.

/// The oldest default-domain opset the importer reads. Each op is read with its meaning
/// at the model's opset (Softmax before 13 flattens to 2-D, axes are attributes before
/// 13, ...); an op whose old form graphrw does not read stays an `opaque` node.
pub const MIN_OPSET: i64 = 1;
/// The newest default-domain opset the importer accepts.
pub const MAX_OPSET: i64 = 23;

/// The IR version written (10: what current onnxruntime reads).
pub const IR_VERSION: i64 = 10;
/// The default-domain opset written when no op needs a newer one.
pub const BASE_OPSET: i64 = 18;
/// The opset of the standard `Attention` op.
pub const ATTENTION_OPSET: i64 = 23;
/// The opset of the standard `RotaryEmbedding` op.
pub const ROTARY_OPSET: i64 = 23;
/// The domain of the model-local functions written for fused ops.
pub const FUNCTION_DOMAIN: &str = "graphrw";

/// True for an op of onnxruntime's contrib ops that the importer reads (as their
/// decompositions, `ops/microsoft/`) in `domain` (`""` for the default one).
pub(crate) fn is_contrib(op_type: &str, domain: &str) -> bool {
    match domain {
        "com.microsoft" => matches!(
            op_type,
            "SkipLayerNormalization"
                | "SkipSimplifiedLayerNormalization"
                | "SimplifiedLayerNormalization"
                | "FastGelu"
                | "BiasGelu"
                | "Gelu"
                | "QuickGelu"
                | "BiasAdd"
                | "FusedMatMul"
                | "Attention"
                | "MultiHeadAttention"
                | "GroupQueryAttention"
                | "RotaryEmbedding"
                | "EmbedLayerNormalization"
        ),
        "" => op_type == "SimplifiedLayerNormalization",
        _ => false,
    }
}
