"""Foreign images for the writing test families (Python 3 stdlib only).

f2fuse's writing tests used to start from images f2fuse wrote itself.  Users bring images that
sload.f2fs, kernels and Android wrote: every file with its largest extent in i_ext, layouts and
geometries f2fuse never makes.  Here such an image is made: mkfs.f2fs with one of VARIANTS,
then filled by sload.f2fs with a seeded random tree (gen_tree.Tree).  Loaded keeps what the tree
holds (path -> content, directories, symlinks), so that a family's model can start from it.

  VARIANTS         name -> (mkfs -O features, extra mkfs arguments)
  CI / LONG        the variants of each family in CI, and in long mode (all)
  image_mb()       the image size a variant needs (MIN_MB)
  build_tree()     the seeded source tree (flexible_inline_xattr: files stay under 800 blocks)
  load()           mkfs + tree + sload; fsck.f2fs -f clean and every extent true, or it fails
  touch()          overwrites ranges inside loaded files, truncates, appends, deletes, renames
                   through a mount, keeping Loaded right
  verify()         every loaded file (as touch left it) reads back exactly
  check_image()    fsck.f2fs -f clean and check_extents (every i_ext block-exact true)

The variants (mkfs.f2fs 1.15; every one f2fuse mounts read-write):
  default      no -O
  extended     -O extra_attr,inode_checksum,sb_checksum,inode_crtime,lost_found
  flex         -O extra_attr,flexible_inline_xattr; files under 800 blocks and no inline file
               or symlink of 3000..4096 bytes (sload 1.15 corrupts those, see test_sload_readback);
               its fsck pass also zeroes every i_ext's length, so these images carry no extent
  s2, s4       -s 2 / -s 4: 2 / 4 segments per section (-s 4: 256 MiB and up)
  z2           -z 2: 2 sections per zone
  a0           -a 0: no heap-based allocation
  o1, o20      -o 1 / -o 20: 1 % / 20 % overprovision (-o 1: mkfs needs 448 MiB, which
               leaves 16 MiB of user space; the images here are 512 MiB at least)
  quota        -O extra_attr,project_quota,quota: quota files, which sload keeps and every
               fsck checks
"""

import os
import re
import stat

import f2test as T
import gen_tree as G

J = os.path.join
BLK = 4096

VARIANTS = {
    "default": (None, ()),
    "extended": (["extra_attr", "inode_checksum", "sb_checksum", "inode_crtime", "lost_found"], ()),
    "flex": (["extra_attr", "flexible_inline_xattr"], ()),
    "s2": (None, ("-s", "2")),
    "s4": (None, ("-s", "4")),
    "z2": (None, ("-z", "2")),
    "a0": (None, ("-a", "0")),
    "o1": (None, ("-o", "1")),
    "o20": (None, ("-o", "20")),
    "quota": (["extra_attr", "project_quota", "quota"], ()),
}
ALL = list(VARIANTS)
# spread over the families in CI, each with two; long mode runs ALL in every family
CI = {
    "model": ["extended", "flex"],
    "powercut": ["default", "s2", "quota"],
    "gc": ["s4", "z2"],
    "concurrency": ["o1", "a0"],
    "faults": ["o20", "extended"],
    "full": ["quota", "s2"],
    "trim": ["extended", "z2"],
}
# mkfs.f2fs 1.15 refuses -o 1 below 448 MiB and leaves 16 MiB of user space at 448 (80 at 512);
# -s 4 leaves 6 MiB of a 128 MiB image (82 of 256), -s 2 36 MiB of 128
MIN_MB = {"o1": 512, "s2": 128, "s4": 256}
FLEX_MAX_BLOCKS = 799


def image_mb(variant, wanted):
    """The size of the image for variant: wanted, or the least that leaves room for a tree (MIN_MB)."""
    return max(wanted, MIN_MB.get(variant, 0))


def describe(variant):
    feats, extra = VARIANTS[variant]
    return "%s (mkfs%s%s)" % (variant, " -O " + ",".join(feats) if feats else "",
                              " " + " ".join(extra) if extra else "")


def parse(arg):
    """A --foreign argument: "all", "none" or NAME[,NAME...]."""
    if arg in (None, ""):
        return None
    if arg == "none":
        return []
    if arg == "all":
        return list(ALL)
    out = [v for v in arg.split(",") if v]
    for v in out:
        if v not in VARIANTS:
            raise SystemExit("unknown foreign variant %r (known: %s)" % (v, ", ".join(ALL)))
    return out


class Loaded:
    """The loaded tree, as the families' models see it: paths relative to the image root."""

    def __init__(self, variant):
        self.variant = variant
        self.files = {}      # rel -> bytes (every name of a hard-linked file)
        self.dirs = []       # rel, parents first
        self.symlinks = {}   # rel -> target
        self.links = []      # [rel, rel, ...] names of one inode (hard links)
        self.img = None
        self.prefix = ""     # the tree's own directory (renames stay below it)
        self.extents = 0     # inodes with a non-empty i_ext after sload
        self.touched = set()  # rel paths touch() changed (or removed)

    def bytes(self):
        return sum(len(v) for v in self.files.values())


def _size(rng, variant, big_share, max_blocks):
    flex = variant == "flex"
    cap = min(max_blocks, FLEX_MAX_BLOCKS) if flex else max_blocks
    r = rng.random()
    if r < 0.2:
        return rng.choice([0, 1, rng.randint(2, 3000)])            # inline (or empty)
    if r < 0.45:
        return rng.randint(4097, 40000)
    if r < 1 - big_share:
        return rng.randint(40000, 600000)
    return rng.randint(cap // 2, cap) * BLK + rng.randrange(BLK)   # a long extent


def build_tree(src, rng, variant, prefix="", nfiles=24, big_share=0.25, max_blocks=1500,
               symlinks=True, hardlinks=False, ndirs=4, max_bytes=16 << 20):
    """A seeded tree under src/prefix: ndirs directories (one nested), nfiles files of mixed
    sizes (inline, a few blocks, hundreds of blocks, long extents), short symlinks and
    optionally a hard link; max_bytes of file data at most.  Returns Loaded (paths relative
    to src)."""
    L = Loaded(variant)
    t = G.Tree(src, rng)
    base = prefix.strip("/")
    L.prefix = base
    if base:
        parts = base.split("/")
        for i in range(len(parts)):
            rel = "/".join(parts[:i + 1])
            t.dir(rel, mode=0o755)
            L.dirs.append(rel)
    dirs = [base] if base else [""]
    for k in range(ndirs):
        parent = dirs[-1] if k == ndirs - 1 and k else (base or "")
        rel = J(parent, "ld%d" % k) if parent else "ld%d" % k
        t.dir(rel, mode=0o755)
        L.dirs.append(rel)
        dirs.append(rel)
    for k in range(nfiles):
        d = dirs[k % len(dirs)]
        rel = J(d, "lf%02d" % k) if d else "lf%02d" % k
        size = _size(rng, variant, big_share, max_blocks)
        if L.bytes() + size > max_bytes:
            size = rng.randint(0, 3000)
        data = rng.randbytes(size)
        t.file(rel, data=data, mode=rng.choice([0o644, 0o644, 0o600, 0o755]), uid=0, gid=0)
        L.files[rel] = data
    if symlinks:
        for k in range(2):
            d = dirs[(k + 1) % len(dirs)]
            rel = J(d, "ll%d" % k) if d else "ll%d" % k
            target = rng.choice(["lf00", "../x/y", "t" * rng.randint(1, 60)])
            t.symlink(rel, target, uid=0, gid=0)
            L.symlinks[rel] = target
    if hardlinks and L.files:
        first = sorted(L.files)[1 % len(L.files)]
        rel = first + "_hl"
        t.hardlink(first, rel)
        L.files[rel] = L.files[first]
        L.links.append([first, rel])
    t.finish()
    return L


def load(wd, variant, size_mb, rng, chk, tag="foreign", img=None, keep_src=False, parts=0,
         **tree_kw):
    """mkfs.f2fs (variant) + build_tree + sload.f2fs into wd/<tag>.img.  The image must be
    fsck-clean and its extents true before any test runs on it; returns Loaded (L.img; L.src
    the source tree when keep_src), or None after recording a failure.  parts=N: N trees,
    under <prefix>/w0 .. w<N-1>, returned as a list of Loaded (one per worker thread)."""
    feats, extra = VARIANTS[variant]
    src = J(wd, tag + "-src")
    os.makedirs(src)
    if parts:
        prefix = tree_kw.pop("prefix", "")
        Ls = [build_tree(src, rng, variant, prefix=J(prefix, "w%d" % k), **tree_kw)
              for k in range(parts)]
        L = Loaded(variant)
        for x in Ls:
            L.files.update(x.files)
            L.dirs += [d for d in x.dirs if d not in L.dirs]
            L.symlinks.update(x.symlinks)
    else:
        L = build_tree(src, rng, variant, **tree_kw)
    img = img or J(wd, tag + ".img")
    T.mkfs(img, image_mb(variant, size_mb), feats, extra)
    T.sload(img, src)
    L.img = img
    clean, rc, out = T.fsck(img)
    if not chk.check(clean, "%s: fsck.f2fs -f not clean after sload (rc %s): %s" %
                     (variant, rc, T.fsck_odd_lines(out))):
        return None
    L.extents, covered = T.check_extents(img, chk, "%s as loaded: " % variant)
    # sload 1.15 with flexible_inline_xattr: its own fsck pass, fixing i_inline_xattr_size
    # (see test_sload_readback), leaves every i_ext with length 0; such images carry none.
    if variant != "flex" and not chk.check(L.extents >= 1, "%s: sload left no extent (%d)" %
                                           (variant, L.extents)):
        return None
    T.log("   foreign image %s: %d MiB, %d files (%.1f MiB), %d dirs, %d symlinks; "
          "%d extents over %d blocks" % (describe(variant), image_mb(variant, size_mb),
                                         len(L.files), L.bytes() / 1048576.0, len(L.dirs),
                                         len(L.symlinks), L.extents, covered))
    L.src = src
    if not keep_src:
        import shutil
        shutil.rmtree(src, ignore_errors=True)
    if parts:
        for x in Ls:
            x.img, x.src, x.extents = img, src, L.extents
        return Ls
    return L


def check_image(img, chk, where):
    """fsck.f2fs -f clean and every extent true.  Returns True when both hold."""
    clean, rc, out = T.fsck(img)
    ok = chk.check(clean, "%s: fsck.f2fs -f not clean (rc %s): %s" %
                   (where, rc, T.fsck_odd_lines(out)))
    before = len(chk.failures)
    T.check_extents(img, chk, where + ": ")
    return ok and len(chk.failures) == before


def _write(path, off, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], off + done)
    finally:
        os.close(fd)


def touch(root, L, rng, nops=10, keep=(), start=0, min_files=0):
    """Changes loaded files through the mount at root: overwrites ranges inside them (also at
    and across the extent's ends), truncates (down, and up past the end), appends, deletes and
    renames; the first five operations are one of each.  L.files follows.  keep: paths not to
    touch.  Hard-linked names are left alone (L.links).  start: operations done before (a
    caller calling one at a time); min_files: no delete below that many files.  Returns the
    operations done."""
    linked = set(p for group in L.links for p in group)
    done = []
    kinds = ["overwrite", "truncate", "append", "delete", "rename"]
    for i in range(nops):
        cand = sorted(p for p in L.files if p not in linked and p not in keep)
        if not cand:
            break
        j = start + i
        kind = kinds[j] if j < len(kinds) else rng.choice(kinds + ["overwrite", "overwrite"])
        if kind == "delete" and len(cand) <= min_files:
            kind = "overwrite"
        big = [p for p in cand if len(L.files[p]) > 8 * BLK]
        p = rng.choice(big if big and kind in ("overwrite", "truncate") else cand)
        cur = L.files[p]
        full = J(root, p)
        if kind == "overwrite":
            n = rng.choice([1, 100, BLK, 3 * BLK + 5, 10 * BLK, 64 * BLK])
            off = rng.randrange(0, max(1, len(cur)))
            if rng.random() < 0.3:
                off = (off // BLK) * BLK
            data = rng.randbytes(n)
            _write(full, off, data)
            cur = cur[:off] + bytes(max(0, off - len(cur))) + data + cur[off + n:]
            desc = "overwrite %s @%d +%d" % (p, off, n)
        elif kind == "truncate":
            if cur and rng.random() < 0.7:
                size = rng.randrange(0, len(cur))
            else:
                size = len(cur) + rng.randint(1, 20 * BLK)
            os.truncate(full, size)
            cur = cur[:size] + bytes(max(0, size - len(cur)))
            desc = "truncate %s %d -> %d" % (p, len(L.files[p]), size)
        elif kind == "append":
            data = rng.randbytes(rng.choice([10, 3000, BLK, 5 * BLK + 7]))
            with open(full, "ab") as f:
                f.write(data)
            cur = cur + data
            desc = "append %s +%d" % (p, len(data))
        elif kind == "delete":
            os.unlink(full)
            del L.files[p]
            L.touched.add(p)
            done.append("delete %s" % p)
            continue
        else:
            name = re.sub(r"(_mv\d+)+$", "", os.path.basename(p)) + "_mv%d" % j
            new = J(os.path.dirname(p), name)
            own = [d for d in L.dirs if d == L.prefix or d.startswith(L.prefix + "/")] \
                if L.prefix else L.dirs
            if rng.random() < 0.5 and own:
                new = J(rng.choice(own), name)
            os.rename(full, J(root, new))
            L.files[new] = L.files.pop(p)
            L.touched.update((p, new))
            done.append("rename %s -> %s" % (p, new))
            continue
        L.files[p] = cur
        L.touched.add(p)
        done.append(desc)
    return done


def verify(root, L, chk, where, only=None):
    """Every loaded file (and symlink) reads back as L says, under the mount at root.
    Returns the number checked."""
    n = 0
    for p, want in sorted(L.files.items()):
        if only is not None and p not in only:
            continue
        n += 1
        try:
            with open(J(root, p), "rb") as f:
                got = f.read()
        except OSError as e:
            chk.fail("%s: loaded file %s: %s" % (where, p, e))
            continue
        if got != want:
            first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                         min(len(got), len(want)))
            chk.fail("%s: loaded file %s differs (size %d, want %d; first difference at byte "
                     "%d)" % (where, p, len(got), len(want), first))
    for p, target in sorted(L.symlinks.items()):
        if only is not None and p not in only:
            continue
        try:
            got = os.readlink(J(root, p))
        except OSError as e:
            chk.fail("%s: loaded symlink %s: %s" % (where, p, e))
            continue
        chk.check(got == target, "%s: loaded symlink %s -> %r, want %r" % (where, p, got, target))
    for d in L.dirs:
        try:
            st = os.lstat(J(root, d))
            chk.check(stat.S_ISDIR(st.st_mode), "%s: loaded directory %s is no directory" %
                      (where, d))
        except OSError as e:
            chk.fail("%s: loaded directory %s: %s" % (where, d, e))
    return n
