#!/usr/bin/env python3
"""graphrw against onnxruntime on a real-width decoder with a KV cache (issue #52 goal 6).

The model: transformers' `LlamaForCausalLM` from a config, 2048 wide, 32 query heads of
64, 4 kv heads, a 5632-wide SwiGLU, 2 layers, vocabulary 32 000 (TinyLlama-like),
random weights (seeded), default (`sdpa`) attention. It is exported WITH its KV cache:
inputs `input_ids` [batch, new], `attention_mask` [batch, past + new] (ones),
`position_ids` [batch, new] and `past_key_<L>` / `past_value_<L>` [batch, 4, past, 64];
outputs `logits` and `present_key_<L>` / `present_value_<L>` [batch, 4, past + new, 64],
with batch, new tokens and cache length dynamic. By dynamo (`dynamo=True`) when it
exports, else by TorchScript (opset 17, `dynamic_axes`); `--exporter` picks one. Built
once into `--cache-dir` (default `$GRAPHRW_BENCH_CACHE` or `~/.cache/graphrw-bench`,
then `decode/EXPORTER/`), in a child process, with one folder per step shape holding
hard links to the model and `test_data_set_0/` (random cache, torch's outputs, which
`graphrw run` checks against).

What it measures, batch 1, f32, default threads:
- per step, paired (`benches/paired.py`: each side keeps the model loaded in a process
  of its own and they run in turn, `--pairs` pairs): one new token at cache 255 and
  1023 (`step1_c255`, `step1_c1023`), a 16-token chunk at cache 255 and 1023
  (`chunk16_c255`, `chunk16_c1023`) and the 128-token prompt on an empty cache
  (`prompt128_c0`): `graphrw run DIR --paced` against onnxruntime
  (`ort_compare.py --ort-child DIR N --paced`), both median times, the median of the
  per-pair ratios graphrw / onnxruntime with its quartiles, both peak RSS;
- a generation loop, as onnxruntime's users run it: the 128-token prompt, then 256
  one-token steps (greedy), each step's `present_*` fed back as the next `past_*`,
  with plain `run` and with IOBinding (the presents stay onnxruntime's values, bound as
  the next inputs), in a child process of its own: prompt ms, tokens per second of
  the 256 steps, peak RSS. Where the `graphrw` Python package imports, the same loop
  runs through `graphrw.InferenceSession.run` (`plain`) and through its generation
  loop, `InferenceSession.decode_loop()` (`loop`: the caches stay in graphrw's memory
  and grow in place); otherwise graphrw's rate is ESTIMATED from the paired one-token step at
  cache 255 (the loop's steps see caches 128..383, whose mean is 255.5, and a step's
  cost is linear in the cache length), printed beside onnxruntime's estimate from the
  same pairs, so that the estimate's bias can be read off onnxruntime's real loop.

Needs torch, transformers, onnx, onnxscript, onnxruntime and numpy (never in CI):

    /work/torchvenv/bin/python benches/decode.py --pairs 20
    /work/torchvenv/bin/python benches/decode.py --steps step1_c255 --pairs 3 \\
        --binary /work/main/target/release/graphrw
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402  benches/machine.py: the CPU line above the figures
import paired  # noqa: E402  benches/paired.py: runs in turn, pair by pair
import realsize  # noqa: E402  benches/realsize.py: the pairing of graphrw and onnxruntime

CONFIG = dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4,
              intermediate_size=5632, num_hidden_layers=2, vocab_size=32000)
LAYERS, KV_HEADS, HEAD_DIM = 2, 4, 64
# name: (new tokens, cache length)
STEPS = {"step1_c255": (1, 255), "step1_c1023": (1, 1023), "chunk16_c255": (16, 255),
         "chunk16_c1023": (16, 1023), "prompt128_c0": (128, 0)}
PROMPT, GENERATED = 128, 256
HERE = os.path.dirname(os.path.abspath(__file__))
PAST = [f"past_{kv}_{i}" for i in range(LAYERS) for kv in ("key", "value")]
PRESENT = [f"present_{kv}_{i}" for i in range(LAYERS) for kv in ("key", "value")]
INPUTS = ["input_ids", "attention_mask", "position_ids"] + PAST
OUTPUTS = ["logits"] + PRESENT


def make_module():
    """The Llama-like model as a module of flat tensors (`INPUTS` to `OUTPUTS`)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**CONFIG)
    model = transformers.LlamaForCausalLM(config).eval()

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids,
                    past_key_0, past_value_0, past_key_1, past_value_1):
            cache = transformers.DynamicCache(
                ddp_cache_data=[(past_key_0, past_value_0), (past_key_1, past_value_1)])
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=cache, use_cache=True)
            present = out.past_key_values.layers
            return (out.logits, present[0].keys, present[0].values,
                    present[1].keys, present[1].values)

    return Decoder().eval()


def feeds(new, past, batch=1, seed=0):
    """Inputs for `new` tokens after a random cache of `past`, as numpy arrays by name."""
    import numpy as np

    rng = np.random.default_rng(seed + 1000 * new + past)
    f = {"input_ids": rng.integers(0, CONFIG["vocab_size"], (batch, new), dtype=np.int64),
         "attention_mask": np.ones((batch, past + new), np.int64),
         "position_ids": np.tile(np.arange(past, past + new, dtype=np.int64), (batch, 1))}
    for name in PAST:
        f[name] = rng.standard_normal((batch, KV_HEADS, past, HEAD_DIM), dtype=np.float32)
    return f


def export(module, exporter, path):
    import torch

    example = tuple(torch.from_numpy(v) for v in feeds(3, 5, batch=2).values())
    if exporter == "dynamo":
        # Named: every past shares one length (with Dim.DYNAMIC each gets its own symbol,
        # and graphrw refuses `past_key_0 + new` against `past_value_0 + new` at plan
        # time); the mask's length is torch.export's to relate to them.
        batch, new, past = (torch.export.Dim("batch", max=64), torch.export.Dim("new", max=4096),
                            torch.export.Dim("past", max=8192))
        shapes = {"input_ids": {0: batch, 1: new},
                  "attention_mask": {0: batch, 1: torch.export.Dim.DYNAMIC},
                  "position_ids": {0: batch, 1: new}}
        shapes.update({n: {0: batch, 2: past} for n in PAST})
        prog = torch.onnx.export(module, example, dynamo=True, dynamic_shapes=shapes,
                                 input_names=INPUTS, output_names=OUTPUTS)
        prog.save(path, external_data=True)
    else:
        axes = {"input_ids": {0: "batch", 1: "new"}, "attention_mask": {0: "batch", 1: "total"},
                "position_ids": {0: "batch", 1: "new"}, "logits": {0: "batch", 1: "new"}}
        axes.update({n: {0: "batch", 2: "past"} for n in PAST})
        axes.update({n: {0: "batch", 2: "total"} for n in PRESENT})
        torch.onnx.export(module, example, path, opset_version=17, dynamo=False,
                          input_names=INPUTS, output_names=OUTPUTS, dynamic_axes=axes)


def build(exporter, folder):
    """Exports the decoder into `folder` and writes one test folder per step shape, with
    torch's outputs; prints onnxruntime's max difference from torch on each."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    module = make_module()
    staging = folder + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    export(module, exporter, os.path.join(staging, "export.onnx"))
    proto = onnx.load(os.path.join(staging, "export.onnx"))
    shutil.rmtree(staging)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    names = [i.name for i in proto.graph.input]
    del proto
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for step, (new, past) in STEPS.items():
        data = os.path.join(folder, step, "test_data_set_0")
        os.makedirs(data)
        for f in ("model.onnx", "model.onnx.data"):
            # Hard links: graphrw refuses external data that resolves outside the folder.
            os.link(os.path.join(folder, f), os.path.join(folder, step, f))
        f = feeds(new, past)
        with torch.no_grad():
            want = [t.numpy() for t in module(*(torch.from_numpy(f[n]) for n in INPUTS))]
        for k, n in enumerate(names):
            realsize.write_pb(os.path.join(data, f"input_{k}.pb"), f[n], n)
        for k, (n, w) in enumerate(zip(OUTPUTS, want)):
            realsize.write_pb(os.path.join(data, f"output_{k}.pb"), w, n)
        got = sess.run(OUTPUTS, {n: f[n] for n in names})
        diff = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))
        print(f"{exporter} {step}: max |onnxruntime - torch| {diff:.2e}", flush=True)


def ensure_built(args):
    """The model's folder, built by the first exporter that succeeds; exits when none."""
    exporters = [args.exporter] if args.exporter else ["dynamo", "torchscript"]
    for exporter in exporters:
        folder = os.path.join(args.cache_dir, "decode", exporter)
        if all(os.path.exists(os.path.join(folder, s, "test_data_set_0", "output_0.pb"))
               for s in STEPS):
            return exporter, folder
        print(f"building the decoder ({exporter}) into {folder}", flush=True)
        cmd = [sys.executable, os.path.abspath(__file__), "--build", exporter, folder]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=False)
        print(proc.stdout[-4000:], flush=True)
        if proc.returncode == 0:
            return exporter, folder
        print(f"{exporter} export failed: {realsize.last_error_line(proc.stdout)}", flush=True)
    sys.exit("no exporter could export the decoder with its KV cache")


# --- the generation loop (in a child process of its own) -----------------------------

def greedy(logits):
    return logits[:, -1:, :].argmax(-1).astype("int64")


def generate_plain(run, prompt, steps):
    """Prompt then `steps` one-token steps through `run(feeds) -> outputs` (numpy):
    (prompt seconds, steps seconds)."""
    import numpy as np

    f = feeds(PROMPT, 0)
    f["input_ids"] = prompt
    t0 = time.perf_counter()
    out = run(f)
    t1 = time.perf_counter()
    past = PROMPT
    for _ in range(steps):
        f = {"input_ids": greedy(out[0]), "attention_mask": np.ones((1, past + 1), np.int64),
             "position_ids": np.array([[past]], np.int64)}
        f.update(zip(PAST, out[1:]))
        out = run(f)
        past += 1
    return t1 - t0, time.perf_counter() - t1


def generate_iobinding(sess, prompt, steps):
    """The same loop with onnxruntime's IOBinding: the presents stay onnxruntime's values
    and are bound as the next step's pasts."""
    import numpy as np

    io = sess.io_binding()

    def step(f, pasts):
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        for n, v in f.items():
            io.bind_cpu_input(n, v)
        for n, v in zip(PAST, pasts):
            if isinstance(v, np.ndarray):
                io.bind_cpu_input(n, v)
            else:
                io.bind_ortvalue_input(n, v)
        for n in OUTPUTS:
            io.bind_output(n, "cpu")
        sess.run_with_iobinding(io)
        return io.get_outputs()

    f = feeds(PROMPT, 0)
    f["input_ids"] = prompt
    pasts = [f.pop(n) for n in PAST]
    t0 = time.perf_counter()
    out = step(f, pasts)
    t1 = time.perf_counter()
    past = PROMPT
    for _ in range(steps):
        f = {"input_ids": greedy(out[0].numpy()),
             "attention_mask": np.ones((1, past + 1), np.int64),
             "position_ids": np.array([[past]], np.int64)}
        out = step(f, out[1:])
        past += 1
    return t1 - t0, time.perf_counter() - t1


def generate_loop(sess, prompt, steps):
    """The same loop through graphrw's `DecodeLoop`: the caches stay in graphrw's memory
    and grow in place; each step takes only the token, the mask and the position."""
    import numpy as np

    loop = sess.decode_loop()
    loop.start(batch=1)
    f = feeds(PROMPT, 0)
    f["input_ids"] = prompt
    for n in PAST:
        f.pop(n)
    t0 = time.perf_counter()
    out = loop.step(f)
    t1 = time.perf_counter()
    past = PROMPT
    for _ in range(steps):
        out = loop.step({"input_ids": greedy(out[0]),
                         "attention_mask": np.ones((1, past + 1), np.int64),
                         "position_ids": np.array([[past]], np.int64)})
        past += 1
    return t1 - t0, time.perf_counter() - t1


def generate_child(runtime, path, mode):
    """`--generate`: one loop (after a warm-up loop of 8 steps), printed as JSON."""
    import numpy as np

    prompt = np.random.default_rng(7).integers(0, CONFIG["vocab_size"], (1, PROMPT), dtype=np.int64)
    if runtime == "ort":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        version = f"onnxruntime {ort.__version__}"
    else:
        import graphrw

        sess = graphrw.InferenceSession(path)
        version = f"graphrw {graphrw.__version__}"

    def loop(steps):
        if mode == "iobinding":
            return generate_iobinding(sess, prompt, steps)
        if mode == "loop":
            return generate_loop(sess, prompt, steps)
        return generate_plain(lambda f: sess.run(OUTPUTS, f), prompt, steps)

    loop(8)
    prompt_s, steps_s = loop(GENERATED)
    print(json.dumps(dict(prompt_ms=prompt_s * 1e3, tokens_per_s=GENERATED / steps_s,
                          version=version)))


def generate(runtime, path, mode):
    """Runs `--generate` in a child: its JSON result and peak RSS (MiB), or None and why."""
    import ort_compare

    cmd = [sys.executable, os.path.abspath(__file__), "--generate", runtime, path, mode]
    out, rc, rss = ort_compare.run_child(cmd)
    if rc != 0:
        print(out)
        return None, realsize.last_error_line(out)
    return json.loads(out.strip().splitlines()[-1]), rss


def graphrw_python():
    """Whether the `graphrw` Python package (with `InferenceSession`) imports here."""
    try:
        import graphrw
    except ImportError:
        return False
    return hasattr(graphrw, "InferenceSession")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(HERE), "target"))
    cache = os.environ.get("GRAPHRW_BENCH_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "graphrw-bench"))
    ap.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS))
    ap.add_argument("--pairs", type=int, default=20, help="pairs of runs per step shape")
    ap.add_argument("--gap", type=float, default=paired.GAP_S, help="seconds between two runs")
    ap.add_argument("--exporter", choices=realsize.EXPORTERS,
                    help="the exporter (default: dynamo, else TorchScript)")
    ap.add_argument("--binary", default=os.path.join(target, "release", "graphrw"),
                    help="the graphrw CLI (default: this checkout's target/release/graphrw)")
    ap.add_argument("--cache-dir", default=cache,
                    help="where the model is built, once, under decode/ (env GRAPHRW_BENCH_CACHE)")
    ap.add_argument("--no-generate", action="store_true", help="skip the generation loop")
    ap.add_argument("--build", nargs=2, metavar=("EXPORTER", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--generate", nargs=3, metavar=("RUNTIME", "MODEL", "MODE"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        return build(*args.build)
    if args.generate:
        return generate_child(*args.generate)
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"{args.binary}: no graphrw binary there (build it, or pass --binary)")
    print(machine.cpu_line(), flush=True)
    exporter, folder = ensure_built(args)
    results = []
    runs = args.pairs + 1
    for step in args.steps:
        d = os.path.join(folder, step)
        r = dict(model="llama-kv", exporter=exporter, shape=step)
        print(f"{step}: graphrw against onnxruntime", flush=True)
        got = realsize.pair(realsize.ort_cmd(d, runs),
                            [args.binary, "run", d, "--paced", "--repeat", str(runs)],
                            args.pairs, args.gap)
        if isinstance(got, str):
            r["error"] = got[:300]
        else:
            r["o_ms"], r["g_ms"], outs, rcs, rss = got
            r["rss"] = (rss[1], rss[0])
            r["check"] = realsize.check_line(outs[1], rcs[1])
        results.append(r)
    loops = []
    if not args.no_generate:
        model = os.path.join(folder, "model.onnx")
        for runtime, mode in [("ort", "plain"), ("ort", "iobinding")] + (
                [("graphrw", "plain"), ("graphrw", "loop")] if graphrw_python() else []):
            print(f"generation loop: {runtime} {mode}", flush=True)
            loops.append((runtime, mode) + generate(runtime, model, mode))
    import onnxruntime

    print(f"\n{machine.cpu_line()}")
    print(f"Llama-like decoder with KV cache ({exporter} export), batch 1, f32, default "
          f"threads; graphrw: {args.binary}; onnxruntime {onnxruntime.__version__}; "
          f"{args.pairs} pairs per step shape")
    print(realsize.HEADER + "  graphrw vs torch")
    for r in results:
        print(realsize.table_row(r))
    print(realsize.geomean_line(results))
    if loops:
        print(f"\ngeneration: a {PROMPT}-token prompt, then {GENERATED} one-token steps (greedy)")
        print(f"{'runtime':<10}{'mode':<11}{'prompt ms':>10}{'tokens/s':>10}{'peak MiB':>10}")
        for runtime, mode, res, rss in loops:
            if res is None:
                print(f"{runtime:<10}{mode:<11}  failed: {rss}")
            else:
                print(f"{runtime:<10}{mode:<11}{res['prompt_ms']:>10.1f}"
                      f"{res['tokens_per_s']:>10.2f}{rss:>10.0f}")
        step = next((r for r in results if r["shape"] == "step1_c255" and "error" not in r), None)
        if step and not graphrw_python():
            o, g, *_ = realsize.summary(step["o_ms"], step["g_ms"])
            print(f"estimated from the paired one-token step at cache 255 (the loop's mean "
                  f"cache length), no loop run: graphrw {1e3 / g:.2f} tokens/s, "
                  f"onnxruntime {1e3 / o:.2f} tokens/s (the graphrw Python package is not "
                  f"importable here, and the CLI has no generation loop)")


if __name__ == "__main__":
    main()
