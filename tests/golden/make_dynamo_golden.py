#!/usr/bin/env python3
"""A small CNN exported by torch's dynamo exporter (torch.onnx.export(...,
dynamo=True), the default of current torch), for test_onnx's OnnxDynamo
tests.

    make bench-venv && bench/.venv/bin/python tests/golden/make_dynamo_golden.py

The package's export with exporter="dynamo" (python/memfit/_onnx.py: the
module traced in training mode by torch.export, not optimised, weights in
the file). The model has what that exporter writes differently from the
TorchScript one: a convolution without a bias (its zero bias a computed
constant, Expand(CastLike(0, x), [C])), batch norm in inference form with
the module's momentum, a residual branch under torchvision's stochastic
depth (the noise's probability CastLike the noise), torch.chunk as
SplitToSequence and SequenceAt, GELU as x * (0.5 * (1 + erf(x / sqrt 2))),
adaptive average pooling and ConvNeXt's LayerNorm2d after it (its
permute of [N, C, 1, 1] a Gather of the flattened pool at computed
offsets), dropout as Dropout nodes in training mode, Reshape with
allowzero=1, the batch axis a dynamic dimension read through Shape.

Writes, beside this script:
- dynamo_cnn.onnx and dynamo_cnn.safetensors: stochastic depth and dropout
  at p = 0 (PyTorch's masks come from its own generator), with PyTorch's
  logits, loss and gradients for one batch and the losses of 5 plain SGD
  steps (lr 0.1), in float64 from the float32 weights;
- dynamo_cnn_dropout.onnx: the same module with stochastic depth p = 0.2
  and dropout p = 0.25, for the structure the importer makes of them;
- vit_torchscript.onnx, vit_dynamo.onnx and vit.safetensors: a small
  torchvision VisionTransformer (16 x 16 images, patches of 8, 2 layers of
  32 features) by each exporter, with PyTorch's numbers as above;
- swin_dynamo.onnx, swin_torchscript.onnx and swin.safetensors: a small
  torchvision SwinTransformer (32 x 32 images, two stages of two blocks,
  windows of 4, the second block's shifted) likewise;
- swin_v2_dynamo.onnx, swin_v2_torchscript.onnx and swin_v2.safetensors:
  the same with torchvision's V2 blocks (cosine attention with a learned
  logit scale, the continuous position bias MLP over a buffer, the zeroed
  key bias, post-norm), made alone by `make_dynamo_golden.py swin_v2`.

Debian's torch 1.13 has no dynamo exporter, so the files (a few tens of
KB each) are kept in the repository.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformer, SwinTransformerBlockV2
from torchvision.models.vision_transformer import VisionTransformer
from torchvision.ops import StochasticDepth

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as golden  # noqa: E402
from export_onnx import _onnx, sgd_reference  # noqa: E402  (the package's exporter, loaded by path)

B, LR, STEPS = 4, 0.1, 5


def export(model, example, path, exporter="dynamo"):
    """The package's export, then each node's metadata and doc string
    stripped: the dynamo exporter writes the Python stack trace of every
    node (this machine's paths, most of the file's size), which memfit does
    not read."""
    import onnx
    _onnx.export_training(model, example, path, 17, exporter=exporter)
    m = onnx.load(path)
    for node in m.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    for v in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        del v.metadata_props[:]
    m.graph.doc_string = ""
    onnx.save(m, path)
    print(f"{path}: {os.path.getsize(path)} bytes ({exporter}, torch {torch.__version__})")


class DynNet(nn.Module):
    def __init__(self, p_depth, p_drop):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.sd = StochasticDepth(p_depth, "row")
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.norm = nn.LayerNorm(8, eps=1e-6)
        self.drop = nn.Dropout(p_drop)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)   # [N, 8, 4, 4]
        a, b = torch.chunk(x, 2, dim=1)                           # SplitToSequence, SequenceAt
        x = torch.cat([a, F.gelu(b)], 1)                          # Erf GELU as x * (0.5 * (1 + erf))
        x = x + self.sd(F.hardswish(self.conv2(x)))
        x = self.pool(x).permute(0, 2, 3, 1)                      # ConvNeXt's LayerNorm2d on [N, 8, 1, 1]
        x = self.norm(x).permute(0, 3, 1, 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def swin_v2():
    """torchvision's SwinTransformer with its V2 blocks, small (as the V1
    fixture): F.normalize of q and k (ReduceL2, Clip, Expand, Div), the
    logit scale exp(clamp(s, max = log 100)), the position bias 16 *
    sigmoid(MLP(relative_coords_table)), a float buffer, read through the
    index buffer, and qkv's key bias zeroed by slice assignment (ScatterND
    on a parameter)."""
    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
                            stochastic_depth_prob=0.0, num_classes=10, block=SwinTransformerBlockV2,
                            downsample_layer=PatchMergingV2).train()
    example = torch.zeros(2, 3, 32, 32)
    for exporter in ("torchscript", "dynamo"):
        export(model, example, os.path.join(HERE, f"swin_v2_{exporter}.onnx"), exporter)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, 3, 32, 32)).astype(np.float32)
    y = np.array([3, 1, 4, 1], dtype=np.int32)
    out = sgd_reference(model, x, y, lambda m, xt: m(xt), F.cross_entropy, LR, STEPS)
    golden.write_safetensors(os.path.join(HERE, "swin_v2.safetensors"), out,
                             {"generator": "tests/golden/make_dynamo_golden.py swin_v2",
                              "torch_version": torch.__version__, "lr": repr(LR)})


def main():
    torch.set_num_threads(1)
    if sys.argv[1:] == ["swin_v2"]:
        return swin_v2()
    example = torch.zeros(2, 1, 8, 8)
    torch.manual_seed(0)
    model = DynNet(0.2, 0.25).train()
    export(model, example, os.path.join(HERE, "dynamo_cnn_dropout.onnx"))

    torch.manual_seed(0)
    model = DynNet(0.0, 0.0).train()
    export(model, example, os.path.join(HERE, "dynamo_cnn.onnx"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, 1, 8, 8)).astype(np.float32)
    y = np.array([3, 1, 4, 1], dtype=np.int32)
    out = sgd_reference(model, x, y, lambda m, xt: m(xt), F.cross_entropy, LR, STEPS)
    golden.write_safetensors(os.path.join(HERE, "dynamo_cnn.safetensors"), out,
                             {"generator": "tests/golden/make_dynamo_golden.py", "torch_version": torch.__version__,
                              "lr": repr(LR)})

    # torchvision's VisionTransformer, small: its class token expanded over
    # the batch and concatenated before the patches, nn.MultiheadAttention's
    # packed projection (unflattened into q, k, v), the Erf GELU; dropout 0
    # (its default). Exported by both exporters, one fixture for the two.
    torch.manual_seed(0)
    vit = VisionTransformer(image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                            num_classes=10).train()
    example = torch.zeros(2, 3, 16, 16)
    for exporter in ("torchscript", "dynamo"):
        export(vit, example, os.path.join(HERE, f"vit_{exporter}.onnx"), exporter)
    x = rng.standard_normal((B, 3, 16, 16)).astype(np.float32)
    out = sgd_reference(vit, x, y, lambda m, xt: m(xt), F.cross_entropy, LR, STEPS)
    golden.write_safetensors(os.path.join(HERE, "vit.safetensors"), out,
                             {"generator": "tests/golden/make_dynamo_golden.py", "torch_version": torch.__version__,
                              "lr": repr(LR)})


    # torchvision's SwinTransformer, small (32 x 32 images, patches of 4,
    # two stages of two blocks, windows of 4 with the second block's
    # shifted): the relative position bias read by its index buffer, the
    # shifted windows' mask built by slice assignment and added to the
    # scores, torch.roll, the patch merging's strided slices. Stochastic
    # depth at 0 (PyTorch's masks come from its own generator).
    torch.manual_seed(0)
    swin = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
                           stochastic_depth_prob=0.0, num_classes=10).train()
    example = torch.zeros(2, 3, 32, 32)
    for exporter in ("torchscript", "dynamo"):
        try:
            export(swin, example, os.path.join(HERE, f"swin_{exporter}.onnx"), exporter)
        except Exception as e:  # noqa: BLE001  (an exporter that cannot: said, not fatal)
            print(f"swin_{exporter}.onnx: not exported ({type(e).__name__}: {str(e)[:200]})")
    x = rng.standard_normal((B, 3, 32, 32)).astype(np.float32)
    out = sgd_reference(swin, x, y, lambda m, xt: m(xt), F.cross_entropy, LR, STEPS)
    golden.write_safetensors(os.path.join(HERE, "swin.safetensors"), out,
                             {"generator": "tests/golden/make_dynamo_golden.py", "torch_version": torch.__version__,
                              "lr": repr(LR)})
    swin_v2()


if __name__ == "__main__":
    sys.exit(main())
