#!/usr/bin/python3
"""Hugging Face models as users build them, exported for memfit's ONNX
tests, with PyTorch's numbers for one batch.

    PYTHONPATH=<a transformers install> /usr/bin/python3 tests/golden/make_hf_golden.py [--out tests/golden]

Writes hf_bert.onnx, hf_distilbert.onnx and hf_gpt2.onnx and, beside each,
a .safetensors fixture: a `transformers` BertForSequenceClassification,
DistilBertForSequenceClassification and GPT2LMHeadModel built from a small
config (no download; seed 0), exported by the package's own export
(python/memfit/_onnx.py: TorchScript, training mode, opset 17, GPT-2's
key/value cache off) and called as users call them, model(input_ids=x),
without an attention mask. Each fixture holds the batch (input, labels or
next-token targets), PyTorch's logits, loss and parameter gradients in
float64 from the float32 weights, and the losses of 5 plain SGD steps
(lr 0.5, no momentum) on that batch: what test_onnx's OnnxHuggingFace
tests reproduce through the files.

Dropout is 0 in the configs: PyTorch's masks come from its own generator,
memfit's from its counter-based one. Token ids start at 1: BERT's and
DistilBERT's word embeddings have padding_idx 0, whose row PyTorch never
updates and whose padding_idx the ONNX file does not carry.

transformers is not a test-time dependency: the files are kept in the
repository (about 150 KB each). transformers 4.40 and Debian's torch 1.13
made them.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as golden  # noqa: E402
from export_onnx import _onnx, sgd_reference  # noqa: E402  (the package's exporter, loaded by path)

VOCAB, HIDDEN, LAYERS, HEADS, FF, POSITIONS, CLASSES = 64, 32, 2, 2, 64, 16, 3
B, T = 4, 12
LR, STEPS = 0.5, 5


def build(name):
    import transformers as tf
    torch.manual_seed(0)
    if name == "hf_bert":
        return tf.BertForSequenceClassification(tf.BertConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=FF, max_position_embeddings=POSITIONS, num_labels=CLASSES,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    if name == "hf_distilbert":
        return tf.DistilBertForSequenceClassification(tf.DistilBertConfig(
            vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FF,
            max_position_embeddings=POSITIONS, num_labels=CLASSES, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0))
    if name == "hf_gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(
            vocab_size=VOCAB, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=FF,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    raise ValueError(name)


def loss_of(logits, y, lm):
    if lm:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy(logits, y)


def make(name, out_dir):
    import transformers
    lm = name == "hf_gpt2"
    model = build(name).train()
    path = os.path.join(out_dir, f"{name}.onnx")
    _onnx.export_training(model, torch.zeros(B, T, dtype=torch.long), path, 17, input_name="tokens")
    rng = np.random.default_rng(3)
    x = rng.integers(1, VOCAB, (B, T)).astype(np.int32)
    if lm:
        y = np.concatenate([x[:, 1:], rng.integers(1, VOCAB, (B, 1))], axis=1).astype(np.int32)
    else:
        y = np.array([2, 0, 1, 2], dtype=np.int32)
    out = sgd_reference(model, x, y, lambda m, xt: m(input_ids=xt).logits,
                        lambda logits, yt: loss_of(logits, yt, lm), LR, STEPS)
    golden.write_safetensors(os.path.join(out_dir, f"{name}.safetensors"), out,
                             {"generator": "tests/golden/make_hf_golden.py", "torch_version": torch.__version__,
                              "transformers_version": transformers.__version__, "lr": repr(LR)})
    print(f"{name}: {os.path.getsize(path)} bytes -> {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in ("hf_bert", "hf_distilbert", "hf_gpt2"):
        make(name, args.out)


if __name__ == "__main__":
    sys.exit(main())
