#!/usr/bin/env python3
"""Writes memfit's fuzz seed corpora and the regression inputs of issue #17.

    python3 fuzz/make_seeds.py BUILD_DIR

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


def main():
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


if __name__ == "__main__":
    main()
