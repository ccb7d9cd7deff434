#!/usr/bin/python3
"""Exports the golden models to ONNX for memfit's ONNX tests (test_onnx).

    /usr/bin/python3 tests/golden/export_onnx.py --out DIR
    /usr/bin/python3 tests/golden/export_onnx.py --check-state-dict MODEL SAFETENSORS

The first form writes DIR/convnet.onnx and DIR/resnet18.onnx: make_golden.py's
own ConvNet and ResNet-18 with the initial weights the golden fixtures were
computed from (memfit's counter-based init, seed 42), exported in training
mode with their state_dict names, so memfit trained through ONNX must
reproduce the fixtures' losses. Beside each, DIR/<model>.keys lists the
model's state_dict keys, one a line. The files are written at test time and
not kept in the repository (ResNet-18's is 45 MB).

The ConvNet is exported with nn.Dropout in place of the golden's
CounterDropout (whose numpy masks a trace would freeze into constants): the
ONNX Dropout node of module `dropout` is memfit's dropout of layer
`dropout`, which draws the golden's masks.

It also writes DIR/opsnet.onnx and DIR/opsnet.safetensors: a small model
that passes through the other ops memfit imports (batch norm, average pool,
a reshape computed from x.shape, Split, Concat, a Linear over a 3-d input
as MatMul + Add, torch's Erf-based GELU, LayerNormalization (opset 17),
Transpose, Slice, Softmax, a scalar Mul) with PyTorch's logits, loss and
gradients for one batch, computed in float64 from the float32 weights.

The second form loads memfit's saved weights (model.safetensors) into the
PyTorch model with load_state_dict(strict=True) and exits non-zero unless
every tensor is taken, with its shape.

Needs python3-torch and python3-numpy only (torch.onnx.export does not need
the onnx package).
"""
import argparse
import importlib.util
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as golden  # noqa: E402
from golden_common import read_safetensors  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "memfit_onnx_export", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "memfit", "_onnx.py"))
_onnx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_onnx)


def build(name):
    if name == "convnet":
        model = golden.ConvNet()
        model.dropout = nn.Dropout(golden.DROPOUT_P)
    elif name == "resnet18":
        model = golden.ResNet18()
    else:
        raise SystemExit(f"unknown model {name} (convnet, resnet18)")
    golden.memfit_init(model)
    return model.train()


def export_training(model, example, path, opset):
    """The Python package's export (python/memfit/_onnx.py, loaded by path:
    the package's extension need not be built): training mode, the running
    statistics as they were, the batch axis free."""
    _onnx.export_training(model, example, path, opset)


def export(name, out_dir):
    model = build(name)
    path = os.path.join(out_dir, f"{name}.onnx")
    export_training(model, torch.zeros(golden.BATCH, 1, 28, 28), path, 14)
    with open(os.path.join(out_dir, f"{name}.keys"), "w") as f:
        f.write("".join(k + "\n" for k in model.state_dict()))
    print(f"{name}: {os.path.getsize(path)} bytes -> {path}")


class OpsNet(nn.Module):
    """image [N, 1, 8, 8] -> 10 logits through every op the ConvNet and
    ResNet-18 do not use."""

    def __init__(self):
        super().__init__()
        # No bias before the batch norm, and the softmax before the layer
        # norm: either would make a gradient exactly zero (a bias that
        # normalising removes, a shift a softmax ignores), which float64
        # and float32 resolve only to their rounding.
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.proj = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(48, 10)

    def forward(self, x):
        x = F.avg_pool2d(F.relu(self.bn(self.conv(x))), 2)  # [N, 4, 4, 4]
        t = x.reshape(x.shape[0], 4, 16)
        a, b = torch.split(t, 8, dim=2)
        t = torch.cat([b, a], dim=1)                        # [N, 8, 8]
        t = self.ln(F.softmax(F.gelu(self.proj(t)), dim=-1) * 2.0)
        t = t.transpose(1, 2)[:, :, 1:7]                    # [N, 8, 6]
        return self.head(torch.flatten(t, 1))


def export_opsnet(out_dir):
    torch.manual_seed(0)
    model = OpsNet().train()
    path = os.path.join(out_dir, "opsnet.onnx")
    export_training(model, torch.zeros(4, 1, 8, 8), path, 17)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
    y = np.array([3, 1, 4, 1], dtype=np.int32)
    model = model.double()
    logits = model(torch.from_numpy(x).double())
    loss = F.cross_entropy(logits, torch.from_numpy(y.astype(np.int64)))
    loss.backward()
    out = {"input": x, "labels": y, "logits": logits.detach().numpy().astype(np.float32),
           "loss": np.array([loss.item()], dtype=np.float32)}
    for n, p in model.named_parameters():
        out[f"grad.{n}"] = p.grad.numpy().astype(np.float32)
    golden.write_safetensors(os.path.join(out_dir, "opsnet.safetensors"), out,
                             {"generator": "tests/golden/export_onnx.py", "torch_version": torch.__version__})
    print(f"opsnet: {os.path.getsize(path)} bytes -> {path}")


def check_state_dict(name, weights):
    model = build(name)
    tensors = {k: torch.from_numpy(v) for k, v in read_safetensors(weights).items()}
    model.load_state_dict(tensors, strict=True)  # raises on a missing, extra or misshapen tensor
    print(f"{name}: load_state_dict took all {len(tensors)} tensors of {weights}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--models", default="convnet,resnet18")
    ap.add_argument("--check-state-dict", nargs=2, metavar=("MODEL", "SAFETENSORS"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check_state_dict:
        return check_state_dict(*args.check_state_dict)
    if not args.out:
        raise SystemExit("--out DIR is needed")
    os.makedirs(args.out, exist_ok=True)
    for name in args.models.split(","):
        export(name, args.out)
    export_opsnet(args.out)


if __name__ == "__main__":
    sys.exit(main())
