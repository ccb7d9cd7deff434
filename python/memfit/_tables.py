"""data= as columns: a pandas DataFrame, a dict of columns, a Hugging Face
datasets split (Dataset, or a DatasetDict whose "train" and "test" splits are
taken), and labelled texts (texts, labels).

Which columns are read: columns=(x, label) names them; otherwise
- texts: "text" (or "sentence", "content"), labels "label" (or "labels"):
  tokenized by the model's own tokenizer, exactly as a JSONL or CSV file of
  the same examples is (the same ids, the same losses); strings are copied
  into the engine once (tokenizing consumes that copy);
- token ids: "input_ids" with "attention_mask" if present (a tokenizer's
  output; its lengths are the mask's ones), read as arrays: a column of equal
  lengths as it converts, ragged ones padded with pad_id into a copy;
- images: "image" (or "img") with the label column, as a map-style Dataset
  of (image, label) items (PIL images are decoded per item), which
  memfit/_data.py caches or reads per epoch as it does a torch Dataset.

Classes: a Hugging Face ClassLabel's names, else the labels themselves
(integers keep their value: class k is label k).
"""
import hashlib

import numpy as np

from . import _memfit

DataError = _memfit.DataError

TEXT_COLUMNS = ("text", "sentence", "content")
LABEL_COLUMNS = ("label", "labels")
IMAGE_COLUMNS = ("image", "img")


def is_hf_dict(d):
    """A Hugging Face DatasetDict (its splits by name)."""
    return type(d).__name__ in ("DatasetDict", "IterableDatasetDict") and hasattr(d, "keys")


def is_hf(d):
    return hasattr(d, "column_names") and hasattr(d, "features") and hasattr(d, "_fingerprint")


def is_frame(d):
    return type(d).__name__ == "DataFrame" and hasattr(d, "columns") and hasattr(d, "iloc")


def is_column_dict(d):
    return isinstance(d, dict) and bool(d) and all(isinstance(k, str) for k in d)


def is_texts(x):
    """A column of strings: a list or tuple of str, a numpy array of str or object holding str, a pandas
    Series of str."""
    if isinstance(x, (list, tuple)):
        return len(x) > 0 and isinstance(x[0], str)
    if type(x).__name__ == "Series":
        return x.dtype == object or str(x.dtype) in ("string", "str")
    if isinstance(x, np.ndarray):
        return x.ndim == 1 and (x.dtype.kind == "U" or (x.dtype == object and len(x) and isinstance(x[0], str)))
    return False


def _column_names(t):
    if is_hf(t):
        return list(t.column_names)
    if is_frame(t):
        return [str(c) for c in t.columns]
    return list(t.keys())


def _column(t, name):
    """A whole column as stored: a Hugging Face split's without its format or transform (a transform
    written for rows of images would be run on the labels alone)."""
    if is_hf(t) and hasattr(t, "with_format"):
        return t.with_format(None)[name]
    return t[name]


def _pick(names, given, options, what, role):
    if given is not None:
        if given not in names:
            raise DataError(f"{role}=: no column {given!r} (columns=): it has {names}")
        return given
    for c in options:
        if c in names:
            return c
    return None


def _label_names(t, label_col):
    """A Hugging Face ClassLabel's names, or None."""
    if is_hf(t):
        feature = t.features.get(label_col)
        names = getattr(feature, "names", None)
        if isinstance(names, list) and names:
            return names
    return None


def resolve(t, role, columns):
    """What table t holds: ("texts", texts, labels, note) | ("tokens", ids, mask, labels, note) |
    ("images", dataset of (image, label)). columns: None or (x column, label column)."""
    names = _column_names(t)
    x_col, y_col = (columns if columns is not None else (None, None))
    label = _pick(names, y_col, LABEL_COLUMNS, "label", role)
    if label is None:
        raise DataError(f"{role}=: no label column: it has {names}; name them with columns=(x column, label column)")
    kind = type(t).__name__
    if x_col is None and "input_ids" in names:
        x_col = "input_ids"
    if x_col == "input_ids" or (x_col is not None and x_col.endswith("input_ids")):
        mask_col = "attention_mask" if "attention_mask" in names else None
        ids, mask = _token_columns(t, x_col, mask_col, role)
        return ("tokens", ids, mask, _int_labels(_column(t, label), role), f"{kind} columns {x_col!r}, {label!r}")
    image = _pick(names, x_col, IMAGE_COLUMNS, "image", role) if x_col is None or x_col in IMAGE_COLUMNS \
        else None
    if image is not None and (x_col is not None or not any(c in names for c in TEXT_COLUMNS)):
        return ("images", ColumnImages(t, image, label, _label_names(t, label)))
    text = _pick(names, x_col, TEXT_COLUMNS, "text", role)
    if text is None:
        raise DataError(f"{role}=: no text, token-id or image column: it has {names}; name the one to read with "
                        "columns=(x column, label column)")
    texts = _column(t, text)
    if not is_texts(texts if not is_hf(t) else list(texts[:1])):
        raise DataError(f"{role}=: column {text!r} does not hold strings")
    return ("texts", list(texts), labels_as_text(_column(t, label), role),
            f"{kind} columns {text!r}, {label!r}")


def _token_columns(t, ids_col, mask_col, role):
    cols = t.with_format("numpy", columns=[c for c in (ids_col, mask_col) if c]) if is_hf(t) else t
    ids = _rows(cols[ids_col], 0, f"{role}'s {ids_col}")
    mask = None
    if mask_col is not None:
        mask = _rows(cols[mask_col], 0, f"{role}'s {mask_col}")
        if mask.shape != ids.shape:
            raise DataError(f"{role}: {mask_col} has shape {list(mask.shape)}, {ids_col} {list(ids.shape)}")
    return ids, mask


def _rows(col, pad, what):
    """A column of integer sequences as an [N, T] array: as it is when every row has the same length (no
    copy for an array), else padded on the right with pad into a new int32 array."""
    if hasattr(col, "detach"):
        col = col.detach().cpu().numpy()
    a = col if isinstance(col, np.ndarray) and col.dtype != object else None
    if a is None:
        try:
            a = np.asarray(col)
        except ValueError:
            a = None
        if a is None or a.dtype == object or a.ndim != 2:
            rows = [np.asarray(r) for r in col]
            if not rows:
                raise DataError(f"{what}: no rows")
            width = max(len(r) for r in rows)
            a = np.full((len(rows), width), pad, np.int32)
            for i, r in enumerate(rows):
                if r.ndim != 1 or not np.issubdtype(r.dtype, np.integer):
                    raise DataError(f"{what}: row {i} is not a sequence of integers")
                a[i, :len(r)] = r
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer) and a.dtype != np.bool_:
        raise DataError(f"{what}: integer sequences [N, T] expected, got {a.dtype} of shape {list(a.shape)}")
    return a


def _int_labels(col, role):
    y = np.asarray(col.detach().cpu().numpy() if hasattr(col, "detach") else col)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{role}'s labels: integer class labels [N] expected, got {y.dtype} of shape {list(y.shape)}")
    return y


def labels_as_text(col, role):
    """Labels as the engine's text classifiers read them: strings as written, an integer as its digits
    (classes sort numerically, so class k is label k: a ClassLabel's order is kept)."""
    out = []
    for i, v in enumerate(list(col)):
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, float):
            if v != v or v != int(v):
                raise DataError(f"{role}: label {v!r} at index {i} is not a class (a NaN or a fraction)")
            v = int(v)
        if isinstance(v, int):
            if v < 0:
                raise DataError(f"{role}: label {v} at index {i} is negative; labels are classes 0, 1, ...")
            out.append(str(v))
        elif isinstance(v, str):
            if not v:
                raise DataError(f"{role}: the label at index {i} is empty")
            out.append(v)
        else:
            raise DataError(f"{role}: label {v!r} at index {i} is a {type(v).__name__}; expected a string or an "
                            "integer")
    return out


def texts_of(x, role):
    out = list(x)
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise DataError(f"{role}: the text at index {i} is a {type(v).__name__}, not a string")
    return out


def text_ident(texts, labels, source_kind):
    h = hashlib.blake2b(digest_size=8)
    for t, y in zip(texts, labels):
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
        h.update(y.encode("utf-8", "surrogatepass"))
        h.update(b"\1")
    return f"python:texts[{len(texts)} {source_kind}]#{h.hexdigest()}"


def text_source(texts, labels, role, what):
    if len(texts) != len(labels):
        raise DataError(f"{role}: {len(texts)} texts but {len(labels)} labels: they must have the same length")
    try:
        return _memfit.labelled_texts(texts, labels, f"{role}= ({what})")
    except UnicodeEncodeError as e:
        raise DataError(f"{role}: a text is not valid Unicode ({e.reason})") from None


class ColumnImages:
    """A table's image and label columns as a map-style Dataset of (image, label): what memfit reads
    torch Datasets through. The fingerprint keys on the table's own (a Hugging Face split's changes
    with every transformation of it)."""

    def __init__(self, table, image_col, label_col, names):
        self.table, self.image_col, self.label_col = table, image_col, label_col
        self.classes = names
        self.shown_as = f"{type(table).__name__} columns {image_col!r}, {label_col!r}"
        fp = getattr(table, "_fingerprint", None)
        self.root = f"{type(table).__name__}#{fp}" if fp else None
        fmt = getattr(table, "format", None)
        self.transform = repr(fmt) if fmt else None
        if names is None:
            labels = _int_labels(_column(table, label_col), "data")
            self.targets = labels

    def __len__(self):
        return len(self.table)

    def __getitem__(self, i):
        row = self.table[int(i)]
        return row[self.image_col], row[self.label_col]

    def __repr__(self):
        return f"ColumnImages({type(self.table).__name__}, {self.image_col!r}, {self.label_col!r})"
