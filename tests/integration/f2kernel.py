"""The real Linux f2fs as a test oracle: user-mode Linux (Debian's user-mode-linux package, a
Linux 6.1 kernel that runs as an ordinary process) boots with the host's / as its root (hostfs),
the image as its block device /dev/ubda, loads f2fs.ko and runs a shell script against the mount.
Python 3 stdlib only; builds on f2test.py.

  - kernel_available()        (ok, reason): a test exits 77 with the reason when not ok
  - kernel_run(img, script)   boots, mounts, runs the script (bash -e, cwd = the mount, $MNT set),
                              unmounts, powers off; returns a KernelResult (guest exit statuses,
                              the script's output, the console log). crash=... stops the guest
                              dead after the script instead of unmounting.
  - kernel_read_tree(img)     the tree as the kernel sees it, mounted ro on a read-only ubd
                              (so the kernel cannot run recovery or change anything):
                              {relpath: {type, mode, uid, gid, size, nlink, ino, mtime_ns,
                              ctime_ns, sha256, target, xattrs}}
  - kernel_apply(img, ops)    runs an op list (see apply_ops) in the kernel
  - kernel_crash_after(img, ops)  the same, then the UML process group is SIGKILLed without
                              any unmount or sync: what the guest fsync'ed is in the image file
  - KERNEL_LACKS              mkfs feature names this kernel build cannot mount
  - read_tree(dir)            the same walker on the host (an f2fuse mount, a reference dir);
                              files over BIG_FILE get a digest of their non-zero blocks, so
                              that a sparse 16 GiB file costs its data, not its holes
  - apply_ops(root, ops)      the op interpreter (runs on the host and, via `python3 f2kernel.py
                              --apply`, in the guest), so one op list builds the kernel's tree,
                              f2fuse's tree and a reference tree on the host's own filesystem
  - compare_trees()           two read_tree() dicts, per key
  - kernel_agrees(img, chk)   the final check of foreign-image and power-cut tests: the kernel
                              sees the image exactly as an f2fuse read-only mount does; with
                              recover=COPY (the image as a cut left it) the same boot lets the
                              kernel recover the copy itself, and the trees must be equal
  - kernel_every(), Sample    which of a family's images go to the kernel (CI: a few boots)

What this kernel build lacks: CONFIG_F2FS_FS_COMPRESSION, FS_ENCRYPTION, FS_VERITY and UNICODE
(casefold) are off. KERNEL_LACKS names those mkfs features; images with them cannot be mounted.

How the guest is stopped and why (measured on this machine, Debian 12, UML 6.1.176):
  - clean: umount, sync, then reboot(RB_POWER_OFF) from python3 (ctypes); the UML process exits 0.
  - crash: after the script the guest fsyncs its result files on hostfs, creates a "crash" file
    and sleeps; the host sees the file and SIGKILLs the whole process group (UML runs every guest
    address space as a host child process in the same group). No unmount, no sync, no
    checkpoint. ubd's I/O thread pwrite()s a request into the image file before it completes
    it, so what the guest fsync'ed is in the host's page cache, which every later reader of the
    file sees: the synchronous mode `ubd0s=` (O_SYNC) only matters if the host itself crashes.
    Measured: after the kill the fsync'ed files are only in the roll-forward chain and the
    kernel's own recovery of a copy gives exactly the fsync'ed content (test_kernel_oracle's
    control); reboot(RB_POWER_OFF) without sync (crash="poweroff") leaves the same state.
"""

import glob
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

UML = os.environ.get("F2FUSE_UML") or shutil.which("linux.uml") or "/usr/bin/linux.uml"
KERNEL_LACKS = ("compression", "encrypt", "verity", "casefold")
_HERE = os.path.abspath(__file__)
_counter = [0]


def _log(*a):
    print(*a, flush=True)


def _moddir():
    dirs = sorted(glob.glob("/usr/lib/uml/modules/*/kernel"))
    return dirs[-1] if dirs else None


def _modules():
    """The modules to insmod, in order (f2fs needs crc32, which is a module in this build, and
    an image with the quota feature needs the v2 quota format, a module too)."""
    d = _moddir()
    if not d:
        return []
    mods = []
    for rel in ("crypto/crc32_generic.ko", "lib/libcrc32c.ko", "fs/quota/quota_tree.ko",
                "fs/quota/quota_v2.ko", "fs/f2fs/f2fs.ko"):
        p = os.path.join(d, rel)
        if os.path.exists(p):
            mods.append(p)
    return mods


def _insmod():
    for p in ("/usr/sbin/insmod", "/sbin/insmod", "/usr/bin/insmod", "/bin/insmod"):
        if os.access(p, os.X_OK):
            return p
    return None


def kernel_available():
    """(True, "") or (False, why): user-mode-linux, its f2fs module and insmod (kmod) present."""
    if os.environ.get("F2FUSE_NO_KERNEL", "") not in ("", "0"):
        return False, "F2FUSE_NO_KERNEL is set"
    if not (os.path.isfile(UML) and os.access(UML, os.X_OK)):
        return False, "no %s (Debian package user-mode-linux)" % UML
    mods = _modules()
    if not any(m.endswith("/f2fs.ko") for m in mods):
        return False, "no f2fs.ko under /usr/lib/uml/modules (user-mode-linux package incomplete)"
    if not _insmod():
        return False, "no insmod (Debian package kmod)"
    if not shutil.which("python3"):
        return False, "no python3 for the guest side"
    return _boots()


_BOOT_PROBE = {}


def _boots():
    """(True, "") when UML boots on this host, else (False, why): checked once per process by
    booting it without a disk. Seen on a host whose CPU has AMX: UML 6.1 gives ptrace an FP
    register buffer smaller than the host's XSAVE area, every guest process dies ("ptrace set
    fp regs failed") and init panics - nothing a test can change."""
    if "result" in _BOOT_PROBE:
        return _BOOT_PROBE["result"]
    _BOOT_PROBE["result"] = (True, "")  # kernel_run below asks again
    res = None
    base = tempfile.mkdtemp(prefix="uml-probe-")
    try:
        img = os.path.join(base, "empty.img")
        with open(img, "wb") as f:
            f.truncate(1 << 20)
        res = kernel_run(img, "true\n", timeout=60, mount=False, name="boot_probe", quiet=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if res is not None and res.rc == 0:
        return _BOOT_PROBE["result"]
    why = "user-mode-linux does not boot on this host"
    console = res.console if res is not None else ""
    if "ptrace set fp regs failed" in console:
        why += (" (ptrace set fp regs failed: UML 6.1's FP register buffer is smaller than this"
                " CPU's XSAVE area, e.g. with AMX)")
    elif "Kernel panic" in console:
        why += " (the guest's init panicked)"
    _BOOT_PROBE["result"] = (False, why)
    return _BOOT_PROBE["result"]


class KernelResult:
    """rc: the script's exit status in the guest (None if it never finished); mount_rc, umount_rc
    likewise ("skipped" when not done); out: the script's stdout+stderr; console: the UML console
    (kernel messages); timed_out; killed (crash mode: the host killed the guest on purpose);
    secs; rundir (the files the guest wrote, removed unless kept); log_path (kept console log)."""

    def __init__(self):
        self.rc = self.mount_rc = self.umount_rc = None
        self.uml_rc = None
        self.out = self.console = ""
        self.timed_out = self.killed = False
        self.crash = None
        self.secs = 0.0
        self.rundir = None
        self.log_path = None
        self.leftover = 0
        self.files = {}
        self.recovered = None

    def ok(self):
        """The mount, the script and (unless crashed on purpose) the unmount all succeeded, no
        timeout."""
        return (not self.timed_out and self.mount_rc in (0, "skipped") and self.rc == 0 and
                (self.crash or self.umount_rc in (0, "skipped")))

    def kernel_errors(self, allow=()):
        """Console lines from f2fs or the kernel that look like trouble; allow: regular
        expressions of lines that are not (RECOVERY_INFO for a recovery mount)."""
        import re
        keys = ("F2FS-fs", "EXT4", "BUG", "WARNING", "Oops", "error", "corrupt", "inconsistent",
                "Structure needs cleaning", "Call Trace")
        skip = ("Mounted with checkpoint", "Found nat_bits", "Failed to initialize ubd device 0",
                "Unmounted", "epollctl",
                "write access unavailable, skipping recovery")   # info: a clean image on a ro ubd
        return [l for l in self.console.splitlines()
                if any(k in l for k in keys) and not any(s in l for s in skip) and
                not any(re.search(a, l) for a in allow)]

    def describe(self):
        bits = ["mount %s" % self.mount_rc, "script %s" % self.rc, "umount %s" % self.umount_rc]
        if self.timed_out:
            bits.append("TIMED OUT")
        if self.killed:
            bits.append("killed on purpose")
        s = ", ".join(bits)
        if self.log_path:
            s += "; console log kept at %s" % self.log_path
        return s


def _pgrp_members(pgid):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            fields = st[st.rindex(")") + 2:].split()
            if int(fields[2]) == pgid:
                pids.append(int(d))
        except (OSError, ValueError):
            pass
    return pids


def _kill_group(pgid):
    """SIGKILLs every process of the group until none is left; returns how many were found."""
    seen = set()
    for _ in range(100):
        pids = _pgrp_members(pgid)
        if not pids:
            break
        seen.update(pids)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
        time.sleep(0.02)
    return len(seen)


def _sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


_POWEROFF = "python3 -c 'import ctypes; ctypes.CDLL(None).reboot(0x4321fedc)'"


def _init_script(rundir, do_mount, mount_opts, crash):
    q = _sh_quote
    mods = " ".join(q(m) for m in _modules())
    lines = [
        "#!/bin/sh",
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH",
        "R=%s; MNT=\"$R/mnt\"; export R MNT" % q(rundir),
        "mount -t proc proc /proc",
        "for m in %s; do %s \"$m\" || echo \"F2K: insmod $m failed\"; done" % (mods, q(_insmod())),
        "mkdir -p \"$MNT\"",
        "st_mount=skipped; st_script=none; st_umount=skipped",
    ]
    if do_mount:
        lines += ["mount -t f2fs %s /dev/ubda \"$MNT\"; st_mount=$?" %
                  ("-o " + q(mount_opts) if mount_opts else "")]
    lines += [
        "if [ \"$st_mount\" = 0 ] || [ \"$st_mount\" = skipped ]; then",
        "  (cd \"$MNT\" && exec /bin/bash -e \"$R/script.sh\") >\"$R/out\" 2>&1 </dev/null",
        "  st_script=$?",
        "fi",
    ]
    if crash:
        # fsync only the result files on hostfs: a global sync would checkpoint the f2fs mount
        lines += [
            "echo \"mount=$st_mount script=$st_script umount=none\" >\"$R/status\"",
            "sync \"$R/out\" \"$R/status\"",
            "echo F2K-CRASH-READY",
            ": >\"$R/crash\"; sync \"$R/crash\"",
        ]
        if crash == "poweroff":
            lines += [_POWEROFF]
        lines += ["sleep 3600"]
    else:
        lines += [
            "cd /",
            "if [ \"$st_mount\" = 0 ]; then umount \"$MNT\"; st_umount=$?; fi",
            "echo \"mount=$st_mount script=$st_script umount=$st_umount\" >\"$R/status\"",
            "sync",
            "echo F2K-DONE",
            _POWEROFF,
            "sleep 3600",
        ]
    return "\n".join(lines) + "\n"


def _keep_log(res, name):
    root = os.environ.get("F2FUSE_ROOT") or os.path.join(os.path.dirname(_HERE), "..", "..")
    base = os.path.abspath(os.path.join(root, "build", "tmp", "kernel-logs"))
    try:
        os.makedirs(base, exist_ok=True)
        path = os.path.join(base, "%s-%s-%d.log" % (name, time.strftime("%Y%m%d-%H%M%S"), os.getpid()))
        with open(path, "w") as f:
            f.write("== %s\n== console\n%s\n== script output\n%s\n" % (res.describe(), res.console, res.out))
        res.log_path = path
    except OSError:
        pass


def kernel_run(image, script, timeout=120, mem="256M", mount=True, mount_opts=None,
               readonly=False, crash=None, name="kernel", keep_files=(), quiet=False,
               more_images=()):
    """Boots UML with `image` as /dev/ubda, mounts it (f2fs, `mount_opts`) at $MNT, runs `script`
    with bash -e in $MNT, unmounts and powers off.

    readonly: the ubd device is read-only (ubd0r=), so the kernel cannot write anything (no
    recovery either). crash: None (clean), "kill" (host SIGKILLs the UML process group after the
    script, no unmount) or "poweroff" (the guest calls reboot(RB_POWER_OFF) without sync).
    keep_files: names of files the script writes to $R (the run directory on the host, via
    hostfs) that are returned in result.files. more_images: [(path, readonly)] as /dev/ubdb,
    /dev/ubdc, ... (the script mounts them itself). On failure the console log is kept and its
    path printed. The timeout kills the whole process group."""
    res = KernelResult()
    res.crash = crash
    ok, why = kernel_available()
    if not ok:
        raise RuntimeError("kernel not available: " + why)
    image = os.path.abspath(image)
    _counter[0] += 1
    rundir = tempfile.mkdtemp(prefix="uml-%s-" % name, dir=os.path.dirname(image))
    res.rundir = rundir
    with open(os.path.join(rundir, "script.sh"), "w") as f:
        f.write(script)
    init = os.path.join(rundir, "init.sh")
    with open(init, "w") as f:
        f.write(_init_script(rundir, mount, mount_opts, crash))
    os.chmod(init, 0o755)
    umid = "f2k%d_%d" % (os.getpid(), _counter[0])
    argv = [UML, "mem=" + mem, "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "rw",
            "ubd0%s=%s" % ("r" if readonly else "", image)]
    for k, (path, ro) in enumerate(more_images):
        argv.append("ubd%d%s=%s" % (k + 1, "r" if ro else "", os.path.abspath(path)))
    argv += ["umid=" + umid, "uml_dir=" + rundir,
             "con0=null,fd:1", "con=null", "ssl=null", "init=" + init]
    console = os.path.join(rundir, "console.log")
    env = dict(os.environ)
    env.setdefault("TMPDIR", "/tmp")          # UML's memory file (created and unlinked there)
    t0 = time.monotonic()
    with open(console, "wb") as cf:
        # own session: no controlling terminal, so UML can never touch the caller's tty, and one
        # process group to kill
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=cf, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    pgid = proc.pid
    crash_file = os.path.join(rundir, "crash")
    deadline = t0 + timeout
    try:
        while proc.poll() is None:
            if crash == "kill" and os.path.exists(crash_file):
                res.killed = True
                break
            if time.monotonic() > deadline:
                res.timed_out = True
                break
            time.sleep(0.02)
    finally:
        res.leftover = _kill_group(pgid)
        try:
            res.uml_rc = proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
    res.secs = time.monotonic() - t0

    def rd(n):
        try:
            with open(os.path.join(rundir, n), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return None
    res.console = rd("console.log") or ""
    res.out = rd("out") or ""
    st = rd("status")
    if st:
        kv = dict(x.split("=", 1) for x in st.split())

        def conv(v):
            return int(v) if v.isdigit() else (None if v == "none" else v)
        res.mount_rc, res.rc = conv(kv.get("mount", "none")), conv(kv.get("script", "none"))
        res.umount_rc = conv(kv.get("umount", "none"))
    for n in keep_files:
        p = os.path.join(rundir, n)
        if os.path.exists(p):
            with open(p, "rb") as f:
                res.files[n] = f.read()
    if crash:       # no unmount on purpose
        good = not res.timed_out and res.mount_rc in (0, "skipped") and res.rc == 0
    else:
        good = res.ok()
    if not good:
        _keep_log(res, name)
        if not quiet:
            _log("   kernel run %s failed: %s" % (name, res.describe()))
            for l in res.kernel_errors()[:12]:
                _log("     console: " + l)
            if res.out.strip():
                _log("     script output (tail):\n       " + "\n       ".join(res.out.splitlines()[-12:]))
    shutil.rmtree(rundir, ignore_errors=True)
    return res


# ------------------------------------------------------------------------------------------------
# trees

def _xattrs(p):
    try:
        names = os.listxattr(p, follow_symlinks=False)
    except OSError:
        return {}
    res = {}
    for n in sorted(names):
        try:
            res[n] = os.getxattr(p, n, follow_symlinks=False).hex()
        except OSError as e:
            res[n] = "error:%d" % e.errno
    return res


# Files above BIG_FILE (the model tester writes sparse ones of up to 16 GiB) get a digest that
# does not need their holes read: sha256 over the size and every non-zero 4 KiB block with its
# index.  Zero blocks and holes count alike, so it is the same whichever ranges a side reads,
# as long as they cover every non-zero block.  The kernel (and ext4) find those ranges with
# SEEK_DATA/SEEK_HOLE; an f2fuse mount (no lseek of its own: FUSE reports the whole file as
# data) reads the ranges the kernel's walk found (plan=), plus the same probes into the holes.
BIG_FILE = 64 << 20
PROBES = 16
_ZERO_BLOCK = bytes(4096)


def read_tree(root, plan=None):
    """{relpath (str, "" for the root): entry} for everything under root, not following
    symlinks.  plan: a tree read before (the kernel's) whose big files' "ranges" this walk
    reads instead of finding its own."""
    tree = {}
    root_b = os.fsencode(root)
    stack = [b""]
    while stack:
        rel = stack.pop()
        full = os.path.join(root_b, rel) if rel else root_b
        try:
            tree[os.fsdecode(rel)] = _entry(full, rel, stack, plan)
        except OSError as e:
            # one bad inode must not hide the rest: record the errno and go on
            tree[os.fsdecode(rel)] = dict(type="error", errno=e.errno, error=os.strerror(e.errno))
    return tree


def _data_ranges(fd, size):
    """[(lo, hi)] byte ranges holding data (f2model.data_ranges), 4 KiB aligned, the last
    block and PROBES blocks inside the holes (placed by the size alone) included."""
    import f2model
    out = [(lo // 4096 * 4096, -(-hi // 4096) * 4096) for lo, hi in f2model.data_ranges(fd, size)]
    nblocks = -(-size // 4096)
    for k in range(PROBES):
        b = (k * 2654435761 + size) % nblocks
        out.append((b * 4096, b * 4096 + 4096))
    out.append(((nblocks - 1) * 4096, nblocks * 4096))
    merged = []
    for lo, hi in sorted(out):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _digest_big(f, size, ranges):
    """(hex digest, bytes readable): see BIG_FILE; a short read ends the count there."""
    h = hashlib.sha256(b"size %d\n" % size)
    fd = f.fileno()
    for lo, hi in ranges:
        off = lo
        while off < min(hi, size):
            want = min(hi, size, off + (1 << 20)) - off
            b = os.pread(fd, want, off)
            for i in range(0, len(b), 4096):
                blk = b[i:i + 4096]
                if blk != _ZERO_BLOCK[:len(blk)]:
                    h.update(b"%d " % ((off + i) // 4096))
                    h.update(blk)
            if len(b) < want:
                return h.hexdigest(), off + len(b)
            off += want
    return h.hexdigest(), size


def _entry(full, rel, stack, plan=None):
    st = os.lstat(full)
    e = dict(mode=st.st_mode, uid=st.st_uid, gid=st.st_gid, size=st.st_size, nlink=st.st_nlink,
             ino=st.st_ino, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns,
             xattrs=_xattrs(full))
    if stat.S_ISDIR(st.st_mode):
        e["type"] = "dir"
        for n in sorted(os.listdir(full)):
            if not rel and n == b"lost+found":
                continue
            stack.append(os.path.join(rel, n) if rel else n)
    elif stat.S_ISREG(st.st_mode) and st.st_size > BIG_FILE:
        e["type"] = "file"
        with open(full, "rb", buffering=0) as f:
            known = (plan or {}).get(os.fsdecode(rel)) or {}
            ranges = known.get("ranges") if known.get("size") == st.st_size else None
            if ranges is None:
                ranges = _data_ranges(f.fileno(), st.st_size)
            e["sha256"], e["read_bytes"] = _digest_big(f, st.st_size, ranges)
        e["ranges"] = ranges
    elif stat.S_ISREG(st.st_mode):
        e["type"] = "file"
        h = hashlib.sha256()
        n = 0
        with open(full, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
                n += len(b)
        e["sha256"] = h.hexdigest()
        e["read_bytes"] = n
    elif stat.S_ISLNK(st.st_mode):
        e["type"] = "symlink"
        e["target"] = os.fsdecode(os.readlink(full))
    else:
        e["type"] = "other"
    return e


# What the kernel's recovery mount of a cut image says when all is well (fs/f2fs/recovery.c
# names every inode it replays; a cut inside a checkpoint pack leaves that pack's CRC offset
# zero, and the kernel takes the other pack, as fsck.f2fs does): matched on its device only.
RECOVERY_DEV = "ubdb"
RECOVERY_INFO = tuple(r"\(%s\): " % RECOVERY_DEV + x for x in (
    r"recover_inode: ", r"recover_(dentry|data): .*, err = 0$", r"checkpoint: version = ",
    r"invalid crc_offset: 0$"))


def kernel_read_tree(image, timeout=120, name="read_tree", mount_opts="ro", quiet=False,
                     recover=None):
    """(tree or None, KernelResult): the tree as the kernel shows it, from a read-only ubd.
    recover: a second image that the same boot mounts read-write (/dev/ubdb), so that the
    kernel runs its own roll-forward recovery and orphan cleanup on it, and walks: that tree
    is res.recovered (None when its mount failed; pass a copy, the kernel writes it)."""
    h = _sh_quote(_HERE)
    script = "python3 %s --walk \"$MNT\" \"$R/tree.json\"\n" % h
    if recover:
        script += ("mkdir -p \"$R/rec\"\n"
                   "if mount -t f2fs /dev/%s \"$R/rec\"; then\n"
                   "  python3 %s --walk \"$R/rec\" \"$R/rec.json\"\n"
                   "  umount \"$R/rec\"\n"
                   "else echo \"F2K: the recovery mount failed\"; fi\n" % (RECOVERY_DEV, h))
    res = kernel_run(image, script, timeout=timeout, mount_opts=mount_opts, readonly=True,
                     name=name, keep_files=("tree.json", "rec.json"), quiet=quiet,
                     more_images=[(recover, False)] if recover else ())
    res.recovered = json.loads(res.files["rec.json"].decode()) if "rec.json" in res.files else None
    if not res.ok() or "tree.json" not in res.files:
        return None, res
    return json.loads(res.files["tree.json"].decode()), res


def kernel_apply(image, ops, timeout=180, name="apply", crash=None, mount_opts=None, pre="", post=""):
    """Runs apply_ops(ops) in the kernel on the mounted image (then unmounts, or crashes)."""
    rundir_ops = tempfile.NamedTemporaryFile("w", suffix=".ops.json", dir=os.path.dirname(os.path.abspath(image)),
                                             delete=False)
    with rundir_ops as f:
        json.dump(ops, f)
    try:
        script = "%s\npython3 %s --apply %s \"$MNT\"\n%s\n" % (pre, _sh_quote(_HERE), _sh_quote(rundir_ops.name), post)
        return kernel_run(image, script, timeout=timeout, name=name, crash=crash, mount_opts=mount_opts)
    finally:
        os.unlink(rundir_ops.name)


def kernel_crash_after(image, ops, timeout=180, name="crash", mount_opts=None):
    """apply_ops in the kernel, then the UML process group is SIGKILLed: no unmount, no sync."""
    return kernel_apply(image, ops, timeout=timeout, name=name, crash="kill", mount_opts=mount_opts)


def compare_trees(chk, got, want, keys=("type", "mode", "uid", "gid", "size", "nlink", "sha256",
                                         "target", "xattrs"),
                  what="tree", paths=None, dir_size=False):
    """Records a failure for every path missing/extra and every differing key. `paths` limits
    the comparison (then extra paths in `got` are not reported). Directory sizes are compared
    only with dir_size (they are an f2fs detail that a reference tree on ext4 does not share)."""
    n = 0
    names = sorted(paths if paths is not None else set(got) | set(want))
    for p in names:
        g, w = got.get(p), want.get(p)
        if g is None or w is None:
            chk.fail("%s: %r %s" % (what, p, "missing" if g is None else "unexpected (not in the model)"))
            continue
        n += 1
        if g.get("type") == "error" or w.get("type") == "error":
            chk.fail("%s: %r: %s" % (what, p, "; ".join("%s: %s (errno %s)" % (side, x.get("error"), x.get("errno"))
                                                    for side, x in (("got", g), ("expected", w))
                                                    if x.get("type") == "error")))
            continue
        for k in keys:
            if k == "size" and w.get("type") == "dir" and not dir_size:
                continue
            if k == "sha256" and w.get("type") == "file" and g.get("read_bytes") != w.get("read_bytes"):
                chk.fail("%s: %r read %s bytes, expected %s" % (what, p, g.get("read_bytes"), w.get("read_bytes")))
                continue
            if g.get(k) != w.get(k):
                gv, wv = g.get(k), w.get(k)
                if k == "mode":
                    gv, wv = oct(gv) if gv is not None else gv, oct(wv) if wv is not None else wv
                chk.fail("%s: %r %s %s, expected %s" % (what, p, k, str(gv)[:120], str(wv)[:120]))
    chk.checks += n
    return n


# ------------------------------------------------------------------------------------------------
# the op interpreter (host and guest)

def kernel_agrees(img, chk, what, binary=None, features=None, recover=None):
    """The final-image check every foreign-image and power-cut test ends with: the kernel
    mounts img (read-only ubd) and must see every entry exactly as an f2fuse read-only mount
    of the same image shows it (type, mode, owner, size, links, content, symlink target,
    xattrs, inode number), with no complaint in its log.  The test has checked f2fuse's view
    against its own model, so this hands the model to the kernel.

    recover (power-cut tests): a copy of the image as the cut left it, before f2fuse's
    recovery (img is what f2fuse's recovery made of it).  The same boot mounts the copy
    read-write, so that the kernel replays the roll-forward chain and cleans the orphans
    itself, and its tree must equal f2fuse's too: the two recoveries agree.

    Returns False when it failed, None when the kernel cannot run here (or lacks one of the
    image's features), with a log line saying why, else True."""
    import f2test as T
    ok, why = kernel_available()
    lacking = [f for f in (features or ()) if f in KERNEL_LACKS]
    if not ok or lacking:
        _log("   kernel check of %s skipped: %s" % (what, why or "this kernel lacks %s" % lacking))
        return None
    before = len(chk.failures)
    theirs, res = kernel_read_tree(img, name="agree", recover=recover)
    if theirs is None:
        chk.fail("%s: the kernel could not read the image (%s): %s" %
                 (what, res.describe(), res.kernel_errors()[:6]))
        return False
    mnt = tempfile.mkdtemp(prefix="kagree-", dir=os.path.dirname(os.path.abspath(img)))
    try:
        with T.Mount(binary or T.F2FUSE_BIN, img, mnt, "ro", checker=chk) as m:
            mine = read_tree(m.path, plan=theirs)   # big files: the kernel's data ranges
    finally:
        shutil.rmtree(mnt, ignore_errors=True)
    errs = res.kernel_errors(allow=RECOVERY_INFO if recover else ())
    chk.check(not errs, "%s: kernel messages while reading%s: %s" %
              (what, " and recovering" if recover else "", errs[:6]))
    keys = ("type", "mode", "uid", "gid", "size", "nlink", "sha256", "target", "xattrs", "ino")
    if "" in mine and "" in theirs:   # FUSE numbers the root 1 whatever its inode is
        mine[""]["ino"] = theirs[""].get("ino")
    compare_trees(chk, theirs, mine, what="%s: kernel vs f2fuse" % what, keys=keys)
    replayed = ""
    if recover:
        if res.recovered is None:
            chk.fail("%s: the kernel's recovery mount of the cut image failed: %s" %
                     (what, (res.out.strip().splitlines() or ["?"])[-1]))
        else:
            compare_trees(chk, res.recovered, mine, keys=keys,
                          what="%s: kernel's recovery vs f2fuse's" % what)
            replayed = ", its recovery replayed %d inode(s)" % sum(
                1 for l in res.console.splitlines() if "(%s): recover_inode: " % RECOVERY_DEV in l)
    good = len(chk.failures) == before
    _log("   kernel %s %s (%d entries%s, %.1fs)" % ("agrees on" if good else "DISAGREES on", what,
                                                   len(theirs), replayed, res.secs))
    return good


LONG = "--long" in sys.argv or os.environ.get("F2FUSE_LONG", "") not in ("", "0")


def kernel_every(ci, long):
    """How often a family hands one of its images to the kernel: every ci-th in CI, every
    long-th with --long or F2FUSE_LONG=1; F2FUSE_KERNEL_EVERY=N overrides both (0: never)."""
    env = os.environ.get("F2FUSE_KERNEL_EVERY", "")
    if env.strip():
        return max(0, int(env))
    return long if LONG else ci


class Sample:
    """Picks the cases of a run that get the (~3 s) kernel check: the first of each run
    (key) and then every `every`-th of it; counts the boots and their seconds."""

    def __init__(self, every):
        self.every = every
        self.seen = {}
        self.boots = self.agreed = 0
        self.secs = 0.0

    def due(self, key=None):
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        return self.every > 0 and n % self.every == 0

    def check(self, img, chk, what, **kw):
        """kernel_agrees, counted (a skip is not a boot)."""
        t0 = time.monotonic()
        good = kernel_agrees(img, chk, what, **kw)
        if good is not None:
            self.boots += 1
            self.agreed += bool(good)
            self.secs += time.monotonic() - t0
        return good

    def summary(self):
        return "%d kernel boot(s), %d agreed, %.0f s" % (self.boots, self.agreed, self.secs)


def content(tag, length):
    """Deterministic bytes for a write op: the same on the host and in the guest."""
    import random
    r = random.Random(tag)
    if length <= 0:
        return b""
    # half the content compressible-looking runs, half random: both kinds of pages appear
    if r.random() < 0.3:
        return bytes([r.randrange(256)]) * length
    return r.randbytes(length)


def acl_xattr(entries):
    """The posix_acl xattr value (version 2) for [(tag, perm, id)]; tags 1 USER_OBJ, 2 USER,
    4 GROUP_OBJ, 8 GROUP, 0x10 MASK, 0x20 OTHER."""
    import struct
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)


def apply_ops(root, ops):
    """Runs ops (a list of lists, JSON-safe) under root. Ops:
      mkdir P MODE | write P OFF LEN TAG | append P LEN TAG | trunc P SIZE | fsync P
      | symlink TARGET P | link OLD NEW | rename OLD NEW | unlink P | rmdir P
      | setxattr P NAME HEX | removexattr P NAME | chmod P MODE | chown P UID GID | sync"""
    J = lambda p: os.path.join(root, p)     # noqa: E731
    for op in ops:
        k = op[0]
        if k == "mkdir":
            os.mkdir(J(op[1]), op[2])
            os.chmod(J(op[1]), op[2])
        elif k in ("write", "append"):
            fd = os.open(J(op[1]), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if k == "write":
                    off, ln, tag = op[2], op[3], op[4]
                else:
                    off, ln, tag = os.fstat(fd).st_size, op[2], op[3]
                data = content(tag, ln)
                done = 0
                while done < len(data):
                    done += os.pwrite(fd, data[done:done + (1 << 20)], off + done)
            finally:
                os.close(fd)
        elif k == "trunc":
            os.truncate(J(op[1]), op[2])
        elif k == "fsync":
            fd = os.open(J(op[1]), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        elif k == "symlink":
            os.symlink(op[1], J(op[2]))
        elif k == "link":
            os.link(J(op[1]), J(op[2]))
        elif k == "rename":
            os.rename(J(op[1]), J(op[2]))
        elif k == "unlink":
            os.unlink(J(op[1]))
        elif k == "rmdir":
            os.rmdir(J(op[1]))
        elif k == "setxattr":
            os.setxattr(J(op[1]), op[2], bytes.fromhex(op[3]), follow_symlinks=False)
        elif k == "removexattr":
            os.removexattr(J(op[1]), op[2], follow_symlinks=False)
        elif k == "chmod":
            os.chmod(J(op[1]), op[2])
        elif k == "chown":
            os.chown(J(op[1]), op[2], op[3], follow_symlinks=False)
        elif k == "sync":
            os.sync()
        else:
            raise ValueError("unknown op %r" % (op,))


def _main(argv):
    if len(argv) == 4 and argv[1] == "--walk":
        tree = read_tree(argv[2])
        with open(argv[3], "w") as f:
            json.dump(tree, f)
            f.flush()
            os.fsync(f.fileno())
        return 0
    if len(argv) == 4 and argv[1] == "--apply":
        with open(argv[2]) as f:
            ops = json.load(f)
        apply_ops(argv[3], ops)
        return 0
    sys.stderr.write("usage: f2kernel.py --walk DIR OUT.json | --apply OPS.json DIR\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
