#!/usr/bin/env python3
"""A tiny model with torchvision's stochastic depth, exported as current
torch exports it, for test_onnx's OnnxStochasticDepth test.

    bench/.venv/bin/python tests/golden/make_stochastic_depth.py   (make bench-venv: torch 2.x, torchvision, onnx)

Writes tests/golden/stochastic_depth.onnx: Conv2d(3, 4, 3, padding=1) on
3 x 8 x 8, StochasticDepth(p=0.2, mode="row"), Flatten, Linear(256, 5),
exported in training mode by the package's exporter. torch 2.x writes the
noise as Div(Cast(Less(RandomUniformLike(zeros [N, 1, 1, 1]), 0.8)), 0.8)
(Debian's torch 1.13 cannot export it: it writes Bernoulli's out= form,
which its exporter refuses), so the file is kept in the repository (a few
KB).
"""
import importlib.util
import os
import sys

import torch
import torch.nn as nn
from torchvision.ops import StochasticDepth

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("memfit_onnx_export", os.path.join(HERE, "..", "..", "python", "memfit", "_onnx.py"))
_onnx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_onnx)


class DepthNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.sd = StochasticDepth(0.2, "row")
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.sd(self.conv(x)), 1))


def main():
    torch.manual_seed(0)
    path = os.path.join(HERE, "stochastic_depth.onnx")
    _onnx.export_training(DepthNet().train(), torch.zeros(2, 3, 8, 8), path, 17)
    print(f"{path}: {os.path.getsize(path)} bytes (torch {torch.__version__})")


if __name__ == "__main__":
    sys.exit(main())
