"""``InferenceSession.decode_loop``: the KV-cache decoder steps in the repository
(``tests/models/decoders``) run as a generation loop give, step for step, what
``InferenceSession.run`` gives with the presents passed back by hand, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphrw

DECODERS = Path(__file__).resolve().parents[2] / "tests" / "models" / "decoders"


@pytest.mark.parametrize("model", ["gqa_dynamo", "step_torchscript"])
def test_the_loop_matches_runs_step_by_step(model: str) -> None:
    sess = graphrw.InferenceSession(str(DECODERS / model / "model.onnx"))
    loop = sess.decode_loop()
    assert loop.cache_names == [("past_key", "present_key"), ("past_value", "present_value")]
    assert loop.input_names == ["x"] and loop.output_names == ["y"]
    width = sess.get_inputs()[0].shape[2]
    heads, head_dim = sess.get_inputs()[1].shape[1], sess.get_inputs()[1].shape[3]
    loop.start(batch=2)
    past = np.zeros((2, heads, 0, head_dim), np.float32)
    past_k, past_v = past, past
    rng = np.random.default_rng(0)
    for n in [4, 1, 1, 7, 1, 1, 1, 1, 9, 1]:
        x = rng.standard_normal((2, n, width), dtype=np.float32)
        want = sess.run(None, {"x": x, "past_key": past_k, "past_value": past_v})
        (got,) = loop.step({"x": x})
        assert got.tobytes() == want[0].tobytes()
        past_k, past_v = want[1], want[2]
    assert loop.cache_length("past_key") == 27
    assert loop.cache("present_value").tobytes() == past_v.tobytes()
    # Restarting from given caches.
    loop.start({"past_key": past_k[:, :, :3], "past_value": past_v[:, :, :3]})
    x = rng.standard_normal((2, 1, width), dtype=np.float32)
    (got,) = loop.step({"x": x})
    want = sess.run(None, {"x": x, "past_key": past_k[:, :, :3], "past_value": past_v[:, :, :3]})
    assert got.tobytes() == want[0].tobytes()


def test_loop_errors_name_what_is_wrong() -> None:
    sess = graphrw.InferenceSession(str(DECODERS / "gqa_dynamo" / "model.onnx"))
    loop = sess.decode_loop()
    x = np.zeros((1, 1, 64), np.float32)
    with pytest.raises(graphrw.InvalidArgument, match="not started"):
        loop.step({"x": x})
    loop.start()
    with pytest.raises(graphrw.InvalidArgument, match="caches stay in the loop"):
        loop.step({"x": x, "past_key": x})
    with pytest.raises(graphrw.InvalidArgument, match="missing input"):
        loop.step({})
    with pytest.raises(graphrw.InvalidArgument, match="no cache for `past_value`"):
        loop.start({"past_key": np.zeros((1, 2, 0, 16), np.float32)})
    with pytest.raises(graphrw.InvalidArgument, match="no cache named"):
        loop.cache("nope")


def test_a_model_without_caches_has_no_loop() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = graphrw.InferenceSession(model.SerializeToString())
    with pytest.raises(graphrw.InvalidArgument, match="present"):
        sess.decode_loop()
