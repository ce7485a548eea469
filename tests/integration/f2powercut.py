"""Shared code of the power-cut crash-consistency test (tests/integration/test_powercut).

Python 3 stdlib only; builds on f2test.py (not edited here).

The idea is littlefs's: run a seeded workload on a mount whose block layer cuts the power at
the N-th device write (`-o powercut=N[,powercut_torn,powercut_seed=S]`, see src/blk/blk.h), for
every N (or many), then mount again normally (roll-forward recovery and orphan cleanup run) and
check that what the workload had made durable is there, and that nothing impossible is.

What is here:
  - read_stat()     the daemon's counters, straight from its control socket (fallback: `f2fuse stat`)
  - State           the logical file system: path -> directory or inode id, inode id -> content
  - Workload        a seeded random sequence of operations, generated from the model only, so the
                    same seed gives the same operations in every run (the cut cannot change them)
  - CutDaemon       the powercut mount: start, counters, wait for the cut, SIGKILL + `fusermount3 -uz`,
                    clean unmount; a watchdog kills it when a call hangs
  - run_workload()  runs the operations, reads the counters after each, and keeps the durability
                    record: the last durable checkpoint and the fast fsyncs after it
  - candidate_worlds(), read_tree(), match_worlds(): what the recovered mount may look like, what
                    it does look like, and the comparison (world_diff, durability_violations)
  - run_case()      one cut: copy the base image -> workload -> cut -> SIGKILL -> fsck of the cut
                    image (fsck_cut_image) -> recovery mount
                    -> check -> unmount -> fsck -> mount -> same tree -> unmount -> fsck
                    -> for a sample of cuts (KERNEL_EVERY) the real kernel: it reads the final
                    image as f2fuse does, and recovers a copy of the cut image itself, which
                    must give f2fuse's recovered tree; failures carry the replay command
  - Totals          the counts printed at the end, failures grouped by kind

What counts as durable (the model, from docs/ARCHITECTURE.md): the daemon writes the device only
in checkpoints (directory fsync, an fsync that cannot go fast, memory/space pressure, unmount;
checkpoint_interval=0 turns the timer off) and in fast fsyncs (the file's data and nodes, then a
flush). FUSE runs without writeback caching, so the daemon holds every write(2) once it returns.
After each operation the test reads the counters: when the cut has not begun yet
(blk.powercut.cut == 0 and blk.powercut.dropped_writes == 0: the cutting write itself counts as
dropped, so this also excludes a cut still waiting for writes in flight), every flush of that
operation completed before the cut, so
  - an operation that wrote a checkpoint (checkpoint.written went up) made the whole state after
    it durable; for a checkpoint inside a changing operation (cache or space pressure) the state
    before it, or part way through a write: the kernel sends one write(2) as several FUSE
    requests (the first ends at the first page boundary when that page is not cached), and a
    pressure checkpoint can run between two of them (partial_states());
  - an fsync/fdatasync that went fast (fsync.fast went up) made its file's content durable.
The operation during which the cut began (op k) is uncertain. After the cut the recovered image
must equal one of these "worlds" exactly (names, types, hard-link groups, nlink, sizes, bytes):
  W1  the last durable checkpoint, with every durable fast fsync after it replayed (a file
      created since comes back under its name at that fsync: the dentry mark)
      (W1/pre, W1/+N, W1/post when that checkpoint ran inside a write)
  W2  W1 plus op k's fsync replayed (op k was an fsync that went fast)
  W3  the state before op k, or part way through it, W4 after it (op k wrote a checkpoint
      that committed)
  Wfinal  no cut during the operations: the final state; with a cut in the unmount's own
      checkpoint, W1 or Wfinal.
With checkpoint_data=all (Workload.cp_data) every checkpoint writes every file's data and
the worlds are compared byte for byte.  With the default, checkpoint_data=metadata (as f2fs),
a checkpoint makes names, inodes and sizes durable but not data that was not written back:
the worlds' names, types, links and sizes must still match exactly, and so must the content
of every file whose data an fsync (or the final unmount) made durable with no write since
(Record.exact); any other file may hold, in each 4 KiB block, zeros (a block reserved but
not written, NEW_ADDR) or any content the workload ever gave that block (Record.versions:
an older block the checkpoint's node still points at, or one background writeback wrote).
This implies the brief's rule (a file fsync'ed with no write since holds exactly its fsync'ed
content; fsync'ed directories exist), and is stricter: files never synced cannot appear from
nowhere, unlinked ones cannot come back. A
mismatch is reported against every world, and separately as "DURABILITY VIOLATED" when the
looser rule breaks too (durability_violations()).
"""

import errno
import os
import random
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import f2test as T      # noqa: E402
import f2kernel as K    # noqa: E402

log = T.log
J = os.path.join
KiB = 1024
MiB = 1 << 20
DIR = "dir"
CUT_LOG = "power cut emulated at write"

PRECUT_FSCK = True      # fsck the image right after the cut too (test_powercut --no-precut-fsck)
OP_TIMEOUT = 30         # one workload operation (a checkpoint of a few MiB takes well under 1 s)
MOUNT_TIMEOUT = 30      # a mount must be live within this (recovery included)
CHECK_TIMEOUT = 120     # reading back the whole tree
# The real kernel (f2kernel.kernel_agrees, ~3.5 s a boot) checks the cuts of a workload that
# left a roll-forward chain: the first and then every KERNEL_EVERY-th of them.  It reads the
# final image as f2fuse does, and recovers a copy of the image as the cut left it itself
# (roll-forward, orphans), which must give f2fuse's recovered tree.  None: 100 in CI
# (test_powercut: about half of its ~250-500 cuts leave a chain; 5-7 boots), 20 with --long or
# F2FUSE_LONG=1; F2FUSE_KERNEL_EVERY=N overrides (0: never).
KERNEL_EVERY = None
KERNEL_CI_EVERY, KERNEL_LONG_EVERY = 100, 20


# ------------------------------------------------------------------------------------------------
# counters

def ctl_address(mnt):
    """The abstract socket of a mount's control server (src/fuse/ctl.c: FNV-1a of the real path)."""
    h = 0xcbf29ce484222325
    for b in os.fsencode(os.path.realpath(mnt)):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return b"\0f2fuse-ctl:%016x" % h


def parse_stat(text):
    res = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                res[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return res


class StatError(Exception):
    pass


def read_stat(mnt, binary=None, timeout=10):
    """Counters of the mount at mnt as {name: int}. Uses the control socket directly (a few
    hundred microseconds instead of a process start); `binary stat` when that fails."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(ctl_address(mnt))
            s.sendall(b"stat\n")
            chunks = []
            while True:
                c = s.recv(65536)
                if not c:
                    break
                chunks.append(c)
        finally:
            s.close()
        text = b"".join(chunks).decode("utf-8", "replace")
        if text.startswith("error:"):
            raise StatError(text.strip())
        res = parse_stat(text)
        if "blk.write.ops" in res:
            return res
    except (OSError, socket.timeout):
        pass
    if binary is None:
        binary = T.F2FUSE_BIN
    try:
        p = subprocess.run([binary, "stat", mnt], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StatError("f2fuse stat %s timed out after %ds" % (mnt, timeout))
    res = parse_stat(p.stdout.decode("utf-8", "replace"))
    if p.returncode != 0 or "blk.write.ops" not in res:
        raise StatError("f2fuse stat %s: exit %d: %s" % (mnt, p.returncode,
                                                         p.stdout.decode(errors="replace")[-300:]))
    return res


def cut_began(st):
    return st.get("blk.powercut.cut", 0) != 0 or st.get("blk.powercut.dropped_writes", 0) != 0


# ------------------------------------------------------------------------------------------------
# the model

class State:
    """ns: relative path (str, no leading slash) -> DIR or inode id; data: inode id -> bytes."""

    def __init__(self, ns=None, data=None):
        self.ns = dict(ns or {})
        self.data = dict(data or {})

    def copy(self):
        return State(self.ns, self.data)

    def overlay(self, fast, names=None):
        """This state with fast fsyncs replayed: fast gives inode -> content; names gives
        inode -> its path at the fsync, the name roll-forward adds (the dentry mark) for a
        file this state lacks, into a parent directory it has."""
        s = self.copy()
        s.data.update(fast)
        named = set(v for v in s.ns.values() if v != DIR)
        for ino, path in sorted((names or {}).items()):
            parent = os.path.dirname(path)
            if ino in fast and ino not in named and path not in s.ns and \
                    (parent == "" or s.ns.get(parent) == DIR):
                s.ns[path] = ino
        return s

    def files(self):
        return sorted(p for p, v in self.ns.items() if v != DIR)

    def dirs(self):
        return [""] + sorted(p for p, v in self.ns.items() if v == DIR)

    def names_of(self, ino):
        return sorted(p for p, v in self.ns.items() if v == ino)


def splice(old, off, data):
    if off > len(old):
        old = old + bytes(off - len(old))
    return old[:off] + data + old[off + len(data):]


def resize(old, size):
    return old[:size] if size <= len(old) else old + bytes(size - len(old))


class Op:
    """One operation: kind, its arguments, and what it does to the model."""

    def __init__(self, idx, kind, **kw):
        self.idx, self.kind, self.kw = idx, kind, kw

    def __getattr__(self, k):
        try:
            return self.__dict__["kw"][k]
        except KeyError:
            raise AttributeError(k)

    def is_fsync(self):
        return self.kind in ("fsync", "fdatasync", "fsync_fd")

    def mutates(self):
        return self.kind not in ("fsync", "fdatasync", "fsync_fd", "fsyncdir", "sleep0", "hold",
                                 "release")

    def desc(self):
        k = self.kw
        if self.kind in ("create",):
            return "create %s (%d bytes)" % (k["path"], len(k["data"]))
        if self.kind in ("write", "append"):
            return "%s %s @%d +%d" % (self.kind, k["path"], k["off"], len(k["data"]))
        if self.kind == "write_fd":
            return "write_fd #%d (ino %d) @%d +%d" % (k["slot"], k["ino"], k["off"], len(k["data"]))
        if self.kind == "truncate":
            return "truncate %s -> %d" % (k["path"], k["size"])
        if self.kind in ("fsync", "fdatasync"):
            return "%s %s" % (self.kind, k["path"])
        if self.kind == "fsync_fd":
            return "fsync_fd #%d (ino %d)" % (k["slot"], k["ino"])
        if self.kind == "fsyncdir":
            return "fsyncdir /%s" % k["path"]
        if self.kind in ("rename", "link"):
            return "%s %s -> %s" % (self.kind, k["src"], k["dst"])
        if self.kind in ("unlink", "mkdir"):
            return "%s %s" % (self.kind, k["path"])
        if self.kind == "hold":
            return "hold #%d %s" % (k["slot"], k["path"])
        if self.kind == "release":
            return "release #%d" % k["slot"]
        return self.kind


class Workload:
    """A seeded operation sequence. Every choice depends only on the seed and the model, so the
    learning run and every cut run perform the same operations in the same order."""

    WEIGHTS = [("create", 12), ("write", 16), ("append", 9), ("fsync", 16), ("fdatasync", 5),
               ("fsyncdir", 6), ("truncate", 5), ("rename", 5), ("unlink", 4), ("mkdir", 2),
               ("link", 3), ("hold", 2), ("release", 2), ("write_fd", 3), ("fsync_fd", 2),
               ("sleep0", 2)]
    MAX_FILE = 2 * MiB
    MAX_HELD = 3

    def __init__(self, seed, nops, kind="small", cache=None, cp_data="metadata", initial=None,
                 foreign=None, compress=None):
        self.seed, self.nops, self.kind = seed, nops, kind
        # compression: the mount options that make every file the workload creates
        # compressed (the image has the feature); the kernel here cannot check those images
        self.compress = compress
        self.cache = cache      # the powercut mount's cache_size (small: pressure checkpoints)
        self.cp_data = cp_data  # the mount's checkpoint_data=: "metadata" (default) or "all"
        # a foreign image (f2foreign): the State its loaded tree is (durable in the base
        # image's checkpoint; inode ids below 0), and the variant's name (replay lines)
        self.initial = initial
        self.foreign = foreign

    def ops(self):
        """Yields Op objects; the caller applies each to the model (apply) before asking for the
        next one."""
        rng = random.Random("f2powercut-%s-%d" % (self.kind, self.seed))
        self.model = self.initial.copy() if self.initial else State()
        self.held = {}          # slot -> inode id
        self.recent = []        # paths written lately
        self.cp_ns = dict(self.model.ns)    # the names at the last directory fsync
        self.loaded_dirs = len(self.model.dirs()) - 1
        self.next_slot = 0
        self.counter = 100      # above the setup's names
        # Two directories, three files, a checkpoint (so that the files' fsyncs go fast), and
        # an orphan: d1/f2 stays open after its unlink until a random "release", so that
        # checkpoints list it and recovery mounts must free it.
        setup = [("mkdir", "d0"), ("mkdir", "d1"), ("create", "d0/f0"), ("create", "d1/f1"),
                 ("create", "d1/f2"), ("fsyncdir", ""), ("hold", "d1/f2"), ("unlink", "d1/f2")]
        total = 0
        for kind, path in setup:
            if kind == "create":
                op = Op(total, "create", path=path, data=rng.randbytes(self._len(rng)))
            elif kind == "hold":
                self.next_slot += 1
                op = Op(total, "hold", slot=self.next_slot, path=path, ino=self.model.ns[path])
            else:
                op = Op(total, kind, path=path)
            yield op
            total += 1
        for op in self._touch_loaded(rng, total):
            yield op
            total += 1
        names = [k for k, w in self.WEIGHTS]
        weights = [w for k, w in self.WEIGHTS]
        if self.kind == "small":    # few operations: fewer new files, more rewriting of old ones
            weights = [w // 2 if k == "create" else w for k, w in self.WEIGHTS]
        if self.cache:              # a small cache: writes of up to 1 MiB (one FUSE request)
            names.append("burst")   # overflow it, so checkpoints run inside writes
            weights.append(4)
        while total < self.nops:
            op = None
            for _ in range(50):
                op = self._make(rng, rng.choices(names, weights)[0], total)
                if op is not None:
                    break
            if op is None:
                op = Op(total, "sleep0")
            yield op
            total += 1

    def _touch_loaded(self, rng, total):
        """Foreign images: operations on the loaded files first (inside their extents), each
        fsync'ed: an overwrite inside the largest, one across a block boundary, a truncate
        down, an append, a rename and an unlink (the random operations pick them later too)."""
        if not self.initial:
            return
        loaded = sorted((p for p, v in self.initial.ns.items() if v != DIR),
                        key=lambda p: (-len(self.initial.data[self.initial.ns[p]]), p))
        if len(loaded) < 6:
            return
        plan = [("write", loaded[0]), ("write", loaded[1]), ("truncate", loaded[2]),
                ("append", loaded[3]), ("rename", loaded[4]), ("unlink", loaded[5])]
        for kind, p in plan:
            m = self.model
            size = len(m.data[m.ns[p]])
            if kind == "write":
                n = rng.choice([4096, 3 * 4096 + 17, 40 * KiB])
                off = rng.randrange(0, max(1, size - n)) if size > n else 0
                op = Op(total, kind, path=p, off=off, data=rng.randbytes(n))
            elif kind == "truncate":
                op = Op(total, kind, path=p, size=rng.randrange(0, max(1, size)))
            elif kind == "append":
                op = Op(total, kind, path=p, off=size, data=rng.randbytes(rng.randint(1, 9000)))
            elif kind == "rename":
                op = Op(total, kind, src=p, dst=J(os.path.dirname(p), self._name("mv")))
            else:
                op = Op(total, kind, path=p)
            yield op
            total += 1
            if kind in ("write", "truncate", "append"):
                yield Op(total, "fsync", path=p)
                total += 1

    def _name(self, prefix):
        self.counter += 1
        return "%s%d" % (prefix, self.counter)

    def _len(self, rng):
        r = rng.random()
        if r < 0.45:
            return rng.randint(1, 4096)
        if r < 0.8:
            return rng.randint(4097, 32 * KiB)
        return rng.randint(32 * KiB, 200 * KiB)

    def _off(self, rng, size, n):
        r = rng.random()
        if r < 0.5 or size == 0:
            off = rng.randint(0, size)
        elif r < 0.8:
            off = rng.randrange(0, size // 4096 + 1) * 4096
        else:
            off = size + rng.randint(1, 600 * KiB)     # sparse: a hole before the data
        if off + n > self.MAX_FILE:
            off = rng.randint(0, max(0, self.MAX_FILE - n))
        return off

    def _make(self, rng, kind, idx):
        m = self.model
        files, dirs = m.files(), m.dirs()
        if kind == "create":
            d = rng.choice(dirs)
            data = b"" if rng.random() < 0.1 else rng.randbytes(self._len(rng))
            return Op(idx, kind, path=J(d, self._name("f")) if d else self._name("f"), data=data)
        if kind == "mkdir":
            if len(dirs) > 6 + self.loaded_dirs:
                return None
            d = rng.choice(dirs)
            return Op(idx, kind, path=J(d, self._name("d")) if d else self._name("d"))
        if kind == "fsyncdir":
            return Op(idx, kind, path=rng.choice(dirs))
        if kind == "sleep0":
            return Op(idx, kind)
        if kind == "release":
            if not self.held:
                return None
            return Op(idx, kind, slot=rng.choice(sorted(self.held)))
        if kind in ("write_fd", "fsync_fd"):
            if not self.held:
                return None
            slot = rng.choice(sorted(self.held))
            ino = self.held[slot]
            if kind == "fsync_fd":
                return Op(idx, kind, slot=slot, ino=ino)
            n = self._len(rng)
            return Op(idx, kind, slot=slot, ino=ino, off=self._off(rng, len(m.data[ino]), n),
                      data=rng.randbytes(n))
        if not files:
            return None
        p = rng.choice(files)
        ino = m.ns[p]
        size = len(m.data[ino])
        if kind in ("write", "append") and rng.random() < 0.6:
            # mostly a file the last directory fsync (a checkpoint) saw, so that its next fsync
            # goes fast and carries data
            incp = [q for q in files if self.cp_ns.get(q) == m.ns[q]]
            if incp:
                p = rng.choice(incp)
                ino = m.ns[p]
                size = len(m.data[ino])
        if kind == "write":
            n = self._len(rng)
            return Op(idx, kind, path=p, off=self._off(rng, size, n), data=rng.randbytes(n))
        if kind == "burst":
            n = rng.randint(900 * KiB, MiB)
            return Op(idx, "write", path=p, off=self._off(rng, size, n), data=rng.randbytes(n))
        if kind == "append":
            n = self._len(rng)
            if size + n > self.MAX_FILE:
                return None
            return Op(idx, kind, path=p, off=size, data=rng.randbytes(n))
        if kind in ("fsync", "fdatasync"):
            # mostly a file written lately, so that fast fsyncs carry data
            recent = [q for q in self.recent if q in m.ns and m.ns[q] != DIR]
            if recent and rng.random() < 0.7:
                p = rng.choice(recent)
            return Op(idx, kind, path=p)
        if kind == "unlink":
            return Op(idx, kind, path=p)
        if kind == "truncate":
            if size and rng.random() < 0.6:
                new = rng.randint(0, size - 1)
            else:
                new = min(self.MAX_FILE, size + rng.randint(1, 300 * KiB))
            return Op(idx, kind, path=p, size=new)
        if kind in ("rename", "link"):
            others = [q for q in files if m.ns[q] != ino]
            if kind == "rename" and others and rng.random() < 0.3:
                dst = rng.choice(others)             # replaces a file
            else:
                d = rng.choice(dirs)
                dst = J(d, self._name("f")) if d else self._name("f")
            return Op(idx, kind, src=p, dst=dst)
        if kind == "hold":
            if len(self.held) >= self.MAX_HELD:
                return None
            self.next_slot += 1
            return Op(idx, kind, slot=self.next_slot, path=p, ino=ino)
        raise AssertionError(kind)

    def apply(self, op):
        """The operation's effect on the model (and on the held-descriptor table)."""
        m = self.model
        k = op.kind
        if k == "create":
            ino = op.idx
            m.ns[op.path] = ino
            m.data[ino] = op.data
            self.recent = (self.recent + [op.path])[-3:]
        elif k == "mkdir":
            m.ns[op.path] = DIR
        elif k in ("write", "append"):
            ino = m.ns[op.path]
            m.data[ino] = splice(m.data[ino], op.off, op.data)
            self.recent = (self.recent + [op.path])[-3:]
        elif k == "write_fd":
            m.data[op.ino] = splice(m.data[op.ino], op.off, op.data)
        elif k == "truncate":
            ino = m.ns[op.path]
            m.data[ino] = resize(m.data[ino], op.size)
            self.recent = (self.recent + [op.path])[-3:]
        elif k == "rename":
            m.ns[op.dst] = m.ns.pop(op.src)
        elif k == "link":
            m.ns[op.dst] = m.ns[op.src]
        elif k == "unlink":
            del m.ns[op.path]
        elif k == "fsyncdir":
            self.cp_ns = dict(m.ns)
        elif k == "hold":
            self.held[op.slot] = op.ino
        elif k == "release":
            del self.held[op.slot]

    def partial_states(self, op, pre):
        """States a write-type operation passes through on the way from pre to its end, as the
        daemon may see them: the kernel sends one write(2) as several FUSE write requests (it
        ends the first request at the first page boundary when that page is not cached, and
        cuts at max_write), and a checkpoint may run between two requests (cache pressure).
        Every page-boundary prefix of the data is taken (a superset of the real splits)."""
        if op.kind not in ("create", "write", "append", "write_fd"):
            return []
        ino = op.idx if op.kind == "create" else op.ino if op.kind == "write_fd" else \
            pre.ns[op.path]
        off = 0 if op.kind == "create" else op.off
        n = len(op.data)
        out = []
        if op.kind == "create":
            s = pre.copy()
            s.ns[op.path] = ino
            s.data[ino] = b""
            out.append(("created", s))
        first = (off // 4096 + 1) * 4096
        for b in range(first, off + n, 4096):
            k = b - off
            s = pre.copy()
            if op.kind == "create":
                s.ns[op.path] = ino
                s.data[ino] = op.data[:k]
            else:
                s.data[ino] = splice(pre.data[ino], off, op.data[:k])
            out.append(("+%d" % k, s))
        return out

    def target(self, op):
        """The inode an fsync-type operation syncs."""
        if op.kind == "fsync_fd":
            return op.ino
        return self.model.ns[op.path]


# ------------------------------------------------------------------------------------------------
# performing an operation on the mount

def _write_all(fd, data, off):
    done = 0
    while done < len(data):
        n = os.pwrite(fd, data[done:], off + done)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        done += n


def perform(op, mnt, fds):
    """Does op on the mounted file system. fds: slot -> open descriptor (held files)."""
    k = op.kind
    P = (lambda p: J(mnt, p) if p else mnt)
    if k == "create":
        fd = os.open(P(op.path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            if op.data:
                _write_all(fd, op.data, 0)
        finally:
            os.close(fd)
    elif k == "mkdir":
        os.mkdir(P(op.path))
    elif k in ("write", "append"):
        fd = os.open(P(op.path), os.O_WRONLY)
        try:
            _write_all(fd, op.data, op.off)
        finally:
            os.close(fd)
    elif k == "write_fd":
        _write_all(fds[op.slot], op.data, op.off)
    elif k == "truncate":
        os.truncate(P(op.path), op.size)
    elif k in ("fsync", "fdatasync"):
        fd = os.open(P(op.path), os.O_RDWR)
        try:
            (os.fsync if k == "fsync" else os.fdatasync)(fd)
        finally:
            os.close(fd)
    elif k == "fsync_fd":
        os.fsync(fds[op.slot])
    elif k == "fsyncdir":
        fd = os.open(P(op.path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    elif k == "rename":
        os.rename(P(op.src), P(op.dst))
    elif k == "link":
        os.link(P(op.src), P(op.dst))
    elif k == "unlink":
        os.unlink(P(op.path))
    elif k == "hold":
        fds[op.slot] = os.open(P(op.path), os.O_RDWR)
    elif k == "release":
        os.close(fds.pop(op.slot))
    elif k == "sleep0":
        time.sleep(0)
    else:
        raise AssertionError(k)


# ------------------------------------------------------------------------------------------------
# the power-cut mount

class Watchdog:
    """Kills a process when armed for too long (a hung FUSE request then fails with ENOTCONN)."""

    def __init__(self, proc):
        self.proc = proc
        self.fired = None
        self._t = None

    def arm(self, seconds, what):
        self.disarm()

        def fire():
            self.fired = what
            log("WATCHDOG: %s took over %ds; killing the daemon" % (what, seconds))
            try:
                self.proc.send_signal(signal.SIGKILL)
            except OSError:
                pass
        self._t = threading.Timer(seconds, fire)
        self._t.daemon = True
        self._t.start()

    def disarm(self):
        if self._t:
            self._t.cancel()
            self._t = None


class DaemonError(Exception):
    pass


class CutDaemon:
    """`f2fuse -f -o OPTS IMG MNT` started by hand: it is meant to be SIGKILLed after the cut."""

    def __init__(self, binary, img, mnt, opts, errpath, env=None):
        self.binary, self.img, self.mnt, self.opts = binary, img, mnt, opts
        self.errpath = errpath
        os.makedirs(mnt, exist_ok=True)
        self.argv = [binary, "-f", "-o", opts, img, mnt]
        with open(errpath, "wb") as ef:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=ef, env=env)
        self.dog = Watchdog(self.proc)
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not T.is_mounted(mnt):
            if self.proc.poll() is not None:
                raise DaemonError("powercut daemon exited %s before the mount was live: %s" %
                                  (self.proc.returncode, T.tail(self.stderr(), 6)))
            if time.monotonic() > deadline:
                self.kill()
                raise DaemonError("powercut daemon: no mount after %ds" % MOUNT_TIMEOUT)
            time.sleep(0.005)

    def stderr(self):
        return T._read(self.errpath)

    def stat(self):
        return read_stat(self.mnt, self.binary)

    def wait_cut(self, timeout=20):
        """Waits until the device holds its post-cut content; returns the counters."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.stat()
            if st.get("blk.powercut.cut"):
                return st
            if time.monotonic() > deadline:
                raise DaemonError("the cut began (dropped_writes %d) but blk.powercut.cut stayed 0 "
                                  "for %ds" % (st.get("blk.powercut.dropped_writes", -1), timeout))
            time.sleep(0.005)

    def kill(self):
        """SIGKILL, reap, lazy unmount. Returns the exit status (negative: a signal)."""
        self.dog.disarm()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        if T.is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30)
        return self.proc.returncode

    def unmount(self, timeout=60):
        """Clean unmount: fusermount3 -u, then wait for the daemon to exit (its final checkpoint).
        Returns (exit status, problem or None)."""
        self.dog.disarm()
        problem = None
        p = subprocess.run(["fusermount3", "-u", self.mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
        if p.returncode != 0:
            problem = "fusermount3 -u failed: %s" % p.stdout.decode(errors="replace").strip()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            problem = "daemon still running %ds after the unmount (hang)" % timeout
            self.kill()
        if T.is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30)
        return self.proc.returncode, problem


# ------------------------------------------------------------------------------------------------
# running the workload with the durability record

class Record:
    """What the run learned: the durable checkpoint candidates (d_alts), the durable fast fsyncs
    since (fast: inode -> content), and where the cut fell."""

    def __init__(self, initial=None):
        # (label, state): the base image: nothing of ours, or a foreign image's loaded tree
        self.d_alts = [("", initial.copy() if initial else State())]
        self.cut_partials = []
        self.d_op = None            # the operation whose checkpoint is the last durable one
        self.fast = {}
        self.fast_names = {}        # inode -> its path at its fast fsync (a new file's name)
        self.fast_ops = []
        self.synced = set()         # inodes whose fsync/fdatasync returned durably
        self.op_writes = []         # blk.write.ops after each operation
        self.cut_op = None          # the Op during which the cut began
        self.cut_pre = None         # model before it
        self.cut_post = None        # model after it
        self.cut_target = None      # inode it fsync'ed
        self.cut_stat_delta = {}
        self.final = None           # model at the end (no cut during the operations)
        self.cut_at_unmount = False
        self.error = None           # a failure during the workload
        self.ops_done = 0
        self.odd = []               # unexpected things (device writes outside checkpoints...)
        self.versions = {}          # inode -> {block index: set of 4 KiB contents it ever had}
        self.exact = {}             # inode -> content an fsync made durable, no write since
        if initial:                 # the loaded files: durable in the base image, exactly
            self.note_versions(None, initial)
            self.exact.update(initial.data)

    def note_versions(self, pre, post):
        """Remembers the blocks of every file whose content differs between pre and post."""
        for v, data in post.data.items():
            if pre is not None and pre.data.get(v) is data:
                continue
            blocks = self.versions.setdefault(v, {})
            for i in range(0, len(data), 4096):
                blocks.setdefault(i // 4096, set()).add(data[i:i + 4096].ljust(4096, b"\0"))
            self.exact.pop(v, None)


DELTA_KEYS = ("checkpoint.written", "checkpoint.requests", "fsync.fast", "fsync.checkpoint",
              "blk.write.ops", "blk.flush.ops")


def run_workload(wl, daemon, rec, verbose=False):
    """Runs the workload on daemon's mount until it ends or the cut begins. Fills rec."""
    fds = {}
    mnt = daemon.mnt
    try:
        st0 = daemon.stat()
    except StatError as e:
        rec.error = "cannot read counters: %s" % e
        return fds
    if cut_began(st0):
        rec.error = "the cut began before any operation (at mount)"
        return fds
    gen = wl.ops()
    for op in gen:
        pre = wl.model.copy()
        target = wl.target(op) if op.is_fsync() else None
        daemon.dog.arm(OP_TIMEOUT, "op %d (%s)" % (op.idx, op.desc()))
        err = None
        try:
            perform(op, mnt, fds)
        except OSError as e:
            err = e
        daemon.dog.disarm()
        wl.apply(op)
        post = wl.model.copy()
        rec.note_versions(pre, post)
        try:
            st1 = daemon.stat()
        except StatError as e:
            rec.error = "op %d (%s): counters unreadable afterwards: %s%s" % (
                op.idx, op.desc(), e, " (the op failed: %s)" % err if err else "")
            if daemon.dog.fired:
                rec.error += "; the watchdog fired: the op hung"
            return fds
        delta = dict((k, st1.get(k, 0) - st0.get(k, 0)) for k in DELTA_KEYS)
        rec.ops_done = op.idx + 1
        if cut_began(st1):
            rec.cut_op, rec.cut_pre, rec.cut_post, rec.cut_target = op, pre, post, target
            rec.cut_partials = wl.partial_states(op, pre)
            for tag, st in rec.cut_partials:
                rec.note_versions(pre, st)
            rec.cut_stat_delta = delta
            if verbose:
                log("   op %d %s: cut began (%s)" % (op.idx, op.desc(), delta))
            return fds
        if err is not None:
            rec.error = "op %d (%s) failed before the cut: %s%s" % (
                op.idx, op.desc(), err, diagnose(op, mnt, pre, daemon))
            return fds
        rec.op_writes.append(st1.get("blk.write.ops", 0))
        if delta["checkpoint.written"] > 0:
            # durable: the whole state after the op; before it, or part way through a write,
            # when a pressure/space checkpoint ran ahead of or inside the op's change
            if not op.mutates():
                rec.d_alts = [("", post)]
            else:
                partials = wl.partial_states(op, pre)
                for tag, st in partials:
                    rec.note_versions(pre, st)
                rec.d_alts = [("pre", pre)] + partials + [("post", post)]
            rec.d_op = op
            rec.fast = {}
            rec.fast_names = {}
            rec.fast_ops = []
            if not op.is_fsync() and not op.kind == "fsyncdir":
                rec.odd.append("op %d (%s) wrote a checkpoint" % (op.idx, op.desc()))
        if op.is_fsync():
            rec.synced.add(target)
            if target in post.data:
                rec.exact[target] = post.data[target]
            if delta["fsync.fast"] > 0 and delta["checkpoint.written"] == 0:
                rec.fast[target] = post.data[target]
                names = post.names_of(target)
                if len(names) == 1:
                    rec.fast_names[target] = names[0]
                rec.fast_ops.append(op.idx)
        elif delta["blk.write.ops"] and delta["checkpoint.written"] == 0 and op.kind != "fsyncdir":
            rec.odd.append("op %d (%s) wrote %d blocks without a checkpoint" %
                           (op.idx, op.desc(), delta["blk.write.ops"]))
        if verbose:
            log("   op %d %s: %s; cache pages %s dirty %s" % (
                op.idx, op.desc(), " ".join("%s +%d" % (k, v) for k, v in delta.items() if v),
                st1.get("cache.pages"), st1.get("cache.dirty_pages")))
        st0 = st1
    rec.final = wl.model.copy()
    return fds


def diagnose(op, mnt, pre, daemon):
    """What the mount shows right after an operation failed unexpectedly: the parent
    directory's listing (daemon's view now, and again after a moment), the paths' lstat, the
    daemon's stderr. For the bug report."""
    out = []
    paths = [getattr(op, a) for a in ("path", "src", "dst") if a in op.kw]
    for p in paths:
        parent = os.path.dirname(p)
        full = J(mnt, parent) if parent else mnt
        want = sorted(os.path.basename(q) for q in pre.ns
                      if os.path.dirname(q) == parent)
        for attempt in (1, 2):
            try:
                got = sorted(os.listdir(full))
                out.append("listing of /%s (try %d): %s; the model expects %s" % (
                    parent, attempt, got, want))
            except OSError as e:
                out.append("listing of /%s (try %d): %s" % (parent, attempt, e))
            try:
                st = os.lstat(J(mnt, p))
                out.append("lstat %s (try %d): ino %d size %d nlink %d" % (
                    p, attempt, st.st_ino, st.st_size, st.st_nlink))
            except OSError as e:
                out.append("lstat %s (try %d): %s" % (p, attempt, e))
            time.sleep(0.5)
    try:
        st = daemon.stat()
        out.append("counters: " + " ".join("%s=%s" % (k, st.get(k)) for k in (
            "checkpoint.written", "cache.pages", "cache.dirty_pages", "cache.evictions",
            "discard.ranges_issued", "discard.pending", "discard.inflight", "fs.corrupt_hits",
            "blk.powercut.cut", "blk.powercut.dropped_writes")))
    except StatError as e:
        out.append("counters: %s" % e)
    out.append("daemon stderr: " + (T.tail(daemon.stderr(), 8) or "(empty)"))
    return "\n      " + "\n      ".join(out)


def candidate_worlds(rec):
    """[(name, State)] the recovered mount may equal."""
    worlds = []
    for tag, d in rec.d_alts:
        worlds.append(("W1%s" % ("/" + tag if tag else ""), d.overlay(rec.fast, rec.fast_names)))
    op = rec.cut_op
    if op is not None:
        dl = rec.cut_stat_delta
        if op.is_fsync() and dl.get("fsync.fast", 0) > 0 and rec.cut_target is not None:
            f2, n2 = dict(rec.fast), dict(rec.fast_names)
            f2[rec.cut_target] = rec.cut_post.data[rec.cut_target]
            names = rec.cut_post.names_of(rec.cut_target)
            if len(names) == 1:
                n2[rec.cut_target] = names[0]
            for tag, d in rec.d_alts:
                worlds.append(("W2", d.overlay(f2, n2)))
        if dl.get("checkpoint.written", 0) > 0 or dl.get("checkpoint.requests", 0) > 0:
            worlds.append(("W3", rec.cut_pre))
            if op.mutates():
                worlds += [("W3/" + tag, st) for tag, st in rec.cut_partials]
                worlds.append(("W4", rec.cut_post))
    elif rec.final is not None:
        worlds.append(("Wfinal", rec.final))
    return worlds


# ------------------------------------------------------------------------------------------------
# reading back and comparing

def read_tree(mnt):
    """{relpath: (DIR,) | ("f", st_ino, nlink, size, bytes) | ("other", mode)}; lost+found at the
    root is left out."""
    res = {}

    def walk(rel):
        full = J(mnt, rel) if rel else mnt
        for name in sorted(os.listdir(full)):
            if not rel and name == "lost+found":
                continue
            r = J(rel, name) if rel else name
            st = os.lstat(J(mnt, r))
            if stat.S_ISDIR(st.st_mode):
                res[r] = (DIR,)
                walk(r)
            elif stat.S_ISREG(st.st_mode):
                with open(J(mnt, r), "rb", buffering=0) as f:
                    data = f.read()
                    while True:
                        more = f.read()
                        if not more:
                            break
                        data += more
                res[r] = ("f", st.st_ino, st.st_nlink, st.st_size, data)
            else:
                res[r] = ("other", st.st_mode)
    walk("")
    return res


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(n, i + 4096)):
                if a[j] != b[j]:
                    return j
    return n if len(a) != len(b) else -1


def loose_diff(got, want, versions):
    """With checkpoint_data=metadata: None when content got can be what a file whose world
    content is want holds (same size; each block zeros or a version it had), else why not."""
    if len(got) != len(want):
        return "size %d (expected %d)" % (len(got), len(want))
    for i in range(0, len(got), 4096):
        # Only the part before the end is visible: a truncate's zeroed tail of the last block may
        # not have been written back when the checkpoint recorded the new size, so the block can
        # be an older version whose tail is not zero (data_zero_past_end zeroes it on growth).
        blk = got[i:i + 4096]
        n = len(blk)
        if blk.count(0) != n and all(v[:n] != blk for v in versions.get(i // 4096, ())):
            return "block %d holds neither zeros nor any content it ever had" % (i // 4096)
    return None


def world_diff(actual, world, limit=8, loose=None):
    """Differences between the tree read back and a world; [] when equal.  loose: the Record,
    with checkpoint_data=metadata (see the module's docstring)."""
    out = []
    exp_paths, act_paths = set(world.ns), set(actual)
    for p in sorted(exp_paths - act_paths):
        out.append("missing %s %s" % ("directory" if world.ns[p] == DIR else "file", p))
    for p in sorted(act_paths - exp_paths):
        out.append("unexpected %s %s" % ("directory" if actual[p][0] == DIR else "entry", p))
    groups = {}
    for p in sorted(exp_paths & act_paths):
        w, a = world.ns[p], actual[p]
        if w == DIR:
            if a[0] != DIR:
                out.append("%s: directory expected, found %s" % (p, a[0]))
            continue
        if a[0] != "f":
            out.append("%s: regular file expected, found %s" % (p, a[0]))
            continue
        want = world.data[w]
        got = a[4]
        if loose is not None and loose.exact.get(w) != want:
            why = loose_diff(got, want, loose.versions.get(w, {}))
            if why:
                out.append("%s: %s (data not written back: checkpoint_data=metadata)" % (p, why))
        elif a[3] != len(want) or got != want:
            fd = first_diff(want, got)
            out.append("%s: size %d (expected %d), content %s" % (
                p, a[3], len(want), "equal" if got == want else "differs from byte %d" % fd))
        groups.setdefault(w, set()).add(a[1])
    # hard links: one st_ino per model inode, different model inodes -> different st_ino,
    # nlink = names
    seen = {}
    for w, inos in groups.items():
        names = world.names_of(w)
        if len(inos) != 1:
            out.append("names %s are one file, found as inodes %s" % (names, sorted(inos)))
            continue
        i = next(iter(inos))
        if i in seen:
            out.append("names %s and %s are different files, found as one inode %d" %
                       (names, world.names_of(seen[i]), i))
        seen[i] = w
        nl = actual[names[0]][2] if names[0] in actual else None
        if nl is not None and nl != len(names):
            out.append("%s: nlink %d, expected %d" % (names[0], nl, len(names)))
    return out[:limit] + (["... %d more" % (len(out) - limit)] if len(out) > limit else [])


def durability_violations(actual, rec):
    """The brief's rule, looser than the worlds: for each inode whose last fsync returned
    durably, the content must be one of its states since (W1's content, or anything later the
    workload wrote — here: the model state before/after the cut op); checkpointed directories
    must exist. Returns a list of strings (empty: the rule holds)."""
    out = []
    base = rec.d_alts[-1][1].overlay(rec.fast, rec.fast_names)
    later = [s for s in (rec.cut_pre, rec.cut_post, rec.final) if s is not None]
    later += [st.overlay(rec.fast, rec.fast_names) for tag, st in rec.d_alts[:-1]]
    later += [st for tag, st in rec.cut_partials]
    for p, v in sorted(base.ns.items()):
        if v == DIR:
            if p not in actual or actual[p][0] != DIR:
                ok = any(s.ns.get(p) != DIR for s in later)
                if not ok:
                    out.append("checkpointed directory %s is missing" % p)
            continue
        if v not in rec.synced:
            continue
        a = actual.get(p)
        if a is None or a[0] != "f":
            if all(s.ns.get(p) == v for s in later):
                out.append("fsync'ed file %s is missing" % p)
            continue
        okv = [base.data[v]] + [s.data[v] for s in later if v in s.data]
        if a[4] not in okv:
            out.append("fsync'ed file %s: size %d holds none of its states since the fsync "
                       "(expected %d bytes, first diff at %d)" %
                       (p, a[3], len(base.data[v]), first_diff(base.data[v], a[4])))
    return out


def match_worlds(actual, worlds, loose=None):
    """(name of the first world that equals actual, or None; {name: diffs}).  loose: see
    world_diff; Wfinal (the unmount's checkpoint, which writes all data) is always exact."""
    diffs = {}
    for name, w in worlds:
        d = world_diff(actual, w, loose=None if name == "Wfinal" else loose)
        if not d:
            return name, diffs
        diffs.setdefault(name, d)
    return None, diffs


def count_synced(actual, world, rec):
    """Files of the matched world whose content an fsync had made durable."""
    return sum(1 for p, v in world.ns.items() if v != DIR and v in rec.synced and p in actual)


# ------------------------------------------------------------------------------------------------
# one cut

class Totals:
    def __init__(self):
        self.cuts = 0               # runs with a cut point (learning runs not counted)
        self.cut_in_ops = 0
        self.cut_at_unmount = 0
        self.no_cut = 0
        self.torn = 0
        self.synced_verified = 0
        self.files_verified = 0
        self.replayed = 0           # recoveries with recovery.inodes > 0
        self.fsck_runs = 0
        self.worlds = {}
        self.failed_cases = []      # replay commands
        self.san_recoveries = 0
        self.odd = set()
        self.kinds = {}             # failure kind -> [replay commands]
        every = KERNEL_EVERY if KERNEL_EVERY is not None else \
            K.kernel_every(KERNEL_CI_EVERY, KERNEL_LONG_EVERY)
        self.kernel = K.Sample(every)   # .boots: kernel checks (kernel_agrees + its recovery)

    @property
    def kernel_checks(self):
        return self.kernel.boots


def fsck_cut_image(img):
    """f2test.fsck's clean rule, for an image right after a cut, with one line allowed: when the
    cut hit the last block of a checkpoint pack, that block holds what the area held before
    (zeros, or another block of an older, longer or shorter pack), fsck names that pack
    ("Invalid CP CRC offset: N") and goes on with the other one - what the second pack is
    for, and what the kernel does. Returns (clean, rc, output, odd lines)."""
    import re
    clean, rc, out = T.fsck(img)
    odd = [l for l in T.fsck_odd_lines(out, 10 ** 6)
           if not re.match(r"^\s*Invalid CP CRC offset: \d+\s*$", l)]
    if not clean:
        full = re.search(r"^\[FSCK\] other corrupted bugs\s+\[Ok\.\.\]", out, re.M) is not None
        clean = rc == 0 and full and not odd
    if not clean and "record_fsync_data failed" in out:
        why = T.fsck_tools_por_bug(img)     # fsck 1.15's own bound bug: recovery is checked later
        if why:
            log("   TOOLS BUG tolerated before recovery: " + why)
            return True, rc, out, []
    return clean, rc, out, odd or T.fsck_odd_lines(out, 10)


def check_extents(img, fail, where):
    """Every inode's largest extent (i_ext) true after a mount wrote the image."""
    sub = T.Checker(limit=0)
    T.check_extents(img, sub, where + ": ")
    for f in sub.failures[:5]:
        fail("extent not true " + f)


def kernel_check(img, kcut, fail, chk, tot, label):
    """The kernel reads the final image as f2fuse does, and its recovery of kcut (the image as
    the cut left it) gives f2fuse's recovered tree; failures carry the replay line."""
    sub = T.Checker(limit=0)
    try:
        tot.kernel.check(img, sub, label, recover=kcut)
    finally:
        os.unlink(kcut)
    chk.checks += sub.checks
    for f in sub.failures[:10]:
        fail("the kernel disagrees: " + f)


def replay_cmd(wl, cut, torn_seed):
    me = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_powercut"),
                         T.ROOT)
    return "F2FUSE_SEED=%d %s --workload %s --ops %d%s%s%s%s --cut %d%s" % (
        wl.seed, me, wl.kind, wl.nops, " --cache-size %s" % wl.cache if wl.cache else "",
        " --checkpoint-data all" if wl.cp_data == "all" else "",
        " --foreign %s" % wl.foreign if wl.foreign else "",
        " --compress" if wl.compress else "", cut,
        " --torn-seed %d" % torn_seed if torn_seed is not None else "")


def close_fds(fds):
    for fd in list(fds.values()):
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


def run_case(base, wd, wl, cut, torn_seed, chk, tot, san=False, learn=False, verbose=False,
             quiet=False):
    """run_case_inner, with any exception of the test itself reported as a failure (and every
    daemon it started killed, every mount under wd undone)."""
    holder = {}
    nfail0 = len(chk.failures)
    try:
        return _run_case(base, wd, wl, cut, torn_seed, chk, tot, san, learn, verbose, quiet, holder)
    finally:
        for f in chk.failures[nfail0:]:
            tot.kinds.setdefault(failure_kind(f), []).append(
                "learning run of %s seed %d" % (wl.kind, wl.seed) if learn
                else replay_cmd(wl, cut, torn_seed))


def failure_kind(msg):
    """A failure message without its context, numbers and replay line: groups like failures."""
    import re
    lines = [l for l in msg.split("\n") if l.strip() and "replay:" not in l]
    head = re.sub(r"^\[[^]]*\] ", "", lines[0]) if lines else msg
    detail = ""
    for l in lines[1:]:
        if l.strip().startswith(("vs ", "last durable")):
            continue
        detail = l.strip()
        break
    text = re.sub(r"\S*/mnt/", "mnt/", head + " | " + detail)
    return re.sub(r"(?<![A-Za-z])\d+", "N", text)[:220]


def _run_case(base, wd, wl, cut, torn_seed, chk, tot, san, learn, verbose, quiet, holder):
    try:
        rec = run_case_inner(base, wd, wl, cut, torn_seed, chk, tot, san, learn, verbose, quiet,
                             holder)
        if not hasattr(rec, "ok"):      # an early return: the failure is recorded already
            rec.ok, rec.where = False, "aborted"
            if not learn:
                tot.cuts += 1
                tot.torn += torn_seed is not None
                tot.failed_cases.append(replay_cmd(wl, cut, torn_seed))
            log("FAIL  %s seed %d cut %s%s: aborted (see above)" % (
                wl.kind, wl.seed, cut, " torn/%d" % torn_seed if torn_seed is not None else ""))
            chk.context = ""
            T._unmount_all_under(wd)
        return rec
    except Exception:
        import traceback
        chk.fail("test error in %s seed %d cut %s: %s\n    replay: %s" % (
            wl.kind, wl.seed, cut, traceback.format_exc(), replay_cmd(wl, cut, torn_seed)))
        d = holder.get("daemon")
        if d is not None:
            d.kill()
        T._unmount_all_under(wd)
        if not learn:
            tot.cuts += 1
            tot.failed_cases.append(replay_cmd(wl, cut, torn_seed))
        rec = holder.get("rec") or Record()
        rec.ok = False
        rec.where = "error"
        return rec


def run_case_inner(base, wd, wl, cut, torn_seed, chk, tot, san, learn, verbose, quiet, holder):
    """One run: cut at device write `cut` (torn with powercut_seed=torn_seed unless None).
    learn=True: no cut (powercut=10**9, armed so every write is counted as in the cut runs);
    returns the Record (op_writes, and `unmount_estimate`: writes of one extra checkpoint)."""
    t0 = time.monotonic()
    img, mnt = J(wd, "img"), J(wd, "mnt")
    subprocess.run(["cp", "--sparse=always", base, img], check=True, timeout=60)
    opts = "rw,checkpoint_interval=0,checkpoint_data=%s,powercut=%d" % (
        wl.cp_data, 10 ** 9 if learn else cut)
    if torn_seed is not None:
        opts += ",powercut_torn,powercut_seed=%d" % torn_seed
    if wl.cache:
        opts += ",cache_size=%s" % wl.cache
    if wl.compress:
        opts += "," + wl.compress
    label = "learn" if learn else "cut %d%s" % (cut, " torn/%d" % torn_seed if torn_seed is not None
                                                 else "")
    chk.context = "%s seed %d %s" % (wl.kind, wl.seed, label)
    replay = None if learn else replay_cmd(wl, cut, torn_seed)
    nfail0 = len(chk.failures)
    rec = Record(wl.initial)
    holder["rec"] = rec

    def fail(msg):
        chk.fail(msg + ("\n    replay: %s" % replay if replay else ""))

    try:
        daemon = CutDaemon(T.F2FUSE_BIN, img, mnt, opts, J(wd, "cut.stderr"))
        holder["daemon"] = daemon
    except DaemonError as e:
        fail(str(e))
        return rec
    fds = run_workload(wl, daemon, rec, verbose=verbose)
    where = None
    if rec.error:
        fail(rec.error)
        daemon.kill()
        close_fds(fds)
        return rec
    if rec.cut_op is not None:
        try:
            daemon.wait_cut()
        except (DaemonError, StatError) as e:
            fail("op %d (%s): %s" % (rec.cut_op.idx, rec.cut_op.desc(), e))
            daemon.kill()
            close_fds(fds)
            return rec
        rc = daemon.kill()
        close_fds(fds)
        if rc != -signal.SIGKILL:
            fail("the powercut daemon exited by itself (status %s) before the SIGKILL:\n%s" %
                 (rc, T.tail(daemon.stderr(), 10)))
        where = "op %d %s" % (rec.cut_op.idx, rec.cut_op.desc())
        tot.cut_in_ops += not learn
    else:
        if learn:
            # the unmount's checkpoint writes about what one more checkpoint writes now
            try:
                s0 = daemon.stat()
                fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(fd)
                os.close(fd)
                s1 = daemon.stat()
                rec.unmount_estimate = s1["blk.write.ops"] - s0["blk.write.ops"]
            except (OSError, StatError) as e:
                fail("learning run: the extra checkpoint failed: %s" % e)
                rec.unmount_estimate = 0
        close_fds(fds)
        rc, problem = daemon.unmount()
        if problem:
            fail(problem + "\n" + T.tail(daemon.stderr(), 10))
        elif rc != 0:
            fail("the powercut daemon exited %s at unmount:\n%s" % (rc, T.tail(daemon.stderr(), 10)))
        if CUT_LOG in daemon.stderr():
            rec.cut_at_unmount = True
            where = "unmount"
            tot.cut_at_unmount += not learn
            if learn:
                fail("learning run: a cut happened although powercut=10**9")
        else:
            where = "none (past the last write)"
            tot.no_cut += not learn
    rep = T.sanitizer_report(daemon.stderr())
    if rep:
        fail("sanitizer report from the powercut daemon:\n" + rep)
    if rec.cut_at_unmount:
        # the final checkpoint may or may not have committed
        worlds = candidate_worlds(rec)
    elif rec.final is not None:
        worlds = [("Wfinal", rec.final)]
    else:
        worlds = candidate_worlds(rec)

    # ---- recover, check, unmount, fsck, mount, re-check, unmount, fsck
    binary, env = T.F2FUSE_BIN, None
    if san and T.have_bin(T.F2FUSE_SAN_BIN):
        binary, env = T.F2FUSE_SAN_BIN, T.san_env()
        tot.san_recoveries += 1
    matched, actual, replayed = None, None, None
    kcut = None
    # the kernel's sample: cuts that left a roll-forward chain (fast fsyncs after the last
    # durable checkpoint), the ones that tell most; earlier cuts of a run see an empty tree
    chain = (rec.cut_op is not None or rec.cut_at_unmount) and rec.fast_ops
    if not learn and chain and not wl.compress and tot.kernel.due(
            (wl.kind, wl.seed, wl.cp_data, wl.cache, wl.foreign)):
        kcut = img + ".kernel-cut"      # for the kernel's own recovery, before f2fuse's
        subprocess.run(["cp", "--sparse=always", img, kcut], check=True, timeout=60)
    try:
        if os.environ.get("F2FUSE_KEEP", "") not in ("", "0"):
            # the image as the cut left it, before recovery touches it
            subprocess.run(["cp", "--sparse=always", img, img + ".cut"], check=True, timeout=60)
        if PRECUT_FSCK:
            # The image as the cut left it must be one the kernel's tools accept: fsck.f2fs
            # checks the checkpoint and walks the roll-forward chain (record_fsync_data)
            # without writing. A kernel mount would replay that chain itself.
            clean, rc, out, odd = fsck_cut_image(img)
            chk.checks += 1
            tot.fsck_runs += 1
            if not clean:
                fail("fsck.f2fs of the image as the cut left it (before f2fuse's recovery) is not "
                     "clean (exit %s):\n    %s" % (rc, "\n    ".join(odd[:10])))
        with T.Mount(binary, img, J(wd, "rmnt"), "rw", checker=chk, timeout=MOUNT_TIMEOUT,
                     env=env) as m:
            m.watchdog(CHECK_TIMEOUT)
            try:
                st = read_stat(m.path, binary)
                replayed = st.get("recovery.inodes", 0)
                actual = read_tree(m.path)
            except (OSError, StatError) as e:
                fail("reading the recovered mount: %s" % e)
            m.cancel_watchdog()
    except T.MountFailed as e:
        fail("the mount after the cut failed: %s" % e)
        if kcut:
            os.unlink(kcut)
        return rec
    if actual is not None:
        matched, diffs = match_worlds(actual, worlds,
                                      loose=rec if wl.cp_data == "metadata" else None)
        if matched is None:
            viol = durability_violations(actual, rec)
            lines = ["the recovered tree matches no possible state (cut during %s)" % where]
            if rec.d_op is not None:
                lines.append("  last durable checkpoint: op %d %s; fast fsyncs since: ops %s" %
                             (rec.d_op.idx, rec.d_op.desc(), rec.fast_ops))
            if viol:
                lines.append("  DURABILITY VIOLATED:")
                lines += ["    " + v for v in viol]
            for name, d in diffs.items():
                lines.append("  vs %s:" % name)
                lines += ["    " + x for x in d]
            fail("\n".join(lines))
        else:
            chk.checks += 1
            import re
            key = re.sub(r"/(\+\d+|created)$", "/mid-write", matched)
            tot.worlds[key] = tot.worlds.get(key, 0) + 1
            w = dict(worlds)[matched]
            nf = sum(1 for v in w.ns.values() if v != DIR)
            ns = count_synced(actual, w, rec)
            if not learn:
                tot.files_verified += nf
                tot.synced_verified += ns
    if replayed and not learn:
        tot.replayed += 1
    clean, rc, out = T.fsck(img)
    chk.checks += 1
    tot.fsck_runs += 1
    if not clean:
        fail("fsck.f2fs after the recovery mount is not clean (exit %s):\n    %s" %
             (rc, "\n    ".join(T.fsck_odd_lines(out, 10))))
    check_extents(img, fail, "after the recovery mount")
    try:
        with T.Mount(T.F2FUSE_BIN, img, J(wd, "cmnt"), "rw", checker=chk,
                     timeout=MOUNT_TIMEOUT) as m:
            m.watchdog(CHECK_TIMEOUT)
            try:
                again = read_tree(m.path)
                st2 = read_stat(m.path)
                if st2.get("recovery.inodes", 0):
                    fail("the second mount replayed %d inode(s) again" % st2["recovery.inodes"])
                if actual is not None and again != actual:
                    d = sorted(set(again) ^ set(actual)) or \
                        [p for p in sorted(actual) if again.get(p) != actual[p]]
                    fail("the tree changed between the first and second mount after the cut: %s" %
                         d[:6])
            except (OSError, StatError) as e:
                fail("reading the second mount: %s" % e)
            m.cancel_watchdog()
    except T.MountFailed as e:
        fail("the second mount failed: %s" % e)
    clean, rc, out = T.fsck(img)
    chk.checks += 1
    tot.fsck_runs += 1
    if not clean:
        fail("fsck.f2fs after the second mount is not clean (exit %s):\n    %s" %
             (rc, "\n    ".join(T.fsck_odd_lines(out, 10))))
    check_extents(img, fail, "after the second mount")
    if kcut:
        kernel_check(img, kcut, fail, chk, tot, label)
    ok = len(chk.failures) == nfail0
    if not learn:
        tot.cuts += 1
        tot.torn += torn_seed is not None
        if not ok:
            tot.failed_cases.append(replay)
    tot.odd.update(rec.odd)
    if not quiet or not ok:
        log("%-5s %-18s cut in %-44s -> %s; %s files (%s fsync'ed) checked; recovery.inodes %s; "
            "fsck %s  %.2fs" % (
                "ok" if ok else "FAIL", label, where[:44], matched or "NO MATCH",
                nf if matched else "-", ns if matched else "-", replayed,
                "clean x2" if ok else "see above", time.monotonic() - t0))
    chk.context = ""
    rec.ok = ok
    rec.where = where
    return rec
