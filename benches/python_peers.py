"""graphrw.optimize against its Python peers on the corpus, in one run.

For every ``../shared/corpus/*/model.onnx`` it runs

* ``graphrw.optimize`` (the default pipeline: attention fusion, causal masks, fused
  kernels),
* onnxruntime's ``onnxruntime.transformers.optimizer.optimize_model`` (model type from
  the folder's name: bert, gpt2, bart, t5; llama as gpt2; ``opt_level=0``: its Python
  fusions, without the onnxruntime graph-optimizer pass that needs torch), and
* onnxscript's ``onnxscript.rewriter.ort_fusions.optimize_for_ort`` (on an
  ``onnx_ir`` model),

and prints one table: the best wall time of ``--repeat`` runs (load and optimise; not
the write), the attention sites fused (nodes of the output whose op type is an
attention op: ``Attention``, ``MultiHeadAttention``, ``GroupQueryAttention``,
``scaled_dot_product_attention``, onnxscript's ``SDPA``; the manifest's
``attention_sites`` is the count to reach), and whether onnxruntime runs the result
within 1e-4 + 1e-3 relative of the model's test data.

The peers are installed in a venv of their own, never in CI's:

    python3 -m venv /tmp/graphrw-peers
    /tmp/graphrw-peers/bin/pip install onnxruntime onnx onnxscript numpy sympy packaging coloredlogs
    /tmp/graphrw-peers/bin/pip install target/wheels/graphrw-*.whl   # maturin build --release -m graphrw-python/Cargo.toml
    /tmp/graphrw-peers/bin/python benches/python_peers.py [--corpus DIR] [--repeat N]

A peer that is not installed, or fails on a model, shows as ``-`` with the reason
below the table.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import sys
import time
import warnings
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import machine  # benches/machine.py: the CPU line above the figures

ATTENTION_OPS = {
    "Attention",
    "MultiHeadAttention",
    "GroupQueryAttention",
    "PackedAttention",
    "PackedMultiHeadAttention",
    "scaled_dot_product_attention",
    "SDPA",
}


def count_attention(op_types: List[str]) -> int:
    return sum(1 for t in op_types if t in ATTENTION_OPS)


def test_data(model_dir: Path) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    import onnx
    from onnx import numpy_helper

    def read(prefix: str) -> List[np.ndarray]:
        files = sorted(
            (model_dir / "test_data_set_0").glob(f"{prefix}_*.pb"),
            key=lambda p: int(p.stem.split("_")[-1]),
        )
        out = []
        for f in files:
            t = onnx.TensorProto()
            t.ParseFromString(f.read_bytes())
            out.append(numpy_helper.to_array(t))
        return out

    return read("input"), read("output")


def ort_check(model_bytes: bytes, model_dir: Path) -> str:
    """``ok`` when onnxruntime runs the model within tolerance of the test data, else
    the max error or the failure."""
    import onnxruntime as ort

    inputs, expected = test_data(model_dir)
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        got = sess.run(None, dict(zip(names, inputs)))
    except Exception as e:  # noqa: BLE001
        return f"fails: {str(e).splitlines()[0][:60]}"
    worst = 0.0
    ok = True
    for g, w in zip(got, expected):
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g64.shape != w64.shape:
            return "shape"
        d = np.abs(g64 - w64)
        worst = max(worst, float(d.max(initial=0.0)))
        ok &= bool(np.all(d <= 1e-4 + 1e-3 * np.abs(w64)))
    return "ok" if ok else f"err {worst:.1e}"


def model_type(name: str) -> str:
    for t in ("bert", "gpt2", "bart", "t5"):
        if name.startswith(t):
            return t
    return "gpt2"  # llama: decoder-only, as gpt2


def run_graphrw(path: Path) -> Tuple[bytes, int]:
    import graphrw

    import onnx

    report = graphrw.optimize(path)
    # Counted in the written model, as for the peers (graphrw writes ONNX `Attention`).
    written = onnx.load_from_string(report.model)
    return report.model, count_attention([n.op_type for n in written.graph.node])


def run_ort_transformers(path: Path) -> Tuple[bytes, int]:
    from onnxruntime.transformers.optimizer import optimize_model

    with redirect_stdout(io.StringIO()):
        # opt_level=0: its Python fusions alone (levels 1 and 99 first run onnxruntime's
        # own graph optimizer, which imports torch here).
        opt = optimize_model(str(path), model_type=model_type(path.parent.name), opt_level=0)
    model = opt.model
    return model.SerializeToString(), count_attention([n.op_type for n in model.graph.node])


def run_onnxscript(path: Path) -> Tuple[bytes, int]:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(str(path))
    # Weights into memory, so the result serialises as one self-contained model.
    model = ir.external_data.load_to_model(model)
    with redirect_stdout(io.StringIO()):
        model, _counts = optimize_for_ort(model)
    ops = [n.op_type for n in model.graph.all_nodes()] if hasattr(model.graph, "all_nodes") else [
        n.op_type for n in model.graph
    ]
    proto = ir.to_proto(model)
    return proto.SerializeToString(), count_attention(ops)


PEERS: List[Tuple[str, Callable[[Path], Tuple[bytes, int]]]] = [
    ("graphrw", run_graphrw),
    ("ort transformers", run_ort_transformers),
    ("onnxscript", run_onnxscript),
]


def main(argv: Optional[List[str]] = None) -> int:
    here = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", type=Path, default=here.parent / "shared" / "corpus")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print(machine.cpu_line(), flush=True)
    models = sorted(m.parent for m in args.corpus.glob("*/model.onnx"))
    if not models:
        print(f"no models under {args.corpus}", file=sys.stderr)
        return 1
    sites: Dict[str, int] = {}
    manifest = args.corpus / "manifest.json"
    if manifest.exists():
        sites = {e["model"]: e.get("attention_sites", 0) for e in json.loads(manifest.read_text())}
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    notes: List[str] = []
    rows = []
    for m in models:
        row = [m.name, str(sites.get(m.name, "?"))]
        for peer, fn in PEERS:
            best = float("inf")
            result: Any = None
            try:
                for _ in range(max(1, args.repeat)):
                    t0 = time.perf_counter()
                    result = fn(m / "model.onnx")
                    best = min(best, time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001
                notes.append(f"{peer} on {m.name}: {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}")
                row += ["-", "-", "-"]
                continue
            model_bytes, fused = result
            row += [f"{best * 1e3:.1f}", str(fused), ort_check(model_bytes, m)]
        rows.append(row)
    header = ["model", "sites"]
    for peer, _ in PEERS:
        header += [f"{peer} ms", "fused", "ort run"]
    print(f"best of {args.repeat}; python {sys.version.split()[0]}; {os.cpu_count()} cpus")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    versions = []
    for mod in ("graphrw", "onnxruntime", "onnxscript", "onnx_ir", "onnx"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except Exception:  # noqa: BLE001
            versions.append(f"{mod} not installed")
    print("; ".join(versions))
    for n in notes:
        print(f"note: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
