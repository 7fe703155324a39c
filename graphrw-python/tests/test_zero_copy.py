"""No copies across the boundary (issue #56 goal 2): a contiguous numpy input is read
where it lies, an output is a numpy array over graphrw's own buffer, and neither can
change what the other side holds."""

from __future__ import annotations

import gc
from typing import Any, Dict, List

import numpy as np
import pytest

import graphrw

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F = TensorProto.FLOAT


def model(nodes: List[Any], inputs: List[Any], outputs: List[Any], inits: List[Any] = ()) -> bytes:
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m.SerializeToString()


DIMS = ["rows", "cols"]


def relu_model(dtype: int = F) -> bytes:
    """``y = relu(x)``, ``x`` of any two dims."""
    return model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", dtype, DIMS)],
        [helper.make_tensor_value_info("y", dtype, DIMS)],
    )


def addresses(session: graphrw.InferenceSession, feed: Dict[str, Any]) -> List[int]:
    """Where a run reads each input (the native session builds its tensors as run does)."""
    return session._session.feed_addresses(session._feeds(feed))


def test_a_contiguous_input_is_read_in_place() -> None:
    session = graphrw.InferenceSession(relu_model())
    x = np.random.default_rng(1).standard_normal((64, 1024)).astype(np.float32)
    assert addresses(session, {"x": x}) == [x.ctypes.data]
    # A contiguous slice (rows 8..) is read where it lies as well.
    rows = x[8:]
    assert addresses(session, {"x": rows}) == [rows.ctypes.data]
    # A read-only array (its address found another way) as well.
    frozen = np.frombuffer(x.tobytes(), np.float32).reshape(x.shape)
    assert not frozen.flags.writeable
    assert addresses(session, {"x": frozen}) == [frozen.ctypes.data]
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    (y,) = session.run(None, {"x": frozen})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    (empty,) = session.run(None, {"x": np.zeros((0, 4), np.float32)})
    assert empty.shape == (0, 4) and empty.flags.writeable


def test_what_cannot_be_read_in_place_is_copied_and_still_runs() -> None:
    session = graphrw.InferenceSession(relu_model())
    x = np.random.default_rng(2).standard_normal((32, 64)).astype(np.float32)
    want = np.maximum(x, 0)
    strided = x[:, ::2]
    fortran = np.asfortranarray(x)
    big_endian = x.astype(">f4")
    raw = np.zeros(x.size * 4 + 1, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(x.shape)
    misaligned[:] = x
    assert not misaligned.flags.aligned
    for name, value, expected in [
        ("strided", strided, want[:, ::2]),
        ("fortran", fortran, want),
        ("big-endian", big_endian, want),
        ("misaligned", misaligned, want),
        ("list", x.tolist(), want),
    ]:
        (at,) = addresses(session, {"x": value})
        if isinstance(value, np.ndarray):
            assert at != value.ctypes.data, name
        (y,) = session.run(None, {"x": value})
        np.testing.assert_array_equal(y, expected, err_msg=name)


@pytest.mark.parametrize(
    "dtype,onnx_type",
    [
        (np.float64, TensorProto.DOUBLE),
        (np.float16, TensorProto.FLOAT16),
        (np.int64, TensorProto.INT64),
        (np.int32, TensorProto.INT32),
    ],
)
def test_other_dtypes_are_read_in_place(dtype: Any, onnx_type: int) -> None:
    session = graphrw.InferenceSession(relu_model(onnx_type))
    x = (np.arange(-6, 6).reshape(3, 4)).astype(dtype)
    assert addresses(session, {"x": x}) == [x.ctypes.data]
    (y,) = session.run(None, {"x": x})
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_bool_inputs_are_copied_and_run() -> None:
    b = TensorProto.BOOL
    session = graphrw.InferenceSession(
        model(
            [helper.make_node("Not", ["x"], ["y"])],
            [helper.make_tensor_value_info("x", b, DIMS)],
            [helper.make_tensor_value_info("y", b, DIMS)],
        )
    )
    x = np.array([[True, False, True]])
    (at,) = addresses(session, {"x": x})
    assert at != x.ctypes.data
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, ~x)


def test_outputs_are_arrays_over_graphrws_buffer() -> None:
    session = graphrw.InferenceSession(relu_model())
    x = np.random.default_rng(3).standard_normal((16, 256)).astype(np.float32)
    raw, _ = session._session.run(session._feeds({"x": x}))
    (native,) = raw
    a, b = np.asarray(native), np.asarray(native)
    assert np.shares_memory(a, b), "two arrays over one output share its buffer"
    assert a.base is native and a.flags.writeable
    (y,) = session.run(None, {"x": x})
    assert type(y.base).__name__ == "Array" and y.flags.writeable and y.flags.c_contiguous
    assert not np.shares_memory(y, x)


def test_an_output_outlives_its_session() -> None:
    session = graphrw.InferenceSession(relu_model())
    x = np.random.default_rng(4).standard_normal((8, 512)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    del session
    gc.collect()
    # Memory freed and reused would no longer hold relu(x); churn the allocator first.
    junk = [np.ones((8, 512), np.float32) * k for k in range(8)]
    del junk
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    y[:] = 1.0  # still ours to write
    assert y.sum() == y.size


def test_writing_the_input_after_a_run_leaves_its_outputs_alone() -> None:
    # An Identity output views its input inside the run: it is copied before the run
    # returns, so the output does not change with the caller's array.
    session = graphrw.InferenceSession(
        model(
            [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])],
            [helper.make_tensor_value_info("x", F, DIMS)],
            [helper.make_tensor_value_info("y", F, DIMS), helper.make_tensor_value_info("z", F, DIMS)],
        )
    )
    x = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(4, 1024)
    before = x.copy()
    y, z = session.run(None, {"x": x})
    assert not np.shares_memory(y, x) and not np.shares_memory(z, x)
    x[:] = 42.0
    np.testing.assert_array_equal(y, before)
    np.testing.assert_array_equal(z, np.maximum(before, 0))


def test_writing_an_output_cannot_corrupt_the_model_or_another_output() -> None:
    # `w` is a weight given out as an output, and `y` and `y2` are one value twice: each
    # array the caller gets is its own (the shared ones copied), so writing one changes
    # nothing graphrw or the other output holds.
    w = np.arange(8, dtype=np.float32)
    session = graphrw.InferenceSession(
        model(
            [
                helper.make_node("Identity", ["w"], ["wout"]),
                helper.make_node("Add", ["x", "w"], ["y"]),
                helper.make_node("Identity", ["y"], ["y2"]),
            ],
            [helper.make_tensor_value_info("x", F, [8])],
            [helper.make_tensor_value_info(n, F, [8]) for n in ("wout", "y", "y2")],
            [numpy_helper.from_array(w, "w")],
        )
    )
    x = np.ones(8, np.float32)
    wout, y, y2 = session.run(None, {"x": x})
    assert not np.shares_memory(y, y2)
    wout[:] = -100.0
    y[:] = -100.0
    np.testing.assert_array_equal(y2, w + 1)
    wout2, y3, _ = session.run(None, {"x": x})
    np.testing.assert_array_equal(wout2, w)
    np.testing.assert_array_equal(y3, w + 1)


def test_kept_outputs_are_read_in_place_and_stay_put() -> None:
    session = graphrw.InferenceSession(relu_model())
    binding = session.io_binding()
    binding.bind_output("y")
    x = np.random.default_rng(5).standard_normal((64, 256)).astype(np.float32)
    binding.bind_cpu_input("x", x)
    session.run_with_iobinding(binding)
    (value,) = binding.get_outputs()
    view = value._view()
    assert not view.flags.writeable, "graphrw still holds a bound output: read-only"
    assert value.data_ptr() == view.ctypes.data
    np.testing.assert_array_equal(view, np.maximum(x, 0))
    copy = binding.copy_outputs_to_cpu()[0]
    assert copy.flags.writeable and not np.shares_memory(copy, view)
    # The view keeps its buffer out of the pool: the next run writes elsewhere.
    x2 = -x
    binding.bind_cpu_input("x", x2)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(view, np.maximum(x, 0))
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(x2, 0))
