#!/usr/bin/env python3
"""Segment-cleaning benchmark (bench/gc): throughput over time and write amplification of the
overwrite workload of tests/integration/test_gc (f2churn.py) at several fill levels.

For each fill level (and repetition) a fresh image is made with mkfs.f2fs and mounted
read-write; files of a seeded size mix fill it to the level (not timed), then random partial
overwrites and file replacements write FACTOR x the user capacity (timed, up to the end of the
unmount, whose checkpoint writes what is still dirty).  The "empty" baseline is the same
workload of the 90% level (the same live bytes, the same overwrites) on a device 8 times larger,
which stays nearly empty (GC never needed).  The mount's page cache is 16 MiB, so that the
overwrites reach the device rather than being absorbed in memory.  Write amplification is the main
area's allocated blocks per block the workload wrote (seg.alloc.* from `f2fuse stat`, read
just before the unmount, plus the blocks the unmount's checkpoint writes, from the device
counters), and GC's own view (gc.write_amplification_x100).

Output: a Markdown table (stdout and bench/results/gc.md) with medians and the ratio of each
level's throughput to the empty baseline's in the same invocation, and a PNG plot
(bench/results/gc.png): throughput over time (1 s windows, the median run of each level) and
write amplification per level.
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.dont_write_bytecode = True
import f2test as T      # noqa: E402
import f2churn as C     # noqa: E402
import f2powercut as P  # noqa: E402

MiB = 1 << 20
EMPTY_SCALE = 8


def alloc_blocks(st):
    return sum(v for k, v in st.items() if k.startswith("seg.alloc."))


def one_run(binary, workdir, img_mb, fill, factor, seed, opts, churn_cap=None):
    """churn_cap: the capacity the workload's sizes refer to (default: this image's)."""
    img, mnt = os.path.join(workdir, "gc.img"), os.path.join(workdir, "mnt")
    T.mkfs(img, img_mb)
    m = T.Mount(binary, img, mnt, opts)
    m.__enter__()
    try:
        st = os.statvfs(mnt)
        cap = churn_cap or st.f_blocks * st.f_frsize
        w = C.Churn(mnt, random.Random(seed), cap, fill)
        w.fill_up()
        s0 = P.read_stat(mnt)
        w0 = w.written
        t0 = time.monotonic()
        timeline = [(0.0, 0)]
        goal = w.written + int(factor * cap)
        while w.written < goal:
            w.step()
            timeline.append((time.monotonic() - t0, w.written - w0))
        s1 = P.read_stat(mnt)
    except BaseException:
        m.__exit__(None, None, None)
        raise
    t_unmount = time.monotonic()
    m.__exit__(None, None, None)
    secs = time.monotonic() - t0
    timeline.append((secs, w.written - w0))
    written = w.written - w0
    # what the unmount's checkpoint writes is not in s1: about the pages dirty then
    wb_unmount = s1.get("cache.dirty_pages", 0)
    alloc = alloc_blocks(s1) - alloc_blocks(s0) + wb_unmount
    wa = alloc * 4096 / written if written else 0
    clean, rc, out = T.fsck(img)
    os.unlink(img)
    return dict(fill=fill, secs=secs, written=written, mibps=written / MiB / secs,
                wa=wa, gc_wa=s1.get("gc.write_amplification_x100", 100) / 100.0,
                gc_runs=s1.get("gc.runs", 0) - s0.get("gc.runs", 0),
                segs=s1.get("gc.segments_cleaned", 0) - s0.get("gc.segments_cleaned", 0),
                moved=s1.get("gc.blocks_moved", 0) - s0.get("gc.blocks_moved", 0),
                enospc=s1.get("gc.enospc", 0), fsck_clean=clean, capacity=cap,
                unmount_secs=time.monotonic() - t_unmount,
                timeline=timeline)


def rate_series(timeline, window=1.0):
    """(t, MiB/s) in windows of `window` seconds from cumulative (t, bytes) points."""
    out = []
    if not timeline:
        return out
    end = timeline[-1][0]
    i = 0
    t = 0.0
    last_bytes = 0
    while t < end:
        while i < len(timeline) and timeline[i][0] <= t + window:
            i += 1
        b = timeline[i - 1][1] if i else 0
        out.append((t + window, (b - last_bytes) / MiB / window))
        last_bytes = b
        t += window
    return out


def plot(results, levels, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("gc bench: matplotlib is missing (apt-get install python3-matplotlib); no plot",
              file=sys.stderr)
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    for label, fill in levels:
        runs = results[label]
        med = sorted(runs, key=lambda r: r["mibps"])[len(runs) // 2]
        xs, ys = zip(*rate_series(med["timeline"])) if med["timeline"] else ((), ())
        ax1.plot(xs, ys, label="%s (median %.0f MiB/s)" % (label, med["mibps"]))
    ax1.set_xlabel("seconds")
    ax1.set_ylabel("MiB/s written (1 s windows)")
    ax1.set_title("f2fuse: random overwrite throughput over time")
    ax1.legend()
    ax1.grid(alpha=0.3)
    names = [label for label, _ in levels]
    was = [statistics.median(r["wa"] for r in results[label]) for label, _ in levels]
    ax2.bar(names, was, color="tab:orange")
    ax2.set_ylabel("write amplification")
    ax2.set_title("blocks written per block asked")
    ax2.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--img-mb", type=int, default=int(os.environ.get("GC_BENCH_IMG_MIB", 256)))
    ap.add_argument("--factor", type=float, default=float(os.environ.get("GC_BENCH_FACTOR", 5)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("GC_BENCH_REPS", 3)))
    # a small page cache: the overwrites reach the device instead of being absorbed in memory
    ap.add_argument("--opts", default=os.environ.get("GC_BENCH_OPTS", "rw,cache_size=16M"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gc.md"))
    ap.add_argument("--png", default=os.path.join(ROOT, "bench", "results", "gc.png"))
    ap.add_argument("--workdir", default=os.environ.get("GC_BENCH_DIR",
                                                         os.path.join(ROOT, "build", "bench-gc")))
    a = ap.parse_args()
    binary = os.path.join(ROOT, "build", "f2fuse")
    # "empty": the 90% workload (same live bytes, same overwrite volume) on a device
    # EMPTY_SCALE times larger, which stays nearly empty: GC is never needed there.
    # "90% nossr": the 90% level without slack space reuse (GC alone), the baseline of SSR.
    levels = [("empty", 0.0), ("50%", 0.50), ("80%", 0.80), ("90%", 0.90), ("90% nossr", 0.90)]
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    results = {label: [] for label, _ in levels}
    seed = int(os.environ.get("F2FUSE_SEED", "20261130"))
    started = time.time()
    cap = None
    for rep in range(a.reps):
        for label, fill in levels[1:] + levels[:1]:  # interleaved: noise spreads over all
            wd = tempfile.mkdtemp(prefix="run-", dir=a.workdir)
            opts = a.opts + (",nossr" if "nossr" in label else "")
            try:
                if fill:
                    r = one_run(binary, wd, a.img_mb, fill, a.factor, seed + rep, opts)
                    cap = r["capacity"]
                else:
                    r = one_run(binary, wd, a.img_mb * EMPTY_SCALE, 0.90, a.factor, seed + rep,
                                a.opts, churn_cap=cap)
                    r["fill"] = 0.0
            finally:
                shutil.rmtree(wd, ignore_errors=True)
            results[label].append(r)
            print("rep %d %-11s %6.1f MiB in %6.1fs = %6.1f MiB/s  WA %.2f (gc %.2f)  gc runs %d "
                  "segments %d moved %d  fsck %s" %
                  (rep, label, r["written"] / MiB, r["secs"], r["mibps"], r["wa"], r["gc_wa"],
                   r["gc_runs"], r["segs"], r["moved"], "clean" if r["fsck_clean"] else "NOT CLEAN"),
                  flush=True)
    base = statistics.median(r["mibps"] for r in results["empty"])
    lines = []
    lines.append("# bench/gc: random overwrites near full\n")
    lines.append("%s; image %d MiB (user capacity %.0f MiB), %gx capacity overwritten per run, "
                 "%d repetition(s) interleaved, mount options `%s`; medians; ratio = throughput / "
                 "the empty device's in this invocation (the 90%% workload on a %d MiB image). "
                 "Machine shared with other jobs.\n" %
                 (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), a.img_mb,
                  cap / MiB, a.factor, a.reps, a.opts, a.img_mb * EMPTY_SCALE))
    lines.append("| fill | MiB/s | ratio | write amplification | GC WA counter | GC runs | "
                 "segments cleaned | blocks moved | fsck |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for label, fill in levels:
        rs = results[label]
        med = statistics.median(r["mibps"] for r in rs)
        lines.append("| %s | %.1f | %.2f | %.2f | %.2f | %d | %d | %d | %s |" % (
            label, med, med / base if base else 0, statistics.median(r["wa"] for r in rs),
            statistics.median(r["gc_wa"] for r in rs),
            statistics.median(r["gc_runs"] for r in rs),
            statistics.median(r["segs"] for r in rs), statistics.median(r["moved"] for r in rs),
            "clean" if all(r["fsck_clean"] for r in rs) else "NOT CLEAN"))
    r90 = statistics.median(r["mibps"] for r in results["90%"]) / base if base else 0
    lines.append("\nTarget: throughput at 90%% fill >= 0.30 x empty: %.2f -> %s" %
                 (r90, "met" if r90 >= 0.30 else "MISSED"))
    if plot(results, levels, a.png):
        lines.append("\nPlot: %s" % os.path.relpath(a.png, ROOT))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(a.out, "w") as f:
        f.write(text)
    return 0 if all(r["fsck_clean"] for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
