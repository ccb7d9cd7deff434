"""memfit.train(data=...) with what a notebook holds: arrays read in place,
a torch Dataset materialised into the cache, against the same data as files
(tests/make_fake_cifar.py): the same losses bit for bit, exact resume, clear
errors naming the index, the plan's data row.

Run by ctest (python_package) with PYTHONPATH at build/python and
MEMFIT_CACHE_DIR at build/test-cache."""
import os
import sys

import numpy as np
import pytest

import memfit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests"))
import make_fake_cifar as fake  # noqa: E402

PER_BATCH = 32  # 160 training images, 32 test images
CIFAR10_NORM = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))  # cifar10_normalize(), as the file reader uses
RUN = dict(model="convnet", batch=16, steps=8, threads=2, seed=5, progress=False)


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake-cifar")
    import subprocess
    subprocess.check_call([sys.executable, os.path.join(os.path.dirname(fake.__file__), "make_fake_cifar.py"),
                           "--out", str(root), "--kind", "10", "--format", "py", "--per-batch", str(PER_BATCH)])
    return root


def arrays(split):
    """The fake CIFAR's split as the formula makes it: uint8 [N, 3, 32, 32], int64 [N]."""
    s = 0 if split == "train" else 1
    n = 5 * PER_BATCH if split == "train" else PER_BATCH
    x = np.stack([np.frombuffer(fake.pixel_bytes(i, s), np.uint8).reshape(3, 32, 32) for i in range(n)])
    y = np.array([fake.label10(i, s) for i in range(n)], np.int64)
    return x, y


def cached(folder):
    """The cache's files of materialised Datasets (and any temporary one left), not its other entries."""
    return sorted(f for f in os.listdir(folder) if f.startswith("torch-")) if os.path.isdir(folder) else []


def losses(run):
    return [h["train_loss"] for h in run.history if "train_loss" in h]


def test_arrays_train_as_the_files_do_bit_for_bit(cifar_root, tmp_path):
    files = memfit.train(data=str(cifar_root), out=tmp_path / "files", **RUN)
    x, y = arrays("train")
    xt, yt = arrays("test")
    nchw = memfit.train(data=(x, y), test_data=(xt, yt), normalize=CIFAR10_NORM, out=tmp_path / "nchw", **RUN)
    assert len(losses(files)) == 8
    assert losses(nchw) == losses(files)
    assert nchw.result["test_accuracy"] == files.result["test_accuracy"]
    # NHWC (detected: the last axis is 3, axis 1 is not) and a strided,
    # non-contiguous view: read through their strides, the same samples.
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    nhwc = memfit.train(data=(x_nhwc, y), test_data=(xt, yt), normalize=CIFAR10_NORM, out=tmp_path / "nhwc", **RUN)
    assert losses(nhwc) == losses(files)
    view = x_nhwc.transpose(0, 3, 1, 2)
    assert not view.flags.c_contiguous
    strided = memfit.train(data=(view, y), normalize=CIFAR10_NORM, layout="NCHW", out=tmp_path / "view", **RUN)
    assert losses(strided) == losses(files)
    for a, b in zip(files.weights().values(), nchw.weights().values()):
        assert np.array_equal(a, b)
    # The oracle can fail: other statistics give other losses.
    own = memfit.train(data=(x, y), out=tmp_path / "own", **RUN)
    assert losses(own) != losses(files)


def test_float_arrays_and_torch_tensors_are_used_as_given(tmp_path):
    torch = pytest.importorskip("torch")
    x, y = arrays("train")
    xf = ((x.astype(np.float32) / 255.0) - 0.5) / 0.25
    a = memfit.train(data=(xf, y), out=tmp_path / "np", **RUN)
    b = memfit.train(data=(torch.from_numpy(xf), torch.from_numpy(y)), out=tmp_path / "torch", **RUN)
    assert losses(a) == losses(b) and len(losses(a)) == 8


def test_the_plan_shows_the_notebooks_arrays_and_the_peak_stays_within_it(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, size=(4096, 3, 32, 32), dtype=np.uint8)  # 12 MiB
    y = (np.arange(4096) % 10).astype(np.int64)
    plan = memfit.plan(model="convnet", batch=32, data=(x, y))
    data_row = [c for c in plan.by_class if c["class"] == "data_pipeline"][0]
    assert data_row["bytes"] >= x.nbytes + y.nbytes
    assert "notebook's own memory" in plan.text and "12.0 MiB" in plan.text
    run = memfit.train(data=(x, y), batch=32, steps=20, threads=2, progress=False, out=tmp_path / "run")
    planned, peak = run.result["planned_peak_bytes"], run.result["peak_rss_bytes"]
    # The bound test_plan_accuracy holds the command to: within 3% of the plan.
    assert abs(peak - planned) <= 0.03 * planned, (peak, planned)


class Deterministic:
    """A map-style Dataset over arrays with a deterministic transform, as torchvision's are."""

    def __init__(self, x, y, transform):
        self.x, self.y, self.transform = x, y, transform

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.transform(self.x[i]), int(self.y[i])


class Scale:
    def __init__(self, k):
        self.k = k

    def __call__(self, img):
        import torch
        return torch.from_numpy(img.astype(np.float32) * self.k - 0.5)

    def __repr__(self):
        return f"Scale({self.k})"


def test_a_torch_dataset_is_cached_and_resumes_exactly(tmp_path):
    pytest.importorskip("torch")
    from test_memfit import KillAt
    cache = tmp_path / "cache"
    x, y = arrays("train")
    ds = Deterministic(x, y, Scale(1 / 255))
    said = []
    opts = dict(RUN, steps=40, cache_dir=str(cache))
    opts.pop("progress")
    whole = memfit.train(data=ds, out=tmp_path / "whole", progress=said.append, **opts)
    assert any("materialising Deterministic (160 items" in s for s in said)
    files = cached(cache)
    assert len(files) == 1 and files[0].endswith(".mfarr")
    assert "streamed from disk (cache: " in whole.log
    # The same arrays as float tensors in memory: the same losses.
    xf = np.stack([Scale(1 / 255)(x[i]).numpy() for i in range(len(y))])
    assert losses(memfit.train(data=(xf, y), out=tmp_path / "arrays", progress=False, **opts)) == losses(whole)
    # Interrupted after step 5, resumed: the uninterrupted run's losses.
    out = tmp_path / "stopped"
    with pytest.raises(memfit.Interrupted):
        memfit.train(data=ds, out=out, progress=KillAt(5), **opts)
    said.clear()
    resumed = memfit.train(data=ds, resume=str(out), progress=said.append, **opts)
    assert any("from the cache" in s for s in said), said  # reused, not written again
    assert cached(cache) == files
    assert losses(resumed) == losses(whole)
    for a, b in zip(whole.weights().values(), resumed.weights().values()):
        assert np.array_equal(a, b)
    # Other data (another transform): refused, naming it.
    with pytest.raises(RuntimeError, match="cannot resume .*different data"):
        memfit.train(data=Deterministic(x, y, Scale(2 / 255)), resume=str(out), **opts)
    assert cached(cache) == files  # refused before materialising it
    with pytest.raises(RuntimeError, match="cannot resume .*python:arrays"):
        memfit.train(data=(xf, y), resume=str(out), **opts)
    with pytest.raises(ValueError, match="pass that same data= again"):
        memfit.train(resume=str(out), **opts)


def test_a_cut_cache_file_is_written_again(tmp_path):
    pytest.importorskip("torch")
    x, y = arrays("train")
    ds = Deterministic(x, y, Scale(1 / 255))
    cache = tmp_path / "cache"
    first = memfit.train(data=ds, cache_dir=str(cache), out=tmp_path / "a", **RUN)
    (name,) = cached(cache)
    path = cache / name
    os.truncate(path, os.path.getsize(path) - 100)
    said = []
    opts = dict(RUN)
    opts.pop("progress")
    again = memfit.train(data=ds, cache_dir=str(cache), out=tmp_path / "b", progress=said.append, **opts)
    assert any("materialising" in s for s in said)
    assert cached(cache) == [name] and losses(again) == losses(first)


def test_arrays_are_read_in_place(tmp_path):
    x, y = arrays("train")
    src, _, _ = memfit._data.sources((x, y), None, normalize=((0.0,), (1.0,)))
    before, label = src.sample(3)
    assert label == y[3] and np.array_equal(before, x[3] / np.float32(255.0))
    x[3] = 255 - x[3]  # the notebook changes its array: memfit sees it, no copy was made
    after, _ = src.sample(3)
    assert np.array_equal(after, x[3] / np.float32(255.0)) and not np.array_equal(after, before)
    assert src.in_process_bytes == x.nbytes + y.nbytes


class Jitter(Scale):
    """A random transform (as RandomCrop is): each read draws anew."""

    def __call__(self, img):
        return super().__call__(img) + np.float32(np.random.uniform(-0.01, 0.01))

    def __repr__(self):
        return f"Jitter({self.k})"


def test_a_random_transform_is_frozen_and_says_so(tmp_path):
    pytest.importorskip("torch")
    x, y = arrays("train")
    ds = Deterministic(x, y, Jitter(1 / 255))
    cache = tmp_path / "cache"
    opts = dict(RUN)
    opts.pop("progress")
    said = []
    a = memfit.train(data=ds, cache_dir=str(cache), out=tmp_path / "a", progress=said.append, **opts)
    assert any("ONE draw" in s for s in said)
    # Keyed without the items' bytes (they change each read): the same draw again, the same losses.
    said.clear()
    b = memfit.train(data=ds, cache_dir=str(cache), out=tmp_path / "b", progress=said.append, **opts)
    assert any("from the cache" in s for s in said) and losses(a) == losses(b)
    assert len(cached(cache)) == 1


def test_a_dataset_read_per_epoch_draws_anew_each_epoch_and_resumes_exactly(tmp_path):
    pytest.importorskip("torch")
    from test_memfit import KillAt
    x, y = arrays("train")
    opts = dict(RUN, steps=30, materialise=False, classes=10)  # 160 / 16 = 10 steps an epoch: 3 epochs
    opts.pop("progress")
    # A deterministic transform read per epoch: what the materialised cache gives, bit for bit.
    det = Deterministic(x, y, Scale(1 / 255))
    cached_run = memfit.train(data=det, cache_dir=str(tmp_path / "cache"), out=tmp_path / "cached",
                              progress=False, **dict(opts, materialise=True))
    per_epoch = memfit.train(data=det, out=tmp_path / "det", progress=False, **opts)
    assert "read per epoch on the loader's thread" in per_epoch.log
    assert losses(per_epoch) == losses(cached_run)
    # A random transform: drawn from (seed, epoch, index), so epochs differ and a resumed run draws the same.
    rnd = Deterministic(x, y, Jitter(1 / 255))
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    whole = memfit.train(data=rnd, out=tmp_path / "whole", progress=False, **opts)
    assert np.array_equal(np.random.get_state()[1], before)  # the caller's generator put back after each item
    assert losses(whole) != losses(per_epoch)
    out = tmp_path / "stopped"
    with pytest.raises(memfit.Interrupted):
        memfit.train(data=rnd, out=out, progress=KillAt(13), **opts)
    resumed = memfit.train(data=rnd, resume=str(out), progress=False, **opts)
    assert losses(resumed) == losses(whole)


def test_torchvision_cifar10_over_the_fake_folder_trains(cifar_root, tmp_path):
    pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    import torchvision.datasets.cifar as tv_cifar
    from torchvision import transforms
    tv_cifar.check_integrity = lambda *a, **k: True  # the real archive's md5 sums; the fake's differ
    torchvision.datasets.CIFAR10._check_integrity = lambda self: True
    t = transforms.Compose([transforms.ToTensor(), transforms.Normalize(*CIFAR10_NORM)])
    train = torchvision.datasets.CIFAR10(str(cifar_root), train=True, download=False, transform=t)
    test = torchvision.datasets.CIFAR10(str(cifar_root), train=False, download=False, transform=t)
    run = memfit.train(data=train, test_data=test, cache_dir=str(tmp_path / "cache"), out=tmp_path / "tv", **RUN)
    assert run.result["steps"] == 8 and "test_accuracy" in run.result
    # Without a transform, torchvision gives PIL images: uint8, normalised by memfit.
    raw = torchvision.datasets.CIFAR10(str(cifar_root), train=True, download=False)
    run = memfit.train(data=raw, cache_dir=str(tmp_path / "cache"), out=tmp_path / "pil", **RUN)
    assert len(losses(run)) == 8


def test_bad_arrays_raise_data_error_naming_the_index(tmp_path):
    x, y = arrays("train")
    with pytest.raises(memfit.DataError, match="160 samples but y has 159"):
        memfit.train(data=(x, y[:-1]), **RUN)
    bad = y.copy()
    bad[17] = 12
    with pytest.raises(memfit.DataError, match="label 12 at index 17 is outside \\[0, 10\\)"):
        memfit.train(data=(x, bad), classes=10, **RUN)
    bad[17] = -1
    with pytest.raises(memfit.DataError, match="label -1 at index 17"):
        memfit.train(data=(x, bad), **RUN)
    xf = x.astype(np.float32)
    xf[42, 1, 3, 4] = np.nan
    with pytest.raises(memfit.DataError, match="index 42 holds NaN"):
        memfit.train(data=(xf, y), **RUN)
    with pytest.raises(memfit.DataError, match="float64"):
        memfit.train(data=(x.astype(np.float64), y), **RUN)
    assert issubclass(memfit.DataError, ValueError)


class Broken:
    """Items 0..n-1, item `bad` wrong in the way `how` says."""

    def __init__(self, how, bad=7, n=12):
        self.how, self.bad, self.n = how, bad, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        img = torch.full((3, 8, 8), float(i) / 16)
        if i == self.bad:
            if self.how == "shape":
                img = torch.zeros(3, 8, 9)
            elif self.how == "dtype":
                img = torch.zeros(3, 8, 8, dtype=torch.float64)
            elif self.how == "nan":
                img[0, 0, 0] = float("nan")
            elif self.how == "raise":
                raise OSError("the disk went away")
        return img, i % 3


@pytest.mark.parametrize("how,message", [("shape", "item 7: an image of float32 \\[3, 8, 9\\]"),
                                         ("dtype", "item 7: an image of float64"),
                                         ("nan", "item 7: its image holds NaN")])
def test_a_bad_dataset_item_names_its_index_and_leaves_no_cache_file(tmp_path, how, message):
    pytest.importorskip("torch")
    cache = tmp_path / "cache"
    with pytest.raises(memfit.DataError, match=message):
        memfit.train(data=Broken(how), cache_dir=str(cache), **RUN)
    assert cached(cache) == []


@pytest.mark.parametrize("how,message", [("shape", "item 7: an image of float32 \\[3, 8, 9\\]"),
                                         ("nan", "item 7: its image holds NaN")])
def test_a_bad_item_read_per_epoch_names_its_index(tmp_path, how, message):
    pytest.importorskip("torch")
    with pytest.raises(memfit.DataError, match=message):
        memfit.train(data=Broken(how), materialise=False, classes=3, out=tmp_path / "run",
                     **dict(RUN, batch=4, steps=6))


def test_a_dataset_that_fails_midway_leaves_no_cache_file(tmp_path):
    pytest.importorskip("torch")
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="the disk went away"):
        memfit.train(data=Broken("raise"), cache_dir=str(cache), **RUN)
    assert cached(cache) == []


def test_token_ids_train_a_text_classifier_in_place(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(1, 50, size=(256, 16)).astype(np.int64)
    x[::3, 10:] = 0  # padding (pad_id 0) after 10 ids
    y = (x[:, 0] % 4).astype(np.int64)
    opts = dict(model="lstm-classifier", batch=16, steps=6, threads=2, seed=2, progress=False)
    a = memfit.train(data=(x, y), out=tmp_path / "i64", **opts)
    # int32 ids, and a strided view of a wider array: the same samples, the same losses.
    wide = np.zeros((256, 32), np.int32)
    wide[:, ::2] = x
    b = memfit.train(data=(wide[:, ::2], y.astype(np.int32)), out=tmp_path / "view", **opts)
    assert len(losses(a)) == 6 and losses(a) == losses(b)
    assert "token ids [256, 16] int64 in place" in a.log
    # Padding changes the lengths the LSTM sees: other losses (the oracle can fail).
    c = memfit.train(data=(x, y), pad_id=1, vocab=50, out=tmp_path / "pad1", **opts)
    assert losses(c) != losses(a)
    bad = x.copy()
    bad[9, 3] = 70
    with pytest.raises(memfit.DataError, match="token id 70 at index 9, position 3 is outside \\[0, 50\\)"):
        memfit.train(data=(bad, y), vocab=50, **opts)
    with pytest.raises(ValueError, match="reads images, but data= holds token ids"):
        memfit.train(data=(x, y), **RUN)
