#!/usr/bin/env python3
"""`graphrw run` against onnxruntime on corpus models, same inputs, alternating rounds.

For each model folder (model.onnx + test_data_set_0/), runs
`target/release/graphrw run DIR --repeat N` (the CLI's fast path: rules::optimize, then
the default executor stack; it prints the best time of the N runs) and times
onnxruntime (CPU, all graph optimisations, best of N runs) on the same test inputs,
alternating the two for --rounds rounds so both see the same machine load. Prints each
model's times and graphrw's time over onnxruntime's (below 1: graphrw is faster).

    cargo build --release -p graphrw-cli
    python3 benches/ort_corpus.py                               # every model of ../shared/corpus
    python3 benches/ort_corpus.py ../shared/corpus/gpt2_eager --rounds 5
    python3 benches/ort_corpus.py --threads 1                   # both sides on one thread

The main example's model: `target/release/examples/sdpa_fusion --save DIR` writes
DIR/model.onnx with .npy inputs and outputs; given such a folder, this script first
writes DIR/test_data_set_0/ from them so that `graphrw run DIR` runs it:

    target/release/examples/sdpa_fusion --save /tmp/gpt
    python3 benches/ort_corpus.py /tmp/gpt --threads 1 --cpu-time --repeat 4

`--threads N` sets onnxruntime's intra-op threads and RAYON_NUM_THREADS for graphrw
(0: each side's default, which is one thread per core for both).

`--cpu-time` (for shared, loaded machines; use it with `--threads 1`) compares CPU time
per run instead of the best wall time: graphrw's is the CPU time of `graphrw run
--repeat N+1` minus that of `--repeat 1` (so loading and optimising cancel out) over N,
onnxruntime's the process CPU time of N runs over N. Both are means, not best times.
Exits with status 2 (and says why) when onnxruntime or numpy is missing.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import time

import machine  # benches/machine.py: the CPU line above the figures


def load_inputs(onnx, numpy_helper, model_dir, sess):
    inputs = {}
    for i, meta in enumerate(sess.get_inputs()):
        path = os.path.join(model_dir, "test_data_set_0", f"input_{i}.pb")
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        inputs[meta.name] = numpy_helper.to_array(t)
    return inputs


def graphrw_ms(exe, model_dir, repeat, env):
    out = subprocess.run(
        [exe, "run", model_dir, "--repeat", str(repeat)],
        check=True, capture_output=True, text=True, env=env,
    ).stdout
    m = re.search(r"\[default\]: best of \d+ ([0-9.]+) ms", out)
    if not m:
        raise RuntimeError(f"no timing line in `graphrw run {model_dir}` output:\n{out}")
    return float(m.group(1))


def ensure_test_data(onnx, numpy_helper, model_dir):
    """Writes test_data_set_0/{input,output}_<i>.pb from the .npy files `sdpa_fusion
    --save` writes, when the folder has no test data yet."""
    import numpy as np
    data = os.path.join(model_dir, "test_data_set_0")
    if os.path.isdir(data) or not os.path.exists(os.path.join(model_dir, "input_0.npy")):
        return
    m = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False)
    os.makedirs(data)
    for kind, names in (("input", [i.name for i in m.graph.input]),
                        ("output", [o.name for o in m.graph.output])):
        for i, name in enumerate(names):
            arr = np.load(os.path.join(model_dir, f"{kind}_{i}.npy"))
            with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(arr, name).SerializeToString())


def children_cpu_seconds():
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def graphrw_cpu_ms(exe, model_dir, repeat, env):
    """Mean CPU ms of one run: (CPU of repeat + 1 runs - CPU of 1 run) / repeat."""
    spent = []
    for n in (1, repeat + 1):
        c0 = children_cpu_seconds()
        subprocess.run([exe, "run", model_dir, "--repeat", str(n)], check=True,
                       capture_output=True, env=env)
        spent.append(children_cpu_seconds() - c0)
    return (spent[1] - spent[0]) / repeat * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("models", nargs="*", help="model folders (default: every corpus model)")
    ap.add_argument("--repeat", type=int, default=20, help="runs per round on each side")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two sides")
    ap.add_argument("--threads", type=int, default=0, help="threads on both sides (0: defaults)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="mean CPU time per run instead of best wall time (see above)")
    ap.add_argument("--bin", default=None, help="the graphrw binary (default: target/release/graphrw)")
    args = ap.parse_args()
    print(machine.cpu_line(), flush=True)
    try:
        import numpy  # noqa: F401
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper
    except ImportError as e:
        print(f"skipped: {e} (pip install onnxruntime onnx numpy)")
        sys.exit(2)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    exe = args.bin or os.path.join(target, "release", "graphrw")
    if not os.path.exists(exe):
        print(f"{exe} is missing: cargo build --release -p graphrw-cli")
        sys.exit(2)
    models = args.models or sorted(
        os.path.dirname(p) for p in glob.glob(os.path.join(root, "..", "shared", "corpus", "*", "model.onnx"))
    )
    env = dict(os.environ)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if args.threads:
        opts.intra_op_num_threads = args.threads
        env["RAYON_NUM_THREADS"] = str(args.threads)

    how = "mean CPU time" if args.cpu_time else "best wall time"
    print(f"onnxruntime {ort.__version__}, threads: {args.threads or 'default'}, "
          f"{how} of {args.repeat} runs, best of {args.rounds} rounds")
    print(f"{'model':<16}{'graphrw ms':>12}{'ort ms':>10}{'graphrw / ort':>15}")
    for model_dir in models:
        ensure_test_data(onnx, numpy_helper, model_dir)
        sess = ort.InferenceSession(os.path.join(model_dir, "model.onnx"), opts,
                                    providers=["CPUExecutionProvider"])
        inputs = load_inputs(onnx, numpy_helper, model_dir, sess)
        sess.run(None, inputs)  # warm-up
        ours, theirs = float("inf"), float("inf")
        for _ in range(args.rounds):
            if args.cpu_time:
                ours = min(ours, graphrw_cpu_ms(exe, model_dir, args.repeat, env))
                c0 = time.process_time()
                for _ in range(args.repeat):
                    sess.run(None, inputs)
                theirs = min(theirs, (time.process_time() - c0) / args.repeat)
                continue
            ours = min(ours, graphrw_ms(exe, model_dir, args.repeat, env))
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                sess.run(None, inputs)
                theirs = min(theirs, time.perf_counter() - t0)
        theirs *= 1e3
        name = os.path.basename(os.path.normpath(model_dir))
        print(f"{name:<16}{ours:12.3f}{theirs:10.3f}{ours / theirs:15.2f}", flush=True)


if __name__ == "__main__":
    main()
