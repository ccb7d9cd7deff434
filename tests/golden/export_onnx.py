#!/usr/bin/python3
"""Exports the golden models to ONNX for memfit's ONNX tests (test_onnx).

    /usr/bin/python3 tests/golden/export_onnx.py --out DIR
    /usr/bin/python3 tests/golden/export_onnx.py --check-state-dict MODEL SAFETENSORS

The first form writes DIR/convnet.onnx and DIR/resnet18.onnx: make_golden.py's
own ConvNet and ResNet-18 with the initial weights the golden fixtures were
computed from (memfit's counter-based init, seed 42), exported in training
mode with their state_dict names, so memfit trained through ONNX must
reproduce the fixtures' losses. Beside each, DIR/<model>.keys lists the
model's state_dict keys, one a line. The files are written at test time and
not kept in the repository (ResNet-18's is 45 MB).

The ConvNet is exported with nn.Dropout in place of the golden's
CounterDropout (whose numpy masks a trace would freeze into constants): the
ONNX Dropout node of module `dropout` is memfit's dropout of layer
`dropout`, which draws the golden's masks.

It also writes DIR/opsnet.onnx and DIR/opsnet.safetensors: a small model
that passes through the other ops memfit imports (batch norm, average pool,
a reshape computed from x.shape, Split, Concat, a Linear over a 3-d input
as MatMul + Add, torch's Erf-based GELU, LayerNormalization (opset 17),
Transpose, Slice, Softmax, a scalar Mul) with PyTorch's logits, loss and
gradients for one batch, computed in float64 from the float32 weights.

And DIR/conv1dnet.onnx and .safetensors, the same for 1-d convolutions and
pools. And DIR/actnet.onnx and DIR/actnet.safetensors, the same for the pointwise
activations torch writes (ReLU6 as Clip, a depthwise convolution, Hardswish,
SiLU as x * Sigmoid(x), a squeeze-and-excitation's broadcast product,
LeakyReLU, ELU, Tanh, Hardsigmoid, Sigmoid).

And DIR/{rnn,gru,lstm}_classifier.onnx and .safetensors: text classifiers
with nn.RNN, nn.GRU and nn.LSTM as courses write them, with PyTorch's
logits, loss, gradients and a few SGD steps' losses for one batch; and
DIR/stacked_classifier.* and DIR/relu_rnn_classifier.*, the same for two
GRU layers under an LSTM and for nn.RNN(nonlinearity="relu").

And DIR/gpt_tiny.onnx: make_gpt_golden.py's GPT with the fixture's initial
weights, written as nanoGPT writes one (TinyGPT below), for memfit to
reproduce gpt_tiny.safetensors through the file.

The second form loads memfit's saved weights (model.safetensors) into the
PyTorch model (convnet, resnet18, gpt_tiny or {rnn,gru,lstm}_classifier) with load_state_dict(strict=True)
and exits non-zero unless every tensor is taken, with its shape.

Needs python3-torch and python3-numpy only (torch.onnx.export does not need
the onnx package).
"""
import argparse
import importlib.util
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as golden  # noqa: E402
from golden_common import read_safetensors  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "memfit_onnx_export", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "memfit", "_onnx.py"))
_onnx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_onnx)


def build(name):
    if name == "convnet":
        model = golden.ConvNet()
        model.dropout = nn.Dropout(golden.DROPOUT_P)
    elif name == "resnet18":
        model = golden.ResNet18()
    else:
        raise SystemExit(f"unknown model {name} (convnet, resnet18)")
    golden.memfit_init(model)
    return model.train()


def export_training(model, example, path, opset):
    """The Python package's export (python/memfit/_onnx.py, loaded by path:
    the package's extension need not be built): training mode, the running
    statistics as they were, the batch axis free."""
    _onnx.export_training(model, example, path, opset)


def export(name, out_dir):
    model = build(name)
    path = os.path.join(out_dir, f"{name}.onnx")
    export_training(model, torch.zeros(golden.BATCH, 1, 28, 28), path, 14)
    with open(os.path.join(out_dir, f"{name}.keys"), "w") as f:
        f.write("".join(k + "\n" for k in model.state_dict()))
    print(f"{name}: {os.path.getsize(path)} bytes -> {path}")


class OpsNet(nn.Module):
    """image [N, 1, 8, 8] -> 10 logits through every op the ConvNet and
    ResNet-18 do not use."""

    def __init__(self):
        super().__init__()
        # No bias before the batch norm, and the softmax before the layer
        # norm: either would make a gradient exactly zero (a bias that
        # normalising removes, a shift a softmax ignores), which float64
        # and float32 resolve only to their rounding.
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.proj = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(48, 10)

    def forward(self, x):
        x = F.avg_pool2d(F.relu(self.bn(self.conv(x))), 2)  # [N, 4, 4, 4]
        t = x.reshape(x.shape[0], 4, 16)
        a, b = torch.split(t, 8, dim=2)
        t = torch.cat([b, a], dim=1)                        # [N, 8, 8]
        t = self.ln(F.softmax(F.gelu(self.proj(t)), dim=-1) * 2.0)
        t = t.transpose(1, 2)[:, :, 1:7]                    # [N, 8, 6]
        return self.head(torch.flatten(t, 1))


class ActNet(nn.Module):
    """image [N, 1, 8, 8] -> 10 logits through every pointwise activation
    memfit imports, a depthwise convolution and a squeeze-and-excitation
    (MobileNetV3's block: x * s, s [N, C, 1, 1])."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.se_reduce = nn.Conv2d(4, 2, 1)
        self.se_expand = nn.Conv2d(2, 4, 1)
        self.fc1 = nn.Linear(64, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu6(self.conv(x) * 3.0)                  # Clip(0, 6), both bounds reached
        x = F.silu(F.hardswish(self.dw(x)))              # [N, 4, 8, 8]
        s = F.adaptive_avg_pool2d(x, 1)                  # [N, 4, 1, 1]
        x = x * F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(s))))
        x = F.avg_pool2d(x, 3, stride=2, padding=1)      # [N, 4, 4, 4]: Pad, then AveragePool
        t = F.elu(F.leaky_relu(self.fc1(torch.flatten(x, 1)), 0.1), 0.5)
        t = F.hardsigmoid(self.fc2(torch.tanh(t)) * 4.0)
        return self.head(torch.sigmoid(self.fc3(t)))


class Conv1dNet(nn.Module):
    """image [N, 1, 8, 8] read as 8 channels of length 8 -> 10 logits through
    1-d convolutions and pools, as an audio or text CNN has them: padding,
    groups, dilation, a stride, max and average pools (padding="same" is
    exported as explicit pads by newer exporters; this one refuses it), an
    average pool's padding as torch exports it (a Pad before it)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(8, 12, 3, padding=1)
        self.c2 = nn.Conv1d(12, 12, 5, padding=2, groups=3)
        self.c3 = nn.Conv1d(12, 16, 3, padding=2, dilation=2)
        self.c4 = nn.Conv1d(16, 16, 3, stride=2, padding=1, bias=False)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.flatten(x, 1, 2)                       # [N, 8, 8]
        x = F.max_pool1d(F.relu(self.c1(x)), 2)          # [N, 12, 4]
        x = torch.tanh(self.c2(x))                       # [N, 12, 4]
        x = F.avg_pool1d(F.relu(self.c3(x)), 3, stride=1, padding=1)  # [N, 16, 4]: Pad, AveragePool
        x = F.relu(self.c4(x))                           # [N, 16, 2]
        return self.head(torch.flatten(x, 1))


def export_checked(model_class, name, out_dir):
    """model_class's model (seed 0) exported with PyTorch's logits, loss and
    gradients for one batch, in float64 from the float32 weights."""
    torch.manual_seed(0)
    model = model_class().train()
    path = os.path.join(out_dir, f"{name}.onnx")
    export_training(model, torch.zeros(4, 1, 8, 8), path, 17)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
    y = np.array([3, 1, 4, 1], dtype=np.int32)
    model = model.double()
    logits = model(torch.from_numpy(x).double())
    loss = F.cross_entropy(logits, torch.from_numpy(y.astype(np.int64)))
    loss.backward()
    out = {"input": x, "labels": y, "logits": logits.detach().numpy().astype(np.float32),
           "loss": np.array([loss.item()], dtype=np.float32)}
    for n, p in model.named_parameters():
        out[f"grad.{n}"] = p.grad.numpy().astype(np.float32)
    golden.write_safetensors(os.path.join(out_dir, f"{name}.safetensors"), out,
                             {"generator": "tests/golden/export_onnx.py", "torch_version": torch.__version__})
    print(f"{name}: {os.path.getsize(path)} bytes -> {path}")


# The tiny GPT: make_gpt_golden.py's model and initial weights, written the
# way nanoGPT writes a GPT (nn.Linear layers, q @ k.transpose(-2, -1) scaled
# and masked_fill'ed with a registered torch.tril buffer, softmax, dropout,
# @ v; torch.arange positions; the head tied to the token table), so that
# memfit trained through its ONNX file must reproduce gpt_tiny.safetensors.
GPT_L, GPT_H, GPT_C, GPT_BLOCK, GPT_V, GPT_B, GPT_T = 2, 2, 32, 64, 23, 4, 16


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(GPT_C, 3 * GPT_C)
        self.c_proj = nn.Linear(GPT_C, GPT_C)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(GPT_BLOCK, GPT_BLOCK)).view(1, 1, GPT_BLOCK, GPT_BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, GPT_H, C // GPT_H).transpose(1, 2)
        q = q.view(B, T, GPT_H, C // GPT_H).transpose(1, 2)
        v = v.view(B, T, GPT_H, C // GPT_H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(GPT_C, 4 * GPT_C)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * GPT_C, GPT_C)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(GPT_C)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(GPT_C)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(GPT_V, GPT_C), wpe=nn.Embedding(GPT_BLOCK, GPT_C), drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block() for _ in range(GPT_L)]), ln_f=nn.LayerNorm(GPT_C)))
        self.lm_head = nn.Linear(GPT_C, GPT_V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied

    def forward(self, idx):
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def gpt_from_fixture():
    """TinyGPT with gpt_tiny.safetensors' initial weights (its Conv1D [in,
    out] matrices transposed into nn.Linear's [out, in])."""
    fixture = read_safetensors(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_tiny.safetensors"))
    model = TinyGPT()
    state = model.state_dict()
    for k in state:
        if k.endswith(".attn.bias") or k == "lm_head.weight":  # the mask buffer; the tied head
            continue
        w = fixture["init." + k]
        if w.ndim == 2 and k.split(".")[-2] in ("c_attn", "c_proj", "c_fc"):
            w = w.T
        state[k] = torch.from_numpy(np.ascontiguousarray(w))
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state, strict=True)
    return model.train()


def export_gpt(out_dir):
    model = gpt_from_fixture()
    path = os.path.join(out_dir, "gpt_tiny.onnx")
    _onnx.export_training(model, torch.zeros(GPT_B, GPT_T, dtype=torch.long), path, 17, input_name="tokens")
    print(f"gpt_tiny: {os.path.getsize(path)} bytes -> {path}")


# Text classifiers as a course writes them with nn.RNN, nn.GRU and nn.LSTM
# (batch_first=True, no initial state): the exporter writes each layer as an
# ONNX RNN, GRU or LSTM node with a ConstantOfShape zero state and Transposes
# around it. Small, so that the fixtures cost nothing: a vocabulary of 100,
# embeddings of 16, 24 hidden features, 4 classes, 12 tokens, a batch of 4.
RNN_VOCAB, RNN_EMBED, RNN_HIDDEN, RNN_CLASSES, RNN_T, RNN_B = 100, 16, 24, 4, 12, 4
RNN_LR, RNN_STEPS = 0.5, 5


class RNNClassifier(nn.Module):
    """nn.RNN (kind "RNN") or nn.GRU (kind "GRU"), the mean of its outputs over time."""

    def __init__(self, kind="RNN"):
        super().__init__()
        self.embedding = nn.Embedding(RNN_VOCAB, RNN_EMBED)
        self.rnn = getattr(nn, kind)(RNN_EMBED, RNN_HIDDEN, batch_first=True)
        self.fc = nn.Linear(RNN_HIDDEN, RNN_CLASSES)

    def forward(self, x):
        x = self.embedding(x)
        x, h = self.rnn(x)
        return self.fc(x.mean(dim=1))


class GRUClassifier(RNNClassifier):
    def __init__(self):
        super().__init__("GRU")


class ReluRNNClassifier(RNNClassifier):
    """nn.RNN(nonlinearity="relu"), its last state h[-1]."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(RNN_EMBED, RNN_HIDDEN, nonlinearity="relu", batch_first=True)

    def forward(self, x):
        x, h = self.rnn(self.embedding(x))
        return self.fc(h[-1])


class LSTMClassifier(nn.Module):
    """nn.LSTM, its last hidden state h[-1]."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(RNN_VOCAB, RNN_EMBED)
        self.rnn = nn.LSTM(RNN_EMBED, RNN_HIDDEN, batch_first=True)
        self.fc = nn.Linear(RNN_HIDDEN, RNN_CLASSES)

    def forward(self, x):
        x = self.embedding(x)
        x, (h, c) = self.rnn(x)
        return self.fc(h[-1])


class StackedClassifier(nn.Module):
    """Two nn.GRU layers then an nn.LSTM, the LSTM's last output plus the
    GRU's last layer's state: layers reading layers, Y and Y_h read at once,
    and x[:, -1]."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(RNN_VOCAB, RNN_EMBED)
        self.gru = nn.GRU(RNN_EMBED, RNN_HIDDEN, num_layers=2, batch_first=True)
        self.lstm = nn.LSTM(RNN_HIDDEN, RNN_HIDDEN, batch_first=True)
        self.fc = nn.Linear(RNN_HIDDEN, RNN_CLASSES)

    def forward(self, x):
        x, h = self.gru(self.embedding(x))
        x, _ = self.lstm(x)
        return self.fc(x[:, -1] + h[-1])


def sgd_reference(model, x, y, forward, loss_fn, lr, steps):
    """PyTorch's numbers for the batch x (token ids, or images) and targets y, in
    float64 from the model's float32 weights: the fixture's input, labels,
    logits, loss and each parameter's gradient ("grad." + its name), and the
    losses of `steps` plain SGD steps (lr, no momentum) on that batch.
    forward(model, ids) gives the logits, loss_fn(logits, targets) the loss.
    The model is left in float64."""
    model = model.double()
    xt = torch.from_numpy(x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float64))
    yt = torch.from_numpy(y.astype(np.int64))
    logits = forward(model, xt)
    loss = loss_fn(logits, yt)
    loss.backward()
    out = {"input": x, "labels": y, "logits": logits.detach().numpy().astype(np.float32),
           "loss": np.array([loss.item()], dtype=np.float32)}
    for n, p in model.named_parameters():
        out[f"grad.{n}"] = p.grad.numpy().astype(np.float32)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        step_loss = loss_fn(forward(model, xt), yt)
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()
    out["losses"] = np.array(losses, dtype=np.float32)
    return out


def export_recurrent(model_class, name, out_dir):
    """model_class's model (seed 0) exported, with PyTorch's logits, loss and
    gradients for one batch and the losses of RNN_STEPS plain SGD steps
    (lr RNN_LR, no momentum) on it, in float64 from the float32 weights."""
    torch.manual_seed(0)
    model = model_class().train()
    path = os.path.join(out_dir, f"{name}.onnx")
    _onnx.export_training(model, torch.zeros(RNN_B, RNN_T, dtype=torch.long), path, 17, input_name="tokens")
    rng = np.random.default_rng(1)
    x = rng.integers(0, RNN_VOCAB, (RNN_B, RNN_T)).astype(np.int32)
    y = np.array([3, 1, 0, 2], dtype=np.int32)
    out = sgd_reference(model, x, y, lambda m, xt: m(xt), F.cross_entropy, RNN_LR, RNN_STEPS)
    golden.write_safetensors(os.path.join(out_dir, f"{name}.safetensors"), out,
                             {"generator": "tests/golden/export_onnx.py", "torch_version": torch.__version__,
                              "lr": repr(RNN_LR)})
    print(f"{name}: {os.path.getsize(path)} bytes -> {path}")


RECURRENT = {"rnn_classifier": RNNClassifier, "gru_classifier": GRUClassifier, "lstm_classifier": LSTMClassifier}


def check_state_dict(name, weights):
    model = gpt_from_fixture() if name == "gpt_tiny" else RECURRENT[name]() if name in RECURRENT else build(name)
    tensors = {k: torch.from_numpy(v) for k, v in read_safetensors(weights).items()}
    # The package's completion: the tied head and the mask buffers memfit
    # reads as constants come from the module; anything else missing raises.
    state = _onnx.complete_state_dict(model, tensors)
    model.load_state_dict(state, strict=True)  # raises on a missing, extra or misshapen tensor
    print(f"{name}: load_state_dict took all {len(tensors)} tensors of {weights} ({len(state) - len(tensors)} from the module)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--models", default="convnet,resnet18")
    ap.add_argument("--check-state-dict", nargs=2, metavar=("MODEL", "SAFETENSORS"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check_state_dict:
        return check_state_dict(*args.check_state_dict)
    if not args.out:
        raise SystemExit("--out DIR is needed")
    os.makedirs(args.out, exist_ok=True)
    for name in args.models.split(","):
        export(name, args.out)
    export_checked(OpsNet, "opsnet", args.out)
    export_checked(ActNet, "actnet", args.out)
    export_checked(Conv1dNet, "conv1dnet", args.out)
    export_gpt(args.out)
    export_recurrent(RNNClassifier, "rnn_classifier", args.out)
    export_recurrent(GRUClassifier, "gru_classifier", args.out)
    export_recurrent(LSTMClassifier, "lstm_classifier", args.out)
    export_recurrent(StackedClassifier, "stacked_classifier", args.out)
    export_recurrent(ReluRNNClassifier, "relu_rnn_classifier", args.out)


if __name__ == "__main__":
    sys.exit(main())
