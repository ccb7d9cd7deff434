#!/usr/bin/python3
"""Writes the PyTorch golden fixture of memfit's row-wise cross-entropy
(xent_rows, tests/test_xent_rows.cpp): xent_rows.safetensors.

    python3 tests/golden/make_xent_rows_golden.py [--out DIR]

Needs torch and numpy. For each case it draws logits with numpy's PCG64
(seeded), rounds them to float32 (memfit's f32 kernels see the same values),
and records in float64 what PyTorch computes:
F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),
ignore_index=-100, label_smoothing=s, reduction='mean'), the rows'
torch.logsumexp, and the gradient of that loss with respect to the logits.
Targets are I32 (-100 marks padding); every other tensor is F64.
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
# name, logits shape (rows..., V), logit range, smoothing, padded rows (flat indices)
CASES = [
    ("plain", (6, 11), 3.0, 0.0, [1, 4]),
    ("smooth", (6, 11), 3.0, 0.1, [1, 4]),
    ("seq", (2, 3, 17), 8.0, 0.2, [2, 5]),
    ("wide", (4, 1000), 6.0, 0.05, [3]),
]


def main():
    args, rng, meta = golden_common.start(SEED)
    out = {}
    for name, shape, scale, s, pad in CASES:
        V = shape[-1]
        rows = int(np.prod(shape[:-1]))
        z = rng.uniform(-scale, scale, shape).astype(np.float32).astype(np.float64)
        t = rng.integers(0, V, shape[:-1]).astype(np.int32)
        t.reshape(-1)[pad] = -100
        tz = torch.tensor(z, dtype=torch.float64, requires_grad=True)
        loss = F.cross_entropy(tz.reshape(rows, V), torch.tensor(t.reshape(-1), dtype=torch.int64),
                               ignore_index=-100, label_smoothing=s, reduction="mean")
        loss.backward()
        lse = torch.logsumexp(tz.detach(), dim=-1)
        out.update({f"{name}.logits": z, f"{name}.targets": t, f"{name}.loss": np.array([loss.item()]),
                    f"{name}.lse": lse.numpy(), f"{name}.dlogits": tz.grad.numpy()})
        meta[f"{name}.smoothing"] = repr(s)
    path = os.path.join(args.out, "xent_rows.safetensors")
    write_safetensors(path, out, meta)
    print(f"{len(out)} tensors, {os.path.getsize(path)} bytes -> {path}")


if __name__ == "__main__":
    main()
