#!/usr/bin/env python3
"""graphrw's fused CPU SDPA against PyTorch's `scaled_dot_product_attention`, same shapes, one run.

Builds and runs `cargo run --release -p graphrw-kernels --example sdpa_time` (graphrw's
kernel, best of --repeat calls per shape) and times torch's CPU SDPA on the same shapes
(B=1, H=8, Sq=Skv=S, same thread count), alternating the two for --rounds rounds so both
see the same machine load; each side keeps its best time per shape. Prints a table with
torch's time over graphrw's (above 1: graphrw is faster).

    python3 -m venv /tmp/venv-torch && /tmp/venv-torch/bin/pip install torch numpy
    /tmp/venv-torch/bin/python benches/torch_sdpa_compare.py
    /tmp/venv-torch/bin/python benches/torch_sdpa_compare.py --dtypes bf16 --d 128 --s 2048
    /tmp/venv-torch/bin/python benches/torch_sdpa_compare.py --threads 1 --cpu-time  # shared machine
    # the AVX2 path of the same build beside the default (AVX-512 where the CPU has it)
    /tmp/venv-torch/bin/python benches/torch_sdpa_compare.py --also-env GRAPHRW_SDPA_NO_AVX512=1

torch is never needed by the build or CI. Exits with status 2 (and says why) when torch is
missing. cargo inherits the environment, so set CARGO_TARGET_DIR to reuse a build.
"""

import argparse
import os
import subprocess
import sys
import time

import machine  # benches/machine.py: the CPU line above the figures


def torch_time(torch, dtype, d, s, causal, heads, repeat, clock):
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.rand(1, heads, s, d, generator=g).mul(2).sub(1).to(dt) for _ in range(3))
    f = torch.nn.functional.scaled_dot_product_attention
    with torch.no_grad():
        f(q, k, v, is_causal=causal)
        best = float("inf")
        for _ in range(repeat):
            t0 = clock()
            f(q, k, v, is_causal=causal)
            best = min(best, clock() - t0)
    return best * 1e3


def graphrw_times(exe, specs, heads, repeat, cpu_time, env=None):
    cmd = [exe, "--repeat", str(repeat), "--heads", str(heads)] + (["--cpu-time"] if cpu_time else []) + specs
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    times = {}
    for line in out.splitlines():
        spec, ms, _gflops = line.split()
        times[spec] = float(ms)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--d", default="64,128", help="head dims")
    ap.add_argument("--s", default="512,1024,2048,4096", help="sequence lengths")
    ap.add_argument("--causal", default="no,yes", help="no, yes or both (no,yes)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="calls per shape per round")
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two sides")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: os.cpu_count())")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by process CPU time instead of wall time (shared machines; "
                         "sets OMP_WAIT_POLICY=PASSIVE so torch's idle threads do not spin)")
    ap.add_argument("--also", metavar="EXE", default=None,
                    help="another sdpa_time binary (say, an older build) timed in the same rounds; "
                         "its torch / graphrw ratio gets its own column")
    ap.add_argument("--also-env", metavar="NAME=VALUE", default=None,
                    help="time this build a second time with NAME=VALUE in its environment (say, "
                         "GRAPHRW_SDPA_NO_AVX512=1 for the AVX2 path) in the same rounds, as a "
                         "second column like --also")
    ap.add_argument("--no-build", action="store_true",
                    help="run the sdpa_time binary already in target/release/examples (no cargo)")
    args = ap.parse_args()
    print(machine.cpu_line(), flush=True)
    if args.also and args.also_env:
        ap.error("give --also or --also-env, not both")
    also_env = None
    if args.also_env:
        name, sep, value = args.also_env.partition("=")
        if not sep or not name:
            ap.error("--also-env wants NAME=VALUE")
        also_env = dict(os.environ, **{name: value})
    if args.cpu_time:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    clock = time.process_time if args.cpu_time else time.perf_counter
    try:
        import torch
    except ImportError as e:
        print(f"skipped: {e} (pip install torch)")
        sys.exit(2)
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = ["cargo", "build", "--release", "-p", "graphrw-kernels", "--example", "sdpa_time"]
    if not args.no_build:
        print("$", " ".join(build), flush=True)
        subprocess.run(build, cwd=root, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    exe = os.path.join(target, "release", "examples", "sdpa_time")
    also_exe = exe if also_env else args.also

    shapes = []
    for dtype in args.dtypes.split(","):
        for d in map(int, args.d.split(",")):
            for s in map(int, args.s.split(",")):
                for c in args.causal.split(","):
                    shapes.append((dtype, d, s, c == "yes"))
    specs = [f"{dt},{d},{s}" + (",causal" if c else "") for dt, d, s, c in shapes]
    keys = [f"{dt},{d},{s},{'causal' if c else 'full'}" for dt, d, s, c in shapes]
    ours = {k: float("inf") for k in keys}
    theirs = {k: float("inf") for k in keys}
    other = {k: float("inf") for k in keys}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", flush=True)
        for (dt, d, s, c), key, spec in zip(shapes, keys, specs):
            theirs[key] = min(theirs[key], torch_time(torch, dt, d, s, c, args.heads, args.repeat, clock))
            got = graphrw_times(exe, [spec], args.heads, args.repeat, args.cpu_time)
            ours[key] = min(ours[key], got[key])
            if also_exe:
                got = graphrw_times(also_exe, [spec], args.heads, args.repeat, args.cpu_time, also_env)
                other[key] = min(other[key], got[key])

    print(f"\ntorch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
          f"{threads} threads, B=1 H={args.heads}, best of {args.repeat} x {args.rounds} rounds, "
          f"{'CPU' if args.cpu_time else 'wall'} time")
    if also_env:
        print(f"--also-env: this build with {args.also_env}")
    also = f"{'torch / --also':>16}" if also_exe else ""
    print(f"{'shape':<26}{'graphrw ms':>12}{'torch ms':>12}{'torch / graphrw':>17}{also}")
    for key in keys:
        extra = f"{theirs[key] / other[key]:16.2f}" if also_exe else ""
        print(f"{key:<26}{ours[key]:12.3f}{theirs[key]:12.3f}{theirs[key] / ours[key]:17.2f}{extra}")


if __name__ == "__main__":
    main()
