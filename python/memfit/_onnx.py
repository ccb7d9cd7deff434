"""A PyTorch module to the ONNX file memfit imports: torch.onnx.export of
the forward graph in training mode (dropout and batch norm as in training),
with the state_dict names as the initializers' names and the batch axis
left free.

No import of memfit's extension and nothing beyond torch, so that
tests/golden/export_onnx.py loads this file by its path for the golden
models' exports: the package and the tests export the same way.
"""
import contextlib
import inspect
import io
import os
import struct
import warnings

# What torch says on every training-mode export, which a user cannot act
# on: the TorchScript exporter's deprecations and its note on batch norm's
# num_batches_tracked counter (memfit keeps its own step), the dynamo
# exporter's advice to export in eval mode.
_EXPECTED = ("Removing mutation from node aten::add_", "legacy TorchScript-based ONNX export", "The feature will be removed",
             "Setting `training` to something other than default", "while it is in training mode")


@contextlib.contextmanager
def _quiet_export():
    """The export without torch's expected warnings, the TracerWarnings of
    torch's own argument checks (batch norm's batch-size check in
    torch/nn/functional.py) and the dynamo exporter's progress lines; any
    other warning (a TracerWarning that the module's own code traced a
    value as a constant) is shown once."""
    with warnings.catch_warnings(record=True) as seen, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        yield
    shown = set()
    for w in seen:
        text = str(w.message)
        own_check = w.category.__name__ == "TracerWarning" and \
            os.path.join("torch", "nn", "functional.py") in os.path.normpath(w.filename)
        if any(e in text for e in _EXPECTED) or own_check or text in shown:
            continue
        shown.add(text)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _has_torchscript_exporter(torch):
    """Whether torch.onnx.export still has the TorchScript exporter (torch
    before 2.5 has no other; later ones keep it behind dynamo=False)."""
    params = inspect.signature(torch.onnx.export).parameters
    return "dynamo" not in params or "training" in params


def exported_with(exporter="auto"):
    """The exporter export_training uses with the installed torch:
    "TorchScript" wherever torch has it (it writes training mode: dropout
    and batch norm as in training), else "dynamo" (torch.export's, its
    graph traced in training mode, kept unoptimised so that batch norm is
    not folded into the convolutions). exporter: "auto", "torchscript" or
    "dynamo"."""
    import torch
    if exporter not in ("auto", "torchscript", "dynamo"):
        raise ValueError(f"exporter={exporter!r}: one of 'auto', 'torchscript', 'dynamo'")
    has_dynamo = "dynamo" in inspect.signature(torch.onnx.export).parameters
    if exporter == "dynamo" and not has_dynamo:
        raise ValueError(f"exporter='dynamo': torch {torch.__version__} has no dynamo exporter (torch >= 2.5 has); "
                         "exporter='auto' takes its TorchScript one")
    if exporter == "torchscript" and not _has_torchscript_exporter(torch):
        raise ValueError(f"exporter='torchscript': torch {torch.__version__} has no TorchScript exporter; "
                         "exporter='auto' takes its dynamo one")
    if exporter == "dynamo" or (exporter == "auto" and not _has_torchscript_exporter(torch)):
        return "dynamo"
    return "TorchScript"


def export_opset(exporter="auto", opset=17):
    """The opset export_training writes: opset, or at least 18 with the
    dynamo exporter (its lowest)."""
    return max(opset, 18) if exported_with(exporter) == "dynamo" else opset


def _export_dynamo(torch, model, args, names, output_name, tmp, opset):
    """torch.onnx.export(dynamo=True) of the module in training mode:
    optimize=False (its optimiser folds batch norm into the convolution, a
    different model to train), the weights inside the file, the batch axis
    a dynamic dimension. Its batch norms come out in inference form with
    the module's momentum, which memfit trains (batch statistics, its
    running statistics from the file's); its dropouts stay Dropout nodes in
    training mode."""
    batch = torch.export.Dim("N", min=1)
    shapes = tuple({0: batch} for _ in names)
    program = torch.onnx.export(model, args, None, dynamo=True, optimize=False, external_data=False,
                                opset_version=max(opset, 18), input_names=names, output_names=[output_name],
                                dynamic_shapes=shapes)
    program.save(tmp, external_data=False)


def export_training(model, example_input, path, opset=17, input_name="image", output_name="logits",
                    attention_mask=False, exporter="auto"):
    """Writes path (atomically: a .tmp file renamed) and returns it.

    The export traces one forward pass in training mode, which would move
    every batch norm's running mean and variance towards the example's
    statistics before they are written (running_var 1 -> 0.9 for a zero
    example). The trace therefore runs at momentum 0, which leaves them as
    they are, and each BatchNormalization's momentum attribute is then set
    back to the one the export writes for the module's own (1 - momentum,
    float32). opset 17 (the default) exports layer norm as
    LayerNormalization.

    attention_mask=True: the module is called as model(x, attention_mask)
    (a Hugging Face text model's second argument), the mask a second input
    named attention_mask (all 1s in the trace), which memfit feeds from the
    data's padding.

    exporter: "auto" (TorchScript where the installed torch has it, else
    dynamo), "torchscript" or "dynamo"; exported_with(exporter) names the
    one used."""
    import torch
    import torch.nn as nn

    dynamo = exported_with(exporter) == "dynamo"
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    kept = [m.momentum for m in bns]
    if len(set(kept)) > 1:
        raise ValueError("the batch norms of this model have different momenta; memfit's export needs one")
    if any(k is None for k in kept):
        raise ValueError("a batch norm with momentum=None (a cumulative average) has no ONNX form memfit imports")
    was_training = model.training
    model.train()
    for m in bns:
        m.momentum = 0.0
    # A Hugging Face model returns its key/value cache beside the logits
    # unless its config says use_cache=False (GPT-2's does not); memfit
    # imports one output, and the cache is no part of training.
    config = getattr(model, "config", None)
    cached = getattr(config, "use_cache", None)
    if cached:
        config.use_cache = False
    tmp = path + ".tmp"
    try:
        args, names = example_input, [input_name]
        if attention_mask:
            args, names = (example_input, torch.ones_like(example_input)), [input_name, "attention_mask"]
        if dynamo:
            with _quiet_export():
                _export_dynamo(torch, model, args if isinstance(args, tuple) else (args,), names, output_name, tmp, opset)
            return _finish_dynamo(tmp, path, bns, kept, _buffer_names(model))
        kwargs = {}
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            # torch >= 2.5 also has the dynamo exporter (its default from 2.9),
            # which writes the weights beside the file, folds constants and
            # drops training mode; the TorchScript exporter keeps all three
            # as memfit reads them.
            kwargs["dynamo"] = False
        with _quiet_export():
            torch.onnx.export(model, args, tmp, export_params=True, do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING, opset_version=opset,
                              input_names=names, output_names=[output_name],
                              dynamic_axes={n: {0: "N"} for n in names}, **kwargs)
    finally:
        if cached:
            config.use_cache = cached
        for m, k in zip(bns, kept):
            m.momentum = k
        model.train(was_training)
    with open(tmp, "rb") as f:
        blob = f.read()
    # AttributeProto {name: "momentum" (field 1), f (field 2, fixed32)}: the
    # serialised form is exactly these bytes, once per batch norm.
    attr = b"\x0a\x08momentum\x15"
    if blob.count(attr + struct.pack("<f", 1.0)) != len(bns):
        os.remove(tmp)
        raise RuntimeError(f"{path}: expected {len(bns)} BatchNormalization momentum attributes of 1.0 in the export")
    if bns:
        blob = blob.replace(attr + struct.pack("<f", 1.0), attr + struct.pack("<f", 1.0 - kept[0]))
    blob += _metadata_entry("memfit.buffers", "\n".join(_buffer_names(model)))
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)
    return path


def _buffer_names(model):
    """The module's floating-point buffers (state it holds but does not
    train: Swin-V2's relative_coords_table, a positional table registered
    with register_buffer): memfit reads them as constants, not parameters."""
    return [name for name, b in model.named_buffers() if b is not None and b.is_floating_point()]


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _metadata_entry(key, value):
    """ModelProto's metadata_props (field 14) entry {key (1), value (2)},
    serialised: a field appended to a message's bytes is read as if it were
    anywhere in it."""
    k, v = key.encode(), value.encode()
    entry = b"\x0a" + _varint(len(k)) + k + b"\x12" + _varint(len(v)) + v
    return b"\x72" + _varint(len(entry)) + entry


def _finish_dynamo(tmp, path, bns, kept, buffers=()):
    """The dynamo export's batch norms carry the traced momentum (0, so
    that the trace left the running statistics as they were): each is set
    back to the module's, in ONNX's form (1 - momentum). The module's
    buffers are listed in the metadata (memfit.buffers)."""
    import onnx
    m = onnx.load(tmp)
    entry = m.metadata_props.add()
    entry.key, entry.value = "memfit.buffers", "\n".join(buffers)
    found = 0
    for node in m.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        found += 1
        for a in node.attribute:
            if a.name == "momentum":
                a.f = 1.0 - kept[0]
                break
        else:
            node.attribute.append(onnx.helper.make_attribute("momentum", 1.0 - kept[0]))
    if found != len(bns):
        os.remove(tmp)
        raise RuntimeError(f"{path}: expected {len(bns)} BatchNormalization nodes in the dynamo export, found {found} "
                           "(folded into a convolution?)")
    onnx.save(m, tmp)
    os.replace(tmp, path)
    return path


def complete_state_dict(module, tensors):
    """The module's whole state_dict from memfit's saved tensors (by name):
    what the ONNX file held once is saved once, so a tied weight (nanoGPT's
    lm_head.weight, the token table's) takes its twin's tensor, and a buffer
    memfit reads as a constant (an attention mask such as torch.tril(ones))
    keeps the module's value, which training does not change. Raises
    KeyError for a parameter or a trained buffer that is missing and has no
    twin, and for a saved name the module does not have."""
    own = module.state_dict(keep_vars=True)
    extra = sorted(set(tensors) - set(own))
    if extra:
        raise KeyError(f"memfit's weights hold {extra[:5]} that the module has no state for")
    params = {id(p) for p in module.parameters()}
    by_storage = {}
    for k, v in own.items():
        by_storage.setdefault((v.data_ptr(), tuple(v.shape)), []).append(k)
    state = dict(tensors)
    for k, v in own.items():
        if k in state:
            continue
        twins = [t for t in by_storage[(v.data_ptr(), tuple(v.shape))] if t in tensors]
        if twins:
            state[k] = tensors[twins[0]]
        elif id(v) not in params and k.rsplit(".", 1)[-1] != "num_batches_tracked" and \
                not k.endswith(("running_mean", "running_var")):
            state[k] = v.detach()
        else:
            raise KeyError(f"memfit's weights hold no '{k}' (nor a tensor tied to it)")
    return state
