"""Makes the RMS norm spelling models in this folder (small, random weights).

Run: python3 -m venv /tmp/onnxvenv && /tmp/onnxvenv/bin/pip install onnx numpy
     /tmp/onnxvenv/bin/python tests/models/rms_norm/make.py

Each model is `y = rms_norm(x) [* w]` over the last dim (hidden 16) in one of the
spellings exporters write (the TorchScript exporter's for HF Llama's LlamaRMSNorm:
Pow(x, 2), ReduceMean(axes=-1, keepdims), Add(eps), Sqrt, Div(1, .), Mul(x, .),
Mul(w, .), with Cast to f32 and back), at opset 17 (ReduceMean axes an attribute) or
18 (axes an input). The input is `x: [batch, seq, 16]` with symbolic batch and seq.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H = 16
EPS = 1e-6
HERE = os.path.dirname(os.path.abspath(__file__))


def const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def model(name, opset, inv, square, reduce, weight, casts):
    nodes, inits = [], []
    x = "x"
    if casts:
        nodes.append(helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT))
        x = "xf"
    if square == "pow":
        inits.append(const("two", 2.0))
        nodes.append(helper.make_node("Pow", [x, "two"], ["sq"]))
    else:
        nodes.append(helper.make_node("Mul", [x, x], ["sq"]))
    op = "ReduceMean" if reduce == "mean" else "ReduceSum"
    if opset >= 18 or op == "ReduceSum":
        inits.append(const("axes", [-1], np.int64))
        nodes.append(helper.make_node(op, ["sq", "axes"], ["red"], keepdims=1))
    else:
        nodes.append(helper.make_node(op, ["sq"], ["red"], axes=[-1], keepdims=1))
    ms = "red"
    if reduce == "sum":
        inits.append(const("n", float(H)))
        nodes.append(helper.make_node("Div", ["red", "n"], ["ms"]))
        ms = "ms"
    inits.append(const("eps", EPS))
    nodes.append(helper.make_node("Add", [ms, "eps"], ["mse"]))
    if inv == "rsqrt_div1":  # 1 / sqrt(.)  (torch.rsqrt as TorchScript writes it)
        inits.append(const("one", 1.0))
        nodes.append(helper.make_node("Sqrt", ["mse"], ["s"]))
        nodes.append(helper.make_node("Div", ["one", "s"], ["r"]))
        nodes.append(helper.make_node("Mul", [x, "r"], ["n0"]))
    elif inv == "reciprocal":
        nodes.append(helper.make_node("Sqrt", ["mse"], ["s"]))
        nodes.append(helper.make_node("Reciprocal", ["s"], ["r"]))
        nodes.append(helper.make_node("Mul", ["r", x], ["n0"]))
    else:  # x / sqrt(.)
        nodes.append(helper.make_node("Sqrt", ["mse"], ["s"]))
        nodes.append(helper.make_node("Div", [x, "s"], ["n0"]))
    out = "n0"
    if casts:
        nodes.append(helper.make_node("Cast", ["n0"], ["n1"], to=TensorProto.FLOAT16))
        out = "n1"
    if weight:
        rng = np.random.default_rng(len(name))
        w = rng.standard_normal(H).astype(np.float16 if casts else np.float32)
        inits.append(numpy_helper.from_array(w, "weight"))
        nodes.append(helper.make_node("Mul", ["weight", out], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [out], ["y"]))
    dt = TensorProto.FLOAT16 if casts else TensorProto.FLOAT
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", dt, ["batch", "seq", H])],
        [helper.make_tensor_value_info("y", dt, ["batch", "seq", H])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, os.path.join(HERE, name + ".onnx"))


# (file, opset, inverse, square, reduce, weight, casts)
SPELLINGS = [
    ("llama_torchscript_17", 17, "rsqrt_div1", "pow", "mean", True, True),
    ("llama_torchscript_18", 18, "rsqrt_div1", "pow", "mean", True, True),
    ("div_sqrt_17", 17, "div", "mul", "mean", True, False),
    ("reciprocal_sum_18", 18, "reciprocal", "pow", "sum", True, False),
    ("no_weight_18", 18, "rsqrt_div1", "mul", "mean", False, False),
    ("no_weight_cast_17", 17, "div", "pow", "mean", False, True),
]

if __name__ == "__main__":
    for s in SPELLINGS:
        model(*s)
