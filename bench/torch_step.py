#!/usr/bin/python3
"""PyTorch's side of bench/run.py: times training steps of the same model on
random data and prints one JSON line, as build/bench/step_bench does for
memfit.

    /usr/bin/python3 bench/torch_step.py --model resnet18 --batch 64 --steps 5 --threads 2 [--precision bf16]
    bench/.venv/bin/python bench/torch_step.py --model gpt-char --batch 16 --steps 3 --warmup 1

The CNNs are tests/golden/make_golden.py's (ConvNet, CIFAR-style ResNet-18
on 1x28x28), except that the ConvNet's dropout is torch's own
nn.Dropout(0.4) (the golden file's counter-based dropout builds its mask in
numpy); SGD with lr 0.01, momentum 0.9, weight decay 5e-4. The text models
are bench/torch_text.py's, with step_bench's data and optimizers:
gpt-char on tokens and targets [T] (--seq, default 256) of --vocab values
(default 65), AdamW lr 1e-3, betas 0.9/0.999, weight decay 0.1 on the 2-d
weights only; lstm-classifier on tokens [T] (default 128) of --vocab values
(default 5000) and --classes labels (default 4), Adam lr 1e-3. Inputs are
uniform random; gradients set to None each step. bf16 means
torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss.
images_per_s counts samples (sequences for the text models), tokens_per_s
batch x T for them. peak_rss_bytes is this process's VmHWM at the end.
--serve: as step_bench --serve, so that bench/run.py can interleave the two
frameworks' steps.
--device cuda: the model, data and steps on the GPU, each step timed to its
end (torch.cuda.synchronize), in fp32 with TF32 off in cuBLAS and cuDNN as
memfit computes (--tf32 allows it, PyTorch's default for convolutions);
the JSON adds the GPU's name and torch.cuda.max_memory_allocated() and
max_memory_reserved().
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "golden"))
sys.path.insert(0, HERE)
from make_golden import ConvNet, ResNet18  # noqa: E402
from torch_text import GPT, LSTMClassifier, adamw_groups  # noqa: E402


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def onednn_version():
    m = re.search(r"MKL-DNN v([0-9.]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def cpu_capability():
    """The vector ISA PyTorch's own CPU kernels dispatch to (AVX512, AVX2, ...;
    ATEN_CPU_CAPABILITY lowers it)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        return "unknown"


def blas_info():
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


TEXT = {"gpt-char": (256, 65), "gpt2": (256, 50257), "lstm-classifier": (128, 5000)}  # default T, vocabulary
# The GPTs as memfit's zoo has them (models/gpt.cpp): layers, heads, width,
# block size, dropout (--dropout replaces it, as memfit's --dropout P does).
GPTS = {"gpt-char": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.2),
        "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, dropout=0.0)}


def make_case(a, device="cpu"):
    """The model, its inputs and targets, and its optimizer for --model, on
    the device."""
    if a.model in ("convnet", "resnet18"):
        m = ConvNet() if a.model == "convnet" else ResNet18()
        if a.model == "convnet":
            m.dropout = nn.Dropout(0.4)
        m = m.to(device)
        x = torch.rand(a.batch, 1, 28, 28).to(device)
        y = torch.randint(0, a.classes or 10, (a.batch,)).to(device)
        return m, x, y, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    if a.model not in TEXT:
        raise SystemExit(f"unknown model {a.model}")
    T, V = a.seq or TEXT[a.model][0], a.vocab or TEXT[a.model][1]
    x = torch.randint(0, V, (a.batch, T)).to(device)
    if a.model in GPTS:
        cfg = dict(GPTS[a.model])
        if a.dropout is not None:
            cfg["dropout"] = a.dropout
        m = GPT(vocab=V, **cfg).to(device)
        y = torch.randint(0, V, (a.batch, T)).to(device)
        return m, x, y, torch.optim.AdamW(adamw_groups(m, 0.1), lr=1e-3, betas=(0.9, 0.999))
    m = LSTMClassifier(V, a.classes or 4).to(device)
    y = torch.randint(0, a.classes or 4, (a.batch,)).to(device)
    return m, x, y, torch.optim.Adam(m.parameters(), lr=1e-3)


def case_arguments(model="convnet", batch=64, steps=10, warmup=2, threads=2):
    """The options make_case and the timing loop read (this script's and
    torch_ddp.py's), with these defaults."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=model)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--seq", type=int, default=0, help="text models: tokens per sequence (default: the model's)")
    ap.add_argument("--vocab", type=int, default=0, help="text models: the token values (default: the model's)")
    ap.add_argument("--classes", type=int, default=0, help="classifiers: label values (default 10, the LSTM's 4)")
    ap.add_argument("--dropout", type=float, default=None, help="GPTs: the dropout probability (default: the model's)")
    return ap


def main():
    ap = case_arguments()
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--tf32", action="store_true", help="cuda: let cuBLAS and cuDNN use TF32 (PyTorch's convolution default)")
    ap.add_argument("--serve", action="store_true",
                    help="after warm-up print 'ready', then run one step per 'step' line on stdin and print its seconds")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    model, x, y, opt = make_case(a, a.device)
    model.train()
    bf16 = a.precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            # A language model's logits [B, T, V] against targets [B, T]: the mean over all tokens.
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
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
    r = {
        "model": a.model, "batch": a.batch, "precision": a.precision, "supported": True,
        "threads": torch.get_num_threads(), "median_step_s": med,
        "images_per_s": a.batch / med, "peak_rss_bytes": vm_hwm(), "loss": float(loss.detach()), "steps": len(times),
        "torch": torch.__version__, "onednn": onednn_version(), "blas": blas_info(), "step_s": times,
        "cpu_capability": cpu_capability(),
    }
    if cuda:
        r.update(device=torch.cuda.get_device_name(), tf32=a.tf32,
                 max_memory_allocated=torch.cuda.max_memory_allocated(),
                 max_memory_reserved=torch.cuda.max_memory_reserved())
    if a.model in TEXT:
        r.update(seq_len=x.shape[1], vocab=a.vocab or TEXT[a.model][1], tokens_per_s=x.numel() / med)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
