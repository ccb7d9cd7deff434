#!/usr/bin/env python3
"""Writes small fake CIFAR-10/CIFAR-100 folders laid out as the archives unpack.

    python3 tests/make_fake_cifar.py --out DIR [--kind 10|100] [--format py|bin] [--per-batch N]

writes DIR/cifar-10-batches-py/ (data_batch_1..5, test_batch, batches.meta),
DIR/cifar-100-python/ (train, test, meta), DIR/cifar-10-batches-bin/
(data_batch_1..5.bin, test_batch.bin, batches.meta.txt) or
DIR/cifar-100-binary/ (train.bin, test.bin, fine_label_names.txt,
coarse_label_names.txt), with N images per batch file (CIFAR-100: 5N in
train, N in test).

The pickles are written opcode by opcode, as Python 2's cPickle wrote the
real files with protocol 2 (Python 3's pickle cannot: it writes its bytes
through _codecs.encode at protocol 2): PROTO 2; a dict (EMPTY_DICT, MARK,
SETITEMS) with str keys as SHORT_BINSTRING; the pixels as numpy pickles an
array (GLOBAL numpy.core.multiarray._reconstruct, GLOBAL numpy.ndarray,
REDUCE, then BUILD with (1, (N, 3072), dtype('u1') as GLOBAL numpy.dtype +
REDUCE + BUILD, False, BINSTRING of the raw bytes)); labels as lists
(EMPTY_LIST, MARK, BININT1 ..., APPENDS in batches of 1000); memo PUTs
numbered from 1 as cPickle numbers them. Only the standard library is
used; torchvision reads the result with pickle.load(encoding="latin1").

Sample i of a split (counted across its batch files) is a pure function of
(split, i), which test_cifar.cpp recomputes:
    pixel k of image i = (i * 131 + k * 7 + s * 17) % 256
    label (CIFAR-10)   = (i * 3 + s) % 10
    fine (CIFAR-100)   = (i * 7 + s) % 100,  coarse = fine % 20
with s = 0 for train, 1 for test.
"""
import argparse
import os
import struct


def pixel_bytes(i, s):
    return bytes((i * 131 + k * 7 + s * 17) % 256 for k in range(3072))


def label10(i, s):
    return (i * 3 + s) % 10


def fine100(i, s):
    return (i * 7 + s) % 100


class Py2Pickle:
    """The opcodes of a Python 2 cPickle protocol-2 stream, written by hand."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self.memo = 0

    def put(self):
        self.memo += 1  # cPickle: "Make sure memo keys are positive!"
        if self.memo < 256:
            self.out += b"q" + bytes([self.memo])  # BINPUT
        else:
            self.out += b"r" + struct.pack("<I", self.memo)  # LONG_BINPUT

    def int(self, v):
        if 0 <= v < 256:
            self.out += b"K" + bytes([v])  # BININT1
        elif 0 <= v < 65536:
            self.out += b"M" + struct.pack("<H", v)  # BININT2
        else:
            self.out += b"J" + struct.pack("<i", v)  # BININT

    def str(self, s, memo=True):
        b = s.encode("latin1") if isinstance(s, str) else s
        if len(b) < 256:
            self.out += b"U" + bytes([len(b)]) + b  # SHORT_BINSTRING
        else:
            self.out += b"T" + struct.pack("<i", len(b)) + b  # BINSTRING
        if memo:
            self.put()

    def glob(self, module, name):
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"  # GLOBAL
        self.put()

    def list(self, items, item):
        self.out += b"]"  # EMPTY_LIST
        self.put()
        for k in range(0, len(items), 1000):
            batch = items[k:k + 1000]
            if len(batch) == 1:
                item(batch[0])
                self.out += b"a"  # APPEND
            else:
                self.out += b"("  # MARK
                for x in batch:
                    item(x)
                self.out += b"e"  # APPENDS

    def uint8_array(self, rows, cols, raw):
        assert len(raw) == rows * cols
        self.glob("numpy.core.multiarray", "_reconstruct")
        self.glob("numpy", "ndarray")
        self.int(0)
        self.out += b"\x85"  # TUPLE1: (0,)
        self.str("b")
        self.out += b"\x87R"  # TUPLE3, REDUCE
        self.put()
        self.out += b"("  # MARK: the state (1, shape, dtype, False, raw)
        self.int(1)
        self.int(rows)
        self.int(cols)
        self.out += b"\x86"  # TUPLE2: the shape
        self.glob("numpy", "dtype")
        self.str("u1")
        self.int(0)
        self.int(1)
        self.out += b"\x87R"  # TUPLE3, REDUCE: dtype('u1', 0, 1)
        self.put()
        self.out += b"("  # the dtype's state (3, '|', None, None, None, -1, -1, 0)
        self.int(3)
        self.str("|")
        self.out += b"NNN"
        self.int(-1)
        self.int(-1)
        self.int(0)
        self.out += b"tb"  # TUPLE, BUILD
        self.out += b"\x89"  # NEWFALSE: not Fortran order
        self.str(raw, memo=False)
        self.out += b"tb"  # TUPLE, BUILD

    def dict(self, entries):
        """entries: (key, writer) pairs, in the order the real files have them."""
        self.out += b"}"  # EMPTY_DICT
        self.put()
        self.out += b"("
        for key, write in entries:
            self.str(key)
            write()
        self.out += b"u"  # SETITEMS

    def done(self):
        return bytes(self.out + b".")  # STOP


def batch_pickle(kind, first, n, s, label):
    p = Py2Pickle()
    raw = b"".join(pixel_bytes(i, s) for i in range(first, first + n))
    names = ["fake_%05d.png" % i for i in range(first, first + n)]
    if kind == 10:
        p.dict([
            ("batch_label", lambda: p.str(label)),
            ("labels", lambda: p.list([label10(i, s) for i in range(first, first + n)], p.int)),
            ("data", lambda: p.uint8_array(n, 3072, raw)),
            ("filenames", lambda: p.list(names, p.str)),
        ])
    else:
        fine = [fine100(i, s) for i in range(first, first + n)]
        p.dict([
            ("filenames", lambda: p.list(names, p.str)),
            ("batch_label", lambda: p.str(label)),
            ("fine_labels", lambda: p.list(fine, p.int)),
            ("coarse_labels", lambda: p.list([f % 20 for f in fine], p.int)),
            ("data", lambda: p.uint8_array(n, 3072, raw)),
        ])
    return p.done()


def meta_pickle(kind, per_batch):
    p = Py2Pickle()
    if kind == 10:
        p.dict([
            ("num_cases_per_batch", lambda: p.int(per_batch)),
            ("label_names", lambda: p.list(CIFAR10_NAMES, p.str)),
            ("num_vis", lambda: p.int(3072)),
        ])
    else:
        p.dict([
            ("fine_label_names", lambda: p.list(["fine_%02d" % k for k in range(100)], p.str)),
            ("coarse_label_names", lambda: p.list(["coarse_%02d" % k for k in range(20)], p.str)),
        ])
    return p.done()


CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def records(kind, first, n, s):
    out = bytearray()
    for i in range(first, first + n):
        if kind == 10:
            out += bytes([label10(i, s)])
        else:
            f = fine100(i, s)
            out += bytes([f % 20, f])
        out += pixel_bytes(i, s)
    return bytes(out)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--kind", type=int, choices=(10, 100), default=10)
    ap.add_argument("--format", choices=("py", "bin"), default="py")
    ap.add_argument("--per-batch", type=int, default=4)
    a = ap.parse_args()
    n = a.per_batch
    sub = {(10, "py"): "cifar-10-batches-py", (10, "bin"): "cifar-10-batches-bin",
           (100, "py"): "cifar-100-python", (100, "bin"): "cifar-100-binary"}[(a.kind, a.format)]
    d = os.path.join(a.out, sub)
    os.makedirs(d, exist_ok=True)
    if a.kind == 10:
        for b in range(5):
            if a.format == "py":
                write(os.path.join(d, "data_batch_%d" % (b + 1)),
                      batch_pickle(10, b * n, n, 0, "training batch %d of 5" % (b + 1)))
            else:
                write(os.path.join(d, "data_batch_%d.bin" % (b + 1)), records(10, b * n, n, 0))
        if a.format == "py":
            write(os.path.join(d, "test_batch"), batch_pickle(10, 0, n, 1, "testing batch 1 of 1"))
            write(os.path.join(d, "batches.meta"), meta_pickle(10, n))
        else:
            write(os.path.join(d, "test_batch.bin"), records(10, 0, n, 1))
            write(os.path.join(d, "batches.meta.txt"), ("\n".join(CIFAR10_NAMES) + "\n\n").encode())
    else:
        if a.format == "py":
            write(os.path.join(d, "train"), batch_pickle(100, 0, 5 * n, 0, "training batch 1 of 1"))
            write(os.path.join(d, "test"), batch_pickle(100, 0, n, 1, "testing batch 1 of 1"))
            write(os.path.join(d, "meta"), meta_pickle(100, n))
        else:
            write(os.path.join(d, "train.bin"), records(100, 0, 5 * n, 0))
            write(os.path.join(d, "test.bin"), records(100, 0, n, 1))
            write(os.path.join(d, "fine_label_names.txt"), "".join("fine_%02d\n" % k for k in range(100)).encode())
            write(os.path.join(d, "coarse_label_names.txt"), "".join("coarse_%02d\n" % k for k in range(20)).encode())
    print(d)


if __name__ == "__main__":
    main()
