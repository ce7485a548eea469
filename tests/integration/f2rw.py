"""Shared helpers for the f2fuse read-write integration tests (Python 3 stdlib only).

Builds on f2test.py (owned by the read-path tests; not edited here):
  - libc wrappers (ctypes): renameat2, fallocate, raw getxattr with a caller-chosen buffer size
  - RwMount            f2test.Mount that can also SIGKILL its daemon on purpose (crash tests)
  - Ctx                one sub-test: fresh images, rw mounts with a watchdog, fsck as the oracle
                       (failures print the odd fsck lines), the "workload -> unmount -> fsck ->
                       remount -> verify -> unmount -> fsck" cycle every sub-test ends with
  - expect_errno()     an operation must fail with one errno (or one of several)
  - data helpers       deterministic content, sha256 of files, small source trees
  - offline_read()     file content read straight from the image with f2test.F2fsImage
  - run_subtests()     runs named sub-tests, prints PASS/FAIL per sub-test and a summary

Environment (besides f2test's): F2FUSE_RW_FILTER=regex runs only matching sub-tests;
F2FUSE_RW_SAN=1 runs the daemon from F2FUSE_SAN_BIN (ASan+UBSan) instead of F2FUSE_BIN.
"""

import ctypes
import ctypes.util
import errno
import hashlib
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
import traceback
import zlib

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import f2test as T      # noqa: E402

log = T.log
J = os.path.join
BLK = T.BLK
MiB = 1 << 20
GiB = 1 << 30

# ------------------------------------------------------------------------------------------------
# libc

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02

_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                            ctypes.c_uint]
_libc.renameat2.restype = ctypes.c_int
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int
_libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.getxattr.restype = ctypes.c_ssize_t
_libc.listxattr.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.listxattr.restype = ctypes.c_ssize_t


def _oserr(path=None):
    e = ctypes.get_errno()
    return OSError(e, os.strerror(e), path)


def renameat2(old, new, flags=0):
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        raise _oserr(old)


def fallocate(fd, mode, off, length):
    if _libc.fallocate(fd, mode, off, length) != 0:
        raise _oserr()


def getxattr_raw(path, name, size):
    """getxattr(2) with a buffer of `size` bytes: returns the length (size 0: the size needed)."""
    buf = ctypes.create_string_buffer(max(size, 1))
    n = _libc.getxattr(os.fsencode(path), name.encode(), buf if size else None, size)
    if n < 0:
        raise _oserr(path)
    return n


def listxattr_raw(path, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    n = _libc.listxattr(os.fsencode(path), buf if size else None, size)
    if n < 0:
        raise _oserr(path)
    return n


# ------------------------------------------------------------------------------------------------
# data

def pattern(seed, n):
    """n deterministic, incompressible bytes."""
    return random.Random(seed).randbytes(n)


def sha256_file(path, chunk=4 * MiB):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            d = f.read(chunk)
            if not d:
                break
            h.update(d)
    return h.hexdigest()


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data, mode=0o644, sync=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        mv = memoryview(data)
        while mv:
            n = os.write(fd, mv)
            mv = mv[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def pwrite_all(fd, data, off):
    mv = memoryview(data)
    while mv:
        n = os.pwrite(fd, mv, off)
        mv = mv[n:]
        off += n


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if a[j] != b[j]:
                    return j
    return n


def ename(e):
    return errno.errorcode.get(e, str(e))


def expect_errno(chk, what, want, fn, *args, **kw):
    """fn(*args) must raise OSError with errno `want` (an int or a tuple of accepted ints)."""
    wants = want if isinstance(want, tuple) else (want,)
    try:
        fn(*args, **kw)
    except OSError as e:
        return chk.check(e.errno in wants, "%s: failed with %s, expected %s" %
                         (what, ename(e.errno), "/".join(ename(w) for w in wants)))
    chk.fail("%s: succeeded, expected %s" % (what, "/".join(ename(w) for w in wants)))
    return False


def make_tree(root, rng, nfiles=40, ndirs=6, max_size=200 * 1024, prefix=""):
    """A small source tree: dirs, files of assorted sizes (incl. empty and inline-sized), short
    symlinks and a hard link. Sizes stay below 867 blocks and symlinks short (sload + flexible
    inline xattr slips, see test_sload_readback). Returns the list of relative file paths."""
    dirs = [""]
    for i in range(ndirs):
        parent = rng.choice(dirs)
        d = os.path.join(parent, "%sdir%d" % (prefix, i)) if parent else "%sdir%d" % (prefix, i)
        os.makedirs(os.path.join(root, d))
        dirs.append(d)
    files = []
    sizes = [0, 1, 100, 3000, 3456, 4096, 5000, 65536, max_size]
    for i in range(nfiles):
        d = rng.choice(dirs)
        name = "%sf%d_%s" % (prefix, i, "x" * rng.randrange(0, 40))
        p = os.path.join(d, name) if d else name
        size = sizes[i] if i < len(sizes) else rng.randrange(0, max_size)
        with open(os.path.join(root, p), "wb") as f:
            f.write(pattern(zlib.crc32(prefix.encode()) * 1000 + i, size))
        os.chmod(os.path.join(root, p), rng.choice([0o644, 0o600, 0o755, 0o640]))
        files.append(p)
    for i in range(4):
        d = rng.choice(dirs)
        p = os.path.join(d, "%slink%d" % (prefix, i)) if d else "%slink%d" % (prefix, i)
        os.symlink("target/" + "t" * rng.randrange(1, 60), os.path.join(root, p))
    if files:
        os.link(os.path.join(root, files[3]), os.path.join(root, files[3] + ".hard"))
    return files


# ------------------------------------------------------------------------------------------------
# mounts

class RwMount(T.Mount):
    """f2test.Mount plus kill9(): SIGKILL the daemon on purpose (not reported as a crash)."""

    killed = False

    def __fspath__(self):
        return self.path

    def kill9(self):
        self.killed = True
        self.cancel_watchdog()
        self.proc.send_signal(signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        subprocess.run(["fusermount3", "-uz", self.path], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)

    def __exit__(self, et, ev, tb):
        if not self.killed:
            return T.Mount.__exit__(self, et, ev, tb)
        self.stderr = T._read(self.err_path)
        rep = T.sanitizer_report(self.stderr)
        if rep:
            self._fail("sanitizer report from the daemon before the kill:\n" + rep)
        return False


def daemon_binary():
    if os.environ.get("F2FUSE_RW_SAN", "") not in ("", "0"):
        return T.F2FUSE_SAN_BIN
    return T.F2FUSE_BIN


class SubTestError(Exception):
    """Aborts the current sub-test (after its failure was recorded)."""


class Ctx:
    """State of one sub-test."""

    def __init__(self, name, base, chk, binary):
        self.name, self.chk, self.binary = name, chk, binary
        self.dir = os.path.join(base, re.sub(r"[^A-Za-z0-9_.-]", "_", name))
        os.makedirs(self.dir)
        self.nmount = 0
        self.last_stderr = ""
        self.env = T.san_env() if binary == T.F2FUSE_SAN_BIN else None

    # -- images
    def image(self, size_mb=64, features=None, name="img", extra_args=()):
        img = os.path.join(self.dir, name + ".img")
        T.mkfs(img, size_mb, features, extra_args)
        log("   mkfs.f2fs %d MiB, features %s -> %s" %
            (size_mb, ",".join(features or []) or "default", os.path.basename(img)))
        return img

    # -- mounts
    def mount(self, img, opts="rw", watchdog=150, timeout=20, san=False):
        """Mount context; the body is limited to `watchdog` seconds (then the daemon is killed).
        san=True: use the ASan+UBSan daemon when it is built (mounts that run crash recovery)."""
        self.nmount += 1
        mnt = os.path.join(self.dir, "mnt%d" % self.nmount)
        binary, env = daemon_binary(), self.env
        if san and T.have_bin(T.F2FUSE_SAN_BIN):
            binary, env = T.F2FUSE_SAN_BIN, T.san_env()
            log("   (this mount runs crash recovery: ASan+UBSan daemon)")
        m = _CtxMount(self, binary, img, mnt, opts=opts, checker=self.chk, timeout=timeout, env=env)
        m.wd_seconds = watchdog
        return m

    # -- the oracle
    def fsck(self, img, stage):
        clean, rc, out = T.fsck(img)
        if clean:
            log("   fsck.f2fs clean (%s)" % stage)
            return True
        odd = T.fsck_odd_lines(out, 12)
        self.chk.fail("fsck.f2fs not clean %s (exit %s); odd lines:\n      %s" %
                      (stage, rc, "\n      ".join(odd) or "(none; the final check did not run)"))
        return False

    def dump_inode(self, img, ino, what, name=None, want=None):
        """dump.f2fs -i INO IMG must exit 0. For a regular file it asks whether to dump the
        content into ./lost_found/NAME: answered yes (in a scratch directory), and with `want`
        the dumped bytes must equal it."""
        cwd = os.path.join(self.dir, "dump-%d" % ino)
        os.makedirs(os.path.join(cwd, "lost_found"), exist_ok=True)
        try:
            p = subprocess.run(["dump.f2fs", "-i", str(ino), os.path.abspath(img)], input=b"y\n",
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, cwd=cwd)
            rc, out = p.returncode, p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, out = None, "timed out"
        ok = self.chk.check(rc == 0, "dump.f2fs -i %d (%s) exited %s:\n%s" % (ino, what, rc, T.tail(out, 8)))
        if ok and want is not None:
            try:
                with open(os.path.join(cwd, "lost_found", name), "rb") as f:
                    got = f.read()
                ok = self.chk.check(got == want, "dump.f2fs -i %d (%s): dumped %d bytes differ from the "
                                    "expected %d at byte %d" % (ino, what, len(got), len(want),
                                                               first_diff(got, want)))
            except OSError as e:
                ok = False
                self.chk.fail("dump.f2fs -i %d (%s): no dumped file: %s" % (ino, what, e))
        if ok:
            log("   dump.f2fs -i %d (%s): exit 0%s" % (ino, what, ", content matches" if want is not None else ""))
        return ok

    def cycle(self, img, workload, verify, opts="rw", verify_before=True):  # noqa: D401
        """workload(mnt) -> [verify(mnt)] -> unmount -> fsck -> remount -> verify(mnt) ->
        unmount -> fsck. verify gets (mnt, phase) with phase 'before unmount'/'after remount'."""
        with self.mount(img, opts) as m:
            workload(m.path)
            if verify_before:
                verify(m.path, "before unmount")
        self.fsck(img, "after the workload's unmount")
        with self.mount(img, opts) as m:
            verify(m.path, "after remount")
        self.fsck(img, "after the remount's unmount")

    def check(self, cond, msg):
        return self.chk.check(cond, msg)

    def fail(self, msg):
        self.chk.fail(msg)


class _CtxMount(RwMount):
    def __enter__(self):
        try:
            RwMount.__enter__(self)
        except T.MountFailed as e:
            self.ctx.last_stderr = e.stderr
            rep = T.sanitizer_report(e.stderr or "")
            if rep:
                keep = [l for l in rep.splitlines() if "ERROR:" in l or "runtime error" in l or
                        re.match(r"\s+#[0-9] ", l)][:8]
                kind = next((": ".join(re.sub(r".*(ERROR: |runtime error: )", "", l).split(": ")[:2])
                             for l in keep if "ERROR:" in l or "runtime error" in l), "sanitizer report")
                where = next((l.split(" in ", 1)[1].strip() for l in keep
                              if " in " in l and " src/" in l), "")
                why = "exit %s, %s in %s; report:\n      %s" % (e.rc, kind, where, "\n      ".join(keep))
            else:
                why = str(e)
            self.ctx.chk.fail("mount %s -o %s (%s) failed: %s" % (os.path.basename(self.img), self.opts,
                                                               os.path.relpath(self.binary, T.ROOT), why))
            self.ctx.last_stderr = ""       # already shown
            raise SubTestError()
        self.watchdog(self.wd_seconds)
        return self

    def __exit__(self, et, ev, tb):
        r = RwMount.__exit__(self, et, ev, tb)
        self.ctx.last_stderr = self.stderr
        return r

    def __init__(self, ctx, *a, **kw):
        RwMount.__init__(self, *a, **kw)
        self.ctx = ctx


# ------------------------------------------------------------------------------------------------
# offline checks

def offline_read(img, relpath):
    """(inode dict, content) of relpath read straight from the image by f2test.F2fsImage."""
    with T.F2fsImage(img) as im:
        ino = im.lookup(relpath)
        i = im.inode(ino)
        return i, im.read_data(i)


def offline_nat_addr(img, ino):
    with T.F2fsImage(img) as im:
        return im.nat_entry(ino)[2]


def mount_stats(mnt):
    """`f2fuse stat MNT` as a dict of ints ({} when it fails)."""
    try:
        p = subprocess.run([T.F2FUSE_BIN, "stat", mnt], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def wait_until(cond, timeout=5.0, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)


# ------------------------------------------------------------------------------------------------
# running sub-tests

def run_subtests(test_name, subtests, base, chk, binary):
    """subtests: [(name, fn(ctx))]. Prints one PASS/FAIL line per sub-test; returns results."""
    flt = re.compile(os.environ.get("F2FUSE_RW_FILTER", "."))
    results = []
    for name, fn in subtests:
        if not flt.search(name):
            continue
        before = len(chk.failures)
        chk.context = name
        t0 = time.monotonic()
        log("== %s" % name)
        doc = (fn.__doc__ or "").strip()
        if doc:
            log("   " + " ".join(doc.split()))
        ctx = Ctx(name, base, chk, binary)
        try:
            fn(ctx)
        except SubTestError:
            pass
        except T.ToolError as e:
            chk.fail("tool failed: %s" % e)
        except Exception as e:      # noqa: BLE001 - report and go on with the next sub-test
            chk.fail("unexpected %s: %s\n%s" % (type(e).__name__, e,
                                                 T.tail(traceback.format_exc(), 8)))
        secs = time.monotonic() - t0
        ok = len(chk.failures) == before
        if not ok and ctx.last_stderr.strip():
            log("   daemon stderr (last mount, tail):\n      " +
                "\n      ".join(T.tail(ctx.last_stderr, 12).splitlines()))
        log("%s %s (%.1fs)" % ("PASS" if ok else "FAIL", name, secs))
        results.append((name, ok, secs, chk.failures[before:]))
        chk.context = ""
    # the summary fits in the last lines a runner shows: passing names, then each failing
    # sub-test with its first failures (one line each)
    log("")
    log("%s: sub-test summary" % test_name)
    passed = ["%s (%.0fs)" % (n, secs) for n, ok, secs, _ in results if ok]
    line = "  pass:" + ("" if passed else " (none)")
    for p in passed:
        if len(line) + len(p) > 98:
            log(line)
            line = "       "
        line += " " + p
    log(line)
    for name, ok, secs, fails in results:
        if ok:
            continue
        log("  FAIL %s (%.1fs), %d failure(s):" % (name, secs, len(fails)))
        for f in fails[:3]:
            first = f.split("\n")[0]
            first = first.replace("[%s] " % name, "", 1)
            log("       - " + (first if len(first) <= 150 else first[:147] + "..."))
    return [(n, ok, secs) for n, ok, secs, _ in results]
