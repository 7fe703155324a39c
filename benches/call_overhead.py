#!/usr/bin/env python3
"""Per-call overhead of the Python session: graphrw's `InferenceSession.run` against
onnxruntime's on a one-node model (`Relu` of a [1, 16] float32), where nearly all of a
call is overhead. Best of 5 rounds of `--calls` calls each, the two sessions measured in
turn in one process.

Needs the `graphrw` package, onnxruntime, onnx and numpy:

    python benches/call_overhead.py --calls 2000
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402  benches/machine.py: the CPU line above the figures


def model_bytes():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def per_call_us(run, calls):
    """Best of 5 rounds of `calls` calls, in microseconds a call (after a warm-up)."""
    for _ in range(calls // 10 + 1):
        run()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per round")
    args = ap.parse_args()
    import numpy as np
    import onnxruntime as ort

    import graphrw

    m = model_bytes()
    x = {"x": np.ones((1, 16), np.float32)}
    sessions = [("graphrw", graphrw.InferenceSession(m)),
                ("onnxruntime", ort.InferenceSession(m, providers=["CPUExecutionProvider"]))]
    print(machine.cpu_line())
    times = {name: per_call_us(lambda s=s: s.run(None, x), args.calls) for name, s in sessions}
    for name, us in times.items():
        print(f"{name:<12} {us:8.1f} us per call")
    print(f"graphrw / onnxruntime: {times['graphrw'] / times['onnxruntime']:.2f}")


if __name__ == "__main__":
    main()
