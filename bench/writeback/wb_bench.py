#!/usr/bin/env python3
"""The dirty_background_time patch's experiment through a real f2fuse mount (driven by
bench/writeback/run.sh).

For every record size, interleaved: a fresh image, mounted with the device limited to
WB_BENCH_DEV_BW (25 MiB/s), then wb_producer writes WB_BENCH_MIB (100) MiB at WB_BENCH_RATE
(12.5 MB/s, ~100 Mbit/s) and fsyncs — once with dirty_background_time=0 and once with it
tuned (WB_BENCH_TUNED ms).  Both runs share every other option: a cache and dirty limits
large enough that the byte thresholds never start writeback during the transfer (the patch's
server: plenty of memory), and checkpoint_interval=60 so the periodic checkpoint (f2fuse's
analogue of the kernel's 30 s expiry) stays out of a ~10 s run.  `f2fuse stat` is sampled
every 100 ms: dirty bytes and the data written back, for the plot.

Ideal = total / max(T_net, T_disk): what perfect overlap of the transfer and the disk allows.

WB_BENCH_DEVICE=nbd runs the same experiment over a real network device: the image is served
by nbdkit's file plugin on a unix socket behind its rate filter at WB_BENCH_DEV_BW (the whole
server: reads and writes; burstiness WB_BENCH_BURST seconds, default 0.5), mounted by URI and
without dev_bw, so the bandwidth f2fuse measures and tunes for is the server's.
"""
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import f2test  # noqa: E402  (fsck.f2fs and its clean rule)
import f2net  # noqa: E402  (nbdkit as a child process)
F2FUSE = os.path.join(ROOT, "build", "f2fuse")
PRODUCER = os.path.join(ROOT, "build", "bench", "writeback", "wb_producer")
MiB = 1 << 20


def env(name, default):
    return os.environ.get("WB_BENCH_" + name, default)


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if s[-1:].upper() in "KMG" else s) * mult)


TOTAL = int(env("MIB", "100")) * MiB
RATE = float(env("RATE", "12.5e6"))
DEV_BW = env("DEV_BW", "25M")
TUNED = int(env("TUNED", "100"))
QUICK = os.environ.get("QUICK", "0") == "1"
SIZES = [int(x) for x in env("SIZES", "10485760,1048576,524288,262144,131072,65536,32768,16384,8192,4096" if not QUICK else "1048576,65536").split(",")]
REPS = int(env("REPS", "1"))
RANDOM = env("RANDOM", "0") == "1"
PLOT_SIZE = int(env("PLOT_SIZE", "1048576"))
DEVICE = env("DEVICE", "file")
BURST = env("BURST", "0.5")
COMMON = ("rw,cache_size=512M,dirty_background_ratio=50,dirty_ratio=80,checkpoint_interval=60" +
          (",dev_bw=%s" % DEV_BW if DEVICE == "file" else ""))
WORK = env("DIR", os.path.join(ROOT, "build", "bench-writeback"))
OUT = os.path.join(ROOT, "bench", "results")


def stat(mnt):
    p = subprocess.run([F2FUSE, "stat", mnt], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       timeout=10)
    out = {}
    for line in p.stdout.decode().splitlines():
        k, _, v = line.partition(" ")
        if v.isdigit():
            out[k] = int(v)
    return out


def is_mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def one_run(record, dbt, mode):
    os.makedirs(WORK, exist_ok=True)
    d = tempfile.mkdtemp(prefix="wb-", dir=WORK)
    img, mnt = os.path.join(d, "img"), os.path.join(d, "mnt")
    os.mkdir(mnt)
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    subprocess.run(["mkfs.f2fs", "-q", "-f", img], check=True, stdout=subprocess.DEVNULL)
    opts = COMMON + ",dirty_background_time=%d" % dbt
    server, source = None, img
    if DEVICE == "nbd":  # rate= is in bits per second
        server = f2net.Nbdkit(d, "file", [img, "rate=%d" % (parse_size(DEV_BW) * 8),
                                          "burstiness=" + BURST], filters=["rate"]).start()
        source = server.uri()
    daemon = subprocess.Popen([F2FUSE, "-f", "-o", opts, source, mnt], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    samples, stop = [], threading.Event()
    try:
        for _ in range(200):
            if is_mounted(mnt):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("mount did not come up: %s" % daemon.stderr.read().decode())

        def sampler():
            t0 = time.monotonic()
            while not stop.is_set():
                s = stat(mnt)
                samples.append((time.monotonic() - t0, s.get("wb.dirty_bytes", 0),
                                s.get("fs.data_pages_written", 0) * 4096,
                                s.get("wb.bw_estimate", 0)))
                stop.wait(0.1)
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        argv = [PRODUCER, os.path.join(mnt, "data"), str(TOTAL), str(record), str(RATE)]
        if mode == "random":
            argv.append("random")
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        stop.set()
        th.join()
        if p.returncode != 0:
            raise RuntimeError("producer failed: %s" % p.stderr.decode())
        res = dict(kv.split("=") for kv in p.stdout.decode().split())
        res = {k: float(v) for k, v in res.items()}
        st = stat(mnt)
        res["bw_estimate"] = st.get("wb.bw_estimate", 0)
        res["started_bg_time"] = st.get("wb.started.bg_time", 0)
        res["started_background"] = st.get("wb.started.background", 0)
        res["wb_pages"] = st.get("wb.pages_written", 0)
    finally:
        stop.set()
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", mnt], timeout=60)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        if server:
            server.stop()
    res["fsck_ok"] = f2test.fsck(img)[0]
    subprocess.run(["rm", "-rf", d])
    return res, samples


def main():
    os.makedirs(OUT, exist_ok=True)
    dev_bw = parse_size(DEV_BW)
    t_net, t_disk = TOTAL / RATE, TOTAL / dev_bw
    ideal = TOTAL / max(t_net, t_disk)
    mode = "random" if RANDOM else "seq"
    rows, series = [], {}
    where = "nbdkit rate filter" if DEVICE == "nbd" else "dev_bw"
    print("writeback bench: %d MiB at %.1f MB/s, device %s/s (%s), tuned dirty_background_time=%d"
          " ms, %d rep(s), %s writes (machine shared: noisy)" % (TOTAL // MiB, RATE / 1e6, DEV_BW,
                                                                 where, TUNED, REPS, mode), flush=True)
    for rec in SIZES:
        thr = {0: [], TUNED: []}
        extra = {}
        for rep in range(REPS):
            for dbt in (0, TUNED):  # interleaved: same conditions for both
                res, samples = one_run(rec, dbt, mode)
                if not res["fsck_ok"]:
                    print("fsck NOT clean after record %d dbt %d" % (rec, dbt), flush=True)
                thr[dbt].append(res["throughput"])
                extra[dbt] = res
                if rec == PLOT_SIZE and rep == 0:
                    series[dbt] = samples
                print("  rec %8d dbt %4d: %.2f MB/s (fsync %.2f s, written %.2f s, late %.2f s,"
                      " bw est %.1f MB/s, bg_time starts %d)" % (
                          rec, dbt, res["throughput"] / 1e6, res["fsync"], res["written"],
                          res["max_late"], res["bw_estimate"] / 1e6, res["started_bg_time"]),
                      flush=True)
        b, t = statistics.median(thr[0]), statistics.median(thr[TUNED])
        rows.append((rec, b, t, t / b, t / ideal, extra[0]["fsck_ok"] and extra[TUNED]["fsck_ok"]))
    mb, mt = statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows)
    lines = ["# bench/writeback (bandwidth × time: dirty_background_time)", "",
             "%d MiB written at %.1f MB/s in records, then fsync; device limited to %s/s (%s); "
             "T_net %.2f s, T_disk %.2f s, ideal %.2f MB/s. Options: `%s`. %s writes, %d rep(s) "
             "per cell (median), baseline and tuned interleaved. Machine shared with other jobs."
             % (TOTAL // MiB, RATE / 1e6, DEV_BW, where if DEVICE == "file" else
                "an NBD export behind nbdkit's rate filter, burstiness %s s" % BURST,
                t_net, t_disk, ideal / 1e6, COMMON, mode, REPS),
             "",
             "| record size | dbt=0 MB/s | dbt=%d ms MB/s | ratio | tuned / ideal | fsck |" % TUNED,
             "|---:|---:|---:|---:|---:|---|"]
    for rec, b, t, ratio, frac, ok in rows:
        lines.append("| %d | %.2f | %.2f | %.2fx | %.0f%% | %s |" % (rec, b / 1e6, t / 1e6, ratio,
                                                                    frac * 100,
                                                                    "clean" if ok else "NOT clean"))
    lines.append("| **median** | **%.2f** | **%.2f** | **%.2fx** | **%.0f%%** | |" % (
        mb / 1e6, mt / 1e6, mt / mb, mt / ideal * 100))
    lines += ["", "Targets: ratio >= 1.30x: %s; tuned >= 90%% of ideal: %s." % (
        "met" if mt / mb >= 1.3 else "MISSED", "met" if mt / ideal >= 0.9 else "MISSED")]
    text = "\n".join(lines) + "\n"
    suffix = ("_random" if RANDOM else "") + ("_nbd" if DEVICE == "nbd" else "")
    with open(os.path.join(OUT, "writeback%s.md" % suffix), "w") as f:
        f.write(text)
    print(text)
    if series:
        csv_path = os.path.join(OUT, "writeback%s_series.csv" % suffix)
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["dbt_ms", "t_s", "dirty_bytes", "data_written_bytes", "bw_estimate"])
            for dbt, s in series.items():
                for row in s:
                    w.writerow((dbt,) + row)
        png = os.path.join(OUT, "writeback%s.png" % suffix)
        p = subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "plot.py"),
                            csv_path, png, "record %d B, tuned %d ms" % (PLOT_SIZE, TUNED)])
        print("plot: %s" % (png if p.returncode == 0 else "not made (python3-matplotlib missing?)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
