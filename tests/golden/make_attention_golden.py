#!/usr/bin/python3
"""Writes the PyTorch golden fixture of memfit's fused attention op
(tests/test_attention.cpp): attention.safetensors.

    /work/main/bench/.venv/bin/python tests/golden/make_attention_golden.py [--out DIR]

Needs torch and numpy. For each case it draws q, k, v and dout with numpy's
PCG64 (seeded), rounds them to float32 (so memfit's f32 kernels see exactly
the same values) and records in float64 what PyTorch computes: the scores
q k^T scale with the causal and key masks (-inf where not attended),
torch.logsumexp of them (lse), softmax(scores) v (out), and the gradients
of sum(out * dout) with respect to q, k and v. The script checks that
F.scaled_dot_product_attention gives the same out. No case has a row
without an attended key (PyTorch gives NaN there; memfit defines 0, tested
on its own). The key mask is stored as F64 0/1 ([B, S]); every tensor is F64.
Case attributes (causal, scale) are in the metadata.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common  # noqa: E402
from make_golden import write_safetensors  # noqa: E402

SEED = 1212
# name, (B, H, T, S, D, Dv), causal, scale (None: 1/sqrt(D)), masked keys per batch
CASES = [
    ("causal_mask", (2, 3, 5, 7, 8, 6), True, None, {1: [2, 5]}),
    ("cross", (1, 2, 9, 4, 3, 5), False, 0.7, {}),
    ("square", (1, 1, 33, 33, 16, 16), True, None, {0: [3, 10, 11]}),
]


def main():
    args, rng, meta = golden_common.start(SEED)
    f32_exact, leaf = golden_common.f32_exact_of(rng), golden_common.leaf

    out = {}
    for name, (B, H, T, S, D, Dv), causal, scale, masked in CASES:
        q, k = f32_exact((B, H, T, D), -1.5, 1.5), f32_exact((B, H, S, D), -1.5, 1.5)
        v, dout = f32_exact((B, H, S, Dv), -1.0, 1.0), f32_exact((B, H, T, Dv), -1.0, 1.0)
        mask = np.ones((B, S))
        for b, js in masked.items():
            mask[b, js] = 0.0
        sc = 1.0 / np.sqrt(D) if scale is None else scale
        allowed = torch.tensor(mask, dtype=torch.bool)[:, None, None, :].expand(B, H, T, S)
        if causal:  # query i attends keys j <= i + (S - T)
            allowed = allowed & torch.ones(T, S, dtype=torch.bool).tril(S - T)
        tq, tk, tv = leaf(q), leaf(k), leaf(v)
        scores = (tq @ tk.transpose(-1, -2)) * sc
        scores = scores.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        o = torch.softmax(scores, dim=-1) @ tv
        (o * torch.tensor(dout)).sum().backward()
        ref = F.scaled_dot_product_attention(tq.detach(), tk.detach(), tv.detach(), attn_mask=allowed, scale=sc)
        assert torch.allclose(ref, o.detach(), atol=1e-12), name
        assert torch.isfinite(lse).all(), name
        out.update({f"{name}.q": q, f"{name}.k": k, f"{name}.v": v, f"{name}.dout": dout, f"{name}.mask": mask,
                    f"{name}.out": o.detach().numpy(), f"{name}.lse": lse.detach().numpy(),
                    f"{name}.dq": tq.grad.numpy(), f"{name}.dk": tk.grad.numpy(), f"{name}.dv": tv.grad.numpy()})
        meta[f"{name}.causal"] = str(int(causal))
        meta[f"{name}.scale"] = repr(float(sc))

    path = os.path.join(args.out, "attention.safetensors")
    write_safetensors(path, out, meta)
    print(f"{len(out)} tensors, {os.path.getsize(path)} bytes -> {path}")


if __name__ == "__main__":
    main()
