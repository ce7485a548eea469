#!/usr/bin/env python3
"""Draws the chart of a benchmark result: bench/results/NAME.md -> bench/results/NAME.png.

The first markdown table of the file becomes a horizontal bar chart — one group of bars per
row, one bar per charted column — so that docs/GUIDE.md can show what each mechanism does.
Python's standard library only (no matplotlib on a plain Debian machine): the PNG is written
by hand and the labels are drawn with a built-in 5x7 pixel font (upper case).

What is charted per benchmark is in CHARTS below; a result file without an entry gets its
first numeric column.  Usage: bench/chart.py bench/results/*.md
"""
import os
import re
import struct
import sys
import zlib

# name -> which rows and columns to draw
CHARTS = {
    # direct async I/O: the block layer against fio, per workload (log scale: buffered psync writes
    # land in the host page cache and are 40x faster than any device)
    "blk": {"label": ["workload"], "series": ["fio IOPS", "uring IOPS", "psync IOPS"],
            "log": True, "unit": "IOPS"},
    # merged checkpoints: each metric with merge on, relative to merge off (1.0 = the same)
    "checkpoint": {"label": [0], "series": ["on/off"], "ref": 1.0,
                   "unit": "merge on / merge off"},
    # merged, parallel discard: fstrim time per way of issuing discards
    "trim": {"label": ["backing", "files", "how"], "cut": ":", "series": ["fstrim s"],
             "unit": "seconds"},
}

# ---- a 5x7 pixel font: each glyph is 7 rows of 5 bits, most significant bit on the left ----
FONT = {
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E), "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F), "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02), "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E), "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E), "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    "A": (0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11), "B": (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),
    "C": (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E), "D": (0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C),
    "E": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F), "F": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10),
    "G": (0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F), "H": (0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "I": (0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E), "J": (0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C),
    "K": (0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11), "L": (0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F),
    "M": (0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11), "N": (0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11),
    "O": (0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E), "P": (0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10),
    "Q": (0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D), "R": (0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11),
    "S": (0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E), "T": (0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04),
    "U": (0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E), "V": (0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04),
    "W": (0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A), "X": (0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11),
    "Y": (0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04), "Z": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F),
    " ": (0, 0, 0, 0, 0, 0, 0), ".": (0, 0, 0, 0, 0, 0x0C, 0x0C), ",": (0, 0, 0, 0, 0x0C, 0x04, 0x08),
    ":": (0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0), "/": (0, 0x01, 0x02, 0x04, 0x08, 0x10, 0),
    "%": (0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03), "(": (0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02),
    ")": (0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08), "-": (0, 0, 0, 0x1F, 0, 0, 0),
    "+": (0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0), "_": (0, 0, 0, 0, 0, 0, 0x1F),
    "=": (0, 0, 0x1F, 0, 0x1F, 0, 0), "<": (0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02),
    ">": (0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08), "'": (0x0C, 0x04, 0x08, 0, 0, 0, 0),
    "#": (0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A), "?": (0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04),
    "[": (0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E), "]": (0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E),
    "*": (0, 0x04, 0x15, 0x0E, 0x15, 0x04, 0), "|": (0x04,) * 7, "!": (0x04, 0x04, 0x04, 0x04, 0x04, 0, 0x04),
    '"': (0x0A, 0x0A, 0x0A, 0, 0, 0, 0), "&": (0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D),
}
SCALE = 2                      # font pixels per glyph pixel
CHAR_W, CHAR_H = 6 * SCALE, 9 * SCALE

WHITE, BLACK, GREY, LIGHT = (255, 255, 255), (30, 30, 30), (120, 120, 120), (225, 225, 225)
COLORS = [(52, 101, 164), (204, 0, 0), (78, 154, 6), (245, 121, 0), (117, 80, 123), (193, 125, 17)]


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(WHITE * (w * h))

    def rect(self, x0, y0, x1, y1, color):
        x0, x1 = max(0, int(x0)), min(self.w, int(x1))
        y0, y1 = max(0, int(y0)), min(self.h, int(y1))
        row = bytes(color) * max(0, x1 - x0)
        for y in range(y0, y1):
            o = (y * self.w + x0) * 3
            self.px[o:o + len(row)] = row

    def text(self, x, y, s, color=BLACK):
        for ch in s.upper():
            glyph = FONT.get(ch, FONT["?"])
            for r, bits in enumerate(glyph):
                for c in range(5):
                    if bits & (0x10 >> c):
                        self.rect(x + c * SCALE, y + r * SCALE, x + (c + 1) * SCALE,
                                  y + (r + 1) * SCALE, color)
            x += CHAR_W

    def png(self, path):
        raw = b"".join(b"\0" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)))
            f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
            f.write(chunk(b"IEND", b""))


def first_table(text):
    """(title, header cells, rows of cells) of the first markdown table."""
    title = next((l.lstrip("# ").strip() for l in text.splitlines() if l.startswith("#")), "")
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                continue
            rows.append(cells)
        elif rows:
            break
    return title, (rows[0] if rows else []), rows[1:]


def number(cell):
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", cell.replace(",", ""))
    return float(m.group(1)) if m else None


def column(header, key):
    if isinstance(key, int):
        return key
    return header.index(key) if key in header else None


def fmt(v):
    if v >= 100000:
        return "%.0fK" % (v / 1000)
    if v >= 100:
        return "%.0f" % v
    return ("%.2f" % v).rstrip("0").rstrip(".")


def chart(md_path, png_path):
    with open(md_path, encoding="utf-8") as f:
        title, header, rows = first_table(f.read())
    if not header or not rows:
        return "no table"
    name = os.path.splitext(os.path.basename(md_path))[0]
    spec = CHARTS.get(name)
    if spec is None:
        numeric = [i for i in range(1, len(header)) if all(number(r[i]) is not None
                                                           for r in rows if i < len(r))]
        if not numeric:
            return "no numeric column"
        spec = {"label": [0], "series": [header[numeric[0]]]}
    series = [column(header, k) for k in spec["series"]]
    labels = [column(header, k) for k in spec["label"]]
    if None in series or None in labels:
        return "columns %s not in the table" % (spec["series"] + spec["label"])
    data = []
    for r in rows:
        vals = [number(r[i]) if i < len(r) else None for i in series]
        if all(v is None for v in vals):
            continue
        parts = [r[i] for i in labels if i < len(r)]
        if spec.get("cut"):
            parts = [p.split(spec["cut"])[0] for p in parts]
        data.append((" ".join(parts)[:58], vals))
    if not data:
        return "no values"
    log = spec.get("log", False)
    top = max(v for _, vs in data for v in vs if v is not None)
    if spec.get("ref"):
        top = max(top, spec["ref"])
    top = top or 1.0

    def length(v, width):
        if v is None or v <= 0:
            return 0
        if log:
            import math
            lo = 1.0
            return width * max(0.0, math.log10(max(v, lo)) / math.log10(max(top, 10.0)))
        return width * v / top

    label_w = max(len(l) for l, _ in data) * CHAR_W + 20
    bar_h = CHAR_H + 4
    group_h = bar_h * len(series) + 14
    plot_w = 700
    width = 20 + label_w + plot_w + 110
    legend_h = (CHAR_H + 8) * len(series)
    height = 20 + CHAR_H * 2 + 20 + legend_h + group_h * len(data) + 40
    cv = Canvas(width, height)
    cv.text(20, 16, title[:(width - 40) // CHAR_W])
    unit = spec.get("unit", "")
    cv.text(20, 16 + CHAR_H + 6, (unit + (" (log scale)" if log else ""))[:80], GREY)
    y = 16 + 2 * CHAR_H + 20
    for k, key in enumerate(spec["series"]):
        cv.rect(20, y, 20 + CHAR_H, y + CHAR_H, COLORS[k % len(COLORS)])
        cv.text(20 + CHAR_H + 10, y + 2, str(key))
        y += CHAR_H + 8
    x0 = 20 + label_w
    y0 = y + 10
    if spec.get("ref"):
        rx = x0 + length(spec["ref"], plot_w)
        cv.rect(rx, y0 - 6, rx + 2, y0 + group_h * len(data), GREY)
    for g, (label, vals) in enumerate(data):
        gy = y0 + g * group_h
        cv.rect(x0 - 8, gy + group_h - 7, x0 + plot_w, gy + group_h - 6, LIGHT)
        cv.text(20, gy + (group_h - 14 - CHAR_H) // 2, label)
        for k, v in enumerate(vals):
            by = gy + k * bar_h
            w = length(v, plot_w)
            cv.rect(x0, by, x0 + w, by + bar_h - 4, COLORS[k % len(COLORS)])
            cv.text(x0 + w + 6, by + 1, fmt(v) if v is not None else "-", BLACK)
    cv.rect(x0 - 1, y0 - 6, x0 + 1, y0 + group_h * len(data), BLACK)
    cv.png(png_path)
    return None


def main(paths):
    status = 0
    for md in paths:
        png = os.path.splitext(md)[0] + ".png"
        try:
            err = chart(md, png)
        except OSError as e:
            err = str(e)
        if err:
            print("chart: %s: %s" % (md, err))
            status = 1
        else:
            print("chart: %s" % png)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
