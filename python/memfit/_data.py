"""data= and test_data= as a notebook holds them.

- (x, y), numpy arrays or torch tensors (CPU), read in place, never copied:
  images [N, C, H, W] or [N, H, W, C] (NHWC is assumed when the last axis is
  1, 3 or 4 and axis 1 is not; layout="NCHW"/"NHWC" says it outright), or
  [N, H, W] (one channel), uint8 or float32; labels [N] of any integer type
  (int32/int64 in place; other integer types are converted, N x 8 bytes);
  token ids [N, T] int32/int64 with labels [N] for the text classifiers
  (an example's length is T less its trailing pad_id, 0 unless given).
  Strided views (x[::2], a transposed array) are read through their strides:
  no np.ascontiguousarray needed, nothing copied.
  uint8 pixels are normalised per channel as the IDX and CIFAR readers do,
  (v/255 - mean[c]) / std[c], with the training array's own statistics unless
  normalize=(mean, std) is given; float32 pixels are used as they are.
- a map-style torch Dataset (len() and [i] -> (image, label)), e.g.
  torchvision.datasets.CIFAR10(root, transform=...): its transforms run as
  written, once per item, and the items are materialised into memfit's cache
  directory (an array cache file, written to a temporary name and renamed;
  keyed by a fingerprint of the class, len, the transforms' repr and the
  first and last items; reused while those are unchanged), which the run
  then streams from disk. Every read of an item runs with torch's, numpy's
  and Python's generators seeded (and put back after), so a random
  transform is reproducible: materialised, it is ONE draw that every epoch
  sees (memfit says so). materialise=False reads the items on the loader's
  thread instead, each epoch, seeded from (the run's seed, epoch, index):
  drawn anew per epoch, and the same draws on a resumed run.

- (texts, labels), a pandas DataFrame, a dict of columns, a Hugging Face
  datasets split: memfit/_tables.py finds their columns; texts go to the
  model's tokenizer in the engine, token ids and images come back here as
  arrays and a Dataset.
- materialise=None ranks a Dataset's cache against reading it per epoch
  (_rank_materialise) and says which it took and why.

Bad data raises DataError (a ValueError) naming the index. The run's data
option becomes "python:...#<fingerprint>", which the checkpoint records:
resume= refuses other data.
"""
import hashlib
import os
import shutil
import struct
import sys
import time

import numpy as np

from . import _memfit, _tables

DataError = _memfit.DataError

DATA_KEYWORDS = ("layout", "classes", "normalize", "vocab", "pad_id", "materialise", "columns")


def is_in_process(data):
    """True for what this module takes (not a path, not None)."""
    return data is not None and not isinstance(data, (str, os.PathLike))


def sources(data, test_data, *, layout=None, classes=None, normalize=None, vocab=None, pad_id=0, cache_dir=None,
            say=print, resume=None, materialise=None, seed=42, columns=None, reads=None):
    """(train DataSource, test DataSource or None, identity) for memfit.train's data= and test_data=.
    resume: the run directory to continue; data other than its checkpoint's is refused before anything
    is materialised (the engine checks it again). reads: the items the run will read (steps x batch),
    None when unknown: with materialise=None it ranks caching a Dataset against reading it per epoch."""
    check = _resume_check(resume)
    if columns is not None and (not isinstance(columns, (tuple, list)) or len(columns) != 2):
        raise ValueError("columns= is a pair: (the x column: text, token ids or images, the label column)")
    if _tables.is_hf_dict(data):
        if "train" not in data:
            raise DataError(f"data=: a DatasetDict without a 'train' split (it has {list(data.keys())}): pass the "
                            "split, data=d['...']")
        if test_data is None:
            test_data = next((data[k] for k in ("test", "validation") if k in data), None)
        data = data["train"]
    if _is_table(data):
        data, test_data, done = _table_sources(data, test_data, columns, layout, classes, normalize, vocab, pad_id,
                                               check)
        if done is not None:
            return done
    elif columns is not None:
        raise ValueError("columns= names a table's columns (a DataFrame, a dict of columns, a Hugging Face split)")
    if isinstance(data, (tuple, list)) and len(data) == 2 and _tables.is_texts(data[0]):
        if _is_table(test_data):
            test_data = _tables.resolve(test_data, "test_data", columns)
        return _text_sources(_tables.texts_of(data[0], "data"), _tables.labels_as_text(data[1], "data"),
                             test_data, "texts", layout, classes, normalize, vocab, check)
    if isinstance(data, (tuple, list)):
        train, test, ident = _array_sources(data, test_data, layout, classes, normalize, vocab, pad_id)
        check(ident)
        return train, test, ident
    if _is_map_dataset(data) and materialise is None:
        materialise, why = _rank_materialise(data, classes, normalize, cache_dir, reads)
        say(f"memfit: data=: {why}\n")
    if _is_map_dataset(data) and not materialise:
        return _items_sources(data, test_data, classes, normalize, seed, check)
    if _is_map_dataset(data):
        return _dataset_sources(data, test_data, layout, classes, normalize, cache_dir, say, check)
    raise DataError(f"data={type(data).__name__}: expected a path, a pair (x, y) of numpy arrays or torch tensors, "
                    "(texts, labels), a map-style torch Dataset (len() and [i] -> (image, label)), a pandas "
                    "DataFrame, a dict of columns or a Hugging Face datasets split")


def _is_table(d):
    return _tables.is_hf(d) or _tables.is_frame(d) or _tables.is_column_dict(d)


def _table_sources(data, test_data, columns, layout, classes, normalize, vocab, pad_id, check):
    """A table's columns: (data, test_data, None) to go on with (its images as a Dataset), or
    (None, None, (train, test, identity)) when done."""
    what = _tables.resolve(data, "data", columns)
    if test_data is not None and not _is_table(test_data):
        raise DataError(f"test_data= is a {type(test_data).__name__} but data= is a table: pass both the same way")
    test = _tables.resolve(test_data, "test_data", columns) if test_data is not None else None
    if test is not None and test[0] != what[0]:
        raise DataError(f"test_data= holds {test[0]} but data= holds {what[0]}: pass both alike")
    if what[0] == "images":
        return what[1], test[1] if test is not None else None, None
    if what[0] == "tokens":
        _, ids, mask, y, _ = what
        pair = ({"input_ids": ids, "attention_mask": mask} if mask is not None else ids, y)
        tpair = None
        if test is not None:
            _, tids, tmask, ty, _ = test
            tpair = ({"input_ids": tids, "attention_mask": tmask} if tmask is not None else tids, ty)
        train, tsrc, ident = _array_sources(pair, tpair, layout, classes, normalize, vocab, pad_id)
        check(ident)
        return None, None, (train, tsrc, ident)
    _, texts, labels, note = what
    return None, None, _text_sources(texts, labels, test, note, layout, classes, normalize, vocab, check)


def _text_sources(texts, labels, test, what, layout, classes, normalize, vocab, check):
    """Labelled texts for the model's tokenizer. test: (texts, labels) or a table's resolved texts or None."""
    for name, given in (("layout", layout), ("classes", classes), ("normalize", normalize), ("vocab", vocab)):
        if given is not None:
            raise ValueError(f"{name}= does not go with texts: the model's tokenizer makes the ids (tokenizer=, "
                             "max_len=) and the labels are the classes")
    ident = _tables.text_ident(texts, labels, what)
    check(ident)
    train = _tables.text_source(texts, labels, "data", what)
    tsrc = None
    if test is not None:
        if isinstance(test, tuple) and len(test) == 4 and test[0] == "texts":
            ttexts, tlabels = test[1], test[2]
        elif isinstance(test, (tuple, list)) and len(test) == 2 and _tables.is_texts(test[0]):
            ttexts, tlabels = _tables.texts_of(test[0], "test_data"), _tables.labels_as_text(test[1], "test_data")
        else:
            raise DataError("test_data= is not labelled texts but data= is: pass both the same way")
        tsrc = _tables.text_source(ttexts, tlabels, "test_data", what)
    return train, tsrc, ident


def _rank_materialise(ds, classes, normalize, cache_dir, reads):
    """materialise=None: (cache it?, the reason, as a line of the log). Reading per epoch keeps a random
    transform's per-epoch draws and runs the transforms only for the items the run reads; the cache runs
    them once for every item, then serves each read from disk in C++ (no Python per item)."""
    n = len(ds)
    name = _shown(ds)
    if n == 0:
        return True, f"{name} is empty"  # the cache path names it
    first, label0, random, reproducible = _probe(ds)
    streamable = (classes is not None or getattr(ds, "targets", None) is not None
                  or (isinstance(getattr(ds, "classes", None), (list, tuple)) and ds.classes))
    if random and streamable:
        return False, (f"{name}'s transforms are random (item 0 differs under two seeds): read per epoch on the "
                       "loader's thread, drawn anew each epoch from the run's seed (materialise=True would cache "
                       "one draw)")
    if random:
        return True, (f"{name}'s transforms are random, but it names no classes (.classes, .targets or classes=) "
                      "to read it per epoch: materialised")
    last = _seeded_item(ds, n - 1, _item_seed(0, 0, n - 1)) if n > 1 else (first, label0)
    fp = _fingerprint(ds, (first, label0), last, not reproducible)
    if normalize is not None:
        stats = ([float(v) for v in normalize[0]], [float(v) for v in normalize[1]])
        fp = hashlib.sha256(fp + repr(stats).encode()).digest()
    folder = os.path.abspath(cache_dir or _memfit.default_cache_dir())
    if os.path.exists(os.path.join(folder, f"torch-{type(ds).__name__}-{fp.hex()[:16]}.mfarr")):
        return True, f"{name} is in the cache already: read from there"
    size = n * first.nbytes
    probe = folder
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe).free
    fmt = _memfit.format_bytes
    if free < size + (64 << 20) and streamable:
        return False, (f"caching {name} would take {fmt(size)} and {probe} has {fmt(free)} free: read per epoch "
                       "on the loader's thread instead")
    if reads is not None and reads < n and streamable:
        return False, (f"the run reads {reads} items, fewer than the {n} that caching {name} would transform: read "
                       "per epoch on the loader's thread (materialise=True caches it)")
    times = f"{reads / n:.1f} times" if reads is not None else "each epoch"
    return True, (f"the run reads {name}'s {n} items {times}: its transforms run once into the cache "
                  f"({fmt(size)}), each read after that comes from disk (materialise=False reads per epoch)")


def _checkpoint_data(run_dir):
    """The data option the checkpoint in run_dir was trained with (None when unknown)."""
    try:
        with open(os.path.join(run_dir, "checkpoint.safetensors"), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 1 << 26:
                return None
            import json
            return json.loads(f.read(n)).get("__metadata__", {}).get("data")
    except (OSError, ValueError, struct.error):
        return None  # the engine reports a missing or bad checkpoint


def _resume_check(resume):
    trained_on = _checkpoint_data(os.fspath(resume)) if resume else None

    def check(ident):
        if trained_on is not None and trained_on != ident:
            raise RuntimeError(f"cannot resume from {resume}: it was trained on {trained_on}, this run's data is "
                               f"{ident} (different data: another content, shape, dtype, normalisation or "
                               "transform); resume with the data it was trained on")
    return check


# ---- arrays ----

def _numpy(a, what):
    """a as a numpy array sharing its memory (a CPU torch tensor's .numpy())."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "detach") and hasattr(a, "numpy"):  # a torch tensor
        if getattr(a, "device", None) is not None and str(a.device) != "cpu":
            raise DataError(f"{what}: a tensor on {a.device}; memfit reads CPU memory: pass {what}.cpu()")
        return a.detach().numpy()
    raise DataError(f"{what}: a {type(a).__name__}; expected a numpy array or a torch tensor")


def _mask(m, role):
    """An attention mask as the engine reads it: integers, bool viewed as uint8 (no copy)."""
    m = _numpy(m, f"{role}'s attention_mask")
    if m.dtype == np.bool_:
        return m.view(np.uint8)
    if m.dtype not in (np.uint8, np.int32, np.int64) or not m.dtype.isnative:
        m = m.astype(np.int32)  # N x T x 4 bytes
    return m


def _lengths_mask(lengths, ids, role):
    """Lengths [N] as the mask the engine reads: a bool [N, T] made here (N x T bytes)."""
    n = _numpy(lengths, f"{role}'s lengths")
    t = _numpy(ids, f"{role}'s x").shape[-1]
    if n.ndim != 1 or not np.issubdtype(n.dtype, np.integer):
        raise DataError(f"{role}'s lengths: integers [N] expected, got {n.dtype} of shape {list(n.shape)}")
    bad = np.flatnonzero((n < 1) | (n > t))
    if len(bad):
        i = int(bad[0])
        raise DataError(f"{role}'s lengths: {int(n[i])} at index {i} is outside [1, {t}]")
    return (np.arange(t)[None, :] < n[:, None]).view(np.uint8)


def _pair(data, role):
    """(x, y, attention mask or None). x may be a tokenizer's output (a mapping with input_ids and
    optionally attention_mask)."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise DataError(f"{role}=: expected a pair (x, y), got a {type(data).__name__}"
                        + (f" of {len(data)}" if isinstance(data, (tuple, list)) else ""))
    x, mask = data[0], None
    if hasattr(x, "keys") and hasattr(x, "__getitem__") and "input_ids" in x:
        if "attention_mask" in x:
            mask = _mask(x["attention_mask"], role)
        elif "lengths" in x:
            mask = _lengths_mask(x["lengths"], x["input_ids"], role)
        x = x["input_ids"]
    x, y = _numpy(x, f"{role}'s x"), _numpy(data[1], f"{role}'s y")
    if y.ndim != 1:
        raise DataError(f"{role}'s y: labels [N] expected, got shape {list(y.shape)}")
    if x.ndim < 1 or x.shape[0] != y.shape[0]:
        raise DataError(f"{role}: x has {x.shape[0] if x.ndim else 0} samples but y has {y.shape[0]} labels: "
                        "they must have the same length")
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{role}'s y: integer class labels expected, got {y.dtype}")
    if y.dtype not in (np.int32, np.int64) or not y.dtype.isnative:
        y = y.astype(np.int64)  # N x 8 bytes: the only copy made
    if len(y) and y.min() < 0:
        i = int(np.flatnonzero(y < 0)[0])
        raise DataError(f"{role}: label {int(y[i])} at index {i} is negative; labels are classes 0, 1, ...")
    if mask is not None and x.ndim != 2:
        raise DataError(f"{role}: an attention_mask goes with token ids [N, T], x has shape {list(x.shape)}")
    return x, y, mask


def _layout(x, layout, role):
    if x.ndim == 3:
        return "NHW"
    if x.ndim != 4:
        raise DataError(f"{role}'s x: images [N, C, H, W], [N, H, W, C] or [N, H, W] expected, or token ids "
                        f"[N, T]; got shape {list(x.shape)}")
    if layout is not None:
        if layout not in ("NCHW", "NHWC"):
            raise DataError(f"layout={layout!r}: expected 'NCHW' or 'NHWC'")
        return layout
    return "NHWC" if x.shape[3] in (1, 3, 4) and x.shape[1] not in (1, 3, 4) else "NCHW"


def _channel_stats(x, layout):
    """Per-channel mean and std of x/255 (uint8), from exact per-channel histograms taken in chunks of
    samples (no full-size temporary)."""
    axis = {"NCHW": 1, "NHWC": 3, "NHW": None}[layout]
    channels = 1 if axis is None else x.shape[axis]
    counts = np.zeros((channels, 256), np.int64)
    for i in range(0, x.shape[0], 2048):
        chunk = x[i:i + 2048]
        for c in range(channels):
            part = chunk if axis is None else np.take(chunk, c, axis=axis)
            counts[c] += np.bincount(part.ravel(), minlength=256)
    v = np.arange(256, dtype=np.float64)
    n = counts.sum(axis=1)
    mean = (counts @ v) / n / 255.0
    var = np.maximum((counts @ (v * v)) / n / 65025.0 - mean * mean, 0.0)
    return [float(m) for m in mean], [float(s) if s > 1e-6 else 1.0 for s in np.sqrt(var)]


def _hash_array(h, a):
    h.update(f"{a.dtype.str}{list(a.shape)}".encode())
    if a.flags.c_contiguous:
        h.update(memoryview(a).cast("B"))
    else:
        for i in range(0, a.shape[0], 256):
            h.update(np.ascontiguousarray(a[i:i + 256]).data)


def _array_sources(data, test_data, layout, classes, normalize, vocab, pad_id):
    x, y, mask = _pair(data, "data")
    if test_data is not None and _is_map_dataset(test_data):
        raise DataError("test_data= is a torch Dataset but data= is arrays: pass both the same way")
    test = _pair(test_data, "test_data") if test_data is not None else None
    top = int(max(y.max(), test[1].max() if test is not None and len(test[1]) else 0)) + 1
    classes = int(classes) if classes is not None else top
    h = hashlib.blake2b(digest_size=8)
    if x.ndim == 2:  # token ids
        if not np.issubdtype(x.dtype, np.integer):
            raise DataError(f"data's x: [N, T] is read as token ids and must be integers, got {x.dtype} "
                            "(images are [N, C, H, W], [N, H, W, C] or [N, H, W])")
        if vocab is None:
            vocab = int(max(x.max(), test[0].max() if test is not None else 0)) + 1
        h.update(f"tokens classes={classes} vocab={vocab} pad={pad_id} mask={mask is not None}".encode())
        for a in (x, y) if mask is None else (x, y, mask):
            _hash_array(h, a)
        ident = f"python:tokens[{x.shape[0]}x{x.shape[1]} {x.dtype}]#{h.hexdigest()}"
        with_mask = ", lengths from the attention mask" if mask is not None else ""
        note = f"token ids [{x.shape[0]}, {x.shape[1]}] {x.dtype} in place{with_mask}"
        train = _memfit.array_tokens(x, y, classes, int(vocab), int(pad_id), note, mask)
        tsrc = None
        if test is not None:
            tx, ty, tmask = test
            if tx.ndim != 2:
                raise DataError(f"test_data's x: token ids [N, {x.shape[1]}] expected like data's, got shape {list(tx.shape)}")
            tsrc = _memfit.array_tokens(tx, ty, classes, int(vocab), int(pad_id),
                                        f"token ids [{tx.shape[0]}, {tx.shape[1]}] in place", tmask)
        return train, tsrc, ident
    if mask is not None:
        raise DataError("data's x: an attention_mask goes with token ids [N, T]")
    lay = _layout(x, layout, "data")
    if x.dtype not in (np.uint8, np.float32):
        raise DataError(f"data's x: images of {x.dtype}; expected uint8 or float32 (x.astype(np.float32) makes a "
                        "float32 copy)")
    if x.dtype == np.uint8:
        mean, std = ([float(v) for v in normalize[0]], [float(v) for v in normalize[1]]) if normalize is not None \
            else _channel_stats(x, lay)
    else:
        mean, std = [], []
    h.update(f"images {lay} classes={classes} mean={mean} std={std}".encode())
    for a in (x, y):
        _hash_array(h, a)
    shape = "x".join(str(s) for s in x.shape)
    ident = f"python:arrays[{shape} {x.dtype} {lay}]#{h.hexdigest()}"
    how = f"normalised with mean {_fmt(mean)} std {_fmt(std)}" if mean else "as given"
    train = _memfit.array_images(x, y, lay, classes, mean, std, f"images [{shape}] {x.dtype} {lay} in place, {how}")
    tsrc = None
    if test is not None:
        tx, ty, _ = test
        tlay = _layout(tx, layout, "test_data")
        if tx.dtype != x.dtype:
            raise DataError(f"test_data's x is {tx.dtype}, data's is {x.dtype}: pass both alike")
        tsrc = _memfit.array_images(tx, ty, tlay, classes, mean, std,
                                    f"images [{'x'.join(str(s) for s in tx.shape)}] {tx.dtype} {tlay} in place")
    return train, tsrc, ident


def _fmt(v):
    return "(" + ", ".join(f"{a:.4g}" for a in v) + ")"


# ---- torch Datasets ----

def _shown(ds):
    """The Dataset as the log names it: its class, or what a table's image column says it is."""
    return getattr(ds, "shown_as", None) or type(ds).__name__


def _is_map_dataset(d):
    return (hasattr(d, "__getitem__") and hasattr(d, "__len__") and not isinstance(d, (tuple, list, str, bytes))
            and not isinstance(d, np.ndarray) and not hasattr(d, "detach"))


def _item_image(img, i):
    """An item's image as a numpy array, C x H x W (uint8 or float32)."""
    if hasattr(img, "detach") and hasattr(img, "numpy"):
        a = img.detach().cpu().numpy()
        chw = True
    elif isinstance(img, np.ndarray):
        a = img
        chw = not (a.ndim == 3 and a.shape[2] in (1, 3, 4) and a.shape[0] not in (1, 3, 4))
    elif hasattr(img, "mode") and hasattr(img, "size"):  # a PIL image: H x W (x C)
        a = np.asarray(img)
        chw = a.ndim != 3
    else:
        raise DataError(f"item {i}: its image is a {type(img).__name__}; expected a torch tensor, a numpy array or "
                        "a PIL image (transforms.ToTensor() makes a tensor)")
    if a.ndim == 2:
        a = a[None]
    elif a.ndim == 3 and not chw:
        a = a.transpose(2, 0, 1)
    if a.ndim != 3:
        raise DataError(f"item {i}: an image of shape {list(a.shape)}; expected C x H x W")
    if a.dtype not in (np.uint8, np.float32):
        raise DataError(f"item {i}: an image of {a.dtype}; expected float32 (transforms.ToTensor()) or uint8")
    return np.ascontiguousarray(a)


def _item(ds, i):
    item = ds[i]
    if not isinstance(item, (tuple, list)) or len(item) < 2:
        raise DataError(f"item {i}: a {type(item).__name__}; expected (image, label)")
    img = _item_image(item[0], i)
    label = item[1]
    try:
        label = int(label.item() if hasattr(label, "item") else label)
    except (TypeError, ValueError):
        raise DataError(f"item {i}: label {item[1]!r} is not an integer class") from None
    if label < 0:
        raise DataError(f"item {i}: label {label} is negative; labels are classes 0, 1, ...")
    return img, label


def _seeded_item(ds, i, seed):
    """_item(ds, i) with torch's, numpy's and Python's random generators seeded from `seed` and put back
    after: a random transform draws what the seed says, and the caller's generators are as they were."""
    import random as pyrandom
    torch = sys.modules.get("torch")
    saved = (torch.get_rng_state() if torch else None, pyrandom.getstate(), np.random.get_state())
    try:
        if torch:
            torch.manual_seed(seed)
        pyrandom.seed(seed)
        np.random.seed(seed % (1 << 32))
        return _item(ds, i)
    finally:
        if torch:
            torch.set_rng_state(saved[0])
        pyrandom.setstate(saved[1])
        np.random.set_state(saved[2])


def _same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def _probe(ds):
    """Item 0 under seed A, again under A, and under B: (image, label, random: A and B differ,
    reproducible: A gives the same twice, so its bytes can key the data)."""
    first, label0 = _seeded_item(ds, 0, _item_seed(0, 0, 0))
    again, _ = _seeded_item(ds, 0, _item_seed(0, 0, 0))
    other, _ = _seeded_item(ds, 0, _item_seed(1, 0, 0))
    return first, label0, not _same(first, other), _same(first, again)


def _fingerprint(ds, first, last, random):
    h = hashlib.sha256()
    t = type(ds)
    h.update(f"{t.__module__}.{t.__qualname__} len={len(ds)}".encode())
    for name in ("transform", "target_transform", "transforms", "root", "train", "split"):
        h.update(f"{name}={getattr(ds, name, None)!r}".encode())
    if not random:  # a random transform's items differ each time: their bytes would key nothing
        for img, label in (first, last):
            h.update(f"{img.dtype.str}{list(img.shape)}{label}".encode())
            h.update(img.data)
    return h.digest()


HEADER = 96


def _materialise(ds, path, fingerprint, first, classes, stats, say):
    """Writes ds's items to path (temporary name, fsync, rename); nothing is left on failure."""
    n = len(ds)
    C, H, W = first.shape
    dtype = first.dtype
    labels_at = -(-(HEADER + 8 * C) // 64) * 64
    data_at = -(-(labels_at + 4 * n) // 64) * 64
    sample = first.nbytes
    tmp = f"{path}.tmp.{os.getpid()}.{os.urandom(4).hex()}"
    labels = np.empty(n, np.int32)
    s = np.zeros(C)
    s2 = np.zeros(C)
    try:
        with open(tmp, "wb") as f:
            f.truncate(data_at)
            f.seek(data_at)
            shown = time.monotonic()
            for i in range(n):
                if time.monotonic() - shown > 10:
                    shown = time.monotonic()
                    say(f"memfit: materialised {i} of {n} items\n")
                img, label = _seeded_item(ds, i, _item_seed(0, 0, i))
                if img.shape != first.shape or img.dtype != dtype:
                    raise DataError(f"item {i}: an image of {img.dtype} {list(img.shape)}; item 0's is {dtype} "
                                    f"{list(first.shape)}: every item must have the same shape and type")
                if dtype == np.float32 and not np.isfinite(img).all():
                    raise DataError(f"item {i}: its image holds NaN or an infinity")
                if classes is not None and label >= classes:
                    raise DataError(f"item {i}: label {label} is outside [0, {classes})")
                labels[i] = label
                if dtype == np.uint8 and stats is None:
                    c = img.reshape(C, -1).astype(np.float64)
                    s += c.sum(axis=1)
                    s2 += (c * c).sum(axis=1)
                f.write(img.tobytes())
            k = classes if classes is not None else int(labels.max()) + 1
            if stats is not None:
                mean, std = stats
            elif dtype == np.uint8:
                m = s / (n * H * W) / 255.0
                mean = [float(v) for v in m]
                std = [float(v) if v > 1e-6 else 1.0 for v in np.sqrt(np.maximum(s2 / (n * H * W) / 65025.0 - m * m, 0))]
            else:
                mean, std = [0.0] * C, [1.0] * C
            size = data_at + n * sample
            f.seek(0)
            f.write(b"MFARRAY\0" + struct.pack("<IIIIIIQQQQ", 1, 0 if dtype == np.uint8 else 1, C, H, W, k, n,
                                               labels_at, data_at, size))
            f.write(fingerprint)
            f.write(np.asarray(list(mean) + list(std), np.float32).tobytes())
            f.seek(labels_at)
            f.write(labels.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        d = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(d)
        finally:
            os.close(d)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return mean, std


def _dataset_source(ds, role, classes, cache_dir, stats, say, check=None):
    n = len(ds)
    if n == 0:
        raise DataError(f"{role}=: the Dataset is empty")
    first, label0, random, reproducible = _probe(ds)
    last = _seeded_item(ds, n - 1, _item_seed(0, 0, n - 1)) if n > 1 else (first, label0)
    fp = _fingerprint(ds, (first, label0), last, not reproducible)
    if stats is not None:
        fp = hashlib.sha256(fp + repr(stats).encode()).digest()
    name = type(ds).__name__
    if check:
        check(_torch_ident(ds, fp.hex()[:16]))
    folder = os.path.abspath(cache_dir or _memfit.default_cache_dir())
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"torch-{name}-{fp.hex()[:16]}.mfarr")
    C, H, W = first.shape
    note = f"{name} ({n} items, {C} x {H} x {W} {first.dtype}, materialised)"
    src = None
    if os.path.exists(path):
        try:
            src = _memfit.array_file(path, note)
            if src.fingerprint != fp.hex() or src.size != n:
                src = None
        except (RuntimeError, ValueError):
            src = None
        if src is not None:
            say(f"memfit: {role}: {name} ({n} items) from the cache {path} (unchanged since it was written)\n")
    if src is None:
        say(f"memfit: {role}: materialising {name} ({n} items, {C} x {H} x {W} {first.dtype}) into the cache "
            f"{path}: its transforms run once, here\n")
        _materialise(ds, path, fp, first, classes, stats, say)
        src = _memfit.array_file(path, note)
    if random:
        say(f"memfit: {role}: {name}'s transforms are random (item 0 differs under two seeds): the cache holds "
            "ONE draw of them, and every epoch sees that draw; materialise=False reads the items each epoch instead "
            "(drawn anew per epoch, from the run's seed), and augment=True is memfit's own random crop and flip\n")
    if classes is not None and src.classes != classes:
        raise DataError(f"{role}=: the cache {path} has {src.classes} classes, expected {classes}")
    return src, fp.hex()[:16], random


def _torch_ident(ds, fp):
    return f"python:torch[{type(ds).__qualname__} {len(ds)}]#{fp}"


def _dataset_sources(data, test_data, layout, classes, normalize, cache_dir, say, check):
    if test_data is not None and not _is_map_dataset(test_data):
        raise DataError("test_data= is not a torch Dataset but data= is: pass both the same way")
    if classes is None and isinstance(getattr(data, "classes", None), (list, tuple)) and data.classes:
        classes = len(data.classes)  # torchvision's datasets name their classes
    stats = ([float(v) for v in normalize[0]], [float(v) for v in normalize[1]]) if normalize is not None else None
    train, fp, _ = _dataset_source(data, "data", classes, cache_dir, stats, say, check)
    test = None
    if test_data is not None:
        # The test set's uint8 pixels take the training set's statistics
        # (the header's mean[C], std[C]).
        test_stats = stats
        if test_stats is None:
            with open(train.file, "rb") as f:
                head = f.read(HEADER)
                C = struct.unpack_from("<I", head, 16)[0]
                vals = np.frombuffer(f.read(8 * C), np.float32)
            test_stats = ([float(v) for v in vals[:C]], [float(v) for v in vals[C:]])
        test, _, _ = _dataset_source(test_data, "test_data", train.classes, cache_dir, test_stats, say)
    return train, test, _torch_ident(data, fp)


# ---- torch Datasets read per epoch (materialise=False) ----

def _item_seed(seed, epoch, i):
    h = hashlib.blake2b(f"{seed}/{epoch}/{i}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def _items_source(ds, role, classes, stats, seed, shape=None):
    """A DataSource that reads ds[i] on the loader's thread, its random generators (torch's, numpy's,
    Python's) seeded from (seed, epoch, i) and put back after: the transforms draw anew each epoch, the
    same draws on a resumed run."""
    n = len(ds)
    if n == 0:
        raise DataError(f"{role}=: the Dataset is empty")
    if classes is None:
        targets = getattr(ds, "targets", None)
        if targets is None:
            raise DataError(f"{role}=: pass classes= (the Dataset has no .classes or .targets to count them from, "
                            "and reading every item to find the largest label would run its transforms)")
        classes = int(np.max(np.asarray(targets))) + 1
    first, _ = _seeded_item(ds, 0, 0)
    shape = shape or first.shape
    mean = np.asarray(stats[0] if stats else [0.0], np.float32)
    inv = np.float32(1.0) / np.asarray(stats[1] if stats else [1.0], np.float32)

    def read(i, epoch):
        img, label = _seeded_item(ds, i, _item_seed(seed, epoch, i))
        if img.shape != shape or img.dtype != first.dtype:
            raise DataError(f"item {i}: an image of {img.dtype} {list(img.shape)}; item 0's is {first.dtype} "
                            f"{list(shape)}: every item must have the same shape and type")
        if img.dtype == np.uint8:  # the IDX/CIFAR formula: (v/255 - mean[c]) * (1/std[c]), in float32
            c = img.shape[0]
            m = np.resize(mean, c).reshape(c, 1, 1)
            k = np.resize(inv, c).reshape(c, 1, 1)
            img = (img.astype(np.float32) / np.float32(255.0) - m) * k
        elif not np.isfinite(img).all():
            raise DataError(f"item {i}: its image holds NaN or an infinity")
        return img, label

    name = _shown(ds)
    C, H, W = shape
    note = f"{name} ({n} items, {C} x {H} x {W} {first.dtype}, read per epoch on the loader's thread)"
    return _memfit.dataset_items(read, list(shape), n, int(classes), note), classes, shape


def _items_sources(data, test_data, classes, normalize, seed, check):
    if test_data is not None and not _is_map_dataset(test_data):
        raise DataError("test_data= is not a torch Dataset but data= is: pass both the same way")
    if classes is None and isinstance(getattr(data, "classes", None), (list, tuple)) and data.classes:
        classes = len(data.classes)
    stats = ([float(v) for v in normalize[0]], [float(v) for v in normalize[1]]) if normalize is not None else None
    first, label0, _, reproducible = _probe(data)
    n = len(data)
    last = _seeded_item(data, n - 1, _item_seed(0, 0, n - 1)) if n > 1 else (first, label0)
    fp = _fingerprint(data, (first, label0), last, not reproducible).hex()[:16]
    ident = f"python:torch-items[{type(data).__qualname__} {len(data)}]#{fp}"
    check(ident)
    train, classes, shape = _items_source(data, "data", classes, stats, seed)
    test = _items_source(test_data, "test_data", classes, stats, seed, shape)[0] if test_data is not None else None
    return train, test, ident
