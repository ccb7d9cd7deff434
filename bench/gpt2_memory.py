#!/usr/bin/python3
"""GPT-2 (124M) training inside 1 GiB: memfit's memory policies, enforced by
a cgroup, against PyTorch's peak for the same model, batch and window.

    /usr/bin/python3 bench/gpt2_memory.py                      (60 memfit steps, 5 PyTorch steps)
    /usr/bin/python3 bench/gpt2_memory.py --steps 3 --torch-steps 2 --out /tmp/gpt2_smoke.md   (a smoke test)
    /usr/bin/python3 bench/gpt2_memory.py --only memfit --no-cgroup

The model is memfit's zoo gpt2 (12 layers, 12 heads, 768 wide, vocabulary
50257, 1024 positions, head tied to the token table: 124,439,808
parameters, no dropout), batch 1, windows of T = 256 tokens of real text
(deps/fortunes/en.txt through GPT-2's BPE, --tokenizer gpt2).

memfit (--memfit, default build/memfit) runs

    memfit train --model gpt2 --batch 1 --block-size 256 --tokenizer gpt2
        --data deps/fortunes/en.txt --steps N --eval-every 0 --memory 1GiB POLICY

for each POLICY: (a) --optimizer adafactor --update-in-backward, (b)
--optimizer adamw --optimizer-state 8bit --update-in-backward --recompute
segments, (c) --optimizer adamw --optimizer-state 8bit --master-weights bf16
--update-in-backward; each in a fresh process under /usr/bin/time -v and, unless
--no-cgroup, in a fresh memory cgroup of 1 GiB (cgroup v1's memory
controller: memory.limit_in_bytes and memory.memsw.limit_in_bytes, so swap
cannot hide an excess; or cgroup v2: memory.max, memory.swap.max 0). Then
each policy runs once more in a fresh 1 GiB cgroup WITHOUT --memory: the
budget is what memfit reads from the container itself, and the plan says
which file (if it does not meet it memfit fits the run, and the row names
the plan it chose). From every run: the printed plan (kept in the Markdown),
predicted peak, losses per step, tokens/s, memfit's own peak RSS (VmHWM),
/usr/bin/time's maximum resident set size, the cgroup's
memory.max_usage_in_bytes (v2: memory.peak), memory.failcnt and its OOM
kills (memory.oom_control / memory.events), and the exit status (137: the
OOM killer). The cgroup's usage counts page cache too (the checkpoint memfit
writes at the end, ~950 MiB for GPT-2, is charged to it and reclaimed under
the limit; failcnt counts those reclaims), so the script also samples the
cgroup's anonymous memory every 50 ms and reports its peak.

PyTorch (--torch-python, default bench/.venv/bin/python from `make
bench-venv`, else /usr/bin/python3) trains bench/torch_text.py's GPT with the
same shape and AdamW (lr 1e-3, weight decay 0.01 on 2-d weights), each case
in a fresh process (this script with --torch-case), not in a cgroup:
 (i)   fp32;
 (ii)  activation checkpointing per block (torch.utils.checkpoint,
       use_reentrant=False) and bf16 autocast on the CPU;
 (iii) (ii) with the optimizer step fused into backward: one AdamW per
       parameter, stepped from its register_post_accumulate_grad_hook
       (PyTorch's documented pattern, torch >= 2.1), so each gradient is
       freed as soon as it is applied.
Gradients are set to None right after every step. Peak RSS: the process's
VmHWM at the end (and ru_maxrss, and /usr/bin/time's); tokens/s over the
timed steps after one warm-up step. Its tokens are memfit tokenize's ids of
the same file (the whole file as one text), random windows of T + 1.

Writes the table (--out, default bench/gpt2_memory.md) and appends the raw
rows, with the date, CPU, versions, threads and load average at the start
and the end, to the same name with .jsonl.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_name  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GIB = 1 << 30
VOCAB = 50257

POLICIES = [
    ("a", "adafactor, update in backward", ["--optimizer", "adafactor", "--update-in-backward"]),
    ("b", "adamw 8bit state, update in backward, recompute segments",
     ["--optimizer", "adamw", "--optimizer-state", "8bit", "--update-in-backward", "--recompute", "segments"]),
    ("c", "adamw 8bit state, bf16 master weights, update in backward",
     ["--optimizer", "adamw", "--optimizer-state", "8bit", "--master-weights", "bf16", "--update-in-backward"]),
]

TORCH_CASES = [
    ("fp32", "(i) AdamW fp32"),
    ("ckpt-bf16", "(ii) AdamW, checkpoint per block + bf16 autocast"),
    ("ckpt-bf16-step-in-backward", "(iii) (ii) + optimizer step in backward (post-accumulate-grad hooks)"),
]


def mib(b):
    return f"{b / 1048576.0:.1f} MiB" if b is not None else ""


def read(path):
    with open(path) as f:
        return f.read()


# ---------------------------------------------------------------------------
# cgroups


def mounts():
    """(mount point, fstype, super options) of every cgroup mount in /proc/self/mountinfo."""
    out = []
    for line in read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], rfields[0], rfields[2].split(",")))
    return out


class Cgroup:
    """A fresh memory cgroup of `limit` bytes; close() removes it."""

    def __init__(self, kind, mount, limit):
        self.kind, self.limit = kind, limit
        self.path = os.path.join(mount, f"memfit-bench-{os.getpid()}-{time.monotonic_ns() % 10**9}")
        os.mkdir(self.path)
        self.notes = []
        try:
            if kind == "v1":
                self._write("memory.limit_in_bytes", limit)
                if os.path.exists(self.file("memory.memsw.limit_in_bytes")):
                    self._write("memory.memsw.limit_in_bytes", limit)
                else:
                    self.notes.append("no memory.memsw.limit_in_bytes: swap is not limited")
            else:
                self._write("memory.max", limit)
                if os.path.exists(self.file("memory.swap.max")):
                    self._write("memory.swap.max", 0)
                else:
                    self.notes.append("no memory.swap.max: swap is not limited")
        except OSError:
            self.close()
            raise
        self.peak_anon = 0
        self._stop = threading.Event()
        self._thread = None

    def file(self, name):
        return os.path.join(self.path, name)

    def _write(self, name, value):
        with open(self.file(name), "w") as f:
            f.write(str(value))

    def wrap(self, cmd):
        """cmd run inside this cgroup: a shell moves itself in, then execs cmd."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', self.file("cgroup.procs")] + cmd

    def _anon(self):
        stat = {}
        for line in read(self.file("memory.stat")).splitlines():
            k, _, v = line.partition(" ")
            stat[k] = int(v) if v.isdigit() else 0
        return stat.get("rss", 0) if self.kind == "v1" else stat.get("anon", 0)

    def start_sampling(self, every=0.05):
        def loop():
            while not self._stop.wait(every):
                try:
                    self.peak_anon = max(self.peak_anon, self._anon())
                except OSError:
                    pass
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop_sampling(self):
        self._stop.set()
        if self._thread:
            self._thread.join()

    def stats(self):
        s = {"cgroup": self.kind, "cgroup_path": self.path, "cgroup_limit_bytes": self.limit,
             "cgroup_peak_anon_sampled_bytes": self.peak_anon, "cgroup_notes": self.notes}
        try:
            if self.kind == "v1":
                s["cgroup_max_usage_bytes"] = int(read(self.file("memory.max_usage_in_bytes")))
                s["cgroup_failcnt"] = int(read(self.file("memory.failcnt")))
                if os.path.exists(self.file("memory.memsw.max_usage_in_bytes")):
                    s["cgroup_memsw_max_usage_bytes"] = int(read(self.file("memory.memsw.max_usage_in_bytes")))
                    s["cgroup_memsw_failcnt"] = int(read(self.file("memory.memsw.failcnt")))
                oom = dict(l.split() for l in read(self.file("memory.oom_control")).splitlines() if l.strip())
                s["cgroup_under_oom"] = int(oom.get("under_oom", 0))
                s["cgroup_oom_kills"] = int(oom.get("oom_kill", 0))
            else:
                if os.path.exists(self.file("memory.peak")):
                    s["cgroup_max_usage_bytes"] = int(read(self.file("memory.peak")))
                ev = dict(l.split() for l in read(self.file("memory.events")).splitlines() if l.strip())
                s["cgroup_failcnt"] = int(ev.get("max", 0))
                s["cgroup_under_oom"] = int(ev.get("oom", 0))
                s["cgroup_oom_kills"] = int(ev.get("oom_kill", 0))
        except (OSError, ValueError) as e:
            s["cgroup_error"] = str(e)
        return s

    def close(self):
        """Removes the cgroup (its processes have ended; v1's page-cache charges go to the parent)."""
        if getattr(self, "_thread", None):
            self.stop_sampling()
        if not os.path.isdir(self.path):
            return
        if self.kind == "v1":
            try:
                self._write("memory.force_empty", 0)
            except OSError:
                pass
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)
        print(f"warning: could not remove cgroup {self.path}", file=sys.stderr)


def find_cgroup():
    """('v1'|'v2', mount) where a memory cgroup can be made, or (None, why not)."""
    why = []
    own = read("/proc/self/cgroup").splitlines()
    v1_memory = any(l.split(":")[1] and "memory" in l.split(":")[1].split(",") for l in own if l.count(":") >= 2)
    for point, fstype, opts in mounts():
        if fstype == "cgroup" and "memory" in opts:
            if os.access(point, os.W_OK) and os.path.exists(os.path.join(point, "memory.limit_in_bytes")):
                return "v1", point
            why.append(f"cgroup v1 memory at {point} is not writable")
    for point, fstype, opts in mounts():
        if fstype == "cgroup2":
            if v1_memory:
                why.append(f"cgroup2 at {point}: the memory controller is on cgroup v1")
                continue
            ctrl = os.path.join(point, "cgroup.controllers")
            if not os.path.exists(ctrl) or "memory" not in read(ctrl).split():
                why.append(f"cgroup2 at {point} has no memory controller")
                continue
            sub = os.path.join(point, "cgroup.subtree_control")
            try:
                if "memory" not in read(sub).split():
                    with open(sub, "w") as f:
                        f.write("+memory")
                return "v2", point
            except OSError as e:
                why.append(f"cgroup2 at {point}: cannot enable memory in {sub} ({e.strerror})")
    return None, "; ".join(why) or "no cgroup mount"


# ---------------------------------------------------------------------------
# running a process


def run_measured(cmd, cgroup=None, env=None):
    """Runs cmd under /usr/bin/time -v (and in cgroup): returns a dict with rc,
    stdout, stderr, seconds, ru_maxrss and time's max RSS and exit status."""
    tfile = tempfile.NamedTemporaryFile(prefix="gpt2mem-time-", delete=False)
    tfile.close()
    full = ["/usr/bin/time", "-v", "-o", tfile.name] + cmd
    if cgroup:
        full = cgroup.wrap(full)
        cgroup.start_sampling()
    r = {"cmd": cmd}
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(full, stdout=out, stderr=err, cwd=ROOT, env=env)
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except BaseException:
            p.kill()
            p.wait()
            raise
        r["seconds"] = time.monotonic() - t0
        r["rc"] = os.waitstatus_to_exitcode(status)
        r["ru_maxrss_bytes"] = ru.ru_maxrss * 1024
        out.seek(0)
        err.seek(0)
        r["stdout"], r["stderr"] = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if cgroup:
        cgroup.stop_sampling()
    tv = read(tfile.name)
    os.unlink(tfile.name)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv)
    r["time_max_rss_bytes"] = int(m.group(1)) * 1024 if m else None
    m = re.search(r"Command terminated by signal (\d+)", tv)
    r["signal"] = int(m.group(1)) if m else None
    m = re.search(r"Exit status: (\d+)", tv)
    r["exit_status"] = int(m.group(1)) if m else None
    if r["signal"]:
        r["exit_status"] = 128 + r["signal"]
    elif r["exit_status"] is None:
        r["exit_status"] = r["rc"]
    r["time_v"] = tv
    return r


def last_json(text):
    lines = [l for l in text.splitlines() if l.startswith("{")]
    try:
        return json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}


def size_bytes(text):
    m = re.match(r"([\d.]+)\s*(B|KiB|MiB|GiB)", text)
    if not m:
        return None
    return int(float(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)])


def parse_memfit(err):
    """From memfit train's stderr: plan text, losses, budget, fit, peak RSS."""
    lines = err.splitlines()
    first_step = next((i for i, l in enumerate(lines) if re.match(r"step \d+/\d+", l)), len(lines))
    p = {"plan_text": "\n".join(lines[:first_step]), "losses": []}
    for l in lines:
        m = re.match(r"step (\d+)/\d+ loss (\S+)", l)
        if m:
            p["losses"].append(float(m.group(2)))
        m = re.match(r"\s*predicted peak\s+(\S+ \S+)", l)
        if m:
            p["predicted_text"] = m.group(1)
        m = re.match(r"\s*budget\s+(\S+ \S+)\s+\((.*)\)", l)
        if m:
            p["budget_text"], p["budget_source_text"] = m.group(1), m.group(2)
        m = re.search(r"the smallest budget that would work is (\S+ \S+)", l)
        if m:
            p["refused_smallest_budget"] = m.group(1)
        m = re.search(r"chosen:\s+(.*)", l)
        if m:
            p["fit_chosen"] = m.group(1).strip()
        m = re.search(r"tokens/s.*peak RSS (\S+ \S+) \(planned (\S+ \S+)\)", l)
        if m:
            p["peak_rss_text"], p["planned_text"] = m.group(1), m.group(2)
        m = re.search(r"([\d.]+) tokens/s", l) if l.startswith("done:") else None
        if m:
            p["tokens_per_second_text"] = float(m.group(1))
        if "warning" in l.lower():
            p.setdefault("warnings", []).append(l.strip())
    return p


# ---------------------------------------------------------------------------
# memfit side


def memfit_run(a, key, label, flags, memory, cg_kind, cg_mount):
    out_dir = tempfile.mkdtemp(prefix=f"gpt2mem-{key}-")
    cmd = [a.memfit, "train", "--model", "gpt2", "--batch", "1", "--block-size", str(a.block_size),
           "--tokenizer", "gpt2", "--data", a.data, "--steps", str(a.steps), "--eval-every", "0",
           "--threads", str(a.threads), "--progress", "lines", "--json", "--out", out_dir] + flags
    if memory:
        cmd += ["--memory", memory]
    cg = Cgroup(cg_kind, cg_mount, GIB) if cg_kind else None
    try:
        print(f"memfit {key}: {label}, {'--memory ' + memory if memory else 'budget from the cgroup'}"
              f"{', in a ' + cg_kind + ' cgroup of 1 GiB' if cg else ''} ...", file=sys.stderr, flush=True)
        r = run_measured(cmd, cg)
        cgs = cg.stats() if cg else {"cgroup": None}
    finally:
        if cg:
            cg.close()
        shutil.rmtree(out_dir, ignore_errors=True)
    j = last_json(r["stdout"])
    p = parse_memfit(r["stderr"])
    row = {"kind": "memfit", "key": key, "policy": label, "flags": flags, "memory_flag": memory,
           "steps": a.steps, "threads": a.threads, "rc": r["rc"], "exit_status": r["exit_status"],
           "seconds": r["seconds"], "ru_maxrss_bytes": r["ru_maxrss_bytes"],
           "time_max_rss_bytes": r["time_max_rss_bytes"], "losses": p["losses"],
           "planned_peak_bytes": j.get("planned_peak_bytes") or size_bytes(p.get("planned_text") or p.get("predicted_text", "")),
           "peak_rss_bytes": j.get("peak_rss_bytes") or size_bytes(p.get("peak_rss_text", "")),
           "budget_bytes": j.get("budget_bytes") or size_bytes(p.get("budget_text", "")),
           "budget_source": p.get("budget_source_text"),
           "tokens_per_second": j.get("tokens_per_second") or p.get("tokens_per_second_text"),
           "fit_chosen": p.get("fit_chosen"), "refused_smallest_budget": p.get("refused_smallest_budget"),
           "warnings": p.get("warnings", []),
           "plan_text": p["plan_text"], "memfit_json": j, "cmd": " ".join(cmd)}
    row.update(cgs)
    if r["rc"] != 0:
        row["stderr_tail"] = "\n".join(r["stderr"].splitlines()[-15:])
        print(f"  exit status {r['exit_status']}:\n{row['stderr_tail']}", file=sys.stderr, flush=True)
    row["oom_killed"] = r["exit_status"] == 137 or bool(cgs.get("cgroup_oom_kills"))
    print(f"  {r['seconds']:.0f} s, losses {p['losses'][:1]}..{p['losses'][-1:]}, VmHWM {mib(row['peak_rss_bytes'])}, "
          f"cgroup max {mib(cgs.get('cgroup_max_usage_bytes'))}", file=sys.stderr, flush=True)
    return row


# ---------------------------------------------------------------------------
# PyTorch side (this script, run by --torch-python with --torch-case)


def torch_compat(torch, torch_text):
    """torch < 2.0/2.1 (Debian's 1.13): LayerNorm(bias=) and scaled_dot_product_attention."""
    import inspect
    notes = []
    nn, F = torch.nn, torch.nn.functional
    if "bias" not in inspect.signature(nn.LayerNorm.__init__).parameters:
        class LayerNorm(nn.LayerNorm):
            def __init__(self, n, bias=True):
                super().__init__(n, elementwise_affine=True)
        import types
        torch_text.nn = types.SimpleNamespace(**{k: getattr(nn, k) for k in dir(nn) if not k.startswith("__")})
        torch_text.nn.LayerNorm = LayerNorm
        notes.append("nn.LayerNorm without bias= (torch < 2.1): shimmed")
    if not hasattr(F, "scaled_dot_product_attention"):
        import math

        def sdpa(q, k, v, dropout_p=0.0, is_causal=False):
            T = q.shape[-2]
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            if is_causal:
                s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            return F.dropout(s.softmax(-1), dropout_p) @ v
        F.scaled_dot_product_attention = sdpa
        notes.append("no F.scaled_dot_product_attention (torch < 2.0): unfused math attention")
    return notes


def vmhwm():
    for line in read("/proc/self/status").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def torch_child(a):
    import array
    import random
    import resource

    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    sys.path.insert(0, HERE)
    import torch_text
    notes = torch_compat(torch, torch_text)
    from torch.utils.checkpoint import checkpoint
    after_import = vmhwm()

    torch.manual_seed(a.seed)
    T, case = a.block_size, a.torch_case
    n_layer, n_head, n_embd = (int(v) for v in a.torch_shape.split(","))
    model = torch_text.GPT(vocab=VOCAB, n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=1024, dropout=0.0)
    assert model.lm_head.weight is model.transformer.wte.weight
    n_params = sum(p.numel() for p in model.parameters())
    model.train()
    ckpt, bf16 = case != "fp32", case != "fp32"
    if ckpt:
        for blk in model.transformer.h:
            blk.forward = (lambda f: lambda x: checkpoint(f, x, use_reentrant=False))(blk.forward)
    lr, wd = 1e-3, 0.01
    if case == "ckpt-bf16-step-in-backward":
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            print(json.dumps({"skipped": f"torch {torch.__version__} has no register_post_accumulate_grad_hook (2.1+)"}))
            return
        opts = {p: torch.optim.AdamW([p], lr=lr, weight_decay=wd if p.dim() >= 2 else 0.0)
                for p in model.parameters()}

        def hook(p):
            opts[p].step()
            opts[p].zero_grad(set_to_none=True)
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(hook)
        opt = None
    else:
        opt = torch.optim.AdamW(torch_text.adamw_groups(model, wd), lr=lr)

    if a.tokens:
        ids = array.array("i")
        with open(a.tokens, "rb") as f:
            ids.frombytes(f.read())
        data = torch.tensor(ids, dtype=torch.long)
        data_note = "memfit tokenize --tokenizer gpt2 ids of the file, random windows"
    else:
        data = torch.randint(0, VOCAB, (1 << 20,))
        data_note = "random ids in [0, 50257) (no tokens)"
    rng = random.Random(a.seed)

    def step():
        s = rng.randrange(0, data.numel() - T - 1)
        w = data[s:s + T + 1]
        x, y = w[:-1].view(1, T), w[1:].view(1, T)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1))
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.item()

    losses = [step()]  # warm-up: the optimizer makes its state
    t0 = time.perf_counter()
    for _ in range(a.torch_steps):
        losses.append(step())
    dt = time.perf_counter() - t0
    print(json.dumps({
        "torch": torch.__version__, "case": case, "parameters": n_params, "threads": torch.get_num_threads(),
        "losses": losses, "timed_steps": a.torch_steps, "seconds": dt,
        "tokens_per_second": a.torch_steps * T / dt if dt > 0 else None,
        "peak_rss_bytes": vmhwm(), "self_ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_after_import_bytes": after_import, "data": data_note, "notes": notes}))


def torch_run(a, case, label, tokens_file):
    cmd = [a.torch_python, os.path.abspath(__file__), "--torch-case", case, "--torch-steps", str(a.torch_steps),
           "--threads", str(a.threads), "--block-size", str(a.block_size), "--seed", str(a.seed)]
    if tokens_file:
        cmd += ["--tokens", tokens_file]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    print(f"PyTorch {label} ...", file=sys.stderr, flush=True)
    r = run_measured(cmd, env=env)
    j = last_json(r["stdout"])
    row = {"kind": "torch", "key": case, "policy": label, "rc": r["rc"], "exit_status": r["exit_status"],
           "wall_seconds": r["seconds"], "ru_maxrss_bytes": r["ru_maxrss_bytes"],
           "time_max_rss_bytes": r["time_max_rss_bytes"], "cmd": " ".join(cmd), "torch_python": a.torch_python}
    row.update(j)
    if r["rc"] != 0 or not j:
        row["stderr_tail"] = "\n".join(r["stderr"].splitlines()[-15:])
        print(f"  failed ({r['exit_status']}):\n{row['stderr_tail']}", file=sys.stderr, flush=True)
    else:
        print(f"  {r['seconds']:.0f} s, VmHWM {mib(j.get('peak_rss_bytes'))}", file=sys.stderr, flush=True)
    return row


def tokenize(a, path):
    """GPT-2 ids of --data as raw int32 in path, from memfit tokenize; False if that fails."""
    import array
    p = subprocess.run([a.memfit, "tokenize", "--tokenizer", "gpt2", a.data], cwd=ROOT, capture_output=True)
    if p.returncode != 0:
        print(f"memfit tokenize failed ({p.returncode}): {p.stderr.decode()[-500:]}; PyTorch gets random ids",
              file=sys.stderr)
        return False
    ids = array.array("i", (int(t) for t in p.stdout.split()))
    with open(path, "wb") as f:
        ids.tofile(f)
    return len(ids)


# ---------------------------------------------------------------------------
# output


def losses_text(r):
    l = r.get("losses") or []
    if not l:
        return ""
    return f"{l[0]:.3f} → {l[-1]:.3f} ({len(l)} steps{', falls' if l[-1] < l[0] else ', does not fall'})"


def md_table(rows, meta):
    out = ["| policy | budget | predicted peak | measured peak (VmHWM) | /usr/bin/time max RSS | cgroup max usage "
           "| cgroup peak anon (sampled) | cgroup failcnt / OOM kills | within 1 GiB | loss first → last | tokens/s |",
           "|---|---|---:|---:|---:|---:|---:|---:|:-:|---|---:|"]
    for r in rows:
        if r["kind"] == "memfit":
            budget = (f"{mib(r['budget_bytes'])} ({r['budget_source']})" if r.get("budget_bytes") else "")
            policy = f"memfit ({r['key']}) {r['policy']}"
            if r.get("fit_chosen"):
                policy += f"; fitted: {r['fit_chosen']}"
            pred = mib(r.get("planned_peak_bytes"))
            if r["rc"] == 3 and not r.get("planned_peak_bytes"):
                m = re.search(r"predicted peak\s+(\S+ \S+)", r.get("plan_text", ""))
                pred = m.group(1) if m else ""
        else:
            budget, pred = "", ""
            policy = f"PyTorch {r.get('torch', '')} {r['policy']}"
            if r.get("rss_after_import_bytes"):
                policy += f" (RSS {mib(r['rss_after_import_bytes'])} after import torch)"
            if r.get("skipped"):
                out.append(f"| {policy} | | | | | | | | | skipped: {r['skipped']} | |")
                continue
        ok_run = r["rc"] == 0 and not r.get("oom_killed")
        peak = r.get("peak_rss_bytes")
        within = "yes" if ok_run and peak and peak <= GIB else ("no (exit %s)" % r["exit_status"] if not ok_run else "no")
        if r["kind"] == "memfit" and r["rc"] == 3:
            within = (f"refused before allocating (exit 3): smallest budget "
                      f"{r.get('refused_smallest_budget') or '?'} + the margin")
        elif r.get("oom_killed"):
            within = f"no: OOM-killed (exit {r['exit_status']})"
        if r.get("cgroup"):
            cmax, canon = mib(r.get("cgroup_max_usage_bytes")), mib(r.get("cgroup_peak_anon_sampled_bytes"))
            cfail = f"{r.get('cgroup_failcnt')} / {r.get('cgroup_oom_kills')}"
        else:
            cmax = canon = cfail = "no cgroup"
        tps = f"{r['tokens_per_second']:.1f}" if r.get("tokens_per_second") else ""
        out.append(f"| {policy} | {budget} | {pred} | {mib(peak)} | {mib(r.get('time_max_rss_bytes'))} | {cmax} "
                   f"| {canon} | {cfail} | {within} | {losses_text(r)} | {tps} |")
    return "\n".join(out)


def write_md(a, meta, rows):
    lines = [f"# GPT-2 124M inside 1 GiB: memfit against PyTorch", "",
             f"`{meta['command']}`", "",
             f"{meta['date']}, {meta['cpu']} ({meta['memfit_cpu'] or '?'}), {meta['cores']} cores, {a.threads} threads "
             f"each; load average {meta['load_start']:.2f} at the start, {meta.get('load_end', 0):.2f} at the end. "
             f"memfit {meta['memfit']} (oneDNN {meta['onednn'] or '?'}), commit {meta['commit']}; "
             f"PyTorch {meta['torch_version'] or 'not run'} ({meta['torch_python']}).", "",
             f"GPT-2 (124,439,808 parameters, vocabulary 50257, head tied), batch 1, T {a.block_size}, "
             f"{a.data} with GPT-2's BPE; memfit {a.steps} steps (`--eval-every 0`, then its checkpoint), "
             f"PyTorch 1 warm-up + {a.torch_steps} timed steps.", ""]
    for n in meta["notes"]:
        lines.append(f"- {n}")
    lines += ["", md_table(rows, meta), ""]
    mrows = [r for r in rows if r["kind"] == "memfit"]
    if mrows:
        lines += ["## The plans memfit printed", ""]
        for r in mrows:
            lines += [f"memfit ({r['key']}) {r['policy']}, "
                      f"{'--memory ' + r['memory_flag'] if r['memory_flag'] else 'no --memory (the cgroup limit)'}:",
                      "", "```", f"$ {r['cmd']}", r["plan_text"], "```", ""]
            if r.get("warnings"):
                lines += ["warnings: " + "; ".join(r["warnings"]), ""]
    with open(a.out, "w") as f:
        f.write("\n".join(lines))


def on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memfit", default=os.path.join(ROOT, "build", "memfit"), help="memfit binary (default build/memfit)")
    default_torch = os.path.join(HERE, ".venv", "bin", "python")
    ap.add_argument("--torch-python", default=None,
                    help="interpreter with PyTorch (default bench/.venv/bin/python, else /usr/bin/python3)")
    ap.add_argument("--steps", type=int, default=60, help="memfit steps per run (default 60)")
    ap.add_argument("--torch-steps", type=int, default=5, help="PyTorch timed steps after 1 warm-up (default 5)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--data", default="deps/fortunes/en.txt")
    ap.add_argument("--only", choices=["memfit", "torch"])
    ap.add_argument("--no-cgroup", action="store_true", help="run memfit without a cgroup")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default=os.path.join(HERE, "gpt2_memory.md"), help="Markdown table (and .jsonl beside it)")
    ap.add_argument("--torch-case", help=argparse.SUPPRESS)
    ap.add_argument("--tokens", help=argparse.SUPPRESS)
    # layers,heads,width of the PyTorch child's GPT (bench/offload.py: GPT-2 medium and large)
    ap.add_argument("--torch-shape", default="12,12,768", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_case:
        return torch_child(a)

    notes = []
    if a.torch_python is None:
        ok = os.path.exists(default_torch) and subprocess.run(
            [default_torch, "-c", "import torch"], capture_output=True).returncode == 0
        a.torch_python = default_torch if ok else "/usr/bin/python3"
        if not ok:
            notes.append(f"{default_torch} has no working PyTorch (`make bench-venv`): PyTorch is Debian's "
                         "/usr/bin/python3, torch 1.13, with shims for LayerNorm(bias=) and attention")
    if not os.path.isabs(a.data):
        a.data = os.path.join(ROOT, a.data) if not os.path.exists(a.data) else os.path.abspath(a.data)
    a.memfit = os.path.abspath(a.memfit)
    if a.only != "torch" and not os.access(a.memfit, os.X_OK):
        sys.exit(f"memfit binary not found at {a.memfit}: build it (make) or pass --memfit PATH")
    if not os.path.exists(a.data):
        sys.exit(f"text not found at {a.data}: run make deps (deps/fortunes) or pass --data")
    jsonl = os.path.splitext(a.out)[0] + ".jsonl"

    meta = {"kind": "meta", "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_name(),
            "cores": os.cpu_count(), "threads": a.threads, "load_start": os.getloadavg()[0],
            "command": " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0].startswith(ROOT) else sys.argv[0]] + sys.argv[1:]),
            "memfit": a.memfit, "memfit_cpu": None, "onednn": None, "torch_python": a.torch_python,
            "torch_version": None, "python": platform.python_version(), "kernel": platform.release(), "notes": notes}
    try:
        meta["commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip() or "?"
    except OSError:
        meta["commit"] = "?"
    if a.only != "torch":
        j = last_json(subprocess.run([a.memfit, "plan", "--json"], cwd=ROOT, capture_output=True, text=True).stdout)
        meta["memfit_cpu"] = j.get("cpu", {}).get("model")
        meta["onednn"] = f"{j.get('cpu', {}).get('onednn', '?')} {j.get('cpu', {}).get('onednn_isa', '')}".strip()

    rows = []
    # SIGTERM unwinds like Ctrl-C, so that a cgroup made here is removed.
    signal.signal(signal.SIGTERM, on_sigterm)
    if a.only != "torch":
        cg_kind, cg_mount = (None, "--no-cgroup") if a.no_cgroup else find_cgroup()
        if cg_kind:
            notes.append(f"each memfit run in a fresh cgroup {cg_kind} under {cg_mount} limited to 1 GiB "
                         "(swap too); its max usage counts page cache (the checkpoint written at the end), "
                         "the sampled anon peak does not")
        else:
            notes.append(f"memfit runs WITHOUT a cgroup ({cg_mount}): the 1 GiB is memfit's own --memory only")
        for key, label, flags in POLICIES:
            rows.append(memfit_run(a, key, label, flags, "1GiB", cg_kind, cg_mount))
        if cg_kind:
            for key, label, flags in POLICIES:
                rows.append(memfit_run(a, key, label, flags, None, cg_kind, cg_mount))
    if a.only != "memfit":
        tok = tempfile.NamedTemporaryFile(prefix="gpt2mem-tokens-", delete=False)
        tok.close()
        try:
            n = tokenize(a, tok.name) if os.access(a.memfit, os.X_OK) else False
            if not n:
                notes.append("PyTorch trains on random ids in [0, 50257): memfit tokenize was not available")
            for case, label in TORCH_CASES:
                rows.append(torch_run(a, case, label, tok.name if n else None))
        finally:
            os.unlink(tok.name)
        tv = next((r.get("torch") for r in rows if r.get("torch")), None)
        meta["torch_version"] = tv
        tnotes = next((r.get("notes") for r in rows if r.get("notes")), None)
        if tnotes:
            notes.extend(f"PyTorch: {n}" for n in tnotes)
    meta["load_end"] = os.getloadavg()[0]
    with open(jsonl, "a") as f:
        f.write(json.dumps(meta) + "\n")
        for r in rows:
            f.write(json.dumps(dict(r, date=meta["date"])) + "\n")
    write_md(a, meta, rows)
    print(md_table(rows, meta))
    print(f"\nwrote {a.out} and {jsonl}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
