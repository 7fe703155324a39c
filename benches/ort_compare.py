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
    python3 benches/ort_compare.py --model gpt2-small --rounds 3   # GPT-2 small, S = 128 and 512
    python3 benches/ort_compare.py --paired 30 --no-build          # paired runs (below)
    python3 benches/ort_compare.py --model gpt2-small --paired 30 --no-build

`--model gpt2-small` instead times `graphrw run` (the CLI, default stack, best of
`--repeat` runs) against onnxruntime on GPT-2 small with random weights (built by
`benches/gpt2_small.py` into `--cache`, about 650 MB per sequence length, once), batch 1,
f32, default threads, at each `--seq`. Each side runs in its own process, alternating
`--rounds` times; beside the best time it prints each side's peak RSS (the largest over
the rounds, from the kernel's accounting of the child process), and `graphrw run`
checks its logits against onnxruntime's (abs 1e-4 + rel 1e-3).

`--paired N` is the measure for a machine whose speed drifts (a shared or virtual one,
where best-of-N in two processes compares two different machines): `graphrw run
--paced` and onnxruntime each keep the model loaded in a process of their own and run
in turn, N pairs (`benches/paired.py`), and the table gives the median of the N ratios
graphrw / onnxruntime with its quartiles, both median times and both peak RSS. For the
main example it runs on the saved folder (the example times nothing else).

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

import machine  # benches/machine.py: the CPU line above the figures
import paired as paired_runs  # benches/paired.py: runs in turn, pair by pair


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="an ONNX model (default: the embedded GPT-style one)")
    ap.add_argument("--model", dest="kind", choices=["example", "gpt2-small"], default="example",
                    help="the main example's model (default) or GPT-2 small")
    ap.add_argument("--seq", type=int, nargs="+", default=[128, 512],
                    help="gpt2-small: sequence lengths")
    ap.add_argument("--repeat", type=int, default=3, help="gpt2-small: timed runs per round")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "graphrw_gpt2_small"),
                    help="gpt2-small: folder for the generated models")
    ap.add_argument("--ort-child", nargs=2, metavar=("DIR", "REPEAT"), help=argparse.SUPPRESS)
    ap.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--paired", type=int, metavar="N", default=0,
                    help="run graphrw and onnxruntime in turn N times, each in its own process "
                         "with the model loaded, and print the median of the N ratios "
                         "(the measure to use on a machine whose speed drifts)")
    ap.add_argument("--dir", help="a folder already written by `sdpa_fusion --save` (skips cargo)")
    ap.add_argument("--threads", type=int, default=0, help="threads on both sides: onnxruntime intra-op threads and RAYON_NUM_THREADS (0: defaults, one per core)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate graphrw and onnxruntime this many times (best of each)")
    ap.add_argument("--no-build", action="store_true",
                    help="run the example binary already in target/release/examples (no cargo)")
    args = ap.parse_args()
    if args.ort_child:
        return ort_child(args.ort_child[0], int(args.ort_child[1]), args.threads, args.paced)
    print(machine.cpu_line(), flush=True)
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
    if args.kind == "gpt2-small":
        return gpt2_small(args, root, target)
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
        subprocess.run(cmd, cwd=root, check=True, capture_output=args.paired > 0)
    if args.paired:
        binary = cli_binary(args, root, target)
        g_ms, o_ms, rss, check, version = paired(out_dir, binary, args.paired, args.threads)
        print(f"\n`graphrw run --paced` against onnxruntime, run in turn, {version}")
        print(paired_runs.HEADER)
        print_paired(os.path.basename(os.path.normpath(out_dir)), g_ms, o_ms, rss)
        print(f"graphrw's outputs against the saved ones: {check}")
        print(PAIRED_NOTE)
        return None

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


def run_child(cmd):
    """Runs `cmd` to the end; its stdout and its peak RSS in MiB (`ru_maxrss`)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return out, proc.returncode, usage.ru_maxrss / 1024.0


def ort_child(model_dir, repeat, threads, paced=False):
    """In a process of its own: onnxruntime on a folder with `model.onnx` and
    `test_data_set_0/input_<i>.pb` (`gpt2_small.py`'s, or `sdpa_fusion --save`'s), one
    warm-up run (session creation packs the weights) then `repeat` timed runs; prints
    the best time in ms. `paced`: the protocol of `graphrw run --paced` (`ready`, then
    one run per line read on stdin, each printed as `run N T ms`)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import numpy_helper, TensorProto

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(os.path.join(model_dir, "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    feeds = {}
    for i, meta in enumerate(sess.get_inputs()):
        t = TensorProto()
        with open(os.path.join(model_dir, "test_data_set_0", f"input_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        feeds[meta.name] = numpy_helper.to_array(t)
    sess.run(None, feeds)
    if paced:
        print("ready", flush=True)
    best = float("inf")
    for n in range(max(1, repeat)):
        if paced and not sys.stdin.readline() and n > 0:
            break
        t0 = time.perf_counter()
        sess.run(None, feeds)
        took = time.perf_counter() - t0
        best = min(best, took)
        if paced:
            print(f"run {n + 1} {took * 1e3:.3f} ms", flush=True)
    print(f"best_ms {best * 1e3:.3f} onnxruntime {ort.__version__} numpy {np.__version__}")


def paired(model_dir, binary, pairs, threads):
    """`--paired`: `graphrw run --paced` (A) and onnxruntime (B), each in its own
    process with the model loaded, run in turn (`paired.alternate`). Both sides' times
    in ms, their peak RSS (MiB), graphrw's check line and onnxruntime's version."""
    import re

    g = paired_runs.PacedChild([binary, "run", model_dir, "--paced", "--repeat",
                                str(pairs + 1)])
    o = paired_runs.PacedChild([sys.executable, os.path.abspath(__file__), "--ort-child",
                                model_dir, str(pairs + 1), "--threads", str(threads),
                                "--paced"])
    g_ms, o_ms = paired_runs.alternate(g, o, pairs)
    g_out, g_rc, g_rss = g.finish()
    o_out, o_rc, o_rss = o.finish()
    if g_rc != 0 or o_rc != 0:
        print(g_out, o_out)
        sys.exit(f"a child failed (graphrw exit {g_rc}, onnxruntime exit {o_rc})")
    err = re.search(r"max abs error (\S+), max rel error \S+: (.*)", g_out)
    check = f"max abs {err.group(1)} {err.group(2)}" if err else "?"
    version = re.search(r"best_ms [0-9.]+ (.*)", o_out).group(1)
    return g_ms, o_ms, (g_rss, o_rss), check, version


def print_paired(label, g_ms, o_ms, rss):
    """One row of `--paired`'s table: onnxruntime is A and graphrw B, so the ratios are
    graphrw's time over onnxruntime's."""
    print(paired_runs.row(label, o_ms, g_ms, (rss[1], rss[0])))


PAIRED_NOTE = ("A: onnxruntime, B: graphrw. " + paired_runs.NOTE)


def cli_binary(args, root, target):
    """`graphrw`'s binary in `target`, built first unless `--no-build`."""
    if not args.no_build:
        cmd = ["cargo", "build", "--release", "-p", "graphrw-cli"]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=root, check=True)
    return os.path.join(target, "release", "graphrw")


def gpt2_small(args, root, target):
    """`--model gpt2-small`: `graphrw run` against onnxruntime at each `--seq`, each in
    its own process, alternating `--rounds` times (see the module's docs)."""
    import re

    writer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_small.py")
    binary = cli_binary(args, root, target)
    rows, paired_rows = [], []
    for seq in args.seq:
        model_dir = os.path.join(args.cache, f"s{seq}")
        if not os.path.exists(os.path.join(model_dir, "test_data_set_0", "output_0.pb")):
            print(f"writing GPT-2 small (S = {seq}) into {model_dir}", flush=True)
            # In a process of its own: a child forked from a parent that held the
            # weights would report the parent's peak as its own (`ru_maxrss` is kept
            # across fork and exec).
            cmd = [sys.executable, writer, model_dir, "--seq", str(seq), "--ort"]
            subprocess.run(cmd, check=True)
        if args.paired:
            g_ms, o_ms, rss, check, ort_version = paired(model_dir, binary, args.paired,
                                                         args.threads)
            paired_rows.append((f"S = {seq}", g_ms, o_ms, rss, check))
            continue
        g_ms, o_ms, g_rss, o_rss, check = float("inf"), float("inf"), 0.0, 0.0, "?"
        for _ in range(max(1, args.rounds)):
            out, rc, rss = run_child([binary, "run", model_dir, "--repeat", str(args.repeat)])
            m = re.search(r"best of \d+ ([0-9.]+) ms", out)
            err = re.search(r"max abs error (\S+), max rel error \S+: (.*)", out)
            if rc != 0 or not m:
                print(out)
                print(f"graphrw run failed (exit {rc})")
                sys.exit(1)
            g_ms, g_rss = min(g_ms, float(m.group(1))), max(g_rss, rss)
            check = f"max abs {err.group(1)} {err.group(2)}" if err else "?"
            cmd = [sys.executable, os.path.abspath(__file__), "--ort-child", model_dir,
                   str(args.repeat), "--threads", str(args.threads)]
            out, rc, rss = run_child(cmd)
            m = re.search(r"best_ms ([0-9.]+) (.*)", out)
            if rc != 0 or not m:
                print(out)
                print(f"onnxruntime child failed (exit {rc})")
                sys.exit(1)
            o_ms, o_rss, ort_version = min(o_ms, float(m.group(1))), max(o_rss, rss), m.group(2)
        rows.append((seq, g_ms, o_ms, g_rss, o_rss, check))
    if paired_rows:
        print(f"\nGPT-2 small, batch 1, f32, `graphrw run --paced` against onnxruntime, run in "
              f"turn, {ort_version}")
        print(paired_runs.HEADER)
        for label, g_ms, o_ms, rss, _ in paired_rows:
            print_paired(label, g_ms, o_ms, rss)
        for label, *_, check in paired_rows:
            print(f"{label}: logits vs onnxruntime's: {check}")
        print(PAIRED_NOTE)
        return
    print(f"\nGPT-2 small, batch 1, f32, best of {args.repeat} runs x {max(1, args.rounds)} "
          f"rounds each, {ort_version}")
    print(f"{'S':>5}{'graphrw ms':>12}{'ort ms':>10}{'time ratio':>12}"
          f"{'graphrw MiB':>13}{'ort MiB':>10}{'RSS ratio':>11}  logits vs ort")
    for seq, g_ms, o_ms, g_rss, o_rss, check in rows:
        print(f"{seq:>5}{g_ms:12.1f}{o_ms:10.1f}{g_ms / o_ms:12.2f}"
              f"{g_rss:13.0f}{o_rss:10.0f}{g_rss / o_rss:11.2f}  {check}")


if __name__ == "__main__":
    main()
