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

Near full (95 %, 99 %) a write may get ENOSPC legitimately (statfs f_bavail keeps a metadata
reserve out of what data may take): ENOSPC is counted (fill and overwrite phase apart) and the
workload goes on; a run that makes no progress for STALL_SECS, or whose daemon fails, is
reported as such instead of stopping the benchmark.  GC_BENCH_FILLS picks the levels and
GC_BENCH_BIN one or more binaries (label=path), run interleaved, with the ratio of each to the
first at the same level.
"""
import argparse
import errno
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
STALL_SECS = 30.0  # ENOSPC only, no byte written for this long: the run has stalled
DEFAULT_FILLS = "empty,50,80,90,90nossr"


def parse_levels(spec):
    """GC_BENCH_FILLS: comma-separated "empty", "<percent>" or "<percent>nossr" -> [(label, fill)]."""
    levels = []
    for item in spec.split(","):
        item = item.replace("%", "").replace(" ", "").strip()
        if not item:
            continue
        if item == "empty":
            levels.append(("empty", 0.0))
            continue
        nossr = item.endswith("nossr")
        try:
            pct = float(item[:-len("nossr")] if nossr else item)
        except ValueError:
            raise SystemExit("gc bench: bad fill level %r in GC_BENCH_FILLS" % item)
        if not 0 < pct < 100:
            raise SystemExit("gc bench: fill level %r is not in (0, 100)" % item)
        levels.append(("%g%%%s" % (pct, " nossr" if nossr else ""), pct / 100))
    if not levels:
        raise SystemExit("gc bench: GC_BENCH_FILLS names no level")
    return levels


def parse_bins(spec):
    """GC_BENCH_BIN: comma-separated "path" or "label=path" -> [(label, absolute path)]."""
    bins = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        label, _, path = item.rpartition("=")
        path = os.path.join(ROOT, path) if not os.path.isabs(path) else path
        if not os.access(path, os.X_OK):
            raise SystemExit("gc bench: %s is not an executable" % path)
        bins.append((label or "bin%d" % (len(bins) + 1), path))
    if not bins:
        raise SystemExit("gc bench: GC_BENCH_BIN names no binary")
    return bins


def alloc_blocks(st):
    return sum(v for k, v in st.items() if k.startswith("seg.alloc."))


def fill_tolerant(w, counts):
    """The workload's fill; on ENOSPC the fill stops where it got (after a sync and two more
    tries, in case space was only waiting for a checkpoint)."""
    for _ in range(3):
        try:
            w.fill_up()
            return
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            counts["fill_enospc"] += 1
            os.sync()


def churn_tolerant(w, goal, counts, max_secs):
    """Steps until goal bytes are written; ENOSPC is counted and the workload goes on.  Returns
    None, or why the run ended early ("stalled", "cut at N s", an errno name)."""
    t0 = last = time.monotonic()
    timeline = [(0.0, 0)]
    w0 = w.written
    while w.written < goal:
        now = time.monotonic()
        if max_secs and now - t0 > max_secs:
            return "cut at %.0f s" % max_secs, timeline
        before = w.written
        try:
            w.step()
        except OSError as e:
            if e.errno != errno.ENOSPC:
                return errno.errorcode.get(e.errno, str(e.errno)), timeline
            counts["enospc"] += 1
            if w.written == before and time.monotonic() - last > STALL_SECS:
                return "stalled", timeline
            continue
        if w.written != before:
            last = time.monotonic()
        timeline.append((time.monotonic() - t0, w.written - w0))
    return None, timeline


def one_run(binary, workdir, img_mb, fill, factor, seed, opts, churn_cap=None, max_secs=0):
    """churn_cap: the capacity the workload's sizes refer to (default: this image's)."""
    img, mnt = os.path.join(workdir, "gc.img"), os.path.join(workdir, "mnt")
    T.mkfs(img, img_mb)
    chk = T.Checker(limit=5)
    m = T.Mount(binary, img, mnt, opts, checker=chk)
    m.__enter__()
    counts = {"fill_enospc": 0, "enospc": 0}
    try:
        st = os.statvfs(mnt)
        cap = churn_cap or st.f_blocks * st.f_frsize
        avail0 = st.f_bavail / st.f_blocks if st.f_blocks else 0
        w = C.Churn(mnt, random.Random(seed), cap, fill)
        fill_tolerant(w, counts)
        st = os.statvfs(mnt)
        reached = (st.f_blocks - st.f_bfree) / st.f_blocks if st.f_blocks else 0
        s0 = P.read_stat(mnt)
        w0 = w.written
        t0 = time.monotonic()
        goal = w.written + int(factor * cap)
        early, timeline = churn_tolerant(w, goal, counts, max_secs)
        try:
            s1 = P.read_stat(mnt)
        except OSError:
            s1 = dict(s0)
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
                timeline=timeline, fill_enospc=counts["fill_enospc"],
                write_enospc=counts["enospc"], reached=reached, avail0=avail0,
                early=early, daemon=len(chk.failures))


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


def plot(results, keys, path):
    """keys: [(name, (binary label, level label))] in table order."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("gc bench: matplotlib is missing (apt-get install python3-matplotlib); no plot",
              file=sys.stderr)
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    names, was = [], []
    for name, key in keys:
        runs = results[key]
        if not runs:
            continue
        med = sorted(runs, key=lambda r: r["mibps"])[len(runs) // 2]
        xs, ys = zip(*rate_series(med["timeline"])) if med["timeline"] else ((), ())
        ax1.plot(xs, ys, label="%s (median %.0f MiB/s)" % (name, med["mibps"]))
        names.append(name)
        was.append(statistics.median(r["wa"] for r in runs))
    ax1.set_xlabel("seconds")
    ax1.set_ylabel("MiB/s written (1 s windows)")
    ax1.set_title("f2fuse: random overwrite throughput over time")
    ax1.legend()
    ax1.grid(alpha=0.3)
    ax2.bar(names, was, color="tab:orange")
    ax2.set_ylabel("write amplification")
    ax2.set_title("blocks written per block asked")
    ax2.grid(axis="y", alpha=0.3)
    if len(names) > 5:
        ax2.tick_params(axis="x", labelrotation=60)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def med(rs, field):
    return statistics.median(r[field] for r in rs) if rs else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--img-mb", type=int, default=int(os.environ.get("GC_BENCH_IMG_MIB", 256)))
    ap.add_argument("--factor", type=float, default=float(os.environ.get("GC_BENCH_FACTOR", 5)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("GC_BENCH_REPS", 3)))
    # a small page cache: the overwrites reach the device instead of being absorbed in memory
    ap.add_argument("--opts", default=os.environ.get("GC_BENCH_OPTS", "rw,cache_size=16M"))
    ap.add_argument("--fills", default=os.environ.get("GC_BENCH_FILLS", DEFAULT_FILLS),
                    help="levels: comma-separated empty, <percent>, <percent>nossr")
    ap.add_argument("--bin", default=os.environ.get("GC_BENCH_BIN", "build/f2fuse"),
                    help="binaries: comma-separated path or label=path, interleaved")
    # the timed phase of one run ends after this many seconds (0: when FACTOR is written)
    ap.add_argument("--max-secs", type=float,
                    default=float(os.environ.get("GC_BENCH_MAX_SECS", 0)))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gc.md"))
    ap.add_argument("--png", default=os.path.join(ROOT, "bench", "results", "gc.png"))
    ap.add_argument("--workdir", default=os.environ.get("GC_BENCH_DIR",
                                                         os.path.join(ROOT, "build", "bench-gc")))
    a = ap.parse_args()
    bins = parse_bins(a.bin)
    # "empty": the 90% workload (same live bytes, same overwrite volume) on a device
    # EMPTY_SCALE times larger, which stays nearly empty: GC is never needed there.
    # "90% nossr": the 90% level without slack space reuse (GC alone), the baseline of SSR.
    levels = parse_levels(a.fills)
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    results = {(b, label): [] for b, _ in bins for label, _ in levels}
    failed = {key: [] for key in results}
    seed = int(os.environ.get("F2FUSE_SEED", "20261130"))
    started = time.time()
    cap = None
    # the empty baseline last: it takes the capacity of the levels' image
    order = [lv for lv in levels if lv[1]] + [lv for lv in levels if not lv[1]]
    for rep in range(a.reps):
        for label, fill in order:  # interleaved: noise spreads over all
            for bname, binary in bins:
                wd = tempfile.mkdtemp(prefix="run-", dir=a.workdir)
                opts = a.opts + (",nossr" if "nossr" in label else "")
                tag = ("%s " % bname if len(bins) > 1 else "") + label
                try:
                    if fill:
                        r = one_run(binary, wd, a.img_mb, fill, a.factor, seed + rep, opts,
                                    max_secs=a.max_secs)
                        cap = r["capacity"]
                    else:
                        r = one_run(binary, wd, a.img_mb * EMPTY_SCALE, 0.90, a.factor,
                                    seed + rep, a.opts, churn_cap=cap, max_secs=a.max_secs)
                        r["fill"] = 0.0
                except Exception as e:  # a failed run is a result, not the end of the bench
                    failed[(bname, label)].append("%s: %s" % (type(e).__name__, e))
                    print("rep %d %-11s FAILED: %s: %s" % (rep, tag, type(e).__name__, e),
                          flush=True)
                    continue
                finally:
                    shutil.rmtree(wd, ignore_errors=True)
                results[(bname, label)].append(r)
                print("rep %d %-11s %6.1f MiB in %6.1fs = %6.1f MiB/s  WA %.2f (gc %.2f)  gc runs "
                      "%d segments %d moved %d  fsck %s  fill %.1f%%  ENOSPC %d/%d%s%s" %
                      (rep, tag, r["written"] / MiB, r["secs"], r["mibps"], r["wa"], r["gc_wa"],
                       r["gc_runs"], r["segs"], r["moved"],
                       "clean" if r["fsck_clean"] else "NOT CLEAN", 100 * r["reached"],
                       r["fill_enospc"], r["write_enospc"],
                       "  ended early: %s" % r["early"] if r["early"] else "",
                       "  daemon problems %d" % r["daemon"] if r["daemon"] else ""),
                      flush=True)
    many = len(bins) > 1
    first = bins[0][0]
    lines = []
    lines.append("# bench/gc: random overwrites near full\n")
    lines.append("%s; image %d MiB (user capacity %s MiB), %gx capacity overwritten per run, "
                 "%d repetition(s) interleaved, mount options `%s`; medians; ratio = throughput / "
                 "the empty device's in this invocation (the 90%% workload on a %d MiB image). "
                 "Machine shared with other jobs.\n" %
                 (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), a.img_mb,
                  "%.0f" % (cap / MiB) if cap else "?", a.factor, a.reps, a.opts,
                  a.img_mb * EMPTY_SCALE))
    if many:
        lines.append("Binaries: %s; `vs %s` = throughput / %s's at the same level.\n" %
                     (", ".join("%s `%s`" % (b, os.path.relpath(p, ROOT)) for b, p in bins),
                      first, first))
    lines.append("ENOSPC = errors the workload got in the fill / overwrite phase (counted, the "
                 "workload goes on); fill = used blocks / user blocks (statfs) after the fill.\n")
    lines.append(("| binary " if many else "") + "| fill | MiB/s | ratio | " +
                 ("vs %s | " % first if many else "") +
                 "write amplification | GC WA counter | GC runs | segments cleaned | "
                 "blocks moved | fsck | fill reached | ENOSPC fill/overwrite | runs |")
    lines.append("|---" * (12 + 2 * many) + "|")
    for label, fill in levels:
        for bname, _ in bins:
            rs = results[(bname, label)]
            base = med(results.get((bname, "empty"), []), "mibps")
            m = med(rs, "mibps")
            ref = med(results[(first, label)], "mibps")
            notes = sorted(set(r["early"] for r in rs if r["early"]))
            runs = "%d" % len(rs) + ("" if not failed[(bname, label)] else
                                     ", %d failed" % len(failed[(bname, label)]))
            if notes:
                runs += " (ended early: %s)" % ", ".join(notes)
            if any(r["daemon"] for r in rs):
                runs += " (daemon problems)"
            row = ("| %s " % bname if many else "") + "| %s | %s | %s | " % (
                label, "%.1f" % m if rs else "-",
                "%.2f" % (m / base) if base and rs else "-")
            if many:
                row += "%s | " % ("%.2f" % (m / ref) if ref and rs else "-")
            row += "%.2f | %.2f | %d | %d | %d | %s | %.1f%% | %s/%s | %s |" % (
                med(rs, "wa"), med(rs, "gc_wa"), med(rs, "gc_runs"), med(rs, "segs"),
                med(rs, "moved"),
                "clean" if rs and all(r["fsck_clean"] for r in rs) else "NOT CLEAN",
                100 * med(rs, "reached"), "%g" % med(rs, "fill_enospc"),
                "%g" % med(rs, "write_enospc"), runs)
            lines.append(row)
    for bname, _ in bins:
        base = med(results.get((bname, "empty"), []), "mibps")
        if base and results.get((bname, "90%")):
            r90 = med(results[(bname, "90%")], "mibps") / base
            lines.append("\nTarget%s: throughput at 90%% fill >= 0.30 x empty: %.2f -> %s" %
                         (" (%s)" % bname if many else "", r90, "met" if r90 >= 0.30 else "MISSED"))
    for key, errs in failed.items():
        for e in errs:
            lines.append("\nFailed run (%s): %s" % (" ".join(key), e))
    keys = [(("%s " % b if many else "") + label, (b, label)) for label, _ in levels
            for b, _ in bins]
    if plot(results, keys, a.png):
        lines.append("\nPlot: %s" % os.path.relpath(a.png, ROOT))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(a.out, "w") as f:
        f.write(text)
    ok = all(r["fsck_clean"] for rs in results.values() for r in rs)
    return 0 if ok and not any(failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
