"""Shared code of the model-based f2fuse tests (test_model, test_concurrency). Python 3 stdlib.

The model of an f2fs mount is a reference directory on a host file system (ext4): every
operation is applied to both, with the same arguments, and the outcomes (result or errno) must
be equal. This module has:

  - Side        one root (the mount or the reference) and the operations on it; Side.apply(op)
                returns a comparable outcome: ("ok", ...) or ("err", "ENOENT"), ...
  - Snapshot    the reference tree as the generator sees it (types, sizes, depths, usage)
  - Gen         draws random operations (plain dicts, JSON-serialisable, so that a failing
                sequence can be written out, replayed and shrunk)
  - compare_trees()   the whole tree: listings, d_type, type, mode, owner, nlink, size, rdev,
                content, symlink targets, user xattrs, hard-link identity, explicit mtimes
  - fallocate(), renameat2()   ctypes wrappers
  - fmt_op()    one operation in a readable one-line form

Semantics the operations rely on (so that an f2fs mount and ext4 must agree):
  - no operation follows a symlink in its last component (O_NOFOLLOW, lstat, l*xattr, lchown,
    utimensat(AT_SYMLINK_NOFOLLOW)); opens of anything but a regular file or a directory are
    not done at all (outcome ("special", type)), so fifos never block and device nodes are
    never opened; symlinks are never used as a directory in a path;
  - directory sizes and st_blocks are file-system specific and not compared; times only where
    they were set explicitly (utime) and not changed since;
  - xattrs stay small (a few names, values < 512 bytes), well under both file systems' limits;
  - file sizes stay far below both file systems' maximum sizes.
"""

import ctypes
import errno
import hashlib
import json
import os
import random
import re
import stat

BLK = 4096

# ------------------------------------------------------------------------------------------------
# ctypes

_libc = ctypes.CDLL(None, use_errno=True)
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_AT_FDCWD = -100

_fallocate = _libc.fallocate64 if hasattr(_libc, "fallocate64") else _libc.fallocate
_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_fallocate.restype = ctypes.c_int


def fallocate(fd, mode, off, length):
    if _fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def renameat2(src, dst, flags):
    if hasattr(_libc, "renameat2"):
        f = _libc.renameat2
        f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        r = f(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags)
    else:  # x86_64 syscall number
        r = _libc.syscall(316, _AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ------------------------------------------------------------------------------------------------
# helpers

TYPES = {stat.S_IFREG: "reg", stat.S_IFDIR: "dir", stat.S_IFLNK: "lnk", stat.S_IFIFO: "fifo",
         stat.S_IFSOCK: "sock", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk"}


def tname(mode):
    return TYPES.get(stat.S_IFMT(mode), "?%o" % stat.S_IFMT(mode))


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def make_data(ds, n, pat):
    """Deterministic content for a write: pat 'rand', 'zero' or 'text'."""
    if n <= 0:
        return b""
    if pat == "zero":
        return bytes(n)
    if pat == "text":
        unit = ("<%d>" % ds).encode() * 8 + b"\n"
        return (unit * (n // len(unit) + 1))[:n]
    return random.Random(ds).randbytes(n)


class Blob:
    """Data in an outcome: compared by content, printed as length + hash."""
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = bytes(data)

    def __eq__(self, o):
        return isinstance(o, Blob) and o.data == self.data

    def __hash__(self):
        return hash(self.data)

    def __repr__(self):
        return "<%d bytes sha1 %s>" % (len(self.data), hashlib.sha1(self.data).hexdigest()[:12])


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(n, i + 4096)):
                if a[j] != b[j]:
                    return j
    return n if len(a) != len(b) else None


def ssum(st):
    """What must agree in a stat: type, permission bits, nlink, size (not of dirs), owner, rdev."""
    t = tname(st.st_mode)
    return (t, "%04o" % stat.S_IMODE(st.st_mode), st.st_nlink,
            None if t == "dir" else st.st_size, st.st_uid, st.st_gid,
            (os.major(st.st_rdev), os.minor(st.st_rdev)) if t in ("chr", "blk") else None)


def pwrite_all(fd, data, off):
    mv = memoryview(data)
    done = 0
    while done < len(mv):
        n = os.pwrite(fd, mv[done:done + (4 << 20)], off + done)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        done += n


def write_all(fd, data):
    mv = memoryview(data)
    done = 0
    while done < len(mv):
        n = os.write(fd, mv[done:done + (4 << 20)])
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        done += n


def pread_all(fd, n, off):
    out = []
    while n > 0:
        d = os.pread(fd, min(n, 4 << 20), off)
        if not d:
            break
        out.append(d)
        n -= len(d)
        off += len(d)
    return b"".join(out)


class Special(Exception):
    """The target is not something an open-based operation may open."""


OFLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

USER_XATTR = "user."


# ------------------------------------------------------------------------------------------------
# one side: the mount or the reference

class Side:
    def __init__(self, root, name):
        self.root = root
        self.name = name
        self.held = {}              # slot -> fd
        self.drop_cache = False     # posix_fadvise(DONTNEED) before reads (the mount side)

    def p(self, rel):
        return os.path.join(self.root, rel) if rel else self.root

    def close_all(self):
        for fd in self.held.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.held.clear()

    def apply(self, op):
        fn = getattr(self, "op_" + op["k"])
        try:
            r = fn(op)
            return ("ok",) + tuple(r or ())
        except Special as e:
            return ("special", str(e))
        except OSError as e:
            return ("err", errname(e))

    # -- guards
    def _open(self, rel, flags, mode=0o644):
        """Opens rel unless it is a symlink, fifo, socket or device (Special)."""
        path = self.p(rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
            st = None
        if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise Special(tname(st.st_mode))
        return os.open(path, flags | OFLAGS, mode)

    def _nolink(self, rel):
        st = os.lstat(self.p(rel))
        if stat.S_ISLNK(st.st_mode):
            raise Special("lnk")
        return st

    def _fadvise(self, fd):
        if self.drop_cache:
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass

    # -- file content
    def op_create(self, op):
        fl = os.O_CREAT | os.O_WRONLY | (os.O_EXCL if op.get("excl") else 0) | \
            (os.O_TRUNC if op.get("trunc") else 0)
        fd = self._open(op["p"], fl, op["mode"])
        try:
            return ssum(os.fstat(fd))
        finally:
            os.close(fd)

    def op_write(self, op):
        fd = self._open(op["p"], os.O_WRONLY)
        try:
            pwrite_all(fd, make_data(op["ds"], op["n"], op["pat"]), op["off"])
            return (os.fstat(fd).st_size,)
        finally:
            os.close(fd)

    def op_append(self, op):
        fd = self._open(op["p"], os.O_WRONLY | os.O_APPEND)
        try:
            write_all(fd, make_data(op["ds"], op["n"], op["pat"]))
            return (os.fstat(fd).st_size,)
        finally:
            os.close(fd)

    def op_overwrite(self, op):
        fd = self._open(op["p"], os.O_WRONLY | os.O_TRUNC)
        try:
            write_all(fd, make_data(op["ds"], op["n"], op["pat"]))
            return (os.fstat(fd).st_size,)
        finally:
            os.close(fd)

    def op_truncate(self, op):
        if op.get("via") == "path":
            self._nolink(op["p"])
            os.truncate(self.p(op["p"]), op["size"])
            return (os.lstat(self.p(op["p"])).st_size,)
        fd = self._open(op["p"], os.O_WRONLY)
        try:
            os.ftruncate(fd, op["size"])
            return (os.fstat(fd).st_size,)
        finally:
            os.close(fd)

    def op_read(self, op):
        fd = self._open(op["p"], os.O_RDONLY)
        try:
            if op.get("drop"):
                self._fadvise(fd)
            return (Blob(pread_all(fd, op["n"], op["off"])),)
        finally:
            os.close(fd)

    def op_fallocate(self, op):
        fd = self._open(op["p"], os.O_RDWR)
        try:
            fallocate(fd, op["mode"], op["off"], op["n"])
            return (os.fstat(fd).st_size,)
        finally:
            os.close(fd)

    def op_fsync(self, op):
        fd = self._open(op["p"], os.O_RDONLY)
        try:
            (os.fdatasync if op.get("data") else os.fsync)(fd)
        finally:
            os.close(fd)

    def op_open_unlink(self, op):
        """open, unlink, write and read through the descriptor, fstat, close."""
        fd = self._open(op["p"], os.O_RDWR)
        try:
            os.unlink(self.p(op["p"]))
            if op["n"]:
                pwrite_all(fd, make_data(op["ds"], op["n"], op["pat"]), op["off"])
            if op.get("sync"):
                os.fsync(fd)
            st = os.fstat(fd)
            self._fadvise(fd)
            # the head, and around what was written (never the whole of a huge sparse file)
            lo = max(0, op["off"] - 8192)
            return (st.st_nlink, st.st_size, Blob(pread_all(fd, 65536, 0)),
                    Blob(pread_all(fd, min(op["n"], 4 << 20) + 16384, lo)))
        finally:
            os.close(fd)

    # -- descriptors held across operations
    def op_hold(self, op):
        old = self.held.pop(op["slot"], None)
        if old is not None:
            os.close(old)
        if op.get("opath"):
            # O_PATH: a reference the kernel holds without FUSE_OPEN (any type, no follow)
            fd = os.open(self.p(op["p"]), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        else:
            fd = self._open(op["p"], os.O_RDWR)
        self.held[op["slot"]] = fd
        return ssum(os.fstat(fd))

    def op_hio(self, op):
        fd = self.held.get(op["slot"])
        if fd is None:
            return ("no descriptor",)
        w = op["what"]
        if w == "write":
            pwrite_all(fd, make_data(op["ds"], op["n"], op["pat"]), op["off"])
        elif w == "trunc":
            os.ftruncate(fd, op["size"])
        elif w == "read":
            self._fadvise(fd)
            return (Blob(pread_all(fd, op["n"], op["off"])),)
        elif w == "fsync":
            os.fsync(fd)
        elif w == "punch":
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, op["off"], op["n"])
        return ssum(os.fstat(fd))

    def op_release(self, op):
        fd = self.held.pop(op["slot"], None)
        if fd is None:
            return ("no descriptor",)
        os.close(fd)

    # -- namespace
    def op_mkdir(self, op):
        os.mkdir(self.p(op["p"]), op["mode"])
        return ssum(os.lstat(self.p(op["p"])))

    def op_rmdir(self, op):
        os.rmdir(self.p(op["p"]))

    def op_unlink(self, op):
        os.unlink(self.p(op["p"]))

    def op_rename(self, op):
        if op.get("fl"):
            renameat2(self.p(op["s"]), self.p(op["d"]), op["fl"])
        else:
            os.rename(self.p(op["s"]), self.p(op["d"]))
        return ssum(os.lstat(self.p(op["d"])))

    def op_link(self, op):
        os.link(self.p(op["s"]), self.p(op["d"]), follow_symlinks=False)
        return ssum(os.lstat(self.p(op["d"])))

    def op_symlink(self, op):
        os.symlink(op["t"], self.p(op["p"]))
        return ssum(os.lstat(self.p(op["p"])))

    def op_readlink(self, op):
        return (os.readlink(self.p(op["p"])),)

    def op_mknod(self, op):
        t = {"fifo": stat.S_IFIFO, "chr": stat.S_IFCHR, "blk": stat.S_IFBLK,
             "sock": stat.S_IFSOCK}[op["t"]]
        os.mknod(self.p(op["p"]), t | op["mode"], os.makedev(*op["dev"]) if op.get("dev") else 0)
        return ssum(os.lstat(self.p(op["p"])))

    def op_listdir(self, op):
        fd = self._open(op["p"], os.O_RDONLY | os.O_DIRECTORY)
        try:
            out = []
            with os.scandir(fd) as it:
                for e in it:
                    t = "l" if e.is_symlink() else "d" if e.is_dir(follow_symlinks=False) else \
                        "f" if e.is_file(follow_symlinks=False) else "o"
                    out.append((e.name, t))
            return (sorted(out),)
        finally:
            os.close(fd)

    def op_bulk(self, op):
        """Many names in one directory (m0000..): create (O_EXCL, a few bytes), unlink or
        rename to M0000.. . Outcome: the per-name results, run-length encoded."""
        res = []
        for i in range(op["lo"], op["hi"]):
            a = self.p(os.path.join(op["p"], "m%04d" % i))
            try:
                if op["what"] == "create":
                    fd = os.open(a, os.O_CREAT | os.O_EXCL | os.O_WRONLY | OFLAGS, 0o644)
                    try:
                        os.write(fd, b"%d\n" % i * (i % 5))
                    finally:
                        os.close(fd)
                elif op["what"] == "unlink":      # m...., else M....
                    try:
                        os.unlink(a)
                    except FileNotFoundError:
                        os.unlink(self.p(os.path.join(op["p"], "M%04d" % i)))
                else:
                    os.rename(a, self.p(os.path.join(op["p"], "M%04d" % i)))
                r = "ok"
            except OSError as e:
                r = errname(e)
            if res and res[-1][0] == r:
                res[-1][1] += 1
            else:
                res.append([r, 1])
        return (tuple(tuple(x) for x in res),)

    # -- attributes
    def op_stat(self, op):
        return ssum(os.lstat(self.p(op["p"])))

    def op_chmod(self, op):
        self._nolink(op["p"])
        os.chmod(self.p(op["p"]), op["mode"])
        return ssum(os.lstat(self.p(op["p"])))

    def op_chown(self, op):
        os.lchown(self.p(op["p"]), op["uid"], op["gid"])
        return ssum(os.lstat(self.p(op["p"])))

    def op_utime(self, op):
        os.utime(self.p(op["p"]), ns=(op["at"], op["mt"]), follow_symlinks=False)
        st = os.lstat(self.p(op["p"]))
        return (st.st_atime_ns, st.st_mtime_ns)

    def op_setxattr(self, op):
        os.setxattr(self.p(op["p"]), op["name"], make_data(op["ds"], op["n"], op["pat"]),
                    op["fl"], follow_symlinks=False)

    def op_getxattr(self, op):
        return (Blob(os.getxattr(self.p(op["p"]), op["name"], follow_symlinks=False)),)

    def op_removexattr(self, op):
        os.removexattr(self.p(op["p"]), op["name"], follow_symlinks=False)

    def op_listxattr(self, op):
        return (sorted(n for n in os.listxattr(self.p(op["p"]), follow_symlinks=False)
                       if n.startswith(USER_XATTR)),)


# ------------------------------------------------------------------------------------------------
# the reference tree as the generator sees it

class Snapshot:
    def __init__(self, root):
        self.ents = {}        # rel -> lstat
        self.depth = {"": 0}
        self.height = {}      # dir rel -> depth of its deepest subdirectory below it (0: none)
        seen = set()
        self.alloc = 0
        self.apparent = 0

        def walk(rel, d):
            h = 0
            full = os.path.join(root, rel) if rel else root
            for name in sorted(os.listdir(full)):
                r = os.path.join(rel, name) if rel else name
                st = os.lstat(os.path.join(full, name))
                self.ents[r] = st
                self.depth[r] = d + 1
                if stat.S_ISDIR(st.st_mode):
                    h = max(h, 1 + walk(r, d + 1))
                elif stat.S_ISREG(st.st_mode) and st.st_ino not in seen:
                    seen.add(st.st_ino)
                    self.alloc += st.st_blocks * 512
                    self.apparent += st.st_size
            self.height[rel] = h
            return h
        walk("", 0)
        self.dirs = [""] + [r for r, st in self.ents.items() if stat.S_ISDIR(st.st_mode)]
        self.regs = [r for r, st in self.ents.items() if stat.S_ISREG(st.st_mode)]
        self.nondirs = [r for r, st in self.ents.items() if not stat.S_ISDIR(st.st_mode)]
        self.all = list(self.ents)

    def is_dir(self, rel):
        return rel == "" or (rel in self.ents and stat.S_ISDIR(self.ents[rel].st_mode))

    def size(self, rel):
        st = self.ents.get(rel)
        return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0


# ------------------------------------------------------------------------------------------------
# the generator

NAMES = ["a", "b", "c", "d", "e", "f", "name_of_forty_characters_xxxxxxxxxxxxxx", "L" * 255]
NAME_W = [10, 10, 9, 8, 6, 5, 2, 1]
XNAMES = ["user.a", "user.b", "user.c", "user.a_rather_long_attribute_name_" + "x" * 30]
MAX_DEPTH = 4

# file block indices where f2fs's block map changes level (direct addresses in the inode:
# 923 minus the inline xattr area and the extra attribute area, depending on features)
_EDGES = []
for _a in (873, 869, 859, 923):
    for _b in (_a, _a + 1018, _a + 2036):
        _EDGES += [_b * BLK, _b * BLK - 1, _b * BLK + 1, (_b - 1) * BLK]
BOUNDARY_OFFSETS = sorted(set(_EDGES + [3488, 3489, 3487, 3400, 4095, 4096, 4097, 8192]))
BOUNDARY_SIZES = [0, 1, 3440, 3487, 3488, 3489, 3500, 4095, 4096, 4097, 8191, 8192, 65536]

DEFAULT_WEIGHTS = dict(
    create=8, write=14, append=4, overwrite=3, truncate=5, read=8, fallocate=4, fsync=2,
    open_unlink=2, hold=2, hio=6, release=1,
    mkdir=6, rmdir=4, unlink=6, rename=9, link=4, symlink=3, readlink=2, mknod=2, listdir=3,
    stat=4, chmod=3, chown=1, utime=3, setxattr=5, getxattr=3, removexattr=2, listxattr=2,
    bulk=1)


class Gen:
    """Draws operations from rng, looking at the reference tree (never at the mount)."""

    def __init__(self, rng, ref_root, alloc_budget=48 << 20, max_entries=160, weights=None,
                 without=()):
        """without: op kinds not to draw; "o_trunc" also keeps O_TRUNC out of create."""
        self.rng = rng
        self.no_o_trunc = "o_trunc" in without
        self.no_falloc_keep = "falloc_keep" in without
        self.no_opath = "opath" in without
        self.no_punch = "punch" in without   # compressed files: EOPNOTSUPP, as the kernel
        self.ref_root = ref_root
        self.alloc_budget = alloc_budget
        self.max_entries = max_entries
        self.weights = dict(weights or DEFAULT_WEIGHTS)
        for k in without:
            if k in self.weights:
                self.weights[k] = 0
        if self.no_o_trunc:
            self.weights["overwrite"] = 0
        self.kinds = sorted(self.weights)
        self.snap = None

    # -- picks
    def name(self):
        return self.rng.choices(NAMES, NAME_W)[0]

    def existing(self, pool):
        return self.rng.choice(pool) if pool else None

    def new_path(self, dir_only_depth=None):
        """A path whose parent is (mostly) an existing directory."""
        s, rng = self.snap, self.rng
        r = rng.random()
        if r < 0.06 and s.regs:
            parent = rng.choice(s.regs)               # ENOTDIR
        elif r < 0.10:
            parent = os.path.join(rng.choice(s.dirs), "missing_dir").lstrip("/")  # ENOENT
        else:
            dirs = s.dirs
            if dir_only_depth is not None:
                dirs = [d for d in dirs if s.depth.get(d, 0) < dir_only_depth] or [""]
            parent = rng.choice(dirs)
        n = self.name()
        return os.path.join(parent, n) if parent else n

    def any_path(self, pool=None, p_existing=0.8):
        pool = self.snap.all if pool is None else pool
        if pool and self.rng.random() < p_existing:
            return self.rng.choice(pool)
        return self.new_path()

    def reg(self, p_existing=0.9):
        return self.any_path(self.snap.regs, p_existing) if self.snap.regs else self.any_path()

    def size(self):
        r = self.rng.random()
        rng = self.rng
        if r < 0.42:
            return rng.randint(1, 4096)
        if r < 0.52:
            return rng.choice(BOUNDARY_SIZES[1:])
        if r < 0.82:
            return rng.randint(4097, 128 << 10)
        if r < 0.97:
            return rng.randint(128 << 10, 1 << 20)
        return rng.randint(1 << 20, 4 << 20)

    def offset(self, size):
        r = self.rng.random()
        rng = self.rng
        if r < 0.35 and size:
            return rng.randrange(0, size)
        if r < 0.47:
            return size
        if r < 0.55:
            return max(0, size - rng.randint(1, 5000))
        if r < 0.67:
            return rng.choice(BOUNDARY_OFFSETS)
        if r < 0.87:
            return size + rng.randint(1, 8 << 20)
        if r < 0.985:
            return rng.randint(0, 64 << 20)
        return rng.randint(0, 16 << 30)          # deep in the double-indirect range

    def pat(self):
        return self.rng.choices(["rand", "zero", "text"], [6, 1, 2])[0]

    def ds(self):
        return self.rng.randrange(1 << 30)

    def mode(self, dirmode=False):
        r = self.rng.random()
        if r < 0.6:
            return 0o755 if dirmode else 0o644
        if r < 0.85:
            return self.rng.randrange(0o1000)
        return self.rng.randrange(0o10000)        # with setuid/setgid/sticky

    # -- the draw
    def next(self):
        self.snap = s = Snapshot(self.ref_root)
        rng = self.rng
        over = s.alloc > self.alloc_budget
        crowded = len(s.ents) > self.max_entries
        for _ in range(20):
            if over and rng.random() < 0.5:
                kind = rng.choice(["truncate_down", "unlink", "overwrite_small"])
            elif crowded and rng.random() < 0.4:
                kind = rng.choice(["bulk_cleanup", "bulk_cleanup", "unlink", "rmdir", "rmtree_leaf"])
            else:
                kind = rng.choices(self.kinds, [self.weights[k] for k in self.kinds])[0]
            op = getattr(self, "g_" + kind)()
            if op is not None:
                return op
        return dict(k="stat", p=self.any_path())

    # -- one generator per kind
    def g_create(self):
        r = self.rng.random()
        return dict(k="create", p=self.any_path(p_existing=0.25), mode=self.mode(),
                    excl=r < 0.4, trunc=0.4 <= r < 0.6 and not self.no_o_trunc)

    def g_write(self):
        p = self.reg()
        return dict(k="write", p=p, off=self.offset(self.snap.size(p)), n=self.size(),
                    ds=self.ds(), pat=self.pat())

    def g_append(self):
        return dict(k="append", p=self.reg(), n=self.size(), ds=self.ds(), pat=self.pat())

    def g_overwrite(self):
        return dict(k="overwrite", p=self.reg(), n=self.size(), ds=self.ds(), pat=self.pat())

    def g_overwrite_small(self):
        if self.no_o_trunc:
            return self.g_truncate_down()
        return dict(k="overwrite", p=self.reg(), n=self.rng.randint(0, 5000), ds=self.ds(),
                    pat=self.pat())

    def _tsize(self, size):
        r = self.rng.random()
        rng = self.rng
        if r < 0.35:
            return rng.randrange(size) if size else 0
        if r < 0.45:
            return 0
        if r < 0.70:
            return size + rng.randint(0, 64 << 10)
        if r < 0.85:
            return rng.choice(BOUNDARY_SIZES + BOUNDARY_OFFSETS)
        if r < 0.995:
            return rng.randint(0, 64 << 20)
        return rng.randint(0, 16 << 30)

    def g_truncate(self):
        p = self.reg()
        return dict(k="truncate", p=p, size=self._tsize(self.snap.size(p)),
                    via="path" if self.rng.random() < 0.3 else "fd")

    def g_truncate_down(self):
        if not self.snap.regs:
            return None
        p = max(self.rng.sample(self.snap.regs, min(3, len(self.snap.regs))),
                key=lambda r: self.snap.ents[r].st_blocks)
        sz = self.snap.size(p)
        return dict(k="truncate", p=p, size=self.rng.randrange(min(sz, 1 << 20) + 1), via="fd")

    def g_read(self):
        p = self.reg()
        size = self.snap.size(p)
        r = self.rng.random()
        if r < 0.3:
            off, n = 0, size + 10
        else:
            off = self.offset(size)
            n = self.size()
        return dict(k="read", p=p, off=off, n=min(n, 8 << 20), drop=self.rng.random() < 0.5)

    def g_fallocate(self):
        p = self.reg()
        size = self.snap.size(p)
        mode = self.rng.choices([0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE],
                                [4, 0 if self.no_falloc_keep else 2, 0 if self.no_punch else 4])[0]
        if mode & FALLOC_FL_PUNCH_HOLE and size and self.rng.random() < 0.7:
            off = self.rng.randrange(size)
            if self.rng.random() < 0.5:
                off &= ~(BLK - 1)
        else:
            off = min(self.offset(size), 96 << 20)
        n = self.rng.choice([self.size(), self.rng.randint(1, 16) * BLK, self.rng.randint(1, 100)])
        if mode == 0:
            n = min(n, 2 << 20)
        return dict(k="fallocate", p=p, mode=mode, off=off, n=n)

    def g_fsync(self):
        return dict(k="fsync", p=self.any_path(self.snap.regs + self.snap.dirs[1:]),
                    data=self.rng.random() < 0.3)

    def g_open_unlink(self):
        p = self.reg()
        size = self.snap.size(p)
        return dict(k="open_unlink", p=p, off=self.offset(size) if size < (64 << 20) else 0,
                    n=self.rng.choice([0, self.size()]), ds=self.ds(), pat=self.pat(),
                    sync=self.rng.random() < 0.3)

    def g_hold(self):
        if self.rng.random() < 0.3 and not self.no_opath:
            return dict(k="hold", slot=self.rng.randrange(3), p=self.any_path(), opath=True)
        return dict(k="hold", slot=self.rng.randrange(3), p=self.reg())

    def g_hio(self):
        rng = self.rng
        w = rng.choices(["write", "read", "trunc", "fsync", "punch", "stat"],
                        [5, 4, 2, 1, 0 if self.no_punch else 1, 1])[0]
        op = dict(k="hio", slot=rng.randrange(3), what=w)
        if w in ("write", "read", "punch"):
            op.update(off=rng.choice([rng.randint(0, 1 << 20), rng.choice(BOUNDARY_OFFSETS)]),
                      n=self.size())
        if w == "write":
            op.update(ds=self.ds(), pat=self.pat())
        if w == "trunc":
            op.update(size=rng.choice([0, rng.randint(0, 2 << 20), rng.choice(BOUNDARY_SIZES)]))
        return op

    def g_release(self):
        return dict(k="release", slot=self.rng.randrange(3))

    def g_mkdir(self):
        p = self.any_path(self.snap.all, 0.15) if self.rng.random() < 0.3 else \
            self.new_path(dir_only_depth=MAX_DEPTH)
        if self.snap.depth.get(os.path.dirname(p), 9) >= MAX_DEPTH and p not in self.snap.ents:
            return None
        return dict(k="mkdir", p=p, mode=self.mode(dirmode=True))

    def g_rmdir(self):
        s = self.snap
        r = self.rng.random()
        if r < 0.5:
            empty = [d for d in s.dirs[1:] if not any(x.startswith(d + "/") for x in s.ents)]
            if empty:
                return dict(k="rmdir", p=self.rng.choice(empty))
        return dict(k="rmdir", p=self.any_path())

    def g_rmtree_leaf(self):
        s = self.snap
        empty = [d for d in s.dirs[1:] if not any(x.startswith(d + "/") for x in s.ents)]
        if empty:
            return dict(k="rmdir", p=self.rng.choice(empty))
        return self.g_unlink()

    def g_unlink(self):
        return dict(k="unlink", p=self.any_path(self.snap.nondirs if self.rng.random() < 0.85
                                                else self.snap.all))

    def _fits(self, src, dst_parent):
        """Moving src under dst_parent keeps the directory depth <= MAX_DEPTH."""
        s = self.snap
        if not s.is_dir(src):
            return True
        if dst_parent == src or dst_parent.startswith(src + "/"):
            return True                         # EINVAL: does not move
        if dst_parent not in s.depth:
            return True                         # ENOENT/ENOTDIR
        return s.depth[dst_parent] + 1 + s.height.get(src, 0) <= MAX_DEPTH

    def g_rename(self):
        s, rng = self.snap, self.rng
        src = self.any_path(p_existing=0.88)
        fl = rng.choices([0, RENAME_NOREPLACE, RENAME_EXCHANGE], [7, 1, 2])[0]
        r = rng.random()
        if src in s.ents and s.is_dir(src) and r < 0.08:
            # into its own subtree: EINVAL
            sub = [x for x in s.dirs if x.startswith(src + "/")]
            dst = os.path.join(rng.choice(sub) if sub else src, self.name())
        elif r < 0.45 or fl == RENAME_EXCHANGE:
            dst = self.any_path(p_existing=0.9)
        else:
            dst = self.new_path()
        if not self._fits(src, os.path.dirname(dst)):
            return None
        if fl == RENAME_EXCHANGE and dst in s.ents and not self._fits(dst, os.path.dirname(src)):
            return None
        return dict(k="rename", s=src, d=dst, fl=fl)

    def g_link(self):
        s = self.snap
        src = self.any_path(s.nondirs if self.rng.random() < 0.9 else s.all, 0.9)
        dst = self.any_path(p_existing=0.15)
        return dict(k="link", s=src, d=dst)

    def g_symlink(self):
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            t = self.name()
        elif r < 0.7:
            t = "../" + self.name() if rng.random() < 0.5 else self.name() + "/" + self.name()
        elif r < 0.9:
            t = "t" * rng.randint(1, 1000)
        else:
            t = ("s%d/" % rng.randrange(100)) * 800
            t = t[:rng.randint(3000, 4000)]
        return dict(k="symlink", t=t, p=self.any_path(p_existing=0.15))

    def g_readlink(self):
        lnk = [r for r in self.snap.nondirs if stat.S_ISLNK(self.snap.ents[r].st_mode)]
        return dict(k="readlink", p=self.any_path(lnk or None, 0.85))

    def g_mknod(self):
        rng = self.rng
        t = rng.choices(["fifo", "chr", "blk", "sock"], [5, 2, 1, 1])[0]
        op = dict(k="mknod", p=self.any_path(p_existing=0.15), t=t, mode=self.mode() & 0o7777)
        if t in ("chr", "blk"):
            op["dev"] = rng.choice([(1, 3), (8, 1), (259, 70000), (4095, 1048575), (0, 0)])
        return op

    def g_bulk(self):
        rng = self.rng
        what = rng.choices(["create", "unlink", "rename"], [3, 2, 1])[0]
        s = self.snap
        if what != "create":
            # a directory that has m* names, if any
            full = [d for d in s.dirs if any(os.path.basename(x).startswith("m")
                                             and os.path.dirname(x) == d for x in s.ents)]
            d = rng.choice(full) if full and rng.random() < 0.9 else rng.choice(s.dirs)
        else:
            if len(s.ents) > 2 * self.max_entries:
                return None
            d = rng.choice(s.dirs)
        lo = rng.choice([0, 0, rng.randrange(600)])
        hi = lo + rng.choice([rng.randint(1, 100), rng.randint(100, 500), rng.randint(400, 1000)])
        return dict(k="bulk", p=d, what=what, lo=lo, hi=hi)

    def g_bulk_cleanup(self):
        s = self.snap
        count = {}
        for x in s.ents:
            if os.path.basename(x)[:1] in ("m", "M") and len(os.path.basename(x)) == 5:
                count[os.path.dirname(x)] = count.get(os.path.dirname(x), 0) + 1
        if not count:
            return None
        d = max(count, key=lambda k: count[k])
        return dict(k="bulk", p=d, what="unlink", lo=0, hi=1600)

    def g_listdir(self):
        return dict(k="listdir", p=self.any_path(self.snap.dirs, 0.9) or "")

    def g_stat(self):
        return dict(k="stat", p=self.any_path())

    def g_chmod(self):
        return dict(k="chmod", p=self.any_path(), mode=self.mode())

    def g_chown(self):
        uid, gid = self.rng.choice([(0, 0), (1000, 1000), (0, 100), (65534, 65534), (-1, 1234),
                                    (4321, -1)])
        return dict(k="chown", p=self.any_path(), uid=uid, gid=gid)

    def g_utime(self):
        rng = self.rng

        def t():
            return rng.randrange(1 << 33) * 10**9 + rng.randrange(10**9)
        return dict(k="utime", p=self.any_path(), at=t(), mt=t())

    def _xpath(self):
        s = self.snap
        return self.any_path(s.regs + s.dirs[1:] if self.rng.random() < 0.92 else None)

    def g_setxattr(self):
        rng = self.rng
        n = rng.choice([0, rng.randint(1, 64), rng.randint(1, 64), rng.randint(65, 480)])
        return dict(k="setxattr", p=self._xpath(), name=rng.choice(XNAMES), ds=self.ds(), n=n,
                    pat=self.pat(), fl=rng.choices([0, 1, 2], [3, 1, 1])[0])

    def g_getxattr(self):
        return dict(k="getxattr", p=self._xpath(), name=self.rng.choice(XNAMES))

    def g_removexattr(self):
        return dict(k="removexattr", p=self._xpath(), name=self.rng.choice(XNAMES))

    def g_listxattr(self):
        return dict(k="listxattr", p=self._xpath())


# ------------------------------------------------------------------------------------------------
# printing

def fmt_op(op):
    k = op["k"]
    parts = [k]
    for key in ("p", "s", "d", "slot", "what", "lo", "hi", "t", "off", "n", "size", "mode", "fl", "name",
                "uid", "gid", "at", "mt", "dev", "excl", "trunc", "via", "data", "sync", "opath",
                "pat", "ds"):
        if key not in op:
            continue
        v = op[key]
        if isinstance(v, str):
            v = re.sub(r"(.)\1{7,}", lambda m: "%s{%d}" % (m.group(1), len(m.group(0))), v)
            if len(v) > 60:
                v = "%s...(%d chars)" % (v[:40], len(op[key]))
        if key == "mode":
            v = "%04o" % v
        elif key == "fl" and k == "fallocate":
            pass
        parts.append("%s=%s" % (key, v))
    return " ".join(str(x) for x in parts)


def dump_ops(path, meta, ops):
    with open(path, "w") as f:
        json.dump(dict(meta=meta, ops=ops), f, indent=0)


def load_ops(path):
    with open(path) as f:
        d = json.load(f)
    for op in d["ops"]:
        if "dev" in op and op["dev"] is not None:
            op["dev"] = tuple(op["dev"])
    return d["meta"], d["ops"]


# ------------------------------------------------------------------------------------------------
# whole-tree comparison

def _xattrs(path):
    try:
        names = sorted(n for n in os.listxattr(path, follow_symlinks=False) if n.startswith(USER_XATTR))
    except OSError as e:
        return "listxattr: " + errname(e)
    out = []
    for n in names:
        try:
            out.append((n, os.getxattr(path, n, follow_symlinks=False)))
        except OSError as e:
            out.append((n, "getxattr: " + errname(e)))
    return out


def data_ranges(fd, size):
    """Data extents of a file (SEEK_DATA/SEEK_HOLE): [(lo, hi)] byte ranges, hi <= size."""
    out = []
    off = 0
    while off < size:
        try:
            d = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:
            break
        h = os.lseek(fd, d, os.SEEK_HOLE)
        out.append((d, min(h, size)))
        off = h
    return out


def compare_content(ref_path, mnt_path, size, rng, drop_cache=True):
    """None if equal, else a message. Files up to 64 MiB are read whole; bigger (sparse) ones in
    the reference's data extents plus samples of the holes and the last 64 KiB."""
    with open(ref_path, "rb", buffering=0) as fr, open(mnt_path, "rb", buffering=0) as fm:
        if drop_cache:
            try:
                os.posix_fadvise(fm.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
        fa, fb = fr.fileno(), fm.fileno()
        if size <= (64 << 20):
            ranges = [(0, size + 1)]
        else:
            ranges = data_ranges(fa, size)
            for _ in range(16):
                o = rng.randrange(size)
                ranges.append((o, o + 8192))
            ranges.append((max(0, size - (64 << 10)), size + 1))
        for lo, hi in ranges:
            off = lo
            while off < hi:
                n = min(hi - off, 1 << 20)
                a = os.pread(fa, n, off)
                b = os.pread(fb, n, off)
                if a != b:
                    i = first_diff(a, b)
                    return ("content differs at byte %d (reference read %d bytes there, mount %d;"
                            " ref %r mount %r)" % (off + i, len(a), len(b), a[i:i + 8], b[i:i + 8]))
                if len(a) < n:
                    break
                off += n
    return None


def compare_trees(ref_root, mnt_root, rng, mtimes=None, limit=20, drop_cache=True):
    """Compares the two trees. mtimes: {reference st_ino: (mtime_ns, ctime_ns)}: mtimes set
    explicitly, checked while the reference inode's ctime is still the one utime left. Returns (list of difference strings, number of entries)."""
    diffs = []
    ino_map, mnt_seen = {}, {}
    content_done = set()
    n = 0

    def add(msg):
        if len(diffs) < limit:
            diffs.append(msg)

    def walk(rel):
        nonlocal n
        rfull = os.path.join(ref_root, rel) if rel else ref_root
        mfull = os.path.join(mnt_root, rel) if rel else mnt_root
        try:
            rnames = set(os.listdir(rfull))
            with os.scandir(mfull) as it:
                ments = list(it)
        except OSError as e:
            add("%s: listing failed: %s" % (rel or "/", e))
            return
        mnames = [e.name for e in ments]
        if len(mnames) != len(set(mnames)):
            add("%s: readdir returned duplicate names" % (rel or "/"))
        if set(mnames) != rnames:
            add("%s: listing: missing on the mount %s, extra on the mount %s" %
                (rel or "/", sorted(rnames - set(mnames))[:5], sorted(set(mnames) - rnames)[:5]))
        for e in sorted(ments, key=lambda e: e.name):
            if e.name not in rnames:
                continue
            r = os.path.join(rel, e.name) if rel else e.name
            rp, mp = os.path.join(rfull, e.name), os.path.join(mfull, e.name)
            n += 1
            try:
                rs = os.lstat(rp)
                ms = os.lstat(mp)
            except OSError as ex:
                add("%s: lstat failed: %s" % (r, ex))
                continue
            a, b = ssum(rs), ssum(ms)
            if a != b:
                add("%s: stat (type, mode, nlink, size, uid, gid, rdev): reference %s, mount %s" %
                    (r, a, b))
                if a[0] != b[0]:
                    continue
            t = a[0]
            et = "l" if e.is_symlink() else "d" if e.is_dir(follow_symlinks=False) else \
                "f" if e.is_file(follow_symlinks=False) else "o"
            want = {"lnk": "l", "dir": "d", "reg": "f"}.get(t, "o")
            if et != want:
                add("%s: readdir d_type says %s, the entry is %s" % (r, et, t))
            # hard-link identity
            if rs.st_ino in ino_map:
                if ino_map[rs.st_ino] != ms.st_ino:
                    add("%s: hard links of one file have st_ino %d and %d on the mount" %
                        (r, ino_map[rs.st_ino], ms.st_ino))
            else:
                ino_map[rs.st_ino] = ms.st_ino
                if ms.st_ino in mnt_seen and mnt_seen[ms.st_ino] != rs.st_ino:
                    add("%s: st_ino %d on the mount is shared by different files" % (r, ms.st_ino))
                mnt_seen[ms.st_ino] = rs.st_ino
            if mtimes and rs.st_ino in mtimes and mtimes[rs.st_ino][1] == rs.st_ctime_ns:
                mt = mtimes[rs.st_ino][0]
                if ms.st_mtime_ns != mt or rs.st_mtime_ns != mt:
                    add("%s: mtime set to %d; reference %d, mount %d" %
                        (r, mt, rs.st_mtime_ns, ms.st_mtime_ns))
            if t == "reg" and a == b and rs.st_ino not in content_done:
                content_done.add(rs.st_ino)
                try:
                    msg = compare_content(rp, mp, rs.st_size, rng, drop_cache)
                except OSError as ex:
                    msg = "reading failed: %s" % ex
                if msg:
                    add("%s: %s" % (r, msg))
            elif t == "lnk":
                try:
                    ta, tb = os.readlink(rp), os.readlink(mp)
                    if ta != tb:
                        add("%s: symlink target: reference %d chars %r..., mount %d chars %r..." %
                            (r, len(ta), ta[:30], len(tb), tb[:30]))
                except OSError as ex:
                    add("%s: readlink failed: %s" % (r, ex))
            if t in ("reg", "dir", "lnk"):
                xa, xb = _xattrs(rp), _xattrs(mp)
                if xa != xb:
                    add("%s: xattrs: reference %s, mount %s" % (r, _short(xa), _short(xb)))
            if t == "dir":
                walk(r)
    walk("")
    return diffs, n


def _short(x):
    if isinstance(x, str):
        return x
    return [(n, (v[:12] + b"..." if isinstance(v, bytes) and len(v) > 12 else v,
                 len(v) if isinstance(v, bytes) else None)) for n, v in x]


def diff_kind(msg):
    """A short class of a tree difference (for matching failures while shrinking)."""
    for key in ("listing", "statvfs", "stat", "d_type", "hard links", "st_ino", "mtime", "content", "reading",
                "symlink", "readlink", "xattrs", "lstat"):
        if key in msg:
            return key
    return "other"
