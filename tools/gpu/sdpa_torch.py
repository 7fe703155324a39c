#!/usr/bin/env python3
"""PyTorch side of the fused-SDPA GPU checks (needs torch with CUDA).

  sdpa_torch.py compare DIR        compare graphrw's outputs dumped by
                                   `cuda_sdpa_bench dump DIR` with torch SDPA
  sdpa_torch.py bench OURS.csv     time torch SDPA on the shapes of
                                   `cuda_sdpa_bench bench OURS.csv` and print both
"""
import sys

import torch
import torch.nn.functional as F

DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def load(path, dtype, shape):
    data = bytearray(open(path, "rb").read())
    return torch.frombuffer(data, dtype=dtype).reshape(shape).cuda()


def compare(d):
    worst = 0.0
    ok_all = True
    for line in open(f"{d}/cases.txt"):
        name, dt, b, hq, hkv, sq, skv, dk, dv, causal, mk = line.split()
        b, hq, hkv, sq, skv, dk, dv = map(int, (b, hq, hkv, sq, skv, dk, dv))
        t = DT[dt]
        q = load(f"{d}/{name}.q", t, (b, hq, sq, dk))
        k = load(f"{d}/{name}.k", t, (b, hkv, skv, dk))
        v = load(f"{d}/{name}.v", t, (b, hkv, skv, dv))
        ours = load(f"{d}/{name}.out", t, (b, hq, sq, dv)).float()
        mask = None
        if mk == "bool":
            mask = load(f"{d}/{name}.mask", torch.bool, (b, 1, sq, skv))
        elif mk == "add":
            mask = load(f"{d}/{name}.mask", t, (1, 1, sq, skv))
        kw = dict(attn_mask=mask, is_causal=causal == "1", enable_gqa=hq != hkv)
        ref = F.scaled_dot_product_attention(q, k, v, **kw).float()
        # the exact answer, in f64
        exact = F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(),
            attn_mask=None if mask is None else (mask if mask.dtype == torch.bool else mask.double()),
            is_causal=causal == "1", enable_gqa=hq != hkv).float()
        e_ours = (ours - exact).abs().max().item()
        e_torch = (ref - exact).abs().max().item()
        e_vs = (ours - ref).abs().max().item()
        ok = e_ours <= max(2.0 * e_torch, 1e-3 if t != torch.float32 else 1e-5)
        ok_all &= ok
        worst = max(worst, e_vs)
        print(f"{name:28s} |ours-torch|={e_vs:.2e} |ours-exact|={e_ours:.2e} "
              f"|torch-exact|={e_torch:.2e} {'ok' if ok else 'FAIL'}")
    print("compare:", "all ok" if ok_all else "SOME FAILED", f"(max |ours-torch| {worst:.2e})")
    return 0 if ok_all else 1


def bench_ms(fn, iters_target_ms=200.0):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); fn(); b.record(); b.synchronize()
    one = a.elapsed_time(b)
    iters = max(3, min(50, int(iters_target_ms / max(one, 1e-3))))
    a.record()
    for _ in range(iters):
        fn()
    b.record(); b.synchronize()
    return a.elapsed_time(b) / iters


def bench(ours_csv):
    rows = [l.strip().split(",") for l in open(ours_csv)][1:]
    B, H = 4, 16
    print(f"{'dtype':5s} {'D':>4s} {'causal':>6s} {'S':>5s} | {'ours TF/s':>9s} {'torch TF/s':>10s} {'ratio':>6s}")
    ratios = []
    for dt, d, causal, s, ms, tf in rows:
        d, s, causal = int(d), int(s), causal == "true"
        t = DT[dt]
        q = torch.randn(B, H, s, d, dtype=t, device="cuda")
        k = torch.randn_like(q)
        v = torch.randn_like(q)
        tms = bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        flops = 4.0 * B * H * s * s * d / (2 if causal else 1)
        ttf = flops / (tms * 1e-3) / 1e12
        r = float(tf) / ttf
        ratios.append(r)
        print(f"{dt:5s} {d:4d} {str(causal):>6s} {s:5d} | {float(tf):9.1f} {ttf:10.1f} {r:6.2f}")
    print(f"ratio ours/torch: min {min(ratios):.2f}, geomean "
          f"{torch.tensor(ratios).log().mean().exp().item():.2f}")
    return 0


if __name__ == "__main__":
    print("torch", torch.__version__, torch.cuda.get_device_name())
    if sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2]))
    sys.exit(bench(sys.argv[2]))
