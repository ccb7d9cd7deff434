#!/usr/bin/env bash
# report.html in a real browser: a short memfit run writes its report, headless
# Chromium renders it, and the check fails unless the page's DOM holds the
# plots with their content (the arena's rectangles, the curves' points) and
# the screenshot is not blank (enough non-white, and coloured, pixels).
# Without Chromium it skips (exit 77, the entry's SKIP_RETURN_CODE).
# usage: report_browser.sh MEMFIT_BINARY WORK_DIR
set -euo pipefail
memfit=$1
work=$2
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIP: chromium not installed (apt-get install chromium)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
run="$work/run"
"$memfit" train --steps 6 --eval-every 3 --subset 256 --test-subset 64 --batch 32 --threads 2 --progress lines \
  --out "$run" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
[ -f "$run/report.html" ] || { echo "FAIL: memfit train wrote no $run/report.html"; cat "$work/train.log"; exit 1; }

# The browser's own profile and cache stay in the work folder, and it must
# not reach anything: the page is self-contained.
flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-extensions --hide-scrollbars
       --user-data-dir="$work/profile" --proxy-server=127.0.0.1:9 --window-size=1200,3000)
export HOME="$work"
timeout 90 "$browser" "${flags[@]}" --dump-dom "file://$run/report.html" > "$work/dom.html" 2> "$work/chromium-dom.log" ||
  { echo "FAIL: chromium --dump-dom failed"; tail -20 "$work/chromium-dom.log"; exit 1; }
timeout 90 "$browser" "${flags[@]}" --screenshot="$work/report.png" "file://$run/report.html" \
  > /dev/null 2> "$work/chromium-shot.log" ||
  { echo "FAIL: chromium --screenshot failed"; tail -20 "$work/chromium-shot.log"; exit 1; }

/usr/bin/python3 - "$run/plan.json" "$work/dom.html" "$work/report.png" <<'PY'
import json, re, struct, sys, zlib

plan = json.load(open(sys.argv[1]))
dom = open(sys.argv[2], encoding="utf-8").read()
fail = []

# The DOM as the browser built it: every chart, with its content.
for chart in ["loss-chart", "score-chart", "throughput-chart", "plan-chart", "arena-peak-chart", "rss-chart", "arena-chart"]:
    if not re.search(r'<svg[^>]*id="%s"' % chart, dom):
        fail.append("no <svg id=%s> in the DOM" % chart)
group = re.search(r'<g class="buffers">(.*?)</g>', dom, re.S)
rects = len(re.findall(r"<rect\b", group.group(1))) if group else 0
if rects != len(plan["schedule"]["buffers"]):
    fail.append("arena chart: %d rects in the DOM for %d planned buffers" % (rects, len(plan["schedule"]["buffers"])))
for cls, want in [("train-loss", 6), ("rss", 6)]:
    m = re.search(r'<polyline class="%s"[^>]*points="([^"]*)"' % cls, dom)
    n = len(m.group(1).split()) if m else 0
    if n != want:
        fail.append("polyline %s: %d points, expected %d" % (cls, n, want))

# The screenshot: a PNG (8-bit RGB or RGBA, as Chromium writes it), decoded
# with zlib and the PNG row filters.
def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                raise ValueError("PNG of bit depth %d, colour type %d" % (depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride): line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows

w, h, bpp, rows = read_png(sys.argv[3])
ink = coloured = 0
for line in rows:
    for i in range(0, len(line), bpp * 2):  # every other pixel
        r, g, b = line[i], line[i + 1], line[i + 2]
        if r < 240 or g < 240 or b < 240:
            ink += 1
        if max(r, g, b) - min(r, g, b) > 60:
            coloured += 1
sampled = w * h // 2
print("screenshot %dx%d: %.2f%% of the sampled pixels drawn, %.2f%% coloured" % (w, h, 100.0 * ink / sampled, 100.0 * coloured / sampled))
if ink < sampled * 0.02:
    fail.append("the screenshot is blank: %d of %d sampled pixels are not white" % (ink, sampled))
if coloured < sampled * 0.005:
    fail.append("the screenshot has no plots: only %d of %d sampled pixels are coloured" % (coloured, sampled))
if fail:
    print("FAIL: " + "; ".join(fail))
    sys.exit(1)
print("ok: %d charts, %d arena rectangles, and a screenshot that is drawn" % (7, rects))
PY
