#!/usr/bin/env python3
"""Two runs of the same model, in turn, pair by pair: the measure for a machine whose
speed drifts.

On a shared or virtual machine the speed of the cores can change by 30% within
seconds (a 2-vCPU cloud VM whose two vCPUs land on one physical core, then on two),
so "best of N" in one process against "best of N" in another compares two different
machines. Here both sides run as child processes that keep their model loaded and run
once per line written to their stdin (`graphrw run --paced`, or onnxruntime through
`ort_compare.py --ort-child DIR N --paced`); the driver alternates them (the order
swapped every pair, one warm-up pair first, `--gap` seconds between runs) and reports
the median of the per-pair time ratios B / A with its quartiles.

The gap matters: onnxruntime's intra-op threads spin for a while after each run, and a
run started in another process before they stop shares the cores with them (on a
2-vCPU Zen 4 and the main example's model, with 10 ms gaps, graphrw's runs just after
onnxruntime's took 93-106 ms against 75-78 ms after its own; from 0.1 s on, 75-80 ms
whichever ran before).

    python3 benches/paired.py DIR --pairs 30 --b-env GRAPHRW_ISA=baseline
    python3 benches/paired.py DIR --pairs 30 --b-binary /tmp/before/graphrw

A and B are `graphrw run DIR --paced` from `--a-binary` and `--b-binary` (default:
this checkout's `target/release/graphrw`), each with its `--a-env` / `--b-env`
variables. `ort_compare.py --paired N` uses the same loop against onnxruntime.
"""

import argparse
import os
import subprocess
import sys
import time

import machine  # benches/machine.py: the CPU line above the figures


class PacedChild:
    """A child process that runs once per line written to its stdin and prints `run N T
    ms` after each run, after a first `ready` line."""

    def __init__(self, cmd, env=None):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.out = []
        self._until(lambda line: line.strip() == "ready")

    def _until(self, done):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                out, rc, _ = self.finish()
                print(out)
                sys.exit(f"{self.proc.args[0]} ended early (exit {rc})")
            self.out.append(line)
            if done(line):
                return line

    def run_once(self):
        """One run; its time in ms."""
        try:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the child has ended: reading its output to the end says so
        line = self._until(lambda line: line.startswith("run "))
        return float(line.split()[2])

    def finish(self):
        """Closes stdin and waits: the whole output, the exit code and the peak RSS in
        MiB (`ru_maxrss`)."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # the child ended before reading the last line written to it
        self.out.append(self.proc.stdout.read())
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return "".join(self.out), self.proc.returncode, usage.ru_maxrss / 1024.0


GAP_S = 0.1
"""Default seconds between two runs: long enough for either side's idle threads to stop
spinning (see the module's docs)."""


def alternate(a, b, pairs, gap=GAP_S):
    """Runs `a` and `b` (`PacedChild`ren) in turn: one warm-up pair, then `pairs` pairs,
    A first in even pairs and B first in odd ones, `gap` seconds apart. Both sides'
    times in ms, pair by pair."""
    a_ms, b_ms = [], []
    for i in range(pairs + 1):
        if i % 2 == 0:
            ta = a.run_once()
            time.sleep(gap)
            tb = b.run_once()
        else:
            tb = b.run_once()
            time.sleep(gap)
            ta = a.run_once()
        time.sleep(gap)
        if i > 0:
            a_ms.append(ta)
            b_ms.append(tb)
    return a_ms, b_ms


def quantile(values, q):
    """The `q` quantile of `values` (linear between the two nearest)."""
    s = sorted(values)
    at = q * (len(s) - 1)
    lo = int(at)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (at - lo)


HEADER = (f"{'':>16}{'pairs':>6}{'median':>8}{'q1':>8}{'q3':>8}{'B wins':>8}"
          f"{'A ms':>10}{'B ms':>10}{'A MiB':>9}{'B MiB':>9}")

NOTE = ("median, q1, q3: of the per-pair ratios B / A; B wins: pairs B took less time in; "
        "A ms, B ms: median times; MiB: peak RSS")


def row(label, a_ms, b_ms, rss):
    """One line under `HEADER`."""
    ratios = [b / a for a, b in zip(a_ms, b_ms)]
    wins = sum(1 for r in ratios if r < 1.0)
    return (f"{label:>16}{len(ratios):>6}{quantile(ratios, 0.5):>8.3f}"
            f"{quantile(ratios, 0.25):>8.3f}{quantile(ratios, 0.75):>8.3f}{wins:>8}"
            f"{quantile(a_ms, 0.5):>10.1f}{quantile(b_ms, 0.5):>10.1f}"
            f"{rss[0]:>9.0f}{rss[1]:>9.0f}")


def env_with(assignments):
    """The environment plus `NAME=VALUE` assignments."""
    env = dict(os.environ)
    for kv in assignments:
        name, sep, value = kv.partition("=")
        if not sep:
            sys.exit(f"`{kv}`: expected NAME=VALUE")
        env[name] = value
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", help="a folder with model.onnx and test_data_set_0/")
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--gap", type=float, default=GAP_S, help="seconds between two runs")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    default_binary = os.path.join(target, "release", "graphrw")
    ap.add_argument("--a-binary", default=default_binary)
    ap.add_argument("--b-binary", default=default_binary)
    ap.add_argument("--a-env", nargs="*", default=[], metavar="NAME=VALUE")
    ap.add_argument("--b-env", nargs="*", default=[], metavar="NAME=VALUE")
    args = ap.parse_args()
    print(machine.cpu_line(), flush=True)
    runs = str(args.pairs + 1)
    sides = []
    for binary, env in [(args.a_binary, args.a_env), (args.b_binary, args.b_env)]:
        cmd = [binary, "run", args.model_dir, "--paced", "--repeat", runs]
        sides.append(PacedChild(cmd, env_with(env)))
    a_ms, b_ms = alternate(sides[0], sides[1], args.pairs, args.gap)
    done = [side.finish() for side in sides]
    for name, (out, rc, _) in zip("AB", done):
        if rc != 0:
            print(out)
            sys.exit(f"{name} failed (exit {rc})")
    print(f"A: {args.a_binary} {' '.join(args.a_env)}")
    print(f"B: {args.b_binary} {' '.join(args.b_env)}")
    print(HEADER)
    print(row(os.path.basename(os.path.normpath(args.model_dir)), a_ms, b_ms,
              (done[0][2], done[1][2])))
    print(NOTE)


if __name__ == "__main__":
    main()
