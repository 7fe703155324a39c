#!/usr/bin/env python3
"""Writes GPT-2 small (12 layers x 768, 12 heads of 64, vocabulary 50 257) with random
weights as ONNX, its weights in an external data file, for `ort_compare.py --model
gpt2-small`. Needs only onnx and numpy (no torch):

    python3 benches/gpt2_small.py DIR --seq 128 [--ort]

writes `DIR/model.onnx`, `DIR/model.onnx.data` (about 650 MB: the 124 M parameters
and the language-model head as its own `[768, 50257]` matrix, as exporters write the
tied embedding) and `DIR/test_data_set_0/input_0.pb` (token ids `[1, S]`); with `--ort`
also `output_0.pb`, the logits `[1, S, 50257]` onnxruntime computes, which
`graphrw run DIR` checks its own against.

The graph is written the way `torch.onnx` exports `transformers`' GPT-2 (batch 1, fixed
sequence `S`): token and position embeddings (`Gather`), per layer `LayerNormalization`,
the fused QKV projection (`MatMul` + bias) split in three, heads by `Reshape` +
`Transpose`, eager attention (`q @ k^T`, scaled, an additive causal mask of large
negatives, `Softmax`, `@ v`), the output projection and residual, and the MLP with
GPT-2's tanh GELU written out (`Pow`, `Tanh`, ...); a final `LayerNormalization` and
the head. Weights are drawn as GPT-2 initialises them (normal, std 0.02).
"""

import argparse
import os
import sys

import numpy as np

LAYERS, HIDDEN, HEADS, VOCAB, POSITIONS = 12, 768, 12, 50257, 1024
HEAD_DIM = HIDDEN // HEADS


def build(seq, seed=0):
    """The GPT-2 small `onnx.ModelProto` for sequence `seq` (weights inside, to be
    saved as external data)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    names = iter(range(1 << 30))

    def fresh(prefix):
        return f"{prefix}_{next(names)}"

    def const(name, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(name, shape, std=0.02, mean=0.0):
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)
        return const(name, w)

    def node(op, inputs, **attrs):
        out = fresh(op.lower())
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def layer_norm(x, prefix):
        g = weight(f"{prefix}.weight", [HIDDEN], std=0.1, mean=1.0)
        b = weight(f"{prefix}.bias", [HIDDEN], std=0.1)
        return node("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)

    def linear(x, prefix, k, n):
        w = weight(f"{prefix}.weight", [k, n])
        b = weight(f"{prefix}.bias", [n])
        return node("Add", [node("MatMul", [x, w]), b])

    heads_shape = const("heads_shape", np.array([1, seq, HEADS, HEAD_DIM], np.int64))
    merged_shape = const("merged_shape", np.array([1, seq, HIDDEN], np.int64))
    qkv_split = const("qkv_split", np.array([HIDDEN] * 3, np.int64))
    scale = const("attn_scale", np.array(1.0 / np.sqrt(HEAD_DIM), np.float32))
    mask = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1)
    mask = const("causal_mask", mask.reshape(1, 1, seq, seq))
    three = const("three", np.array(3.0, np.float32))
    half = const("half", np.array(0.5, np.float32))
    one = const("one", np.array(1.0, np.float32))
    gelu_c = const("gelu_c", np.array(0.044715, np.float32))
    gelu_s = const("gelu_s", np.array(np.sqrt(2.0 / np.pi), np.float32))
    positions = const("position_ids", np.arange(seq, dtype=np.int64).reshape(1, seq))

    wte = weight("wte.weight", [VOCAB, HIDDEN])
    wpe = weight("wpe.weight", [POSITIONS, HIDDEN], std=0.01)
    h = node("Add", [node("Gather", [wte, "input_ids"], axis=0),
                     node("Gather", [wpe, positions], axis=0)])
    for layer in range(LAYERS):
        p = f"h.{layer}"
        x = layer_norm(h, f"{p}.ln_1")
        qkv = linear(x, f"{p}.attn.c_attn", HIDDEN, 3 * HIDDEN)
        q, k, v = (fresh("q"), fresh("k"), fresh("v"))
        nodes.append(helper.make_node("Split", [qkv, qkv_split], [q, k, v], axis=-1))
        q, k, v = (node("Reshape", [t, heads_shape]) for t in (q, k, v))
        q = node("Transpose", [q], perm=[0, 2, 1, 3])
        kt = node("Transpose", [k], perm=[0, 2, 3, 1])
        v = node("Transpose", [v], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, kt]), scale]), mask])
        attn = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        attn = node("Reshape", [node("Transpose", [attn], perm=[0, 2, 1, 3]), merged_shape])
        h = node("Add", [linear(attn, f"{p}.attn.c_proj", HIDDEN, HIDDEN), h])
        x = layer_norm(h, f"{p}.ln_2")
        f = linear(x, f"{p}.mlp.c_fc", HIDDEN, 4 * HIDDEN)
        # GPT-2's GELU: 0.5 f (1 + tanh(sqrt(2/pi) (f + 0.044715 f^3))).
        inner = node("Mul", [node("Add", [f, node("Mul", [node("Pow", [f, three]), gelu_c])]), gelu_s])
        g = node("Mul", [node("Mul", [f, half]), node("Add", [node("Tanh", [inner]), one])])
        h = node("Add", [h, linear(g, f"{p}.mlp.c_proj", 4 * HIDDEN, HIDDEN)])
    x = layer_norm(h, "ln_f")
    lm_head = weight("lm_head.weight", [HIDDEN, VOCAB])
    nodes.append(helper.make_node("MatMul", [x, lm_head], ["logits"]))

    graph = helper.make_graph(
        nodes,
        "gpt2_small",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, VOCAB])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def write(out_dir, seq, with_ort_output):
    """Writes the model, its external data and test inputs (and onnxruntime's outputs
    when `with_ort_output`) into `out_dir`."""
    import onnx
    from onnx import numpy_helper

    os.makedirs(os.path.join(out_dir, "test_data_set_0"), exist_ok=True)
    model = build(seq)
    path = os.path.join(out_dir, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    del model
    ids = np.random.default_rng(1).integers(0, VOCAB, size=(1, seq), dtype=np.int64)
    data = os.path.join(out_dir, "test_data_set_0")
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(ids, "input_ids").SerializeToString())
    if with_ort_output:
        import onnxruntime as ort

        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        (logits,) = sess.run(None, {"input_ids": ids})
        with open(os.path.join(data, "output_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(logits, "logits").SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="folder to write the model into")
    ap.add_argument("--seq", type=int, default=128, help="sequence length (at most 1024)")
    ap.add_argument("--ort", action="store_true",
                    help="also write onnxruntime's logits as the expected output")
    args = ap.parse_args()
    if not 1 <= args.seq <= POSITIONS:
        sys.exit(f"--seq must be 1..{POSITIONS}")
    write(args.dir, args.seq, args.ort)


if __name__ == "__main__":
    main()
