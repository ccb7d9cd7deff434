"""memfit from Python: plan and train inside a memory budget, in a notebook.

The same engine as the `memfit` command, in this process: keyword arguments
are the command's flags (batch=32 is --batch 32, update_in_backward=True is
--update-in-backward; memfit.usage("train") lists them all).

    import memfit
    plan = memfit.plan(model="convnet", batch=64, memory="1GiB")   # Plan: shows as a table
    run = memfit.train(model="convnet", batch=32, steps=200, subset=2000, out="runs/nb")
    run.history            # one dict per step (loss, rate, RSS) with evaluations
    run.result             # final loss, accuracy, peak RSS against the planned peak
    run.weights()          # {name: numpy array}; run.load_into(torch_module)
    run.report()           # report.html, inline in a notebook

Ctrl-C (a notebook's interrupt) finishes the current step, writes the
checkpoint and raises memfit.Interrupted, a KeyboardInterrupt whose .run is
the partial Run; memfit.train(resume=run.run_dir, ...) continues it exactly.
"""
import os
import re
import tempfile

from . import _data, _memfit
from ._display import Display
from ._options import to_argv
from ._plan import Plan
from ._run import Report, Run

__all__ = ["plan", "train", "usage", "open_run", "Plan", "Run", "Report", "BudgetError", "Interrupted", "DataError",
           "ModelError"]

# Bad data= or test_data= (arrays, a torch Dataset): a ValueError whose
# message names the sample's index (memfit/_data.py).
DataError = _memfit.DataError

# A model memfit cannot import: a RuntimeError whose message names the file
# and, for an ONNX model (a torch module's export), the node and its op.
ModelError = _memfit.ModelError


class BudgetError(_memfit.BudgetError):
    """The run does not fit the budget, and no policy makes it fit. The
    message is the command's: the predicted peak, its largest parts and the
    smallest budget that would fit; .memory is that budget as a memory=
    value ("812.4MiB"), None if the message names none."""

    def __init__(self, message):
        super().__init__(message)
        found = re.search(r"--memory ([0-9.]+[KMGT]i?B)", message)
        self.memory = found.group(1) if found else None


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped memfit.train after a finished step; the checkpoint is
    written. .run is the partial Run (its .interrupted is True)."""

    def __init__(self, run):
        self.run = run
        super().__init__(f"memfit: interrupted at step {run.result.get('steps')}; checkpoint written to "
                         f"{run.run_dir}; continue with memfit.train(resume={run.run_dir!r}, ...) and the same options")


def usage(command="train"):
    """The options of memfit.train ("train") or memfit.plan ("plan"), as the
    command lists its flags (--name-with-dashes is the keyword name_with_dashes)."""
    return _memfit.usage(command)


def open_run(run_dir):
    """The Run in a run directory (one memfit.train or `memfit train` wrote)."""
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"no run directory at {run_dir}")
    return Run(run_dir)


def plan(model="convnet", batch=None, memory=None, example_input=None, **options):
    """The memory plan of a run, without running it (`memfit plan`).

    Returns a Plan (.peak_bytes, .budget_bytes, .fits, .by_class, .largest,
    .policy). Over budget, the fit searches micro-batch, accumulation,
    recomputation and precision as the command does, and .policy says what it
    chose; raises BudgetError when nothing fits (no_fit=True: returns the plan
    as asked, .fits False), ValueError for an option the command does not take.
    model may be a torch.nn.Module with example_input (exported to ONNX;
    exporter="auto", "torchscript" or "dynamo" as for train).
    """
    exporter = options.pop("exporter", "auto")
    data_kw = {k: options.pop(k) for k in _data.DATA_KEYWORDS if k in options}
    train_src, test_src, options = _data_sources(options, data_kw, print, batch=batch)
    options = _with_frozen(model, options)
    with tempfile.TemporaryDirectory(prefix="memfit-plan-") as tmp:
        model = _model_arg(model, _example(example_input, train_src), tmp, exporter)
        argv = to_argv({"model": model, "batch": batch, "memory": memory, **options})
        try:
            out = _memfit.plan(argv, train_src, test_src)
        except _memfit.BudgetError as e:
            raise BudgetError(str(e)) from None
    return Plan(out["json"], out["log"])


def train(model="convnet", data=None, batch=None, memory=None, steps=None, epochs=None, out=None, progress=True,
          example_input=None, **options):
    """Trains in this process as `memfit train` does, and returns a Run.

    progress: True shows the log and a progress line (updated in place in a
    notebook); False shows nothing (the log is still in Run.log); a callable
    receives each piece of the log (str) as it is written. The run writes
    its directory (out, default runs/latest): checkpoints, model.safetensors,
    metrics.jsonl, steps.jsonl, plan.json, report.html.

    Raises BudgetError when nothing fits, ValueError for an option the
    command does not take, Interrupted (a KeyboardInterrupt) on Ctrl-C, after
    the step in progress and the checkpoint. model may be a torch.nn.Module
    with example_input: it is exported to ONNX into the run directory; its
    parameters with requires_grad=False are frozen (added to freeze=).
    exporter="auto" exports with torch's TorchScript exporter where the
    installed torch has it, else with its dynamo exporter; "torchscript" or
    "dynamo" chooses.

    data (and test_data) may be a path, or what the notebook holds:
    (x, y) numpy arrays or CPU torch tensors, images [N, C, H, W],
    [N, H, W, C] (detected: the last axis 1, 3 or 4 and axis 1 not;
    layout= says it) or [N, H, W], uint8 or float32, read in place; token ids
    [N, T] (or a tokenizer's output with input_ids and attention_mask) with
    labels [N] for the text classifiers; (texts, labels), strings the model's
    tokenizer encodes as it does a JSONL file; a pandas DataFrame, a dict of
    columns or a Hugging Face datasets split (or DatasetDict: its "train"
    and "test"/"validation") with text, input_ids or image columns and
    labels (columns=(x, label) names them); or a map-style torch Dataset of
    (image, label), cached once into the cache directory or read on the
    loader's thread every epoch: materialise=None ranks the two (random
    transforms, or fewer reads than items: per epoch), True or False decides.
    Keywords for them: classes=, normalize=(mean, std) for uint8 pixels,
    layout=, vocab=, pad_id=, materialise=, columns=. Bad data raises
    DataError naming the index.
    """
    exporter = options.pop("exporter", "auto")
    data_kw = {k: options.pop(k) for k in _data.DATA_KEYWORDS if k in options}
    # Under mpirun, rank 0 speaks for the job; the other ranks show nothing.
    if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")) != "0":
        progress = False
    display = Display(show=progress is True)  # keeps the log either way
    say = display if not callable(progress) else (lambda text: (display(text), progress(text)))
    train_src, test_src, rest = _data_sources({"data": data, **options}, data_kw, say, batch=batch, steps=steps)
    data, options = rest.pop("data", None), rest
    options = _with_frozen(model, options)
    given = {"data": data, "batch": batch, "memory": memory, "steps": steps, "epochs": epochs, "out": out, **options}
    if "progress" in options:
        raise ValueError("memfit.train(progress=...) is True, False or a callable; the command's --progress "
                         "display is chosen for it")
    if not isinstance(model, (str, os.PathLike)):
        # The run directory the options name (out, or resume's, or the default).
        run_dir = _memfit.options("train", to_argv(given))["out"]
        os.makedirs(run_dir, exist_ok=True)
        module = model
        model = _model_arg(model, _example(example_input, train_src), run_dir, exporter)
        say(_exported_line(module, model, exporter))
    argv = to_argv({"model": model, **given}) + ["--progress", "bar"]
    sink = display
    if callable(progress):
        def sink(text):
            display(text)
            progress(text)
    try:
        result = _memfit.train(argv, sink, train_src, test_src)
    except _memfit.BudgetError as e:
        raise BudgetError(str(e)) from None
    ctrl_c = result.pop("keyboard_interrupt")
    run = Run(result["out"], result, display.log)
    if run.interrupted or ctrl_c:
        raise Interrupted(run)
    return run


def _data_sources(options, data_kw, say, batch=None, steps=None):
    """data= / test_data= held in the notebook -> (train, test DataSources, options with data= their
    identity); a path (or none) -> (None, None, options as they were)."""
    data, test_data = options.get("data"), options.get("test_data")
    if not _data.is_in_process(data):
        if test_data is not None:
            raise ValueError("test_data= goes with data= arrays or a torch Dataset; with a path, the files' own "
                             "test split is used")
        if data_kw:
            raise ValueError(f"{', '.join(data_kw)}= go with data= arrays or a torch Dataset, not a path")
        return None, None, options
    options = dict(options)
    options.pop("test_data", None)
    parsed = _memfit.options("train", to_argv({**{k: v for k, v in options.items() if k != "data"},
                                               "batch": batch, "steps": steps}))
    # The items the run reads, when it says (steps x batch): with materialise=None, a Dataset read by
    # fewer items than it holds is read per epoch rather than cached whole.
    reads = parsed["steps"] * parsed["batch"] if parsed["steps"] > 0 else None
    train_src, test_src, ident = _data.sources(data, test_data, cache_dir=options.get("cache_dir"), say=say,
                                               resume=options.get("resume"), seed=parsed["seed"], reads=reads,
                                               **data_kw)
    options["data"] = ident
    return train_src, test_src, options


def _example(example_input, source):
    """example_input, or a zero batch of one sample shaped like the data's (images)."""
    if example_input is not None or source is None:
        return example_input
    try:
        import torch
        x, _ = source.sample(0)
        return torch.zeros((1,) + tuple(x.shape))
    except (ImportError, ValueError):
        return None


def _with_frozen(model, options):
    """options with freeze= extended by a torch module's parameters that do
    not require gradients (requires_grad=False: how PyTorch users freeze a
    backbone), by their state_dict names, which the exported file keeps."""
    if isinstance(model, (str, os.PathLike)) or not hasattr(model, "named_parameters"):
        return options
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    if not frozen:
        return options
    given = options.get("freeze")
    given = [] if given is None else [given] if isinstance(given, str) else list(given)
    return {**options, "freeze": given + [f for f in frozen if f not in given]}


def _model_arg(model, example_input, folder, exporter="auto"):
    """A zoo name or model file as it is; a torch.nn.Module exported to
    folder/model.onnx (the engine reads ONNX models)."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if not hasattr(model, "state_dict"):
        raise ValueError(f"model={type(model).__name__}: expected a zoo name, a model file or a torch.nn.Module")
    if example_input is None:
        raise ValueError("a torch model needs example_input=: one batch shaped like the data's, e.g. "
                         "torch.zeros(1, 1, 28, 28) for Fashion-MNIST")
    from ._onnx import export_training
    tokens = not getattr(example_input, "is_floating_point", lambda: True)()  # token ids: an integer tensor
    return export_training(model, example_input, os.path.join(folder, "model.onnx"),
                           input_name="tokens" if tokens else "image",
                           attention_mask=tokens and _takes_attention_mask(model, example_input), exporter=exporter)


def _exported_line(module, path, exporter="auto"):
    """What the export did, said before the plan."""
    import torch
    from ._onnx import exported_with, export_opset
    return (f"memfit: {type(module).__name__} exported to {path} by torch {torch.__version__}'s "
            f"{exported_with(exporter)} exporter (training mode, opset {export_opset(exporter)})\n")


def _takes_attention_mask(model, example_input):
    """Whether a token model is a text classifier called as model(ids,
    attention_mask) (a Hugging Face BertForSequenceClassification and its
    kin): exported with the mask as a second input, memfit gives it the
    data's padding. A language model (logits [N, T, vocab]) trains on
    unpadded windows and is exported without it."""
    import inspect
    try:
        params = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return False
    if len(params) < 2 or params[1] != "attention_mask":
        return False
    import torch
    with torch.no_grad():
        out = model(example_input[:1], torch.ones_like(example_input[:1]))
    logits = getattr(out, "logits", out[0] if isinstance(out, (tuple, list)) else out)
    return getattr(logits, "dim", lambda: 0)() == 2
