"""A torchvision-style CNN written in PyTorch, trained by memfit on CIFAR-10
passed as the notebook holds it, a torchvision Dataset, inside 512 MiB;
cell by cell (each "# %%" is a notebook cell; it also runs as a script):

    make python deps-torch
    PYTHONPATH=build/python /usr/bin/python3 examples/notebook_cifar.py ~/data   # torchvision's root

memfit.train(data=dataset) runs the Dataset's transforms once per item and
keeps the result in memfit's cache directory (written atomically, keyed by
the dataset's class, length, transforms and first and last items: the next
run reuses it), then streams it from disk. Its transforms are drawn once:
a random augmentation in them would be frozen to one draw (memfit says so);
augment=True is memfit's own random crop and flip, drawn every epoch.

MEMFIT_EXAMPLE_FAKE_CIFAR=DIR writes a small fake CIFAR-10 there
(tests/make_fake_cifar.py) and reads that instead, without torchvision's
md5 check of the real archive (the test suite runs it so, with
MEMFIT_EXAMPLE_STEPS=N steps instead of one epoch).
"""
# %% The data as a notebook has it: torchvision's CIFAR-10, ToTensor + Normalize.
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torchvision
from torchvision import transforms

import memfit

root = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/data")
fake = os.environ.get("MEMFIT_EXAMPLE_FAKE_CIFAR")
if fake:
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.check_call([sys.executable, os.path.join(here, "../tests/make_fake_cifar.py"), "--out", fake,
                           "--kind", "10", "--per-batch", "200"])
    # The fake's bytes are not the real archive's: torchvision's md5 checks are skipped for it.
    import torchvision.datasets.cifar as tv_cifar
    tv_cifar.check_integrity = lambda *a, **k: True
    torchvision.datasets.CIFAR10._check_integrity = lambda self: True
    root = fake
normalize = transforms.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
t = transforms.Compose([transforms.ToTensor(), normalize])
train_set = torchvision.datasets.CIFAR10(root, train=True, download=False, transform=t)
test_set = torchvision.datasets.CIFAR10(root, train=False, download=False, transform=t)
print(f"{len(train_set)} training and {len(test_set)} test images, classes {train_set.classes}")


# %% A small CNN, as torchvision's tutorials write one.
class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


torch.manual_seed(0)
net = SmallCNN()

# %% Train inside 512 MiB; the plan (printed first) has a data row for the cache file.
steps = int(os.environ.get("MEMFIT_EXAMPLE_STEPS", "0"))
length = dict(steps=steps) if steps else dict(epochs=1)
# example_input: one image shaped like the data's (left out, memfit takes the Dataset's shape).
run = memfit.train(model=net, example_input=torch.zeros(1, 3, 32, 32), data=train_set, test_data=test_set,
                   batch=64, memory="512MiB", optimizer="adamw", lr=0.002, out="runs/notebook_cifar", **length)
r = run.result
print(f"{r['steps']} steps: test accuracy {r.get('test_accuracy', float('nan')):.4f}, peak RSS "
      f"{r['peak_rss_bytes'] / 2**20:.1f} MiB (planned {r['planned_peak_bytes'] / 2**20:.1f} MiB, budget 512 MiB)")
if r["peak_rss_bytes"] > 512 * 2**20:
    raise SystemExit("the run went over its budget")

# %% The trained weights back in the PyTorch module, and PyTorch's own evaluation.
trained = SmallCNN()
run.load_into(trained)  # every tensor by state_dict name, batch-norm statistics included
trained.eval()
loader = torch.utils.data.DataLoader(test_set, batch_size=256)
right = 0
with torch.no_grad():
    for x, y in loader:
        right += (trained(x).argmax(1) == y).sum().item()
accuracy = right / len(test_set)
print(f"PyTorch's accuracy of the trained weights: {accuracy:.4f} (memfit's: {r['test_accuracy']:.4f})")
if abs(accuracy - r["test_accuracy"]) > 0.01:
    raise SystemExit("PyTorch's evaluation of the trained weights disagrees with memfit's")
