#!/usr/bin/python3
"""Models users bring, trained by memfit and by PyTorch side by side.

For torchvision's ResNet-18, MobileNetV2 and EfficientNet-B0 (weights=None,
10 classes; EfficientNet's stochastic depth needs torch 2.x's export) at
64 x 64 and 224 x 224 and a Hugging Face BertForSequenceClassification
(built from a config: 2 layers of width 128, 2 heads, 4 classes, 128
tokens), each is exported by the package's exporter and trained

  - by memfit: `memfit train --model M.onnx ... --json` for --steps steps on a
    generated image folder (or labelled texts), Adam lr 1e-3: its warm
    images/s (after the first step) and its peak RSS against its plan;
  - by PyTorch eager (the same module, fresh process): the same batch,
    threads and optimizer on random data, the median step after --warmup,
    and the process's peak RSS (VmHWM).

Run with the bench's PyTorch (make bench-venv; with torchvision and
transformers 4.40):

    bench/.venv/bin/python bench/imported.py --binary build/memfit --threads 2

Prints a Markdown table and, with --jsonl, one row per model. Runs the two
frameworks one after the other, never together.
"""
import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from machine import cpu_name  # noqa: E402
from onnx_coverage import load_exporter, make_images  # noqa: E402

CASES = [
    ("resnet18", 64, 32), ("mobilenet_v2", 64, 32), ("efficientnet_b0", 64, 32),
    ("resnet18", 224, 16), ("mobilenet_v2", 224, 16), ("efficientnet_b0", 224, 16),
    ("hf-bert", 128, 32),
]


def build(name):
    import torch
    torch.manual_seed(0)
    if name == "hf-bert":
        import transformers
        return transformers.BertForSequenceClassification(transformers.BertConfig(
            vocab_size=128, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
            num_labels=4))
    import torchvision
    return torchvision.models.get_model(name, weights=None, num_classes=10)


def make_texts(folder, count, length):
    rng = random.Random(0)
    os.makedirs(folder, exist_ok=True)
    for split, n in (("train", count), ("test", 8)):
        with open(os.path.join(folder, f"{split}.jsonl"), "w") as f:
            for i in range(n):
                label = i % 4
                text = "".join(rng.choice("abcdefgh ") for _ in range(length - 1)) + "wxyz"[label]
                f.write(json.dumps({"text": text, "label": f"c{label}"}) + "\n")


TORCH_SIDE = r'''
import json, statistics, sys, time, torch
sys.path.insert(0, {here!r})
import imported
torch.set_num_threads({threads})
name, size, batch, steps, warmup = {name!r}, {size}, {batch}, {steps}, {warmup}
model = imported.build(name).train()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if name == "hf-bert":
    x = torch.randint(1, 40, (batch, size)); y = torch.randint(0, 4, (batch,))
    mask = torch.ones_like(x)
    fwd = lambda: model(input_ids=x, attention_mask=mask).logits
else:
    x = torch.randn(batch, 3, size, size); y = torch.randint(0, 10, (batch,))
    fwd = lambda: model(x)
times = []
for s in range(warmup + steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(fwd(), y)
    loss.backward()
    opt.step()
    if s >= warmup:
        times.append(time.perf_counter() - t0)
with open("/proc/self/status") as f:
    hwm = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM")][0]
print(json.dumps({{"median_step_s": statistics.median(times), "peak_rss_bytes": hwm, "torch": torch.__version__}}))
'''


def run_memfit(a, name, size, batch, path, work):
    data = os.path.join(work, f"data-{name}-{size}")
    if not os.path.isdir(data):
        if name == "hf-bert":
            make_texts(data, batch * 4, size)
        else:
            make_images(data, size, max(1, batch // 10 + 1))
    cmd = [a.binary, "train", "--model", path, "--data", data, "--batch", str(batch), "--steps", str(a.steps),
           "--eval-every", "0", "--optimizer", "adam", "--lr", "1e-3", "--threads", str(a.threads), "--json",
           "--out", os.path.join(work, f"run-{name}-{size}")]
    if name != "hf-bert":
        cmd += ["--image-size", str(size)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if r.returncode != 0:
        return {"error": (r.stderr + r.stdout).strip().splitlines()[-1][:200]}
    s = json.loads(r.stdout.strip().splitlines()[-1])
    return {"rate": s.get("warm_images_per_second") or s.get("images_per_second"),
            "peak_rss_bytes": s["peak_rss_bytes"], "planned_peak_bytes": s["planned_peak_bytes"],
            "first_step_seconds": s.get("first_step_seconds")}


def run_torch(a, name, size, batch):
    code = TORCH_SIDE.format(here=HERE, threads=a.threads, name=name, size=size, batch=batch, steps=a.torch_steps,
                             warmup=a.warmup)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=a.timeout)
    if r.returncode != 0:
        return {"error": (r.stderr + r.stdout).strip().splitlines()[-1][:200]}
    s = json.loads(r.stdout.strip().splitlines()[-1])
    return {"rate": batch / s["median_step_s"], "peak_rss_bytes": s["peak_rss_bytes"], "torch": s["torch"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "memfit"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30, help="memfit's steps (its warm rate excludes the first)")
    ap.add_argument("--torch-steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--jsonl")
    a = ap.parse_args()
    import torch
    ex = load_exporter()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, size, batch in CASES:
            if a.only and name not in a.only.split(","):
                continue
            model = build(name).train()
            path = os.path.join(work, f"{name}-{size}.onnx")
            example = torch.zeros(2, size, dtype=torch.long) if name == "hf-bert" else torch.zeros(2, 3, size, size)
            ex.export_training(model, example, path, 17, input_name="tokens" if name == "hf-bert" else "image",
                               attention_mask=name == "hf-bert")
            m = run_memfit(a, name, size, batch, path, work)
            t = run_torch(a, name, size, batch)
            row = {"model": name, "size": size, "batch": batch, "threads": a.threads, "memfit": m, "pytorch": t,
                   "date": datetime.date.today().isoformat(), "cpu": cpu_name()}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    mib = 2 ** 20
    unit = lambda n: "seq/s" if n == "hf-bert" else "img/s"
    print(f"`bench/imported.py --threads {a.threads}`, {datetime.date.today().isoformat()}, {cpu_name()}, "
          f"PyTorch {rows[0]['pytorch'].get('torch', '?') if rows else '?'} eager, Adam, memfit {a.steps} steps "
          f"(warm rate), PyTorch median of {a.torch_steps} steps after {a.warmup}\n")
    print("| model | input | batch | memfit | PyTorch | speed | memfit peak (plan) MiB | PyTorch peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        m, t = r["memfit"], r["pytorch"]
        if "error" in m or "error" in t:
            print(f"| {r['model']} | {r['size']} | {r['batch']} | {m.get('error', '')} | {t.get('error', '')} | | | |")
            continue
        print(f"| {r['model']} | {r['size']} | {r['batch']} | {m['rate']:.1f} {unit(r['model'])} | "
              f"{t['rate']:.1f} {unit(r['model'])} | {m['rate'] / t['rate']:.2f}x | "
              f"{m['peak_rss_bytes'] / mib:.1f} ({m['planned_peak_bytes'] / mib:.1f}) | {t['peak_rss_bytes'] / mib:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
