"""Plan: the memory plan of a run, as `memfit plan --json` gives it."""
import html
import json

from . import _memfit

# The classes in the order the command's table lists them; the arena's
# parts (what is live at its peak) follow it, indented.
_CLASSES = ["baseline", "parameters", "gradients", "optimizer_state", "activations_arena", "library_heap",
            "inputs", "arena_rounding", "data_pipeline", "evaluation"]
_ARENA_PARTS = ["saved_activations", "transient_activations", "arena_gradients", "kernel_scratch", "fragmentation"]


class Plan:
    """The predicted peak, by class, against the budget, before step one.

    .peak_bytes, .budget_bytes, .fits, .by_class ([{class, bytes, part_of}]),
    .largest (the largest activation buffers: name, layer, kind, bytes),
    .policy (micro-batch, accumulation, recomputation, precisions, optimizer
    state, where the data lives: what the fit chose, or what was asked),
    .json (the command's whole JSON object) and .text (what the command
    prints). str() is that text; in a notebook it shows as a table.
    """

    def __init__(self, json_text, log):
        self.json = json.loads(json_text)
        j = self.json
        self.peak_bytes = int(j["total_bytes"])
        self.budget_bytes = int(j["budget_bytes"])
        self.budget_source = j.get("budget_source", "")
        self.fits = self.peak_bytes <= self.budget_bytes
        by = j["by_class"]
        names = [c for c in _CLASSES if c in by] + [c for c in by if c not in _CLASSES and c not in _ARENA_PARTS]
        self.by_class = []
        for c in names:
            self.by_class.append({"class": c, "bytes": int(by[c])})
            if c == "activations_arena":
                self.by_class += [{"class": p, "bytes": int(by[p]), "part_of": c} for p in _ARENA_PARTS if p in by]
        self.largest = [dict(b) for b in j.get("largest", [])]
        self.policy = {k: j[k] for k in ("micro_batch", "accumulate", "recompute", "update_in_backward", "fitted",
                                         "precision", "saved_precision", "master_weights", "accumulated_grads", "data_in")
                       if k in j}
        if "optimizer_state" in j:
            self.policy["optimizer_state"] = j["optimizer_state"]["policy"]
        self.text = log + self._largest_text()

    def _largest_text(self):
        lines = ["largest buffers:"]
        for b in self.largest:
            size = _memfit.format_bytes(int(b["bytes"]))
            lines.append(f"  {size:>12}  {b['kind']:<9} {b['layer']} ({b['name']})")
        return "\n".join(lines) + "\n"

    def __str__(self):
        return self.text

    def __repr__(self):
        fmt = _memfit.format_bytes
        return (f"<memfit.Plan peak {fmt(self.peak_bytes)} of budget {fmt(self.budget_bytes)}: "
                f"{'fits' if self.fits else 'over budget'}>")

    def _repr_html_(self):
        fmt = _memfit.format_bytes
        e = html.escape
        verdict = "fits" if self.fits else "<b>over budget</b>"
        rows = []
        for c in self.by_class:
            indent = "&nbsp;&nbsp;&nbsp;&nbsp;" if c.get("part_of") else ""
            share = f"{100.0 * c['bytes'] / self.peak_bytes:.1f}%" if self.peak_bytes and not c.get("part_of") else ""
            rows.append(f"<tr><td style='text-align:left'>{indent}{e(c['class'].replace('_', ' '))}</td>"
                        f"<td style='text-align:right'>{e(fmt(c['bytes']))}</td>"
                        f"<td style='text-align:right'>{share}</td></tr>")
        rows.append(f"<tr><td style='text-align:left'><b>predicted peak</b></td>"
                    f"<td style='text-align:right'><b>{e(fmt(self.peak_bytes))}</b></td><td></td></tr>")
        policy = ", ".join(f"{e(str(k).replace('_', ' '))} {e(str(v))}" for k, v in self.policy.items())
        largest = "".join(
            f"<tr><td style='text-align:right'>{e(fmt(int(b['bytes'])))}</td><td style='text-align:left'>"
            f"{e(b['kind'])}</td><td style='text-align:left'>{e(b['layer'])} ({e(b['name'])})</td></tr>"
            for b in self.largest)
        return (f"<div><p>memfit plan: predicted peak <b>{e(fmt(self.peak_bytes))}</b> of a budget of "
                f"{e(fmt(self.budget_bytes))} ({e(self.budget_source)}): {verdict}</p>"
                f"<table><tr><th style='text-align:left'>class</th><th>bytes</th><th>share</th></tr>"
                f"{''.join(rows)}</table><p>policy: {policy}</p>"
                f"<details><summary>largest buffers</summary><table>{largest}</table></details></div>")
