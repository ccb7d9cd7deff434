"""Run: a training run's directory and what it recorded."""
import html
import json
import os

from . import _memfit, _safetensors


class Report:
    """A run's report.html: .path, .html; shows inline in a notebook."""

    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.html = f.read()

    def __str__(self):
        return self.path

    def __repr__(self):
        return f"<memfit.Report {self.path}>"

    def open(self):
        """Opens the page in the system's web browser (webbrowser); False
        where none can be started (no display: open .path elsewhere)."""
        import webbrowser
        if os.name == "posix" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                                       or os.environ.get("BROWSER")):
            return False
        return webbrowser.open("file://" + os.path.abspath(self.path))

    def _repr_html_(self):
        # In a frame of its own: the page's styles stay out of the notebook's.
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
                f'style="width:100%;height:900px;border:none"></iframe>')


class Run:
    """A training run: .run_dir, .result, .history, .weights(), .report().

    .result: what training returned (steps, final_train_loss, test_loss and
    test_accuracy when evaluated, peak_rss_bytes, planned_peak_bytes,
    budget_bytes, images_per_second, seconds, interrupted); empty for a run
    opened from its directory. .interrupted: it stopped on Ctrl-C, after
    writing its checkpoint. .log: the engine's log (the plan, evaluations,
    the last state of each progress line).
    """

    def __init__(self, run_dir, result=None, log=""):
        self.run_dir = os.fspath(run_dir)
        self.result = dict(result or {})
        self.log = log
        self.interrupted = bool(self.result.get("interrupted", False))

    def _path(self, name):
        return os.path.join(self.run_dir, name)

    @property
    def history(self):
        """One dict per logged optimizer step (steps.jsonl: step, epoch,
        train_loss, samples_per_second, seconds, rss_bytes, peak_rss_bytes),
        with the evaluation made at that step, if any (test_loss,
        test_accuracy or test_perplexity)."""
        steps = _read_jsonl(self._path("steps.jsonl"))
        evals = {e["step"]: e for e in self.evaluations}
        for s in steps:
            e = evals.get(s["step"])
            if e:
                s.update({k: v for k, v in e.items() if k.startswith("test_")})
        return steps

    @property
    def evaluations(self):
        """One dict per evaluation (metrics.jsonl): epoch, step, train_loss (the
        mean since the last one), test_loss, test_accuracy, ..."""
        return _read_jsonl(self._path("metrics.jsonl"))

    def to_pandas(self):
        """The history as a pandas DataFrame (pandas is not a dependency)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("Run.to_pandas needs pandas (apt-get install python3-pandas, or pip install pandas); "
                              "Run.history has the same rows as dicts") from None
        return pandas.DataFrame(self.history)

    def weights(self):
        """{name: numpy array} from model.safetensors, under PyTorch state_dict
        names (bf16 weights widened to float32)."""
        path = self._path("model.safetensors")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no weights in {self.run_dir}: model.safetensors is written at the end of every "
                                    "epoch and of the run")
        return _safetensors.read(path)

    def load_into(self, module, strict=True):
        """Loads the weights into a torch.nn.Module by name (load_state_dict).
        A tensor the ONNX file held once for two names (a tied head) fills
        both, and a buffer memfit read as a constant (an attention mask)
        keeps the module's value."""
        import torch  # only needed here
        from ._onnx import complete_state_dict
        state = {k: torch.from_numpy(v) for k, v in self.weights().items()}
        if strict:
            state = complete_state_dict(module, state)
        return module.load_state_dict(state, strict=strict)

    def report(self):
        """report.html (loss curves, the plan by class, the predicted peak
        against the measured RSS, the arena over one step), shown inline in a
        notebook; str() is its path. Written again from the run's files."""
        return Report(_memfit.write_report(self.run_dir))

    def __repr__(self):
        r = self.result
        state = " interrupted" if self.interrupted else ""
        loss = f" final loss {r['final_train_loss']:.4g}" if "final_train_loss" in r else ""
        return f"<memfit.Run {self.run_dir}{state}: {r.get('steps', '?')} steps{loss}>"

    def _repr_html_(self):
        e = html.escape
        rows = "".join(f"<tr><td style='text-align:left'>{e(k.replace('_', ' '))}</td>"
                       f"<td style='text-align:right'>{e(_show(k, v))}</td></tr>" for k, v in self.result.items())
        return f"<div><p>memfit run <code>{e(self.run_dir)}</code></p><table>{rows}</table></div>"


def _show(key, value):
    if key.endswith("_bytes"):
        return _memfit.format_bytes(int(value))
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
