#!/usr/bin/python3
"""Beyond RAM: GPT-2 medium inside 1 GiB and GPT-2 large inside 2 GiB with
their parameters and optimizer state in the offload tier, against the same
runs with everything in RAM and against PyTorch's peak.

    /usr/bin/python3 bench/offload.py                          (medium 50 steps, large 20, all-RAM 6 each)
    /usr/bin/python3 bench/offload.py --steps 3 --large-steps 2 --ram-steps 2 --out /tmp/offload_smoke.md

Every memfit run is

    memfit train --model MODEL --batch 1 --block-size 256 --tokenizer gpt2
        --data deps/fortunes/en.txt --optimizer adamw --optimizer-state 8bit
        --lr 3e-4 --update-in-backward --eval-every 0 --steps N [--offload all]

in a fresh process under /usr/bin/time -v. The tiered runs (--offload all:
parameters and 8-bit AdamW state in a file in the run directory) run in a
fresh memory cgroup of 1 GiB (gpt2-medium) or 2 GiB (gpt2-large), swap
limited too, WITHOUT --memory: the budget is what memfit reads from the
cgroup. The all-RAM runs are the same command without --offload and without
a cgroup (this machine has the memory). From each: the predicted peak, the
peak RSS (/usr/bin/time), the cgroup's failcnt and OOM kills, the losses,
the warm step time (memfit's warm throughput: steps after the first), the
offload file's size and the bytes the plan reads and writes per step, and
the slowdown of the tiered run against the all-RAM one. GPT-2 medium runs
offloaded twice: with the fit's default, copies moved on the I/O thread one
place of use ahead (overlapping the compute), and with --offload-ahead 0
(each copy made where used, the step waiting for the disk).

PyTorch (bench/.venv from `make bench-venv`) trains bench/torch_text.py's
GPT of GPT-2 medium's shape (24 x 16 x 1024, tied head, fp32, AdamW), one
warm-up and one timed step (bench/gpt2_memory.py's child): once in a fresh
2 GiB cgroup (exit 137 = the OOM killer) and once without a cgroup, for its
peak RSS.

The disk: 1 GiB written then read with O_DIRECT (dd, 1 MiB blocks) in the
run directory's file system, the page cache dropped between.

Writes the table (--out, default bench/offload.md) and the raw rows with
date, CPU and commit to the same name with .jsonl.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_memory as gm  # noqa: E402
from machine import cpu_name  # noqa: E402

HERE, ROOT, GIB = gm.HERE, gm.ROOT, gm.GIB
FLAGS = ["--batch", "1", "--block-size", "256", "--tokenizer", "gpt2", "--optimizer", "adamw", "--optimizer-state",
         "8bit", "--lr", "3e-4", "--update-in-backward", "--eval-every", "0", "--progress", "lines", "--json"]
SHAPES = {"gpt2-medium": "24,16,1024", "gpt2-large": "36,20,1280"}


def disk_bandwidth(directory, mib=1024):
    """(write, read) MB/s of an O_DIRECT file of `mib` MiB in directory (dd)."""
    path = os.path.join(directory, "memfit-bench-disk.bin")
    out = {}
    try:
        for key, cmd in (("write", ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "oflag=direct",
                                    "conv=fsync"]),
                         ("read", ["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"])):
            p = subprocess.run(cmd, capture_output=True, text=True)
            m = re.search(r"copied, ([\d.]+) s", p.stderr)
            out[key + "_mb_per_s"] = mib * 1048576 / 1e6 / float(m.group(1)) if m and p.returncode == 0 else None
            if p.returncode != 0:
                out[key + "_error"] = p.stderr.strip()[-300:]
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return out


def memfit_row(a, model, steps, offload, limit, cg, ahead=None):
    out_dir = tempfile.mkdtemp(prefix=f"offload-{model}-", dir=a.dir)
    cmd = [a.memfit, "train", "--model", model, "--data", a.data, "--steps", str(steps), "--threads", str(a.threads),
           "--out", out_dir] + FLAGS + (["--offload", "all"] if offload else []) + \
        (["--offload-ahead", str(ahead)] if ahead is not None else [])
    where = f"{limit // GIB} GiB cgroup" if cg else "no cgroup (all in RAM)"
    print(f"memfit {model} {'offload all' if offload else 'in RAM'}, {steps} steps, {where} ...", file=sys.stderr,
          flush=True)
    g = gm.Cgroup(cg[0], cg[1], limit) if cg else None
    try:
        r = gm.run_measured(cmd, g)
        stats = g.stats() if g else {}
    finally:
        if g:
            g.close()
    p = gm.parse_memfit(r["stderr"])
    j = gm.last_json(r["stdout"])
    row = {"kind": "memfit", "model": model, "offload": offload, "ahead": ahead, "steps": steps,
           "limit_bytes": limit if cg else None,
           "rc": r["rc"], "exit_status": r["exit_status"], "wall_seconds": r["seconds"],
           "time_max_rss_bytes": r["time_max_rss_bytes"], "cmd": " ".join(cmd), "losses": p["losses"],
           "predicted_bytes": gm.size_bytes(p.get("predicted_text", "")), "budget_text": p.get("budget_text"),
           "budget_source": p.get("budget_source_text"), "plan_text": p["plan_text"]}
    row.update(stats)
    for k in ("peak_rss_bytes", "first_step_seconds", "warm_images_per_second", "tokens_per_second", "final_loss"):
        if k in j:
            row[k] = j[k]
    if j.get("warm_images_per_second"):
        row["warm_step_seconds"] = 1.0 / j["warm_images_per_second"]
    try:
        with open(os.path.join(out_dir, "plan.json")) as f:
            row["tier"] = json.load(f)["report"].get("offload")
    except (OSError, ValueError, KeyError):
        row["tier"] = None
    if r["rc"] != 0:
        row["stderr_tail"] = "\n".join(r["stderr"].splitlines()[-12:])
        print(f"  failed ({r['exit_status']}):\n{row['stderr_tail']}", file=sys.stderr, flush=True)
    else:
        print(f"  {r['seconds']:.0f} s, peak {gm.mib(r['time_max_rss_bytes'])}, warm step "
              f"{row.get('warm_step_seconds', 0):.2f} s", file=sys.stderr, flush=True)
    if not a.keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    return row


def torch_row(a, model, limit, cg):
    cmd = [a.torch_python, os.path.join(HERE, "gpt2_memory.py"), "--torch-case", "fp32", "--torch-steps", "1",
           "--threads", str(a.threads), "--block-size", "256", "--torch-shape", SHAPES[model]]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    print(f"PyTorch {model} AdamW fp32, {'%d GiB cgroup' % (limit // GIB) if cg else 'no cgroup'} ...",
          file=sys.stderr, flush=True)
    g = gm.Cgroup(cg[0], cg[1], limit) if cg else None
    try:
        r = gm.run_measured(cmd, g, env=env)
        stats = g.stats() if g else {}
    finally:
        if g:
            g.close()
    j = gm.last_json(r["stdout"])
    row = {"kind": "torch", "model": model, "limit_bytes": limit if cg else None, "rc": r["rc"],
           "exit_status": r["exit_status"], "time_max_rss_bytes": r["time_max_rss_bytes"], "cmd": " ".join(cmd)}
    row.update(stats)
    row.update({k: j[k] for k in ("torch", "parameters", "losses", "seconds", "peak_rss_bytes") if k in j})
    if r["rc"] != 0:
        row["stderr_tail"] = "\n".join(r["stderr"].splitlines()[-6:])
    print(f"  exit {r['exit_status']}, peak {gm.mib(r['time_max_rss_bytes'])}", file=sys.stderr, flush=True)
    return row


def gib(b):
    return f"{b / GIB:.2f} GiB" if b else ""


def md(meta, rows):
    out = [f"Measured {meta['date']} on {meta['cpu']} ({meta['threads']} threads), commit {meta['commit']}; "
           f"`{meta['command']}`.", "",
           f"Disk (the run directory's file system, O_DIRECT, 1 MiB blocks): write "
           f"{meta['disk'].get('write_mb_per_s') or 0:.0f} MB/s, read {meta['disk'].get('read_mb_per_s') or 0:.0f} MB/s.",
           "",
           "| model | where | predicted peak | measured peak | within limit | loss first → last | warm step | "
           "offload file | read / written per step | slowdown vs RAM |",
           "|---|---|---:|---:|:-:|---|---:|---:|---:|---:|"]
    ram = {r["model"]: r for r in rows if r["kind"] == "memfit" and not r["offload"] and r["rc"] == 0}
    for r in rows:
        if r["kind"] == "memfit":
            where = (f"offload all, {r['limit_bytes'] // GIB} GiB cgroup" if r["limit_bytes"] else
                     ("offload all" if r["offload"] else "all in RAM"))
            if r.get("ahead") == 0:
                where += ", copies made where used (--offload-ahead 0)"
            elif r["offload"]:
                t0 = r.get("tier") or {}
                if t0.get("ahead"):
                    where += f", copies moved {t0['ahead']} ahead"
            within = ""
            if r["limit_bytes"]:
                ok = r["rc"] == 0 and not r.get("cgroup_oom_kills")
                within = ("yes" if ok else f"no (exit {r['exit_status']})")
            l = r["losses"]
            loss = f"{l[0]:.2f} → {l[-1]:.2f} ({r['steps']} steps)" if l else f"exit {r['exit_status']}"
            t = r.get("tier") or {}
            io = f"{gib(t.get('read_per_step'))} / {gib(t.get('written_per_step'))}" if t else ""
            slow = ""
            base = ram.get(r["model"])
            if r["offload"] and base and r.get("warm_step_seconds") and base.get("warm_step_seconds"):
                slow = f"{r['warm_step_seconds'] / base['warm_step_seconds']:.2f}x"
            pred, meas = r.get("predicted_bytes"), r.get("time_max_rss_bytes")
            meas_s = gm.mib(meas) + (f" ({(meas - pred) / pred * 100:+.1f}%)" if pred and meas else "")
            out.append(f"| {r['model']} | {where} | {gm.mib(pred)} | {meas_s} | {within} | {loss} | "
                       f"{r.get('warm_step_seconds') or 0:.2f} s | {gib(t.get('bytes'))} | {io} | {slow} |")
        else:
            where = f"PyTorch fp32 AdamW, {r['limit_bytes'] // GIB} GiB cgroup" if r["limit_bytes"] else \
                "PyTorch fp32 AdamW, no cgroup"
            ok = r["rc"] == 0
            within = ("yes" if ok else f"no (exit {r['exit_status']}{', OOM killed' if r.get('cgroup_oom_kills') else ''})") \
                if r["limit_bytes"] else ""
            l = r.get("losses") or []
            loss = f"{l[0]:.2f} → {l[-1]:.2f}" if l else f"exit {r['exit_status']}"
            step = f"{r['seconds']:.2f} s" if r.get("seconds") else ""
            out.append(f"| {r['model']} | {where} | | {gm.mib(r.get('peak_rss_bytes') or r.get('time_max_rss_bytes'))} "
                       f"| {within} | {loss} | {step} | | | |")
    out.append("")
    out.append("Measured peak: /usr/bin/time's maximum RSS of the process (PyTorch: VmHWM, or time's when killed); "
               "the percentage is against memfit's predicted peak. Warm step: the run's steps after the first. "
               "Slowdown: the tiered run's warm step over the all-RAM run's, same flags, measured in the same "
               "script run.")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memfit", default=os.path.join(ROOT, "build", "memfit"))
    ap.add_argument("--torch-python", default=os.path.join(HERE, ".venv", "bin", "python"))
    ap.add_argument("--steps", type=int, default=50, help="gpt2-medium steps, offloaded (default 50)")
    ap.add_argument("--large-steps", type=int, default=20, help="gpt2-large steps, offloaded (default 20)")
    ap.add_argument("--ram-steps", type=int, default=6, help="steps of each all-RAM run (default 6)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=os.path.join(ROOT, "deps", "fortunes", "en.txt"))
    ap.add_argument("--dir", default=None, help="where the run directories (and offload files) go "
                                                 "(default a temporary directory under build/)")
    ap.add_argument("--only", choices=["memfit", "torch"])
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--out", default=os.path.join(HERE, "offload.md"))
    a = ap.parse_args()
    a.memfit = os.path.abspath(a.memfit)
    if a.only != "torch" and not os.access(a.memfit, os.X_OK):
        sys.exit(f"memfit binary not found at {a.memfit}: build it (make) or pass --memfit PATH")
    if not os.path.exists(a.data):
        sys.exit(f"text not found at {a.data}: run make deps (deps/fortunes) or pass --data")
    made_dir = a.dir is None
    if made_dir:
        os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
        a.dir = tempfile.mkdtemp(prefix="offload-bench-", dir=os.path.join(ROOT, "build"))
    cg = gm.find_cgroup()
    if not cg[0]:
        sys.exit(f"no memory cgroup can be made here ({cg[1]}): the limits are the point of this bench")
    signal.signal(signal.SIGTERM, gm.on_sigterm)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "?"
    meta = {"kind": "meta", "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_name(),
            "threads": a.threads, "commit": commit, "cgroup": cg[0],
            "command": " ".join(["bench/offload.py"] + sys.argv[1:])}
    rows = []
    try:
        meta["disk"] = disk_bandwidth(a.dir)
        print(f"disk: {meta['disk']}", file=sys.stderr, flush=True)
        if a.only != "torch":
            rows.append(memfit_row(a, "gpt2-medium", a.steps, True, GIB, cg))
            rows.append(memfit_row(a, "gpt2-medium", a.ram_steps, True, GIB, cg, ahead=0))
            rows.append(memfit_row(a, "gpt2-medium", a.ram_steps, False, GIB, None))
            rows.append(memfit_row(a, "gpt2-large", a.large_steps, True, 2 * GIB, cg))
            rows.append(memfit_row(a, "gpt2-large", a.ram_steps, False, 2 * GIB, None))
        if a.only != "memfit":
            rows.append(torch_row(a, "gpt2-medium", 2 * GIB, cg))
            rows.append(torch_row(a, "gpt2-medium", 2 * GIB, None))
    finally:
        if made_dir and not a.keep:
            shutil.rmtree(a.dir, ignore_errors=True)
    text = md(meta, rows)
    with open(a.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(a.out)[0] + ".jsonl", "a") as f:
        for r in [meta] + rows:
            f.write(json.dumps(r) + "\n")
    print(text)


if __name__ == "__main__":
    main()
