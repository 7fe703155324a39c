"""Generates the attention spelling models of `graphrw/tests/attention_spellings.rs`.

Each model is a small torch module written the way real model code writes attention
(nanoGPT, fairseq, timm, diffusers, Megatron, BLOOM, T5, llama), exported with
`torch.onnx.export(dynamo=True, opset_version=18)` as a user would, and saved with
seeded inputs (`<name>.npz`). Run with a python that has torch and onnxscript:

    /work/venv-torch/bin/python graphrw/tests/models/attention/gen.py

The expected number of fused attention nodes per model is in `manifest.txt`
(`name class fused`); the Rust test reads it.
"""

import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
B, H, S, D = 2, 4, 8, 16
HKV = 2
SK = 12  # cross-attention key length
E = H * D


def rnd(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class Proj(nn.Module):
    """q, k, v projections of an input `x` [B, S, E] split into heads."""

    def __init__(self, heads=H, kv_heads=None):
        super().__init__()
        torch.manual_seed(0)
        self.heads = heads
        self.kv_heads = kv_heads or heads
        self.q = nn.Linear(E, heads * D)
        self.k = nn.Linear(E, self.kv_heads * D)
        self.v = nn.Linear(E, self.kv_heads * D)

    def split(self, t, heads):
        b, s, _ = t.shape
        return t.view(b, s, heads, D).transpose(1, 2)


# --- 3-D attention: heads folded into the batch ------------------------------------


class Bmm3dFairseq(nn.Module):
    """fairseq MultiheadAttention: q scaled after projection, bmm on [B*H, S, D]."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.q, self.k, self.v = nn.Linear(E, E), nn.Linear(E, E), nn.Linear(E, E)
        self.scaling = D**-0.5

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x) * self.scaling
        k, v = self.k(x), self.v(x)
        q = q.contiguous().view(b, s, H, D).transpose(1, 2).reshape(b * H, s, D)
        k = k.contiguous().view(b, s, H, D).transpose(1, 2).reshape(b * H, s, D)
        v = v.contiguous().view(b, s, H, D).transpose(1, 2).reshape(b * H, s, D)
        w = torch.bmm(q, k.transpose(1, 2))
        w = F.softmax(w, dim=-1)
        o = torch.bmm(w, v)
        return o.view(b, H, s, D).transpose(1, 2).reshape(b, s, E)


class Bmm3dBaddbmm(nn.Module):
    """BLOOM: alibi.baddbmm(q, kᵀ, beta=1, alpha=1/sqrt(d)) on [B*H, S, D]."""

    def __init__(self):
        super().__init__()
        self.register_buffer("alibi", rnd(B * H, 1, S, seed=2))

    def forward(self, q, k, v):
        scores = self.alibi.baddbmm(batch1=q, batch2=k.transpose(-1, -2), beta=1.0, alpha=1 / math.sqrt(D))
        p = F.softmax(scores, dim=-1, dtype=torch.float32)
        return torch.bmm(p, v)


class Bmm3dPositiveDim(nn.Module):
    """Plain 3-D matmuls with the softmax dim written positive."""

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.permute(0, 2, 1)) / math.sqrt(D)
        return torch.matmul(scores.softmax(dim=2), v)


# --- fewer kv heads than query heads -----------------------------------------------


class GqaRepeatInterleave(nn.Module):
    """k/v heads repeated with repeat_interleave (many GQA ports)."""

    def forward(self, q, k, v):
        r = H // HKV
        k = k.repeat_interleave(r, dim=1)
        v = v.repeat_interleave(r, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        return att.softmax(-1) @ v


class GqaRepeatKv(nn.Module):
    """transformers' repeat_kv: expand then reshape."""

    def forward(self, q, k, v):
        def repeat_kv(x, n):
            b, h, s, d = x.shape
            return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)

        k, v = repeat_kv(k, H // HKV), repeat_kv(v, H // HKV)
        att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(att, v)


class GqaBroadcast(nn.Module):
    """Grouped query heads viewed as [B, Hkv, G, S, D]; k and v broadcast over G."""

    def forward(self, q, k, v):
        qg = q.view(B, HKV, H // HKV, S, D)
        kg, vg = k.unsqueeze(2), v.unsqueeze(2)
        att = (qg @ kg.transpose(-2, -1)) / math.sqrt(D)
        o = att.softmax(-1) @ vg
        return o.reshape(B, H, S, D)


class MqaBroadcast(nn.Module):
    """Multi-query attention: one kv head broadcast by matmul."""

    def forward(self, q, k, v):
        att = q @ k.transpose(-2, -1) * D**-0.5
        return att.softmax(dim=-1) @ v


# --- masks ------------------------------------------------------------------------


class MaskCausalMaskedFill(nn.Module):
    """nanoGPT: masked_fill(bias[:, :, :T, :T] == 0, -inf)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16))

    def forward(self, q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return att @ v


class MaskPaddingFinfo(nn.Module):
    """A boolean padding mask from the input, filled with finfo.min."""

    def forward(self, q, k, v, keep):
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        att = att.masked_fill(~keep[:, None, None, :], torch.finfo(att.dtype).min)
        return torch.matmul(att.softmax(-1), v)


class MaskBandWhere(nn.Module):
    """A local (band) window with torch.where(mask, scores, -1e4)."""

    def forward(self, q, k, v):
        i = torch.arange(S)[:, None]
        j = torch.arange(S)[None, :]
        band = (i - j).abs() <= 2
        att = torch.matmul(q, k.transpose(-1, -2)) * D**-0.5
        att = torch.where(band, att, torch.tensor(-1e4))
        return att.softmax(-1) @ v


class MaskAdditiveBert(nn.Module):
    """BERT: (1 - mask) * -10000 added to the scores, mask given as floats."""

    def forward(self, q, k, v, mask):
        ext = (1.0 - mask[:, None, None, :]) * -10000.0
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        att = att + ext
        return torch.matmul(F.softmax(att, dim=-1), v)


class MaskBiasT5(nn.Module):
    """T5: a learned position bias plus a padding mask, no scale."""

    def __init__(self):
        super().__init__()
        self.rel = nn.Parameter(rnd(1, H, S, S, seed=3))

    def forward(self, q, k, v, keep):
        bias = self.rel + (1.0 - keep[:, None, None, :].float()) * -1e9
        att = torch.matmul(q, k.transpose(3, 2))
        att += bias
        return torch.matmul(att.softmax(-1), v)


class MaskCausalFinfoWhere(nn.Module):
    """A causal bool buffer applied with where(mask, scores, finfo.min)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("causal", torch.ones(S, S, dtype=torch.bool).tril())

    def forward(self, q, k, v):
        att = q @ k.transpose(-2, -1) / math.sqrt(D)
        att = torch.where(self.causal, att, torch.finfo(torch.float32).min)
        return att.softmax(-1) @ v


# --- softmax by hand or in another precision ---------------------------------------


class SoftmaxByHand(nn.Module):
    """exp(x - max) / sum(exp(x - max))."""

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        e = torch.exp(s - s.amax(dim=-1, keepdim=True))
        p = e / e.sum(dim=-1, keepdim=True)
        return p @ v


class SoftmaxByHandMax(nn.Module):
    """exp(x - max(x).values) / sum, the max by torch.max."""

    def forward(self, q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) * D**-0.5
        m, _ = torch.max(s, dim=-1, keepdim=True)
        e = (s - m).exp()
        return torch.matmul(e / torch.sum(e, -1, keepdim=True), v)


class SoftmaxDouble(nn.Module):
    """Softmax computed in float64 and cast back."""

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        p = F.softmax(s.double(), dim=-1).float()
        return p @ v


class SoftmaxTypeAs(nn.Module):
    """llama-style softmax(scores.float()).type_as(q) on a half-precision model."""

    def forward(self, q, k, v):
        q, k, v = q.half(), k.half(), v.half()
        s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)
        p = F.softmax(s.float(), dim=-1).type_as(q)
        return torch.matmul(p, v).float()


# --- the scale anywhere --------------------------------------------------------------


class ScaleOnQ(nn.Module):
    """fairseq/BART: q * scaling right after the projection, before the head split."""

    def __init__(self):
        super().__init__()
        self.p = Proj()

    def forward(self, x):
        q = self.p.split(self.p.q(x) * D**-0.5, H)
        k = self.p.split(self.p.k(x), H)
        v = self.p.split(self.p.v(x), H)
        o = torch.matmul(q, k.transpose(-1, -2)).softmax(-1) @ v
        return o.transpose(1, 2).reshape(B, S, E)


class ScaleOnBoth(nn.Module):
    """OpenAI/diffusers: q and k each scaled by d**-0.25 (k before its transpose)."""

    def forward(self, q, k, v):
        scale = 1 / math.sqrt(math.sqrt(D))
        w = torch.matmul(q * scale, (k * scale).transpose(-1, -2))
        return torch.matmul(torch.softmax(w, dim=-1), v)


class ScaleTensorBuffer(nn.Module):
    """scores divided by a registered tensor constant sqrt(d)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(math.sqrt(D)))

    def forward(self, q, k, v):
        att = torch.matmul(q, k.transpose(-1, -2)) / self.scale
        return torch.matmul(att.softmax(-1), v)


class ScaleOnKTransposed(nn.Module):
    """k already transposed and scaled (timm-style `k.transpose(-2, -1) * scale`)."""

    def forward(self, q, k, v):
        kt = k.transpose(-2, -1) * (D**-0.5)
        return (q @ kt).softmax(dim=-1) @ v


# --- queries from another sequence -------------------------------------------------


class CrossAttention(nn.Module):
    """Decoder queries over encoder keys (Sq != Sk)."""

    def forward(self, q, k, v):
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        return torch.matmul(att.softmax(dim=-1), v)


class CrossAttentionPadded(nn.Module):
    """Cross attention with a padding mask over the encoder keys (fairseq key_padding_mask)."""

    def forward(self, q, k, v, pad):
        att = torch.matmul(q * D**-0.5, k.transpose(2, 3))
        att = att.masked_fill(pad[:, None, None, :], float("-inf"))
        return torch.matmul(F.softmax(att, dim=3), v)


# --- dims either way ---------------------------------------------------------------


class DimsPositive(nn.Module):
    """softmax(dim=3) and transpose(2, 3)."""

    def forward(self, q, k, v):
        att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)
        return torch.matmul(F.softmax(att, dim=3), v)


class DimsPermute(nn.Module):
    """kᵀ made by one permute from [B, S, H, D]."""

    def forward(self, q, k, v):
        q = q.permute(0, 2, 1, 3)
        kt = k.permute(0, 2, 3, 1)
        v = v.permute(0, 2, 1, 3)
        att = (q @ kt) * D**-0.5
        return (att.softmax(3) @ v).permute(0, 2, 1, 3)


# --- einsum in any layout -------------------------------------------------------------


class EinsumBhsd(nn.Module):
    """Scores and output by einsum on [B, H, S, D] (diffusers, xformers' reference)."""

    def forward(self, q, k, v):
        att = torch.einsum("bhqd,bhkd->bhqk", q, k) * D**-0.5
        return torch.einsum("bhqk,bhkd->bhqd", att.softmax(dim=-1), v)


class EinsumBshd(nn.Module):
    """einsum straight from the [B, S, H, D] layout (timm/Megatron style), out in [B, S, H, D]."""

    def forward(self, q, k, v):
        att = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D)
        return torch.einsum("bhqk,bkhd->bqhd", att.softmax(-1), v)


class Einsum3d(nn.Module):
    """Heads folded into the batch, einsum on [B*H, S, D] (older diffusers CrossAttention)."""

    def forward(self, q, k, v):
        att = torch.einsum("b i d, b j d -> b i j", q, k) * D**-0.5
        return torch.einsum("b i j, b j d -> b i d", att.softmax(dim=-1), v)


# --- the -inf row semantics (#20) ----------------------------------------------------


class FullyMaskedRow(nn.Module):
    """masked_fill with -inf where one query row has no visible key."""

    def forward(self, q, k, v, keep):
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        att = att.masked_fill(~keep, float("-inf"))
        return torch.matmul(att.softmax(-1), v)


def qkv(hq=H, hk=H, sq=S, sk=S, seed=10):
    return (rnd(B, hq, sq, D, seed=seed), rnd(B, hk, sk, D, seed=seed + 1), rnd(B, hk, sk, D, seed=seed + 2))


def qkv3(seed=20):
    return (rnd(B * H, S, D, seed=seed), rnd(B * H, S, D, seed=seed + 1), rnd(B * H, S, D, seed=seed + 2))


def keep_mask(b, s):
    keep = torch.ones(b, s, dtype=torch.bool)
    keep[0, -3:] = False
    keep[1, -1:] = False
    return keep


def fully_masked_keep():
    keep = torch.ones(B, H, S, S, dtype=torch.bool).tril()
    keep[:, :, 2, :] = False  # row 2 sees nothing
    return keep


x = rnd(B, S, E, seed=5)
bshd = (rnd(B, S, H, D, seed=30), rnd(B, S, H, D, seed=31), rnd(B, S, H, D, seed=32))

# name, class, module, inputs (names, tensors), fused attention nodes expected
MODELS = [
    ("bmm3d_fairseq", "3d", Bmm3dFairseq(), {"x": x}, 1),
    ("bmm3d_baddbmm", "3d", Bmm3dBaddbmm(), dict(zip("qkv", qkv3())), 1),
    ("bmm3d_positive_dim", "3d", Bmm3dPositiveDim(), dict(zip("qkv", qkv3(21))), 1),
    ("gqa_repeat_interleave", "gqa", GqaRepeatInterleave(), dict(zip("qkv", qkv(hk=HKV))), 1),
    ("gqa_repeat_kv", "gqa", GqaRepeatKv(), dict(zip("qkv", qkv(hk=HKV, seed=40))), 1),
    ("gqa_broadcast", "gqa", GqaBroadcast(), dict(zip("qkv", qkv(hk=HKV, seed=43))), 1),
    ("mqa_broadcast", "gqa", MqaBroadcast(), dict(zip("qkv", qkv(hk=1, seed=46))), 1),
    ("mask_causal_masked_fill", "mask", MaskCausalMaskedFill(), dict(zip("qkv", qkv(seed=50))), 1),
    ("mask_padding_finfo", "mask", MaskPaddingFinfo(), {**dict(zip("qkv", qkv(seed=53))), "keep": keep_mask(B, S)}, 1),
    ("mask_band_where", "mask", MaskBandWhere(), dict(zip("qkv", qkv(seed=56))), 1),
    ("mask_additive_bert", "mask", MaskAdditiveBert(), {**dict(zip("qkv", qkv(seed=59))), "mask": keep_mask(B, S).float()}, 1),
    ("mask_bias_t5", "mask", MaskBiasT5(), {**dict(zip("qkv", qkv(seed=62))), "keep": keep_mask(B, S)}, 1),
    ("mask_causal_finfo_where", "mask", MaskCausalFinfoWhere(), dict(zip("qkv", qkv(seed=65))), 1),
    ("softmax_by_hand", "softmax", SoftmaxByHand(), dict(zip("qkv", qkv(seed=70))), 1),
    ("softmax_by_hand_max", "softmax", SoftmaxByHandMax(), dict(zip("qkv", qkv(seed=73))), 1),
    ("softmax_double", "softmax", SoftmaxDouble(), dict(zip("qkv", qkv(seed=76))), 1),
    ("softmax_type_as", "softmax", SoftmaxTypeAs(), dict(zip("qkv", qkv(seed=79))), 1),
    ("scale_on_q", "scale", ScaleOnQ(), {"x": x}, 1),
    ("scale_on_both", "scale", ScaleOnBoth(), dict(zip("qkv", qkv(seed=82))), 1),
    ("scale_tensor_buffer", "scale", ScaleTensorBuffer(), dict(zip("qkv", qkv(seed=85))), 1),
    ("scale_on_k_transposed", "scale", ScaleOnKTransposed(), dict(zip("qkv", qkv(seed=88))), 1),
    ("cross_attention", "cross", CrossAttention(), dict(zip("qkv", qkv(sk=SK, seed=90))), 1),
    ("cross_attention_padded", "cross", CrossAttentionPadded(), {**dict(zip("qkv", qkv(sk=SK, seed=93))), "pad": ~keep_mask(B, SK)}, 1),
    ("dims_positive", "dims", DimsPositive(), dict(zip("qkv", qkv(seed=96))), 1),
    ("dims_permute", "dims", DimsPermute(), dict(zip("qkv", bshd)), 1),
    ("einsum_bhsd", "einsum", EinsumBhsd(), dict(zip("qkv", qkv(seed=110))), 1),
    ("einsum_bshd", "einsum", EinsumBshd(), dict(zip("qkv", bshd)), 1),
    ("einsum_3d", "einsum", Einsum3d(), dict(zip("qkv", qkv3(seed=113))), 1),
    ("fully_masked_row", "nan_row", FullyMaskedRow(), {**dict(zip("qkv", qkv(seed=99))), "keep": fully_masked_keep()}, 1),
]


def main():
    only = set(sys.argv[1:])
    lines = []
    for name, cls, mod, inputs, fused in MODELS:
        lines.append(f"{name} {cls} {fused}")
        if only and name not in only:
            continue
        mod.eval()
        args = tuple(inputs.values())
        path = os.path.join(HERE, f"{name}.onnx")
        prog = torch.onnx.export(
            mod, args, dynamo=True, opset_version=18, input_names=list(inputs), verbose=False
        )
        prog.save(path, external_data=False)
        np.savez(os.path.join(HERE, f"{name}.npz"), **{k: v.numpy() for k, v in inputs.items()})
        print("wrote", name, file=sys.stderr)
    with open(os.path.join(HERE, "manifest.txt"), "w") as f:
        f.write("# name class fused_attention_nodes (written by gen.py)\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
