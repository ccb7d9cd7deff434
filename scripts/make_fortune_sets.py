#!/usr/bin/python3
"""Builds memfit's offline text datasets from Debian's fortune packages
(make deps installs them and runs this):

  OUT/en.txt                the English fortunes (packages fortunes and
                            fortunes-min), every entry, for language models
  OUT/topics/{train,test}.jsonl
                            topic classification: the entries of eight
                            English categories (computers, politics, work,
                            science, linux, law, food, sports), the label
                            being the category
  OUT/languages/{train,test}.jsonl
                            language identification: up to 1500 entries of
                            each of English, German, Spanish, Italian,
                            Portuguese, Czech/Slovak, Polish, Russian

    /usr/bin/python3 scripts/make_fortune_sets.py [--root /usr/share/games/fortunes] [--out deps/fortunes]

Deterministic: entries in file order, files sorted by name, a fixed seed for
the choice and the 80/20 split (random.Random(20261201)). Entries are the
text between lines holding only "%", trailing newlines trimmed; files that
are not UTF-8 text (strfile's .dat indexes) and links are skipped. Files are
written to a temporary name and renamed.
"""
import argparse
import json
import os
import random
import subprocess

TOPICS = ["computers", "politics", "work", "science", "linux", "law", "food", "sports"]
# Language -> folders (or files) under the fortunes root, as the packages install them.
LANGUAGES = {"de": ["de"], "es": ["es"], "it": ["it"], "pt": ["brasil"], "cs": ["cs"], "pl": ["pl"], "ru": ["ru"]}
PER_LANGUAGE = 1500
SEED = 20261201


def entries(path):
    with open(path, "rb") as f:
        raw = f.read()
    if b"\0" in raw:
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return []
    out, cur = [], []
    for line in text.split("\n"):
        if line.rstrip("\r") == "%":
            e = "\n".join(cur).rstrip("\r\n")
            if e.strip():
                out.append(e)
            cur = []
        else:
            cur.append(line)
    e = "\n".join(cur).rstrip("\r\n")
    if e.strip():
        out.append(e)
    return out


def text_files(path):
    """Regular files (not links) in a folder, sorted; or the file itself."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        return []
    return [os.path.join(path, n) for n in sorted(os.listdir(path))
            if not n.startswith(".") and not n.endswith(".dat") and os.path.isfile(os.path.join(path, n))
            and not os.path.islink(os.path.join(path, n))]


def english_files(root):
    """The category files of the packages fortunes and fortunes-min."""
    try:
        listed = subprocess.run(["dpkg-query", "-L", "fortunes", "fortunes-min"], capture_output=True, text=True).stdout
        files = sorted({p for p in listed.split("\n") if os.path.dirname(p) == root.rstrip("/")})
    except OSError:
        files = []
    if not files:  # no dpkg: every file directly in the root but the Portuguese one
        files = [f for f in text_files(root) if os.path.basename(f) != "brasil"]
    return [f for f in files if os.path.isfile(f) and not os.path.islink(f) and not f.endswith(".dat")]


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)
    os.replace(tmp, path)


def split_write(out_dir, rows, rng):
    rng.shuffle(rows)
    cut = len(rows) * 4 // 5
    for name, part in (("train", rows[:cut]), ("test", rows[cut:])):
        write(os.path.join(out_dir, name + ".jsonl"),
              [json.dumps({"text": t, "label": l}, ensure_ascii=False) + "\n" for t, l in part])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deps", "fortunes"))
    a = ap.parse_args()
    en = english_files(a.root)
    if not en:
        raise SystemExit(f"no English fortunes under {a.root}: apt-get install fortunes fortunes-min (make deps does)")
    by_file = {os.path.basename(f): entries(f) for f in en}
    english = [e for f in en for e in by_file[os.path.basename(f)]]
    write(os.path.join(a.out, "en.txt"), [e + "\n%\n" for e in english])

    rng = random.Random(SEED)
    topics = [(e, t) for t in TOPICS for e in by_file.get(t, [])]
    missing = [t for t in TOPICS if not by_file.get(t)]
    if missing:
        raise SystemExit(f"the English fortunes lack the categories {missing}")
    split_write(os.path.join(a.out, "topics"), topics, rng)

    langs = []
    pool = list(english)
    rng.shuffle(pool)
    langs += [(e, "en") for e in pool[:PER_LANGUAGE]]
    for lang, parts in LANGUAGES.items():
        found = [e for p in parts for f in text_files(os.path.join(a.root, p)) for e in entries(f)]
        if not found:
            print(f"make_fortune_sets: no {lang} fortunes under {a.root} (skipped)")
            continue
        rng.shuffle(found)
        langs += [(e, lang) for e in found[:PER_LANGUAGE]]
    split_write(os.path.join(a.out, "languages"), langs, rng)
    print(f"make_fortune_sets: {len(english)} English entries in {a.out}/en.txt; {len(topics)} topic examples "
          f"({len(TOPICS)} classes); {len(langs)} language examples ({len(langs) // PER_LANGUAGE} languages)")


if __name__ == "__main__":
    main()
