#!/usr/bin/python3
"""The budget matrix: one model and effective batch trained under shrinking
memory budgets. For each budget it runs `memfit train --memory B --json` in
a fresh process (memfit fits micro-batch, accumulation, precision,
recomputation and data residency to the budget on its own) and records the
plan it chose, the predicted peak, the measured peak (VmHWM inside, and
ru_maxrss from outside), and the training throughput. A row whose budget
cannot be met records memfit's answer (exit 3 and the smallest budget that
would work). Prints a Markdown table and, with --jsonl, the raw rows.

  /usr/bin/python3 bench/budget_matrix.py --binary build/memfit \\
      --model resnet18 --batch 256 --optimizer adam --budgets 192,256,384,512
"""
import argparse
import datetime
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from plan_accuracy import cpu_name, last_json, mib, run  # noqa: E402


def chosen_plan(text):
    m = re.search(r"chosen:\s+(.*)", text)
    if m:
        return m.group(1).split(":")[0].strip()
    return "as given (fits)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(HERE, "..", "build", "memfit"))
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--budgets", default="192,256,384,512", help="MiB, comma-separated")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--subset", default="4096")
    ap.add_argument("--extra", default="", help="more memfit train flags")
    ap.add_argument("--jsonl", help="append raw rows here")
    a = ap.parse_args()

    rows = []
    for b in [int(x) for x in a.budgets.split(",")]:
        out_dir = f"/tmp/memfit-budget-{os.getpid()}-{b}"
        cmd = [a.binary, "train", "--model", a.model, "--batch", str(a.batch), "--optimizer", a.optimizer,
               "--memory", f"{b}MiB", "--steps", str(a.steps), "--subset", a.subset, "--test-subset", "512",
               "--threads", str(a.threads), "--progress", "lines", "--json", "--out", out_dir] + a.extra.split()
        code, out, err, ru = run(cmd)
        text = out + err
        row = {"budget_mib": b, "exit": code, "model": a.model, "batch": a.batch, "optimizer": a.optimizer}
        j = last_json(out)
        if code == 0 and j:
            row.update(plan=chosen_plan(text), predicted_mib=mib(j["planned_peak_bytes"]),
                       vmhwm_mib=mib(j["peak_rss_bytes"]), maxrss_mib=mib(ru), img_s=j["images_per_second"])
        else:
            m = re.search(r"smallest budget that would work is ([0-9.]+ [KMG]iB)", text)
            row.update(plan="does not fit" + (f": smallest budget {m.group(1)}" if m else f" (exit {code})"))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(dict(row, date=datetime.date.today().isoformat(), cpu=cpu_name())) + "\n")

    print(f"Budget matrix: {a.model}, effective batch {a.batch}, {a.optimizer}, {a.threads} threads, "
          f"{datetime.date.today().isoformat()}, {cpu_name()}\n")
    print("| budget | plan memfit chose | predicted peak | measured peak (VmHWM) | ru_maxrss | within budget | img/s |")
    print("|---:|---|---:|---:|---:|:-:|---:|")
    for r in rows:
        if "vmhwm_mib" in r:
            ok = "yes" if r["maxrss_mib"] <= r["budget_mib"] else "**no**"
            print(f"| {r['budget_mib']} MiB | {r['plan']} | {r['predicted_mib']:.1f} MiB | {r['vmhwm_mib']:.1f} MiB | "
                  f"{r['maxrss_mib']:.1f} MiB | {ok} | {r['img_s']:.1f} |")
        else:
            print(f"| {r['budget_mib']} MiB | {r['plan']} | | | | | |")


if __name__ == "__main__":
    main()
