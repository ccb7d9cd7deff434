#!/usr/bin/python3
"""PyTorch's side of bench/run.py: times training steps of the same model on
random data and prints one JSON line, as build/bench/step_bench does for
memfit.

    /usr/bin/python3 bench/torch_step.py --model resnet18 --batch 64 --steps 5 --threads 2 [--precision bf16]

Models are tests/golden/make_golden.py's (ConvNet, CIFAR-style ResNet-18 on
1x28x28), except that the ConvNet's dropout is torch's own nn.Dropout(0.4)
(the golden file's counter-based dropout builds its mask in numpy). SGD with
lr 0.01, momentum 0.9, weight decay 5e-4; gradients set to None each step.
bf16 means torch.autocast("cpu", dtype=torch.bfloat16) around forward and
loss. peak_rss_bytes is this process's VmHWM at the end. --serve: as
step_bench --serve, so that bench/run.py can interleave the two frameworks'
steps.
"""
import argparse
import json
import os
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_golden import ConvNet, ResNet18  # noqa: E402


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def onednn_version():
    m = re.search(r"MKL-DNN v([0-9.]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def blas_info():
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def make_model(name):
    if name == "convnet":
        m = ConvNet()
        m.dropout = nn.Dropout(0.4)
        return m
    if name == "resnet18":
        return ResNet18()
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="convnet")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--serve", action="store_true",
                    help="after warm-up print 'ready', then run one step per 'step' line on stdin and print its seconds")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = make_model(a.model)
    model.train()
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    bf16 = a.precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    times = []
    loss = torch.zeros(())

    def timed():
        nonlocal loss
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)

    if a.serve:
        print("ready", flush=True)
        for line in sys.stdin:
            if not line.startswith("step"):
                break
            timed()
            print(f"{times[-1]:.6f}", flush=True)
    else:
        for _ in range(a.steps):
            timed()
    if not times:
        return
    med = sorted(times)[len(times) // 2]
    print(json.dumps({
        "model": a.model, "batch": a.batch, "precision": a.precision, "supported": True,
        "threads": torch.get_num_threads(), "median_step_s": med,
        "images_per_s": a.batch / med, "peak_rss_bytes": vm_hwm(), "loss": float(loss.detach()), "steps": len(times),
        "torch": torch.__version__, "onednn": onednn_version(), "blas": blas_info(), "step_s": times,
    }))


if __name__ == "__main__":
    main()
