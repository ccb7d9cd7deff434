"""memfit.train(data=...) with Hugging Face datasets splits: their text,
token-id and image columns train as the same data given as lists or arrays
does, bit for bit. Run by ctest (python_hf_datasets) with PYTHONPATH at
build/python and deps/hf-datasets (make deps-hf); HF_DATASETS_OFFLINE=1:
nothing is fetched, every split is made here from Python lists."""
import os

import numpy as np
import pytest

import memfit

datasets = pytest.importorskip("datasets")

TEXTS = ["the cat sat on the mat", "dogs bark at night", "a kitten and a puppy", "stocks fell sharply today",
         "the market rose again", "bonds and shares", "my parrot talks", "interest rates went up"]
TOPICS = [1, 1, 1, 0, 0, 0, 1, 0]
TEXT_RUN = dict(model="lstm-classifier", batch=8, steps=6, threads=2, seed=3, progress=False)


def losses(run):
    return [h["train_loss"] for h in run.history if "train_loss" in h]


def examples(k=12):
    return [f"{t} {i}" for i in range(k) for t in TEXTS], [y for _ in range(k) for y in TOPICS]


def test_a_text_split_trains_as_its_lists_do(tmp_path):
    texts, labels = examples()
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["money", "pets"])})
    split = datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)
    from_lists = memfit.train(data=(texts, labels), out=tmp_path / "lists", **TEXT_RUN)
    from_hf = memfit.train(data=split, out=tmp_path / "hf", **TEXT_RUN)
    assert len(losses(from_hf)) == 6 and losses(from_hf) == losses(from_lists)
    # A DatasetDict: its train split trains, its test split is the test set (nothing held out).
    dd = datasets.DatasetDict({"train": split.select(range(80)), "test": split.select(range(80, 96))})
    run = memfit.train(data=dd, out=tmp_path / "dict", **TEXT_RUN)
    assert "80 + 16 examples, 2 classes" in run.log and "held out" not in run.log
    # A transformed split is other data: resuming on it is refused.
    other = split.map(lambda r: {"text": r["text"].upper()})
    with pytest.raises(RuntimeError, match="cannot resume .*different data"):
        memfit.train(data=other, resume=str(tmp_path / "hf"), **TEXT_RUN)


def test_token_id_columns_train_as_their_arrays_do(tmp_path):
    rng = np.random.default_rng(2)
    n = 96
    lengths = rng.integers(3, 11, size=n)
    ids = [list(rng.integers(2, 50, size=k)) for k in lengths]  # ragged, as a tokenizer without padding makes
    y = [int(r[0]) % 3 for r in ids]
    split = datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids],
                                        "label": y})
    opts = dict(TEXT_RUN, vocab=50)
    from_hf = memfit.train(data=split, out=tmp_path / "hf", **opts)
    # The same ids padded on the right (pad id 0) as one array: the lengths are the same.
    padded = np.zeros((n, int(lengths.max())), np.int64)
    for i, r in enumerate(ids):
        padded[i, :len(r)] = r
    from_array = memfit.train(data=(padded, np.array(y)), out=tmp_path / "arr", **opts)
    assert len(losses(from_hf)) == 6 and losses(from_hf) == losses(from_array)
    assert "lengths from the attention mask" in from_hf.log


def test_an_image_split_trains_as_its_arrays_do(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(64, 16, 16, 3), dtype=np.uint8)
    y = (np.arange(64) % 4).astype(np.int64)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=4)})
    split = datasets.Dataset.from_dict({"image": list(x), "label": list(y)}, features=features)
    norm = ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    opts = dict(model="convnet", batch=16, steps=5, threads=2, seed=1, progress=False, normalize=norm)
    from_arrays = memfit.train(data=(x, y), out=tmp_path / "arr", **opts)
    # The split's PIL images, decoded per item, cached once: the same pixels, the same losses.
    cached = memfit.train(data=split, materialise=True, cache_dir=str(tmp_path / "cache"), out=tmp_path / "hf",
                          **opts)
    assert len(losses(cached)) == 5 and losses(cached) == losses(from_arrays)
    # A transform written for rows of images (as set_transform's are) runs on the images only; the labels
    # are read from the stored column. Fewer reads than items: read per epoch, as the log says.
    def to_float(rows):
        rows["image"] = [np.asarray(im, np.float32).transpose(2, 0, 1) / 255 for im in rows["image"]]
        return rows
    run = memfit.train(data=split.with_transform(to_float), out=tmp_path / "tf", **dict(opts, steps=2))
    assert "read per epoch" in run.log and "Dataset columns 'image', 'label'" in run.log
    assert len(losses(run)) == 2


def test_columns_that_are_not_there_are_named(tmp_path):
    split = datasets.Dataset.from_dict({"sentence": ["a b", "c d"], "y": [0, 1]})
    with pytest.raises(memfit.DataError, match="no label column: it has \\['sentence', 'y'\\]"):
        memfit.train(data=split, **TEXT_RUN)
    with pytest.raises(memfit.DataError, match="no column 'review'"):
        memfit.train(data=split, columns=("review", "y"), **TEXT_RUN)
    with pytest.raises(memfit.DataError, match="without a 'train' split"):
        memfit.train(data=datasets.DatasetDict({"other": split}), **TEXT_RUN)
