"""Shared helpers for the f2fuse integration tests (Python 3 stdlib only).

What is here:
  - Checker            collects failures; a test exits 1 when any was recorded
  - seeded_rng()       random.Random seeded from F2FUSE_SEED or fresh; prints the seed
  - workdir()          a temporary directory under build/tmp, always removed (F2FUSE_KEEP=1 keeps it)
  - mkfs / sload / fsck   wrappers around f2fs-tools 1.15 (the oracles)
  - Mount              context manager: `f2fuse -f -o OPTS IMAGE MNT` in the background, waits for the
                       mount, always unmounts and reaps the daemon, reports crashes and sanitizer output
  - run_walk()         `f2fuse walk IMAGE` under a timeout, classified
  - compare_tree()     source tree vs mounted tree: type, mode, uid/gid, nlink, size, times, content,
                       symlink targets, xattrs, directory listings, d_type, hard-link identity
  - F2fsImage          a small independent reader of the on-disk format (docs: shared/f2fs-format.md):
                       superblock, checkpoint, NAT (journal and blocks), inodes, block mapping, dentries,
                       xattrs. Used to check the oracle offline and to aim corruptions at the right bytes.

Environment: F2FUSE_BIN, F2FUSE_SAN_BIN, F2FUSE_ROOT (set by tests/run.sh), F2FUSE_SEED (replay),
F2FUSE_KEEP=1 (keep temp dirs), F2FUSE_OFFLINE=1 (skip everything that needs the daemon).
"""

import contextlib
import errno
import mmap
import os
import random
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib

BLK = 4096
ROOT = os.environ.get("F2FUSE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
F2FUSE_BIN = os.environ.get("F2FUSE_BIN") or os.path.join(ROOT, "build", "f2fuse")
F2FUSE_SAN_BIN = os.environ.get("F2FUSE_SAN_BIN") or os.path.join(ROOT, "build-san", "f2fuse")

# Everything a sanitizer prints when it finds something.
SAN_PATTERNS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer",
                "ERROR: UndefinedBehaviorSanitizer", "WARNING: ThreadSanitizer")
SAN_EXITCODE = 86   # our sanitizer runs exit with this, so it cannot be confused with "walk" exit 1


def log(*a):
    print(*a, flush=True)


def have_bin(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def offline_only():
    return os.environ.get("F2FUSE_OFFLINE", "") not in ("", "0")


def san_env():
    """Environment for sanitized binaries: a distinctive exit code, reports on stderr."""
    env = dict(os.environ)
    for var, dflt in (("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1"),
                      ("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")):
        v = env.get(var, dflt)
        env[var] = (v + ":" if v else "") + "exitcode=%d" % SAN_EXITCODE
    return env


def sanitizer_report(text):
    for p in SAN_PATTERNS:
        i = text.find(p)
        if i >= 0:
            return text[max(0, i - 200): i + 3000]
    return None


def tail(text, n=40):
    lines = text.splitlines()
    return "\n".join(lines[-n:])


def fmt_path(p):
    """Printable form of a bytes path."""
    if isinstance(p, bytes):
        return repr(os.fsdecode(p))[1:-1] if len(p) < 120 else repr(os.fsdecode(p[:60]) + "..." +
                                                                  os.fsdecode(p[-40:]))[1:-1]
    return p


# ------------------------------------------------------------------------------------------------
# failures

class Checker:
    """Records failures (and prints them at once); `exit_code()` is 1 if anything failed."""

    def __init__(self, limit=60):
        self.failures = []
        self.checks = 0
        self.limit = limit
        self.context = ""

    def check(self, cond, msg):
        self.checks += 1
        if not cond:
            self.fail(msg)
        return cond

    def fail(self, msg):
        full = ("[%s] " % self.context if self.context else "") + msg
        self.failures.append(full)
        if len(self.failures) <= self.limit:
            log("FAIL: " + full)
        elif len(self.failures) == self.limit + 1 and self.limit > 0:
            log("FAIL: ... (further failures counted, not printed)")

    def exit_code(self):
        return 1 if self.failures else 0

    def summary(self, name):
        if self.failures:
            log("%s: %d of %d checks FAILED" % (name, len(self.failures), self.checks))
        else:
            log("%s: all %d checks passed" % (name, self.checks))


def seeded_rng(name="test"):
    seed = os.environ.get("F2FUSE_SEED")
    seed = int(seed) if seed else random.SystemRandom().randrange(1, 2**31)
    log("%s: seed %d (replay with F2FUSE_SEED=%d)" % (name, seed, seed))
    return random.Random(seed), seed


# ------------------------------------------------------------------------------------------------
# temporary directories

def _tmp_base():
    base = os.path.join(ROOT, "build", "tmp")
    try:
        os.makedirs(base, exist_ok=True)
        return base
    except OSError:
        return None


def _unmount_all_under(path):
    """Lazily unmount anything still mounted under path (a failed test must not leak mounts)."""
    try:
        with open("/proc/self/mountinfo") as f:
            mps = [line.split()[4] for line in f]
    except OSError:
        return
    for mp in mps:
        mp = mp.replace("\\040", " ")
        if mp == path or mp.startswith(path.rstrip("/") + "/"):
            subprocess.run(["fusermount3", "-uz", mp], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20)


@contextlib.contextmanager
def workdir(prefix="f2fuse-it-"):
    d = tempfile.mkdtemp(prefix=prefix, dir=_tmp_base())
    try:
        yield d
    finally:
        _unmount_all_under(d)
        if os.environ.get("F2FUSE_KEEP", "") not in ("", "0"):
            log("kept work directory %s" % d)
        else:
            shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# f2fs-tools wrappers

class ToolError(Exception):
    pass


def run_tool(argv, timeout=300, check=True):
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError("%s timed out after %ds" % (" ".join(argv), timeout))
    out = p.stdout.decode("utf-8", "replace")
    if check and p.returncode != 0:
        raise ToolError("%s exited %d:\n%s" % (" ".join(argv), p.returncode, tail(out)))
    return p.returncode, out


# The feature set of the "extended" images (everything f2fuse v1 supports).
EXTRA_FEATURES = ["extra_attr", "inode_checksum", "flexible_inline_xattr", "inode_crtime",
                  "sb_checksum", "lost_found"]


def mkfs(img, size_mb, features=None, extra_args=()):
    """Creates a sparse file of size_mb MiB and formats it. features: list of -O names."""
    with open(img, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    argv = ["mkfs.f2fs", "-f"]
    if features:
        argv += ["-O", ",".join(features)]
    argv += list(extra_args) + [img]
    run_tool(argv)


def sload(img, src, file_contexts=None):
    """Copies src into the image root.

    Flags (f2fs-tools 1.15): -P keeps uid/gid (without it everything is root:root); -s FILE
    labels every inode with a security.selinux xattr from a file_contexts file; -T would force one
    timestamp on every inode and -C is Android's fs_config, neither is wanted. Without -T, sload
    keeps the mode (incl. setuid/setgid/sticky) and the mtime in whole seconds, and sets
    atime = ctime = mtime, nsec = 0. Limits: uid/gid keep only their low 16 bits, the mtime only
    its low 32 bits. It copies regular files, directories and symlinks only
    (fifos, sockets and devices are skipped silently) and no user xattrs. Hard links are kept.
    Holes are written as zero blocks. The image root keeps its mkfs mode/owner/time.
    """
    argv = ["sload.f2fs", "-P"]
    if file_contexts:
        argv += ["-s", file_contexts]
    argv += ["-f", src, "-t", "/", img]
    rc, out = run_tool(argv, timeout=600, check=False)
    # sload runs fsck on its result with fixing on, and exits 1 when it fixed something. Known
    # 1.15 slips it fixes that way: symlinks with targets of ~3488..3600 bytes get i_blocks 1
    # instead of 2; with flexible_inline_xattr every new inode gets i_inline_xattr_size 0
    # (fixed to 50, then the inode checksum is recomputed). Exit 1 with only [ASSERT]/[FIX] lines
    # is accepted: the caller's own fsck must then be clean and the Python reader must agree.
    asserts = [l for l in out.splitlines() if "[ASSERT]" in l]
    if rc != 0 and not (rc == 1 and asserts):
        raise ToolError("%s exited %d:\n%s" % (" ".join(argv), rc, tail(out)))
    if asserts:
        kinds = sorted(set(re.sub(r"(0x[0-9a-f]+|\d+)", "N", l.split("-->", 1)[-1]).strip() for l in asserts))
        log("   note: sload fixed %d of its own slips (exit %d): %s" % (len(asserts), rc, kinds[:4]))
    return out


_FSCK_OK_LINE = re.compile(
    r"^(Info: .*"
    r"|\s+(\"|from \"|to \").*"            # kernel version strings under "MKFS/FSCK version"
    r"|\[FSCK\] .*\[Ok\.\.\].*"
    r"|\[FSCK\] Max image size: .*"
    r"|\[FSCK\] fixing SIT types"          # always printed, it is a heading
    r"|\[FSCK\] Check node \d+ / \d+ \(.*%\)"   # progress on larger images
    r"|Done: .*"
    r"|)$")


_STRIDE_DN = re.compile(r"^\[FIX\] \(fsck_chk_(?:dnode|inode)_blk:\d+\)\s+--> \[0x([0-9a-f]+)\] "
                        r"(?:dn\.addr|i_addr)\[\d+\] = 0$")
_STRIDE_INO = re.compile(r"^\[(?:ASSERT|FIX)\] \(fsck_chk_inode_blk:\d+\)\s+--> (?:ino: |\[)0x([0-9a-f]+)\]? "
                         r"(?:has i_blocks: [0-9a-f]+, but has \d+ blocks"
                         r"|i_blocks=0x[0-9a-f]+ -> 0x[0-9a-f]+|i_compr_blocks=0x[0-9a-f]+ -> 0x[0-9a-f]+"
                         r"|chksum:0x[0-9a-f]+, but calculated one is: 0x[0-9a-f]+"
                         r"|recover, i_inode_checksum= 0x[0-9a-f]+ -> 0x[0-9a-f]+)$")
_STRIDE_TOTAL = re.compile(r"^\[FSCK\] (?:valid_block_count matching with CP\s+\[Fail\] \[0x([0-9a-f]+)\]"
                           r"|other corrupted bugs\s+\[Fail\])$")


def _indirect_hole(im, inode):
    """Whether a compressed file's (double) indirect node has a missing child before a present
    one: the layout that fsck.f2fs 1.15 steps over with the wrong stride."""
    nids = [im.u32(inode["raw"], 4052 + 4 * k) for k in range(5)]

    def hole_before_child(nid, depth):
        if not nid:
            return False
        kids = [im.u32(im.node(nid), 4 * k) for k in range(NIDS_PER_BLOCK)]
        last = max((k for k, c in enumerate(kids) if c), default=-1)
        if any(kids[k] == 0 for k in range(last)):
            return True
        return depth > 1 and any(hole_before_child(c, depth - 1) for c in kids if c)
    return any(hole_before_child(nids[k], 1) for k in (2, 3)) or hole_before_child(nids[4], 2)


def _compressed_counts(im, inode):
    """(i_blocks, i_compr_blocks) a compressed file must have, counted from its tree here."""
    raw = inode["raw"]
    released = inode["inline"] & 0x80
    cluster = 1 << raw[393]
    blocks, compr = 1 + (1 if inode["xattr_nid"] else 0), 0

    def count_node(nid, depth):
        nonlocal blocks
        if not nid:
            return []
        blocks += 1
        b = im.node(nid)
        if depth == 0:
            return [im.u32(b, 4 * k) for k in range(inode["per_block"])]
        out = []
        for k in range(NIDS_PER_BLOCK):
            out += count_node(im.u32(b, 4 * k), depth - 1)
        return out
    base = 360 + inode["extra_isize"]
    groups = [[im.u32(raw, base + 4 * k) for k in range(inode["addrs"])]]
    for k, depth in enumerate((0, 0, 1, 1, 2)):
        groups.append(count_node(im.u32(raw, 4052 + 4 * k), depth))
    for slots in groups:
        for c in range(0, len(slots), cluster):
            cl = slots[c:c + cluster]
            for a in cl:
                if a == 0xFFFFFFFE and released:
                    continue
                blocks += a != NULL_ADDR
            if cl and cl[0] == 0xFFFFFFFE and not released:
                compr += sum(1 for a in cl if a in (0xFFFFFFFE, NEW_ADDR))
    return blocks, compr


def fsck_tools_compress_stride_bug(img, out):
    """Explains fsck.f2fs 1.15's complaints about a sparse compressed file, or returns None.

    In an indirect or double indirect node, fsck.f2fs 1.15 steps over a missing child by the
    ADDRS_PER_BLOCK of the indirect node's own block read as an inode (1018) instead of the
    file's (aligned down to its cluster), so every later cluster of a compressed file with
    such a hole looks misplaced: it zeroes their COMPRESS_ADDR slots and miscounts i_blocks,
    i_compr_blocks and the valid blocks.  The kernel and f2fuse write that layout (a write
    far past the end of a compressed file); f2fs-tools fixed the check after 1.15 ("f2fs:
    should use inode when updating file offset", 2023).  Accepted only when every odd line is
    one of those complaints, about inodes with such a hole whose i_blocks and i_compr_blocks
    are right by this module's own count, and fsck's valid block count falls short of the
    checkpoint's by exactly the slots it zeroed."""
    odd = [l for l in out.splitlines() if not _FSCK_OK_LINE.match(l)]
    dnodes, inos, fsck_total, zeroed = set(), set(), None, 0
    for line in odd:
        m = _STRIDE_DN.match(line)
        if m:
            dnodes.add(int(m.group(1), 16))
            zeroed += 1
            continue
        m = _STRIDE_INO.match(line)
        if m:
            inos.add(int(m.group(1), 16))
            continue
        m = _STRIDE_TOTAL.match(line)
        if m:
            if m.group(1):
                fsck_total = int(m.group(1), 16)
            continue
        return None
    if not zeroed:
        return None
    try:
        with F2fsImage(img) as im:
            owners = {im.nat_entry(n)[1] for n in dnodes} | inos
            for ino in owners:
                i = im.inode(ino)
                if not (i["flags"] & COMPR_FL and (i["mode"] & 0o170000) == 0o100000):
                    return None
                if not _indirect_hole(im, i):
                    return None
                if _compressed_counts(im, i) != (i["blocks"], im.u64(i["raw"], 384)):
                    return None
            if fsck_total is not None and im.valid_block_count - fsck_total != zeroed:
                return None
    except (Corrupt, KeyError, IndexError):
        return None
    return ("fsck.f2fs 1.15's indirect-node stride on sparse compressed file(s) %s "
            "(%d slots; counts checked here)" % (sorted(owners), zeroed))


def fsck(img, timeout=120):
    """Runs `fsck.f2fs --dry-run -f IMG` (forced: the full check also on an image marked clean;
    never writes). Returns (clean, rc, output).

    Clean (learned on fresh mkfs and sload images of 1.15) means: exit 0, the full check ran (the
    "[FSCK] other corrupted bugs ... [Ok..]" line is there) and every line is one of: "Info: ...",
    the kernel version strings, "[FSCK] <check> [Ok..] [...]", "[FSCK] Max image size: ...",
    "[FSCK] fixing SIT types", "Done: ..." or empty. Anything else ([Fail], [ASSERT], [FIX],
    "Do you want to ...", "Can't find a valid ...", ...) means not clean.
    """
    try:
        p = subprocess.run(["fsck.f2fs", "--dry-run", "-f", img], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, None, "fsck.f2fs timed out"
    out = p.stdout.decode("utf-8", "replace")
    odd = [l for l in out.splitlines() if not _FSCK_OK_LINE.match(l)]
    full = re.search(r"^\[FSCK\] other corrupted bugs\s+\[Ok\.\.\]", out, re.M) is not None
    clean = p.returncode == 0 and full and not odd
    if not clean and "compression" in out:
        why = fsck_tools_compress_stride_bug(img, out)
        if why:
            log("   note: fsck.f2fs complaints explained: " + why)
            return True, p.returncode, out
    return clean, p.returncode, out


def fsck_tools_por_bug(img, timeout=120):
    """Explains a refusal "record_fsync_data failed" of fsck.f2fs 1.15, or returns None.

    fsck.f2fs 1.15 checks the data addresses of roll-forward (fsync'ed) dnodes against
    MAX_BLKADDR = segment0_blkaddr + segment_count_main * 512, which stops short of the main
    area's end by (main_blkaddr - segment0_blkaddr) blocks; the kernel's bound is the whole
    segment count.  An fsync'ed file with a data block in those last segments is valid (the
    kernel and f2fuse recover it), but 1.15 refuses to check the image before recovery.  This
    re-runs fsck with -d 1, takes the dnode it failed on, and returns a description when that
    dnode's data addresses are all valid for the kernel and one lies in the gap."""
    try:
        p = subprocess.run(["fsck.f2fs", "--dry-run", "-d", "1", img], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    out = p.stdout.decode("utf-8", "replace")
    nodes = re.findall(r"do_record_fsync_data: \[node\] ino = (\d+), nid = (\d+), blkaddr = (\d+)", out)
    if "record_fsync_data failed" not in out or not nodes or \
            not re.search(r"recover_data: .* err = -1", out):
        return None
    ino, ofs, addr = (int(x) for x in nodes[-1])
    with F2fsImage(img) as im:
        sb = im.sb
        tools_max = sb["segment0_blkaddr"] + (sb["segment_count_main"] << 9)
        main_end = sb["main_blkaddr"] + (sb["segment_count_main"] << 9)
        b = im.block(addr)
        if ofs == 0:                      # an inode: i_addr after the extra attributes
            inline = b[3]
            first = im.u16(b, 360) // 4 if inline & 0x20 else 0
            xattr = 0
            if inline & 0x01:             # inline xattrs sit at the end of i_addr
                flexible = (im.feature & 0x40) and (inline & 0x20)
                xattr = im.u16(b, 362) if flexible else 50
            words = [im.u32(b, 360 + 4 * i) for i in range(first, 923 - xattr)]
        else:                             # a direct node
            words = [im.u32(b, 4 * i) for i in range(1018)]
    data = [a for a in words if a not in (0, 0xFFFFFFFF)]
    in_gap = [a for a in data if tools_max <= a < main_end]
    outside = [a for a in data if not (sb["main_blkaddr"] <= a < main_end)]
    if in_gap and not outside:
        return ("fsck.f2fs 1.15 bound bug: fsync'ed dnode of ino %d at %d has data at %s, inside "
                "the main area (ends at %d) but past the tools' MAX_BLKADDR %d" %
                (ino, addr, in_gap[:3], main_end, tools_max))
    return None


def fsck_odd_lines(out, n=6):
    odd = [l for l in out.splitlines() if not _FSCK_OK_LINE.match(l)]
    return odd[:n]


# ------------------------------------------------------------------------------------------------
# running the daemon

def is_mounted(path):
    """True if path is a mount point per /proc/self/mountinfo (os.path.ismount needs a working
    getattr of the mount's root, which a damaged image may not give)."""
    path = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mp = line.split()[4].replace("\\040", " ")
                if mp == path:
                    return True
    except OSError:
        pass
    return False


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class MountFailed(Exception):
    """The daemon exited before the mount became live (refused the image, or crashed)."""

    def __init__(self, rc, stderr):
        Exception.__init__(self, "f2fuse exited %s before the mount was live: %s" %
                           (rc, tail(stderr, 8)))
        self.rc = rc
        self.stderr = stderr


class Mount:
    """with Mount(bin, img, mnt, opts="ro") as m: ...   (m.path is the mount point)

    Starts `BIN -f -o OPTS IMG MNT`, waits up to `timeout` s until MNT shows in /proc/self/mountinfo. Raises
    MountFailed if the daemon exits first. On exit it always unmounts (fusermount3 -u, then -uz),
    reaps the daemon (SIGTERM/SIGKILL after a grace period) and records problems in `checker`:
    daemon crashed (signal), non-zero exit after a clean unmount, a sanitizer report, a hang at
    unmount. `m.watchdog(seconds)` kills the daemon if the body takes too long, so a hung FUSE
    request fails (ENOTCONN) instead of blocking the test forever.
    """

    def __init__(self, binary, img, mnt, opts="ro", checker=None, timeout=20, env=None,
                 logdir=None, preexec_fn=None):
        self.binary, self.img, self.path, self.opts = binary, img, mnt, opts
        self.checker, self.timeout, self.env = checker, timeout, env
        self.preexec_fn = preexec_fn  # runs in the child before the daemon (a cgroup to join)
        self.logdir = logdir or os.path.dirname(mnt)
        self.proc = None
        self.stderr = ""
        self.stdout = ""
        self.rc = None
        self._timer = None
        self.watchdog_fired = False

    def __enter__(self):
        os.makedirs(self.path, exist_ok=True)
        tag = os.path.basename(self.path)
        self.err_path = os.path.join(self.logdir, tag + ".stderr")
        self.out_path = os.path.join(self.logdir, tag + ".stdout")
        argv = [self.binary, "-f"] + (["-o", self.opts] if self.opts else []) + [self.img, self.path]
        self.argv = argv
        with open(self.err_path, "wb") as ef, open(self.out_path, "wb") as of:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=of, stderr=ef,
                                         env=self.env, preexec_fn=self.preexec_fn)
        deadline = time.monotonic() + self.timeout
        while True:
            if is_mounted(self.path):
                return self
            rc = self.proc.poll()
            if rc is not None:
                self.rc = rc
                self.stderr = _read(self.err_path)
                raise MountFailed(rc, self.stderr)
            if time.monotonic() > deadline:
                self._kill()
                if is_mounted(self.path):
                    subprocess.run(["fusermount3", "-uz", self.path], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, timeout=30)
                self.stderr = _read(self.err_path)
                raise MountFailed("timeout (no mount after %ds)" % self.timeout, self.stderr)
            time.sleep(0.02)

    def watchdog(self, seconds):
        import threading
        self.cancel_watchdog()

        def fire():
            self.watchdog_fired = True
            log("WATCHDOG: %s still busy after %ds; killing the daemon (a FUSE request hung)" %
                (self.path, seconds))
            try:
                self.proc.send_signal(signal.SIGKILL)
            except OSError:
                pass
        self._timer = threading.Timer(seconds, fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel_watchdog(self):
        if self._timer:
            self._timer.cancel()
            self._timer = None

    def _kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def _fail(self, msg):
        if self.checker:
            self.checker.fail(msg)
        else:
            log("FAIL: " + msg)

    def __exit__(self, et, ev, tb):
        self.cancel_watchdog()
        problems = []
        if is_mounted(self.path):
            p = subprocess.run(["fusermount3", "-u", self.path], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            if p.returncode != 0:
                problems.append("fusermount3 -u failed: %s" % p.stdout.decode(errors="replace").strip())
                subprocess.run(["fusermount3", "-uz", self.path], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30)
        try:
            self.rc = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            problems.append("daemon still running 15 s after unmount; SIGTERM")
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.rc = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                problems.append("daemon ignored SIGTERM; SIGKILL")
                self._kill()
                self.rc = self.proc.returncode
        self.stderr = _read(self.err_path)
        self.stdout = _read(self.out_path)
        rep = sanitizer_report(self.stderr)
        if rep:
            problems.append("sanitizer report from the daemon:\n" + rep)
        if self.watchdog_fired:
            problems.append("a request hung: the watchdog had to kill the daemon")
        elif self.rc is not None and self.rc < 0:
            problems.append("daemon died from signal %d" % -self.rc)
        elif self.rc == SAN_EXITCODE:
            problems.append("daemon exited with the sanitizer exit code")
        elif self.rc not in (0, None):
            problems.append("daemon exited %d after unmount" % self.rc)
        for p in problems:
            self._fail("%s (%s): %s%s" % (os.path.basename(self.binary), " ".join(self.argv[1:-2]),
                                          p, ("\n  daemon stderr:\n" + tail(self.stderr, 15))
                                          if self.stderr and "sanitizer" not in p else ""))
        return False


class WalkResult:
    def __init__(self, rc, out, err, timed_out, secs):
        self.rc, self.out, self.err, self.timed_out, self.secs = rc, out, err, timed_out, secs
        self.san = sanitizer_report(err)

    def crashed(self):
        """A reason string if this was a crash/hang/sanitizer finding, else None."""
        if self.timed_out:
            return "hang: no exit within the timeout"
        if self.san:
            return "sanitizer report:\n" + self.san
        if self.rc is not None and self.rc < 0:
            return "killed by signal %d" % -self.rc
        if self.rc == SAN_EXITCODE:
            return "sanitizer exit code"
        if self.rc is not None and self.rc >= 128:
            return "exit %d (signal?)" % self.rc
        return None


def run_walk(binary, img, timeout=30, env=None):
    t0 = time.monotonic()
    try:
        p = subprocess.run([binary, "walk", img], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, env=env)
        return WalkResult(p.returncode, p.stdout.decode("utf-8", "replace"),
                          p.stderr.decode("utf-8", "replace"), False, time.monotonic() - t0)
    except subprocess.TimeoutExpired as e:
        return WalkResult(None, (e.stdout or b"").decode("utf-8", "replace"),
                          (e.stderr or b"").decode("utf-8", "replace"), True, timeout)


# ------------------------------------------------------------------------------------------------
# tree comparison

def walk_source(src):
    """Yields relative bytes paths of everything under src (not src itself), parents first."""
    src = os.fsencode(src)
    stack = [b""]
    while stack:
        rel = stack.pop()
        full = os.path.join(src, rel) if rel else src
        with os.scandir(full) as it:
            ents = sorted(it, key=lambda e: e.name)
        for e in ents:
            r = os.path.join(rel, e.name) if rel else e.name
            yield r
            if e.is_dir(follow_symlinks=False):
                stack.append(r)


DEAD_MOUNT = (errno.ENOTCONN, errno.ECONNABORTED)


def _ftype(mode):
    return stat.S_IFMT(mode)


_TYPENAMES = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink",
              stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "chardev",
              stat.S_IFBLK: "blockdev"}


def _same_content(a, b, size, rng, chk, rp, boundaries=()):
    """Byte-for-byte compare, then positional reads (pread) at random and boundary offsets."""
    CH = 1 << 20
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        off = 0
        while True:
            da = fa.read(CH)
            db = fb.read(CH)
            if da != db:
                n = min(len(da), len(db))
                first = next((i for i in range(n) if da[i] != db[i]), n)
                chk.fail("%s: content differs at byte %d (source read %d bytes there, mount %d)"
                         % (fmt_path(rp), off + first, len(da), len(db)))
                return False
            if not da:
                break
            off += len(da)
        if off != size:
            chk.fail("%s: read %d bytes, size is %d" % (fmt_path(rp), off, size))
            return False
        # positional reads that cross block and node boundaries, and past EOF
        offs = [(o, l) for o in boundaries for l in (1, 4096, 8192 + 17) if 0 <= o < size + 10]
        if size:
            for _ in range(4):
                o = rng.randrange(0, size)
                offs.append((o, rng.randrange(1, 3 * BLK)))
        offs += [(size, 10), (size + 4096, 1), (max(0, size - 1), 5)]
        for o, l in offs:
            ea = os.pread(fa.fileno(), l, o)
            eb = os.pread(fb.fileno(), l, o)
            if ea != eb:
                chk.fail("%s: pread(len=%d, off=%d) differs: source %d bytes, mount %d bytes%s" %
                         (fmt_path(rp), l, o, len(ea), len(eb),
                          "" if len(ea) != len(eb) else " (same length, different bytes)"))
                return False
    return True


def compare_tree(src, mnt, chk, rng, expected_xattrs=None, root_extra=(), addrs_per_inode=None,
                 skip=(), check_statvfs=True, min_used_blocks=0, times=("mtime", "ctime", "atime")):
    """Compares the source tree with the mounted tree. Returns the number of entries compared.

    expected_xattrs(relpath bytes) -> {name: value bytes} for what sload wrote (None: expect none).
    root_extra: names that exist only in the image root (lost+found).
    skip: relative bytes paths whose whole subtree is not compared (damaged entries).
    """
    src_b, mnt_b = os.fsencode(src), os.fsencode(mnt)
    skip = tuple(os.fsencode(s) for s in skip)
    n = 0
    inode_map = {}      # src (dev, ino) -> mount st_ino
    mnt_inos = {}       # mount st_ino -> src (dev, ino)
    boundaries = []
    if addrs_per_inode:
        A = addrs_per_inode
        for blk in (A, A + 1018, A + 2036, A + 2036 + 1018, A + 2036 + 2 * 1018):
            boundaries += [blk * BLK - 1, blk * BLK - 4096, blk * BLK]
    boundaries += [3344, 3488, 4095]

    def skipped(rp):
        return any(rp == s or rp.startswith(s + b"/") for s in skip)

    # root
    rst = os.lstat(src_b)
    try:
        mst = os.lstat(mnt_b)
    except OSError as e:
        chk.fail("lstat of the mount root failed: %s" % e)
        return 0
    chk.check(stat.S_ISDIR(mst.st_mode), "mount root is not a directory")
    chk.check(stat.S_IMODE(mst.st_mode) == 0o755,
              "root mode %o, mkfs makes 0755" % stat.S_IMODE(mst.st_mode))
    chk.check(mst.st_uid == os.getuid() and mst.st_gid == os.getgid(),
              "root owner %d:%d, mkfs makes it the caller's" % (mst.st_uid, mst.st_gid))
    _compare_dir_listing(src_b, mnt_b, b"", chk, root_extra, skip)
    exp_root_links = rst.st_nlink + sum(1 for x in root_extra if os.path.isdir(os.path.join(mnt_b, os.fsencode(x))))
    chk.check(mst.st_nlink == exp_root_links, "root nlink %d, expected %d" % (mst.st_nlink, exp_root_links))
    if expected_xattrs:
        _compare_xattrs(mnt_b, b"", expected_xattrs(b""), chk)
    for x in root_extra:
        if x == "lost+found":
            try:
                lf = os.lstat(os.path.join(mnt_b, b"lost+found"))
                chk.check(stat.S_ISDIR(lf.st_mode) and stat.S_IMODE(lf.st_mode) == 0o700 and lf.st_nlink == 2,
                          "lost+found: mode %o nlink %d, mkfs makes an empty 0700 directory" %
                          (lf.st_mode, lf.st_nlink))
                chk.check(os.listdir(os.path.join(mnt_b, b"lost+found")) == [], "lost+found is not empty")
            except OSError as e:
                chk.fail("lost+found: %s" % e)

    for rp in walk_source(src_b):
        if skipped(rp):
            continue
        n += 1
        s_full = os.path.join(src_b, rp)
        m_full = os.path.join(mnt_b, rp)
        s = os.lstat(s_full)
        try:
            m = os.lstat(m_full)
        except OSError as e:
            chk.fail("%s: lstat on the mount failed: %s" % (fmt_path(rp), e))
            if e.errno in DEAD_MOUNT:
                chk.fail("the mount is gone (%s); comparison stopped after %d entries" % (e, n))
                return n
            continue
        what = fmt_path(rp)
        if _ftype(s.st_mode) != _ftype(m.st_mode):
            chk.fail("%s: type %s on the mount, %s in the source" %
                     (what, _TYPENAMES.get(_ftype(m.st_mode), oct(m.st_mode)),
                      _TYPENAMES.get(_ftype(s.st_mode), oct(s.st_mode))))
            continue
        if stat.S_IMODE(s.st_mode) != stat.S_IMODE(m.st_mode):
            chk.fail("%s: mode %04o, source %04o" % (what, stat.S_IMODE(m.st_mode), stat.S_IMODE(s.st_mode)))
        if (s.st_uid, s.st_gid) != (m.st_uid, m.st_gid):
            chk.fail("%s: owner %d:%d, source %d:%d" % (what, m.st_uid, m.st_gid, s.st_uid, s.st_gid))
        if s.st_nlink != m.st_nlink:
            chk.fail("%s: nlink %d, source %d" % (what, m.st_nlink, s.st_nlink))
        exp_ns = int(s.st_mtime) * 10**9          # sload keeps whole seconds
        for nm, val in (("mtime", m.st_mtime_ns), ("ctime", m.st_ctime_ns), ("atime", m.st_atime_ns)):
            if nm in times and val != exp_ns:
                chk.fail("%s: %s %d.%09d, expected %d (source mtime in whole seconds; sload sets "
                         "a/c/mtime to it)" % (what, nm, val // 10**9, val % 10**9, exp_ns // 10**9))
        key = (s.st_dev, s.st_ino)
        if key in inode_map:
            if inode_map[key] != m.st_ino:
                chk.fail("%s: hard link has st_ino %d, another link of the same file has %d" %
                         (what, m.st_ino, inode_map[key]))
        else:
            inode_map[key] = m.st_ino
            if m.st_ino in mnt_inos and mnt_inos[m.st_ino] != key:
                chk.fail("%s: st_ino %d is shared with a different file" % (what, m.st_ino))
            mnt_inos[m.st_ino] = key
        if stat.S_ISREG(s.st_mode):
            if s.st_size != m.st_size:
                chk.fail("%s: size %d, source %d" % (what, m.st_size, s.st_size))
                continue
            if s.st_size > 3488 and m.st_blocks * 512 < s.st_size:
                chk.fail("%s: st_blocks %d (%d bytes) below the size %d although sload writes every "
                         "block" % (what, m.st_blocks, m.st_blocks * 512, s.st_size))
            try:
                _same_content(s_full, m_full, s.st_size, rng, chk, rp, boundaries)
            except OSError as e:
                chk.fail("%s: reading failed: %s" % (what, e))
        elif stat.S_ISLNK(s.st_mode):
            try:
                t_s, t_m = os.readlink(s_full), os.readlink(m_full)
                if t_s != t_m:
                    chk.fail("%s: symlink target differs (mount %d bytes %r..., source %d bytes %r...)" %
                             (what, len(t_m), t_m[:40], len(t_s), t_s[:40]))
            except OSError as e:
                chk.fail("%s: readlink failed: %s" % (what, e))
            if s.st_size != m.st_size:
                chk.fail("%s: symlink size %d, source %d" % (what, m.st_size, s.st_size))
        elif stat.S_ISDIR(s.st_mode):
            _compare_dir_listing(src_b, mnt_b, rp, chk, (), skip)
        if expected_xattrs:
            _compare_xattrs(mnt_b, rp, expected_xattrs(rp), chk)
    if check_statvfs:
        _check_statvfs(mnt_b, chk, min_used_blocks)
    return n


def _compare_dir_listing(src_b, mnt_b, rp, chk, extra, skip):
    s_full = os.path.join(src_b, rp) if rp else src_b
    m_full = os.path.join(mnt_b, rp) if rp else mnt_b
    try:
        names_s = set(os.listdir(s_full))
        with os.scandir(m_full) as it:
            ents = list(it)
    except OSError as e:
        chk.fail("%s: listing the directory on the mount failed: %s" % (fmt_path(rp) or "/", e))
        return
    names_m = [e.name for e in ents]
    if len(names_m) != len(set(names_m)):
        chk.fail("%s: readdir returned duplicate names" % (fmt_path(rp) or "/"))
    want = names_s | set(os.fsencode(x) for x in extra)
    got = set(names_m)
    # damaged entries may or may not be listed
    skipped_here = set(os.path.basename(s) for s in skip if os.path.dirname(s) == rp)
    missing = want - got - skipped_here
    unexpected = got - want
    if missing:
        chk.fail("%s: %d names missing on the mount, e.g. %s" %
                 (fmt_path(rp) or "/", len(missing), [fmt_path(x) for x in sorted(missing)[:5]]))
    if unexpected:
        chk.fail("%s: %d unexpected names on the mount, e.g. %s" %
                 (fmt_path(rp) or "/", len(unexpected), [fmt_path(x) for x in sorted(unexpected)[:5]]))
    # d_type from readdir must agree with the source
    bad = 0
    for e in ents:
        if e.name in skipped_here or e.name not in names_s:
            continue
        st = os.lstat(os.path.join(s_full, e.name))
        try:
            ok = (e.is_symlink() == stat.S_ISLNK(st.st_mode) and
                  e.is_dir(follow_symlinks=False) == stat.S_ISDIR(st.st_mode) and
                  e.is_file(follow_symlinks=False) == stat.S_ISREG(st.st_mode))
        except OSError:
            ok = False
        if not ok:
            bad += 1
            if bad <= 3:
                chk.fail("%s: readdir d_type wrong" % fmt_path(os.path.join(rp, e.name) if rp else e.name))


def _compare_xattrs(mnt_b, rp, expected, chk):
    full = os.path.join(mnt_b, rp) if rp else mnt_b
    expected = expected or {}
    what = fmt_path(rp) or "/"
    try:
        names = os.listxattr(full, follow_symlinks=False)
    except OSError as e:
        chk.fail("%s: listxattr failed: %s" % (what, e))
        return
    if sorted(names) != sorted(expected):
        chk.fail("%s: xattr names %s, expected %s" % (what, sorted(names), sorted(expected)))
    for k, v in expected.items():
        try:
            got = os.getxattr(full, k, follow_symlinks=False)
        except OSError as e:
            chk.fail("%s: getxattr %s failed: %s" % (what, k, e))
            continue
        if got != v:
            chk.fail("%s: xattr %s = %r (%d bytes), expected %r (%d bytes)" %
                     (what, k, got[:50], len(got), v[:50], len(v)))
    try:
        os.getxattr(full, "user.f2fuse-does-not-exist", follow_symlinks=False)
        chk.fail("%s: getxattr of a missing name succeeded" % what)
    except OSError as e:
        chk.check(e.errno in (errno.ENODATA, errno.ENOTSUP),
                  "%s: getxattr of a missing name gave %s, expected ENODATA" % (what, e))


def _check_statvfs(mnt_b, chk, min_used_blocks):
    try:
        v = os.statvfs(mnt_b)
    except OSError as e:
        chk.fail("statvfs failed: %s" % e)
        return
    chk.check(v.f_bsize == BLK, "statvfs f_bsize %d, expected 4096" % v.f_bsize)
    chk.check(v.f_frsize in (0, BLK), "statvfs f_frsize %d, expected 4096" % v.f_frsize)
    chk.check(v.f_blocks > 0, "statvfs f_blocks is 0")
    chk.check(v.f_bfree <= v.f_blocks, "statvfs f_bfree %d > f_blocks %d" % (v.f_bfree, v.f_blocks))
    chk.check(v.f_bavail <= v.f_bfree, "statvfs f_bavail %d > f_bfree %d" % (v.f_bavail, v.f_bfree))
    chk.check(v.f_ffree <= v.f_files, "statvfs f_ffree %d > f_files %d" % (v.f_ffree, v.f_files))
    chk.check(v.f_namemax == 255, "statvfs f_namemax %d, expected 255" % v.f_namemax)
    used = v.f_blocks - v.f_bfree
    chk.check(used >= min_used_blocks,
              "statvfs used blocks %d < valid_block_count %d of the checkpoint" % (used, min_used_blocks))


def access_entry(path):
    """Touches everything about one entry (the way a reader would). Raises OSError on failure."""
    st = os.lstat(path)
    os.listxattr(path, follow_symlinks=False)
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:       # at most 64 MiB: a damaged size may be absurd
            for _ in range(64):
                if not f.read(1 << 20):
                    break
    elif stat.S_ISLNK(st.st_mode):
        os.readlink(path)
    elif stat.S_ISDIR(st.st_mode):
        for name in os.listdir(path):
            os.lstat(os.path.join(path, name))
    return st


# ------------------------------------------------------------------------------------------------
# an independent reader of the on-disk format

def crc_raw(init, data):
    """f2fs_cal_crc32: reflected CRC-32 (0xEDB88320) from `init`, no final XOR."""
    return zlib.crc32(data, init ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


F2FS_MAGIC = 0xF2F52010
NAT_ENTRY_PER_BLOCK = 455
NIDS_PER_BLOCK = 1018
ADDRS_PER_BLOCK = 1018
DEF_ADDRS_PER_INODE = 923
NULL_ADDR, NEW_ADDR = 0, 0xFFFFFFFF

FEAT_EXTRA_ATTR = 0x8
FEAT_INODE_CHKSUM = 0x20
FEAT_FLEX_INLINE_XATTR = 0x40
FEAT_SB_CHKSUM = 0x800
FEAT_COMPRESSION = 0x2000
COMPR_FL = 0x4

INLINE_XATTR, INLINE_DATA, INLINE_DENTRY, DATA_EXIST, EXTRA_ATTR = 0x1, 0x2, 0x4, 0x8, 0x20
CP_UMOUNT, CP_COMPACT_SUM, CP_LARGE_NAT_BITMAP = 0x1, 0x4, 0x400

XATTR_PREFIX = {1: "user.", 4: "trusted.", 6: "security."}


class Corrupt(Exception):
    pass


class F2fsImage:
    """Reads an f2fs image per /work/shared/f2fs-format.md. Only what the tests need."""

    def __init__(self, path):
        self.path = path
        self.f = open(path, "rb")
        self.size = os.fstat(self.f.fileno()).st_size
        self.mm = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ)
        self._read_sb()
        self._read_cp()

    def close(self):
        self.mm.close()
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    # -- raw access
    def block(self, addr):
        if addr <= 0 or addr >= self.block_count or (addr + 1) * BLK > self.size:
            raise Corrupt("block address %d out of range" % addr)
        return self.mm[addr * BLK:(addr + 1) * BLK]

    @staticmethod
    def u8(b, o):
        return b[o]

    @staticmethod
    def u16(b, o):
        return struct.unpack_from("<H", b, o)[0]

    @staticmethod
    def u32(b, o):
        return struct.unpack_from("<I", b, o)[0]

    @staticmethod
    def u64(b, o):
        return struct.unpack_from("<Q", b, o)[0]

    # -- superblock
    SB_FIELDS = dict(magic=(0, "I"), major=(4, "H"), minor=(6, "H"), log_blocksize=(16, "I"),
                     log_blocks_per_seg=(20, "I"), segs_per_sec=(24, "I"), checksum_offset=(32, "I"),
                     block_count=(36, "Q"), section_count=(44, "I"), segment_count=(48, "I"),
                     segment_count_ckpt=(52, "I"), segment_count_sit=(56, "I"),
                     segment_count_nat=(60, "I"), segment_count_ssa=(64, "I"),
                     segment_count_main=(68, "I"), segment0_blkaddr=(72, "I"), cp_blkaddr=(76, "I"),
                     sit_blkaddr=(80, "I"), nat_blkaddr=(84, "I"), ssa_blkaddr=(88, "I"),
                     main_blkaddr=(92, "I"), root_ino=(96, "I"), node_ino=(100, "I"),
                     meta_ino=(104, "I"), cp_payload=(1664, "I"), feature=(2180, "I"),
                     crc=(3068, "I"))

    def sb_copy(self, idx):
        base = idx * BLK + 1024
        raw = self.mm[base:base + 3072]
        sb = {k: struct.unpack_from("<" + t, raw, o)[0] for k, (o, t) in self.SB_FIELDS.items()}
        sb["uuid"] = raw[108:124]
        sb["raw"] = raw
        sb["offset"] = base
        return sb

    def sb_valid(self, sb):
        if sb["magic"] != F2FS_MAGIC:
            return False
        if sb["feature"] & FEAT_SB_CHKSUM:
            if sb["checksum_offset"] != 3068 or crc_raw(F2FS_MAGIC, sb["raw"][:3068]) != sb["crc"]:
                return False
        return sb["log_blocksize"] == 12 and sb["log_blocks_per_seg"] == 9

    def _read_sb(self):
        for i in (0, 1):
            sb = self.sb_copy(i)
            if self.sb_valid(sb):
                self.sb, self.sb_index = sb, i
                break
        else:
            raise Corrupt("no valid superblock")
        sb = self.sb
        self.block_count = sb["block_count"]
        self.feature = sb["feature"]
        self.main_blkaddr = sb["main_blkaddr"]
        self.nat_blkaddr = sb["nat_blkaddr"]
        self.cp_blkaddr = sb["cp_blkaddr"]
        self.sit_blkaddr = sb["sit_blkaddr"]
        self.root_ino = sb["root_ino"]
        self.max_nid = (sb["segment_count_nat"] // 2) * 512 * NAT_ENTRY_PER_BLOCK

    # -- checkpoint
    def cp_block_ok(self, addr):
        b = self.block(addr)
        off = self.u32(b, 164)
        if off != 4092:
            return None
        if crc_raw(F2FS_MAGIC, b[:off]) != self.u32(b, off):
            return None
        return b

    def _pack(self, start):
        first = self.cp_block_ok(start)
        if first is None:
            return None
        total = self.u32(first, 136)
        if total <= 2 or total > 512:
            return None
        last = self.cp_block_ok(start + total - 1)
        if last is None or self.u64(last, 0) != self.u64(first, 0):
            return None
        return first

    def _read_cp(self):
        p1, p2 = self._pack(self.cp_blkaddr), self._pack(self.cp_blkaddr + 512)
        if p1 is None and p2 is None:
            raise Corrupt("no valid checkpoint pack")
        if p1 is not None and p2 is not None:
            v1, v2 = self.u64(p1, 0), self.u64(p2, 0)
            diff = (v1 - v2) & 0xFFFFFFFFFFFFFFFF
            use2 = diff >= 1 << 63           # v2 newer by signed difference
        else:
            use2 = p1 is None
        self.cp = p2 if use2 else p1
        self.cp_addr = self.cp_blkaddr + (512 if use2 else 0)
        cp = self.cp
        self.cp_ver = self.u64(cp, 0)
        self.valid_block_count = self.u64(cp, 16)
        self.ckpt_flags = self.u32(cp, 132)
        self.cp_total = self.u32(cp, 136)
        self.cp_start_sum = self.u32(cp, 140)
        self.valid_node_count = self.u32(cp, 144)
        self.valid_inode_count = self.u32(cp, 148)
        sit_bytes, nat_bytes = self.u32(cp, 156), self.u32(cp, 160)
        if self.ckpt_flags & CP_LARGE_NAT_BITMAP:
            raise Corrupt("LARGE_NAT_BITMAP not handled by this reader")
        nat_off = 192 if self.sb["cp_payload"] else 192 + sit_bytes
        self.nat_bitmap = cp[nat_off:nat_off + nat_bytes]
        # NAT journal: in the HOT_DATA summary (compact block offset 0, or normal block at 3584)
        sum_addr = self.cp_addr + self.cp_start_sum
        sb_ = self.block(sum_addr)
        jo = 0 if self.ckpt_flags & CP_COMPACT_SUM else 3584
        self.nat_journal_base = sum_addr * BLK + jo
        n = self.u16(sb_, jo)
        self.nat_journal = {}
        for i in range(min(n, 38)):
            eo = jo + 2 + 13 * i
            nid = self.u32(sb_, eo)
            self.nat_journal[nid] = (sb_[eo + 4], self.u32(sb_, eo + 5), self.u32(sb_, eo + 9),
                                     sum_addr * BLK + eo + 4)

    # -- NAT
    def nat_entry(self, nid):
        """(version, ino, blkaddr, byte offset of the 9-byte entry in the image file)."""
        if nid in self.nat_journal:
            return self.nat_journal[nid]
        if nid >= self.max_nid:
            raise Corrupt("nid %d out of range" % nid)
        b = nid // NAT_ENTRY_PER_BLOCK
        addr = self.nat_blkaddr + (b // 512) * 1024 + b % 512
        if self.nat_bitmap[b >> 3] & (0x80 >> (b & 7)):
            addr += 512
        off = addr * BLK + (nid % NAT_ENTRY_PER_BLOCK) * 9
        e = self.mm[off:off + 9]
        return e[0], self.u32(e, 1), self.u32(e, 5), off

    def node_addr(self, nid):
        return self.nat_entry(nid)[2]

    def node(self, nid):
        addr = self.node_addr(nid)
        if addr < self.main_blkaddr or addr >= self.block_count:
            raise Corrupt("nid %d: block address %d outside the main area" % (nid, addr))
        b = self.block(addr)
        if self.u32(b, 4072) != nid:
            raise Corrupt("nid %d: node footer says nid %d" % (nid, self.u32(b, 4072)))
        return b

    # -- inodes
    def inode(self, ino):
        b = self.node(ino)
        i = dict(raw=b, ino=ino, addr=self.node_addr(ino), mode=self.u16(b, 0), advise=b[2],
                 inline=b[3], uid=self.u32(b, 4), gid=self.u32(b, 8), links=self.u32(b, 12),
                 size=self.u64(b, 16), blocks=self.u64(b, 24), atime=self.u64(b, 32),
                 ctime=self.u64(b, 40), mtime=self.u64(b, 48), atime_ns=self.u32(b, 56),
                 ctime_ns=self.u32(b, 60), mtime_ns=self.u32(b, 64), generation=self.u32(b, 68),
                 depth=self.u32(b, 72), xattr_nid=self.u32(b, 76), flags=self.u32(b, 80),
                 pino=self.u32(b, 84), namelen=self.u32(b, 88))
        i["name"] = b[92:92 + min(i["namelen"], 255)]
        i["ext"] = (self.u32(b, 348), self.u32(b, 352), self.u32(b, 356))   # fofs, blk, len
        extra = self.u16(b, 360) if i["inline"] & EXTRA_ATTR else 0
        if extra % 4 or extra > 36 * 4:
            raise Corrupt("ino %d: bad i_extra_isize %d" % (ino, extra))
        i["extra_isize"] = extra
        if self.feature & FEAT_FLEX_INLINE_XATTR and i["inline"] & INLINE_XATTR:
            xa = self.u16(b, 362)
        elif i["inline"] & (INLINE_XATTR | INLINE_DENTRY):
            xa = 50
        else:
            xa = 0
        i["xattr_addrs"] = xa
        i["addrs"] = DEF_ADDRS_PER_INODE - extra // 4 - xa
        i["per_block"] = ADDRS_PER_BLOCK
        # A compressed file's inode and direct nodes hold whole clusters (the kernel's and
        # f2fs-tools' addrs_per_inode / addrs_per_block).
        if ((i["mode"] & 0o170000) == 0o100000 and i["flags"] & COMPR_FL and
                self.feature & FEAT_COMPRESSION and extra >= 34 and 2 <= b[393] <= 8):
            cluster = 1 << b[393]
            i["addrs"] -= i["addrs"] % cluster
            i["per_block"] -= ADDRS_PER_BLOCK % cluster
        i["max_inline"] = 4 * (DEF_ADDRS_PER_INODE - extra // 4 - xa - 1)
        i["inline_off"] = 360 + extra + 4
        return i

    def inode_checksum(self, raw, ino=None):
        """The inode_checksum value for a raw inode block (fact sheet section 9)."""
        seed = crc_raw(0xFFFFFFFF, self.sb["uuid"])
        if ino is None:
            ino = self.u32(raw, 4072 + 4)
        c = crc_raw(seed, struct.pack("<I", ino))
        c = crc_raw(c, struct.pack("<I", self.u32(raw, 68)))
        c = crc_raw(c, raw[:368])
        c = crc_raw(c, b"\0\0\0\0")
        c = crc_raw(c, raw[372:4096])
        return c

    def bmap(self, inode, idx):
        """Block address of file block idx (0 = hole)."""
        A = inode["addrs"]
        D = inode.get("per_block", ADDRS_PER_BLOCK)
        base = 360 + inode["extra_isize"]
        raw = inode["raw"]
        if idx < A:
            return self.u32(raw, base + 4 * idx)
        idx -= A
        nids = [self.u32(raw, 4052 + 4 * k) for k in range(5)]

        def dnode_addr(nid, i):
            if nid == 0:
                return 0
            return self.u32(self.node(nid), 4 * i)

        def ind_nid(nid, i):
            if nid == 0:
                return 0
            return self.u32(self.node(nid), 4 * i)
        for k in (0, 1):
            if idx < D:
                return dnode_addr(nids[k], idx)
            idx -= D
        for k in (2, 3):
            if idx < D * NIDS_PER_BLOCK:
                return dnode_addr(ind_nid(nids[k], idx // D), idx % D)
            idx -= D * NIDS_PER_BLOCK
        per = D * NIDS_PER_BLOCK
        if idx < per * NIDS_PER_BLOCK:
            mid = ind_nid(nids[4], idx // per)
            return dnode_addr(ind_nid(mid, (idx % per) // D), idx % D)
        raise Corrupt("file block %d beyond the maximum" % idx)

    def read_data(self, inode, limit=None):
        size = inode["size"] if limit is None else min(limit, inode["size"])
        if inode["inline"] & INLINE_DATA:
            if size > inode["max_inline"]:
                raise Corrupt("ino %d: inline i_size %d > %d" % (inode["ino"], size, inode["max_inline"]))
            o = inode["inline_off"]
            return inode["raw"][o:o + size]
        out = []
        for blk in range((size + BLK - 1) // BLK):
            a = self.bmap(inode, blk)
            out.append(bytes(BLK) if a in (NULL_ADDR, NEW_ADDR) else self.block(a))
        return b"".join(out)[:size]

    # -- directories
    def dentries(self, inode):
        """[(name, ino, file_type, byte offset of the 11-byte dentry in the image file)]"""
        res = []
        if inode["inline"] & INLINE_DENTRY:
            M = inode["max_inline"]
            nr = 8 * M // 153
            bm = (nr + 7) // 8
            rsv = M - 19 * nr - bm
            o = inode["inline_off"]
            area = inode["raw"][o:o + M]
            res += self._parse_dentries(area, 0, bm + rsv, bm + rsv + 11 * nr, nr,
                                        inode["addr"] * BLK + o)
        else:
            for blk in range(inode["size"] // BLK):
                a = self.bmap(inode, blk)
                if a in (NULL_ADDR, NEW_ADDR):
                    continue
                res += self._parse_dentries(self.block(a), 0, 30, 30 + 11 * 214, 214, a * BLK)
        return res

    def _parse_dentries(self, area, bm_off, de_off, name_off, nr, file_off):
        res = []
        i = 0
        while i < nr:
            if not area[bm_off + (i >> 3)] & (1 << (i & 7)):
                i += 1
                continue
            eo = de_off + 11 * i
            ino = self.u32(area, eo + 4)
            nl = self.u16(area, eo + 8)
            ft = area[eo + 10]
            name = area[name_off + 8 * i: name_off + 8 * i + nl]
            res.append((bytes(name), ino, ft, file_off + eo))
            i += max(1, (nl + 7) // 8)
        return res

    def lookup(self, path):
        """ino of a path ('/a/b' or b'a/b'); raises KeyError."""
        ino = self.root_ino
        for comp in os.fsencode(path).strip(b"/").split(b"/"):
            if not comp:
                continue
            for name, cino, ft, off in self.dentries(self.inode(ino)):
                if name == comp:
                    ino = cino
                    break
            else:
                raise KeyError(path)
        return ino

    def dentry_of(self, path):
        """(name, ino, type, offset) of the entry for path in its parent directory."""
        path = os.fsencode(path).strip(b"/")
        parent, base = os.path.split(path)
        pino = self.lookup(parent)
        for d in self.dentries(self.inode(pino)):
            if d[0] == base:
                return d
        raise KeyError(path)

    # -- xattrs
    def xattrs(self, inode):
        buf = b""
        if inode["inline"] & INLINE_XATTR and inode["xattr_addrs"]:
            buf = inode["raw"][4052 - 4 * inode["xattr_addrs"]:4052]
        if inode["xattr_nid"]:
            buf += self.node(inode["xattr_nid"])[:4072]
        res = {}
        if len(buf) < 24 or self.u32(buf, 0) != 0xF2F52011:
            return res
        o = 24
        while o + 4 <= len(buf) and self.u32(buf, o) != 0:
            idx, nl, vs = buf[o], buf[o + 1], self.u16(buf, o + 2)
            if o + 4 + nl + vs > len(buf):
                raise Corrupt("xattr entry overruns the buffer")
            name = buf[o + 4:o + 4 + nl].decode("utf-8", "replace")
            res[XATTR_PREFIX.get(idx, "index%d." % idx) + name] = buf[o + 4 + nl:o + 4 + nl + vs]
            o += (4 + nl + vs + 3) & ~3
        return res


def move_nat_to_journal(img, nids):
    """Rewrites a valid image so that the NAT entries of `nids` live only in the checkpoint's NAT
    journal (HOT_DATA summary of both packs; compact or normal layout) and their NAT-block
    entries are zero. The result is still consistent (fsck-clean): the journal overrides the
    NAT blocks. A reader that ignores the journal then loses these nodes. Returns the nids moved.
    Entries already in the journal only get their NAT-block entries zeroed."""
    with F2fsImage(img) as im:
        compact = bool(im.ckpt_flags & CP_COMPACT_SUM)
        jo = 0 if compact else 3584
        packs = [im.cp_blkaddr, im.cp_blkaddr + 512]
        cur = dict((n, e[:3]) for n, e in im.nat_journal.items())
        entries = {}
        for nid in nids:
            ver, ino, addr, off = im.nat_entry(nid)
            entries[nid] = (ver, ino, addr)
        block_offs = []
        for nid in entries:
            b = nid // NAT_ENTRY_PER_BLOCK
            base = im.nat_blkaddr + (b // 512) * 1024 + b % 512
            for a in (base, base + 512):        # zero both copies of the NAT block entry
                block_offs.append(a * BLK + (nid % NAT_ENTRY_PER_BLOCK) * 9)
        sums = []
        for p in packs:
            first = im.block(p)
            if im.u64(first, 0) != im.cp_ver:
                continue
            sums.append((p + im.u32(first, 140)) * BLK + jo)
    cur.update(entries)
    if len(cur) > 38:
        raise ValueError("the NAT journal holds at most 38 entries")
    j = struct.pack("<H", len(cur))
    for nid, (ver, ino, addr) in sorted(cur.items()):
        j += struct.pack("<IBII", nid, ver, ino, addr)
    with open(img, "r+b") as f:
        for off in block_offs:
            f.seek(off)
            f.write(bytes(9))
        for off in sums:
            f.seek(off)
            f.write(j)
    return sorted(entries)


def check_extents(img, chk, what="", regular_only=False):
    """Every inode reachable from the root: its largest extent (i_ext) must be true - each
    file block inside it mapped to exactly the block it says, as a kernel reading through it
    without the node assumes - and no inline inode may carry one.  regular_only: nor may a
    directory or symlink (a kernel keeps extents of regular files only, and rewrites the
    inode of any other that has one - even on a read-only mount).  Returns how many inodes
    had a non-empty extent and the blocks they covered."""
    with F2fsImage(img) as im:
        seen, todo, count, covered = set(), [im.root_ino], 0, 0
        while todo:
            ino = todo.pop()
            if ino in seen:
                continue
            seen.add(ino)
            i = im.inode(ino)
            fofs, blk, length = i["ext"]
            if length:
                count += 1
                covered += length
                tag = "%sino %d extent [file %d, block %d, %d blocks]" % (what, ino, fofs, blk, length)
                if i["inline"] & INLINE_DATA:
                    chk.fail(tag + ": an inline inode carries an extent")
                elif regular_only and not stat.S_ISREG(i["mode"]):
                    chk.fail(tag + ": a non-regular inode (mode %o) carries an extent" % i["mode"])
                elif ((fofs + length) * BLK > i["size"] + BLK - 1 and
                      not i["advise"] & (0x10 | 0x40)):  # KEEP_SIZE, VERITY: blocks past EOF
                    chk.fail(tag + ": reaches past the size %d" % i["size"])
                else:
                    bad = [k for k in range(length) if im.bmap(i, fofs + k) != blk + k]
                    if bad:
                        chk.fail("%s: file block %d maps to %d, not %d (%d of %d wrong)" %
                                 (tag, fofs + bad[0], im.bmap(i, fofs + bad[0]), blk + bad[0],
                                  len(bad), length))
            if stat.S_ISDIR(i["mode"]):
                todo += [c for name, c, ft, off in im.dentries(i) if name not in (b".", b"..")]
        return count, covered


def verify_image(img, src, chk, expected_xattrs=None, root_extra=()):
    """Offline oracle check: reads the image with F2fsImage and compares with the source tree.

    This validates the test's own expectations (what sload writes) without the daemon: if this
    passes and the mount differs, the mount is wrong. Returns the image object's summary dict.
    """
    src_b = os.fsencode(src)
    with F2fsImage(img) as im:
        root = im.inode(im.root_ino)
        chk.check(stat.S_ISDIR(root["mode"]), "image root is not a directory")
        seen = {}
        n = 0

        def walk(dir_ino, rel):
            nonlocal n
            ents = {name: (ino, ft) for name, ino, ft, _ in im.dentries(im.inode(dir_ino))}
            names = set(ents) - {b".", b".."}
            want = set(os.listdir(os.path.join(src_b, rel) if rel else src_b))
            if not rel:
                want |= set(os.fsencode(x) for x in root_extra)
            if names != want:
                chk.fail("image %s: names differ: extra %s missing %s" %
                         (fmt_path(rel) or "/", sorted(names - want)[:5], sorted(want - names)[:5]))
            chk.check(ents.get(b".", (None,))[0] == dir_ino, "image %s: '.' wrong" % (fmt_path(rel) or "/"))
            for name in sorted(names & want):
                if not rel and name in (os.fsencode(x) for x in root_extra):
                    continue
                ino, ft = ents[name]
                r = os.path.join(rel, name) if rel else name
                s = os.lstat(os.path.join(src_b, r))
                i = im.inode(ino)
                n += 1
                what = "image " + fmt_path(r)
                chk.check(i["mode"] == s.st_mode, "%s: mode %o, source %o" % (what, i["mode"], s.st_mode))
                chk.check((i["uid"], i["gid"]) == (s.st_uid, s.st_gid), "%s: owner %d:%d, source %d:%d" %
                          (what, i["uid"], i["gid"], s.st_uid, s.st_gid))
                chk.check(i["links"] == s.st_nlink, "%s: links %d, source %d" % (what, i["links"], s.st_nlink))
                t = int(s.st_mtime)
                chk.check((i["mtime"], i["ctime"], i["atime"], i["mtime_ns"]) == (t, t, t, 0),
                          "%s: times %s, expected %d for all" % (what, (i["atime"], i["ctime"], i["mtime"]), t))
                if expected_xattrs:
                    xa = im.xattrs(i)
                    chk.check(xa == (expected_xattrs(r) or {}), "%s: xattrs %s" % (what, xa))
                if stat.S_ISREG(s.st_mode):
                    if ino in seen:
                        continue
                    seen[ino] = r
                    chk.check(i["size"] == s.st_size, "%s: size" % what)
                    with open(os.path.join(src_b, r), "rb") as f:
                        chk.check(im.read_data(i) == f.read(), "%s: content differs" % what)
                elif stat.S_ISLNK(s.st_mode):
                    chk.check(im.read_data(i) == os.readlink(os.path.join(src_b, r)), "%s: target" % what)
                elif stat.S_ISDIR(s.st_mode):
                    chk.check(ents and im.inode(ino)["pino"] == dir_ino, "%s: pino" % what)
                    walk(ino, r)
        walk(im.root_ino, b"")
        info = dict(entries=n, valid_blocks=im.valid_block_count, cp_flags=im.ckpt_flags,
                    root_inline=root["inline"], feature=im.feature)
        return info
