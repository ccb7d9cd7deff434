"""The Python package against the command: the same engine, so the same plan
and the same losses; Ctrl-C keeps a checkpoint the command resumes from.

Run by ctest (python_package) with PYTHONPATH at build/python and
MEMFIT_BINARY at the command built with it."""
import json
import os
import signal
import subprocess
import threading

import numpy as np
import pytest

import memfit

MEMFIT = os.environ.get("MEMFIT_BINARY", os.path.join(os.path.dirname(__file__), "../../build/memfit"))
FASHION = "/usr/share/datasets/fashion-mnist"
needs_fashion = pytest.mark.skipif(not os.path.isdir(FASHION),
                                   reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")

# A short ConvNet run: 16 steps of 32 on 512 images, evaluated on 256.
SHORT = dict(subset=512, test_subset=256, batch=32, steps=16, threads=2, seed=3)


def command(*args):
    """`memfit ARGS` -> (exit code, stdout, stderr)."""
    p = subprocess.run([MEMFIT, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def flags(options):
    return memfit._options.to_argv(options)


@needs_fashion
def test_plan_predicts_the_commands_peak():
    opts = dict(model="convnet", batch=64, memory="1GiB", optimizer="adamw")
    p = memfit.plan(**opts)
    code, out, err = command("plan", "--json", *flags(opts))
    assert code == 0, err
    j = json.loads(out)
    # The baseline (binary, libraries, here the interpreter) is measured in
    # each process; every planned byte on top of it is the same.
    by_class = {c["class"]: c["bytes"] for c in p.by_class}
    assert p.peak_bytes - by_class["baseline"] == j["total_bytes"] - j["by_class"]["baseline"]
    assert p.budget_bytes == j["budget_bytes"] == 1 << 30
    assert p.fits and p.peak_bytes == p.json["total_bytes"]
    assert {k: v for k, v in j["by_class"].items() if k != "baseline"} == \
        {k: v for k, v in p.json["by_class"].items() if k != "baseline"}
    assert p.largest and p.largest[0]["bytes"] == j["largest"][0]["bytes"]
    assert p.policy["micro_batch"] == 64 and p.policy["optimizer_state"] == j["optimizer_state"]["policy"]
    assert "predicted peak" in str(p) or "peak" in str(p)
    assert "largest buffers:" in str(p)
    assert "<table>" in p._repr_html_()


@needs_fashion
def test_plan_over_budget_names_the_smallest_budget():
    with pytest.raises(memfit.BudgetError) as e:
        memfit.plan(model="convnet", batch=64, memory="20MiB")
    message = str(e.value)
    assert "smallest budget" in message and e.value.memory
    # The command's refusal is the same message (its smallest budget is its
    # own: the baseline, measured per process, is smaller without Python).
    code, _, err = command("plan", "--model", "convnet", "--batch", "64", "--memory", "20MiB")
    assert code == 3 and "smallest budget" in err and "--memory " in err
    # The budget named is the plan's smallest; in this process the baseline
    # grows as plans come and go (the heap they leave), so ask a little more.
    assert e.value.memory.endswith("MiB")
    assert memfit.plan(model="convnet", batch=64, memory=f"{float(e.value.memory[:-3]) + 64}MiB").fits


def test_unknown_option_is_a_value_error_with_the_commands_message():
    with pytest.raises(ValueError, match="unknown flag --colour"):
        memfit.plan(colour="blue")
    with pytest.raises(ValueError, match="--batch expects an integer, got 'many'"):
        memfit.train(batch="many", progress=False)
    assert "--update-in-backward" in memfit.usage("train")


@needs_fashion
def test_train_matches_the_command_and_its_weights(tmp_path):
    seen = []
    run = memfit.train(model="convnet", out=tmp_path / "py", progress=seen.append, **SHORT)
    code, out, err = command("train", "--json", "--progress", "lines", "--out", str(tmp_path / "cmd"), *flags(SHORT))
    assert code == 0, err
    done = json.loads(out.strip().splitlines()[-1])
    # The same library, seed and options: the same losses, bit for bit.
    assert run.result["final_train_loss"] == done["final_train_loss"]
    assert run.result["test_accuracy"] == done["test_accuracy"]
    assert run.result["steps"] == 16 and not run.interrupted
    assert [h["train_loss"] for h in run.history] == \
        [h["train_loss"] for h in memfit.open_run(tmp_path / "cmd").history]
    assert run.history[-1]["step"] == 16 and "test_accuracy" in run.history[-1]
    assert run.result["planned_peak_bytes"] > 0 and run.result["peak_rss_bytes"] > 0
    # Progress came through the callable as the command's progress line.
    assert any("\r[" in s and "16/16" in s for s in seen)
    assert "16/16" in run.log and "\r" not in run.log

    w = run.weights()
    ref = memfit.open_run(tmp_path / "cmd").weights()
    assert list(w) == list(ref)
    for name in w:
        assert w[name].shape == ref[name].shape and w[name].dtype == np.float32, name
        assert np.array_equal(w[name], ref[name]), name
    assert run.report().html.lstrip().lower().startswith("<!doctype html")


class KillAt:
    """A progress callable that, from another thread, sends this process
    SIGINT once the run has reached `step` (as Ctrl-C in a notebook does)."""

    def __init__(self, step):
        self.step, self.reached = step, threading.Event()
        self.thread = threading.Thread(target=self._kill, daemon=True)
        self.thread.start()

    def __call__(self, text):
        for piece in text.split("\r")[1:]:
            done = piece.split("]", 1)[-1].split()
            if done and "/" in done[0] and int(done[0].split("/")[0]) >= self.step:
                self.reached.set()

    def _kill(self):
        if self.reached.wait(60):
            os.kill(os.getpid(), signal.SIGINT)


@needs_fashion
def test_ctrl_c_finishes_the_step_keeps_the_checkpoint_and_the_command_resumes(tmp_path):
    out = tmp_path / "stopped"
    opts = dict(SHORT, steps=60)
    with pytest.raises(memfit.Interrupted) as e:
        memfit.train(model="convnet", out=out, progress=KillAt(3), **opts)
    run = e.value.run
    assert isinstance(e.value, KeyboardInterrupt) and run.interrupted
    stopped_at = run.result["steps"]
    assert 3 <= stopped_at < 60
    assert os.path.exists(out / "checkpoint.safetensors")
    # The command continues from the checkpoint to the end.
    code, stdout, err = command("train", "--resume", str(out), "--progress", "lines", "--json", *flags(opts))
    assert code == 0, err
    assert f"resumed from {out} at step {stopped_at}" in err
    assert json.loads(stdout.strip().splitlines()[-1])["steps"] == 60
    # A run after an interrupted one starts with no stop request.
    again = memfit.train(model="convnet", out=tmp_path / "after", progress=False, **dict(SHORT, steps=2))
    assert again.result["steps"] == 2 and not again.interrupted


@needs_fashion
def test_a_torch_model_goes_through_onnx(tmp_path):
    """A PyTorch CNN (conv, batch norm, pool, linear) trained through its ONNX
    export: the export leaves the module's running statistics as they were,
    the plan of the exported file is the command's, and the trained weights,
    batch-norm statistics included, load back under their state_dict names."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(8 * 14 * 14, 10))

    net = make()
    example = torch.zeros(1, 1, 28, 28)
    p = memfit.plan(model=net, example_input=example, batch=32, memory="512MiB")
    assert p.fits and p.peak_bytes < 512 * 2**20
    assert torch.equal(net[1].running_var, torch.ones(8)), "the export's trace moved the running statistics"
    run = memfit.train(model=net, example_input=example, out=tmp_path / "onnx", progress=False, memory="512MiB",
                       **dict(SHORT, steps=4))
    onnx_file = tmp_path / "onnx" / "model.onnx"
    assert onnx_file.exists() and run.result["steps"] == 4
    code, out, err = command("plan", "--json", "--model", str(onnx_file), "--batch", "32", "--memory", "512MiB")
    assert code == 0, err
    j = json.loads(out)
    # Every planned byte on top of each process's measured baseline (here
    # the interpreter with torch) is the same.
    assert p.peak_bytes - p.json["by_class"]["baseline"] == j["total_bytes"] - j["by_class"]["baseline"]
    trained = make()
    run.load_into(trained)
    w = run.weights()
    assert set(w) == set(trained.state_dict())
    for name, t in trained.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), w[name])
    assert not torch.equal(trained[1].running_var, torch.ones(8)), "batch norm's running statistics were not trained"
    assert not torch.equal(trained[0].weight, make()[0].weight)


def test_the_exporter_is_chosen_by_name():
    """exporter= names torch's exporter: a name that is none, or one the
    installed torch lacks, is a ValueError naming it."""
    torch = pytest.importorskip("torch")
    import inspect
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
    example = torch.zeros(1, 1, 28, 28)
    with pytest.raises(ValueError, match="exporter='onnx': one of 'auto', 'torchscript', 'dynamo'"):
        memfit.plan(model=net, example_input=example, batch=8, exporter="onnx")
    if "dynamo" not in inspect.signature(torch.onnx.export).parameters:
        with pytest.raises(ValueError, match="has no dynamo exporter"):
            memfit.plan(model=net, example_input=example, batch=8, exporter="dynamo")


@needs_fashion
def test_requires_grad_false_freezes_the_parameter(tmp_path):
    """A module's parameters with requires_grad=False (a frozen backbone, as
    PyTorch users write it) do not train in memfit; the others do."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(8 * 14 * 14, 10))

    net = make()
    for p in net[0].parameters():
        p.requires_grad = False
    run = memfit.train(model=net, example_input=torch.zeros(1, 1, 28, 28), out=tmp_path / "frozen", progress=False,
                       memory="512MiB", **dict(SHORT, steps=4))
    trained = make()
    run.load_into(trained)
    untrained = make()
    assert torch.equal(trained[0].weight, untrained[0].weight) and torch.equal(trained[0].bias, untrained[0].bias)
    assert not torch.equal(trained[4].weight, untrained[4].weight)


@needs_fashion
def test_a_float_buffer_stays_a_constant(tmp_path):
    """A float buffer the module reads in forward (register_buffer: a fixed
    table, as a course's positional encoding or Swin-V2's coordinates
    table) is a constant in memfit, never trained: the run's weights are
    the module's parameters, and it loads back with a strict
    load_state_dict, the buffer as the module has it."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Shifted(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.register_buffer("table", torch.linspace(-1.0, 1.0, 28 * 28).reshape(1, 1, 28, 28))
            self.fc = nn.Linear(28 * 28, 10)

        def forward(self, x):
            return self.fc((x + self.table).flatten(1))

    net = Shifted()
    run = memfit.train(model=net, example_input=torch.zeros(1, 1, 28, 28), out=tmp_path / "buffer", progress=False,
                       memory="512MiB", **dict(SHORT, steps=4))
    assert set(run.weights()) == {"fc.weight", "fc.bias"}
    trained = Shifted()
    run.load_into(trained)
    assert torch.equal(trained.table, Shifted().table)
    assert not torch.equal(trained.fc.weight, Shifted().fc.weight)


def _golden_export_module():
    """tests/golden/export_onnx.py (its TinyGPT: a GPT written as nanoGPT
    writes one), loaded by path."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "export_onnx.py")
    spec = importlib.util.spec_from_file_location("memfit_export_onnx", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_torch_gpt_goes_through_onnx(tmp_path):
    """A nanoGPT-style GPT (tied head, a torch.tril mask buffer) trained on a
    text through its ONNX export: the weights load back with strict
    load_state_dict (the tied head and the mask from the module), and
    PyTorch's own forward pass of them predicts the text better than the
    untrained module's."""
    torch = pytest.importorskip("torch")
    golden = _golden_export_module()
    # 22 letters and the newline: the 23 symbols of TinyGPT's vocabulary.
    lines = ["".join(chr(ord("a") + (n * 5 + k) % 22) for k in range(12)) for n in range(300)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    torch.manual_seed(0)
    gpt = golden.TinyGPT()
    for name, p in gpt.named_parameters():  # nanoGPT's initialisation: N(0, 0.02) matrices, zero biases
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif p.dim() == 2:
            torch.nn.init.normal_(p, 0.0, 0.02)
    untrained = {k: v.clone() for k, v in gpt.state_dict().items()}
    run = memfit.train(model=gpt, example_input=torch.zeros(1, golden.GPT_T, dtype=torch.long), data=str(corpus),
                       out=tmp_path / "gpt", progress=False, batch=8, steps=60, optimizer="adamw", lr=3e-3,
                       eval_every=0, threads=2, seed=1)
    assert run.result["steps"] == 60
    trained = golden.TinyGPT()
    run.load_into(trained)
    w = run.weights()
    assert "lm_head.weight" not in w and not any(k.endswith(".attn.bias") for k in w)
    assert trained.lm_head.weight is trained.transformer.wte.weight
    np.testing.assert_array_equal(trained.lm_head.weight.detach().numpy(), w["transformer.wte.weight"])
    assert torch.equal(trained.transformer.h[0].attn.bias, untrained["transformer.h.0.attn.bias"])
    # The char tokenizer's ids: the corpus's alphabet in code point order.
    text = corpus.read_text()
    ids = torch.tensor([sorted(set(text)).index(c) for c in text])
    starts = torch.arange(0, len(ids) - golden.GPT_T - 1, 97)
    x = torch.stack([ids[s:s + golden.GPT_T] for s in starts])
    y = torch.stack([ids[s + 1:s + golden.GPT_T + 1] for s in starts])
    before = golden.TinyGPT()
    before.load_state_dict(untrained)

    def loss(m):
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(m.eval()(x).reshape(-1, golden.GPT_V), y.reshape(-1)).item()

    assert loss(trained) < 0.8 * loss(before), (loss(trained), loss(before))


def _course_mnist_cnn(torch):
    """The beginners' course's MNIST CNN as the course writes it: convolutions,
    max pooling, and log_softmax at the end (trained with NLLLoss)."""
    nn, F = torch.nn, torch.nn.functional

    class MultiLayerCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 10, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(10, 20, 5)
            self.fc = nn.Linear(20 * 5 * 5, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            return F.log_softmax(self.fc(x.flatten(1)), dim=1)

    return MultiLayerCNN()


@pytest.mark.parametrize("name", ["course_cnn", "mobilenet_v2", "mobilenet_v3_small", "shufflenet_v2_x0_5"])
def test_the_models_users_have_train_from_arrays_and_load_back(tmp_path, name):
    """Models of the course and of torchvision (weights=None), trained through
    the package on the notebook's own arrays: the loss falls on a repeated
    batch, and the trained weights (batch-norm statistics included) load
    back into a fresh module with a strict load_state_dict, differing from
    its initial ones."""
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")

    def make():
        torch.manual_seed(0)
        if name == "course_cnn":
            return _course_mnist_cnn(torch)
        return torchvision.models.get_model(name, weights=None, num_classes=10)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3, 32, 32)).astype(np.float32)
    y = np.arange(16, dtype=np.int64) % 10
    run = memfit.train(model=make(), data=(x, y), example_input=torch.zeros(2, 3, 32, 32), batch=8, steps=6,
                       optimizer="adam", lr=1e-3, out=tmp_path / name, progress=False, memory="1GiB", threads=2,
                       eval_every=0)
    losses = [h["train_loss"] for h in run.history if "train_loss" in h]
    assert len(losses) == 6 and losses[-1] < losses[0], losses
    trained, initial = make(), make()
    run.load_into(trained)  # strict
    w = run.weights()
    state = trained.state_dict()
    for k, t in state.items():
        if k in w:
            np.testing.assert_array_equal(t.numpy(), w[k])
    changed = [k for k, t in state.items() if t.is_floating_point() and not torch.equal(t, initial.state_dict()[k])]
    assert any(k.endswith("weight") for k in changed), "no weight was trained"
    if any(isinstance(m, torch.nn.BatchNorm2d) for m in trained.modules()):
        assert any(k.endswith("running_var") for k in changed), "batch norm's running statistics were not trained"
