"""Makes the RotaryEmbedding (opset 23) import models in this folder, with a test data
set each whose output onnxruntime computed.

Run: python3 -m venv /tmp/onnxvenv && /tmp/onnxvenv/bin/pip install onnx numpy onnxruntime
     cd tests/models/rotary && /tmp/onnxvenv/bin/python make.py

- `full`: x (2, 4, 5, 8), caches (batch, seq, 4), no position_ids;
- `full_pos`: caches (10, 4) gathered by position_ids (2, 5);
- `partial_pos`: rotary_embedding_dim 4 (the last 4 of 8 passed through), position_ids.
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper


def make(name, rd, pos):
    attrs = {"rotary_embedding_dim": rd} if rd else {}
    ins = ["x", "cos", "sin"] + (["pos"] if pos else [])
    node = helper.make_node("RotaryEmbedding", ins, ["y"], **attrs)
    half = (rd or 8) // 2
    cache = [10, half] if pos else [2, 5, half]
    vi = [helper.make_tensor_value_info("x", T.FLOAT, [2, 4, 5, 8])]
    vi += [helper.make_tensor_value_info(n, T.FLOAT, cache) for n in ("cos", "sin")]
    if pos:
        vi.append(helper.make_tensor_value_info("pos", T.INT64, [2, 5]))
    out = [helper.make_tensor_value_info("y", T.FLOAT, [2, 4, 5, 8])]
    g = helper.make_graph([node], name, vi, out)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    os.makedirs(f"{name}/test_data_set_0", exist_ok=True)
    onnx.save(m, f"{name}/model.onnx")
    r = np.random.default_rng(0)
    feeds = {"x": r.standard_normal((2, 4, 5, 8)).astype(np.float32)}
    feeds["cos"] = r.standard_normal(cache).astype(np.float32)
    feeds["sin"] = r.standard_normal(cache).astype(np.float32)
    if pos:
        feeds["pos"] = r.integers(0, 10, (2, 5)).astype(np.int64)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, feeds)
    for i, k in enumerate(ins):
        t = numpy_helper.from_array(feeds[k], k)
        onnx.save_tensor(t, f"{name}/test_data_set_0/input_{i}.pb")
    onnx.save_tensor(numpy_helper.from_array(y, "y"), f"{name}/test_data_set_0/output_0.pb")


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    make("full", 0, False)
    make("full_pos", 0, True)
    make("partial_pos", 4, True)
