#!/usr/bin/python3
"""memfit against PyTorch on this machine, side by side, in one command:

    make bench                       (or: /usr/bin/python3 bench/run.py)
    /usr/bin/python3 bench/run.py --quick --build build-perf
    /usr/bin/python3 bench/run.py --torch-python /usr/bin/python3   (Debian's PyTorch 1.13)
    /usr/bin/python3 bench/run.py --models gpt-char,lstm-classifier --no-readme --out bench/results_text.md
    /usr/bin/python3 bench/run.py --isa avx2     (an AVX-512 CPU limited to AVX2 on both sides)

PyTorch is the current release from PyPI, in the virtual environment
bench/.venv that `make bench` makes (`make bench-venv`); --torch-python
picks another interpreter.

For every case it starts memfit (build/bench/step_bench) and PyTorch
(bench/torch_step.py, PyTorch's bf16 is autocast) each in a fresh process
with the same model, batch, optimizer, random data and thread count:
 - ConvNet and ResNet-18 on 1x28x28 inputs, batch 64 and 256, fp32 and
   bf16; SGD momentum 0.9, weight decay 5e-4; in images/s;
 - gpt-char (6 layers, 6 heads, 384 wide, dropout 0.2; PyTorch's is
   bench/torch_text.py's GPT) at batch 16 on 256 random tokens of 65 values,
   AdamW lr 1e-3, weight decay 0.1 on 2-d weights only; in tokens/s; and
   again without dropout (--dropout 0 on both sides: PyTorch's attention
   then takes its fused flash kernel);
 - gpt2 (GPT-2 small, 124M, no dropout) at batch 4 on 256 random tokens of
   50257 values, the same AdamW;
 - lstm-classifier (embedding 64, LSTM 32, 4 classes) at batch 64 on 128
   random tokens of 5000 values, Adam lr 1e-3; in sequences/s;
the text models in fp32 only (memfit's bf16 activations for token models
are new and not yet measured against PyTorch's autocast). --models picks
some of the models.
After both have warmed up, their timed steps
alternate one by one (memfit, PyTorch, memfit, ...), each side idle while the
other runs, so that both see the same machine: on a shared machine the load
changes within seconds, and alternating whole runs would compare different
loads. The models whose steps take milliseconds (ConvNet, the LSTM) take
turns of TURN_STEPS steps back to back, as training runs them: a step run
alone after the 50 ms pause that lets the other side's threads go to sleep
pays for waking its own (on a 2-core VM the LSTM's 4-5 ms step took 6-10 ms
that way, PyTorch's 7.7 ms 11 ms), which is not the step's cost. This is repeated --reps times with fresh processes (alternating which
side starts); each repetition gives each side's median step, and the table
shows the median over repetitions. It
measures the machine's peak FLOP/s (best large oneDNN matmul, f32 and bf16)
and gives each case's training FLOP/s as a fraction of it (FLOPs of the
convolution, linear, matmul, attention and LSTM products, forward and
backward, counted from memfit's graph; both frameworks run the same
products, except that memfit's causal attention counts only the scores
under the mask).

Writes bench/results_KIND.md (and the raw numbers as bench/results_KIND.jsonl),
KIND being this CPU's kind (bench/machine.py: vendor and widest vector ISA,
e.g. amd-avx2 for Zen 3, amd-avx512 for Zen 4/5, intel-amx for a Xeon with
AMX), and replaces that kind's table in README.md between its bench markers,
adding a table for a kind seen for the first time (not with --quick, --models
or --no-readme: the README keeps the table of every case, one per CPU kind).

--isa avx2 measures an AVX2 CPU's paths on a CPU with AVX-512: memfit's
engine built for x86-64-v3 (build/bench/step_bench_v3) with oneDNN limited
to AVX2 (ONEDNN_MAX_CPU_ISA), PyTorch with its own kernels, its oneDNN and
MKL limited the same way (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS; the run stops if PyTorch reports another ISA). Its
table is the kind's with "-as-avx2" added: the same cores, caches and
memory as an AVX2 CPU of two FMA units would have, not a Zen 3's.

Where a case's time goes: step_bench's --profile prints the per-op kind and
per-layer tables of its timed steps (not run here: timing each kernel slows
the step it measures), e.g.

    build/bench/step_bench --model gpt-char --batch 16 --steps 3 --warmup 1 --threads 2 --profile
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_PY = os.path.join(HERE, ".venv", "bin", "python")  # current PyTorch from PyPI (make bench-venv)

# (model, batch, timed steps, warm-up steps[, variant]): ResNet-18 at batch
# 256 and the GPTs take seconds per step on two cores, so they get fewer.
# The optimizers' first step makes their state, so every case warms up. A
# variant names flags both sides take (VARIANTS).
CASES = [
    ("convnet", 64, 10, 2),
    ("convnet", 256, 5, 1),
    ("resnet18", 64, 4, 1),
    ("resnet18", 256, 2, 1),
    ("gpt-char", 16, 5, 2),
    ("gpt-char", 16, 5, 2, "no dropout"),
    ("gpt2", 4, 3, 1),
    ("lstm-classifier", 64, 10, 2),
]
# Without dropout PyTorch's CPU scaled_dot_product_attention takes its fused
# flash kernel; with it, its unfused math path: the GPT rows give both.
VARIANTS = {"": [], "no dropout": ["--dropout", "0"]}
QUICK = [("convnet", 64, 10, 2), ("resnet18", 64, 3, 1), ("lstm-classifier", 64, 10, 2)]

# The text models: the data both sides get (the same flags) and the unit of
# their rate (step_bench's and torch_step.py's tokens_per_s, or images_per_s,
# which is samples/s). They run in fp32 only (the docstring says why).
TEXT = {
    "gpt-char": (["--seq", "256", "--vocab", "65"], "tokens_per_s", "tokens/s"),
    "gpt2": (["--seq", "256"], "tokens_per_s", "tokens/s"),
    "lstm-classifier": (["--seq", "128", "--vocab", "5000", "--classes", "4"], "images_per_s", "seq/s"),
}


def unit_of(model):
    """The JSON field of a model's rate and its unit in the table."""
    return TEXT[model][1:] if model in TEXT else ("images_per_s", "img/s")


# Steps per turn for the models with steps of milliseconds (the docstring
# says why); every other model alternates step by step.
TURN_STEPS = {"convnet": 5, "lstm-classifier": 5}


def turns_txt(models):
    """The table's note on the turns of TURN_STEPS steps ("" if none ran)."""
    turns = [f"{m}'s in turns of {n} back to back" for m, n in TURN_STEPS.items() if m in models]
    return (" (" + ", ".join(turns) + ": steps of milliseconds)") if turns else ""


def interleaved(cmds, steps, env, optional=(), turn=1):
    """Runs the --serve processes of cmds (in that order) `turn` steps at a
    time, alternating; returns each one's final JSON (or its unsupported notice).
    A command whose index is in `optional` (a baseline build older than a
    case's model or flags) that fails before it is ready is reported as
    unsupported instead of ending the run."""
    procs, results = [], [None] * len(cmds)
    for i, cmd in enumerate(cmds):
        p = subprocess.Popen(cmd + ["--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        line = p.stdout.readline().strip()
        if line != "ready":
            out, err = p.communicate()
            if (p.returncode != 0 or not (line + out).strip()) and i in optional:
                results[i] = {"supported": False, "error": err[-500:]}
                continue
            if p.returncode != 0 or not (line + out).strip():
                raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-2000:]}")
            results[i] = json.loads((line + "\n" + out).strip().splitlines()[-1])
            continue
        procs.append((i, p))
    for first in range(0, steps, turn):
        for i, p in procs:
            time.sleep(0.05)  # let the other side's idle threads go to sleep
            for _ in range(min(turn, steps - first)):
                p.stdin.write("step\n")
                p.stdin.flush()
                if not p.stdout.readline().strip():
                    raise SystemExit(f"{' '.join(cmds[i])} stopped: {p.stderr.read()[-2000:]}")
    for i, p in procs:
        out, err = p.communicate("quit\n")
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmds[i])} failed ({p.returncode}):\n{err[-2000:]}")
        results[i] = json.loads(out.strip().splitlines()[-1])
    return results


def run_json(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def cpu_model(peak):
    """The processor as memfit names it (with family and model), its cores,
    and the vector extensions that decide the paths."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    break
    except OSError:
        pass
    feats = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    name = peak.get("cpu") or platform.processor() or "unknown"
    return f"{name}, {os.cpu_count()} cores ({', '.join(feats) or 'no avx2'})"


def flops_txt(v):
    return f"{v / 1e9:.0f} GFLOP/s" if isinstance(v, (int, float)) else str(v)


def fmt_bytes(b):
    return f"{b / 2**20:.0f} MiB"


def rate_txt(v, unit):
    """A rate in the table: img/s to a tenth, as ever; tokens/s and seq/s in the thousands, whole."""
    return f"{v:.1f}" if unit == "img/s" else f"{v:.0f}"


def replace_table(text, table, kind):
    """text (README.md) with the table of CPU kind `kind` between its bench
    markers replaced; a kind without a table yet gets one after the last
    kind's. None where the README has no bench markers at all."""
    begin, end = f"<!-- bench:begin {kind} -->", f"<!-- bench:end {kind} -->"
    block = f"{begin}\n**{machine.cpu_kind_label(kind)}**\n\n{table}{end}"
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        return pre + block + rest.split(end, 1)[1]
    ends = list(re.finditer(r"<!-- bench:end [^>]* -->", text))
    if not ends:
        return None
    at = ends[-1].end()
    return text[:at] + "\n\n" + block + text[at:]


def setup_txt(models):
    """The optimizers and data of the models in the table."""
    parts = []
    if any(m not in TEXT for m in models):
        parts.append("CNNs: SGD momentum 0.9, weight decay 5e-4, random 1x28x28 data")
    if "gpt-char" in models:
        parts.append("gpt-char: AdamW lr 1e-3, betas 0.9/0.999, weight decay 0.1 on 2-d weights only, dropout 0.2 "
                     "(or none: `--dropout 0` on both sides), random tokens (T 256, 65 values), in tokens/s (PyTorch: "
                     "bench/torch_text.py's GPT-2 architecture, causal F.scaled_dot_product_attention, which with "
                     "dropout runs PyTorch's unfused math path on the CPU, without it its fused flash kernel)")
    if "gpt2" in models:
        parts.append("gpt2: GPT-2 small (124M, no dropout, so PyTorch's flash attention), the same AdamW, random "
                     "tokens (T 256, 50257 values), in tokens/s")
    if "lstm-classifier" in models:
        parts.append("lstm-classifier: Adam lr 1e-3, random tokens (T 128, 5000 values), 4 classes, in sequences/s "
                     "(PyTorch: nn.Embedding, nn.LSTM, nn.Linear)")
    return "; ".join(parts) + "."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="memfit build directory (default build/)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="ConvNet, ResNet-18 and the LSTM classifier at batch 64 only, fewer steps")
    ap.add_argument("--models", default=None,
                    help="only these models' cases (comma-separated: convnet,resnet18,gpt-char,gpt2,lstm-classifier)")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--isa", choices=("native", "avx2"), default="native",
                    help="avx2: both sides limited to AVX2 on this AVX-512 CPU (memfit's x86-64-v3 build)")
    pre, _ = ap.parse_known_args()
    kind = machine.cpu_kind() + ("-as-avx2" if pre.isa == "avx2" else "")
    ap.add_argument("--out", default=os.path.join(HERE, f"results_{kind}.md"),
                    help=f"the table's file (default bench/results_KIND.md, here results_{kind}.md)")
    ap.add_argument("--no-readme", action="store_true", help="do not update README.md")
    ap.add_argument("--baseline-build", default=None,
                    help="a second memfit build (an earlier commit): its step_bench joins the interleaved steps and "
                         "the table gives its img/s and the ratio to this build (regression check in the same run)")
    ap.add_argument("--torch-python", default=TORCH_PY,
                    help="the Python whose PyTorch is measured (default bench/.venv/bin/python, from make bench-venv)")
    a = ap.parse_args()
    if not os.path.exists(a.torch_python):
        raise SystemExit(f"{a.torch_python} not found: make bench-venv installs PyTorch from PyPI into bench/.venv")

    limit = {}
    if a.isa == "avx2":
        if machine.cpu_kind().endswith("-avx2"):
            raise SystemExit("--isa avx2: this CPU has no more than AVX2; run without --isa")
        limit = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    memfit = os.path.join(a.build, "bench", "step_bench" + ("_v3" if a.isa == "avx2" else ""))
    if not os.path.exists(memfit):
        raise SystemExit(f"{memfit} not found: build first (make build, or pass --build DIR)")
    baseline = os.path.join(a.baseline_build, "bench", "step_bench") if a.baseline_build else None
    if baseline and not os.path.exists(baseline):
        raise SystemExit(f"{baseline} not found: build the baseline's step_bench first")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), **limit)
    t = str(a.threads)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores", flush=True)

    def measure_peak(old=None):
        # The best of this and any earlier measurement: on a shared machine a
        # single one may catch a busy moment.
        p = run_json([memfit, "--peak", "--threads", t], env)
        # bf16 is a string ("not supported on this CPU") where oneDNN has no bf16 compute.
        if old:
            for k in ("peak_fp32_flops", "peak_bf16_flops"):
                if isinstance(p[k], (int, float)) and isinstance(old[k], (int, float)):
                    p[k] = max(p[k], old[k])
        print(f"peak: fp32 {flops_txt(p['peak_fp32_flops'])}, bf16 {flops_txt(p['peak_bf16_flops'])} "
              f"(oneDNN {p['onednn']}, {p['isa']}; memfit loops {p.get('vector_isa', '?')})", flush=True)
        return p

    peak = measure_peak()

    cases = QUICK if a.quick else CASES
    if a.models:
        picked = a.models.split(",")
        known = {c[0] for c in CASES}
        if not set(picked) <= known:
            raise SystemExit(f"--models: unknown {', '.join(sorted(set(picked) - known))}; the cases' models are "
                             f"{', '.join(sorted(known))}")
        cases = [c for c in cases if c[0] in picked]
    precisions = a.precisions.split(",")
    rows, raw, flops_of = [], [], {}
    torch_info = {}
    for model, batch, steps, warmup, *more in cases:
        variant = more[0] if more else ""
        for prec in precisions:
            if model in TEXT and prec != "fp32":
                continue
            common = ["--model", model, "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
                      "--threads", t, "--precision", prec] + (TEXT[model][0] if model in TEXT else []) + VARIANTS[variant]
            mf_cmd = [memfit] + common
            pt_cmd = [a.torch_python, os.path.join(HERE, "torch_step.py")] + common
            cmds = [mf_cmd, pt_cmd] + ([[baseline] + common] if baseline else [])
            key, unit = unit_of(model)
            mf, pt, base = [], [], []
            for r in range(a.reps):
                # Rotate which side starts each repetition.
                order = [(r + i) % len(cmds) for i in range(len(cmds))]
                res = interleaved([cmds[i] for i in order], steps, env, optional={order.index(2)} if baseline else (),
                                  turn=TURN_STEPS.get(model, 1))
                got = {i: res[k] for k, i in enumerate(order)}
                mf.append(got[0])
                pt.append(got[1])
                raw.append(got[0] | {"framework": "memfit", "rep": r, "variant": variant})
                raw.append(got[1] | {"framework": "pytorch", "rep": r, "variant": variant})
                if baseline:
                    base.append(got[2])
                    raw.append(got[2] | {"framework": "memfit-baseline", "rep": r})
            torch_info = {"torch": pt[0]["torch"], "onednn": pt[0]["onednn"], "blas": pt[0].get("blas", "unknown"),
                          "isa": pt[0].get("cpu_capability", "unknown")}
            if limit and torch_info["isa"] != "AVX2":
                raise SystemExit(f"--isa avx2: PyTorch ran its kernels for {torch_info['isa']}, not AVX2")
            if mf[0].get("supported"):
                flops_of[(model, batch, variant)] = mf[0]["step_flops"]

            def med(rs, key):
                return statistics.median(x[key] for x in rs) if rs and rs[0].get("supported") else None

            # *_ips: the case's rate in its unit (img/s, tokens/s or seq/s).
            row = {"model": model, "batch": batch, "variant": variant, "precision": prec, "unit": unit,
                   "mf_ips": med(mf, key), "pt_ips": med(pt, key),
                   "mf_step": med(mf, "median_step_s"), "pt_step": med(pt, "median_step_s"),
                   "mf_rss": med(mf, "peak_rss_bytes"), "pt_rss": med(pt, "peak_rss_bytes"),
                   "base_ips": med(base, key)}
            rows.append(row)
            mf_txt = f"{row['mf_ips']:8.1f} {unit}" if row["mf_ips"] else "not supported"
            base_txt = f", baseline {row['base_ips']:8.1f} {unit}" if row["base_ips"] else ""
            print(f"{model + (' ' + variant if variant else ''):15s} {batch:4d} {prec}: memfit {mf_txt}, PyTorch {row['pt_ips']:8.1f} {unit}{base_txt}",
                  flush=True)
            if base and not base[0].get("supported"):
                why = (base[0].get("error") or "").strip().splitlines()
                print(f"  the baseline build does not run this case: {why[-1] if why else 'no reason given'}", flush=True)

    peak = measure_peak(peak)
    load_end = os.getloadavg()[0]
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    cpu = cpu_model(peak)
    lines = [
        f"Measured {now} on {cpu} (kind {kind}), {a.threads} threads each; load average {load:.1f} at the start, "
        f"{load_end:.1f} at the end. Command: `" + ' '.join(['/usr/bin/python3 bench/run.py'] + sys.argv[1:]) + "`.",
        ("Both sides limited to AVX2 on this CPU (`--isa avx2`: memfit's x86-64-v3 build, ONEDNN_MAX_CPU_ISA=AVX2, "
         "ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2). " if limit else "") +
        f"PyTorch {torch_info.get('torch')} (oneDNN {torch_info.get('onednn')}, its kernels for "
        f"{torch_info.get('isa')}); memfit with oneDNN {peak['onednn']} "
        f"({peak['isa']}, {'bf16 compute' if peak.get('bf16_compute') else 'no bf16 compute'}), its own loops "
        f"built for {peak.get('vector_isa', '?')}. Machine peak (best oneDNN matmul, {a.threads} threads): fp32 "
        f"{flops_txt(peak['peak_fp32_flops'])}, bf16 {flops_txt(peak['peak_bf16_flops'])}.",
        f"Median of {a.reps} repetitions, each a fresh pair of processes whose timed steps alternate one by one"
        + turns_txt({r["model"] for r in rows}) + "; "
        f"{setup_txt([r['model'] for r in rows])} PyTorch bf16 is autocast; memfit bf16 stores "
        "activations in bf16 with fp32 master weights (its convolutions run in bf16 or as f32 between conversions, "
        f"whichever this CPU runs faster: {peak.get('bf16_convs', '?')}). PyTorch's fp32 linear layers run on the BLAS it was built with (BLAS_INFO="
        f"{torch_info.get('blas')}), its convolutions on oneDNN.",
        "",
        "| case | unit | memfit | PyTorch | speed ratio | memfit step | PyTorch step "
        "| memfit peak RSS | PyTorch peak RSS | RSS ratio | memfit % of peak | PyTorch % of peak |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    # The fraction of peak needs the FLOPs, which come from memfit's fp32 run.
    for r in rows:
        flops = flops_of.get((r["model"], r["batch"], r["variant"]))
        pk = peak["peak_bf16_flops"] if r["precision"] == "bf16" else peak["peak_fp32_flops"]
        if not isinstance(pk, (int, float)):  # no bf16 compute here: the products run in f32
            pk = peak["peak_fp32_flops"]
        # memfit's bf16 convolutions compute in f32 where that is faster (the
        # header says which): then its fraction is of the fp32 peak.
        mf_pk = peak["peak_fp32_flops"] if peak.get("bf16_convs", "").startswith("f32") else pk
        for side, p_ in (("mf", mf_pk), ("pt", pk)):
            r[f"{side}_frac"] = flops / r[f"{side}_step"] / p_ if (flops and r[f"{side}_step"]) else None
    pct = lambda f: f"{100 * f:.0f}%" if f else ""  # noqa: E731
    for r in rows:
        case = f"{r['model']} b{r['batch']} {r['precision']}" + (f", {r['variant']}" if r["variant"] else "")
        if r["mf_ips"] is None:
            lines.append(f"| {case} | {r['unit']} | not yet supported | {rate_txt(r['pt_ips'], r['unit'])} | | | "
                         f"{r['pt_step'] * 1e3:.0f} ms | | {fmt_bytes(r['pt_rss'])} | | | {pct(r['pt_frac'])} |")
            continue
        lines.append(
            f"| {case} | {r['unit']} | {rate_txt(r['mf_ips'], r['unit'])} | {rate_txt(r['pt_ips'], r['unit'])} "
            f"| **{r['mf_ips'] / r['pt_ips']:.2f}x** "
            f"| {r['mf_step'] * 1e3:.0f} ms | {r['pt_step'] * 1e3:.0f} ms | {fmt_bytes(r['mf_rss'])} "
            f"| {fmt_bytes(r['pt_rss'])} | {r['mf_rss'] / r['pt_rss']:.2f} "
            f"| {pct(r['mf_frac'])} | {pct(r['pt_frac'])} |")
    if baseline:
        lines += ["", f"Against the baseline build {a.baseline_build}, in the same interleaved steps:", "",
                  "| case | unit | memfit | baseline | this / baseline |", "|---|---|---:|---:|---:|"]
        for r in rows:
            if r["mf_ips"] and r["base_ips"]:
                lines.append(f"| {r['model']} b{r['batch']} {r['precision']}{', ' + r['variant'] if r['variant'] else ''} | {r['unit']} | {rate_txt(r['mf_ips'], r['unit'])} | "
                             f"{rate_txt(r['base_ips'], r['unit'])} | {r['mf_ips'] / r['base_ips']:.3f} |")
    table = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write("# memfit vs PyTorch, training speed and memory\n\n"
                "Written by `bench/run.py` (`make bench`).\n\n" + table)
    with open(os.path.splitext(a.out)[0] + ".jsonl", "w") as f:
        f.write(json.dumps({"peak": peak, "cpu": cpu, "cpu_kind": kind, "cpu_fields": {
            k: v for k, v in machine.cpu_fields().items() if k in ("vendor_id", "cpu family", "model", "model name")},
            "date": now, "load": load, "isa": a.isa, "torch_isa": torch_info.get("isa"), "command": " ".join(sys.argv)}) + "\n")
        for r in raw:
            f.write(json.dumps(r) + "\n")
    print("\n" + table)
    print(f"wrote {a.out}")

    readme = os.path.join(ROOT, "README.md")
    if a.quick or a.models or a.no_readme or not os.path.exists(readme):
        return
    text = replace_table(open(readme).read(), table, kind)
    if text is not None:
        with open(readme, "w") as f:
            f.write(text)
        print(f"updated the {kind} table in {readme}")


if __name__ == "__main__":
    sys.exit(main())
