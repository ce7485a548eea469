"""Source trees for the f2fuse read tests, and the security labels sload puts on them.

A tree is built from a seeded random.Random, so a failure replays with F2FUSE_SEED. Every tree
comes with `Labels`: a file_contexts file for `sload.f2fs -s` (sload then stores a
security.selinux xattr on every inode) and the function that says which label each path got.

Only what sload 1.15 can copy is generated: regular files, directories, symlinks, hard links
(fifos, sockets and devices would be skipped by sload). Modes, owners and whole-second mtimes are
set on everything, last (directories after their contents), because sload copies them.
"""

import os
import re
import stat

BLK = 4096
DNODE = 1018


class Labels:
    """file_contexts rules; the last matching rule wins (all our patterns contain regex meta
    characters, so libselinux keeps file order). Matching is on '/'+relpath, dot matches newline."""

    def __init__(self, rules):
        self.rules = [(re.compile(p.encode(), re.S), ctx.encode()) for p, ctx in rules]
        self.text = "".join("%s\t%s\n" % (p, c) for p, c in rules)

    def write(self, path):
        with open(path, "w") as f:
            f.write(self.text)
        return path

    def label(self, rel):
        path = b"/" + os.fsencode(rel)
        got = None
        for rx, ctx in self.rules:
            if rx.fullmatch(path):
                got = ctx
        return got

    def xattrs(self, rel):
        lab = self.label(rel)
        return {"security.selinux": lab} if lab is not None else {}


def default_labels():
    return Labels([
        (r"/.*", "system_u:object_r:f2fuse_t:s0"),
        # ~150 bytes: still fits the 200-byte inline xattr area of a sload'ed inode
        (r"/xattr_mid(/.*)?", "system_u:object_r:" + "m" * 120 + ":s0"),
        # 1500 bytes: does not fit inline, goes to an xattr node block
        (r"/xattr_big(/.*)?", "system_u:object_r:" + "b" * 1500 + ":s0"),
    ])


class Tree:
    def __init__(self, root, rng):
        self.root = os.fsencode(root)
        self.rng = rng
        self.meta = []            # (relpath, mode, uid, gid, mtime), applied by finish()
        self.bytes = 0
        self.count = 0

    def p(self, rel):
        return os.path.join(self.root, os.fsencode(rel))

    def _meta(self, rel, mode, uid=None, gid=None, mtime=None):
        rng = self.rng
        if uid is None:
            # sload 1.15 keeps only the low 16 bits of uid and gid (its struct dentry has u16s)
            uid, gid = rng.choice([(0, 0), (0, 0), (1000, 1000), (1234, 5678), (65534, 65534),
                                   (65535, 7)])
        if mtime is None:
            mtime = rng.randrange(10**9, 2 * 10**9)
        self.meta.append((os.fsencode(rel), mode, uid, gid, mtime))
        self.count += 1

    def dir(self, rel, mode=0o755, **kw):
        os.makedirs(self.p(rel), exist_ok=True)
        self._meta(rel, mode, **kw)
        return rel

    def file(self, rel, size=0, mode=0o644, data=None, sparse=None, **kw):
        """sparse: list of (offset, length) data extents; the rest of `size` is a hole."""
        with open(self.p(rel), "wb") as f:
            if data is not None:
                f.write(data)
                size = len(data)
            elif sparse:
                for off, ln in sparse:
                    f.seek(off)
                    f.write(self.rng.randbytes(ln))
                f.truncate(size)
            else:
                left = size
                while left:
                    n = min(left, 1 << 22)
                    f.write(self.rng.randbytes(n))
                    left -= n
        self.bytes += size
        self._meta(rel, mode, **kw)
        return rel

    def symlink(self, rel, target, **kw):
        os.symlink(os.fsencode(target), self.p(rel))
        self._meta(rel, None, **kw)
        return rel

    def hardlink(self, existing, rel):
        os.link(self.p(existing), self.p(rel))
        return rel

    def finish(self):
        """Owners, modes, then mtimes, deepest first so a directory's mtime is set last."""
        for rel, mode, uid, gid, mtime in sorted(self.meta, key=lambda m: -m[0].count(b"/")):
            path = self.p(rel)
            os.chown(path, uid, gid, follow_symlinks=False)
            if mode is not None:
                os.chmod(path, mode)       # after chown, which clears setuid/setgid
            os.utime(path, (mtime, mtime), follow_symlinks=False)
        root_mtime = 1500000000
        os.chmod(self.root, 0o755)
        os.utime(self.root, (root_mtime, root_mtime))


def _target(rng, n):
    """A symlink target of exactly n bytes that looks like a path."""
    parts = []
    while sum(len(x) for x in parts) < n:
        parts.append("%s/" % "".join(rng.choice("abcdefghij") for _ in range(rng.randrange(1, 12))))
    s = "".join(parts)[:n]
    return s


def _name(rng, n):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_-") for _ in range(n))


def inline_sizes(max_inline):
    s = {0, 1, 2, 3343, 3344, 3345, 3487, 3488, 3489, 4095, 4096, 4097, 8191, 8192, 8193}
    s |= {max_inline - 1, max_inline, max_inline + 1}
    return sorted(s)


def node_boundary_sizes(A):
    """File sizes whose last block sits around the ends of the inode's direct addresses, the two
    direct node blocks, and inside the first indirect node's second direct node."""
    sizes = []
    for B in (A, A + DNODE, A + 2 * DNODE):
        sizes += [(B - 1) * BLK, B * BLK, B * BLK + 1]
    sizes.append((A + 3 * DNODE + 1) * BLK + 123)
    return sizes


def build_mixed(root, rng, addrs_per_inode, max_inline, big=True, bigdir_entries=10000):
    """The main read-back tree. With big=True it holds ~82 MB of node-boundary files."""
    t = Tree(root, rng)

    # inline boundary
    t.dir("inline")
    for sz in inline_sizes(max_inline):
        t.file("inline/s%05d" % sz, sz)

    # empties
    t.dir("empty")
    for i in range(5):
        t.file("empty/e%d" % i, 0)
    t.dir("empty/dir")
    t.dir("empty/dir/nested")

    # sparse (sload writes holes as zero blocks, keep them small)
    t.dir("sparse")
    t.file("sparse/hole_start", 1 << 20, sparse=[((1 << 20) - 100, 100)])
    t.file("sparse/hole_middle", 520 * 1024, sparse=[(0, 4096), (516 * 1024, 4096)])
    t.file("sparse/all_hole", 300 * 1024, sparse=[])
    t.file("sparse/tail_hole", 200 * 1024, sparse=[(0, 10000)])
    t.file("sparse/odd_extents", 300000, sparse=[(4095, 3), (8191, 2), (65536 + 7, 5000), (299990, 10)])

    # direct -> indirect node boundaries
    t.dir("nodes")
    if big:
        for sz in node_boundary_sizes(addrs_per_inode):
            t.file("nodes/b%08d" % sz, sz)
    else:
        for B in (addrs_per_inode,):
            for sz in ((B - 1) * BLK, B * BLK + 1):
                t.file("nodes/b%08d" % sz, sz)
    t.file("nodes/odd_1", 3 * BLK + 5)
    t.file("nodes/odd_2", 100 * BLK - 1)

    # names
    t.dir("names")
    names = [
        "a" * 255,
        "é" * 127 + "x",                    # 255 bytes of 2-byte UTF-8
        "日本語" * 28 + "z" * 3,              # 255 bytes of 3-byte UTF-8
        "😀" * 63 + "abc",                   # 255 bytes of 4-byte UTF-8
        "Ünïcödé ñame",
        "ελληνικά",
        "кириллица",
        "x\ny",
        "tab\there",
        " leading space",
        "trailing space ",
        "-dash",
        "...",
        ".hidden",
        "#hash%percent&amp",
        "q",
        "e" * 8, "e" * 9, "e" * 16, "e" * 17, "e" * 24, "e" * 25,
    ]
    for i, n in enumerate(names):
        assert len(n.encode()) <= 255, n
        t.file("names/" + n, rng.randrange(0, 5000))
    t.dir("names/" + "D" * 255)
    t.file("names/" + "D" * 255 + "/" + "f" * 255, 10)
    t.file(b"names/bad-\xff\xfe-utf8", 33)

    # deep paths
    rel = "deep"
    t.dir(rel)
    for lvl in range(40):
        rel += "/d%02d" % lvl
        t.dir(rel)
        if lvl % 10 == 9:
            t.file(rel + "/f", rng.randrange(1, 9000))
    t.file(rel + "/leaf.txt", 77)

    # symlinks
    t.dir("links")
    t.file("links/target", 100)
    t.symlink("links/short", "target")
    t.symlink("links/abs", "/etc/passwd")
    t.symlink("links/dangling", "does/not/exist")
    t.symlink("links/todir", "../names")
    t.symlink("links/chain", "short")
    t.symlink("links/dot", ".")
    t.symlink("links/utf8", "日本語/é")
    for n in (1, 60, 255, 3343, 3344, 3345, max_inline - 1, max_inline, max_inline + 1, 4000, 4095):
        t.symlink("links/len%04d" % n, _target(rng, n))

    # hard links
    t.dir("hard")
    t.dir("hard/sub")
    t.file("hard/orig", 5000)
    t.hardlink("hard/orig", "hard/sub/link2")
    t.hardlink("hard/orig", "hard/link3")
    t.hardlink("hard/orig", "deep/d00/link4")
    t.file("hard/inline", 100)
    t.hardlink("hard/inline", "hard/inline_twin")
    t.file("hard/big", 1000 * BLK + 7)
    t.hardlink("hard/big", "names/big_link")

    # modes and owners
    t.dir("modes", mode=0o755)
    for m in (0o000, 0o400, 0o600, 0o644, 0o755, 0o777, 0o4755, 0o2755, 0o6755, 0o1644):
        t.file("modes/f%04o" % m, 10, mode=m)
    for m in (0o700, 0o555, 0o1777, 0o2775, 0o000):
        t.dir("modes/d%04o" % m, mode=m)
    t.file("modes/d0555/inside", 10)
    t.dir("owners")
    for uid, gid in ((0, 0), (1, 2), (1000, 1000), (65534, 65534), (65535, 65535), (40000, 12345)):
        t.file("owners/u%d_g%d" % (uid, gid), 10, uid=uid, gid=gid)

    # times
    t.dir("times")
    # sload 1.15 stores only the low 32 bits of the mtime
    for tm in (0, 1, 10**9, 2**31 - 1, 2**31, 2**32 - 1):
        t.file("times/t%d" % tm, 1, mtime=tm)

    # xattrs that need more room
    for d in ("xattr_mid", "xattr_big"):
        t.dir(d)
        t.file(d + "/inline_file", 50)
        t.file(d + "/block_file", 10000)
        t.symlink(d + "/link", "inline_file")
        t.dir(d + "/subdir")

    # a big directory
    t.dir("bigdir")
    seen = set()
    for i in range(bigdir_entries):
        n = _name(rng, rng.randrange(1, 60))
        while n in seen:
            n = _name(rng, rng.randrange(1, 60))
        seen.add(n)
        if i % 1000 == 1:
            t.dir("bigdir/" + n)
        elif i % 1000 == 2:
            t.symlink("bigdir/" + n, "x" * (i % 50 + 1))
        else:
            t.file("bigdir/" + n, 0 if i % 7 else rng.randrange(1, 200), mtime=1600000000 + i)
    t.finish()
    return t


def build_small(root, rng, addrs_per_inode, max_inline, flex_safe=False):
    """A few of everything, for small and unusual images.

    flex_safe: stay out of what sload 1.15 mangles with flexible_inline_xattr (files of more than
    addrs_per_inode blocks, inline symlinks longer than the real inline maximum)."""
    t = Tree(root, rng)
    t.dir("d")
    for sz in (0, 1, 3344, 3345, max_inline, max_inline + 1, 4096, 100000):
        t.file("d/f%d" % sz, sz)
    if flex_safe:
        t.file("d/inode_full", addrs_per_inode * BLK)
        t.file("d/inode_full_minus", addrs_per_inode * BLK - 1)
    else:
        t.file("d/across_inode", (addrs_per_inode + 2) * BLK + 3)
    t.symlink("d/s", "f1")
    t.symlink("d/long", _target(rng, 4000))
    t.symlink("d/inline_max", _target(rng, min(3344, max_inline) if flex_safe else max_inline))
    t.hardlink("d/f1", "d/f1_link")
    t.dir("d/sub", mode=0o700)
    t.dir("many")
    for i in range(300):
        t.file("many/entry_%03d_%s" % (i, "n" * (i % 30)), i % 3)
    t.dir("xattr_big")
    t.file("xattr_big/f", 10)
    t.finish()
    return t


def build_victims(root, rng):
    """The base tree for damaged-image tests: small, with named targets for each kind of damage."""
    t = Tree(root, rng)
    t.dir("keep")
    for i in range(20):
        t.file("keep/k%02d" % i, rng.choice([0, 10, 3000, 5000, 70000]))
    t.symlink("keep/link", "k01")
    t.dir("victim")
    t.file("victim/big", (873 + 1018 + 50) * BLK + 11)   # has i_nid[0] and i_nid[1]
    t.file("victim/medium", 40 * BLK + 3)                 # blocks in the inode only
    t.file("victim/small", 100)                           # inline data
    t.symlink("victim/symlink_inline", "keep/k01")
    t.symlink("victim/symlink_block", _target(rng, 4000))
    t.file("victim/sibling", 500)
    t.dir("victim/dir")
    for i in range(40):
        t.file("victim/dir/e%02d" % i, 10)
    t.dir("loop")
    t.dir("loop/a")
    t.dir("loop/a/b")
    t.dir("loop/a/b/c")
    t.file("loop/a/b/c/f", 10)
    t.dir("deepdir")
    t.file("deepdir/x", 10)
    t.finish()
    return t
