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


def read_safetensors(path):
    """A safetensors file's tensors as numpy arrays, by name (F32, F64, I32,
    I64; the `safetensors` package is not needed). Checks that every
    tensor's bytes lie inside the file and match its shape."""
    import json
    import struct
    kinds = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = np.dtype(kinds[t["dtype"]]).newbyteorder("<")
        lo, hi = t["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64))
        if not (0 <= lo <= hi <= len(data)) or hi - lo != count * dt.itemsize:
            raise ValueError(f"{path}: tensor {name}: offsets {lo}..{hi} do not hold {t['dtype']} {t['shape']}")
        out[name] = np.frombuffer(data[lo:hi], dtype=dt).reshape(t["shape"]).copy()
    return out


def adamw_with_decay_groups(params, lr, weight_decay):
    """AdamW (betas 0.9/0.999, eps 1e-8) decaying the 2-d weights only, as
    memfit's decay_bias_and_norm=false: biases and norm weights no decay."""
    decay = [t for t in params if t.dim() >= 2]
    no_decay = [t for t in params if t.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.999), eps=1e-8)
