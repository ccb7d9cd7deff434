#!/usr/bin/python3
"""Predicted versus measured peak memory of memfit training runs, with
PyTorch's peak for the same run beside them.

For every (model, batch) it runs `memfit train --steps 20 --subset 2000
--test-subset 512 --json` in a fresh process and records the predicted
total (printed before step one), the process's own VmHWM at the end, and
its ru_maxrss seen from outside (wait4). With --torch it also runs
bench/pytorch_peak_rss.py for the same model, batch, steps and threads.
Prints a Markdown table (for docs/memory-plan.md) and writes the raw
numbers as JSON lines with --jsonl.

The language models (--lm-cases, MODEL:BATCH[:T], T the --block-size,
default 256) train on memfit's default text, the English fortunes
(deps/fortunes/en.txt, made by make deps), as `memfit train --model M --batch B
--block-size T --optimizer adamw --steps 20 --eval-every 0 --test-subset 32
--json`: AdamW and no evaluation (--eval-every 0 runs none, not even at
the end; --test-subset 32 keeps the planned evaluation executor small), then
the final checkpoint. --torch does not measure them
(bench/pytorch_peak_rss.py has the CNNs only).

  /usr/bin/python3 bench/plan_accuracy.py --binary build/memfit --torch
  /usr/bin/python3 bench/plan_accuracy.py --models "" --lm-cases gpt-char:16 --steps 3   (a quick check)

The AVX2 path on an AVX-512 machine: the x86-64-v3 build of the command
with oneDNN limited to AVX2, and the dataset streamed from disk as well:

  ONEDNN_MAX_CPU_ISA=AVX2 /usr/bin/python3 bench/plan_accuracy.py \
      --binary build/memfit_v3 --data-in memory,disk
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_name  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    """Runs cmd; returns (exit code, stdout, stderr, ru_maxrss in bytes)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read().decode(), err.read().decode(), ru.ru_maxrss * 1024


def last_json(text):
    lines = [l for l in text.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def mib(b):
    return b / 1048576.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(HERE, "..", "build", "memfit"))
    ap.add_argument("--models", default="convnet,resnet18", help="image models (\"\": none)")
    ap.add_argument("--lm-cases", default="gpt-char:16,gpt2:4:256",
                    help="language models as MODEL:BATCH[:T] (T: --block-size, default 256), comma-separated; \"\": none")
    ap.add_argument("--batches", default="16,64,256")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data-in", default="memory", help="memory, disk, or both (memory,disk): where the dataset lives")
    ap.add_argument("--torch", action="store_true", help="also measure PyTorch (needs torch in this interpreter)")
    ap.add_argument("--jsonl", help="append the raw results here")
    a = ap.parse_args()

    rows = []
    code, out, err, _ = run([a.binary, "plan", "--json"])
    machine = (last_json(out) or {}).get("cpu", {}) if code == 0 else {}
    # (model, batch, data, T): T is None for an image model.
    cases = [(m, int(b), d, None) for d in a.data_in.split(",") for m in filter(None, a.models.split(","))
             for b in a.batches.split(",")]
    for spec in filter(None, a.lm_cases.split(",")):
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[1:]):
            sys.exit(f"--lm-cases: '{spec}' is not MODEL:BATCH[:T] (gpt-char:16, gpt2:4:256)")
        cases.append((parts[0], int(parts[1]), "text", int(parts[2]) if len(parts) == 3 else 256))
    for model, batch, data_in, T in cases:
        out_dir = f"/tmp/memfit-bench-{model}-{batch}" + (f"-{T}" if T else "")
        cmd = [a.binary, "train", "--model", model, "--batch", str(batch), "--steps", str(a.steps),
               "--threads", str(a.threads), "--progress", "lines", "--json", "--out", out_dir]
        if T is None:
            cmd += ["--subset", "2000", "--test-subset", "512", "--data-in", data_in]
        else:
            # The text data is memfit's default (the fortunes); no
            # evaluation, so the run is its steps and the checkpoint.
            cmd += ["--block-size", str(T), "--optimizer", "adamw", "--eval-every", "0", "--test-subset", "32"]
        code, out, err, maxrss = run(cmd)
        if code != 0:
            sys.exit(f"{' '.join(cmd)} failed ({code}):\n{err}")
        j = last_json(out)
        row = {"model": model, "batch": batch, "data_in": data_in, "block_size": T, "steps": a.steps,
               "threads": a.threads, "onednn_isa": machine.get("onednn_isa"), "vector_isa": machine.get("vector_isa"),
               "predicted_bytes": j["planned_peak_bytes"], "vmhwm_bytes": j["peak_rss_bytes"],
               "ru_maxrss_bytes": maxrss, "memfit_seconds": j["seconds"]}
        if T is not None:
            row["tokens_per_second"] = j.get("tokens_per_second")
        if a.torch and T is None:
            tcmd = [sys.executable, os.path.join(HERE, "pytorch_peak_rss.py"), "--model", model, "--batch",
                    str(batch), "--steps", str(a.steps), "--threads", str(a.threads)]
            code, out, err, tmax = run(tcmd)
            if code != 0:
                sys.exit(f"{' '.join(tcmd)} failed ({code}):\n{err}")
            t = last_json(out)
            row.update({"torch_vmhwm_bytes": t["peak_rss_bytes"], "torch_ru_maxrss_bytes": tmax,
                        "torch_seconds": t["seconds"], "torch_version": t["torch"]})
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")

    what = []
    if any(not r["block_size"] for r in rows):
        what.append("image models: SGD, then evaluation of 512 images and the final checkpoint")
    if any(r["block_size"] for r in rows):
        what.append("language models (T: tokens per window): AdamW on the English fortunes, no evaluation, "
                    "the final checkpoint")
    print(f"{datetime.date.today().isoformat()}, {machine.get('model') or cpu_name()}, {os.cpu_count()} cores, "
          f"{a.threads} threads; oneDNN {machine.get('onednn', '?')} {machine.get('onednn_isa', '?')}, memfit loops "
          f"{machine.get('vector_isa', '?')}; {a.steps} steps; {'; '.join(what)}.\n")
    head = "| model | batch | T | data | predicted | measured (VmHWM) | error |"
    sep = "|---|---:|---:|---|---:|---:|---:|"
    if a.torch:
        head += " PyTorch peak RSS |"
        sep += "---:|"
    print(head)
    print(sep)
    for r in rows:
        err = (r["vmhwm_bytes"] - r["predicted_bytes"]) / r["predicted_bytes"] * 100
        line = (f"| {r['model']} | {r['batch']} | {r['block_size'] or ''} | {r['data_in']} "
                f"| {mib(r['predicted_bytes']):.1f} MiB | {mib(r['vmhwm_bytes']):.1f} MiB | {err:+.2f}% |")
        if a.torch:
            line += f" {mib(r['torch_vmhwm_bytes']):.1f} MiB |" if "torch_vmhwm_bytes" in r else " not measured |"
        print(line)


if __name__ == "__main__":
    main()
