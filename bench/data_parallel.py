#!/usr/bin/python3
"""Data parallelism on one machine: 2 ranks x 1 thread (mpirun) against 1
process x 2 threads, for memfit and PyTorch, on the same global batch.

    /usr/bin/python3 bench/data_parallel.py [--torch-python bench/.venv/bin/python] [--steps 10]

Cases (global batch: ResNet-18 64 on Fashion-MNIST, gpt-char 16 windows of
256 characters of the fortunes):
  memfit 1 x 2   memfit train --batch B --threads 2
  memfit 2 x 1   mpirun -np 2 memfit train --batch B/2 --threads 1, with the
                 gradients sharded too (--shard-gradients on, ZeRO-2), or
                 optimizer state sharded (ZeRO-1, the default) and whole
                 (--shard-optimizer off), the gradients reduced during
                 backward (the default) and, sharded, after it
                 (--overlap-reduce off)
  PyTorch 1 x 2  bench/torch_step.py --threads 2 (random data, median step)
  PyTorch 2 x 1  torchrun --nproc_per_node 2 bench/torch_ddp.py (DDP over gloo)
memfit's rate is the median of steps.jsonl's per-step rates after the first
step; its exchange share is rank 0's seconds in the gradients' reduction
and the parameters' broadcast (which include waiting for the other rank)
over the run's training seconds. Peaks: every rank's VmHWM and plan.

On paper: what each rank sends per step for ResNet-18 and gpt2 (from
`memfit plan --ranks 2 --json`: gradient and parameter bytes) with
bandwidth-optimal collectives, and the seconds that takes on 10 and 100
Gbit/s links.

Writes bench/data_parallel.md (--out) and appends the raw rows with the date
and CPU to the .jsonl beside it. Run it on a quiet machine: the two ranks
and the two threads each need one core.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_name  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in:\n" + text[-2000:])


def mpirun(np):
    cmd = ["mpirun", "--oversubscribe", "-np", str(np), "--bind-to", "core", "-x", "OMP_NUM_THREADS=1"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


CASES = {
    "resnet18": dict(batch=64, args=["--model", "resnet18", "--subset", "6000", "--test-subset", "64"]),
    "gpt-char": dict(batch=16, args=["--model", "gpt-char", "--optimizer", "adamw", "--block-size", "256"]),
}


def memfit_case(binary, model, ranks, threads, steps, sharded=True, overlap=True, grads=False):
    c = CASES[model]
    out = tempfile.mkdtemp(prefix="memfit-dp-")
    cmd = ([] if ranks == 1 else mpirun(ranks)) + [binary, "train"] + c["args"] + [
        "--batch", str(c["batch"] // ranks), "--steps", str(steps), "--eval-every", "0", "--threads", str(threads),
        "--progress", "lines", "--json", "--out", out]
    if ranks > 1 and not sharded:
        cmd += ["--shard-optimizer", "off"]
    if ranks > 1 and not overlap:
        cmd += ["--overlap-reduce", "off"]
    if ranks > 1 and grads:
        cmd += ["--shard-gradients", "on"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + p.stderr[-3000:])
    j = last_json(p.stdout)
    rates = []
    with open(os.path.join(out, "steps.jsonl")) as f:
        for line in f:
            s = json.loads(line)
            if s["step"] >= 2:
                rates.append(s["samples_per_second"])
    shutil.rmtree(out, ignore_errors=True)
    row = {"framework": "memfit", "model": model, "ranks": ranks, "threads": threads,
           "sharded": sharded if ranks > 1 else None, "overlap": overlap if ranks > 1 else None,
           "sharded_gradients": grads if ranks > 1 else None,
           "buckets": j.get("comm_buckets"), "buckets_overlapped": j.get("comm_buckets_overlapped"),
           "global_batch": c["batch"],
           "images_per_s": statistics.median(rates), "seconds": j["seconds"],
           "peak_rss_bytes": j.get("rank_peak_rss_bytes", [j["peak_rss_bytes"]]),
           "planned_peak_bytes": j.get("rank_planned_peak_bytes", [j["planned_peak_bytes"]]),
           "comm_seconds": j.get("comm_seconds", 0.0), "comm_bytes_per_step": j.get("comm_bytes_per_step", 0)}
    row["comm_share"] = row["comm_seconds"] / j["seconds"] if j["seconds"] > 0 else 0.0
    return row


def torch_case(py, model, ranks, threads, steps):
    c = CASES[model]
    common = ["--model", model, "--steps", str(steps), "--threads", str(threads)]
    if ranks == 1:
        cmd = [py, os.path.join(HERE, "torch_step.py"), "--batch", str(c["batch"]), "--warmup", "1"] + common
    else:
        torchrun = os.path.join(os.path.dirname(py), "torchrun")
        cmd = [torchrun, "--nproc_per_node", str(ranks), os.path.join(HERE, "torch_ddp.py"),
               "--batch", str(c["batch"] // ranks)] + common
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + p.stderr[-3000:])
    j = last_json(p.stdout)
    return {"framework": "pytorch " + j.get("torch", ""), "model": model, "ranks": ranks, "threads": threads,
            "global_batch": c["batch"], "images_per_s": j["images_per_s"],
            "peak_rss_bytes": j.get("rank_peak_rss_bytes", [j.get("peak_rss_bytes", 0)])}


def on_paper(binary, model, extra):
    p = subprocess.run([binary, "plan", "--model", model, "--ranks", "2", "--json"] + extra,
                       capture_output=True, text=True)
    j = last_json(p.stdout)
    grads, params = j["by_class"]["gradients"], j["by_class"]["parameters"]
    R = 2
    whole = 2 * (R - 1) / R * grads
    sharded = (R - 1) / R * (grads + params)
    return {"model": model, "gradient_bytes": grads, "parameter_bytes": params,
            "sent_whole": whole, "sent_sharded": sharded}


def mib(b):
    return b / 1048576


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memfit", default=os.path.join(ROOT, "build", "memfit"))
    ap.add_argument("--torch-python", default=os.path.join(HERE, ".venv", "bin", "python"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--models", default="resnet18,gpt-char")
    ap.add_argument("--out", default=os.path.join(HERE, "data_parallel.md"))
    a = ap.parse_args()
    have_torch = os.path.exists(a.torch_python)
    stamp = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_name(),
             "load_start": os.getloadavg()[0]}
    rows = []
    for model in a.models.split(","):
        rows.append(memfit_case(a.memfit, model, 1, 2, a.steps))
        rows.append(memfit_case(a.memfit, model, 2, 1, a.steps, sharded=True))
        rows.append(memfit_case(a.memfit, model, 2, 1, a.steps, sharded=True, overlap=False))
        rows.append(memfit_case(a.memfit, model, 2, 1, a.steps, sharded=True, grads=True))
        rows.append(memfit_case(a.memfit, model, 2, 1, a.steps, sharded=False))
        if have_torch:
            rows.append(torch_case(a.torch_python, model, 1, 2, a.steps))
            rows.append(torch_case(a.torch_python, model, 2, 1, a.steps))
        for r in rows[-7 if have_torch else -5:]:
            print(json.dumps(r), flush=True)
    paper = [on_paper(a.memfit, "resnet18", ["--batch", "32"]),
             on_paper(a.memfit, "gpt2", ["--batch", "1", "--block-size", "256", "--tokenizer", "gpt2",
                                         "--optimizer", "adamw"])]
    stamp["load_end"] = os.getloadavg()[0]

    lines = [f"# Data parallelism on one machine ({stamp['date']}, {stamp['cpu']}, load {stamp['load_start']:.1f} "
             f"to {stamp['load_end']:.1f})", "",
             f"`/usr/bin/python3 bench/data_parallel.py --steps {a.steps}`; global batch: ResNet-18 64, gpt-char 16.", "",
             "| model | framework | ranks x threads | optimizer state | gradients reduced | samples/s | vs 1 x 2 | "
             "exchange share | peak RSS by rank (planned) |",
             "|---|---|---|---|---|---:|---:|---:|---|"]
    base = {}
    for r in rows:
        key = (r["model"], r["framework"].split()[0])
        if r["ranks"] == 1:
            base[key] = r["images_per_s"]
        ratio = r["images_per_s"] / base[key] if key in base else 1.0
        state = "" if r["ranks"] == 1 or "sharded" not in r else ("sharded" if r["sharded"] else "whole")
        if r.get("sharded_gradients"):
            state = "sharded, gradients too (ZeRO-2)"
        peaks = ", ".join(f"{mib(p):.1f}" + (f" ({mib(q):.1f})" if "planned_peak_bytes" in r else "")
                          for p, q in zip(r["peak_rss_bytes"], r.get("planned_peak_bytes", r["peak_rss_bytes"])))
        share = f"{100 * r['comm_share']:.1f}%" if r.get("comm_share") else ""
        if r["ranks"] == 1:
            reduced = ""
        elif "overlap" not in r:
            reduced = "during backward (DDP buckets)"
        elif r.get("sharded_gradients"):
            reduced = "during backward (one reduce per gradient)"
        elif r["overlap"]:
            reduced = f"during backward ({r['buckets_overlapped']} of {r['buckets']} buckets started)"
        else:
            reduced = "after backward"
        lines.append(f"| {r['model']} | {r['framework']} | {r['ranks']} x {r['threads']} | {state} | {reduced} | "
                     f"{r['images_per_s']:.1f} | {ratio:.2f} | {share} | {peaks} MiB |")
    lines += ["", "What each of 2 ranks sends per step (fp32 gradients and parameters):", "",
              "| model | gradients | whole state: all-reduce | sharded: reduce + broadcast | 10 Gbit/s | 100 Gbit/s |",
              "|---|---:|---:|---:|---:|---:|"]
    for p in paper:
        t10 = p["sent_sharded"] * 8 / 10e9
        t100 = p["sent_sharded"] * 8 / 100e9
        lines.append(f"| {p['model']} | {mib(p['gradient_bytes']):.1f} MiB | {mib(p['sent_whole']):.1f} MiB | "
                     f"{mib(p['sent_sharded']):.1f} MiB | {t10:.3f} s | {t100:.4f} s |")
    text = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(a.out)[0] + ".jsonl", "a") as f:
        for r in rows:
            f.write(json.dumps({**stamp, **r}) + "\n")
        for p in paper:
            f.write(json.dumps({**stamp, "paper": p}) + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
