"""Writes tests/models/symbolic_forms: three small TorchScript exports (torch.onnx.export
with dynamo=False, opset 18, dynamic batch and sequence axes) of the forms that broke
`graphrw optimize` and the written model in onnxruntime (issue #53), each with two test
sets at different shapes whose outputs torch computed.

    /path/to/venv-with-torch/bin/python tools/models/export_symbolic_forms.py

- `causal_past`: attention of x [B, S, 8] over past ++ x ([B, P + S, 8]) under the causal
  mask `ones(S, P + S).tril(diagonal=P)`: a `Trilu` whose `k` is the cache's length,
  read from a shape at run time.
- `position_ids`: RoBERTa's position ids from int64 input ids [B, S] (padding 1):
  `cumsum(ids.ne(1).int(), 1).type_as(mask) * mask + 1`, a `CumSum` on int32, then
  the positions looked up in a table of 16 rows of 4: the output is float.
- `mha_padding`: self-attention of x [B, S, 8] over 2 heads with a bool key-padding mask
  [B, S] (True = padded), as `nn.MultiheadAttention` computes it: the mask reaches the
  attention as [B, 1, 1, S], broadcast over the query rows.
"""
import os

import numpy as np
import torch
from onnx import numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "models", "symbolic_forms")


class CausalPast(torch.nn.Module):
    def forward(self, x, past):
        s, p = x.shape[1], past.shape[1]
        k = torch.cat([past, x], dim=1)
        scores = x @ k.transpose(1, 2) / 8**0.5
        mask = torch.ones(s, p + s, dtype=torch.bool).tril(diagonal=p)
        scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(-1) @ k


class PositionIds(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(16, 4))

    def forward(self, ids):
        mask = ids.ne(1).int()
        incremental = torch.cumsum(mask, dim=1).type_as(mask) * mask
        pos = incremental.long() + 1
        return self.table[pos]


class MhaPadding(torch.nn.Module):
    """Self-attention over 2 heads with a key-padding mask, as `nn.MultiheadAttention`
    computes it (its own TorchScript trace bakes the sequence length into a reshape)."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x, padding):
        b, s = x.shape[0], x.shape[1]
        q, k, v = self.qkv(x).split(8, dim=-1)
        q, k, v = (t.reshape(b, s, 2, 4).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / 2.0
        scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, 8)
        return self.out(y)


def save_set(d, names, feeds, outs):
    os.makedirs(d, exist_ok=True)
    for j, (n, t) in enumerate(zip(names, feeds)):
        with open(os.path.join(d, f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), n).SerializeToString())
    with open(os.path.join(d, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(outs.detach().numpy(), "y").SerializeToString())


def export(name, module, names, dynamic, sets):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    module.eval()
    torch.onnx.export(
        module,
        tuple(sets[0]),
        os.path.join(d, "model.onnx"),
        input_names=names,
        output_names=["y"],
        dynamic_axes=dynamic,
        opset_version=18,
        dynamo=False,
    )
    with torch.no_grad():
        for i, feeds in enumerate(sets):
            save_set(os.path.join(d, f"test_data_set_{i}"), names, feeds, module(*feeds))


def main():
    torch.manual_seed(53)
    g = torch.Generator().manual_seed(53)
    export(
        "causal_past",
        CausalPast(),
        ["x", "past"],
        {"x": {0: "batch", 1: "seq"}, "past": {0: "batch", 1: "past"}, "y": {0: "batch", 1: "seq"}},
        [
            [torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g)],
            [torch.randn(1, 5, 8, generator=g), torch.randn(1, 2, 8, generator=g)],
        ],
    )
    ids0 = torch.tensor([[0, 5, 7, 1, 1], [3, 1, 4, 9, 2]])
    ids1 = torch.tensor([[6, 2, 1], [1, 1, 1], [8, 4, 3]])
    export(
        "position_ids",
        PositionIds(),
        ["ids"],
        {"ids": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}},
        [[ids0], [ids1]],
    )
    pad0 = torch.tensor([[False, False, False, True], [False, False, False, False]])
    pad1 = torch.tensor([[False, False, True, True, True, True]])
    export(
        "mha_padding",
        MhaPadding(),
        ["x", "padding"],
        {"x": {0: "batch", 1: "seq"}, "padding": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}},
        [
            [torch.randn(2, 4, 8, generator=g), pad0],
            [torch.randn(1, 6, 8, generator=g), pad1],
        ],
    )


if __name__ == "__main__":
    main()
