#!/usr/bin/env python3
"""Peak memory and wall time of `graphrw optimize` and `graphrw run` against weight size.

Generates, for each size, an ONNX model whose weights live in a *sparse* external data
file (so a 13 GB model costs no disk; `--dense` writes every weight instead), laid out as torch.onnx writes it
(`model.onnx` + `model.onnx.data`), with a `test_data_set_0` for `graphrw run`:

    h = matmul(x, W)            # W: f32 (or f16 from 8 GB on) [K, N], the weights
    y = layer_norm(h + r, g, b) # optimize fuses this into fused.add_layer_norm
    out = y

`matmul` reads every weight, so `run` touches all of W: its peak is the weights (the
mapped pages, counted in RSS) plus activations. Sizes over 4 GB are f16; the CPU
matmul computes them in f32 but converts a large W 16 MiB of rows at a time, so `run`
stays at the weights plus activations there too (`--no-f16-run` skips it).

Each command runs under `/usr/bin/time -f '%e %M'`: wall seconds and peak RSS. Pass
several binaries to compare builds (e.g. before and after a change):

    python3 benches/weights_memory.py --bin before=/tmp/graphrw-base \
        --bin after=target/release/graphrw --sizes 0.5 2.4 13

Needs numpy and onnx (for the test data files); nothing is asserted, it prints a table.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(d, gb, dense=False):
    """Writes the model of about `gb` GB of weights into folder `d` (sparse, or with
    every weight written when `dense`)."""
    f16 = gb > 4
    dt, np_dt, width = (
        (TensorProto.FLOAT16, np.float16, 2) if f16 else (TensorProto.FLOAT, np.float32, 4)
    )
    n = 4096
    k = max(1, int(gb * 1e9) // (n * width))
    w_bytes = k * n * width
    os.makedirs(d, exist_ok=True)
    data = os.path.join(d, "model.onnx.data")
    rng = np.random.default_rng(0)
    with open(data, "wb") as f:
        if dense:
            rows = max(1, (64 << 20) // (n * width))
            for r0 in range(0, k, rows):
                m = min(rows, k - r0) * n
                f.write(rng.standard_normal(m, dtype=np.float32).astype(np_dt).tobytes())
        # A few known rows at the start, middle and end; with `dense` off the rest is a hole.
        for row in (0, k // 2, k - 1):
            f.seek(row * n * width)
            f.write(rng.standard_normal(n).astype(np_dt).tobytes())
        f.seek(w_bytes)
        small = {}
        for name in ("g", "b"):
            off = f.tell()
            f.write(rng.standard_normal(n).astype(np_dt).tobytes())
            small[name] = (off, n * width)
        f.truncate(f.tell())

    def ext(name, dims, off, length):
        t = TensorProto(name=name, data_type=dt, dims=dims)
        t.data_location = TensorProto.EXTERNAL
        for key, v in (("location", "model.onnx.data"), ("offset", off), ("length", length)):
            e = t.external_data.add()
            e.key, e.value = key, str(v)
        return t

    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
        helper.make_node("Add", ["h", "r"], ["s"], name="residual"),
        helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes,
        "weights",
        [helper.make_tensor_value_info("x", dt, [1, k]), helper.make_tensor_value_info("r", dt, [1, n])],
        [helper.make_tensor_value_info("y", dt, [1, n])],
        initializer=[ext("W", [k, n], 0, w_bytes)] + [ext(nm, [n], *small[nm]) for nm in ("g", "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())

    # Test data: x is zero but for the rows that hold data, so the expected output
    # needs only those rows (computed here without reading the hole).
    x = np.zeros((1, k), np_dt)
    wrows = {}
    with open(data, "rb") as f:
        for row in (0, k // 2, k - 1):
            f.seek(row * n * width)
            wrows[row] = np.frombuffer(f.read(n * width), np_dt).astype(np.float32)
            x[0, row] = 0.5
        f.seek(small["g"][0])
        g = np.frombuffer(f.read(n * width), np_dt).astype(np.float32)
        b = np.frombuffer(f.read(n * width), np_dt).astype(np.float32)
    r = rng.standard_normal((1, n)).astype(np_dt)
    h = sum(0.5 * w for w in wrows.values()) + r.astype(np.float32)
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    y = ((h - mu) / np.sqrt(var + 1e-5) * g + b).astype(np_dt)
    ts = os.path.join(d, "test_data_set_0")
    os.makedirs(ts, exist_ok=True)
    for i, (name, arr) in enumerate((("x", x), ("r", r))):
        with open(os.path.join(ts, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr, name).SerializeToString())
    with open(os.path.join(ts, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "y").SerializeToString())
    return w_bytes, f16


def timed(cmd):
    """(wall seconds, peak RSS bytes, ok, output tail) of `cmd` under /usr/bin/time."""
    p = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *cmd], capture_output=True, text=True)
    line = [l for l in p.stderr.splitlines() if l.startswith("TIME ")][-1].split()
    tail = (p.stdout + p.stderr).strip().splitlines()[-2:]
    return float(line[1]), int(line[2]) * 1024, p.returncode == 0, " | ".join(tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", default=[], help="LABEL=PATH of a graphrw binary (repeatable)")
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.5, 2.4, 13.0], help="weight sizes in GB")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp folder, removed)")
    ap.add_argument("--no-run", action="store_true", help="skip `graphrw run`")
    ap.add_argument("--no-f16-run", action="store_true", help="skip `graphrw run` on the f16 sizes")
    ap.add_argument("--dense", action="store_true", help="write every weight (real disk use) instead of a sparse file")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin] or [["graphrw", "target/release/graphrw"]]
    root = a.dir or tempfile.mkdtemp(prefix="graphrw-weights-")
    print("| build | weights | command | wall s | peak RSS | peak / weights | result |")
    print("|---|---|---|---|---|---|---|")
    try:
        for gb in a.sizes:
            d = os.path.join(root, f"w{gb}")
            w_bytes, f16 = make_model(d, gb, a.dense)
            for label, exe in bins:
                out = os.path.join(d, f"out_{label}.onnx")
                cmds = [("optimize", [exe, "optimize", os.path.join(d, "model.onnx"), "-o", out])]
                if not a.no_run and not (f16 and a.no_f16_run):
                    cmds.append(("run", [exe, "run", d]))
                    cmds.append(("run optimised", [exe, "run", d, "--model", out]))
                for what, cmd in cmds:
                    if what == "run optimised" and not os.path.exists(out):
                        continue
                    wall, peak, ok, tail = timed(cmd)
                    print(
                        f"| {label} | {w_bytes / 1e9:.2f} GB {'f16' if f16 else 'f32'}{' dense' if a.dense else ''} | {what} | {wall:.2f} "
                        f"| {peak / 1e6:.0f} MB | {peak / w_bytes:.1%} | {'ok' if ok else 'FAILED: ' + tail[:120]} |",
                        flush=True,
                    )
                for p in (out, out + ".data"):
                    if os.path.exists(p):
                        os.remove(p)
            shutil.rmtree(d)
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
