#!/usr/bin/env python3
"""Per-call overhead of the Python session: graphrw's `InferenceSession.run` against
onnxruntime's on a one-node model (`Relu` of a [1, 16] float32), where nearly all of a
call is overhead. Best of 5 rounds of `--calls` calls each, the two sessions measured in
turn in one process.

With `--big`, two rows where the data crossing the boundary is large (issue #56 goal
2), each also run by graphrw's command line (`graphrw run DIR --repeat N`, best of N,
the kernels' time with the model's inputs already in memory), so that what the Python
call adds to the kernels shows:
- `relu4`: four inputs of 512 KiB ([128, 1024] float32), one `Relu` each, four outputs;
- `kv2048`: one decode step of an attention layer (12 heads of 64) on a cache of 2048:
  inputs `q`, `k`, `v` [1, 12, 1, 64] and `past_key`, `past_value` [1, 12, 2048, 64]
  (6 MiB each); outputs the attention [1, 12, 1, 64] and `present_key`,
  `present_value` = the pasts with the new row appended (6 MiB each).
Each call is timed on its own, `--big-calls` of each side in rounds of 10 calls back to
back (as the command line's `--repeat` runs them), graphrw's and onnxruntime's rounds in
turn (the machine's speed moves within seconds), 0.1 s apart (`benches/paired.py`'s
gap: either side's idle threads spin for a while after a call, and on 2 cores they
would slow the other's): the best (as the command line's "best of N") and the median. The command line is `python -m graphrw` of the installed package
(the same build as the session), or `--cli`.

Needs the `graphrw` package, onnxruntime, onnx and numpy:

    python benches/call_overhead.py --calls 2000
    python benches/call_overhead.py --calls 2000 --big --big-calls 50
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402  benches/machine.py: the CPU line above the figures
import paired  # noqa: E402  benches/paired.py: the gap between two sides' runs


def model_bytes():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def relu4_model():
    """Four [128, 1024] float32 inputs, one `Relu` each; and its feeds."""
    import numpy as np
    from onnx import TensorProto, helper

    shape = [128, 1024]
    g = helper.make_graph(
        [helper.make_node("Relu", [f"x{i}"], [f"y{i}"]) for i in range(4)], "relu4",
        [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape) for i in range(4)],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, shape) for i in range(4)])
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": rng.standard_normal(shape).astype(np.float32) for i in range(4)}
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), feeds


def kv_step_model(heads=12, dim=64, cache=2048):
    """One decode step of attention on a cache of `cache` rows: `present_* =
    concat(past_*, new)` along the rows, `out = softmax(q present_key^T / sqrt(dim))
    present_value`; and its feeds."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    F = TensorProto.FLOAT
    new = [1, heads, 1, dim]
    past = [1, heads, "past", dim]
    nodes = [
        helper.make_node("Concat", ["past_key", "k"], ["present_key"], axis=2),
        helper.make_node("Concat", ["past_value", "v"], ["present_value"], axis=2),
        helper.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "present_value"], ["out"]),
    ]
    scale = numpy_helper.from_array(np.array(dim ** -0.5, np.float32), "scale")
    g = helper.make_graph(
        nodes, "kv_step",
        [helper.make_tensor_value_info(n, F, new) for n in ("q", "k", "v")]
        + [helper.make_tensor_value_info(n, F, past) for n in ("past_key", "past_value")],
        [helper.make_tensor_value_info("out", F, new),
         helper.make_tensor_value_info("present_key", F, [1, heads, "total", dim]),
         helper.make_tensor_value_info("present_value", F, [1, heads, "total", dim])],
        [scale])
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(new).astype(np.float32) for n in ("q", "k", "v")}
    for n in ("past_key", "past_value"):
        feeds[n] = rng.standard_normal([1, heads, cache, dim]).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), feeds


def cli_best_ms(cli, model, feeds, outputs, repeat):
    """The command line's best time of `repeat` runs (ms): the model written with
    `test_data_set_0` (the feeds, and `outputs`, which it checks against)."""
    import onnx
    from onnx import numpy_helper

    with tempfile.TemporaryDirectory() as d:
        onnx.save(model, os.path.join(d, "model.onnx"))
        data = os.path.join(d, "test_data_set_0")
        os.mkdir(data)
        for prefix, values in (("input", list(feeds.values())), ("output", outputs)):
            for i, v in enumerate(values):
                with open(os.path.join(data, f"{prefix}_{i}.pb"), "wb") as f:
                    f.write(numpy_helper.from_array(v).SerializeToString())
        out = subprocess.run(cli + ["run", d, "--repeat", str(repeat)],
                             capture_output=True, text=True)
    found = re.search(r"best of \d+ ([0-9.]+) ms", out.stdout + out.stderr)
    if out.returncode != 0 or not found:
        sys.exit(f"{' '.join(cli)} run failed:\n{out.stdout}{out.stderr}")
    return float(found.group(1))


def big_rows(args):
    """The `relu4` and `kv2048` rows: graphrw's session, onnxruntime's, and the command
    line's kernels, all in ms a call."""
    import onnxruntime as ort

    import graphrw

    cli = args.cli.split() if args.cli else [sys.executable, "-m", "graphrw"]
    print(f"{'':<8} {'graphrw':>15} {'onnxruntime':>15} {'CLI kernels':>12}"
          f" {'graphrw/ort':>12} {'graphrw/CLI':>12}   (ms a call: best / median;"
          " ratios of the bests)")
    for label, (model, feeds) in (("relu4", relu4_model()), ("kv2048", kv_step_model())):
        m = model.SerializeToString()
        g = graphrw.InferenceSession(m)
        o = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
        want = o.run(None, feeds)
        for got, w in zip(g.run(None, feeds), want):
            if not (got.shape == w.shape and abs(got - w).max() <= 1e-4 + 1e-3 * abs(w).max()):
                sys.exit(f"{label}: graphrw's outputs differ from onnxruntime's")
        ms = alternating_ms({"graphrw": lambda: g.run(None, feeds),
                             "onnxruntime": lambda: o.run(None, feeds)}, args.big_calls)
        (gt, gm), (ot, om) = ms["graphrw"], ms["onnxruntime"]
        ct = cli_best_ms(cli, model, feeds, want, args.big_calls)
        print(f"{label:<8} {gt:7.3f} /{gm:7.3f} {ot:7.3f} /{om:7.3f} {ct:12.3f}"
              f" {gt / ot:12.2f} {gt / ct:12.2f}")


def alternating_ms(runs, calls, per_round=10, gap=paired.GAP_S):
    """Each of `runs` (name -> callable) called `calls` times, in rounds of `per_round`
    calls back to back, the runs' rounds in turn, `gap` seconds apart (after a warm-up),
    each call timed: (best, median) in ms per name."""
    import statistics

    for run in runs.values():
        for _ in range(per_round):
            run()
    times = {name: [] for name in runs}
    for _ in range(max(1, calls // per_round)):
        for name, run in runs.items():
            time.sleep(gap)
            for _ in range(per_round):
                t0 = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: (min(t), statistics.median(t)) for name, t in times.items()}


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
    ap.add_argument("--big", action="store_true",
                    help="also the rows with large inputs and outputs (relu4, kv2048)")
    ap.add_argument("--big-calls", type=int, default=60,
                    help="calls of each side in --big (and the command line's runs)")
    ap.add_argument("--cli", default=None,
                    help="the graphrw command for --big (default: python -m graphrw)")
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
    if args.big:
        big_rows(args)


if __name__ == "__main__":
    main()
