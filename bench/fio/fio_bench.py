"""bench/fio: end-to-end performance of f2fuse against fuse2fs, kernel ext4 and the FUSE ceiling.

Run by bench/fio/run.sh (see there for the knobs).  Every configuration is mounted once at
the start and stays mounted; the workloads then run interleaved (for each repetition, for
each workload, every configuration in turn).  Cold rows run after `sync` and a drop of the
host's caches; warm rows read what is cached (no drop, fio invalidate=0); the stat-attr row
drops only the kernel's names and inodes (drop_caches=2: every stat costs a LOOKUP, as after
the attribute timeout); read-after-write and the source-tree rows never drop.  The table
shows medians.  Runs with Debian's /usr/bin/python3 (matplotlib for the charts)."""

import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
QUICK = os.environ.get("QUICK", "0") == "1"


def env_int(name, default):
    return int(os.environ.get(name, default))


SECONDS = env_int("FIO_BENCH_SECONDS", 2 if QUICK else 3)
REPS = env_int("FIO_BENCH_REPS", 1 if QUICK else 3)
JOB_MIB = env_int("FIO_BENCH_JOB_MIB", 8 if QUICK else 32)  # per fio job (16 jobs)
META_FILES = env_int("FIO_BENCH_META_FILES", 5000 if QUICK else 1000000)
# room for the metadata rows' files (an f2fs inode is a 4 KiB block), sparse
IMAGE_MIB = env_int("FIO_BENCH_IMAGE_MIB", max(4096, META_FILES * 6 // 1024 + 2048))
RAW_MIB = env_int("FIO_BENCH_RAW_MIB", 256 if QUICK else 1024)  # read-after-write, in total
TREE_SRC = os.environ.get("FIO_BENCH_TREE_SRC", "/usr/include/linux" if QUICK else "/usr/include")
# The memory cgroup configuration and the curve: limits in MiB (0: none)
CG_MIB = env_int("FIO_BENCH_CG_MIB", 512)
CURVE_MIB = [int(x) for x in os.environ.get("FIO_BENCH_CURVE_MIB", "64,128,256,512" if QUICK else
                                            "256,512,1024,2048,4096,0").split(",") if x]
CURVE_FILES = env_int("FIO_BENCH_CURVE_FILES", 20000 if QUICK else 1000000)
FSYNC_FILES = env_int("FIO_BENCH_FSYNC_FILES", 400 if QUICK else 2000)
TAR_SRC = os.environ.get("FIO_BENCH_TAR_SRC",
                         "/usr/include/linux" if QUICK else
                         "/usr/include/linux /usr/include/c++ /usr/include/llvm-14").split()
F2FUSE_OPTS = os.environ.get("FIO_BENCH_F2FUSE_OPTS", "")
MEMFS_OPTS = os.environ.get("FIO_BENCH_MEMFS_OPTS", "")
WBC_META = os.environ.get("FIO_BENCH_WBC_META", "0") == "1"
ONLY = [c for c in os.environ.get("FIO_BENCH_CONFIGS", "").split(",") if c]
RING_THREADS = int(os.environ.get("FIO_BENCH_RING_THREADS", "16"))  # per kernel queue
# Another f2fuse binary (a build of an older commit) measured in the same run, as
# configuration f2fuse-baseline (backend=uring and FIO_BENCH_F2FUSE_OPTS): an A/B of a change.
BASELINE_BIN = os.environ.get("FIO_BENCH_BASELINE_BIN", "")
ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"
ROWS_ONLY = [c for c in os.environ.get("FIO_BENCH_ROWS", "").split(",") if c]
OUT_MD = os.path.join(ROOT, "bench/results/fio.md")
OUT_PNG = os.path.join(ROOT, "bench/results/fio.png")
OUT_JSON = os.path.join(ROOT, "bench/results/fio.json")
OUT_CURVE_MD = os.path.join(ROOT, "bench/results/fio-cgroup.md")
OUT_CURVE_PNG = os.path.join(ROOT, "bench/results/fio-cgroup.png")

F2FUSE = os.path.join(ROOT, "build/f2fuse")
MEMFS = os.path.join(ROOT, "build/bench/fio/memfs")
META = os.path.join(ROOT, "build/bench/fio/meta_load")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(cmd, check=True, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), check=check, text=True,
                          stdout=subprocess.PIPE, **kw).stdout


def meminfo_cached_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1])
    return 0


def drop_caches(what="3"):
    """3: page cache, names and inodes (cold); 2: names and inodes only."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write(what + "\n")


def proc_cpu_s(pid):
    """utime + stime of a whole process (all threads), seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def proc_hwm_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reset_hwm(pid):
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5\n")
    except OSError:
        pass


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fincore_bytes(path):
    if not path:
        return 0
    out = sh(["fincore", "--bytes", "--noheadings", "--output", "RES", path], check=False)
    try:
        return int(out.split()[0])
    except (IndexError, ValueError):
        return 0


def wait_mounted(mnt, proc=None, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if subprocess.run(["mountpoint", "-q", mnt]).returncode == 0:
            return
        if proc and proc.poll() is not None:
            raise RuntimeError(f"daemon for {mnt} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"{mnt} did not get mounted")


class MemoryCgroup:
    """A memory cgroup of the bench's own (cgroup v2 with the memory controller, else the v1
    memory hierarchy), limited to limit_mib (0: no limit), that a daemon is started in."""

    def __init__(self, name, limit_mib):
        self.dir, self.version = None, None
        mounts, own = {}, {}
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, right = line.split(" - ", 1)
                fstype, _src, sopts = right.split()[:3]
                if fstype == "cgroup2":
                    mounts.setdefault(2, left.split()[4])
                elif fstype == "cgroup" and "memory" in sopts.split(","):
                    mounts.setdefault(1, left.split()[4])
        with open("/proc/self/cgroup") as f:
            for line in f:
                hid, ctrl, path = line.rstrip("\n").split(":", 2)
                own[2 if hid == "0" else ctrl] = path
        limit = limit_mib << 20
        v2 = mounts.get(2)
        if v2 and "memory" in open(os.path.join(v2, "cgroup.subtree_control")).read().split():
            self.dir, self.version = os.path.join(v2, name), 2
            os.makedirs(self.dir, exist_ok=True)
            if limit:
                self._write("memory.max", limit)
        elif 1 in mounts:
            ctrl = next((k for k in own if k != 2 and "memory" in k.split(",")), None)
            parent = os.path.join(mounts[1], own[ctrl].lstrip("/")) if ctrl else mounts[1]
            self.dir, self.version = os.path.join(parent, name), 1
            os.makedirs(self.dir, exist_ok=True)
            if limit:
                self._write("memory.limit_in_bytes", limit)
        else:
            raise RuntimeError("no memory cgroup controller to use")

    def _write(self, name, value):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(str(value))

    def join(self):
        self._write("cgroup.procs", os.getpid())

    def oom_kills(self):
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.dir, name)) as f:
                for line in f:
                    k, v = line.split()
                    if k == "oom_kill":
                        return int(v)
        except OSError:
            pass
        return 0

    def peak_mib(self):
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            with open(os.path.join(self.dir, name)) as f:
                return int(f.read()) / (1 << 20)
        except (OSError, ValueError):
            return 0.0

    def remove(self):
        for _ in range(100):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


class Config:
    """One mounted file system under test."""

    def __init__(self, name, label, kind, opts="", binary=None, cgroup_mib=None):
        self.name, self.label, self.kind, self.opts = name, label, kind, opts
        self.binary = binary or F2FUSE
        self.proc = None
        self.loop = None
        self.image = None
        self.mnt = None
        self.cgroup_mib = cgroup_mib  # the daemon runs in a memory cgroup of this limit
        self.cgroup = None
        self.oom_kills = 0
        self.cgroup_peak_mib = 0.0

    def start(self, workdir):
        self.mnt = os.path.join(workdir, "mnt-" + self.name)
        os.makedirs(self.mnt)
        log_path = os.path.join(workdir, self.name + ".log")
        logf = open(log_path, "w")
        if self.kind != "memfs":
            self.image = os.path.join(workdir, self.name + ".img")
            with open(self.image, "wb") as f:
                f.truncate(IMAGE_MIB << 20)
        if self.kind == "memfs":
            args = [MEMFS, "-f"] + (["-o", self.opts] if self.opts else []) + [self.mnt]
            self.proc = subprocess.Popen(args, stdout=logf, stderr=logf)
        elif self.kind == "f2fuse":
            sh(["mkfs.f2fs", "-q", "-f", self.image])
            opts = "rw" + ("," + self.opts if self.opts else "")
            join = None
            if self.cgroup_mib is not None:
                self.cgroup = MemoryCgroup("f2fuse-bench-%s-%d" % (self.name, os.getpid()),
                                           self.cgroup_mib)
                join = self.cgroup.join
            self.proc = subprocess.Popen([self.binary, "-f", "-o", opts, self.image, self.mnt],
                                         stdout=logf, stderr=logf, preexec_fn=join)
        elif self.kind == "fuse2fs":
            sh(["mkfs.ext4", "-q", "-F", "-N", str(ext4_inodes()), self.image])
            self.proc = subprocess.Popen(["fuse2fs", "-f", self.image, self.mnt, "-o", "rw"],
                                         stdout=logf, stderr=logf)
        elif self.kind == "ext4loop":
            sh(["mkfs.ext4", "-q", "-F", "-N", str(ext4_inodes()), self.image])
            self.loop = sh(["losetup", "-f", "--show", "--direct-io=" + self.opts,
                            self.image]).strip()
            sh(["mount", "-t", "ext4", self.loop, self.mnt])
        wait_mounted(self.mnt, self.proc)
        if self.proc:  # 1 MiB reads need read_ahead_kb on the mount's bdi (fuse-notes)
            dev = os.stat(self.mnt).st_dev
            bdi = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
            try:
                with open(bdi, "w") as f:
                    f.write("1024\n")
            except OSError:
                pass

    def daemon_pid(self):
        return self.proc.pid if self.proc else None

    def stop(self):
        if not self.mnt:
            return
        if self.cgroup:
            self.oom_kills = self.cgroup.oom_kills()
            self.cgroup_peak_mib = self.cgroup.peak_mib()
        if self.proc:
            subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                subprocess.run(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)
        else:
            subprocess.run(["umount", self.mnt], stderr=subprocess.DEVNULL)
            if self.loop:
                subprocess.run(["losetup", "-d", self.loop], stderr=subprocess.DEVNULL)
        if self.cgroup:
            self.cgroup.remove()


def all_configs():
    # (no fuse_ring=off: binaries from before fuse_ring=auto refuse it, and never took the
    # ring unasked)
    baseline = [Config("f2fuse-baseline", "f2fuse uring, baseline binary", "f2fuse",
                       ",".join(o for o in ["backend=uring", F2FUSE_OPTS] if o),
                       binary=os.path.abspath(BASELINE_BIN))] if BASELINE_BIN else []
    return baseline + [
        Config("memfs", "memfs (FUSE ceiling)", "memfs", MEMFS_OPTS),
        # The ring is f2fuse's default where the kernel offers it (fuse_ring=auto), and this
        # bench turns the kernel's offer on for the -ring pair: the other configurations
        # keep /dev/fuse explicitly.
        Config("f2fuse-uring", "f2fuse uring (O_DIRECT)", "f2fuse",
               ",".join(o for o in ["backend=uring,fuse_ring=off", F2FUSE_OPTS] if o)),
        # FUSE over io_uring (src/fuse/fuse_ring.c): the transport, not the daemon, differs;
        # its ceiling is memfs with the same transport.
        Config("memfs-ring", "memfs + fuse_ring (ceiling)", "memfs",
               ",".join(o for o in ["fuse_ring=%d" % RING_THREADS, MEMFS_OPTS] if o)),
        Config("f2fuse-uring-ring", "f2fuse uring + fuse_ring", "f2fuse",
               ",".join(o for o in ["backend=uring,fuse_ring=%d" % RING_THREADS, F2FUSE_OPTS]
                        if o)),
        Config("memfs-wbc", "memfs + writeback_cache (ceiling)", "memfs",
               ",".join(o for o in ["writeback_cache", MEMFS_OPTS] if o)),
        Config("f2fuse-uring-wbc", "f2fuse uring + writeback_cache", "f2fuse",
               ",".join(o for o in ["backend=uring,writeback_cache=on,fuse_ring=off",
                                    F2FUSE_OPTS] if o)),
        Config("f2fuse-psync", "f2fuse psync (buffered)", "f2fuse",
               ",".join(o for o in ["backend=psync,fuse_ring=off", F2FUSE_OPTS] if o)),
        # cache_size=auto inside a memory cgroup (memory.max / v1 limit): it must shrink
        # rather than be OOM-killed (the table's header says how often the cgroup killed)
        Config("f2fuse-cg%d" % CG_MIB, "f2fuse uring in a %dM memory cgroup" % CG_MIB, "f2fuse",
               ",".join(o for o in ["backend=uring,fuse_ring=off", F2FUSE_OPTS] if o),
               cgroup_mib=CG_MIB),
        Config("fuse2fs", "fuse2fs (FUSE ext4)", "fuse2fs"),
        Config("ext4-loop", "ext4 on loop, dio off", "ext4loop", "off"),
        Config("ext4-loop-dio", "ext4 on loop, dio on", "ext4loop", "on"),
    ]


# name, label, rw, bs, engine, jobs, iodepth, cache: "cold" (caches dropped first, fio
# invalidate=1) or "warm" (what the files hold is in the kernel's page cache: read once
# unmeasured, then measured with invalidate=0, nothing dropped)
FIO_ROWS = [
    ("randread", "4k randread, cold", "randread", "4k", "psync", 16, 1, "cold"),
    ("randread-warm", "4k randread, warm", "randread", "4k", "psync", 16, 1, "warm"),
    ("read", "4k read, cold", "read", "4k", "psync", 16, 1, "cold"),
    ("read-warm", "4k read, warm", "read", "4k", "psync", 16, 1, "warm"),
    ("read128k", "128k read, cold", "read", "128k", "psync", 16, 1, "cold"),
    ("read128k-warm", "128k read, warm", "read", "128k", "psync", 16, 1, "warm"),
    ("uring-randread", "4k randread io_uring QD32 x4, cold", "randread", "4k", "io_uring", 4, 32,
     "cold"),
    ("uring-randread-warm", "4k randread io_uring QD32 x4, warm", "randread", "4k", "io_uring", 4,
     32, "warm"),
    ("randwrite", "4k randwrite", "randwrite", "4k", "psync", 16, 1, "cold"),
    ("uring-randwrite", "4k randwrite io_uring QD32 x4", "randwrite", "4k", "io_uring", 4, 32,
     "cold"),
    ("write", "4k write", "write", "4k", "psync", 16, 1, "cold"),
    ("write128k", "128k write", "write", "128k", "psync", 16, 1, "cold"),
]
# Metadata and whole-workload rows, in the order they run (each needs the ones before).
META_ROWS = ["raw", "create", "stat", "stat-attr", "unlink", "untar", "fsync",
             "tree-cp", "tree-read", "tree-reread", "tree-rm"]
META_LABELS = {"raw": f"read-after-write: {RAW_MIB} MiB written, read back (128k)",
               "create": f"create {META_FILES} files (4 thr, 16 dirs)",
               "stat": f"stat {META_FILES} files, cold",
               "stat-attr": f"stat {META_FILES} files, names forgotten (LOOKUP each)",
               "unlink": f"unlink {META_FILES} files", "untar": "untar source tree",
               "fsync": f"{FSYNC_FILES} x (create, 4k, fsync) 4 thr",
               "tree-cp": f"source tree: cp -a {TREE_SRC}",
               "tree-read": "source tree: read all right after cp",
               "tree-reread": "source tree: read all again",
               "tree-rm": "source tree: rm -rf"}


def fio_args(cfg, rw, bs, engine, jobs, depth, seconds, warm=False):
    return ["fio", "--name=f", "--directory=" + cfg.mnt, "--numjobs=%d" % jobs,
            "--size=%dM" % JOB_MIB, "--rw=" + rw, "--bs=" + bs, "--ioengine=" + engine,
            "--iodepth=%d" % depth, "--time_based", "--runtime=%d" % seconds,
            "--invalidate=%d" % (0 if warm else 1), "--group_reporting", "--output-format=json"]


def layout(cfg):
    """Writes the fio files once (16 jobs x JOB_MIB), so that reads read data."""
    args = ["fio", "--name=f", "--directory=" + cfg.mnt, "--numjobs=16", "--size=%dM" % JOB_MIB,
            "--rw=write", "--bs=1M", "--ioengine=psync", "--end_fsync=1",
            "--output-format=json"]
    sh(args)


def prime(cfg):
    """Reads the fio files once into whatever caches the configuration keeps."""
    sh(["fio", "--name=f", "--directory=" + cfg.mnt, "--numjobs=16", "--size=%dM" % JOB_MIB,
        "--rw=read", "--bs=1M", "--ioengine=psync", "--invalidate=0", "--output-format=json"])


class Measure:
    """Context for one run: CPU of fio and the daemon, page-cache growth, image pages, RSS.
    drop: "3" (cold), "2" (names and inodes forgotten) or None (nothing dropped)."""

    def __init__(self, cfg, drop="3"):
        self.cfg, self.drop = cfg, drop

    def __enter__(self):
        if self.drop:
            drop_caches(self.drop)
        pid = self.cfg.daemon_pid()
        if pid:
            reset_hwm(pid)
        self.cached0 = meminfo_cached_kib()
        self.cpu0 = children_cpu_s() + (proc_cpu_s(pid) if pid else 0)
        self.t0 = time.monotonic()
        return self

    def finish(self):
        pid = self.cfg.daemon_pid()
        self.elapsed = time.monotonic() - self.t0
        self.cpu = children_cpu_s() + (proc_cpu_s(pid) if pid else 0) - self.cpu0
        self.cached_mib = (meminfo_cached_kib() - self.cached0) / 1024
        self.image_mib = fincore_bytes(self.cfg.image) / (1 << 20)
        self.rss_mib = proc_hwm_mib(pid) if pid else 0.0

    def __exit__(self, *exc):
        return False


def result(m, value, unit, ops, **extra):
    r = {"value": value, "unit": unit, "cpu": m.cpu, "cpu_us_per_op": 1e6 * m.cpu / ops if ops
         else 0, "cached": m.cached_mib, "image": m.image_mib, "rss": m.rss_mib}
    r.update(extra)
    return r


def run_fio_row(cfg, row):
    name, label, rw, bs, engine, jobs, depth, cache = row
    warm = cache == "warm"
    if warm:
        prime(cfg)
    with Measure(cfg, drop=None if warm else "3") as m:
        out = sh(fio_args(cfg, rw, bs, engine, jobs, depth, SECONDS, warm))
        m.finish()
    j = json.loads(out[out.index("{"):])["jobs"][0]
    io = j["read"] if "read" in rw else j["write"]
    ops = io["total_ios"]
    value = io["iops"] if bs == "4k" else io["bw_bytes"] / 1e6
    return result(m, value, "IOPS" if bs == "4k" else "MB/s", ops)


def run_raw_row(cfg, rep):
    """Read-after-write: 16 files of RAW_MIB/16 written (1 MiB writes, no fsync), then read
    back once with 128 KiB reads, nothing dropped in between: the kernel's page cache should
    serve it.  The value is the read's throughput; the files go afterwards."""
    per_job = max(1, RAW_MIB // 16)
    common = ["fio", "--name=raw%d" % rep, "--directory=" + cfg.mnt, "--numjobs=16",
              "--size=%dM" % per_job, "--ioengine=psync", "--invalidate=0",
              "--group_reporting", "--output-format=json"]
    sh(common + ["--rw=write", "--bs=1M"])
    with Measure(cfg, drop=None) as m:
        out = sh(common + ["--rw=read", "--bs=128k"])
        m.finish()
    io = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    for f in os.listdir(cfg.mnt):
        if f.startswith("raw%d." % rep):
            os.unlink(os.path.join(cfg.mnt, f))
    return result(m, io["bw_bytes"] / 1e6, "MB/s", io["total_ios"])


def tree_entries():
    return int(sh(f"find {TREE_SRC} | wc -l").strip())


def run_tree_row(cfg, row, rep):
    """The source tree as a developer uses one: cp -a, read every file (right after, and
    again), rm -rf; nothing dropped.  The value is entries per second."""
    dst = os.path.join(cfg.mnt, f"tree{rep}")
    cmds = {"tree-cp": ["cp", "-a", TREE_SRC, dst],
            "tree-read": ["sh", "-c", f"find {dst} -type f -print0 | xargs -0 cat > /dev/null"],
            "tree-reread": ["sh", "-c", f"find {dst} -type f -print0 | xargs -0 cat > /dev/null"],
            "tree-rm": ["rm", "-rf", dst]}
    n = TREE_ENTRIES
    with Measure(cfg, drop=None) as m:
        t0 = time.monotonic()
        subprocess.run(cmds[row], check=True, stdout=subprocess.DEVNULL)
        secs = time.monotonic() - t0
        m.finish()
    return result(m, n / secs, "entries/s", n, seconds=secs)


def run_meta_row(cfg, row, rep, workdir):
    if row == "raw":
        return run_raw_row(cfg, rep)
    if row.startswith("tree-"):
        return run_tree_row(cfg, row, rep)
    base = os.path.join(cfg.mnt, f"meta{rep}")
    if row == "create":
        os.makedirs(base, exist_ok=True)
    drop = "3"
    if row == "untar":
        base = os.path.join(cfg.mnt, f"untar{rep}")
        os.makedirs(base, exist_ok=True)
        cmd = ["sh", "-c", f"tar -xf {workdir}/src.tar -C {base} && sync -f {base}"]
        ops = TAR_FILES
    elif row == "fsync":
        base = os.path.join(cfg.mnt, f"fsync{rep}")
        os.makedirs(base, exist_ok=True)
        cmd = [META, "fsync", base, str(FSYNC_FILES), "4"]
        ops = FSYNC_FILES
    else:
        if row == "stat-attr":
            drop = "2"  # names and inodes forgotten, every cache below them kept
        cmd = [META, "stat" if row == "stat-attr" else row, base, str(META_FILES), "4", "16"]
        ops = META_FILES
    f2 = cfg.kind == "f2fuse"
    before = f2fuse_counters(cfg.binary, cfg.mnt) if f2 else {}
    with Measure(cfg, drop=drop) as m:
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        secs = time.monotonic() - t0
        m.finish()
    extra = {}
    if f2:  # how many lookups and getattrs had to read the device (the metadata kept hot?)
        after = f2fuse_counters(cfg.binary, cfg.mnt)
        extra = {k: after.get(k, 0) - before.get(k, 0) for k in
                 ("fs.lookups", "fs.lookup_device_reads", "fs.getattrs",
                  "fs.getattr_device_reads")}
        extra["cache_budget_mib"] = after.get("cache.budget_bytes", 0) / (1 << 20)
    return result(m, ops / secs, "files/s", ops, seconds=secs, **extra)


TAR_FILES = 0
TREE_ENTRIES = 0


def ext4_inodes():
    """Inodes for the ext4 images: every file the metadata rows keep at once, and more."""
    return max(262144, int(META_FILES * 1.3) + 200000)


def make_tarball(workdir):
    global TAR_FILES
    tar = os.path.join(workdir, "src.tar")
    args = ["tar", "-cf", tar, "--sort=name"]
    for src in TAR_SRC:
        args += ["-C", os.path.dirname(src), os.path.basename(src)]
    sh(args)
    TAR_FILES = int(sh(f"tar -tf {tar} | wc -l").strip())


def fmt(v, d=0):
    return f"{v:,.{d}f}"


def ceiling_of(name):
    """The memfs configuration with the same kernel-side setup."""
    for tail in ("-wbc", "-ring"):
        if name.endswith(tail):
            return "memfs" + tail
    return "memfs"


def set_enable_uring(value):
    """FUSE over io_uring must be allowed before a mount asks for it; returns the old value."""
    try:
        with open(ENABLE_URING) as f:
            old = f.read().strip()
        with open(ENABLE_URING, "w") as f:
            f.write(value + "\n")
        return old
    except OSError as e:
        log(f"cannot set {ENABLE_URING}: {e} (the -ring configurations stay on /dev/fuse)")
        return None


def write_table(configs, rows, results, header):
    names = [c.name for c in configs]
    lines = header + ["",
                      "| workload | configuration | result | % of ceiling | x fuse2fs | x ext4 dio | "
                      "CPU s | CPU us/op | Cached growth MiB | image in page cache MiB | "
                      "daemon peak RSS MiB |",
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, label in rows:
        for cfg in configs:
            rs = results.get((key, cfg.name))
            if not rs:
                continue
            med = {k: statistics.median(r[k] for r in rs) for k in
                   ("value", "cpu", "cpu_us_per_op", "cached", "image", "rss")}
            unit = rs[0]["unit"]

            def ratio(other, times=False):
                o = results.get((key, other))
                if not o or other == cfg.name:
                    return "-"
                ov = statistics.median(r["value"] for r in o)
                if ov <= 0:
                    return "-"
                return f"{med['value'] / ov:.2f}x" if times else f"{100 * med['value'] / ov:.0f}%"

            rss = fmt(med["rss"]) if cfg.kind != "ext4loop" else "-"
            img = fmt(med["image"]) if cfg.image else "-"
            lines.append(f"| {label} | {cfg.label} | {fmt(med['value'])} {unit} | "
                         f"{ratio(ceiling_of(cfg.name))} | {ratio('fuse2fs', True)} | "
                         f"{ratio('ext4-loop-dio', True)} | {med['cpu']:.1f} | "
                         f"{med['cpu_us_per_op']:.0f} | {fmt(med['cached'])} | {img} | {rss} |")
    os.makedirs(os.path.dirname(OUT_MD), exist_ok=True)
    with open(OUT_MD, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    _ = names


def write_chart(configs, rows, results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib (run with /usr/bin/python3): no chart")
        return
    present = [(k, l) for k, l in rows if any((k, c.name) in results for c in configs)]
    ncol = 4
    nrow = (len(present) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.2 * nrow), squeeze=False)
    colors = {"memfs": "#999999", "memfs-wbc": "#cccccc", "f2fuse-uring": "#1f77b4",
              "f2fuse-uring-wbc": "#6baed6",
              "memfs-ring": "#777777", "f2fuse-uring-ring": "#08306b", "f2fuse-psync": "#9467bd", "fuse2fs": "#d62728",
              "ext4-loop": "#2ca02c", "ext4-loop-dio": "#98df8a"}
    for i, (key, label) in enumerate(present):
        ax = axes[i // ncol][i % ncol]
        vals, names, cols = [], [], []
        unit = ""
        for j, c in enumerate(configs):
            rs = results.get((key, c.name))
            if rs:
                vals.append(statistics.median(r["value"] for r in rs))
                names.append(c.name)
                cols.append(colors.get(c.name, "#000000"))
                unit = rs[0]["unit"]
        ax.bar(range(len(vals)), vals, color=cols)
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
        ax.set_title(label, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    for i in range(len(present), nrow * ncol):
        axes[i // ncol][i % ncol].axis("off")
    from matplotlib.patches import Patch
    fig.legend(handles=[Patch(color=colors.get(c.name, "#000000"), label=c.label) for c in configs],
               loc="lower right", fontsize=9, ncol=2)
    fig.tight_layout()
    fig.savefig(OUT_PNG, dpi=110)
    log("chart:", OUT_PNG)


def replot():
    """--replot: the chart again from bench/results/fio.json."""
    with open(OUT_JSON) as f:
        raw = json.load(f)
    results = {tuple(k.split("|", 1)): v for k, v in raw.items()}
    configs = [c for c in all_configs() if any(k[1] == c.name for k in results)]
    rows = [(r[0], r[1]) for r in FIO_ROWS] + [(r, META_LABELS[r]) for r in META_ROWS]
    write_chart(configs, rows, results)


def f2fuse_counters(binary, mnt):
    out = {}
    for line in sh([binary, "stat", mnt], check=False).splitlines():
        k, _, v = line.partition(" ")
        if v.isdigit():
            out[k] = int(v)
    return out


def cgroup_curve(base):
    """f2fuse's stat rate over CURVE_FILES files with its daemon in memory cgroups of growing
    limits (CURVE_MIB; 0: none): the first pass reads the metadata in, the measured second
    one (names and inodes dropped) shows what the cache kept.  Smaller limits must cost
    speed, never the daemon (OOM kills are counted)."""
    workdir = tempfile.mkdtemp(prefix="bench-cgcurve.", dir=base)
    img, mnt = os.path.join(workdir, "img"), os.path.join(workdir, "mnt")
    os.makedirs(mnt)
    with open(img, "wb") as f:  # the inodes (4 KiB each), dentries, and room
        f.truncate(max(2048, CURVE_FILES * 6 // 1024 + 1024) << 20)
    sh(["mkfs.f2fs", "-q", "-f", img])
    tree = os.path.join(mnt, "t")
    points = []

    def mount(join=None):
        logf = open(os.path.join(workdir, "daemon.log"), "a")
        p = subprocess.Popen([F2FUSE, "-f", "-o", "rw,backend=uring,fuse_ring=off", img, mnt],
                             stdout=logf, stderr=logf, preexec_fn=join)
        wait_mounted(mnt, p)
        return p

    def unmount(p):
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        p.wait(timeout=600)

    try:
        p = mount()
        os.makedirs(tree)
        log(f"cgroup curve: creating {CURVE_FILES} files")
        subprocess.run([META, "create", tree, str(CURVE_FILES), "4", "16"], check=True,
                       stdout=subprocess.DEVNULL)
        unmount(p)
        for limit in CURVE_MIB:
            cg = MemoryCgroup("f2fuse-bench-curve-%d-%d" % (limit, os.getpid()), limit)
            p = None
            try:
                p = mount(cg.join)
                drop_caches("3")
                subprocess.run([META, "stat", tree, str(CURVE_FILES), "4", "16"], check=True,
                               stdout=subprocess.DEVNULL)
                drop_caches("2")
                reset_hwm(p.pid)
                reads0 = f2fuse_counters(F2FUSE, mnt).get("fs.lookup_device_reads", 0)
                t0 = time.monotonic()
                subprocess.run([META, "stat", tree, str(CURVE_FILES), "4", "16"], check=True,
                               stdout=subprocess.DEVNULL)
                secs = time.monotonic() - t0
                st = f2fuse_counters(F2FUSE, mnt)
                pt = {"limit_mib": limit, "files_per_s": CURVE_FILES / secs,
                      "rss_mib": proc_hwm_mib(p.pid), "cgroup_peak_mib": cg.peak_mib(),
                      "budget_mib": st.get("cache.budget_bytes", 0) / (1 << 20),
                      "device_reads": st.get("fs.lookup_device_reads", 0) - reads0,
                      "shrinks": st.get("cache.shrinks", 0),
                      "given_back_mib": st.get("cache.given_back_bytes", 0) / (1 << 20),
                      "alive": p.poll() is None}
                unmount(p)
                pt["oom_kills"] = cg.oom_kills()
                points.append(pt)
                log(f"cgroup curve: limit {limit or 'none'} MiB: {pt['files_per_s']:.0f} files/s, "
                    f"budget {pt['budget_mib']:.0f} MiB, rss {pt['rss_mib']:.0f} MiB, "
                    f"{pt['oom_kills']} OOM kills")
            finally:
                if p and p.poll() is None:
                    unmount(p)
                cg.remove()
    finally:
        if subprocess.run(["mountpoint", "-q", mnt]).returncode == 0:
            subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
        shutil.rmtree(workdir, ignore_errors=True)
    lines = [f"# bench/fio: f2fuse (cache_size=auto) in memory cgroups: stat of {CURVE_FILES} "
             f"files, names and inodes dropped (each stat a LOOKUP)", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC')}, load average {os.getloadavg()[0]:.1f}. "
             "limit: the cgroup's memory.max (v2) or memory.limit_in_bytes (v1); 0 = none.", "",
             "| limit MiB | files/s | cache budget MiB | lookups that read the device | "
             "daemon peak RSS MiB | cgroup peak MiB | shrinks | given back MiB | OOM kills |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for pt in points:
        lines.append(f"| {pt['limit_mib'] or 'none'} | {fmt(pt['files_per_s'])} | "
                     f"{fmt(pt['budget_mib'])} | {fmt(pt['device_reads'])} | {fmt(pt['rss_mib'])} | "
                     f"{fmt(pt['cgroup_peak_mib'])} | {pt['shrinks']} | {fmt(pt['given_back_mib'])} | "
                     f"{pt['oom_kills']}{'' if pt['alive'] else ' (daemon gone)'} |")
    with open(OUT_CURVE_MD, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [pt["limit_mib"] or max(CURVE_MIB) * 2 for pt in points]
    ax.plot(xs, [pt["files_per_s"] for pt in points], "o-", color="#1f77b4")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(pt["limit_mib"] or "none") for pt in points])
    ax.set_xlabel("memory cgroup limit, MiB")
    ax.set_ylabel("stat files/s")
    ax.set_title(f"f2fuse in a memory cgroup: stat of {CURVE_FILES} files", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT_CURVE_PNG, dpi=110)


def dump_daemon_logs(configs, workdir, lines=30):
    """A failed run shows what each daemon said before its work directory goes."""
    for c in configs:
        path = os.path.join(workdir, c.name + ".log")
        try:
            with open(path, errors="replace") as f:
                tail = f.readlines()[-lines:]
        except OSError:
            continue
        if tail:
            print(f"--- {c.name} daemon log (last {len(tail)} lines)", file=sys.stderr)
            sys.stderr.writelines(tail)
        if c.kind == "f2fuse" and c.proc and c.proc.poll() is None:
            st = sh([c.binary, "stat", c.mnt], check=False)
            keep = [l for l in st.splitlines()
                    if re.search(r"error|enospc|no_room|^seg\.|^gc\.|^checkpoint\.", l)
                    and not l.endswith(" 0")]
            print(f"--- {c.name} f2fuse stat (non-zero errors, space, GC, checkpoints)",
                  file=sys.stderr)
            print("\n".join(keep), file=sys.stderr)


def main():
    if "--replot" in sys.argv:
        replot()
        return
    if "--cgroup-curve" in sys.argv:
        cgroup_curve(os.environ.get("FIO_BENCH_DIR", os.path.join(ROOT, "build")))
        return
    for tool in ("fio", "fincore", "fuse2fs", "mkfs.f2fs", "mkfs.ext4", "losetup", "fusermount3"):
        if not shutil.which(tool):
            sys.exit(f"fio bench: {tool} is missing")
    if os.geteuid() != 0:
        sys.exit("fio bench: needs root (drop_caches, losetup, mount)")
    configs = [c for c in all_configs() if not ONLY or c.name in ONLY]
    fio_rows = [r for r in FIO_ROWS if not ROWS_ONLY or r[0] in ROWS_ONLY]
    meta_rows = [r for r in META_ROWS if not ROWS_ONLY or r in ROWS_ONLY]
    base = os.environ.get("FIO_BENCH_DIR", os.path.join(ROOT, "build"))
    os.makedirs(base, exist_ok=True)
    # Every image may fill up to its size: a host file system that runs out of space
    # fails the writes (f2fuse turns read-only) and the run measures nothing.
    images = sum(1 for c in configs if c.kind != "memfs")
    vfs = os.statvfs(base)
    free_mib = vfs.f_bavail * vfs.f_frsize >> 20
    if free_mib < images * IMAGE_MIB + 1024:
        sys.exit(f"fio bench: {base} has {free_mib} MiB free; {images} images of {IMAGE_MIB} "
                 f"MiB need {images * IMAGE_MIB + 1024} MiB (FIO_BENCH_DIR, FIO_BENCH_IMAGE_MIB)")
    workdir = tempfile.mkdtemp(prefix="bench-fio.", dir=base)
    started = time.time()
    load0 = os.getloadavg()
    results = {}
    stop = {"flag": False}

    def on_signal(sig, frame):
        stop["flag"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    uring_was = None
    if any(c.name.endswith("-ring") for c in configs):
        uring_was = set_enable_uring("1")
    try:
        if "untar" in meta_rows:
            make_tarball(workdir)
        if any(r.startswith("tree-") for r in meta_rows):
            global TREE_ENTRIES
            TREE_ENTRIES = tree_entries()
        for c in configs:
            log(f"mounting {c.name}")
            c.start(workdir)
        for c in configs:
            if fio_rows:
                log(f"laying out fio files on {c.name}")
                layout(c)
        for rep in range(REPS):
            for row in fio_rows:
                for c in configs:
                    r = run_fio_row(c, row)
                    results.setdefault((row[0], c.name), []).append(r)
                    log(f"rep {rep + 1} {row[0]:16} {c.name:14} {r['value']:10.0f} {r['unit']} "
                        f"cpu {r['cpu']:.1f}s cached {r['cached']:.0f}M img {r['image']:.0f}M "
                        f"rss {r['rss']:.0f}M")
            for row in meta_rows:
                for c in configs:
                    if c.name.endswith("-wbc") and not WBC_META:
                        continue
                    r = run_meta_row(c, row, rep, workdir)
                    results.setdefault((row, c.name), []).append(r)
                    log(f"rep {rep + 1} {row:16} {c.name:14} {r['value']:10.0f} {r['unit']} "
                        f"({r.get('seconds', 0):.1f}s) cpu {r['cpu']:.1f}s rss {r['rss']:.0f}M"
                        + (f" lookups {r['fs.lookups']} of which read the device "
                           f"{r['fs.lookup_device_reads']}, cache {r['cache_budget_mib']:.0f}M"
                           if "fs.lookups" in r else ""))
    except BaseException:
        dump_daemon_logs(configs, workdir)
        raise
    finally:
        for c in configs:
            c.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if uring_was is not None and uring_was in ("N", "0"):
            set_enable_uring("0")
    load1 = os.getloadavg()
    header = [
        "# bench/fio: f2fuse end to end (the loop direct-I/O-via-AIO post's table)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
        f"{os.cpu_count()} CPUs, load average {load0[0]:.1f} at start, {load1[0]:.1f} at end "
        f"(shared machine), {REPS} repetition(s), medians. fio: psync 16 jobs x "
        f"{JOB_MIB} MiB (io_uring rows: 4 jobs QD32), buffered, {SECONDS} s per run; "
        f"image {IMAGE_MIB} MiB. Cold rows: caches dropped first; warm rows: the files read "
        f"once, then measured with nothing dropped (fio invalidate=0); stat-attr: only names "
        f"and inodes dropped (drop_caches=2), so every stat costs a LOOKUP as after the "
        f"attribute timeout; read-after-write and the source tree ({TREE_SRC}, "
        f"{TREE_ENTRIES} entries): nothing dropped. Runtime {time.time() - started:.0f} s.",
        f"f2fuse options: `{F2FUSE_OPTS or 'defaults'}`; memfs options: `{MEMFS_OPTS or 'defaults'}`.",
        "CPU s = fio's own CPU + the daemon's (user+system, all threads); the loop device's "
        "kernel workers are not counted. Cached growth = /proc/meminfo Cached after the run "
        "minus after the drop (host-wide, so other tenants add noise). Image pages: fincore of "
        "the image file. Peak RSS: VmHWM, reset before each run.",
    ] + [f"{c.label}: the cgroup's peak usage {c.cgroup_peak_mib:.0f} MiB, "
         f"{c.oom_kills} OOM kill(s)." for c in configs if c.cgroup_mib is not None]
    rows = [(r[0], r[1]) for r in fio_rows] + [(r, META_LABELS[r]) for r in meta_rows]
    write_table(configs, rows, results, header)
    with open(OUT_JSON, "w") as f:
        json.dump({f"{k[0]}|{k[1]}": v for k, v in results.items()}, f, indent=1)
    write_chart(configs, rows, results)
    if os.environ.get("FIO_BENCH_CURVE", "1") == "1" and not ONLY and not ROWS_ONLY:
        cgroup_curve(base)


if __name__ == "__main__":
    main()
