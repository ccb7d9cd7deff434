#!/usr/bin/python3
"""Writes the PyTorch golden fixture of memfit's BERT model: bert_tiny.safetensors.

    /work/main/bench/.venv/bin/python tests/golden/make_bert_golden.py [--out DIR]

Needs torch (>= 1.12) and numpy; not the transformers library. The model is
Hugging Face's BertModel written out in plain PyTorch (`encoder` below: the
post-LN encoder, BertModel's additive attention mask, GELU erf, the
word table's padding_idx 0), with BertModel's parameter names and nn.Linear
[out, in] layouts, at memfit's bert-tiny size (2 layers, hidden 32, 2 heads,
intermediate 64, 64 positions, 2 token types, eps 1e-12) and a vocabulary
of 24, then sentence-transformers' masked mean pooling and a Linear
classifier (3 classes). Dropout 0.

The batch: B 4, T 12, real lengths 12, 9, 5 and 1 (the last sequence is
one token and 11 of padding, id 0, attention mask 0), token types 1 on
parts of the first two. Initial weights are drawn here with numpy's PCG64
(seeded) and stored whole as F32; PyTorch computes in float64:

- `logits`, `loss`, `grad.<p>` (every parameter; stored F32, rounded once
  from float64, to keep the fixture small: 2^-24 relative, far under the
  test's 1e-3) at step 0, and `losses`, the losses of 20 AdamW steps (lr
  1e-3, betas 0.9 / 0.999, eps 1e-8, weight decay 0.1 on the 2-d parameters).
- `cls.*`: the same encoder weights with the [CLS] head (BertModel's pooler
  dense + tanh, weights `init.pooler.dense.*`, then the classifier):
  `cls.logits`, `cls.loss` and the step-0 gradients of the pooler, the
  classifier, the word table and layer 0's query weight.
- `nomask.logits`: the mean-pooled model's logits with neither an attention
  mask nor token types (every position attends; types 0).

Byte-identical on rerun. tests/test_bert_golden.cpp compares.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_common import adamw_with_decay_groups, start  # noqa: E402
from make_golden import write_safetensors  # noqa: E402

SEED = 31
L, C, H, I, P, TV, EPS = 2, 32, 2, 64, 64, 2, 1e-12
V, CLASSES = 24, 3
B, T = 4, 12
LENGTHS = [12, 9, 5, 1]
STEPS, LR, WD = 20, 1e-3, 0.1


def encoder(p, tok, mask, types, layers, heads, eps):
    """BertModel's last hidden state [B, T, C] in p's dtype. p: the
    state_dict by BertModel's names; mask [B, T] (1 real, 0 padding) or
    None; types [B, T] or None (zeros)."""
    Bn, Tn = tok.shape
    Cn = p["embeddings.word_embeddings.weight"].shape[1]
    D = Cn // heads
    if types is None:
        types = torch.zeros_like(tok)
    h = (F.embedding(tok, p["embeddings.word_embeddings.weight"], padding_idx=0)
         + F.embedding(types, p["embeddings.token_type_embeddings.weight"])
         + p["embeddings.position_embeddings.weight"][:Tn])
    h = F.layer_norm(h, (Cn,), p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"], eps)
    # BertModel's extended mask: (1 - mask) * finfo.min added to the scores.
    add_mask = 0.0 if mask is None else (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min

    for l in range(layers):
        q_ = f"encoder.layer.{l}."

        def lin(x, name):
            return x @ p[q_ + name + ".weight"].t() + p[q_ + name + ".bias"]

        def split(x):
            return x.view(Bn, Tn, heads, D).transpose(1, 2)

        q, k, v = (split(lin(h, "attention.self." + n)) for n in ("query", "key", "value"))
        s = q @ k.transpose(-2, -1) / math.sqrt(D) + add_mask
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(Bn, Tn, Cn)
        h = F.layer_norm(lin(a, "attention.output.dense") + h, (Cn,), p[q_ + "attention.output.LayerNorm.weight"],
                         p[q_ + "attention.output.LayerNorm.bias"], eps)
        m = F.gelu(lin(h, "intermediate.dense"))
        h = F.layer_norm(lin(m, "output.dense") + h, (Cn,), p[q_ + "output.LayerNorm.weight"],
                         p[q_ + "output.LayerNorm.bias"], eps)
    return h


def mean_pool(h, mask):
    """sentence-transformers' Pooling(mean): sum over real tokens / their count."""
    if mask is None:
        return h.mean(dim=1)
    m = mask[..., None].to(h.dtype)
    return (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)


def cls_pool(p, h):
    """BertModel's pooler: dense + tanh of the first token."""
    return torch.tanh(h[:, 0] @ p["pooler.dense.weight"].t() + p["pooler.dense.bias"])


def init_weights(rng):
    """N(0, std) weights rounded to f32; random biases and layer-norm gains
    near 1 rather than BERT's zeros and ones, so that each one's role in
    the forward pass and its gradient are exercised. Weights N(0, 0.1)
    (BERT's 0.02 would leave attention almost uniform at this width)."""
    w = {}

    def normal(shape, std, mean=0.0):
        return (mean + rng.standard_normal(shape) * std).astype(np.float32)

    def norm(name, n):
        w[name + ".weight"] = normal((n,), 0.1, 1.0)
        w[name + ".bias"] = normal((n,), 0.05)

    def linear(name, out, inp):
        w[name + ".weight"] = normal((out, inp), 0.1)
        w[name + ".bias"] = normal((out,), 0.05)

    w["embeddings.word_embeddings.weight"] = normal((V, C), 0.5)
    w["embeddings.position_embeddings.weight"] = normal((P, C), 0.5)
    w["embeddings.token_type_embeddings.weight"] = normal((TV, C), 0.5)
    norm("embeddings.LayerNorm", C)
    for l in range(L):
        q_ = f"encoder.layer.{l}."
        for n in ("query", "key", "value"):
            linear(q_ + "attention.self." + n, C, C)
        linear(q_ + "attention.output.dense", C, C)
        norm(q_ + "attention.output.LayerNorm", C)
        linear(q_ + "intermediate.dense", I, C)
        linear(q_ + "output.dense", C, I)
        norm(q_ + "output.LayerNorm", C)
    linear("classifier", CLASSES, C)
    return w


def main():
    args, rng, meta = start(SEED)
    w = init_weights(rng)
    pooler = {"pooler.dense.weight": (rng.standard_normal((C, C)) * 0.1).astype(np.float32),
              "pooler.dense.bias": (rng.standard_normal(C) * 0.05).astype(np.float32)}
    mask = np.zeros((B, T), np.int64)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    tokens = rng.integers(1, V, size=(B, T)) * mask  # padding is token 0
    types = np.zeros((B, T), np.int64)
    types[0, 6:] = 1
    types[1, 4:9] = 1
    labels = np.array([0, 2, 1, 2], np.int64)

    tok, msk, typ, lab = (torch.tensor(a) for a in (tokens, mask, types, labels))
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}

    def logits_of(p, pooled):
        return pooled @ p["classifier.weight"].t() + p["classifier.bias"]

    def mean_logits(p, m=msk, t=typ):
        return logits_of(p, mean_pool(encoder(p, tok, m, t, L, H, EPS), m))

    out = {("init." + k): v for k, v in w.items()}
    out.update({("init." + k): v for k, v in pooler.items()})
    out.update({"tokens": tokens.astype(np.int32), "attention_mask": mask.astype(np.int32),
                "token_type_ids": types.astype(np.int32), "labels": labels.astype(np.int32)})
    logits = mean_logits(p)
    loss = F.cross_entropy(logits, lab)
    loss.backward()
    out["logits"] = logits.detach().numpy()
    out["loss"] = np.array([loss.item()])
    for k, v in p.items():
        out["grad." + k] = v.grad.numpy().astype(np.float32)
    with torch.no_grad():
        out["nomask.logits"] = mean_logits(p, None, None).numpy()

    # The [CLS] head on the same weights.
    pc = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in {**w, **pooler}.items()}
    cls_logits = logits_of(pc, cls_pool(pc, encoder(pc, tok, msk, typ, L, H, EPS)))
    cls_loss = F.cross_entropy(cls_logits, lab)
    cls_loss.backward()
    out["cls.logits"] = cls_logits.detach().numpy()
    out["cls.loss"] = np.array([cls_loss.item()])
    for k in ("pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias",
              "embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight"):
        out["cls.grad." + k] = pc[k].grad.numpy().astype(np.float32)

    opt = adamw_with_decay_groups(list(p.values()), LR, WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(mean_logits(p), lab)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    out["losses"] = np.array(losses)
    meta.update({"lr": str(LR), "weight_decay": str(WD), "layer_norm_eps": str(EPS), "classes": str(CLASSES),
                 "vocab": str(V)})
    path = os.path.join(args.out, "bert_tiny.safetensors")
    write_safetensors(path, out, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes): loss {losses[0]:.6f} -> {losses[-1]:.6f}, "
          f"cls loss {cls_loss.item():.6f}")


if __name__ == "__main__":
    main()
