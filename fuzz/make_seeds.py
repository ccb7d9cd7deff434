#!/usr/bin/env python3
"""Writes memfit's fuzz seed corpora and the regression inputs of issue #17.

    python3 fuzz/make_seeds.py BUILD_DIR [HARNESS...]

With harness names (onnx, array_cache), only their files are rewritten.

Most files are written here; the image seeds and the checkpoint seed come
from the harnesses themselves (`fuzz_replay_<name> --write-seed DIR`, built by
the normal build in BUILD_DIR), since they need libjpeg/libpng and memfit's
own checkpoint writer. Every file is small; inputs too big to commit (a
100 MB header, 80k keys, 40k nested scopes, a FIFO) are made by
tests/test_parsers_bounded.cpp instead.
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "build")
# Harness names after BUILD_DIR: rewrite only their seeds and regressions.
ONLY = sys.argv[2:]


def put(kind, harness, name, data):
    d = os.path.join(ROOT, kind, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def gz(data, isize=None):
    b = bytearray(gzip.compress(data, mtime=0))
    if isize is not None:  # forge the trailer's ISIZE
        b[-4:] = struct.pack("<I", isize & 0xFFFFFFFF)
    return bytes(b)


def idx_images(n, r, c, pixels=None):
    return struct.pack(">IIII", 0x803, n, r, c) + (pixels if pixels is not None else bytes((i * 7) & 0xFF for i in range(n * r * c)))


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def safetensors(tensors, meta=None, pad=True):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def read_safetensors(b):
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def rewrite_header(b, fn):
    header, data = read_safetensors(b)
    fn(header)
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def fnv1a(h, data):
    for x in data:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def found_by_libfuzzer():
    """The regressions libFuzzer found (crash-<sha1>, copied from
    build-fuzz/crashes/<harness>/): no code here writes them, so they are
    read before the folders are cleared and written back after."""
    kept = {}
    top = os.path.join(ROOT, "regressions")
    for d, _, files in os.walk(top):
        for f in files:
            if f.startswith("crash-"):
                kept[os.path.relpath(os.path.join(d, f), top)] = open(os.path.join(d, f), "rb").read()
    return kept


def main():
    kept = found_by_libfuzzer()
    try:
        write_all()
    finally:
        for rel, data in kept.items():
            harness, name = os.path.split(rel)
            put("regressions", harness, name, data)


def write_all():
    if ONLY:
        sections = {"onnx": onnx_seeds, "array_cache": array_cache_seeds}
        for name in ONLY:
            for d in (("corpus", name), ("regressions", name), ("regressions", name + "_pending")):
                shutil.rmtree(os.path.join(ROOT, *d), ignore_errors=True)
            sections[name]()
        return
    for kind in ("corpus", "regressions"):
        shutil.rmtree(os.path.join(ROOT, kind), ignore_errors=True)

    # ---- model files
    mf = os.path.join(ROOT, "..", "models", "files")
    for f in sorted(os.listdir(mf)):
        put("corpus", "model_file", f, open(os.path.join(mf, f), "rb").read())
    put("corpus", "model_file", "all_layers.mf",
        "conv c1 out=8 k=3 stride=1 pad=1 dilation=1 groups=1 bias=0\nbatchnorm bn eps=1e-5 momentum=0.1\nrelu\n"
        "save s\nconv c2 out=8 k=3 pad=1\nadd s\nmaxpool k=2 stride=2 pad=0\navgpool k=3 stride=1 pad=1 count_include_pad=0\n"
        "scope block\nconv c3 out=4 k=1\nend\ngap\ndropout d p=0.5\nlinear fc out=classes bias=1\n")
    put("corpus", "model_file", "mlp.mf", "flatten\nlinear fc1 out=32\nrelu\nload missing\n")
    for name, text in {
        "conv_stride0.mf": "conv c out=8 k=3 stride=0\n",
        "maxpool_k0.mf": "maxpool k=0\n",
        "avgpool_k0.mf": "avgpool k=0\n",
        "maxpool_stride0.mf": "maxpool k=2 stride=0\n",
        "conv_huge_k.mf": "conv c out=8 k=22337203654\n",
        "conv_huge_out.mf": "conv c out=9223372036854775807 k=1\n",
        "linear_huge_out.mf": "flatten\nlinear fc out=4611686018427387904\n",
        "conv_negative_pad.mf": "conv c out=8 k=3 pad=-1\n",
        "pool_negative_pad.mf": "maxpool k=2 pad=-5\n",
        "int_overflow.mf": "conv c out=99999999999999999999999 k=3\n",
        "deep_scope.mf": "scope a\n" * 65 + "relu\n" + "end\n" * 65,
        "unknown_layer.mf": "conv c1 out=8 k=3\nrleu\n",
        "dropout_p1.mf": "dropout d p=1\n",
        "dropout_nan.mf": "dropout d p=nan\n",
        "many_pads.mf": "conv c out=1 k=1 pad=1024\n" * 40 + "flatten\nlinear fc out=1048576\n",
    }.items():
        put("regressions", "model_file", name, text)

    # ---- IDX (as files: raw and gzip)
    img, lab = idx_images(3, 4, 5), idx_labels([1, 2, 3])
    put("corpus", "idx", "images.idx", img)
    put("corpus", "idx", "labels.idx", lab)
    put("corpus", "idx", "images.idx.gz", gz(img))
    put("corpus", "idx", "labels.idx.gz", gz(lab))
    put("corpus", "idx_gzip", "images.idx", img)
    put("corpus", "idx_gzip", "labels.idx", lab)
    # 340 GiB declared (85 * 2^32 bytes) by 16 bytes of gzip content: ISIZE
    # (16) matches (bytes + 16) mod 2^32, which the reader used to trust.
    put("regressions", "idx", "gzip_header_340GiB.gz", gz(struct.pack(">IIII", 0x803, 85 << 16, 256, 256)))
    # A label file declaring 2^32 - 16 labels with a forged ISIZE to match.
    put("regressions", "idx", "gzip_labels_4GiB.gz", gz(struct.pack(">II", 0x801, 0xFFFFFFF0), isize=0xFFFFFFF8))
    put("regressions", "idx", "raw_header_huge.idx", struct.pack(">IIII", 0x803, 0xFFFFFFFF, 65536, 65536))
    put("regressions", "idx_gzip", "header_340GiB.idx", struct.pack(">IIII", 0x803, 85 << 16, 256, 256))
    put("regressions", "idx_gzip", "labels_4GiB.idx", struct.pack(">II", 0x801, 0xFFFFFFF0))

    # ---- safetensors
    f32 = struct.pack("<6f", *range(6))
    put("corpus", "safetensors", "f32.safetensors", safetensors([("w", "F32", [2, 3], f32)], {"format": "pt"}))
    put("corpus", "safetensors", "mixed.safetensors",
        safetensors([("a", "BF16", [2], b"\x80\x3f\x00\x40"), ("b", "I64", [], struct.pack("<q", 7)),
                     ("e", "U8", [0], b"")]))
    put("corpus", "safetensors", "empty.safetensors", safetensors([]))
    hdr = lambda h: struct.pack("<Q", len(h)) + h
    put("regressions", "safetensors", "duplicate_keys.safetensors",
        hdr(b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'))
    put("regressions", "safetensors", "escaped_duplicate.safetensors",
        hdr(b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"\\u0061":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'))
    put("regressions", "safetensors", "numeric_array.safetensors", hdr(b'{"a":[' + b"0," * 20000 + b'0]}'))
    put("regressions", "safetensors", "deep.safetensors", hdr(b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"))
    put("regressions", "safetensors", "rank_100.safetensors",
        hdr(b'{"a":{"dtype":"U8","shape":[' + b",".join([b"1"] * 100) + b'],"data_offsets":[0,1]}}') + b"x")
    put("regressions", "safetensors", "header_past_end.safetensors", struct.pack("<Q", 1 << 62) + b"{}")

    # ---- checkpoint: the seed from memfit's writer, then broken variants
    tmp = os.path.join(BUILD, "fuzz-seed-checkpoint")
    os.makedirs(tmp, exist_ok=True)
    subprocess.run([os.path.join(BUILD, "fuzz", "fuzz_replay_checkpoint"), "--write-seed", tmp], check=True)
    ck = open(os.path.join(tmp, "checkpoint.safetensors"), "rb").read()
    put("corpus", "checkpoint", "checkpoint.safetensors", ck)

    def meta(**kv):
        def fn(h):
            h["__metadata__"].update(kv)
        return fn
    for name, fn in {
        "bad_step.safetensors": meta(step="abc"),
        "step_trailing.safetensors": meta(step="12x"),
        "step_plus.safetensors": meta(step="+12"),
        "step_overflow.safetensors": meta(step="9223372036854775808"),
        "step_huge.safetensors": meta(step="99999999999999999999999"),
        "epoch_minus1.safetensors": meta(epoch="-1"),
        "sample_space.safetensors": meta(sample=" 34"),
        "seed_empty.safetensors": meta(seed=""),
        "metadata_changed.safetensors": meta(sample="35"),  # valid number, checksum no longer matches
        "format_unknown.safetensors": meta(format="memfit-checkpoint-9"),
        "no_step.safetensors": lambda h: h["__metadata__"].pop("step"),
    }.items():
        put("regressions", "checkpoint", name, rewrite_header(ck, fn))
    # Format 1: the checksum covers the tensor bytes only (graph order).
    header, data = read_safetensors(ck)
    order = ["fc.weight", "fc.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"]
    s = 0xCBF29CE484222325
    for n in order:
        b, e = header[n]["data_offsets"]
        s = fnv1a(s, data[b:e])
    v1 = meta(format="memfit-checkpoint-1", checksum="%016x" % s)
    put("corpus", "checkpoint", "format1.safetensors", rewrite_header(ck, v1))
    put("regressions", "checkpoint", "format1_bad_step.safetensors",
        rewrite_header(ck, lambda h: (v1(h), h["__metadata__"].update(step="-3"))))

    # ---- images: seeds from libpng/libjpeg; a progressive JPEG whose header
    # declares 8000x8000 (all coefficients would be ~190 MB inside libjpeg).
    d = os.path.join(ROOT, "corpus", "image")
    os.makedirs(d, exist_ok=True)
    subprocess.run([os.path.join(BUILD, "fuzz", "fuzz_replay_image"), "--write-seed", d], check=True)
    prog = bytearray(open(os.path.join(d, "progressive.jpg"), "rb").read())
    i = prog.find(b"\xff\xc2")
    prog[i + 5:i + 9] = struct.pack(">HH", 8000, 8000)
    put("regressions", "image", "progressive_8000x8000.jpg", bytes(prog))
    base = bytearray(open(os.path.join(d, "baseline.jpg"), "rb").read())
    i = base.find(b"\xff\xc0")
    base[i + 5:i + 9] = struct.pack(">HH", 65535, 65535)
    put("regressions", "image", "baseline_65535.jpg", bytes(base))
    put("regressions", "image", "empty.png", b"")

    tokenizer_seeds()
    cifar_seeds()
    onnx_seeds()
    array_cache_seeds()


def cifar_seeds():
    """CIFAR's pickles as Python 2's cPickle wrote them and its binary
    records (tests/make_fake_cifar.py), and hostile pickles."""
    sys.path.insert(0, os.path.join(ROOT, "..", "tests"))
    import make_fake_cifar as fc
    put("corpus", "cifar", "data_batch_1", fc.batch_pickle(10, 0, 2, 0, "training batch 1 of 5"))
    put("corpus", "cifar", "one_image_batch", fc.batch_pickle(10, 0, 1, 0, "training batch 1 of 5"))
    put("corpus", "cifar", "train_100", fc.batch_pickle(100, 0, 2, 0, "training batch 1 of 1"))
    put("corpus", "cifar", "batches.meta", fc.meta_pickle(10, 2))
    put("corpus", "cifar", "meta_100", fc.meta_pickle(100, 2))
    put("corpus", "cifar", "data_batch_1.bin", fc.records(10, 0, 2, 0))
    put("corpus", "cifar", "train_100.bin", fc.records(100, 0, 2, 0))
    p2 = b"\x80\x02"
    array = lambda rows, cols, dtype, data: (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01b\x87R(K\x01"
        + b"J" + struct.pack("<i", rows) + b"J" + struct.pack("<i", cols) + b"\x86cnumpy\ndtype\nU"
        + bytes([len(dtype)]) + dtype + b"K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89"
        + b"T" + struct.pack("<i", len(data)) + data + b"tb")
    for name, data in {
        "os_system": p2 + b"cos\nsystem\nq\x01U\x02idq\x02\x85R.",
        "builtins_eval": p2 + b"c__builtin__\neval\n(U\x01xtR.",
        "reduce_ndarray": p2 + b"cnumpy\nndarray\n)R.",
        "build_on_dict": p2 + b"})b.",
        "protocol4_frame": b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00N.",
        "huge_binstring": p2 + b"T\xff\xff\xff\x7fabc",
        "negative_binstring": p2 + b"T\xff\xff\xff\xffabc",
        "huge_binbytes": p2 + b"B\xff\xff\xff\xffabc",
        "huge_memo": p2 + b"Nr\xff\xff\xff\x7f.",
        "memo_get_unset": p2 + b"j\xff\xff\xff\xff.",
        "many_marks": p2 + b"(" * 20000 + b".",
        "self_append": p2 + b"]q\x01h\x01a.",
        "shape_lie": p2 + b"}(U\x04data" + array(0x7FFFFFFF, 3072, b"u1", b"abcd") + b"u.",
        "shape_negative": p2 + b"}(U\x04data" + array(-1, 3072, b"u1", b"abcd") + b"u.",
        "float_array": p2 + b"}(U\x04data" + array(1, 1, b"f4", b"abcd") + b"u.",
        "wrong_width": p2 + b"}(U\x04data" + array(1, 4, b"u1", b"abcd") + b"U\x06labels]K\x00au.",
        "label_10": p2 + b"}(U\x04data" + array(1, 3072, b"u1", bytes(3072)) + b"U\x06labels]K\x0aau.",
        "labels_short": p2 + b"}(U\x04data" + array(2, 3072, b"u1", bytes(6144)) + b"U\x06labels]K\x01au.",
        "labels_not_ints": p2 + b"}(U\x04data" + array(1, 3072, b"u1", bytes(3072)) + b"U\x06labels]Nau.",
    }.items():
        put("regressions", "cifar", name, data)
    put("regressions", "cifar", "bin_label_10.bin", b"\x0a" + bytes(3072))
    put("regressions", "cifar", "bin_cut_record.bin", fc.records(10, 0, 1, 0) + b"\x01\x02")


def tokenizer_seeds():
    """Saved tokenizers (one a kind, small vocabularies) and texts."""
    import base64
    b64 = lambda b: base64.b64encode(b).decode()
    dump = lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":")) + "\n"
    put("corpus", "tokenizer_file", "char.json", dump({"tokenizer": "char", "alphabet": [10, 32, 33, 44, 72, 100, 101, 108, 111, 114, 119]}))
    ranks = [b64(bytes([b])) for b in range(256)] + [b64(m) for m in (b"He", b"ll", b"llo", b" w", b" wor", b"or")]
    put("corpus", "tokenizer_file", "gpt2.json", dump({
        "tokenizer": "gpt2", "version": 1,
        "pattern": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        "special": {"<|endoftext|>": len(ranks)}, "ranks": ranks[:100] + [None] + ranks[100:]}))
    put("corpus", "tokenizer_file", "wordpiece.json", dump({
        "tokenizer": "wordpiece", "version": 1, "lowercase": True, "strip_accents": True, "clean_text": True,
        "handle_chinese_chars": True, "unk_token": "[UNK]", "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100,
        "vocab": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", ",", "world", "!", "cafe", "中", "1", "##2", "##3"]}))
    put("regressions", "tokenizer_file", "gpt2_missing_byte.json", dump({
        "tokenizer": "gpt2", "version": 1,
        "pattern": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        "special": {"<|endoftext|>": 300}, "ranks": ranks[1:]}))
    put("regressions", "tokenizer_file", "gpt2_eot_is_a_rank.json", dump({
        "tokenizer": "gpt2", "version": 1,
        "pattern": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        "special": {"<|endoftext|>": 5}, "ranks": ranks}))
    put("regressions", "tokenizer_file", "wordpiece_not_utf8.json",
        b'{"tokenizer":"wordpiece","version":1,"lowercase":true,"strip_accents":true,"clean_text":true,'
        b'"handle_chinese_chars":true,"unk_token":"[UNK]","continuing_subword_prefix":"##",'
        b'"max_input_chars_per_word":100,"vocab":["[UNK]","\\udc80"]}\n')
    put("corpus", "tokenize_text", "english.txt", "Hello, world! They'll say it's 1234.\n\n  Indented   spaces\tand tabs\n")
    put("corpus", "tokenize_text", "unicode.txt",
        "Caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600 \u00a0nbsp \u0085nel \u200bzw \u0130stanbul \u1e9e \ufb01 "
        "\u0301lone accent \u0663\u0664 \u3000ideo\n")
    put("corpus", "tokenize_text", "long_word.txt", "x" * 150 + " " + "\u00e9" * 120 + " " + "-" * 300 + "\n")
    put("regressions", "tokenize_text", "invalid_utf8.txt", b"ok \xff\xfe \xc3( \xed\xa0\x80 \xf4\x90\x80\x80")
    put("regressions", "tokenize_text", "nul_and_controls.txt", b"a\x00b\x01c\x7f\x1b[0m \xef\xbf\xbd\n")


# ---- ONNX: a protobuf writer of the few messages an ONNX model uses (the
# onnx Python package is not needed), torch's exporter for real exports.

def _varint(n):
    n &= (1 << 64) - 1  # int64 as protobuf writes it: a negative is ten bytes
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_int(field, v):
    return _varint(field << 3) + _varint(v)


def pb_bytes(field, b):
    b = b.encode() if isinstance(b, str) else b
    return _varint(field << 3 | 2) + _varint(len(b)) + b


def pb_float(field, v):
    return _varint(field << 3 | 5) + struct.pack("<f", v)


FLOAT, INT32, INT64, BOOL, DOUBLE, STRING = 1, 6, 7, 9, 11, 8


def onnx_tensor(name, dims, values=None, dtype=FLOAT, raw=None, extra=b""):
    """TensorProto: dims (1), data_type (2), name (8), raw_data (9)."""
    t = b"".join(pb_int(1, d) for d in dims) + pb_int(2, dtype) + pb_bytes(8, name)
    if values is not None:
        fmt = {FLOAT: "f", INT64: "q", INT32: "i", DOUBLE: "d", BOOL: "?"}[dtype]
        raw = struct.pack("<%d%s" % (len(values), fmt), *values)
    if raw is not None:
        t += pb_bytes(9, raw)
    return t + extra


def a_int(name, v):  # AttributeProto: name (1), i (3), type (20) INT = 2
    return pb_bytes(1, name) + pb_int(3, v) + pb_int(20, 2)


def a_float(name, v):  # f (2), FLOAT = 1
    return pb_bytes(1, name) + pb_float(2, v) + pb_int(20, 1)


def a_ints(name, vs):  # ints (8), INTS = 7
    return pb_bytes(1, name) + b"".join(pb_int(8, v) for v in vs) + pb_int(20, 7)


def a_str(name, s):  # s (4), STRING = 3
    return pb_bytes(1, name) + pb_bytes(4, s) + pb_int(20, 3)


def a_tensor(name, t):  # t (5), TENSOR = 4
    return pb_bytes(1, name) + pb_bytes(5, t) + pb_int(20, 4)


def onnx_node(op, ins, outs, attrs=(), name=None, domain=None):
    """NodeProto: input (1), output (2), name (3), op_type (4), attribute (5), domain (7)."""
    n = b"".join(pb_bytes(1, i) for i in ins) + b"".join(pb_bytes(2, o) for o in outs)
    n += pb_bytes(3, name if name is not None else "/" + op + "_" + (outs[0] if outs else "x"))
    n += pb_bytes(4, op) + b"".join(pb_bytes(5, a) for a in attrs)
    return n + (pb_bytes(7, domain) if domain is not None else b"")


def onnx_value(name, elem, dims):
    """ValueInfoProto {name, TypeProto {tensor_type {elem_type, shape {dim*}}}}: an int
    dim is dim_value (1), a string dim_param (2)."""
    shape = b"".join(pb_bytes(1, pb_int(1, d) if isinstance(d, int) else pb_bytes(2, d)) for d in dims)
    return pb_bytes(1, name) + pb_bytes(2, pb_bytes(1, pb_int(1, elem) + pb_bytes(2, shape)))


IMAGE = onnx_value("image", FLOAT, ["N", 1, 8, 8])
TOKENS = onnx_value("tokens", INT64, ["N", 16])


def onnx_model(nodes, inits=(), inputs=(IMAGE,), outputs=None, opset=17, out="logits"):
    """ModelProto: ir_version (1), graph (7), opset_import (8) {version (2)};
    GraphProto: node (1), name (2), initializer (5), input (11), output (12)."""
    if outputs is None:
        outputs = [onnx_value(out, FLOAT, ["N", 10])]
    g = b"".join(pb_bytes(1, n) for n in nodes) + pb_bytes(2, "fuzz")
    g += b"".join(pb_bytes(5, t) for t in inits) + b"".join(pb_bytes(11, i) for i in inputs)
    g += b"".join(pb_bytes(12, o) for o in outputs)
    m = pb_int(1, 8)
    if opset is not None:
        m += pb_bytes(8, pb_int(2, opset))
    return m + pb_bytes(7, g)


def weights(name, dims, seed=1):
    n = 1
    for d in dims:
        n *= d
    return onnx_tensor(name, dims, [((i * 37 + seed * 11) % 17 - 8) / 32.0 for i in range(n)])


def conv_head(extra_nodes, feature, extra_inits=(), **kw):
    """image [N,1,8,8] -> Conv 1->4 3x3 pad 1 (c) -> extra_nodes -> `feature`
    [N,4,8,8] -> MaxPool 4 -> Flatten -> Gemm 16->10 (logits)."""
    nodes = [onnx_node("Conv", ["image", "c.w", "c.b"], ["c"], [a_ints("kernel_shape", [3, 3]), a_ints("pads", [1, 1, 1, 1])],
                       name="/conv/Conv")]
    nodes += extra_nodes
    nodes += [onnx_node("MaxPool", [feature], ["p"], [a_ints("kernel_shape", [4, 4]), a_ints("strides", [4, 4])]),
              onnx_node("Flatten", ["p"], ["f"], [a_int("axis", 1)]),
              onnx_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], [a_int("transB", 1)], name="/fc/Gemm")]
    inits = [weights("c.w", [4, 1, 3, 3]), weights("c.b", [4], 2), weights("fc.w", [10, 16], 3), weights("fc.b", [10], 4)]
    return onnx_model(nodes, inits + list(extra_inits), **kw)


def scalar(name, v, dtype=FLOAT):
    return onnx_node("Constant", [], [name], [a_tensor("value", onnx_tensor("", [], [v], dtype))])


def onnx_seeds():
    c = "corpus"
    put(c, "onnx", "conv_relu_pool_gemm.onnx", conv_head([onnx_node("Relu", ["c"], ["r"])], "r"))
    bn = [onnx_tensor("bn.w", [4], [1.0] * 4), onnx_tensor("bn.b", [4], [0.0] * 4),
          onnx_tensor("bn.rm", [4], [0.0] * 4), onnx_tensor("bn.rv", [4], [1.0] * 4)]
    put(c, "onnx", "batchnorm.onnx", conv_head(
        [onnx_node("BatchNormalization", ["c", "bn.w", "bn.b", "bn.rm", "bn.rv"], ["n", "m1", "v1"],
                   [a_float("epsilon", 1e-5), a_float("momentum", 0.9), a_int("training_mode", 1)], name="/bn/BatchNormalization"),
         onnx_node("Relu", ["n"], ["r"])], "r", bn))
    put(c, "onnx", "batchnorm_inference.onnx", conv_head(
        [onnx_node("BatchNormalization", ["c", "bn.w", "bn.b", "bn.rm", "bn.rv"], ["n"])], "n", bn))
    # Activations memfit has no op for (refused by name) next to Relu.
    for op, attrs, ins in (("Clip", [], ["c", "lo", "hi"]), ("Sigmoid", [], ["c"]), ("HardSwish", [], ["c"]),
                           ("ReduceMean", [a_ints("axes", [1]), a_int("keepdims", 1)], ["c"]), ("Sub", [], ["c", "c"])):
        put(c, "onnx", f"{op.lower()}.onnx", conv_head([scalar("lo", 0.0), scalar("hi", 6.0), onnx_node(op, ins, ["a"], attrs)], "a"))
    # Add: equal shapes, a bias [8] broadcast over [N,4,8,8]; Mul and Div by scalars.
    put(c, "onnx", "add_mul_broadcast.onnx", conv_head(
        [onnx_node("Relu", ["c"], ["r"]), onnx_node("Add", ["c", "r"], ["s"]), onnx_node("Add", ["s", "bias8"], ["t"]),
         scalar("two", 2.0), onnx_node("Mul", ["two", "t"], ["u"]), scalar("three", 3.0), onnx_node("Div", ["u", "three"], ["v"])],
        "v", [weights("bias8", [8], 5)]))
    # Concat of two branches over channels, then a 1x1 conv back to 4, AveragePool, GlobalAveragePool.
    put(c, "onnx", "concat_branches.onnx", conv_head(
        [onnx_node("Relu", ["c"], ["r"]), onnx_node("Concat", ["c", "r"], ["cat"], [a_int("axis", 1)]),
         onnx_node("Conv", ["cat", "c2.w"], ["c2"], [a_ints("kernel_shape", [1, 1]), a_int("group", 2)], name="/c2/Conv"),
         onnx_node("Pad", ["c2", "zpads"], ["pd"]),
         onnx_node("AveragePool", ["pd"], ["ap"], [a_ints("kernel_shape", [3, 3]), a_ints("pads", [1, 1, 1, 1]),
                                                   a_int("count_include_pad", 0)])],
        "ap", [weights("c2.w", [4, 4, 1, 1], 6), onnx_tensor("zpads", [8], [0] * 8, INT64)]))
    # x.view(x.size(0), -1) as torch writes it, then Dropout, Softmax and LogSoftmax.
    nodes = [onnx_node("Conv", ["image", "c.w"], ["c"], [a_ints("kernel_shape", [3, 3]), a_ints("strides", [2, 2])]),
             onnx_node("Shape", ["c"], ["sh"]), scalar("zero", 0, INT64),
             onnx_node("Gather", ["sh", "zero"], ["n0"], [a_int("axis", 0)]),
             onnx_node("Unsqueeze", ["n0", "ax0"], ["n1"]), scalar("m1", -1, INT64),
             onnx_node("Unsqueeze", ["m1", "ax0"], ["m2"]),
             onnx_node("Concat", ["n1", "m2"], ["shape"], [a_int("axis", 0)]),
             onnx_node("Reshape", ["c", "shape"], ["flat"]),
             scalar("ratio", 0.25), scalar("train", True, BOOL),
             onnx_node("Dropout", ["flat", "ratio", "train"], ["dr", "mask"]),
             onnx_node("Identity", ["dr"], ["id"]),
             onnx_node("Gemm", ["id", "fc.w"], ["g"]),
             onnx_node("Softmax", ["g"], ["sm"], [a_int("axis", -1)]),
             onnx_node("LogSoftmax", ["sm"], ["logits"], [a_int("axis", 1)])]
    put(c, "onnx", "view_dropout_softmax.onnx", onnx_model(
        nodes, [weights("c.w", [2, 1, 3, 3]), weights("fc.w", [18, 10], 2), onnx_tensor("ax0", [1], [0], INT64)]))
    # GELU written out (Erf and Tanh forms) between two Linears as MatMul + Add.
    def gelu_erf(x, o):
        return [scalar(o + "s2", 2 ** 0.5), onnx_node("Div", [x, o + "s2"], [o + "d"]), onnx_node("Erf", [o + "d"], [o + "e"]),
                scalar(o + "one", 1.0), onnx_node("Add", [o + "e", o + "one"], [o + "p"]),
                onnx_node("Mul", [x, o + "p"], [o + "m"]), scalar(o + "half", 0.5), onnx_node("Mul", [o + "m", o + "half"], [o])]

    def gelu_tanh(x, o):
        return [scalar(o + "c3", 3.0), onnx_node("Pow", [x, o + "c3"], [o + "x3"]), scalar(o + "k", 0.044715),
                onnx_node("Mul", [o + "k", o + "x3"], [o + "kx3"]), onnx_node("Add", [x, o + "kx3"], [o + "in"]),
                scalar(o + "c0", (2 / 3.141592653589793) ** 0.5), onnx_node("Mul", [o + "c0", o + "in"], [o + "arg"]),
                onnx_node("Tanh", [o + "arg"], [o + "t"]), scalar(o + "half", 0.5), onnx_node("Mul", [x, o + "half"], [o + "xh"]),
                scalar(o + "one", 1.0), onnx_node("Add", [o + "t", o + "one"], [o + "p"]), onnx_node("Mul", [o + "xh", o + "p"], [o])]
    for form, fn in (("erf", gelu_erf), ("tanh", gelu_tanh)):
        nodes = [onnx_node("Flatten", ["image"], ["f"]), onnx_node("Transpose", ["w1"], ["w1t"], [a_ints("perm", [1, 0])]),
                 onnx_node("MatMul", ["f", "w1t"], ["h0"], name="/fc1/MatMul"), onnx_node("Add", ["h0", "b1"], ["h"])]
        nodes += fn("h", "g") + [onnx_node("MatMul", ["g", "w2"], ["o"], name="/fc2/MatMul"), onnx_node("Add", ["o", "b2"], ["logits"])]
        put(c, "onnx", f"gelu_{form}.onnx", onnx_model(
            nodes, [weights("w1", [8, 64]), weights("b1", [8], 2), weights("w2", [8, 10], 3), weights("b2", [10], 4)]))
    # Gelu as one node (opset 20), LayerNormalization, Split, Slice, Squeeze.
    nodes = [onnx_node("Reshape", ["image", "to3"], ["x3"]),
             onnx_node("Split", ["x3", "halves"], ["s0", "s1"], [a_int("axis", 2)]),
             onnx_node("Concat", ["s1", "s0"], ["sc"], [a_int("axis", 2)]),
             onnx_node("LayerNormalization", ["sc", "ln.w", "ln.b"], ["ln"], [a_int("axis", -1), a_float("epsilon", 1e-5)]),
             onnx_node("Gelu", ["ln"], ["ge"], [a_str("approximate", "tanh")]),
             onnx_node("Slice", ["ge", "st", "en", "axs"], ["sl"]),
             onnx_node("Unsqueeze", ["sl", "ax1"], ["u"]), onnx_node("Squeeze", ["u", "ax1"], ["q"]),
             onnx_node("Flatten", ["q"], ["f"]), onnx_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], [a_int("transB", 1)])]
    put(c, "onnx", "layernorm_split_slice.onnx", onnx_model(
        nodes, [onnx_tensor("to3", [3], [0, 8, 8], INT64), onnx_tensor("halves", [2], [4, 4], INT64),
                onnx_tensor("ln.w", [8], [1.0] * 8), onnx_tensor("ln.b", [8], [0.0] * 8),
                onnx_tensor("st", [1], [1], INT64), onnx_tensor("en", [1], [7], INT64), onnx_tensor("axs", [1], [2], INT64),
                onnx_tensor("ax1", [1], [1], INT64), weights("fc.w", [10, 48]), weights("fc.b", [10], 2)], opset=20))
    # Token ids: an embedding, positions by Range, a language model's head [N, 16, 10].
    nodes = [onnx_node("Gather", ["wte", "tokens"], ["e"], name="/wte/Gather"),
             scalar("r0", 0, INT64), scalar("r1", 16, INT64), scalar("rd", 1, INT64),
             onnx_node("Range", ["r0", "r1", "rd"], ["pos"]), onnx_node("Gather", ["wpe", "pos"], ["pe"], name="/wpe/Gather"),
             onnx_node("Add", ["e", "pe"], ["x"]),
             onnx_node("MatMul", ["x", "head"], ["logits"], name="/lm_head/MatMul")]
    put(c, "onnx", "tokens_lm.onnx", onnx_model(
        nodes, [weights("wte", [10, 8]), weights("wpe", [16, 8], 2), weights("head", [8, 10], 3)], inputs=[TOKENS],
        outputs=[onnx_value("logits", FLOAT, ["N", 16, 10])]))
    put(c, "onnx", "norm_exp_scatter.onnx", norm_exp_scatter())
    torch_seeds()
    onnx_regressions()


def norm_exp_scatter():
    """Swin-V2's pieces on the conv head: F.normalize over channels
    (ReduceL2, Clip at eps, Expand, Div), a logit scale exp(clip(s, max)),
    Sqrt of a tensor, ScatterND zeroing part of a bias parameter read
    through an Identity, and a float buffer ('tbl', listed in the
    metadata's memfit.buffers) added as a constant."""
    nodes = [onnx_node("ReduceL2", ["c"], ["nrm"], [a_ints("axes", [1]), a_int("keepdims", 1)]),
             scalar("eps", 1e-12), onnx_node("Clip", ["nrm", "eps", ""], ["nc"]),
             onnx_node("Shape", ["c"], ["csh"]), onnx_node("Expand", ["nc", "csh"], ["ne"]),
             onnx_node("Div", ["c", "ne"], ["cn"]),
             scalar("smax", 4.6), onnx_node("Clip", ["s", "", "smax"], ["sc"]), onnx_node("Exp", ["sc"], ["se"]),
             onnx_node("Mul", ["cn", "se"], ["cs"]),
             onnx_node("Identity", ["bias4"], ["bclone"]),
             onnx_node("ScatterND", ["bclone", "six", "zero2"], ["bz"]),
             onnx_node("Add", ["cs", "bz"], ["cb"]),
             onnx_node("Add", ["cb", "tbl"], ["ct"]),
             onnx_node("Relu", ["ct"], ["r"]), onnx_node("Sqrt", ["r"], ["sq"])]
    inits = [weights("s", [4, 1, 1], 7), weights("bias4", [4, 1, 1], 8), onnx_tensor("six", [1, 1], [1], INT64),
             onnx_tensor("zero2", [1, 1, 1], [0.0]), weights("tbl", [4, 8, 8], 9)]
    meta = pb_bytes(1, "memfit.buffers") + pb_bytes(2, "tbl")
    return conv_head(nodes, "sq", inits) + pb_bytes(14, meta)


def torch_seeds():
    """Real exports (torch.onnx.export through python/memfit/_onnx.py, as the
    package and tests/golden/export_onnx.py export): a small CNN, a GPT
    block with the attention pattern memfit fuses, and a GRU and an LSTM
    layer. Skipped without torch."""
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        print("make_seeds.py: no torch; the exported ONNX seeds are not written", file=sys.stderr)
        return
    import importlib.util
    import tempfile
    spec = importlib.util.spec_from_file_location("memfit_onnx_export", os.path.join(ROOT, "..", "python", "memfit", "_onnx.py"))
    ox = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ox)

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1, groups=2)
            self.fc = nn.Linear(16, 10)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
            x = F.avg_pool2d(F.gelu(self.conv2(x)) + x, 2)
            return self.fc(self.drop(x.view(x.size(0), -1)))

    class Gpt(nn.Module):
        C, H, T = 8, 2, 16

        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(10, self.C), nn.Embedding(self.T, self.C)
            self.ln = nn.LayerNorm(self.C)
            self.c_attn, self.c_proj = nn.Linear(self.C, 3 * self.C), nn.Linear(self.C, self.C)
            self.fc = nn.Linear(self.C, 2 * self.C)
            self.mlp = nn.Linear(2 * self.C, self.C)
            self.head = nn.Linear(self.C, 10, bias=False)
            self.register_buffer("bias", torch.tril(torch.ones(self.T, self.T)).view(1, 1, self.T, self.T))

        def forward(self, idx):
            B, T = idx.size()
            x = self.wte(idx) + self.wpe(torch.arange(0, T, dtype=torch.long))
            q, k, v = self.c_attn(self.ln(x)).split(self.C, dim=2)
            q, k, v = (t.view(B, T, self.H, self.C // self.H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (self.C // self.H) ** 0.5)
            att = F.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")), dim=-1)
            x = x + self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, self.C))
            x = x + self.mlp(F.gelu(self.fc(x), approximate="tanh"))
            return self.head(x)

    class Recurrent(nn.Module):
        """nn.GRU then nn.LSTM, batch first, as text classifiers write them
        (ConstantOfShape zero states, Transposes around each layer)."""

        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(10, 4)
            self.gru = nn.GRU(4, 6, batch_first=True)
            self.lstm = nn.LSTM(6, 6, batch_first=True)
            self.fc = nn.Linear(6, 10)

        def forward(self, idx):
            x, _ = self.gru(self.embedding(idx))
            x, (h, c) = self.lstm(x)
            return self.fc(h[-1] + x.mean(dim=1))

    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        cnn, gpt = Cnn(), Gpt()  # drawn first, as before the recurrent seed was added
        torch.manual_seed(0)
        for name, model, example, opset in (("torch_cnn.onnx", cnn, torch.zeros(2, 1, 8, 8), 14),
                                            ("torch_gpt.onnx", gpt, torch.zeros(2, 16, dtype=torch.long), 17),
                                            ("torch_recurrent.onnx", Recurrent(), torch.zeros(2, 16, dtype=torch.long), 17)):
            path = os.path.join(tmp, name)
            kw = {"input_name": "tokens"} if example.dtype == torch.long else {}
            ox.export_training(model, example, path, opset, **kw)
            put("corpus", "onnx", name, open(path, "rb").read())


# Inputs that crash the importer (a signal or an exception that is not
# memfit's) are kept in regressions/onnx_pending/, which no test replays,
# until models/onnx/*.cpp refuses them; then moved back to regressions/onnx.
# None is pending now. The first replay found 24 (each now refused where
# the file is read: a node's input or output counts against its op's,
# 64-bit overflow in constant folding, reshape sizes, initializer dims, conv
# output sizes and numel, a repeated squeeze axis, a non-finite Range):
ONNX_PENDING = set()
# libFuzzer's finds (make fuzz, 60 s + 60 s in fork mode, all mutations of
# the seeds), kept by found_by_libfuzzer() in regressions/onnx:
#   crash-51278e35...: fold_int reads n.input(1) of an Add of one input
#   crash-e6803b21...: op_gather reads n.input(1)
#   crash-82d2bc34..., crash-bcbdadf2...: bind_const writes n.output(0) of a node with none
#   crash-e8e1cd5b...: constant() reads n.input(k) past the inputs
#   crash-75361853..., crash-a099a6e9...: op_reshape's known *= to[k] overflows


def onnx_regressions():
    """Files built to break the importer's assumptions, one a file."""
    r = "regressions"
    base_inits = lambda: [weights("c.w", [4, 1, 3, 3]), weights("c.b", [4], 2), weights("fc.w", [10, 16], 3), weights("fc.b", [10], 4)]
    cases = {
        # the graph's order and wiring
        "reads_unmade_value.onnx": conv_head([onnx_node("Relu", ["nowhere"], ["r"])], "r"),
        "cycle.onnx": conv_head([onnx_node("Add", ["c", "b2"], ["a2"]), onnx_node("Relu", ["a2"], ["b2"])], "a2"),
        "output_never_made.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", out="missing"),
        "no_input.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", inputs=[]),
        "two_inputs.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r",
                                     inputs=[IMAGE, onnx_value("extra", FLOAT, ["N", 1, 8, 8])]),
        "input_rank_3.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", inputs=[onnx_value("image", FLOAT, ["N", 8, 8])]),
        "input_huge.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r",
                                     inputs=[onnx_value("image", FLOAT, [1, 1, 1 << 40, 1 << 40])]),
        "input_negative.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", inputs=[onnx_value("image", FLOAT, [-3, 1, 8, 8])]),
        "two_outputs.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r",
                                      outputs=[onnx_value("logits", FLOAT, ["N", 10]), onnx_value("r", FLOAT, [])]),
        "no_nodes.onnx": onnx_model([], base_inits()),
        "empty.onnx": b"",
        "not_protobuf.onnx": b"\xff" * 64,
        "opset_8.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", opset=8),
        "opset_23.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", opset=23),
        "opset_none.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", opset=None),
        "foreign_domain.onnx": conv_head([onnx_node("Relu", ["c"], ["r"], domain="com.microsoft")], "r"),
        "unknown_attribute.onnx": conv_head([onnx_node("Relu", ["c"], ["r"], [a_int("alpha", 1)])], "r"),
        # tensors
        "init_dims_disagree.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor("c.w", [4, 1, 3, 3], [0.5] * 35)]),
        "init_negative_dim.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor("c.w", [4, -1, 3, 3], [0.5] * 36)]),
        "init_raw_not_whole.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor("c.w", [1], raw=b"\0\0\x80")]),
        "init_string_type.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor("s", [1], dtype=STRING)]),
        "constant_1e12.onnx": conv_head([onnx_node("Constant", [], ["k"], [a_tensor("value", onnx_tensor("", [10 ** 12]))]),
                                         onnx_node("Relu", ["c"], ["r"])], "r"),
        "external_data.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor(
            "c.w", [4, 1, 3, 3], extra=pb_bytes(13, pb_bytes(1, "location") + pb_bytes(2, "../../etc/passwd")) + pb_int(14, 1))]),
        "external_fields_default.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor(
            "c.w", [4, 1, 3, 3], [0.5] * 36, extra=pb_bytes(13, pb_bytes(1, "location") + pb_bytes(2, "../../etc/passwd")))]),
        # sizes that overflow int64 when multiplied
        "init_dims_wrap_zero.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor("big", [1 << 32, 1 << 32])]),
        "init_dims_wrap_as_weight.onnx": onnx_model(
            [onnx_node("Flatten", ["image"], ["f"]), onnx_node("Gemm", ["f", "big"], ["logits"])],
            [onnx_tensor("big", [1 << 32, 1 << 32])]),
        "slice_of_wrapped_constant.onnx": conv_head(
            [onnx_node("Slice", ["big", "z1", "o1", "z1"], ["bs"]), onnx_node("Relu", ["c"], ["r"])], "r",
            [onnx_tensor("big", [1 << 32, 1 << 32], dtype=INT64), onnx_tensor("z1", [1], [0], INT64), onnx_tensor("o1", [1], [1], INT64)]),
        "reshape_huge.onnx": conv_head([onnx_node("Reshape", ["c", "to"], ["h"]), onnx_node("Reshape", ["h", "back"], ["r"])], "r",
                                       [onnx_tensor("to", [3], [1 << 40, 1 << 40, 1 << 40], INT64),
                                        onnx_tensor("back", [4], [0, 4, 8, 8], INT64)]),
        "reshape_wraps_to_numel.onnx": conv_head([onnx_node("Reshape", ["c", "to"], ["h"]), onnx_node("Reshape", ["h", "back"], ["r"])],
                                                 "r", [onnx_tensor("to", [3], [0, 256, (1 << 56) + 1], INT64),
                                                       onnx_tensor("back", [4], [2, 4, 8, 8], INT64)]),
        "reshape_two_minus_one.onnx": conv_head([onnx_node("Reshape", ["c", "to"], ["r"])], "r", [onnx_tensor("to", [2], [-1, -1], INT64)]),
        "flatten_huge_input.onnx": onnx_model([onnx_node("Flatten", ["image"], ["f"]), onnx_node("Gemm", ["f", "w"], ["logits"])],
                                              [weights("w", [64, 10])],
                                              inputs=[onnx_value("image", FLOAT, [1, 1 << 21, 1 << 21, 1 << 21])]),
        # convolutions and pools
        "conv_zero_kernel.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor("c.w", [4, 1, 0, 0])]),
        "conv_group_3.onnx": conv_head([onnx_node("Conv", ["c", "g.w"], ["g"], [a_int("group", 3)]), onnx_node("Relu", ["g"], ["r"])], "r",
                                       [weights("g.w", [4, 1, 1, 1])]),
        "conv_group_0.onnx": conv_head([onnx_node("Conv", ["c", "g.w"], ["g"], [a_int("group", 0)]), onnx_node("Relu", ["g"], ["r"])], "r",
                                       [weights("g.w", [4, 4, 1, 1])]),
        "conv_stride_0.onnx": conv_head([onnx_node("Conv", ["c", "g.w"], ["r"], [a_ints("strides", [0, 0])])], "r", [weights("g.w", [4, 4, 1, 1])]),
        "conv_dilation_huge.onnx": conv_head([onnx_node("Conv", ["c", "g.w"], ["r"], [a_ints("dilations", [1 << 62, 1 << 62])])], "r",
                                             [weights("g.w", [4, 4, 3, 3])]),
        "conv_pads_huge.onnx": conv_head([onnx_node("Conv", ["c", "g.w"], ["r"], [a_ints("pads", [1 << 62] * 4)])], "r",
                                         [weights("g.w", [4, 4, 1, 1])]),
        "conv_one_input.onnx": conv_head([onnx_node("Conv", ["c"], ["r"])], "r"),
        "maxpool_kernel_0.onnx": conv_head([onnx_node("MaxPool", ["c"], ["r"], [a_ints("kernel_shape", [0, 0])])], "r"),
        "maxpool_stride_0.onnx": conv_head([onnx_node("MaxPool", ["c"], ["r"], [a_ints("kernel_shape", [2, 2]), a_ints("strides", [0, 0])])], "r"),
        "maxpool_kernel_huge.onnx": conv_head([onnx_node("MaxPool", ["c"], ["r"], [a_ints("kernel_shape", [1 << 62, 1 << 62])])], "r"),
        "avgpool_pads_negative.onnx": conv_head([onnx_node("AveragePool", ["c"], ["r"], [a_ints("kernel_shape", [1, 1]),
                                                                                         a_ints("pads", [-2, -2, -2, -2])])], "r"),
        "batchnorm_two_inputs.onnx": conv_head([onnx_node("BatchNormalization", ["c", "c.b"], ["r"], [a_int("training_mode", 1)])], "r"),
        # nodes with missing inputs or outputs
        "relu_no_input.onnx": conv_head([onnx_node("Relu", [], ["r"])], "r"),
        "relu_no_output.onnx": conv_head([onnx_node("Relu", ["c"], []), onnx_node("Relu", ["c"], ["r"])], "r"),
        "add_one_input.onnx": conv_head([onnx_node("Add", ["c"], ["r"])], "r"),
        "matmul_no_output.onnx": conv_head([onnx_node("MatMul", ["c", "c"], []), onnx_node("Relu", ["c"], ["r"])], "r"),
        "reshape_one_input.onnx": conv_head([onnx_node("Reshape", ["c"], ["r"])], "r"),
        "gather_one_input.onnx": conv_head([onnx_node("Gather", ["c"], ["r"])], "r"),
        "split_no_outputs.onnx": conv_head([onnx_node("Split", ["c"], [], [a_int("axis", 1)]), onnx_node("Relu", ["c"], ["r"])], "r"),
        "split_negative_sizes.onnx": conv_head([onnx_node("Split", ["c", "sz"], ["r", "s1"], [a_int("axis", 1)])], "r",
                                               [onnx_tensor("sz", [2], [-4, 8], INT64)]),
        "concat_nothing.onnx": conv_head([onnx_node("Concat", [], [], [a_int("axis", 0)]), onnx_node("Relu", ["c"], ["r"])], "r"),
        "logsoftmax_no_output.onnx": conv_head([onnx_node("LogSoftmax", ["c"], []), onnx_node("Relu", ["c"], ["r"])], "r"),
        "range_one_input.onnx": conv_head([onnx_node("Range", ["c.b"], ["rg"]), onnx_node("Relu", ["c"], ["r"])], "r"),
        "erf_no_output.onnx": conv_head(
            [scalar("s2", 2 ** 0.5), onnx_node("Div", ["c", "s2"], ["d"]), onnx_node("Erf", ["d"], []), onnx_node("Relu", ["c"], ["r"])], "r"),
        "gelu_add_no_output.onnx": conv_head(
            [scalar("s2", 2 ** 0.5), onnx_node("Div", ["c", "s2"], ["d"]), onnx_node("Erf", ["d"], ["e"]), scalar("one", 1.0),
             onnx_node("Add", ["e", "one"], []), onnx_node("Relu", ["c"], ["r"])], "r"),
        # shapes and axes
        "unsqueeze_duplicate_axes.onnx": conv_head([onnx_node("Unsqueeze", ["c", "ax"], ["u"]), onnx_node("Relu", ["c"], ["r"])], "r",
                                                   [onnx_tensor("ax", [2], [5, 5], INT64)]),
        "squeeze_duplicate_axes.onnx": conv_head(
            [onnx_node("Unsqueeze", ["c", "a4"], ["u"]), onnx_node("Squeeze", ["u", "ax"], ["q"]), onnx_node("Relu", ["q"], ["r"])], "r",
            [onnx_tensor("a4", [1], [4], INT64), onnx_tensor("ax", [2], [4, 4], INT64)]),
        "transpose_bad_perm.onnx": conv_head([onnx_node("Transpose", ["c"], ["r"], [a_ints("perm", [0, 0, 9, -1])])], "r"),
        "transpose_perm_short.onnx": conv_head([onnx_node("Transpose", ["c"], ["r"], [a_ints("perm", [1])])], "r"),
        "softmax_axis_huge.onnx": conv_head([onnx_node("Softmax", ["c"], ["r"], [a_int("axis", 1 << 62)])], "r"),
        "flatten_axis_min.onnx": conv_head([onnx_node("Flatten", ["c"], ["r"], [a_int("axis", -(1 << 63))])], "r"),
        "concat_axis_huge.onnx": conv_head([onnx_node("Concat", ["c", "c"], ["r"], [a_int("axis", 99)])], "r"),
        "slice_steps_and_min.onnx": conv_head([onnx_node("Slice", ["c", "st", "en", "ax"], ["r"])], "r",
                                              [onnx_tensor("st", [1], [-(1 << 63)], INT64), onnx_tensor("en", [1], [(1 << 63) - 1], INT64),
                                               onnx_tensor("ax", [1], [-1], INT64)]),
        "gather_index_min.onnx": conv_head([onnx_node("Shape", ["c"], ["s"]), onnx_node("Gather", ["s", "ix"], ["g"]),
                                            onnx_node("Relu", ["c"], ["r"])], "r", [onnx_tensor("ix", [1], [-(1 << 63)], INT64)]),
        "range_infinite.onnx": conv_head([scalar("a", 0.0), scalar("b", float("inf")), scalar("d", 1.0),
                                          onnx_node("Range", ["a", "b", "d"], ["rg"]), onnx_node("Relu", ["c"], ["r"])], "r"),
        "range_nan.onnx": conv_head([scalar("a", 0.0), scalar("b", float("nan")), scalar("d", 1.0),
                                     onnx_node("Range", ["a", "b", "d"], ["rg"]), onnx_node("Relu", ["c"], ["r"])], "r"),
        "range_int_min.onnx": conv_head([scalar("a", -(1 << 63), INT64), scalar("b", (1 << 63) - 1, INT64), scalar("d", (1 << 62), INT64),
                                         onnx_node("Range", ["a", "b", "d"], ["rg"]), onnx_node("Relu", ["c"], ["r"])], "r"),
        "fold_int_overflow.onnx": conv_head([scalar("a", (1 << 63) - 1, INT64), scalar("b", 2, INT64), onnx_node("Mul", ["a", "b"], ["m"]),
                                             scalar("z", -(1 << 63), INT64), scalar("n1", -1, INT64), onnx_node("Div", ["z", "n1"], ["q"]),
                                             onnx_node("Relu", ["c"], ["r"])], "r"),
        "dropout_ratio_nan.onnx": conv_head([onnx_node("Dropout", ["c"], ["r"], [a_float("ratio", float("nan"))])], "r"),
        "mul_two_tensors.onnx": conv_head([onnx_node("Mul", ["c", "c"], ["r"])], "r"),
        "div_by_zero.onnx": conv_head([scalar("z", 0.0), onnx_node("Div", ["c", "z"], ["r"])], "r"),
        "where_alone.onnx": conv_head([onnx_node("Where", ["c", "c", "c"], ["r"])], "r"),
        "head_of_7.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [weights("fc.w", [7, 16]), weights("fc.b", [7])]),
        "duplicate_initializer.onnx": conv_head([onnx_node("Relu", ["c"], ["r"])], "r", [weights("c.w", [4, 1, 5, 5])]),
    }
    for name, data in cases.items():
        put(r, "onnx_pending" if name in ONNX_PENDING else "onnx", name, data)


def array_cache(c, h, w, labels, pixels=None, f32=False, classes=None, mean=None, std=None, fingerprint=bytes(range(32)),
                **override):
    """An array cache file as python/memfit/_data.py writes one (version 1:
    the header, mean and std, the labels at a 64-byte boundary, then the
    samples C x H x W, u8 or f32); override sets a header field by name."""
    C, H, W, n = c, h, w, len(labels)
    sample = C * H * W * (4 if f32 else 1)
    labels_at = -(-(96 + 8 * C) // 64) * 64
    data_at = -(-(labels_at + 4 * n) // 64) * 64
    if pixels is None:
        if f32:
            pixels = struct.pack("<%df" % (n * C * H * W), *[((i * 13) % 7 - 3) / 4.0 for i in range(n * C * H * W)])
        else:
            pixels = bytes((i * 29) & 0xFF for i in range(n * sample))
    h = dict(magic=b"MFARRAY\0", version=1, type=1 if f32 else 0, C=C, H=H, W=W,
             classes=classes if classes is not None else max(labels) + 1, count=n, labels_at=labels_at, data_at=data_at,
             size=data_at + len(pixels))
    h.update(override)
    mean = mean if mean is not None else [0.5] * C
    std = std if std is not None else [0.25] * C
    head = h["magic"] + struct.pack("<IIIIIIQQQQ", h["version"], h["type"], h["C"], h["H"], h["W"], h["classes"], h["count"],
                                    h["labels_at"], h["data_at"], h["size"]) + fingerprint + struct.pack("<%df" % (2 * C), *mean, *std)
    b = bytearray(head.ljust(labels_at, b"\0"))
    b += struct.pack("<%di" % n, *labels)
    b = b.ljust(data_at, b"\0")
    return bytes(b + pixels)


def array_cache_seeds():
    c, r = "corpus", "regressions"
    put(c, "array_cache", "u8_gray.mfarray", array_cache(1, 8, 8, [0, 1, 2, 1]))
    put(c, "array_cache", "u8_rgb.mfarray", array_cache(3, 4, 4, [3, 0, 2], mean=[0.49, 0.48, 0.45], std=[0.25, 0.24, 0.26]))
    put(c, "array_cache", "f32.mfarray", array_cache(2, 3, 3, [1, 0, 1, 1, 0], f32=True))
    put(c, "array_cache", "one_pixel.mfarray", array_cache(1, 1, 1, [0], classes=1))
    # Samples of more than one read chunk (16 KiB) each.
    put(c, "array_cache", "u8_two_chunks.mfarray", array_cache(1, 130, 130, [1, 0]))
    ok = array_cache(1, 8, 8, [0, 1, 2, 1])
    cases = {
        "empty.mfarray": b"",
        "header_cut_95.mfarray": ok[:95],
        "header_only.mfarray": ok[:96],
        "cut_in_labels.mfarray": ok[:130],
        "cut_in_samples.mfarray": ok[:-1],
        "longer_than_header_says.mfarray": ok + b"\0" * 64,
        "bad_magic.mfarray": b"MFARRAZ\0" + ok[8:],
        "version_0.mfarray": array_cache(1, 8, 8, [0, 1], version=0),
        "version_2.mfarray": array_cache(1, 8, 8, [0, 1], version=2),
        "type_2.mfarray": array_cache(1, 8, 8, [0, 1], type=2),
        "type_f32_u8_bytes.mfarray": array_cache(1, 8, 8, [0, 1], type=1),
        "extent_0.mfarray": array_cache(1, 8, 8, [0, 1], H=0),
        "extent_huge.mfarray": array_cache(1, 8, 8, [0, 1], C=1 << 16, H=1 << 16, W=1 << 16),
        "extent_u32_max.mfarray": array_cache(1, 8, 8, [0, 1], W=0xFFFFFFFF),
        "channels_past_header.mfarray": array_cache(1, 8, 8, [0, 1], C=40),
        "classes_0.mfarray": array_cache(1, 8, 8, [0, 1], classes=0),
        "classes_huge.mfarray": array_cache(1, 8, 8, [0, 1], classes=0xFFFFFFFF),
        "count_0.mfarray": array_cache(1, 8, 8, [0, 1], count=0),
        "count_huge.mfarray": array_cache(1, 8, 8, [0, 1], count=(1 << 64) - 1),
        "count_2_40.mfarray": array_cache(1, 8, 8, [0, 1], count=1 << 40),
        "count_past_file.mfarray": array_cache(1, 8, 8, [0, 1], count=3),
        "count_times_4_wraps.mfarray": array_cache(1, 8, 8, [0, 1], count=(1 << 62) + 2),
        "labels_at_0.mfarray": array_cache(1, 8, 8, [0, 1], labels_at=0),
        "labels_at_past_end.mfarray": array_cache(1, 8, 8, [0, 1], labels_at=1 << 63),
        "labels_in_data.mfarray": array_cache(1, 8, 8, [0, 1], data_at=128),
        "data_at_past_end.mfarray": array_cache(1, 8, 8, [0, 1], data_at=(1 << 64) - 1),
        "size_lies.mfarray": array_cache(1, 8, 8, [0, 1], size=1 << 40),
        "label_negative.mfarray": array_cache(1, 8, 8, [0, -1], classes=2),
        "label_is_classes.mfarray": array_cache(1, 8, 8, [0, 2], classes=2),
        "mean_nan.mfarray": array_cache(1, 8, 8, [0, 1], mean=[float("nan")]),
        "mean_inf.mfarray": array_cache(1, 8, 8, [0, 1], mean=[float("inf")]),
        "std_nan.mfarray": array_cache(1, 8, 8, [0, 1], std=[float("nan")]),
        "std_zero.mfarray": array_cache(1, 8, 8, [0, 1], std=[0.0]),
        "std_negative.mfarray": array_cache(1, 8, 8, [0, 1], std=[-1.0]),
        # finite statistics whose table is not: 1 / 1e-40 is inf in float
        "std_subnormal.mfarray": array_cache(1, 8, 8, [0, 1], std=[1e-40]),
        "mean_huge_std_small.mfarray": array_cache(1, 8, 8, [0, 1], mean=[3e38], std=[1e-3]),
        # f32 files carry no normalisation: NaN statistics are not read
        "f32_stats_nan.mfarray": array_cache(1, 2, 2, [0, 1], f32=True, mean=[float("nan")], std=[float("nan")]),
        "f32_pixels_nan.mfarray": array_cache(1, 2, 2, [0, 1], f32=True, pixels=struct.pack("<8f", *[float("nan")] * 8)),
    }
    for name, data in cases.items():
        put(r, "array_cache", name, data)


if __name__ == "__main__":
    main()
