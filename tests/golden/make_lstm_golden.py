#!/usr/bin/python3
"""Writes the PyTorch golden fixture of memfit's LSTM (tests/test_lstm.cpp):
lstm.safetensors.

    /work/main/bench/.venv/bin/python tests/golden/make_lstm_golden.py [--out DIR]

Needs torch and numpy. Deterministic (seeded; one thread). Two parts:

- `op.*`: one nn.LSTM layer (batch_first) over x [N=3, T=5, I=4], hidden
  H=3, lengths [5, 1, 3] as a packed sequence (pack_padded_sequence,
  enforce_sorted=False; y padded with zeros), with fixed weights. Objective
  sum(y*ry) + sum(h_n*rh) + sum(c_n*rc); gradients of x and every weight.
- `clf.*`: memfit's `lstm-classifier` (embedding(11, 64) -> LSTM(32) ->
  h_n -> linear(3)) on tokens [N=4, T=6] with lengths [6, 1, 4, 3], labels
  [4]; weights from PyTorch's own init (seeded), stored as F32; logits,
  mean cross-entropy, every parameter gradient at step 0, and the losses of
  4 steps of SGD(lr 0.1, momentum 0.9) on the same batch.

Inputs and weights are rounded to float32 (memfit sees the same values);
everything PyTorch computes is in float64 and stored as F64. Integers are I32.
"""
import argparse
import os
import sys

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_safetensors  # noqa: E402

SEED = 1212
N, T, I, H = 3, 5, 4, 3
OP_LENGTHS = [5, 1, 3]
VOCAB, CN, CT, EMBED, HIDDEN, CLASSES = 11, 4, 6, 64, 32, 3
CLF_LENGTHS = [6, 1, 4, 3]
LR, MOMENTUM, STEPS = 0.1, 0.9, 4


def run_lstm(lstm, x, lengths):
    packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    y, (h, c) = lstm(packed)
    y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
    return y, h, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    out = {}
    meta = {"torch": torch.__version__, "numpy": np.__version__, "seed": str(SEED)}

    def f32_exact(shape, lo, hi):
        return rng.uniform(lo, hi, shape).astype(np.float32).astype(np.float64)

    # ---- one layer with lengths
    lstm = torch.nn.LSTM(I, H, batch_first=True).double()
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            p.copy_(torch.tensor(f32_exact(tuple(p.shape), -0.8, 0.8)))
            out[f"op.{name}"] = p.detach().numpy().copy()
    x = torch.tensor(f32_exact((N, T, I), -1.0, 1.0), requires_grad=True)
    ry, rh, rc = f32_exact((N, T, H), -1, 1), f32_exact((N, H), -1, 1), f32_exact((N, H), -1, 1)
    y, h, c = run_lstm(lstm, x, OP_LENGTHS)
    obj = (y * torch.tensor(ry)).sum() + (h[0] * torch.tensor(rh)).sum() + (c[0] * torch.tensor(rc)).sum()
    obj.backward()
    out.update({"op.x": x.detach().numpy(), "op.lengths": np.array(OP_LENGTHS, dtype=np.int32), "op.ry": ry,
                "op.rh": rh, "op.rc": rc, "op.y": y.detach().numpy(), "op.h": h[0].detach().numpy(),
                "op.c": c[0].detach().numpy(), "op.dx": x.grad.numpy()})
    for name, p in lstm.named_parameters():
        out[f"op.d.{name}"] = p.grad.numpy()

    # ---- lstm-classifier
    class Clf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(VOCAB, EMBED)
            self.lstm = torch.nn.LSTM(EMBED, HIDDEN, batch_first=True)
            self.fc = torch.nn.Linear(HIDDEN, CLASSES)

        def forward(self, tokens, lengths):
            _, h, _ = run_lstm(self.lstm, self.embedding(tokens), lengths)
            return self.fc(h[-1])

    model = Clf()  # PyTorch's init in float32
    for name, p in model.state_dict().items():
        out[f"clf.init.{name}"] = p.numpy().astype(np.float32).copy()
    model = model.double()
    tokens = rng.integers(0, VOCAB, (CN, CT)).astype(np.int64)
    labels = rng.integers(0, CLASSES, (CN,)).astype(np.int64)
    out.update({"clf.tokens": tokens.astype(np.int32), "clf.lengths": np.array(CLF_LENGTHS, dtype=np.int32),
                "clf.labels": labels.astype(np.int32)})
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        logits = model(torch.tensor(tokens), CLF_LENGTHS)
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels))
        loss.backward()
        if step == 0:
            out["clf.logits"] = logits.detach().numpy()
            out["clf.loss"] = np.array([loss.item()], dtype=np.float64)
            for name, p in model.named_parameters():
                out[f"clf.grad.{name}"] = p.grad.numpy().copy()
        losses.append(loss.item())
        opt.step()
    out["clf.losses"] = np.array(losses, dtype=np.float64)
    meta.update({"lr": repr(LR), "momentum": repr(MOMENTUM)})

    path = os.path.join(args.out, "lstm.safetensors")
    write_safetensors(path, out, meta)
    print(f"{len(out)} tensors, {os.path.getsize(path)} bytes -> {path}")


if __name__ == "__main__":
    sys.exit(main())
