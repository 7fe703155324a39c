"""Writes small ONNX models covering the ops the importer maps into fuzz/seeds/.

Run: python3 fuzz/make_seeds.py   (needs `pip install onnx`)
"""
import os
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
os.makedirs(out, exist_ok=True)


def save(name, nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def i64c(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.int64), name)


save("gemm", [helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0, transB=1)],
     [f32("a", [2, 3]), f32("b", [4, 3])], [f32("y", [2, 4])],
     [numpy_helper.from_array(np.ones(4, np.float32), "c")])
save("slice_reshape", [
    helper.make_node("Slice", ["x", "s", "e", "ax", "st"], ["t"]),
    helper.make_node("Reshape", ["t", "shape"], ["r"]),
    helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0]),
], [f32("x", [4, 6])], [f32("y", None)],
    [i64c("s", [1, 0]), i64c("e", [3, 6]), i64c("ax", [0, 1]), i64c("st", [1, 2]), i64c("shape", [0, -1])])
save("split_concat", [
    helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
    helper.make_node("Concat", ["b", "a"], ["c"], axis=1),
    helper.make_node("Unsqueeze", ["c", "ax"], ["u"]),
    helper.make_node("Expand", ["u", "sh"], ["ex"]),
    helper.make_node("ReduceMean", ["ex", "ax"], ["y"], keepdims=0),
], [f32("x", ["b", 4])], [f32("y", None)], [i64c("ax", [0]), i64c("sh", [3, 1, 1])])
save("norm_attention", [
    helper.make_node("LayerNormalization", ["q", "g", "bb"], ["qn"], axis=-1, epsilon=1e-5),
    helper.make_node("Attention", ["qn", "k", "v", "m"], ["y"], scale=0.5),
], [f32("q", [1, 2, 4, 8]), f32("k", [1, 2, 4, 8]), f32("v", [1, 2, 4, 8]),
    helper.make_tensor_value_info("m", TensorProto.BOOL, [1, 1, 4, 4])], [f32("y", None)],
    [numpy_helper.from_array(np.ones(8, np.float32), "g"), numpy_helper.from_array(np.zeros(8, np.float32), "bb")], opset=23)
save("mask", [
    helper.make_node("Cast", ["m"], ["mb"], to=TensorProto.BOOL),
    helper.make_node("Not", ["mb"], ["nm"]),
    helper.make_node("Where", ["nm", "x", "z"], ["w"]),
    helper.make_node("Gather", ["w", "idx"], ["g"], axis=0),
    helper.make_node("Softmax", ["g"], ["y"], axis=-1),
], [helper.make_tensor_value_info("m", TensorProto.INT64, [3, 5]), f32("x", [3, 5])], [f32("y", None)],
    [numpy_helper.from_array(np.zeros((), np.float32), "z"), i64c("idx", [2, 0])])
save("constant", [
    helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0]),
    helper.make_node("Mul", ["x", "c"], ["y"]),
], [f32("x", [2])], [f32("y", [2])])
# A causal mask built from Range(0, 2^33) sliced to 4 (issue 35): the causal rule must
# not evaluate the range (64 GiB), and a run must refuse it, not abort.
save("huge_range_mask", [
    helper.make_node("Range", ["zero", "n", "one"], ["r"]),
    helper.make_node("Slice", ["r", "s0", "s4"], ["idx"]),
    helper.make_node("Unsqueeze", ["idx", "ax1"], ["col"]),
    helper.make_node("Unsqueeze", ["idx", "ax0"], ["row"]),
    helper.make_node("LessOrEqual", ["row", "col"], ["m"]),
    helper.make_node("Attention", ["q", "k", "v", "m"], ["y"]),
], [f32("q", [1, 2, 4, 8]), f32("k", [1, 2, 4, 8]), f32("v", [1, 2, 4, 8])], [f32("y", None)],
    [i64c("zero", 0), i64c("n", 1 << 33), i64c("one", 1), i64c("s0", [0]), i64c("s4", [4]),
     i64c("ax1", [1]), i64c("ax0", [0])], opset=23)
# ConstantOfShape and Expand of 2^40 elements, sliced and reduced to small outputs.
save("huge_constant_of_shape", [
    helper.make_node("ConstantOfShape", ["shape"], ["c"]),
    helper.make_node("Slice", ["c", "s0", "s4"], ["f"]),
    helper.make_node("Add", ["x", "f"], ["y"]),
], [f32("x", [4])], [f32("y", [4])], [i64c("shape", [1 << 40]), i64c("s0", [0]), i64c("s4", [4])])
save("huge_expand", [
    helper.make_node("Expand", ["x", "shape"], ["e"]),
    helper.make_node("ReduceMax", ["e", "ax"], ["y"], keepdims=0),
], [f32("x", [4])], [f32("y", [4])], [i64c("shape", [1 << 38, 4]), i64c("ax", [0])])


# Symbolic shapes: a dynamic head split (Shape -> Gather -> Unsqueeze -> Concat ->
# Reshape), and hostile shape arithmetic: a size that overflows when multiplied, a
# negative computed size, and a Range whose length is known only at run time.
def sym(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


head_split = [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
    helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
    helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
    helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
    helper.make_node("Concat", ["b1", "n1", "heads"], ["target"], axis=0),
    helper.make_node("Reshape", ["x", "target"], ["y"]),
]
consts = [i64c("zero", 0), i64c("one", 1), i64c("ax0", [0]), i64c("heads", [4, 16])]
save("dynamic_head_split", head_split, [sym("x", ["batch", "seq", 64])], [sym("y", None)], consts)
save("dynamic_overflow", [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Mul", ["s", "huge"], ["t"]),
    helper.make_node("Mul", ["t", "huge"], ["u"]),
    helper.make_node("Reshape", ["x", "u"], ["y"]),
], [sym("x", ["batch", "seq"])], [sym("y", None)], [i64c("huge", [2**40, 2**40])])
save("dynamic_negative", [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Neg", ["s"], ["n"]),
    helper.make_node("ConstantOfShape", ["n"], ["y"]),
], [sym("x", ["batch", "seq"])], [sym("y", None)])
save("dynamic_range", [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
    helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
    helper.make_node("Mul", ["b", "n"], ["p"]),
    helper.make_node("Mul", ["p", "big"], ["q"]),
    helper.make_node("Range", ["zero", "q", "one"], ["y"]),
], [sym("x", ["batch", "seq"])], [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    [i64c("zero", 0), i64c("one", 1), i64c("big", 2**40)])
