#!/usr/bin/env python3
"""graphrw's CPU matmul (gemm / matrixmultiply backends) against onnxruntime's MatMul (MLAS), same shapes, one run.

Runs `graphrw-kernels`' `gemm_rate` example (best of --repeat calls per shape and backend)
and times a one-node onnxruntime MatMul model on the same shapes, alternating the two for
--rounds rounds; each side keeps its best time. A plain `MxKxN` shape multiplies by a
constant weight (an initializer, as in a model's linear layers); `BATCH:MxKxN` multiplies
two inputs batch by batch (attention's QK^T and PV). Prints GFLOP/s per side and ort's
time over graphrw's (above 1: graphrw is faster).

    /work/venv/bin/python benches/ort_matmul_compare.py --threads 1 --cpu-time
    /work/venv/bin/python benches/ort_matmul_compare.py --shapes 512x768x768,12:512x64x512

--cpu-time times both sides by process CPU time (`time.process_time`, and
CLOCK_PROCESS_CPUTIME_ID in the example): on a shared machine it does not count waiting
for a core. Build first (or let the script do it) with
`cargo build --release -p graphrw-kernels --example gemm_rate`.
"""

import argparse
import os
import subprocess
import sys
import time

import machine  # benches/machine.py: the CPU line above the figures

DEFAULT_SHAPES = "512x768x768,512x768x3072,512x3072x768,12:512x64x512,12:512x512x64,1x768x768,7x33x65"


def parse(shape):
    batch, _, rest = shape.rpartition(":")
    m, k, n = (int(x) for x in rest.split("x"))
    return (int(batch) if batch else None), m, k, n


def ort_time(ort, np, helper, shape, threads, repeat, clock):
    batch, m, k, n = parse(shape)
    rng = np.random.default_rng(0)
    a_shape = [batch, m, k] if batch else [m, k]
    b_shape = [batch, k, n] if batch else [k, n]
    out_shape = [batch, m, n] if batch else [m, n]
    a = rng.uniform(-1, 1, a_shape).astype(np.float32)
    b = rng.uniform(-1, 1, b_shape).astype(np.float32)
    f32 = helper.TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("a", f32, a_shape)]
    inits = []
    if batch:
        inputs.append(helper.make_tensor_value_info("b", f32, b_shape))
    else:
        inits.append(helper.make_tensor("b", f32, b_shape, b.flatten().tolist()))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "mm",
        inputs,
        [helper.make_tensor_value_info("y", f32, out_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"a": a, "b": b} if batch else {"a": a}
    sess.run(None, feeds)
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        sess.run(None, feeds)
        best = min(best, clock() - t0)
    return best * 1e3


def graphrw_times(exe, shapes, repeat, cpu_time, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [exe, "--repeat", str(repeat)] + (["--cpu-time"] if cpu_time else []) + shapes
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    times = {}
    for line in out.splitlines():
        # `SHAPE BACKEND MS GFLOP/s`, the `chosen` line with `(KERNEL)` after it.
        shape, backend, ms = line.split()[:3]
        times[(shape, backend)] = float(ms)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated [BATCH:]MxKxN")
    ap.add_argument("--threads", type=int, default=0, help="threads of both sides (0: os.cpu_count())")
    ap.add_argument("--repeat", type=int, default=5, help="calls per shape per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two sides")
    ap.add_argument("--cpu-time", action="store_true", help="time by process CPU time")
    ap.add_argument("--no-build", action="store_true", help="use the example already built")
    args = ap.parse_args()
    print(machine.cpu_line(), flush=True)
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import helper
    except ImportError as e:
        print(f"ort_matmul_compare: needs onnx, onnxruntime and numpy ({e})", file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not args.no_build:
        subprocess.run(
            ["cargo", "build", "--release", "-p", "graphrw-kernels", "--example", "gemm_rate"],
            check=True,
            cwd=root,
        )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    exe = os.path.join(target, "release", "examples", "gemm_rate")
    threads = args.threads or os.cpu_count()
    clock = time.process_time if args.cpu_time else time.perf_counter
    shapes = args.shapes.split(",")
    ours, theirs = {}, {}
    for _ in range(args.rounds):
        for key, ms in graphrw_times(exe, shapes, args.repeat, args.cpu_time, threads).items():
            ours[key] = min(ours.get(key, float("inf")), ms)
        for shape in shapes:
            ms = ort_time(ort, np, helper, shape, threads, args.repeat, clock)
            theirs[shape] = min(theirs.get(shape, float("inf")), ms)
    backends = sorted({b for (_, b) in ours})
    print(f"threads={threads} clock={'cpu' if args.cpu_time else 'wall'} (GFLOP/s; ratio = ort ms / graphrw ms)")
    print(f"{'shape':>16} {'ort':>7} " + " ".join(f"{b:>15} {'ratio':>6}" for b in backends))
    for shape in shapes:
        batch, m, k, n = parse(shape)
        gf = 2.0 * (batch or 1) * m * k * n / 1e6
        row = f"{shape:>16} {gf / theirs[shape]:7.1f} "
        row += " ".join(
            f"{gf / ours[(shape, b)]:15.1f} {theirs[shape] / ours[(shape, b)]:6.2f}"
            if (shape, b) in ours
            else f"{'-':>15} {'-':>6}"  # no packed weight for a product of two inputs
            for b in backends
        )
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
