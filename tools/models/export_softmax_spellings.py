"""Writes tests/models/softmax_spellings: small attention blocks whose softmax is spelled
another way, or whose scores carry Transformer-XL's relative-position shift (issue #53,
item 4). Each is exported by TorchScript (torch.onnx.export with dynamo=False, opset 17)
or by dynamo (dynamo=True, opset 18) with dynamic batch and sequence axes, at a shape
that neither of its two test sets has; the test sets hold torch's outputs.

    /path/to/venv-with-torch/bin/python tools/models/export_softmax_spellings.py

Every model is self-attention of x [B, S, 8] over 2 heads of 4, scores `q @ kT / 2`:

- `lse_keepdim` (TorchScript): `exp(s - torch.logsumexp(s, -1, keepdim=True))`, an ONNX
  `ReduceLogSumExp` with `axes` as an attribute;
- `lse_unsqueeze` (TorchScript): `exp(s - torch.logsumexp(s, -1)[..., None])`, the
  reduction without its dim, put back by an `Unsqueeze`;
- `lse_dynamo` (dynamo): `exp(s - torch.logsumexp(s, -1, keepdim=True))`, a
  `ReduceLogSumExp` with `axes` as an input;
- `max_shifted` (dynamo): log-sum-exp written out with the max shift,
  `m + log(sum(exp(s - m)))` with `m = s.amax(-1, keepdim=True)`;
- `max_shifted_values` (TorchScript): the same with `m = s.max(-1, keepdim=True).values`
  and the sum first, `log(sum(exp(s - m))) + m`;
- `log_softmax_exp` (TorchScript): `s.log_softmax(-1).exp()`;
- `relpos_shift` (TorchScript): Transformer-XL's scores, `(ac + bd) * scale` with
  `ac = (q + u) @ kT`, `bd = rel_shift((q + v) @ rT)`, `r` projected from sinusoidal
  embeddings of the relative positions `S-1 .. 0` computed in the model, and
  `rel_shift` as Transformer-XL writes it (a zero column concatenated in front, a view
  with the last two dims swapped, the first row sliced off, a view back);
- `relpos_shift_causal` (dynamo): the same under a causal mask (`masked_fill` of the
  upper triangle with `-inf`), the zero column written with `F.pad`.
"""
import math
import os

import torch
import torch.nn.functional as F
from onnx import numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "models", "softmax_spellings")


def lse_keepdim(s):
    return torch.exp(s - torch.logsumexp(s, -1, keepdim=True))


def lse_unsqueeze(s):
    return torch.exp(s - torch.logsumexp(s, -1)[..., None])


def max_shifted(s):
    m = s.amax(-1, keepdim=True)
    return torch.exp(s - (m + torch.log(torch.exp(s - m).sum(-1, keepdim=True))))


def max_shifted_values(s):
    m = s.max(-1, keepdim=True).values
    return torch.exp(s - (torch.log(torch.sum(torch.exp(s - m), dim=-1, keepdim=True)) + m))


def log_softmax_exp(s):
    return s.log_softmax(-1).exp()


class Attn(torch.nn.Module):
    """Self-attention over 2 heads whose probabilities are `probs(scores)`."""

    def __init__(self, probs):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 8)
        self.probs = probs

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        q, k, v = self.qkv(x).split(8, dim=-1)
        q, k, v = (t.reshape(b, s, 2, 4).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / 2.0
        y = (self.probs(scores) @ v).transpose(1, 2).reshape(b, s, 8)
        return self.out(y)


def rel_shift_cat(x):
    """Transformer-XL's `_rel_shift` over [B, H, Q, R] scores."""
    zero_pad = torch.zeros((x.size(0), x.size(1), x.size(2), 1), dtype=x.dtype)
    x_padded = torch.cat([zero_pad, x], dim=-1)
    x_padded = x_padded.view(x.size(0), x.size(1), x.size(3) + 1, x.size(2))
    return x_padded[:, :, 1:].view_as(x)


def rel_shift_pad(x):
    """The same shift with the zero column written by `F.pad`."""
    b, h, q, r = x.shape
    x = F.pad(x, (1, 0)).view(b, h, r + 1, q)
    return x[:, :, 1:].reshape(b, h, q, r)


class RelPos(torch.nn.Module):
    """Transformer-XL attention (no memory): content and position scores with the
    learned biases `u` and `v`, the position scores shifted to relative positions."""

    def __init__(self, shift, causal):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.r = torch.nn.Linear(8, 8, bias=False)
        self.out = torch.nn.Linear(8, 8)
        self.u = torch.nn.Parameter(torch.randn(2, 1, 4) * 0.5)
        self.v = torch.nn.Parameter(torch.randn(2, 1, 4) * 0.5)
        self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, 8, 2.0) / 8)))
        self.shift = shift
        self.causal = causal

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        pos = torch.arange(s - 1, -1, -1.0)
        sinusoid = torch.outer(pos, self.inv_freq)
        pos_emb = torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1)
        r = self.r(pos_emb).reshape(s, 2, 4).transpose(0, 1)
        q, k, v = self.qkv(x).split(8, dim=-1)
        q, k, v = (t.reshape(b, s, 2, 4).transpose(1, 2) for t in (q, k, v))
        ac = (q + self.u) @ k.transpose(-2, -1)
        bd = self.shift((q + self.v) @ r.transpose(-2, -1))
        scores = (ac + bd) * (1 / math.sqrt(4))
        if self.causal:
            future = torch.ones(s, s, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, 8)
        return self.out(y)


def save_set(d, x, y):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x.numpy(), "x").SerializeToString())
    with open(os.path.join(d, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y.detach().numpy(), "y").SerializeToString())


def export(name, module, dynamo, g):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    module.eval()
    x = torch.randn(2, 5, 8, generator=g)
    path = os.path.join(d, "model.onnx")
    if dynamo:
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", min=2)
        torch.onnx.export(
            module,
            (x,),
            path,
            input_names=["x"],
            output_names=["y"],
            dynamic_shapes={"x": {0: batch, 1: seq}},
            opset_version=18,
            dynamo=True,
            external_data=False,
        )
    else:
        torch.onnx.export(
            module,
            (x,),
            path,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}},
            opset_version=17,
            dynamo=False,
        )
    with torch.no_grad():
        for i, shape in enumerate([(1, 3, 8), (3, 7, 8)]):
            x = torch.randn(*shape, generator=g)
            save_set(os.path.join(d, f"test_data_set_{i}"), x, module(x))


def main():
    torch.manual_seed(53)
    g = torch.Generator().manual_seed(53)
    export("lse_keepdim", Attn(lse_keepdim), False, g)
    export("lse_unsqueeze", Attn(lse_unsqueeze), False, g)
    export("lse_dynamo", Attn(lse_keepdim), True, g)
    export("max_shifted", Attn(max_shifted), True, g)
    export("max_shifted_values", Attn(max_shifted_values), False, g)
    export("log_softmax_exp", Attn(log_softmax_exp), False, g)
    export("relpos_shift", RelPos(rel_shift_cat, causal=False), False, g)
    export("relpos_shift_causal", RelPos(rel_shift_pad, causal=True), True, g)


if __name__ == "__main__":
    main()
