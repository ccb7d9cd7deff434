#!/usr/bin/python3
"""Writes the PyTorch golden fixture of the Transformer ops memfit's
tests/test_ops_norm.cpp compares against: norm_ops.safetensors.

    /usr/bin/python3 tests/golden/make_norm_golden.py [--out DIR]

Needs torch and numpy (Debian: python3-torch python3-numpy). For each case it
draws inputs with numpy's PCG64 (seeded), rounds them to float32 (so memfit's
f32 kernels see exactly the same values), and records in float64 what
PyTorch computes: F.layer_norm (with torch.native_layer_norm's mean and
rstd), F.gelu(approximate='none' and 'tanh') and F.softmax(dim=-1), and the
gradients of sum(y * dy) with respect to every input. All tensors are F64;
see README.md in this folder for the names.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common  # noqa: E402
from make_golden import write_safetensors  # noqa: E402

SEED = 2024
LN_CASES = [("ln3", (3, 5, 17), 1e-5), ("ln4", (2, 3, 4, 7), 1e-3)]
GELU_SHAPE = (4, 33)
SOFTMAX_SHAPE = (3, 4, 19)


def main():
    args, rng, meta = golden_common.start(SEED)
    f32_exact, leaf = golden_common.f32_exact_of(rng), golden_common.leaf

    out = {}
    for name, shape, eps in LN_CASES:
        d = shape[-1]
        x, dy = f32_exact(shape, -2.0, 3.0), f32_exact(shape, -1.0, 1.0)
        w, b = f32_exact((d,), 0.5, 1.5), f32_exact((d,), -1.0, 1.0)
        tx, tw, tb = leaf(x), leaf(w), leaf(b)
        y = F.layer_norm(tx, (d,), tw, tb, eps)
        (y * torch.tensor(dy)).sum().backward()
        _, mean, rstd = torch.native_layer_norm(tx.detach(), [d], tw.detach(), tb.detach(), eps)
        out.update({f"{name}.x": x, f"{name}.weight": w, f"{name}.bias": b, f"{name}.dy": dy,
                    f"{name}.y": y.detach().numpy(), f"{name}.mean": mean.numpy().reshape(-1),
                    f"{name}.rstd": rstd.numpy().reshape(-1), f"{name}.dx": tx.grad.numpy(),
                    f"{name}.dweight": tw.grad.numpy(), f"{name}.dbias": tb.grad.numpy()})
        meta[f"{name}.eps"] = repr(eps)

    x, dy = f32_exact(GELU_SHAPE, -5.0, 5.0), f32_exact(GELU_SHAPE, -1.0, 1.0)
    out.update({"gelu.x": x, "gelu.dy": dy})
    for approx in ("none", "tanh"):
        tx = leaf(x)
        y = F.gelu(tx, approximate=approx)
        (y * torch.tensor(dy)).sum().backward()
        out.update({f"gelu_{approx}.y": y.detach().numpy(), f"gelu_{approx}.dx": tx.grad.numpy()})

    x, dy = f32_exact(SOFTMAX_SHAPE, -8.0, 8.0), f32_exact(SOFTMAX_SHAPE, -1.0, 1.0)
    tx = leaf(x)
    y = F.softmax(tx, dim=-1)
    (y * torch.tensor(dy)).sum().backward()
    out.update({"softmax.x": x, "softmax.dy": dy, "softmax.y": y.detach().numpy(), "softmax.dx": tx.grad.numpy()})

    path = os.path.join(args.out, "norm_ops.safetensors")
    write_safetensors(path, out, meta)
    print(f"{len(out)} tensors, {os.path.getsize(path)} bytes -> {path}")


if __name__ == "__main__":
    sys.exit(main())
