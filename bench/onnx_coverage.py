#!/usr/bin/python3
"""Which torchvision classification models memfit imports, plans and trains.

For every classification model the installed torchvision defines
(torchvision.models.list_models, weights=None, 10 classes) it exports the
model in training mode through the Python package's exporter
(python/memfit/_onnx.py, loaded by path) at SIZE x SIZE, then runs

    memfit train --model M.onnx --data <image folder> --batch B --steps S
                 --subset B --optimizer adam --lr 1e-3 --json

on a small generated image folder (10 classes of SIZE x SIZE RGB images, one
batch repeated: a model that learns at all lowers its loss on it), and
records: exported, imported and planned (the plan printed), trained (every
step's loss finite), falling (the last step's loss below the first's), the
planned peak against the measured one, and the first refusal's message.
Prints a Markdown table (the README's coverage table) and, with --jsonl,
the raw rows. Exits 1 when fewer than --min-train models train with a
falling loss (the bar a test can hold it to).

  /usr/bin/python3 bench/onnx_coverage.py --binary build/memfit
  /usr/bin/python3 bench/onnx_coverage.py --models mobilenet_v2,resnet18 --min-train 2   (a quick check)

--exporter dynamo exports with torch's dynamo exporter instead (as the
package does where torch has no other: traced in training mode, not
optimised).

Models whose parameters exceed --max-params (default 100 M: the largest
RegNets, ViTs and VGGs) are listed as skipped, with their size, not run.
"""
import argparse
import datetime
import importlib.util
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_name  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load_exporter():
    spec = importlib.util.spec_from_file_location("memfit_onnx", os.path.join(ROOT, "python", "memfit", "_onnx.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def make_images(folder, size, per_class):
    """10 classes of size x size RGB PNGs, a colour ramp per class with noise."""
    from PIL import Image
    rng = random.Random(0)
    for split, count in (("train", per_class), ("test", 2)):
        for c in range(10):
            d = os.path.join(folder, split, f"class{c}")
            os.makedirs(d, exist_ok=True)
            for i in range(count):
                im = Image.new("RGB", (size, size))
                px = im.load()
                for y in range(size):
                    for x in range(size):
                        px[x, y] = ((25 * c + x) % 256, (40 * c + y + rng.randrange(32)) % 256, (c * 60 + i * 7) % 256)
                im.save(os.path.join(d, f"{i}.png"))


def first_line_with(text, word):
    for line in text.splitlines():
        if word in line:
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1].strip() if lines else ""


def min_size(name):
    """The smallest input side the model takes, from its weights' metadata
    (torchvision records it there; nothing is downloaded): Inception-v3's
    75, 1 for most."""
    import torchvision
    try:
        return max(list(torchvision.models.get_model_weights(name))[0].meta.get("min_size", (1, 1)))
    except (AttributeError, ValueError, IndexError, KeyError):  # no weights, or a torchvision without the API
        return 1


def run_model(name, args, exporter, data, work):
    import torch
    import torchvision
    # A model that needs a larger input than --size runs at its own minimum
    # (the images are resized by memfit to it).
    size = max(args.size, min_size(name))
    row = {"model": name, "size": size}
    # GoogLeNet and Inception-v3 return their auxiliary classifiers' outputs
    # beside the logits in training mode; memfit trains one output, so they
    # are built without them, as a user who trains with one loss builds them.
    extra = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    model = torchvision.models.get_model(name, weights=None, num_classes=10, **extra)
    params = sum(p.numel() for p in model.parameters())
    row["params"] = params
    if params > args.max_params:
        row["status"] = f"skipped: {params / 1e6:.0f} M parameters"
        return row
    path = os.path.join(work, f"{name}.onnx")
    t0 = time.time()
    try:
        exporter.export_training(model.train(), torch.zeros(2, 3, size, size), path, args.opset,
                                 exporter=args.exporter)
        row["exported"] = True
    except Exception as e:  # the exporter's own refusal
        row["exported"] = False
        row["status"] = "export failed: " + str(e).splitlines()[0][:160]
        return row
    row["export_seconds"] = round(time.time() - t0, 1)
    out = os.path.join(work, f"run-{name}")
    cmd = [args.binary, "train", "--model", path, "--data", data, "--image-size", str(size), "--batch", str(args.batch),
           "--steps", str(args.steps),
           "--subset", str(args.batch), "--test-subset", "4", "--optimizer", "adam", "--lr", "1e-3", "--json", "--out", out]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    row["train_seconds"] = round(time.time() - t0, 1)
    text = r.stderr + r.stdout
    row["imported"] = "bad model file" not in text
    row["planned"] = "memfit train:" in text and row["imported"]
    losses = []
    steps_path = os.path.join(out, "steps.jsonl")
    if os.path.exists(steps_path):
        with open(steps_path) as f:
            for line in f:
                losses.append(json.loads(line).get("train_loss"))
    row["losses"] = losses
    row["trained"] = r.returncode == 0 and len(losses) == args.steps and all(l is not None for l in losses)
    row["falling"] = row["trained"] and losses[-1] < losses[0]
    if r.returncode == 0:
        try:
            summary = json.loads(r.stdout.strip().splitlines()[-1])
            row["planned_peak_mib"] = round(summary["planned_peak_bytes"] / 2**20, 1)
            row["peak_mib"] = round(summary["peak_rss_bytes"] / 2**20, 1)
        except (ValueError, KeyError, IndexError):
            pass
        row["status"] = "trains, loss falling" if row["falling"] else "trains, loss not falling"
    else:
        row["status"] = first_line_with(text, "memfit")[:200]
    return row


def table(rows, size=None):
    out = ["| model | params | imported | trains (loss) | plan / peak MiB | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        loss = ""
        if r.get("losses"):
            loss = f"{r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}" if r.get("trained") else "no"
        peak = f"{r['planned_peak_mib']} / {r['peak_mib']}" if "peak_mib" in r else ""
        note = "" if r.get("falling") else r.get("status", "")
        if r.get("size") and r["size"] != size:
            note = (f"at {r['size']} x {r['size']}, its smallest input; " + note).rstrip("; ")
        note = re.sub(r"/tmp/[^ :]*/", "", note).replace("|", "/")
        out.append(f"| {r['model']} | {r.get('params', 0) / 1e6:.1f} M | {'yes' if r.get('imported') else 'no'} | "
                   f"{loss or ('yes' if r.get('falling') else 'no')} | {peak} | {note} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "memfit"))
    ap.add_argument("--models", default="", help="comma-separated names (default: every classification model)")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--exporter", default="auto", choices=("auto", "torchscript", "dynamo"),
                    help="torch's exporter (auto: TorchScript where the installed torch has it)")
    ap.add_argument("--max-params", type=float, default=100e6)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--min-train", type=int, default=0, help="exit 1 when fewer models train with a falling loss")
    ap.add_argument("--jsonl")
    args = ap.parse_args()
    import torch
    import torchvision
    torch.set_num_threads(1)
    names = [m for m in args.models.split(",") if m] or torchvision.models.list_models(module=torchvision.models)
    exporter = load_exporter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="memfit-onnx-coverage-") as work:
        data = os.path.join(work, "images")
        make_images(data, args.size, max(1, args.batch // 10 + 1))
        for name in names:
            try:
                row = run_model(name, args, exporter, data, work)
            except subprocess.TimeoutExpired:
                row = {"model": name, "status": f"timed out after {args.timeout} s"}
            rows.append(row)
            print(f"{name}: {row.get('status', '')}", file=sys.stderr, flush=True)
            for f in os.listdir(work):  # the exports and runs take space; keep the images
                if f.startswith(name + ".") or f == f"run-{name}":
                    subprocess.run(["rm", "-rf", os.path.join(work, f)])
    stamp = {"date": datetime.date.today().isoformat(), "cpu": cpu_name(),
             "torch": torch.__version__, "torchvision": torchvision.__version__}
    falling = sum(1 for r in rows if r.get("falling"))
    print(f"<!-- {json.dumps(stamp)} -->")
    print(table(rows, args.size))
    print(f"\n{falling} of {len(rows)} train with a falling loss "
          f"({sum(1 for r in rows if r.get('imported'))} import; "
          f"{sum(1 for r in rows if str(r.get('status', '')).startswith('skipped'))} skipped for size)")
    if args.jsonl:
        with open(args.jsonl, "w") as f:
            for r in rows:
                f.write(json.dumps({**stamp, **r}) + "\n")
    return 0 if falling >= args.min_train else 1


if __name__ == "__main__":
    sys.exit(main())
