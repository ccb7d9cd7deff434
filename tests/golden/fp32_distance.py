"""Distance of PyTorch's own fp32 step-0 gradients from a float64 golden fixture.

The ResNet-18 fixture (resnet18.safetensors) is computed in float64. An fp32
engine differs from it by rounding, and at a few of the ~10^7 pre-activations
that lie within fp32 rounding of zero a ReLU can switch on or off depending on
the summation order: one switched unit changes its channel's batch-norm
backward and with it every gradient upstream by ~1e-3 relative. This script
measures that spread for PyTorch itself on the machine it runs on, so the
golden test's tolerance rests on a measurement, not a guess:

    /usr/bin/python3 tests/golden/fp32_distance.py --threads 1
    ONEDNN_MAX_CPU_ISA=AVX2 /usr/bin/python3 tests/golden/fp32_distance.py --threads 2

It prints, per parameter, ||g_fp32 - g_fixture|| / ||g_fixture|| (full tensors
where the fixture has them, else the norm's relative difference), the maximum,
and the number of ReLU inputs whose sign differs between fp32 and float64.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402


def read_fixture(path):
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    np_dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(body[a:b], dtype=np_dt[v["dtype"]]).reshape(v["shape"])
    return out


def relu_inputs(model, x, dtype):
    """Every ReLU input of one forward pass (the step-0 batch)."""
    seen = []
    relu = mg.F.relu

    def recording_relu(t, *a, **k):
        seen.append(t.detach().to(torch.float64).reshape(-1))
        return relu(t, *a, **k)

    mg.F.relu = recording_relu  # the golden models call F.relu
    try:
        model(x.to(dtype))
    finally:
        mg.F.relu = relu
    return torch.cat(seen)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fixture", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "resnet18.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fx = read_fixture(args.fixture)
    x, y = mg.load_batch()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    nets = {}
    for dt in (torch.float32, torch.float64):
        m = mg.ResNet18()
        mg.memfit_init(m)
        nets[dt] = m.to(dt).train()
    # Sign changes of ReLU inputs between fp32 and float64 (forward only; the
    # batch-norm running statistics it updates are not used below).
    r32 = relu_inputs(nets[torch.float32], xt, torch.float32)
    r64 = relu_inputs(nets[torch.float64], xt, torch.float64)
    flips = int(((r32 > 0) != (r64 > 0)).sum())
    near = int((r64.abs() < 1e-5).sum())

    m = mg.ResNet18()
    mg.memfit_init(m)
    m.train()
    loss = F.cross_entropy(m(xt), yt)
    loss.backward()
    worst, rows = 0.0, []
    for n, p in m.named_parameters():
        g = p.grad.detach().numpy().astype(np.float64).reshape(-1)
        if f"grad.{n}" in fx:
            ref = fx[f"grad.{n}"].astype(np.float64).reshape(-1)
            d = np.linalg.norm(g - ref) / np.linalg.norm(ref)
        else:
            rn = float(fx[f"grad_norm.{n}"][0])
            d = abs(np.linalg.norm(g) - rn) / rn
        rows.append((n, d))
        worst = max(worst, d)
    for n, d in rows:
        print(f"  {n:40s} {d:.3e}")
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "default")
    print(f"torch {torch.__version__}, {args.threads} thread(s), ONEDNN_MAX_CPU_ISA={isa}: "
          f"max relative gradient distance {worst:.3e}; ReLU inputs with another sign than float64: {flips} "
          f"(of {r64.numel()}, {near} within 1e-5 of zero); step-0 loss {loss.item():.7f} "
          f"(fixture {float(fx['loss'][0]):.7f})")


if __name__ == "__main__":
    main()
