#!/usr/bin/env python3
"""bench/nbd: f2fuse over NBD against f2fuse on the image file and against fio's own NBD engine
(the ceiling: a client with nothing between fio and the socket), driven by bench/nbd/run.sh.

Workloads (fio, io_uring, O_DIRECT, one job at queue depth NBD_BENCH_QD, NBD_BENCH_SECS each):
4 KiB random read, 4 KiB random write, 128 KiB sequential read, 128 KiB sequential write.
Inside f2fuse they run on a file of NBD_BENCH_FILE_MIB (256) MiB, with cache_size=8M so that
reads reach the device; fio's nbd engine runs them on a raw export of random data of the same
size (it writes to the export, so never on the f2fs one).

Configurations, per added latency (nbdkit's delay filter on reads and writes: 0, 1, 5 ms):
  memfs            bench/fio's in-memory FUSE file system (no device at all): the most any
                   FUSE file system gets here, with the FUSE ring (16 threads per queue, as f2fuse's auto) where enabled
  f2fuse file      f2fuse -o rw IMAGE (io_uring backend, O_DIRECT): no latency row of its own
  f2fuse nbd       the same image served by nbdkit's file plugin on a unix socket
  fio nbd          fio --ioengine=nbd on the raw export served the same way
  forwarder        bench/nbd/nbd_forward on the raw export: a FUSE file system that only
                   forwards each READ/WRITE to libnbd from one poll loop (no thread hand-offs,
                   no locks, no mapping): the floor of FUSE + an NBD client, what any FUSE file
                   system over NBD gets at most on this machine
  f2fuse nbd (baseline)  with NBD_BENCH_BASELINE_BIN: another f2fuse binary (say, a build of
                   the last commit) on the same export, in the same interleaved runs
Repetitions are interleaved (every configuration once, then again), and the table shows
medians with the ratios f2fuse nbd / fio nbd and f2fuse nbd / forwarder.  Target: >= 75 % of
fio nbd on 4 KiB random reads at QD32 without added latency.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import f2net  # noqa: E402
import f2test  # noqa: E402

F2FUSE = os.path.join(ROOT, "build", "f2fuse")
OUT = os.path.join(ROOT, "bench", "results")
MiB = 1 << 20


def env(name, default):
    return os.environ.get("NBD_BENCH_" + name, default)


QUICK = os.environ.get("QUICK", "0") == "1"
SECS = int(env("SECS", "4" if QUICK else "8"))
REPS = int(env("REPS", "1" if QUICK else "3"))
QD = int(env("QD", "32"))
FILE_MIB = int(env("FILE_MIB", "256"))
DELAYS = [int(x) for x in env("DELAYS", "0" if QUICK else "0,1,5").split(",")]
EXTRA_OPTS = env("OPTS", "")
BASELINE_BIN = env("BASELINE_BIN", "")
ROWS = [("randread", "4k randread", "randread", "4k"),
        ("randwrite", "4k randwrite", "randwrite", "4k"),
        ("read128k", "128k read", "read", "128k"),
        ("write128k", "128k write", "write", "128k")]
ROWS = [r for r in ROWS if r[0] in env("ROWS", ",".join(r[0] for r in ROWS)).split(",")]
ONLY = env("CONFIGS", "memfs,f2fuse file,f2fuse nbd,f2fuse nbd (baseline),forwarder,fio nbd"
           ).split(",")
MEMFS = os.path.join(ROOT, "build/bench/fio/memfs")
FORWARD = os.path.join(ROOT, "build/bench/nbd/nbd_forward")


def sh(argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def fio_iops(out):
    out = out.decode()
    j = json.loads(out[out.index("{"):])["jobs"][0]  # the nbd engine says hello first
    side = j["read"] if j["read"]["io_bytes"] else j["write"]
    return side["iops"], side["bw_bytes"]


def fio_common(rw, bs):
    return ["--name=b", "--rw=" + rw, "--bs=" + bs, "--iodepth=%d" % QD, "--time_based",
            "--runtime=%d" % SECS, "--ramp_time=1", "--output-format=json", "--randrepeat=0"]


def pct(a, b):
    """a as a share of b, or a dash where either is missing."""
    return "%.0f%%" % (100 * a / b) if a and b else "—"


def delay_filter(ms):
    if not ms:
        return [], []
    return ["delay"], ["delay-read=%dms" % ms, "delay-write=%dms" % ms]


def wait_mounted(proc, mnt, what):
    """Waits until proc (a daemon in the foreground) has mounted mnt."""
    for _ in range(400):
        if f2test.is_mounted(mnt):
            return
        if proc.poll() is not None:
            raise RuntimeError("%s did not mount: %s" % (what, proc.stderr.read()))
        time.sleep(0.05)
    raise RuntimeError("%s did not mount in time" % what)


class F2fuseMount:
    """f2fuse mounted on source (the file or a URI), the test file laid out already."""

    def __init__(self, d, source, name, binary=F2FUSE):
        self.mnt = os.path.join(d, "mnt-" + name)
        os.makedirs(self.mnt, exist_ok=True)
        opts = "rw,cache_size=8M" + ("," + EXTRA_OPTS if EXTRA_OPTS else "")
        self.proc = subprocess.Popen([binary, "-f", "-o", opts, source, self.mnt],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_mounted(self.proc, self.mnt, "f2fuse on " + source)

    def fio(self, rw, bs):  # both mount kinds
        p = sh(["fio", "--filename=" + os.path.join(self.mnt, "data"), "--ioengine=io_uring",
                "--direct=1", "--size=%dM" % FILE_MIB] + fio_common(rw, bs))
        return fio_iops(p.stdout)

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], timeout=120)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class MemfsMount(F2fuseMount):
    """bench/fio's in-memory FUSE file system: what the FUSE round trip alone allows here
    (with the same transport as f2fuse: /dev/fuse, or the FUSE ring where it is enabled)."""

    def __init__(self, d):
        self.mnt = os.path.join(d, "mnt-memfs")
        os.makedirs(self.mnt, exist_ok=True)
        ring = open("/sys/module/fuse/parameters/enable_uring").read().strip() == "Y"
        self.proc = subprocess.Popen([MEMFS, "-f"] + (["-o", "fuse_ring=16"] if ring else []) +
                                     [self.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_mounted(self.proc, self.mnt, "memfs")
        sh(["dd", "if=/dev/urandom", "of=" + os.path.join(self.mnt, "data"), "bs=1M",
            "count=%d" % FILE_MIB, "status=none"])


class ForwardMount(F2fuseMount):
    """bench/nbd/nbd_forward on uri: the export as one file, /data."""

    def __init__(self, d, uri):
        self.mnt = os.path.join(d, "mnt-forward")
        os.makedirs(self.mnt, exist_ok=True)
        self.proc = subprocess.Popen([FORWARD, uri, self.mnt], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        wait_mounted(self.proc, self.mnt, "nbd_forward")


def fio_nbd(uri, rw, bs):
    p = sh(["fio", "--ioengine=nbd", "--uri=" + uri, "--size=%dM" % FILE_MIB] + fio_common(rw, bs))
    return fio_iops(p.stdout)


def main():
    for tool in ("fio", "nbdkit", "mkfs.f2fs", "fusermount3"):
        if not shutil.which(tool):
            sys.exit("nbd bench: %s is missing" % tool)
    if "nbd" not in sh(["fio", "--enghelp"]).stdout.decode():
        sys.exit("nbd bench: this fio has no nbd engine")
    os.makedirs(OUT, exist_ok=True)
    d = tempfile.mkdtemp(prefix="bench-nbd.", dir=os.path.join(ROOT, "build"))
    img, raw = os.path.join(d, "f2fs.img"), os.path.join(d, "raw.img")
    results = {}
    try:
        with open(img, "wb") as f:
            f.truncate((FILE_MIB * 2 + 256) * MiB)
        sh(["mkfs.f2fs", "-q", "-f", img])
        m = F2fuseMount(d, img, "layout")
        sh(["dd", "if=/dev/urandom", "of=" + os.path.join(m.mnt, "data"), "bs=1M",
            "count=%d" % FILE_MIB, "conv=fsync", "status=none"])
        m.close()
        sh(["dd", "if=/dev/urandom", "of=" + raw, "bs=1M", "count=%d" % FILE_MIB, "status=none"])
        configs = [("memfs", None, 0), ("f2fuse file", None, 0)]
        for ms in DELAYS:
            configs += [("f2fuse nbd", "f2fs", ms), ("forwarder", "raw", ms), ("fio nbd", "raw", ms)]
            if BASELINE_BIN:
                configs.insert(-1, ("f2fuse nbd (baseline)", "f2fs", ms))
        configs = [c for c in configs if c[0] in ONLY]
        print("nbd bench: fio io_uring O_DIRECT QD%d, %d s per run, %d rep(s) interleaved, "
              "delays %s ms (machine shared with other jobs: noisy)" % (QD, SECS, REPS, DELAYS),
              flush=True)
        for rep in range(REPS):
            for name, export, ms in configs:
                server = None
                try:
                    if export:
                        filters, args = delay_filter(ms)
                        server = f2net.Nbdkit(d, "file", [img if export == "f2fs" else raw] + args,
                                              filters=filters, name="srv").start()
                    mnt = MemfsMount(d) if name == "memfs" else None
                    if name.startswith("f2fuse"):
                        binary = os.path.abspath(BASELINE_BIN) if "baseline" in name else F2FUSE
                        mnt = F2fuseMount(d, server.uri() if server else img, "run", binary)
                    if name == "forwarder":
                        mnt = ForwardMount(d, server.uri())
                    for key, label, rw, bs in ROWS:
                        iops, bw = mnt.fio(rw, bs) if mnt else fio_nbd(server.uri(), rw, bs)
                        results.setdefault((name, ms, key), []).append((iops, bw))
                        print("  rep %d %-21s delay %d ms %-13s %9.0f IOPS %8.1f MB/s" % (
                            rep, name, ms, label, iops, bw / 1e6), flush=True)
                    if mnt:
                        mnt.close()
                finally:
                    if server:
                        server.stop()
        ok = f2test.fsck(img)[0]
    finally:
        shutil.rmtree(d, ignore_errors=True)
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for k, v in results.items()}
    lines = ["# bench/nbd: f2fuse over NBD", "",
             "fio io_uring, O_DIRECT, 1 job, QD%d, %d s per run (1 s ramp), %d interleaved "
             "repetition(s), medians; f2fuse with cache_size=8M on a %d MiB file; nbdkit file "
             "plugin on a unix socket; fio's nbd engine on a raw export of the same size. "
             "Machine shared with other jobs. fsck after the runs: %s." % (
                 QD, SECS, REPS, FILE_MIB, "clean" if ok else "NOT clean"), "",
             "| workload | added latency | memfs (FUSE ceiling) | f2fuse file | f2fuse nbd "
             "| forwarder (FUSE + NBD floor) | fio nbd | f2fuse nbd / fio nbd "
             "| forwarder / fio nbd | f2fuse nbd / forwarder | memfs / fio nbd |" + (
                 " f2fuse nbd (baseline) | baseline / fio nbd |" if BASELINE_BIN else ""),
             "|---|" + "---:|" * 10 + ("---:|---:|" if BASELINE_BIN else "")]
    for key, label, rw, bs in ROWS:
        unit = "IOPS" if bs == "4k" else "MB/s"
        for ms in DELAYS:
            def cell(name, delay):
                v = med.get((name, delay, key))
                if not v:
                    return None, "—"
                x = v[0] if unit == "IOPS" else v[1] / 1e6
                return x, ("%.0f %s" % (x, unit) if unit == "IOPS" else "%.1f %s" % (x, unit))
            fv, fs = cell("f2fuse file", 0) if ms == 0 else (None, "—")
            nv, ns = cell("f2fuse nbd", ms)
            cv, cs = cell("fio nbd", ms)
            wv, ws = cell("forwarder", ms)
            mv, ms_ = cell("memfs", 0) if ms == 0 else (None, "—")
            row = "| %s | %d ms | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                label, ms, ms_, fs, ns, ws, cs, pct(nv, cv), pct(wv, cv), pct(nv, wv),
                pct(mv, cv))
            if BASELINE_BIN:
                bv, bs_ = cell("f2fuse nbd (baseline)", ms)
                row += " %s | %s |" % (bs_, pct(bv, cv))
            lines.append(row)
    rr = med.get(("f2fuse nbd", 0, "randread")), med.get(("fio nbd", 0, "randread"))
    if rr[0] and rr[1]:
        share = 100 * rr[0][0] / rr[1][0]
        lines += ["", "Target: 4k randread at QD%d >= 75%% of fio nbd: %.0f%%, %s." % (
            QD, share, "met" if share >= 75 else "MISSED")]
        floor = med.get(("forwarder", 0, "randread"))
        if floor:
            lines += ["The FUSE + NBD floor (forwarder) reaches %s of fio nbd; f2fuse nbd is "
                      "%s of it." % (pct(floor[0], rr[1][0]), pct(rr[0][0], floor[0]))]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "nbd.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
