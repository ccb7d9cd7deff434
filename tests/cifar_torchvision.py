#!/usr/bin/env python3
"""Checks that torchvision reads a fake CIFAR folder (tests/make_fake_cifar.py)
as memfit does: every pixel and label of both splits, against the formula
the fake was made with.

    /usr/bin/python3 tests/cifar_torchvision.py ROOT 10|100

ROOT is torchvision's root (the folder holding cifar-10-batches-py/ or
cifar-100-python/). torchvision checks the real archive's md5 sums before
reading; the fake files cannot match them, so that check alone is bypassed.
Exits 77 (skipped) when torchvision is not installed (make deps-torch), 1
on a mismatch.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fake_cifar as fake  # noqa: E402

try:
    import numpy as np
    import torchvision
    import torchvision.datasets.cifar as tv_cifar
except ImportError as e:
    print(f"skipped: torchvision is not installed ({e}); make deps-torch installs python3-torchvision")
    sys.exit(77)


def main():
    root, kind = sys.argv[1], int(sys.argv[2])
    tv_cifar.check_integrity = lambda *a, **k: True  # the md5 sums of the real archive
    cls = torchvision.datasets.CIFAR10 if kind == 10 else torchvision.datasets.CIFAR100
    cls._check_integrity = lambda self: True
    bad = 0
    for train, s in ((True, 0), (False, 1)):
        ds = cls(root, train=train, download=False)
        # ds.data: N x 32 x 32 x 3 (HWC); the files hold CHW.
        for i in range(len(ds)):
            want = np.frombuffer(fake.pixel_bytes(i, s), dtype=np.uint8).reshape(3, 32, 32).transpose(1, 2, 0)
            label = fake.label10(i, s) if kind == 10 else fake.fine100(i, s)
            if not np.array_equal(ds.data[i], want) or ds.targets[i] != label:
                print(f"{'train' if train else 'test'} sample {i}: torchvision reads label {ds.targets[i]} "
                      f"(want {label}), pixels equal: {np.array_equal(ds.data[i], want)}")
                bad += 1
        names = ds.classes
        want_names = fake.CIFAR10_NAMES if kind == 10 else ["fine_%02d" % k for k in range(100)]
        if names != want_names:
            print(f"class names {names[:3]}... want {want_names[:3]}...")
            bad += 1
        print(f"torchvision {torchvision.__version__} CIFAR{kind} train={train}: {len(ds)} samples"
              f"{'' if bad else ', all equal'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
