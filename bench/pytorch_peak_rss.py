#!/usr/bin/python3
"""Peak resident set size of a fresh PyTorch process that does what one
`memfit train` run does: the same model (ConvNet or ResNet-18 for 1x28x28
inputs), the same batch, SGD (momentum 0.9, weight decay 5e-4), N steps on
a Fashion-MNIST subset, then an evaluation pass and a checkpoint (weights
and optimizer state) written to disk. The dataset is held in memory as
uint8, as memfit holds it.

Run with Debian's interpreter, which has torch:  /usr/bin/python3 bench/pytorch_peak_rss.py --model resnet18 --batch 64
Prints one JSON object; peak_rss_bytes is VmHWM read from /proc at the end.
"""
import argparse
import gzip
import json
import os
import platform
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims).copy()


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise SystemExit(f"{stem} not found in {data_dir}")


class ConvNet(nn.Module):
    # conv5x5(32, pad 2)-relu-maxpool2-conv5x5(64, pad 2)-relu-maxpool2-fc1024-relu-dropout(0.4)-fc
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 1024)
        self.dropout = nn.Dropout(0.4)
        self.fc2 = nn.Linear(1024, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(F.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x if self.downsample is None else self.downsample(x)
        return F.relu(y + s)


class ResNet18(nn.Module):
    # CIFAR form: 3x3 stem at stride 1, no stem pool, [2, 2, 2, 2] basic blocks.
    def __init__(self, classes=10, channels=1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for i, w in enumerate((64, 128, 256, 512)):
            layers.append(nn.Sequential(Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("convnet", "resnet18"), default="convnet")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--subset", type=int, default=2000)
    ap.add_argument("--test-subset", type=int, default=512)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default="/tmp/pytorch-peak-rss")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(42)
    rss_import = status_bytes("VmRSS")
    t0 = time.time()
    train_x = read_idx(find(a.data, "train-images-idx3-ubyte"))
    train_y = read_idx(find(a.data, "train-labels-idx1-ubyte")).astype(np.int64)
    test_x = read_idx(find(a.data, "t10k-images-idx3-ubyte"))
    test_y = read_idx(find(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64)
    rng = np.random.default_rng(42)
    subset = rng.choice(len(train_x), size=min(a.subset, len(train_x)), replace=False)
    test_idx = np.arange(min(a.test_subset, len(test_x)))

    def batch(images, labels, idx):
        x = torch.from_numpy(images[idx]).float().div_(255.0).sub_(0.2860).div_(0.3530).unsqueeze_(1)
        return x, torch.from_numpy(labels[idx])

    model = ConvNet() if a.model == "convnet" else ResNet18()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    model.train()
    order = rng.permutation(subset)
    per_epoch = len(order) // a.batch
    loss = None
    for step in range(a.steps):
        if step % per_epoch == 0 and step:
            order = rng.permutation(subset)
        i = step % per_epoch
        x, y = batch(train_x, train_y, order[i * a.batch:(i + 1) * a.batch])
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, len(test_idx), a.batch):
            x, y = batch(test_x, test_y, test_idx[s:s + a.batch])
            correct += int((model(x).argmax(1) == y).sum())
    os.makedirs(a.out, exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, os.path.join(a.out, "checkpoint.pt"))
    print(json.dumps({
        "model": a.model, "batch": a.batch, "steps": a.steps, "threads": a.threads,
        "final_train_loss": float(loss), "test_accuracy": correct / len(test_idx),
        "seconds": round(time.time() - t0, 2),
        "rss_after_import_bytes": rss_import,
        "peak_rss_bytes": status_bytes("VmHWM"),
        "torch": torch.__version__, "python": platform.python_version(),
    }))


if __name__ == "__main__":
    main()
