#!/usr/bin/python3
"""memfit train (what users run) against its own step (bench/step_bench) and
against PyTorch's warm step (bench/torch_step.py), in one command:

    /usr/bin/python3 bench/command_speed.py [--build build] [--threads 2] [--rounds N] [--isa avx2]

For each case it times the same model, batch, data shapes, optimizer and
threads three ways, in rounds:
  - step_bench's timed steps (the step alone, random data, after warm-up:
    their mean, the same statistic as the command's rate);
  - a `memfit train --json` run of a few hundred steps on the default data
    (Fashion-MNIST for the image models, the English fortunes for gpt-char
    with its own character alphabet, the fortunes' topics for the LSTM),
    whose warm rate leaves out the first step (warm_images_per_second /
    warm_tokens_per_second: loading, progress, RSS monitoring and the
    loader's prefetch are all inside it);
  - torch_step.py's median warm step of the same model (PyTorch from
    bench/.venv, make bench-venv), with the command's vocabulary and classes.
Each round runs step_bench, the command, PyTorch; one more step_bench ends
the case. A round's train / step divides the command's rate by the mean of
the step_bench runs before and after it, so that a drift of the machine's
speed falls on neither side; its train / PyTorch divides it by PyTorch's
rate of the same round. The table gives the median over rounds (and the
range); the first step's time of the command is shown apart.

--isa avx2 limits an AVX-512 CPU to AVX2 on every side (memfit's
x86-64-v3 build, memfit_v3 and step_bench_v3; ONEDNN_MAX_CPU_ISA=AVX2 and
PyTorch's ATEN_CPU_CAPABILITY=avx2), as bench/run.py --isa avx2 does.

Writes bench/command_speed_KIND.md (KIND as bench/run.py names this CPU, with
-as-avx2 under --isa avx2) and appends to bench/command_speed.jsonl.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import machine  # noqa: E402

TORCH_PY = os.path.join(HERE, ".venv", "bin", "python")

# (model, batch, command steps, step_bench steps, PyTorch steps, rounds,
# extra train flags, rate unit). The optimizers are step_bench's and
# torch_step.py's: SGD with momentum for the CNNs (the command's default),
# AdamW for the GPT, Adam for the LSTM. The LSTM's topics are 3116
# sequences, 48 batches: its run crosses epochs (each epoch's end
# checkpoints, outside the steps' time). Short runs and more rounds where a
# step is short: on a shared machine the speed drifts by 10-20% within a
# minute, and adjacent short runs see the same speed.
CASES = [
    ("convnet", 64, 200, 60, 30, 6, [], "images"),
    ("resnet18", 64, 60, 12, 6, 3, [], "images"),
    ("resnet18", 256, 20, 5, 3, 3, [], "images"),
    ("gpt-char", 16, 40, 12, 8, 4, ["--block-size", "256", "--optimizer", "adamw", "--lr", "1e-3"], "tokens"),
    ("lstm-classifier", 64, 200, 60, 30, 6, ["--optimizer", "adam", "--lr", "1e-3"], "sequences"),
]


def run_json(cmd, env, log=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    if log is not None:
        log.append(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def text_shapes(train, env, out):
    """The command's vocabulary and classes for a text model: a 2-step run
    writes its tokenizer and names its classes."""
    log = []
    cmd = list(train)
    cmd[cmd.index("--steps") + 1] = "2"
    run_json(cmd, env, log)
    with open(os.path.join(out, "tokenizer.json")) as f:
        vocab = len(json.load(f)["alphabet"])
    m = re.search(r"(\d+) classes", log[0])
    return vocab, int(m.group(1)) if m else 0


def spread(xs):
    return f"{min(xs):.3f}-{max(xs):.3f}" if len(xs) > 1 else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=0,
                    help="rounds of step_bench, command, PyTorch per case (default: the case's, 3-6)")
    ap.add_argument("--models", default="", help="comma-separated subset of " + ",".join(sorted({c[0] for c in CASES})))
    ap.add_argument("--isa", choices=("native", "avx2"), default="native",
                    help="avx2: every side limited to AVX2 on this AVX-512 CPU (memfit's x86-64-v3 build)")
    ap.add_argument("--torch-python", default=TORCH_PY, help="the Python whose PyTorch is measured (make bench-venv)")
    pre, _ = ap.parse_known_args()
    kind = machine.cpu_kind() + ("-as-avx2" if pre.isa == "avx2" else "")
    ap.add_argument("--out", default=os.path.join(HERE, f"command_speed_{kind}.md"))
    a = ap.parse_args()
    if a.rounds < 0:
        raise SystemExit("--rounds: at least 1 (0: each case's own)")
    limit = {}
    if a.isa == "avx2":
        if machine.cpu_kind().endswith("-avx2"):
            raise SystemExit("--isa avx2: this CPU has no more than AVX2; run without --isa")
        limit = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), **limit)
    suffix = "_v3" if a.isa == "avx2" else ""
    memfit = os.path.join(a.build, "memfit" + suffix)
    step_bench = os.path.join(a.build, "bench", "step_bench" + suffix)
    for exe in (memfit, step_bench):
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"{exe} is missing: build first (make build)")
    if not os.path.exists(a.torch_python):
        raise SystemExit(f"{a.torch_python} not found: make bench-venv installs PyTorch from PyPI into bench/.venv")
    picked = set(filter(None, a.models.split(",")))
    known = {c[0] for c in CASES}
    if not picked <= known:
        raise SystemExit(f"--models: unknown {', '.join(sorted(picked - known))}; the cases are {', '.join(sorted(known))}")
    t = str(a.threads)
    rows, records, torch_isa = [], [], None
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    with tempfile.TemporaryDirectory(prefix="memfit-cmdspeed-") as tmp:
        for model, batch, cmd_steps, bench_steps, pt_steps, case_rounds, extra, unit in CASES:
            if picked and model not in picked:
                continue
            out = os.path.join(tmp, f"{model}-{batch}")
            train = [memfit, "train", "--model", model, "--batch", str(batch), "--steps", str(cmd_steps),
                     "--eval-every", "0", "--threads", t, "--json", "--out", out] + extra
            common = ["--model", model, "--batch", str(batch), "--threads", t]
            per_sample = 1
            if unit != "images":
                vocab, classes = text_shapes(train, env, out)
                seq = 256 if model == "gpt-char" else 128
                common += ["--seq", str(seq), "--vocab", str(vocab)] + (["--classes", str(classes)] if classes else [])
                per_sample = seq if unit == "tokens" else 1
            bench = [step_bench] + common + ["--steps", str(bench_steps), "--warmup", "2"]
            torch = [a.torch_python, os.path.join(HERE, "torch_step.py")] + common + ["--steps", str(pt_steps),
                                                                                       "--warmup", "2"]
            rounds = a.rounds or case_rounds
            print(f"{model} b{batch}: {rounds} rounds of step_bench, memfit train ({cmd_steps} steps), PyTorch",
                  flush=True)
            key = "tokens" if unit == "tokens" else "images"
            steps_r, cmds, pts = [], [], []

            def step_rate():
                r = run_json(bench, env)
                return batch * per_sample / statistics.mean(r["step_s"])

            steps_r.append(step_rate())
            for _ in range(rounds):
                cmds.append(run_json(train, env))
                p = run_json(torch, env)
                torch_isa = p.get("cpu_capability", torch_isa)
                pts.append(p["tokens_per_s"] if unit == "tokens" else p["images_per_s"])
                steps_r.append(step_rate())
            if limit and torch_isa != "AVX2":
                raise SystemExit(f"--isa avx2: PyTorch ran its kernels for {torch_isa}, not AVX2")
            warm = [c[f"warm_{key}_per_second"] for c in cmds]
            vs_step = [w / ((steps_r[i] + steps_r[i + 1]) / 2) for i, w in enumerate(warm)]
            vs_torch = [w / p for w, p in zip(warm, pts)]
            rec = {"model": model, "batch": batch, "threads": a.threads, "isa": a.isa, "unit": f"{unit}/s",
                   "step_bench_runs": steps_r, "command_warm_runs": warm,
                   "command_all_runs": [c[f"{key}_per_second"] for c in cmds],
                   "first_step_s_runs": [c["first_step_seconds"] for c in cmds], "pytorch_runs": pts,
                   "command_steps": cmd_steps, "rounds": rounds, "train_over_step": statistics.median(vs_step),
                   "train_over_pytorch": statistics.median(vs_torch), "torch_isa": torch_isa}
            records.append(rec)
            u = {"images": "img/s", "tokens": "tok/s", "sequences": "seq/s"}[unit]
            rows.append(f"| {model} ({cmd_steps} steps, {rounds} rounds) | {batch} | {statistics.median(steps_r):.1f} {u} | "
                        f"{statistics.median(warm):.1f} {u} | **{rec['train_over_step']:.3f}** {spread(vs_step)} | "
                        f"{statistics.median(rec['first_step_s_runs']):.2f} s | {statistics.median(pts):.1f} {u} | "
                        f"**{rec['train_over_pytorch']:.2f}x** {spread(vs_torch)} |")
            print(f"  step_bench {', '.join(f'{x:.1f}' for x in steps_r)}; command warm {', '.join(f'{x:.1f}' for x in warm)}; "
                  f"PyTorch {', '.join(f'{x:.1f}' for x in pts)}; train/step {rec['train_over_step']:.3f}, "
                  f"train/PyTorch {rec['train_over_pytorch']:.2f}x", flush=True)
    head = (f"memfit train against its own step and PyTorch's, {started}, {machine.cpu_name()} ({kind}), "
            f"{a.threads} threads, PyTorch's kernels for {torch_isa} "
            f"(`/usr/bin/python3 bench/command_speed.py{' --isa avx2' if a.isa == 'avx2' else ''}`)\n\n"
            "| model | batch | step_bench (median of runs) | memfit train, warm (median) | train / step (median, range) "
            "| first step | PyTorch (median) | train / PyTorch (median, range) |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|\n")
    with open(a.out, "w") as f:
        f.write(head + "\n".join(rows) + "\n")
    with open(os.path.join(HERE, "command_speed.jsonl"), "a") as f:
        for r in records:
            f.write(json.dumps({"date": started, "cpu": machine.cpu_name(), "kind": kind, **r}) + "\n")
    print(head + "\n".join(rows))


if __name__ == "__main__":
    main()
