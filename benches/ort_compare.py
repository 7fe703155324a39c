#!/usr/bin/env python3
"""graphrw against onnxruntime on the same model and inputs, measured in one run.

Runs `cargo run --release --example sdpa_fusion -- [MODEL] --save DIR`, which times the
model in graphrw three ways (unfused, attention fused, attention + generated kernels) and
writes the unfused model as ONNX with its inputs and graphrw's outputs as .npy; then runs
that model in onnxruntime (CPU, all graph optimisations, best of the same number of runs),
checks the outputs agree, and prints graphrw's time over onnxruntime's for each
configuration. With `--rounds N` the two sides alternate N times (the example binary is
run again, then onnxruntime), each keeping its best time, so both see the same machine
load: use it on a shared machine.

    pip install onnxruntime numpy
    python3 benches/ort_compare.py                      # the embedded GPT-style model
    python3 benches/ort_compare.py ../shared/corpus/gpt2_eager/model.onnx
    python3 benches/ort_compare.py --dir /tmp/saved     # reuse a folder saved before
    python3 benches/ort_compare.py --rounds 3           # alternate graphrw and onnxruntime 3 times

cargo inherits the environment, so set CARGO_TARGET_DIR to reuse an existing build.
Exits with status 2 (and says why) when onnxruntime or numpy is missing.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="an ONNX model (default: the embedded GPT-style one)")
    ap.add_argument("--dir", help="a folder already written by `sdpa_fusion --save` (skips cargo)")
    ap.add_argument("--threads", type=int, default=0, help="threads on both sides: onnxruntime intra-op threads and RAYON_NUM_THREADS (0: defaults, one per core)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate graphrw and onnxruntime this many times (best of each)")
    ap.add_argument("--no-build", action="store_true",
                    help="run the example binary already in target/release/examples (no cargo)")
    args = ap.parse_args()
    if args.threads:
        # graphrw's threads: the example inherits the environment.
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"skipped: {e} (pip install onnxruntime numpy)")
        sys.exit(2)

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    example = os.path.join(target, "release", "examples", "sdpa_fusion")
    out_dir = args.dir
    if out_dir is None:
        out_dir = tempfile.mkdtemp(prefix="graphrw_ort_")
        if args.no_build:
            cmd = [example]
        else:
            cmd = ["cargo", "run", "--release", "--example", "sdpa_fusion", "--"]
        if args.model:
            cmd.append(os.path.abspath(args.model))
        cmd += ["--save", out_dir]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=root, check=True)

    with open(os.path.join(out_dir, "graphrw_times.json")) as f:
        times = json.load(f)
    inputs = {}
    for i, name in enumerate(times["input_names"]):
        inputs[name] = np.load(os.path.join(out_dir, f"input_{i}.npy"))
    expected = []
    while os.path.exists(os.path.join(out_dir, f"output_{len(expected)}.npy")):
        expected.append(np.load(os.path.join(out_dir, f"output_{len(expected)}.npy")))

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if args.threads:
        opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(
        os.path.join(out_dir, "model.onnx"), opts, providers=["CPUExecutionProvider"]
    )
    outs = sess.run(None, inputs)  # warm-up (graphrw plans once before its runs too)
    best = float("inf")
    for r in range(max(1, args.rounds)):
        if r > 0:
            if args.dir is not None or not os.path.exists(example):
                print("--rounds needs the example built by this script (not --dir)")
                sys.exit(2)
            cmd = [example] + ([os.path.abspath(args.model)] if args.model else [])
            subprocess.run(cmd + ["--save", out_dir], check=True, capture_output=True)
            with open(os.path.join(out_dir, "graphrw_times.json")) as f:
                again = json.load(f)
            for key in ("unfused", "attention", "generated"):
                times[f"{key}_ms"] = min(times[f"{key}_ms"], again[f"{key}_ms"])
        for _ in range(int(times["repeats"])):
            t0 = time.perf_counter()
            outs = sess.run(None, inputs)
            best = min(best, time.perf_counter() - t0)
    ort_ms = best * 1e3

    diff = max(
        (float(np.max(np.abs(np.asarray(o, dtype=np.float64) - e.astype(np.float64)))) if o.size else 0.0)
        for o, e in zip(outs, expected)
    )
    print(f"\nonnxruntime {ort.__version__}: {ort_ms:9.2f} ms "
          f"(best of {times['repeats']} x {max(1, args.rounds)} rounds), "
          f"max |graphrw - ort| {diff:.2e}")
    print(f"{'graphrw':<24}{'ms':>10}{'peak MiB':>10}{'graphrw / ort':>15}")
    for key, label in [("unfused", "unfused"), ("attention", "attention fused"),
                       ("generated", "attention + generated")]:
        ms = times[f"{key}_ms"]
        print(f"{label:<24}{ms:10.2f}{times[f'{key}_peak_mib']:10.1f}{ms / ort_ms:15.2f}")


if __name__ == "__main__":
    main()
