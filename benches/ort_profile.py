#!/usr/bin/env python3
"""Where onnxruntime's time goes on a model, op by op: the counterpart of
`graphrw run DIR --profile`.

Runs the model folder's `test_data_set_0` inputs through onnxruntime (CPU, all graph
optimisations, default threads unless --threads) with session profiling on, --repeat
times after a warm-up, and prints the fastest run's kernel time per op type, largest
first. Products (Gemm, MatMul, FusedMatMul) are listed per output shape, so each of a
transformer's projections shows on its own line:

    python3 benches/ort_profile.py /tmp/graphrw_gpt2_small/s128
    target/release/graphrw run /tmp/graphrw_gpt2_small/s128 --repeat 5 --profile

(`benches/ort_compare.py --model gpt2-small` writes the GPT-2 folders.) Profiling adds
a little to each kernel call, so compare shares and per-product times, not the total,
with a profiled run of graphrw. Exits with status 2 when onnxruntime or onnx is missing.
"""

import argparse
import collections
import glob
import json
import os
import sys
import tempfile

import machine  # benches/machine.py: the CPU line above the figures

PRODUCTS = ("Gemm", "MatMul", "FusedMatMul")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="a folder with model.onnx and test_data_set_0/")
    ap.add_argument("--repeat", type=int, default=5, help="profiled runs (the fastest is shown)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: default)")
    ap.add_argument("--top", type=int, default=20, help="lines to print")
    args = ap.parse_args()
    print(machine.cpu_line(), flush=True)
    try:
        import onnxruntime as ort
        from onnx import TensorProto, numpy_helper
    except ImportError as e:
        print(f"needs onnxruntime and onnx: {e}")
        sys.exit(2)

    sess_probe = ort.InferenceSession(os.path.join(args.model_dir, "model.onnx"),
                                      providers=["CPUExecutionProvider"])
    names = [i.name for i in sess_probe.get_inputs()]
    del sess_probe
    feeds = {}
    for k, name in enumerate(names):
        t = TensorProto()
        with open(os.path.join(args.model_dir, "test_data_set_0", f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        feeds[name] = numpy_helper.to_array(t)

    with tempfile.TemporaryDirectory(prefix="ort_profile_") as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if args.threads:
            opts.intra_op_num_threads = args.threads
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(os.path.join(args.model_dir, "model.onnx"), opts,
                                    providers=["CPUExecutionProvider"])
        sess.run(None, feeds)  # warm-up: weights prepacked, buffers allocated
        for _ in range(max(1, args.repeat)):
            sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
        for leftover in glob.glob(os.path.join(tmp, "*")):
            os.remove(leftover)

    runs = [e for e in events if e.get("name") == "model_run"][1:]
    best = min(runs, key=lambda e: e["dur"])
    start, end = best["ts"], best["ts"] + best["dur"]
    per_op = collections.defaultdict(lambda: [0, 0])
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if not start <= e["ts"] <= end:
            continue
        op = e["args"].get("op_name", "?")
        shape = ""
        if op in PRODUCTS:
            outs = e["args"].get("output_type_shape", [])
            shape = " x ".join(str(dims) for o in outs for dims in o.values())
        entry = per_op[(op, shape)]
        entry[0] += e["dur"]
        entry[1] += 1
    total = best["dur"] / 1e3
    print(f"onnxruntime {ort.__version__}, fastest of {len(runs)} profiled runs: {total:.2f} ms")
    print(f"  {'op':<14}{'output':<26}{'ms':>10}{'share':>8}{'calls':>7}")
    rows = sorted(per_op.items(), key=lambda kv: -kv[1][0])
    for (op, shape), (us, calls) in rows[: args.top]:
        ms = us / 1e3
        print(f"  {op:<14}{shape:<26}{ms:10.3f}{100 * ms / total:7.1f}%{calls:7d}")


if __name__ == "__main__":
    main()
