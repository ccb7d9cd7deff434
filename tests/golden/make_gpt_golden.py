#!/usr/bin/python3
"""Writes the PyTorch golden fixture of memfit's GPT model: gpt_tiny.safetensors.

    /usr/bin/python3 tests/golden/make_gpt_golden.py [--out DIR]

Needs torch (>= 1.12, for gelu's tanh form) and numpy. The model is GPT-2's
architecture written out in plain PyTorch (pre-LN blocks, causal attention
as softmax(q k^T / sqrt(d) + mask) v, GELU tanh, tied head), with
Hugging Face GPT-2's parameter names and Conv1D [in, out] layouts, at
memfit's gpt-tiny size (2 layers, 2 heads, 32 wide, 64 positions) and a
vocabulary of 23. Initial weights are drawn here with numpy's PCG64 (seeded)
and stored whole (28k floats); memfit loads them by name.

Everything PyTorch computes is in float64: the step-0 logits, loss and every
parameter gradient, then the losses of 20 AdamW steps (lr 1e-3, betas 0.9 /
0.999, eps 1e-8, weight decay 0.1 on the 2-d parameters only). Weights are
F32 (what both sides start from); the rest F64.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_common import adamw_with_decay_groups  # noqa: E402
from make_golden import write_safetensors  # noqa: E402

SEED = 7
L, H, C, BLOCK, V = 2, 2, 32, 64, 23
B, T = 4, 16
STEPS, LR, WD = 20, 1e-3, 0.1


def init_weights(rng):
    """GPT-2's scheme: N(0, 0.02) weights, residual projections / sqrt(2 L),
    zero biases, unit layer-norm gains."""
    w = {}

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w["transformer.wte.weight"] = normal((V, C), 0.02)
    w["transformer.wpe.weight"] = normal((BLOCK, C), 0.02)
    proj = 0.02 / math.sqrt(2 * L)
    for l in range(L):
        p = f"transformer.h.{l}."
        for ln in ("ln_1", "ln_2"):
            w[p + ln + ".weight"] = np.ones(C, np.float32)
            w[p + ln + ".bias"] = np.zeros(C, np.float32)
        for name, shape, std in (("attn.c_attn", (C, 3 * C), 0.02), ("attn.c_proj", (C, C), proj),
                                 ("mlp.c_fc", (C, 4 * C), 0.02), ("mlp.c_proj", (4 * C, C), proj)):
            w[p + name + ".weight"] = normal(shape, std)
            # Small random biases rather than zeros, so their gradients and
            # their role in the forward pass are both exercised.
            w[p + name + ".bias"] = normal((shape[1],), 0.02)
    w["transformer.ln_f.weight"] = np.ones(C, np.float32)
    w["transformer.ln_f.bias"] = np.zeros(C, np.float32)
    return w


def forward(p, tok):
    h = p["transformer.wte.weight"][tok] + p["transformer.wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    D = C // H
    for l in range(L):
        q_ = f"transformer.h.{l}."
        a = F.layer_norm(h, (C,), p[q_ + "ln_1.weight"], p[q_ + "ln_1.bias"], 1e-5)
        qkv = a @ p[q_ + "attn.c_attn.weight"] + p[q_ + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (x.view(B, T, H, D).transpose(1, 2) for x in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        y = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        h = h + (y @ p[q_ + "attn.c_proj.weight"] + p[q_ + "attn.c_proj.bias"])
        m = F.layer_norm(h, (C,), p[q_ + "ln_2.weight"], p[q_ + "ln_2.bias"], 1e-5)
        m = F.gelu(m @ p[q_ + "mlp.c_fc.weight"] + p[q_ + "mlp.c_fc.bias"], approximate="tanh")
        h = h + (m @ p[q_ + "mlp.c_proj.weight"] + p[q_ + "mlp.c_proj.bias"])
    h = F.layer_norm(h, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5)
    return h @ p["transformer.wte.weight"].t()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.Generator(np.random.PCG64(SEED))
    w = init_weights(rng)
    tokens = rng.integers(0, V, size=(B, T), dtype=np.int64)
    # Targets: the next token of a fixed rule mixed with noise, so the loss
    # falls over the 20 steps.
    targets = (tokens * 3 + 1) % V
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}
    tok = torch.tensor(tokens)
    tgt = torch.tensor(targets)

    out = {("init." + k): v for k, v in w.items()}
    out["tokens"] = tokens.astype(np.int32)
    out["targets"] = targets.astype(np.int32)
    logits = forward(p, tok)
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    loss.backward()
    out["logits"] = logits.detach().numpy()
    out["loss"] = np.array([loss.item()])
    for k, v in p.items():
        out["grad." + k] = v.grad.numpy().copy()

    opt = adamw_with_decay_groups(list(p.values()), LR, WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(forward(p, tok).reshape(-1, V), tgt.reshape(-1))
        losses.append(loss.item())
        loss.backward()
        opt.step()
    out["losses"] = np.array(losses)
    meta = {"torch": torch.__version__, "numpy": np.__version__, "lr": str(LR), "weight_decay": str(WD),
            "seed": str(SEED)}
    path = os.path.join(a.out, "gpt_tiny.safetensors")
    write_safetensors(path, out, meta)
    print(f"wrote {path}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")


if __name__ == "__main__":
    main()
