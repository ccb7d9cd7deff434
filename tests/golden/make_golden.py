#!/usr/bin/python3
"""Writes the PyTorch golden fixtures memfit's golden tests compare against.

    /usr/bin/python3 tests/golden/make_golden.py [--out DIR]

Needs torch and numpy (Debian: python3-torch python3-numpy) and Fashion-MNIST
(dataset-fashion-mnist). Writes DIR/convnet.safetensors and
DIR/resnet18.safetensors (DIR defaults to this script's folder). See README.md
in this folder for what the files hold.

Every random number (initial weights, dropout masks) comes from memfit's
counter-based generator, include/memfit/rng.hpp, reproduced here in numpy with
wrapping uint64 arithmetic, so memfit can rebuild the same initial weights from
names alone and the fixtures need not carry 11M ResNet-18 parameters.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 42
BATCH = 16
STEPS = 20
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4
RESNET_LR = 1e-4
DROPOUT_P = 0.4
BN_EPS, BN_MOMENTUM = 1e-5, 0.1
MEAN, STD = 0.2860, 0.3530
FULL_MAX = 65536      # gradients (and ConvNet init) stored whole up to this many elements
N_SAMPLE = 256        # elements sampled from larger tensors
DATA_DIR = "/usr/share/datasets/fashion-mnist"

M64 = (1 << 64) - 1

# ---------------------------------------------------------------- rng ----
# Mirrors include/memfit/rng.hpp exactly.


def splitmix64(x):
    """Scalar version on Python ints (mod 2^64)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def splitmix64_np(x):
    """Vector version on uint64 arrays (numpy wraps on overflow)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def name_hash(s):
    h = 0xCBF29CE484222325
    for c in s.encode("utf-8"):
        h ^= c
        h = (h * 0x100000001B3) & M64
    return h


def stream_key(seed, stream, counter):
    return splitmix64((splitmix64(seed ^ splitmix64(stream)) + counter) & M64)


def uniform01(key, n):
    """Elements 0..n-1 of stream `key` as float32 in [0, 1) (24 random bits)."""
    with np.errstate(over="ignore"):
        i = np.arange(n, dtype=np.uint64)
        bits = splitmix64_np(np.uint64(key) + i) >> np.uint64(40)
    return bits.astype(np.float32) * np.float32(1.0 / 16777216.0)


def uniform_sym(key, n, bound):
    """(2u - 1) * bound, all in float32 like memfit::rng::uniform_sym."""
    u = uniform01(key, n)
    return (np.float32(2.0) * u - np.float32(1.0)) * np.float32(bound)


def init_bound(fan_in):
    """1/sqrt(fan_in) computed in double, rounded once to float32, as memfit's
    builder does (static_cast<float>(1.0 / std::sqrt(double(fan_in)))). Note a
    float32 sqrt and divide differ by one ulp for fan_in 1152 and 4608."""
    return np.float32(1.0 / math.sqrt(fan_in))


def rng_self_test():
    # Reference values printed by a C++ program using include/memfit/rng.hpp.
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert name_hash("conv1.weight") == 0x69A29A2CEE47D254
    k = stream_key(SEED, name_hash("conv1.weight"), 0)
    assert k == 0xF32162C41E6F85AA, hex(k)
    ref = np.array(["0.171382487", "0.168664277", "0.594669998", "0.777018368"], dtype=np.float32)
    assert np.array_equal(uniform01(k, 4), ref), uniform01(k, 4)

# --------------------------------------------------------------- model ----


class CounterDropout(nn.Module):
    """memfit's dropout: keeps x[i] iff uniform01(stream_key(seed, name_hash(layer), step), i) >= p."""

    def __init__(self, p, layer_name):
        super().__init__()
        self.p, self.layer_name, self.step = p, layer_name, 0

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        key = stream_key(SEED, name_hash(self.layer_name), self.step)
        keep = uniform01(key, x.numel()) >= np.float32(self.p)
        scale = np.float32(1.0) / (np.float32(1.0) - np.float32(self.p))
        mask = torch.from_numpy(keep.astype(np.float32) * scale).reshape(x.shape).to(x.dtype)
        return x * mask


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(3136, 1024)
        self.dropout = CounterDropout(DROPOUT_P, "dropout")
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


def bn(c):
    return nn.BatchNorm2d(c, eps=BN_EPS, momentum=BN_MOMENTUM)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = bn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = bn(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), bn(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.downsample is None else self.downsample(x)
        return F.relu(out + sc)


class ResNet18(nn.Module):
    """CIFAR-style ResNet-18 (3x3 stem, no max-pool) on 1x28x28, torchvision names."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = bn(64)
        cin = 64
        for i, (c, s) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)]):
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, c, s), BasicBlock(c, c, 1)))
            cin = c
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def memfit_init(model):
    """Sets every parameter from memfit's counter-based init (seed SEED)."""
    with torch.no_grad():
        for mname, m in model.named_modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                if isinstance(m, nn.Conv2d):
                    kh, kw = m.kernel_size
                    fan_in = m.in_channels // m.groups * kh * kw
                else:
                    fan_in = m.in_features
                bound = init_bound(fan_in)
                for pname, p in m.named_parameters(recurse=False):
                    full = f"{mname}.{pname}"
                    key = stream_key(SEED, name_hash(full), 0)
                    v = uniform_sym(key, p.numel(), bound).reshape(tuple(p.shape))
                    p.copy_(torch.from_numpy(v))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.fill_(1.0)
                m.bias.fill_(0.0)
                m.running_mean.zero_()
                m.running_var.fill_(1.0)
                m.num_batches_tracked.zero_()


# ---------------------------------------------------------------- data ----


def read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got, n = struct.unpack(">II", raw[:8])
    if got != magic:
        raise SystemExit(f"{path}: bad IDX magic {got}, expected {magic}")
    if magic == 2051:
        rows, cols = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, rows, cols)
    return np.frombuffer(raw, dtype=np.uint8, offset=8)


def load_batch():
    img = os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz")
    lab = os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz")
    if not os.path.exists(img):
        raise SystemExit(f"Fashion-MNIST not found at {DATA_DIR}: install dataset-fashion-mnist")
    x = read_idx(img, 2051)[:BATCH].astype(np.float32) / np.float32(255.0)
    x = (x - np.float32(MEAN)) / np.float32(STD)
    y = read_idx(lab, 2049)[:BATCH].astype(np.int32)
    return np.ascontiguousarray(x.reshape(BATCH, 1, 28, 28), dtype=np.float32), y


# ---------------------------------------------------------- safetensors ----

ST_DTYPE = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
            np.dtype(np.int32): "I32", np.dtype(np.int64): "I64"}


def write_safetensors(path, tensors, metadata):
    """Minimal safetensors writer: header padded with spaces to 8 bytes."""
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": ST_DTYPE[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# -------------------------------------------------------------- record ----


def f64(v):
    return np.array([v], dtype=np.float64)


def sample_idx(numel):
    return np.array([k * numel // N_SAMPLE for k in range(N_SAMPLE)], dtype=np.int64)


def fingerprint(out, prefix, name, a, full_max):
    """Stores a whole tensor, or its norm, sum and 256 sampled elements."""
    a = a.detach().cpu().numpy() if torch.is_tensor(a) else a
    if a.size <= full_max:
        out[f"{prefix}.{name}"] = a.astype(np.float32)
        return
    flat = a.reshape(-1)
    idx = sample_idx(flat.size)
    out[f"{prefix}_norm.{name}"] = f64(np.linalg.norm(flat.astype(np.float64)))
    out[f"{prefix}_sum.{name}"] = f64(flat.astype(np.float64).sum())
    out[f"{prefix}_sample.{name}"] = flat[idx].astype(np.float32)
    out[f"{prefix}_sample_idx.{name}"] = idx


def run_model(name, model, x, y, init_full_max, final_bn, lr, dtype):
    torch.manual_seed(0)  # nothing should draw from torch's generator; fixed anyway
    memfit_init(model)
    model.train()
    out = {"input": x, "labels": y}

    for n, t in model.state_dict().items():
        if not t.is_floating_point():
            continue  # num_batches_tracked
        a = t.numpy()
        out[f"init_norm.{n}"] = f64(np.linalg.norm(a.astype(np.float64).reshape(-1)))
        if a.size <= init_full_max:
            out[f"init.{n}"] = a.copy()
        else:
            idx = sample_idx(a.size)
            out[f"init_sample.{n}"] = a.reshape(-1)[idx].copy()
            out[f"init_sample_idx.{n}"] = idx

    model.to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    xt, yt = torch.from_numpy(x).to(dtype), torch.from_numpy(y.astype(np.int64))
    losses = []
    for step in range(STEPS):
        for m in model.modules():
            if isinstance(m, CounterDropout):
                m.step = step
        opt.zero_grad(set_to_none=True)
        logits = model(xt)
        loss = F.cross_entropy(logits, yt)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            out["logits"] = logits.detach().numpy().astype(np.float32)
            out["loss"] = np.array([loss.item()], dtype=np.float32)
            for n, p in model.named_parameters():
                fingerprint(out, "grad", n, p.grad, FULL_MAX)
        opt.step()
    out["losses"] = np.array(losses, dtype=np.float32)

    sd = model.state_dict()
    for bn_name in final_bn:
        for stat in ("running_mean", "running_var"):
            out[f"final.{bn_name}.{stat}"] = sd[f"{bn_name}.{stat}"].numpy().astype(np.float32)
    fc_w = [n for n, _ in model.named_parameters() if n.endswith(".weight")][-1]
    w = sd[fc_w].numpy()
    out[f"final_norm.{fc_w}"] = f64(np.linalg.norm(w.astype(np.float64).reshape(-1)))
    out[f"final.{fc_w}"] = w.astype(np.float32)
    return out, losses


def fp64_loss_check(x, y):
    """Sanity check on the fixture itself: step-0 ConvNet loss in fp32 vs fp64."""
    losses = []
    for dt in (torch.float32, torch.float64):
        m = ConvNet()
        memfit_init(m)
        m = m.to(dt).train()
        m.dropout.step = 0
        with torch.no_grad():
            losses.append(F.cross_entropy(m(torch.from_numpy(x).to(dt)),
                                          torch.from_numpy(y.astype(np.int64))).item())
    diff = abs(losses[0] - losses[1])
    print(f"convnet step-0 loss fp32 {losses[0]:.9f} fp64 {losses[1]:.9f} |diff| {diff:.3e}")
    assert diff < 1e-5, f"fp32 and fp64 step-0 losses differ by {diff}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rng_self_test()
    x, y = load_batch()
    fp64_loss_check(x, y)

    common = {
        "generator": "tests/golden/make_golden.py",
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "seed": str(SEED), "batch": str(BATCH), "steps": str(STEPS),
        "momentum": repr(MOMENTUM), "weight_decay": repr(WEIGHT_DECAY),
        "optimizer": "torch.optim.SGD (nesterov=False, dampening=0, decay on all parameters)",
        "loss": "cross_entropy mean",
        "threads": "1",
        "grad_full_max_numel": str(FULL_MAX),
        "sample_count": str(N_SAMPLE),
        "data": "fashion-mnist train[0:16], (x/255 - 0.2860)/0.3530 float32",
    }
    # ResNet-18 keeps whole init tensors only up to 16384 elements (the four
    # layer1 convs have 36864 each) so the file stays near 1 MB; the others get
    # norm + 256 samples, and memfit rebuilds them from the generator anyway.
    # ResNet-18 memorising one batch of 16 is chaotic at lr 0.01: PyTorch's own
    # fp32 trajectories with 1 and 2 threads differ by 0.4% at step 3 and its
    # fp32 and fp64 ones by 0.3% at step 4. At lr 1e-4 fp32 stays within 3e-4
    # of fp64, so its trajectory is computed in float64 (the truth, stored as
    # float32) at that rate; the ConvNet's fp32 run at lr 0.01 is stable.
    models = [
        ("convnet", ConvNet(), FULL_MAX, [], LR, torch.float32,
         {"model": "convnet", "dropout_p": repr(DROPOUT_P), "dropout_layer": "dropout"}),
        ("resnet18", ResNet18(), 16384, ["bn1", "layer4.1.bn2"], RESNET_LR, torch.float64,
         {"model": "resnet18-cifar-28", "bn_eps": repr(BN_EPS), "bn_momentum": repr(BN_MOMENTUM)}),
    ]
    for name, model, init_full_max, final_bn, lr, dtype, extra in models:
        out, losses = run_model(name, model, x, y, init_full_max, final_bn, lr, dtype)
        meta = dict(common, init_full_max_numel=str(init_full_max), lr=repr(lr),
                    compute_dtype=str(dtype).replace("torch.", ""), **extra)
        path = os.path.join(args.out, f"{name}.safetensors")
        write_safetensors(path, out, meta)
        print(f"{name}: step-0 loss {losses[0]:.6f}, loss[0] {losses[0]:.6f} -> loss[{STEPS - 1}] "
              f"{losses[-1]:.6f}; {len(out)} tensors, {os.path.getsize(path)} bytes -> {path}")


if __name__ == "__main__":
    sys.exit(main())
