"""What the op-fixture scripts (make_norm_golden.py, make_attention_golden.py,
make_xent_rows_golden.py) share: the command line, one torch thread, the
seeded generator, inputs exactly representable in float32, float64 leaves
and the metadata every fixture carries."""
import argparse
import os

import numpy as np
import torch


def start(seed):
    """Parses --out (default: this folder); returns (args, rng, metadata)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    torch.set_num_threads(1)
    meta = {"torch": torch.__version__, "numpy": np.__version__, "seed": str(seed)}
    return args, np.random.default_rng(seed), meta


def f32_exact(rng, shape, lo, hi):
    """Uniform in [lo, hi), rounded to float32 (memfit's kernels see the same
    values), held in float64."""
    return rng.uniform(lo, hi, shape).astype(np.float32).astype(np.float64)


def f32_exact_of(rng):
    """f32_exact drawing from rng: f(shape, lo, hi)."""
    return lambda shape, lo, hi: f32_exact(rng, shape, lo, hi)


def leaf(a):
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)
