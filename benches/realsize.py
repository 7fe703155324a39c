#!/usr/bin/env python3
"""graphrw against onnxruntime on real-width transformers, by both torch exporters.

Issue #58 goal 5; with `--ort-optimized`, issue #52 goal 7.

Each model is built from a `transformers` config at its real width with 2 layers and
random weights (seeded; nothing is downloaded), no KV cache (`use_cache=False`),
inputs `input_ids` and `attention_mask` (all ones), output the logits (BERT: the last
hidden state). Vocabularies above 32 000 are cut to 32 000 (Qwen2, Gemma), so that the
files stay moderate; BERT and GPT-2 keep theirs (30 522, 50 257). Attention is
transformers' default (`sdpa`). The models (`--list`):

    bert-base    768 wide, 12 heads, 3072 GELU FFN (BertModel, no pooler)
    gpt2-small   768 wide, 12 heads, 3072 FFN
    llama        2048 wide, 32 query heads of 64, 4 kv heads, 5632 SwiGLU (TinyLlama-like)
    qwen2-0.5b   896 wide, 14 heads of 64, 2 kv heads, 4864 SwiGLU, tied embedding
    gemma-mqa    2048 wide, 8 heads of 256, 1 kv head, 16384 GeGLU (Gemma-2B-like)

Each is exported twice: by TorchScript (`torch.onnx.export(..., dynamo=False)`, opset
17, `dynamic_axes` on batch and sequence) and by dynamo (`dynamo=True`, dynamic batch
and sequence), both re-saved with their weights in `model.onnx.data`. Built once into
`--cache-dir` (default `$GRAPHRW_BENCH_CACHE` or `~/.cache/graphrw-bench/realsize`), in
a child process (torch's peak stays out of the figures), as
`MODEL/EXPORTER/{model.onnx, model.onnx.data, BxS/}`: one folder per shape (`1x128`,
`4x64`) holding hard links to the model and `test_data_set_0/` with the inputs and torch's
outputs, which `graphrw run` checks its own against.

For every model x exporter x shape, `graphrw run DIR --paced` and onnxruntime
(`ort_compare.py --ort-child DIR N --paced`, all graph optimisations, default threads)
each keep the model loaded in a process of their own and run in turn, `--pairs` pairs
(`benches/paired.py`'s `PacedChild` and `alternate`); the table gives both median
times, the median of the per-pair ratios graphrw / onnxruntime with its quartiles,
both peak RSS (`ru_maxrss`), graphrw's check of its outputs against torch's, and the
geometric mean of the ratios. `--ort-optimized` adds onnxruntime on graphrw's optimised
model (`graphrw optimize model.onnx -o optimized.onnx`) against onnxruntime on the
export as it is, paired the same way (two onnxruntime children).

Needs torch, transformers, onnx, onnxscript, onnxruntime and numpy (never in CI):

    python3 -m venv /work/torchvenv
    /work/torchvenv/bin/pip install torch transformers onnx onnxscript onnxruntime numpy
    /work/torchvenv/bin/python benches/realsize.py --pairs 20 --ort-optimized
    /work/torchvenv/bin/python benches/realsize.py --models llama --exporters dynamo \\
        --shapes 1x128 --pairs 3 --binary /work/main/target/release/graphrw
"""

import argparse
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402  benches/machine.py: the CPU line above the figures
import paired  # noqa: E402  benches/paired.py: runs in turn, pair by pair

# name: (transformers model type, config arguments, what the docs say of it)
MODELS = {
    "bert-base": ("bert", dict(hidden_size=768, num_attention_heads=12,
                               intermediate_size=3072, num_hidden_layers=2)),
    "gpt2-small": ("gpt2", dict(n_embd=768, n_head=12, n_layer=2)),
    "llama": ("llama", dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4,
                            intermediate_size=5632, num_hidden_layers=2, vocab_size=32000)),
    "qwen2-0.5b": ("qwen2", dict(hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
                                 intermediate_size=4864, num_hidden_layers=2, vocab_size=32000,
                                 tie_word_embeddings=True)),
    "gemma-mqa": ("gemma", dict(hidden_size=2048, num_attention_heads=8, num_key_value_heads=1,
                                head_dim=256, intermediate_size=16384, num_hidden_layers=2,
                                vocab_size=32000)),
}
EXPORTERS = ["torchscript", "dynamo"]
SHAPES = ["1x128", "4x64"]
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_shape(text):
    """`BxS` as (batch, sequence)."""
    b, sep, s = text.partition("x")
    if not sep or not b.isdigit() or not s.isdigit() or int(b) < 1 or int(s) < 1:
        raise ValueError(f"`{text}`: expected BATCHxSEQ, e.g. 1x128")
    return int(b), int(s)


def geomean(values):
    """The geometric mean of positive `values` (None when there are none)."""
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(a_ms, b_ms):
    """(median A ms, median B ms, median of B / A, its first and third quartiles)."""
    ratios = [b / a for a, b in zip(a_ms, b_ms)]
    q = paired.quantile
    return q(a_ms, 0.5), q(b_ms, 0.5), q(ratios, 0.5), q(ratios, 0.25), q(ratios, 0.75)


HEADER = (f"{'model':<12}{'exporter':<12}{'shape':>14}{'graphrw ms':>11}{'ort ms':>9}"
          f"{'g/ort':>7}{'q1':>7}{'q3':>7}{'g MiB':>7}{'ort MiB':>8}")
OPT_HEADER = f"{'ort-opt ms':>11}{'opt/ort':>8}{'q1':>7}{'q3':>7}"


def table_row(r, with_opt=False):
    """One line of the table for the result `r` (a dict: model, exporter, shape and
    either `error` or graphrw's `g_ms`, onnxruntime's `o_ms`, `rss` (graphrw, ort) and
    `check`; with `with_opt`, `opt` = (ort ms, ort-on-optimised ms) or `opt_error`)."""
    head = f"{r['model']:<12}{r['exporter']:<12}{r['shape']:>14}"
    if "error" in r:
        return f"{head}  {r['error']}"
    o, g, med, q1, q3 = summary(r["o_ms"], r["g_ms"])
    line = (f"{head}{g:>11.1f}{o:>9.1f}{med:>7.3f}{q1:>7.3f}{q3:>7.3f}"
            f"{r['rss'][0]:>7.0f}{r['rss'][1]:>8.0f}")
    if with_opt:
        if "opt" in r:
            _, b, med, q1, q3 = summary(*r["opt"])
            line += f"{b:>11.1f}{med:>8.3f}{q1:>7.3f}{q3:>7.3f}"
        else:
            line += f"  {r.get('opt_error', '-')}"
    return f"{line}  {r['check']}"


def geomean_line(results, with_opt=False):
    """The geometric means of the median ratios under the table."""
    ok = [r for r in results if "error" not in r]
    g = geomean([summary(r["o_ms"], r["g_ms"])[2] for r in ok])
    line = f"geomean graphrw / ort over {len(ok)} rows: " + ("-" if g is None else f"{g:.3f}")
    if with_opt:
        opt = [summary(*r["opt"])[2] for r in ok if "opt" in r]
        o = geomean(opt)
        line += (f"; ort on graphrw's optimised model / ort over {len(opt)} rows: "
                 + ("-" if o is None else f"{o:.3f}"))
    return line


def last_error_line(text):
    """The line of a child's output that says why it failed (the last `error` line, else
    the last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower() or "Error" in line:
            return line
    return lines[-1] if lines else "(no output)"


# --- building the models (in a child process, with torch) ---------------------------

def make_model(name):
    """The `transformers` model `name` with random weights, in eval mode."""
    import torch
    import transformers

    kind, kwargs = MODELS[name]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(kind, **kwargs)
    if kind == "bert":
        return transformers.BertModel(config, add_pooling_layer=False).eval()
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def wrapped(model, causal):
    """`model` as a module of (input_ids, attention_mask) returning its first output."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            extra = {"use_cache": False} if causal else {}
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              return_dict=False, **extra)[0]

    return Wrapped().eval()


def export(module, exporter, path, vocab):
    """Exports `module` to `path` (a file of its own; weights wherever the exporter puts
    them)."""
    import torch

    g = torch.Generator().manual_seed(0)
    example = (torch.randint(0, vocab, (2, 16), generator=g), torch.ones(2, 16, dtype=torch.int64))
    names = ["input_ids", "attention_mask"]
    if exporter == "dynamo":
        batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=1024)
        shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
        prog = torch.onnx.export(module, example, dynamo=True, dynamic_shapes=shapes,
                                 input_names=names, output_names=["logits"])
        prog.save(path, external_data=True)
    else:
        axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                "logits": {0: "batch", 1: "seq"}}
        torch.onnx.export(module, example, path, opset_version=17, dynamo=False,
                          input_names=names, output_names=["logits"], dynamic_axes=axes)


def write_pb(path, array, name):
    from onnx import numpy_helper

    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def build(name, exporter, folder, shapes):
    """Writes `folder/model.onnx` (+ `.data`) and one test folder per shape, each with
    torch's outputs; prints onnxruntime's max difference from torch on each."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    model = make_model(name)
    vocab = model.config.vocab_size
    module = wrapped(model, MODELS[name][0] != "bert")
    staging = folder + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    export(module, exporter, os.path.join(staging, "export.onnx"), vocab)
    proto = onnx.load(os.path.join(staging, "export.onnx"))
    shutil.rmtree(staging)
    os.makedirs(folder, exist_ok=True)
    for f in ("model.onnx", "model.onnx.data"):
        if os.path.exists(os.path.join(folder, f)):
            os.remove(os.path.join(folder, f))
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    input_names = [i.name for i in proto.graph.input]
    del proto
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for shape in shapes:
        batch, seq = parse_shape(shape)
        data = os.path.join(folder, shape, "test_data_set_0")
        shutil.rmtree(os.path.join(folder, shape), ignore_errors=True)
        os.makedirs(data)
        for f in ("model.onnx", "model.onnx.data"):
            # Hard links: graphrw refuses external data that resolves outside the folder.
            os.link(os.path.join(folder, f), os.path.join(folder, shape, f))
        g = torch.Generator().manual_seed(batch * 10007 + seq)
        feeds = {"input_ids": torch.randint(0, vocab, (batch, seq), generator=g),
                 "attention_mask": torch.ones(batch, seq, dtype=torch.int64)}
        with torch.no_grad():
            want = module(**feeds).numpy()
        feeds = {k: v.numpy() for k, v in feeds.items() if k in input_names}
        for k, n in enumerate(input_names):
            write_pb(os.path.join(data, f"input_{k}.pb"), feeds[n], n)
        write_pb(os.path.join(data, "output_0.pb"), want, "logits")
        (got,) = sess.run(None, feeds)
        diff = float(np.max(np.abs(got.astype(np.float64) - want)))
        print(f"{name} {exporter} {shape}: max |onnxruntime - torch| {diff:.2e}", flush=True)


def built(folder, shapes):
    return all(os.path.exists(os.path.join(folder, s, "test_data_set_0", "output_0.pb"))
               for s in shapes)


def optimized_folders(binary, folder, shapes):
    """`graphrw optimize`s the export into `folder/optimized.onnx` and links one folder per
    shape (`BxS-opt`) to it and to the shape's test data; None, or the error line."""
    out = os.path.join(folder, "optimized.onnx")
    for f in (out, out + ".data"):
        if os.path.exists(f):
            os.remove(f)
    proc = subprocess.run([binary, "optimize", os.path.join(folder, "model.onnx"), "-o", out],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stdout)
        return f"graphrw optimize failed: {last_error_line(proc.stdout)}"
    for shape in shapes:
        d = os.path.join(folder, f"{shape}-opt")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        os.link(out, os.path.join(d, "model.onnx"))
        if os.path.exists(out + ".data"):
            os.link(out + ".data", os.path.join(d, "optimized.onnx.data"))
        os.symlink(os.path.join("..", shape, "test_data_set_0"), os.path.join(d, "test_data_set_0"))
    return None


# --- timing ------------------------------------------------------------------------

def ort_cmd(model_dir, runs):
    return [sys.executable, os.path.join(HERE, "ort_compare.py"), "--ort-child", model_dir,
            str(runs), "--paced"]


def pair(cmd_a, cmd_b, pairs, gap):
    """Runs two `--paced` commands in turn (`paired.alternate`): (A ms, B ms, (A output,
    B output), (A rc, B rc), (A MiB, B MiB)), or the line saying why one failed."""
    children = []
    try:
        for cmd in (cmd_a, cmd_b):
            # Made before it starts, so that a child ending early leaves its output here.
            child = paired.PacedChild.__new__(paired.PacedChild)
            children.append(child)
            child.__init__(cmd)
        a_ms, b_ms = paired.alternate(children[0], children[1], pairs, gap)
    except SystemExit:
        # A child ended early (`PacedChild` printed its output); the other is stopped.
        ended = next(c for c in children if c.proc.returncode is not None)
        for child in children:
            if child.proc.returncode is None:
                child.proc.kill()
                child.finish()
        return (f"{os.path.basename(ended.proc.args[0])} exit {ended.proc.returncode}: "
                + last_error_line("".join(ended.out)))
    done = [child.finish() for child in children]
    return (a_ms, b_ms, tuple(d[0] for d in done), tuple(d[1] for d in done),
            tuple(d[2] for d in done))


def check_line(out, rc):
    """graphrw's verdict on its outputs against torch's, from `graphrw run`'s output: the
    largest errors over the outputs, and whether all were within tolerance."""
    import re

    found = re.findall(r"max abs error (\S+), max rel error (\S+): (.*)", out)
    if not found:
        verdict = "?"
    else:
        ok = all(f[2].strip() == "ok" for f in found)
        verdict = (f"abs {max(float(f[0]) for f in found):.1e} "
                   f"rel {max(float(f[1]) for f in found):.1e} "
                   + ("ok" if ok else "BEYOND TOLERANCE"))
    return verdict if rc in (0, 1) else f"{verdict} (exit {rc})"


def measure(args, name, exporter):
    """The table's results for one model and exporter, building the model when needed."""
    folder = os.path.join(args.cache_dir, name, exporter)
    results = []

    def failed(message):
        return [dict(model=name, exporter=exporter, shape=s, error=message) for s in args.shapes]

    if not built(folder, args.shapes):
        print(f"building {name} ({exporter}) into {folder}", flush=True)
        cmd = [sys.executable, os.path.abspath(__file__), "--build", name, exporter, folder,
               "--shapes", *args.shapes]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=False)
        print(proc.stdout[-4000:], flush=True)
        if proc.returncode != 0:
            return failed(f"export failed: {last_error_line(proc.stdout)[:300]}")
    opt_error = optimized_folders(args.binary, folder, args.shapes) if args.ort_optimized else None
    runs = args.pairs + 1
    for shape in args.shapes:
        d = os.path.join(folder, shape)
        r = dict(model=name, exporter=exporter, shape=shape)
        print(f"{name} {exporter} {shape}: graphrw against onnxruntime", flush=True)
        got = pair(ort_cmd(d, runs), [args.binary, "run", d, "--paced", "--repeat", str(runs)],
                   args.pairs, args.gap)
        if isinstance(got, str):
            r["error"] = got[:300]
            results.append(r)
            continue
        r["o_ms"], r["g_ms"], outs, rcs, rss = got
        r["rss"] = (rss[1], rss[0])
        r["check"] = check_line(outs[1], rcs[1])
        if args.ort_optimized:
            if opt_error:
                r["opt_error"] = opt_error
            else:
                print(f"{name} {exporter} {shape}: onnxruntime on the optimised model", flush=True)
                got = pair(ort_cmd(d, runs), ort_cmd(d + "-opt", runs), args.pairs, args.gap)
                if isinstance(got, str):
                    r["opt_error"] = got[:200]
                else:
                    r["opt"] = (got[0], got[1])
        results.append(r)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    root = os.path.dirname(HERE)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    cache = os.environ.get("GRAPHRW_BENCH_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "graphrw-bench"))
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--exporters", nargs="+", choices=EXPORTERS, default=EXPORTERS)
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="BATCHxSEQ (default: 1x128 4x64)")
    ap.add_argument("--pairs", type=int, default=20, help="pairs of runs per row")
    ap.add_argument("--gap", type=float, default=paired.GAP_S, help="seconds between two runs")
    ap.add_argument("--binary", default=os.path.join(target, "release", "graphrw"),
                    help="the graphrw CLI (default: this checkout's target/release/graphrw)")
    ap.add_argument("--cache-dir", default=os.path.join(cache, "realsize"),
                    help="where the models are built, once (env GRAPHRW_BENCH_CACHE)")
    ap.add_argument("--ort-optimized", action="store_true",
                    help="also pair onnxruntime on `graphrw optimize`'s output against "
                         "onnxruntime on the export")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--build", nargs=3, metavar=("MODEL", "EXPORTER", "DIR"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    for s in args.shapes:
        try:
            parse_shape(s)
        except ValueError as e:
            ap.error(str(e))
    if args.list:
        print(__doc__.split("The models (`--list`):\n\n")[1].split("\n\n")[0])
        return
    if args.build:
        return build(*args.build, args.shapes)
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"{args.binary}: no graphrw binary there (build it, or pass --binary)")
    print(machine.cpu_line(), flush=True)
    results = []
    for name in args.models:
        for exporter in args.exporters:
            results += measure(args, name, exporter)
    import onnxruntime

    print(f"\n{machine.cpu_line()}")
    print(f"graphrw: {args.binary}; onnxruntime {onnxruntime.__version__}; "
          f"{args.pairs} pairs per row, f32, default threads on both sides")
    print(HEADER + (OPT_HEADER if args.ort_optimized else "") + "  graphrw vs torch")
    for r in results:
        print(table_row(r, args.ort_optimized))
    print(geomean_line(results, args.ort_optimized))
    print("ms: median times; g/ort: median of the per-pair ratios graphrw / onnxruntime, "
          "q1 q3 its quartiles; MiB: peak RSS"
          + ("; ort-opt: onnxruntime on `graphrw optimize`'s model, opt/ort its ratio to "
             "onnxruntime on the export, paired the same way" if args.ort_optimized else ""))


if __name__ == "__main__":
    main()
