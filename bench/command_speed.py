#!/usr/bin/python3
"""memfit train (what users run) against its own step (bench/step_bench), in
one command:

    /usr/bin/python3 bench/command_speed.py [--build build] [--threads 2]

For each case it times the same model, batch and threads twice: step_bench's
timed steps (the step alone, random data, after warm-up: their mean), and a
`memfit train --json` run of a few hundred steps on the default data
(Fashion-MNIST for the image models, the English fortunes for gpt-char with
its own character alphabet), whose warm rate leaves out the first step
(warm_images_per_second / warm_tokens_per_second: loading, progress, RSS
monitoring and the loader's prefetch are all inside it). step_bench runs
before and after the command and the two are averaged, so that a drift of
the machine's speed does not fall on one side. The ratio is command / step;
the first step's time of the command is shown apart.

Writes bench/command_speed.md and bench/command_speed.jsonl.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from machine import cpu_name  # noqa: E402

# (model, batch, command steps, step_bench steps, extra train flags, rate key)
CASES = [
    ("convnet", 64, 400, 60, [], "images"),
    ("resnet18", 64, 100, 20, [], "images"),
    ("gpt-char", 16, 60, 12, ["--block-size", "256", "--optimizer", "adamw"], "tokens"),
]


def run_json(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--models", default="", help="comma-separated subset of " + ",".join(c[0] for c in CASES))
    ap.add_argument("--out", default=os.path.join(HERE, "command_speed.md"))
    a = ap.parse_args()
    memfit = os.path.join(a.build, "memfit")
    step_bench = os.path.join(a.build, "bench", "step_bench")
    for exe in (memfit, step_bench):
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"{exe} is missing: build first (make build)")
    picked = set(filter(None, a.models.split(",")))
    rows, records = [], []
    with tempfile.TemporaryDirectory(prefix="memfit-cmdspeed-") as tmp:
        for model, batch, cmd_steps, bench_steps, extra, unit in CASES:
            if picked and model not in picked:
                continue
            out = os.path.join(tmp, model)
            train = [memfit, "train", "--model", model, "--batch", str(batch), "--steps", str(cmd_steps),
                     "--eval-every", "0", "--threads", str(a.threads), "--json", "--out", out] + extra
            bench = [step_bench, "--model", model, "--batch", str(batch), "--steps", str(bench_steps),
                     "--warmup", "2", "--threads", str(a.threads)]
            if model == "gpt-char":
                # The command's alphabet, so that both heads are as wide: a
                # 2-step run writes the tokenizer.
                run_json(train[:7] + ["2"] + train[8:])
                with open(os.path.join(out, "tokenizer.json")) as f:
                    vocab = len(json.load(f)["alphabet"])
                bench += ["--seq", "256", "--vocab", str(vocab)]
            print(f"{model} b{batch}: step_bench, memfit train ({cmd_steps} steps), step_bench", flush=True)
            per_sample = 256 if unit == "tokens" else 1
            rates = []
            for _ in range(2):
                r = run_json(bench)
                rates.append(batch * per_sample / statistics.mean(r["step_s"]))
                if len(rates) == 1:
                    t = run_json(train)
            step_rate = statistics.mean(rates)
            cmd_rate = t[f"warm_{'tokens' if unit == 'tokens' else 'images'}_per_second"]
            rec = {"model": model, "batch": batch, "threads": a.threads, "unit": f"{unit}/s",
                   "step_bench": step_rate, "step_bench_runs": rates, "command_warm": cmd_rate,
                   "command_all": t[f"{'tokens' if unit == 'tokens' else 'images'}_per_second"],
                   "first_step_s": t["first_step_seconds"], "command_steps": cmd_steps,
                   "ratio": cmd_rate / step_rate}
            records.append(rec)
            rows.append(f"| {model} | {batch} | {step_rate:.1f} | {cmd_rate:.1f} | **{rec['ratio']:.3f}** | "
                        f"{rec['command_all']:.1f} | {rec['first_step_s']:.2f} s |")
            print(f"  step {step_rate:.1f} {unit}/s (runs {rates[0]:.1f}, {rates[1]:.1f}); command warm "
                  f"{cmd_rate:.1f}, all {rec['command_all']:.1f}; ratio {rec['ratio']:.3f}", flush=True)
    date = datetime.date.today().isoformat()
    head = (f"memfit train against its own step, {date}, {cpu_name()}, {a.threads} threads "
            f"(`/usr/bin/python3 bench/command_speed.py`)\n\n"
            "| model | batch | step_bench (per s) | memfit train, warm (per s) | train / step | train, all steps | first step |\n"
            "|---|---|---|---|---|---|---|\n")
    with open(a.out, "w") as f:
        f.write(head + "\n".join(rows) + "\n")
    with open(os.path.splitext(a.out)[0] + ".jsonl", "a") as f:
        for r in records:
            f.write(json.dumps({"date": date, "cpu": cpu_name(), **r}) + "\n")
    print(head + "\n".join(rows))


if __name__ == "__main__":
    main()
