"""Exports the small KV-cache decoder steps in tests/models/ (run by hand, never in CI).

Needs torch and onnxscript (for the dynamo exporter) in a venv outside the repo:
    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch onnxscript onnx
    /tmp/torchvenv/bin/python tools/models/export_decoders.py

Each model is one attention layer with random weights (seeded): 4 heads of 16, hidden
64. Inputs: `x` [batch, seq, 64], `past_key`/`past_value` [batch, kv_heads, past, 16].
Outputs: `y` [batch, seq, 64] and the present keys and values [batch, kv_heads,
past + seq, 16]. Forms:
- `step`: one new token (seq = 1 when run; exported with seq dynamic too), no mask;
- `chunk`: several new tokens after the cache, with the causal mask offset by the cache
  length (row i sees columns j <= past + i);
- `gqa`: the chunk form with 2 kv heads shared by 4 query heads, repeated as
  transformers' `repeat_kv` writes it (`k[:, :, None].expand(..).reshape(..)`).
Each is exported by the TorchScript exporter (opset 17, dynamic axes) and by dynamo
with dynamic shapes, with a test set at batch 2, seq 3, past 5 and another at batch 1,
seq 1, past 9 (shapes other than the export's), computed by torch.
"""

import math
import os
import sys

import numpy as np
import torch
from onnx import numpy_helper

HIDDEN, HEADS, HEAD_DIM = 64, 4, 16
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "models", "decoders")


class Step(torch.nn.Module):
    def __init__(self, kv_heads=HEADS, causal=False):
        super().__init__()
        self.kv_heads, self.causal = kv_heads, causal
        self.q = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM)
        self.k = torch.nn.Linear(HIDDEN, kv_heads * HEAD_DIM)
        self.v = torch.nn.Linear(HIDDEN, kv_heads * HEAD_DIM)
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, HIDDEN)

    def forward(self, x, past_key, past_value):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, HEAD_DIM).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, HEAD_DIM).transpose(1, 2)
        k = torch.cat([past_key, k], dim=2)
        v = torch.cat([past_value, v], dim=2)
        present = (k, v)
        if self.kv_heads != HEADS:
            r = HEADS // self.kv_heads
            k = k[:, :, None].expand(b, self.kv_heads, r, k.shape[2], HEAD_DIM).reshape(b, HEADS, k.shape[2], HEAD_DIM)
            v = v[:, :, None].expand(b, self.kv_heads, r, v.shape[2], HEAD_DIM).reshape(b, HEADS, v.shape[2], HEAD_DIM)
        scores = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)
        if self.causal:
            past = past_key.shape[2]
            total = past + s
            rows = torch.arange(s).unsqueeze(1) + past
            cols = torch.arange(total).unsqueeze(0)
            scores = scores.masked_fill(cols > rows, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        y = self.o(attn.transpose(1, 2).reshape(b, s, HEADS * HEAD_DIM))
        return y, present[0], present[1]


def inputs(kv_heads, batch, seq, past, seed):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, seq, HIDDEN, generator=g),
        torch.randn(batch, kv_heads, past, HEAD_DIM, generator=g),
        torch.randn(batch, kv_heads, past, HEAD_DIM, generator=g),
    )


def export(name, model, kv_heads, dynamo):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    example = inputs(kv_heads, 2, 4, 3, 0)
    names = ["x", "past_key", "past_value"]
    outs = ["y", "present_key", "present_value"]
    if dynamo:
        batch, seq, past = torch.export.Dim("batch"), torch.export.Dim("seq"), torch.export.Dim("past")
        shapes = {"x": {0: batch, 1: seq}, "past_key": {0: batch, 2: past}, "past_value": {0: batch, 2: past}}
        prog = torch.onnx.export(model, example, dynamo=True, dynamic_shapes=shapes,
                                 input_names=names, output_names=outs)
        prog.save(path)
    else:
        axes = {"x": {0: "batch", 1: "seq"}, "past_key": {0: "batch", 2: "past"},
                "past_value": {0: "batch", 2: "past"}, "y": {0: "batch", 1: "seq"},
                "present_key": {0: "batch", 2: "total"}, "present_value": {0: "batch", 2: "total"}}
        torch.onnx.export(model, example, path, opset_version=17, dynamo=False,
                          input_names=names, output_names=outs, dynamic_axes=axes)
    for k, (batch, seq, past) in enumerate([(2, 3, 5), (1, 1, 9)]):
        data = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(data, exist_ok=True)
        ins = inputs(kv_heads, batch, seq, past, 10 + k)
        with torch.no_grad():
            ys = model(*ins)
        for i, t in enumerate(ins):
            with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(t.numpy(), names[i]).SerializeToString())
        for i, t in enumerate(ys):
            with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(t.numpy(), outs[i]).SerializeToString())
    print("wrote", path)


def main():
    torch.manual_seed(0)
    forms = {"step": (HEADS, False), "chunk": (HEADS, True), "gqa": (2, True)}
    for form, (kv_heads, causal) in forms.items():
        model = Step(kv_heads, causal).eval()
        for dynamo in (False, True):
            name = f"{form}_{'dynamo' if dynamo else 'torchscript'}"
            try:
                export(name, model, kv_heads, dynamo)
            except Exception as e:  # report and go on: one exporter may refuse a form
                print("FAILED", name, type(e).__name__, str(e)[:300], file=sys.stderr)


if __name__ == "__main__":
    main()
