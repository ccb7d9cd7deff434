"""A CNN defined in PyTorch, trained by memfit inside 512 MiB, cell by cell
(each "# %%" is a notebook cell; it also runs as a script):

    make python
    PYTHONPATH=build/python /usr/bin/python3 examples/pytorch_cnn_onnx.py

The module goes to memfit as its ONNX export (training mode, state_dict
names); memfit plans the run against the budget before step one, trains it
on Fashion-MNIST, and the trained weights come back into the same PyTorch
class, where PyTorch's own evaluation agrees with memfit's. Then the run's
report opens: in a notebook inline, from a script in the browser (or its
path is printed where there is no display).

MEMFIT_EXAMPLE_STEPS=N trains N steps instead of one epoch (the test suite
runs it that way).
"""
# %% A PyTorch model, as a course would write it.
import gzip
import os

import numpy as np
import torch
import torch.nn as nn

import memfit


class FashionCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                                        nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


torch.manual_seed(0)
net = FashionCNN()
example = torch.zeros(1, 1, 28, 28)  # one image shaped like the data's; the batch axis stays free

# %% The plan before step one: the predicted peak inside the budget, by class.
plan = memfit.plan(model=net, example_input=example, batch=128, memory="512MiB", optimizer="adamw")
print(plan)  # in a notebook `plan` alone renders as a table
print(f"predicted peak {plan.peak_bytes / 2**20:.1f} MiB of {plan.budget_bytes / 2**20:.0f} MiB with {plan.policy}")

# %% Train it inside 512 MiB (the default data: Fashion-MNIST).
steps = int(os.environ.get("MEMFIT_EXAMPLE_STEPS", "0"))
length = dict(steps=steps) if steps else dict(epochs=1, eval_every=100)
run = memfit.train(model=net, example_input=example, batch=128, memory="512MiB", optimizer="adamw",
                   out="runs/pytorch_cnn", **length)
r = run.result
print(f"{r['steps']} steps: test accuracy {r.get('test_accuracy', float('nan')):.4f}, peak RSS "
      f"{r['peak_rss_bytes'] / 2**20:.1f} MiB (planned {r['planned_peak_bytes'] / 2**20:.1f} MiB, budget 512 MiB)")

# %% The weights back in PyTorch, by state_dict name, and PyTorch's own evaluation.
trained = FashionCNN()
run.load_into(trained)  # load_state_dict(strict=True): every tensor, batch-norm statistics included
trained.eval()


def idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


fashion = "/usr/share/datasets/fashion-mnist"
images = idx(f"{fashion}/t10k-images-idx3-ubyte.gz")
labels = idx(f"{fashion}/t10k-labels-idx1-ubyte.gz")
# memfit's Fashion-MNIST input: pixels / 255, normalised by the training set's mean and deviation.
x = torch.from_numpy((images.astype(np.float32) / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
with torch.no_grad():
    accuracy = (trained(x).argmax(1).numpy() == labels).mean()
print(f"PyTorch's accuracy of the trained weights on the {len(labels)} test images: {accuracy:.4f} "
      f"(memfit's: {r['test_accuracy']:.4f})")
# The same weights and images: the two may differ only by a few images on
# the edge of a decision (the order of float sums).
if abs(accuracy - r["test_accuracy"]) > 0.005:
    raise SystemExit("PyTorch's evaluation of the trained weights disagrees with memfit's")

# %% The report: loss curves, the plan by class, predicted peak against measured RSS, the arena over a step.
report = run.report()  # a notebook shows it inline as the cell's value
if not report.open():
    print("report:", report.path)
