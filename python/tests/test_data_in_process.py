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


def test_a_cached_dataset_is_streamed_within_the_plan(tmp_path):
    pytest.importorskip("torch")
    x = np.random.default_rng(0).integers(0, 256, size=(4096, 3, 32, 32), dtype=np.uint8)
    y = (np.arange(4096) % 10).astype(np.int64)
    run = memfit.train(data=Deterministic(x, y, Scale(1 / 255)), materialise=True, cache_dir=str(tmp_path / "c"),
                       batch=32, steps=20, threads=2, progress=False, out=tmp_path / "run")
    assert "streamed from disk (cache: " in run.log
    planned, peak = run.result["planned_peak_bytes"], run.result["peak_rss_bytes"]
    assert abs(peak - planned) <= 0.03 * planned, (peak, planned)  # test_plan_accuracy's bound


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


# ---- labelled texts, tables, attention masks ----

TEXTS = ["the cat sat on the mat", "dogs bark at night", "a kitten and a puppy", "stocks fell sharply today",
         "the market rose again", "bonds and shares", "my parrot talks", "interest rates went up"]
TOPICS = ["pets", "pets", "pets", "money", "money", "money", "pets", "money"]
TEXT_RUN = dict(model="lstm-classifier", batch=8, steps=6, threads=2, seed=3, progress=False)


def text_examples(k=12):
    """k copies of 8 labelled texts, each made distinct by a number."""
    texts = [f"{t} {i}" for i in range(k) for t in TEXTS]
    return texts, [lab for _ in range(k) for lab in TOPICS]


def test_texts_train_as_the_same_jsonl_file_does_bit_for_bit(tmp_path):
    import json
    texts, labels = text_examples()
    path = tmp_path / "topics.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in zip(texts, labels)))
    from_file = memfit.train(data=str(path), out=tmp_path / "file", **TEXT_RUN)
    as_lists = memfit.train(data=(texts, labels), out=tmp_path / "lists", **TEXT_RUN)
    assert len(losses(from_file)) == 6 and losses(as_lists) == losses(from_file)
    assert "held out by --val-fraction" in as_lists.log  # the same split of one source as the file's
    # A dict of columns and a pandas DataFrame (its Series of strings), the same examples.
    as_dict = memfit.train(data={"text": texts, "label": labels}, out=tmp_path / "dict", **TEXT_RUN)
    assert losses(as_dict) == losses(from_file)
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"review": texts, "topic": labels, "stars": range(len(texts))})
    as_frame = memfit.train(data=frame, columns=("review", "topic"), out=tmp_path / "frame", **TEXT_RUN)
    assert losses(as_frame) == losses(from_file)
    # Integer labels are classes by value; a test split is used as given (no held-out part).
    ints = [0 if y == "money" else 1 for y in labels]
    split = memfit.train(data=(texts[:80], ints[:80]), test_data=(texts[80:], ints[80:]), out=tmp_path / "split",
                         **TEXT_RUN)
    assert "80 + 16 examples, 2 classes" in split.log and "held out" not in split.log
    # Resuming with other texts is refused.
    with pytest.raises(RuntimeError, match="cannot resume .*different data"):
        memfit.train(data=(texts[1:], labels[1:]), resume=str(tmp_path / "lists"), **TEXT_RUN)


def test_bad_texts_raise_data_error_naming_the_index(tmp_path):
    texts, labels = text_examples(2)
    with pytest.raises(memfit.DataError, match="16 texts but 15 labels"):
        memfit.train(data=(texts, labels[:-1]), **TEXT_RUN)
    with pytest.raises(memfit.DataError, match="text at index 5 is empty"):
        memfit.train(data=(texts[:5] + [""] + texts[6:], labels), **TEXT_RUN)
    with pytest.raises(memfit.DataError, match="label 1.5 at index 3 is not a class"):
        memfit.train(data={"text": texts, "label": [0, 1, 0, 1.5] + [0] * 12}, **TEXT_RUN)
    with pytest.raises(memfit.DataError, match="no label column: it has \\['text', 'y'\\]"):
        memfit.train(data={"text": texts, "y": labels}, **TEXT_RUN)
    with pytest.raises(ValueError, match="reads images, but data= holds labelled texts"):
        memfit.train(data=(texts, labels), **dict(TEXT_RUN, model="convnet"))
    with pytest.raises(ValueError, match="vocab= does not go with texts"):
        memfit.train(data=(texts, labels), vocab=100, **TEXT_RUN)


def test_an_attention_mask_gives_the_lengths(tmp_path):
    rng = np.random.default_rng(1)
    n, t = 128, 12
    lengths = rng.integers(3, t + 1, size=n)
    mask = (np.arange(t)[None, :] < lengths[:, None])
    ids = np.where(mask, rng.integers(2, 40, size=(n, t)), 1).astype(np.int64)  # padded with id 1
    y = (ids[:, 0] % 3).astype(np.int64)
    opts = dict(TEXT_RUN, vocab=40)
    by_pad = memfit.train(data=(ids, y), pad_id=1, out=tmp_path / "pad", **opts)
    # A tokenizer's output: input_ids and a bool attention mask (read as bytes, in place).
    by_mask = memfit.train(data=({"input_ids": ids, "attention_mask": mask}, y), out=tmp_path / "mask", **opts)
    assert "lengths from the attention mask" in by_mask.log
    assert len(losses(by_pad)) == 6 and losses(by_mask) == losses(by_pad)
    # Or the lengths themselves.
    by_lengths = memfit.train(data=({"input_ids": ids, "lengths": lengths}, y), out=tmp_path / "len", **opts)
    assert losses(by_lengths) == losses(by_pad)
    with pytest.raises(memfit.DataError, match=r"lengths: 13 at index 4 is outside \[1, 12\]"):
        memfit.train(data=({"input_ids": ids, "lengths": np.where(np.arange(n) == 4, 13, lengths)}, y), **opts)
    # Without the mask, pad id 0 is not padding here: other lengths, other losses (the oracle can fail).
    assert losses(memfit.train(data=(ids, y), out=tmp_path / "none", **opts)) != losses(by_pad)
    left = mask[:, ::-1].copy()
    with pytest.raises(memfit.DataError, match="attention_mask at index 0: a 1 at position .* after padding"):
        memfit.train(data=({"input_ids": ids, "attention_mask": left}, y), **opts)
    two = mask.astype(np.int32)
    two[5, 0] = 2
    with pytest.raises(memfit.DataError, match="attention_mask: 2 at index 5, position 0"):
        memfit.train(data=({"input_ids": ids, "attention_mask": two}, y), **opts)


class Labelled(Deterministic):
    """Deterministic, with its labels as torchvision's datasets have them (.targets): readable per epoch."""

    @property
    def targets(self):
        return list(self.y)


def test_materialise_none_ranks_the_cache_against_reading_per_epoch(tmp_path):
    pytest.importorskip("torch")
    x, y = arrays("train")  # 160 items
    cache = tmp_path / "cache"
    opts = dict(RUN, cache_dir=str(cache))
    # 8 steps x 16 = 128 reads, fewer than the 160 items a cache would transform: read per epoch.
    few = memfit.train(data=Labelled(x, y, Scale(1 / 255)), out=tmp_path / "few", **opts)
    assert "the run reads 128 items, fewer than the 160" in few.log and cached(cache) == []
    # 40 steps: 640 reads, 4 per item: cached once, then read from disk.
    many = memfit.train(data=Labelled(x, y, Scale(1 / 255)), out=tmp_path / "many", **dict(opts, steps=40))
    assert "items 4.0 times: its transforms run once into the cache" in many.log and len(cached(cache)) == 1
    # A random transform keeps its per-epoch draws, however many reads.
    rnd = memfit.train(data=Labelled(x, y, Jitter(1 / 255)), out=tmp_path / "rnd", **dict(opts, steps=40))
    assert "transforms are random (item 0 differs under two seeds): read per epoch" in rnd.log
    assert len(cached(cache)) == 1
    # materialise= decides when given.
    forced = memfit.train(data=Labelled(x, y, Scale(1 / 255)), materialise=True, out=tmp_path / "forced", **opts)
    assert "the run reads" not in forced.log and len(losses(forced)) == 8


def test_ranks_under_mpirun_share_in_process_arrays(tmp_path):
    """2 ranks x 16 samples of the notebook's arrays take the steps 1 process takes with 32 of them (to
    the summation order of the gradient reduction: the command's data-parallel test's tolerance)."""
    import shutil
    import subprocess
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (openmpi-bin)")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_train_arrays.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def run(np_, batch, out):
        cmd = [sys.executable, script, str(batch), str(out)]
        if np_:
            cmd = [mpirun, "--oversubscribe", "-np", str(np_), "--mca", "btl_vader_single_copy_mechanism", "none"] \
                + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + cmd
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    run(0, 32, tmp_path / "one")
    two = run(2, 16, tmp_path / "two")
    import json
    a = [json.loads(s) for s in open(tmp_path / "one" / "steps.jsonl")]
    b = [json.loads(s) for s in open(tmp_path / "two" / "steps.jsonl")]
    la = [s["train_loss"] for s in a if "train_loss" in s]
    lb = [s["train_loss"] for s in b if "train_loss" in s]
    assert len(la) == 10 and len(lb) == 10
    for p, q in zip(la, lb):
        assert abs(p - q) <= 1e-5 * abs(p), (la, lb)
    assert two.stdout.split() == ["rank", "0", "of", "2"], two.stdout  # rank 0 printed; rank 1 nothing
    # A rank whose data is bad ends the whole job (no hang: mpirun stops the others), naming the sample.
    bad = subprocess.run([mpirun, "--oversubscribe", "-np", "2", "--mca", "btl_vader_single_copy_mechanism", "none"]
                         + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
                         + [sys.executable, script, "16", str(tmp_path / "bad"), "--bad-on-rank-1"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0
    assert "token id 99 at index 3, position 2" in bad.stderr, bad.stderr
    # A rank whose engine fails (its plan fits no budget) ends the job, naming the rank and the reason.
    tiny = subprocess.run([mpirun, "--oversubscribe", "-np", "2", "--mca", "btl_vader_single_copy_mechanism", "none"]
                          + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
                          + [sys.executable, script, "16", str(tmp_path / "tiny"), "--tiny-budget-on-rank-1"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert tiny.returncode != 0
    assert "memfit (rank 1 of 2" in tiny.stderr and "over the budget" in tiny.stderr, tiny.stderr
