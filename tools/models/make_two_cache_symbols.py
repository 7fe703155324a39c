"""Writes tests/models/two_cache_symbols: one attention step over a KV cache whose key and
value cache lengths are two dim_params, `past_k` and `past_v`, as torch's dynamo
exporter names them with `Dim.DYNAMIC` on each input (they are equal in every valid run).

    python3 -m venv /tmp/onnxvenv && /tmp/onnxvenv/bin/pip install onnx numpy onnxruntime
    /tmp/onnxvenv/bin/python tools/models/make_two_cache_symbols.py

Inputs: q, k_new, v_new [1, 2, seq, 16]; past_key [1, 2, past_k, 16]; past_value
[1, 2, past_v, 16]. y = softmax(q (past_key ++ k_new)^T / 4) (past_value ++ v_new).
Two test sets (seq 3, past 5; seq 1, past 9) hold onnxruntime's output.
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "models", "two_cache_symbols")
H, D = 2, 16


def value(name, length):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, H, length, D])


def model():
    nodes = [
        helper.make_node("Concat", ["past_key", "k_new"], ["key"], axis=2, name="cat_k"),
        helper.make_node("Concat", ["past_value", "v_new"], ["value"], axis=2, name="cat_v"),
        helper.make_node("Transpose", ["key"], ["key_t"], perm=[0, 1, 3, 2], name="key_t"),
        helper.make_node("MatMul", ["q", "key_t"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["probs", "value"], ["y"], name="attend"),
    ]
    scale = numpy_helper.from_array(np.array(0.25, dtype=np.float32), "scale")
    graph = helper.make_graph(
        nodes,
        "two_cache_symbols",
        [value("q", "seq"), value("k_new", "seq"), value("v_new", "seq"),
         value("past_key", "past_k"), value("past_value", "past_v")],
        [value("y", "seq")],
        [scale],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    os.makedirs(OUT, exist_ok=True)
    m = model()
    path = os.path.join(OUT, "model.onnx")
    onnx.save(m, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(53)
    names = ["q", "k_new", "v_new", "past_key", "past_value"]
    for i, (seq, past) in enumerate([(3, 5), (1, 9)]):
        d = os.path.join(OUT, f"test_data_set_{i}")
        os.makedirs(d, exist_ok=True)
        shapes = [seq, seq, seq, past, past]
        feeds = {n: rng.standard_normal((1, H, s, D)).astype(np.float32) for n, s in zip(names, shapes)}
        (y,) = sess.run(None, feeds)
        for j, n in enumerate(names):
            with open(os.path.join(d, f"input_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(feeds[n], n).SerializeToString())
        with open(os.path.join(d, "output_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(y, "y").SerializeToString())


if __name__ == "__main__":
    main()
