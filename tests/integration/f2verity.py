"""fs-verity test images without f2fuse's verity code (Python 3 stdlib + Debian's fsverity).

The kernel here has no CONFIG_FS_VERITY, so verity files are laid out by hand, the way
fs/f2fs/verity.c keeps them: Debian's `fsverity digest` (fsverity-utils) computes the Merkle
tree and the descriptor of some data; a file holding data, zeros up to the next 64 KiB, the
tree and the descriptor is sload'ed into an mkfs'ed image; then the image is patched offline:
i_size cut back to the data, FADVISE_VERITY_BIT in i_advise, the xattr of index 11 named "v"
({le32 version 1, le32 descriptor size, le64 descriptor position}) appended to the inode's
inline xattr area, and the inode checksum recomputed when the image keeps one.

  composite()     the file content to sload, the fsverity digest and the layout
  patch()         turns the sload'ed file into a verity file in the image
  build()         mkfs + a tree of verity and plain files + sload + patch; fsck -f clean
  tree_blocks()   where the tree and descriptor of a file sit in the image (for corruption)
  read_tree()     the tree and descriptor of a file as the image holds them (offline check)
"""

import os
import struct
import subprocess
import tempfile

import f2test as T

BLK = 4096
ALIGN = 65536
FADVISE_VERITY = 0x40
XATTR_INDEX_VERITY = 11
XATTR_MAGIC = 0xF2F52011
FEAT_VERITY = 0x400


def fsverity_digest(path, hash_alg="sha256", block_size=4096, salt=None, tree=None, desc=None):
    """`fsverity digest`: returns "sha256:HEX" as `fsverity measure` prints it; writes the tree and descriptor when asked."""
    argv = ["fsverity", "digest", path, "--hash-alg=" + hash_alg, "--block-size=%d" % block_size,
            "--compact"]
    if salt:
        argv.append("--salt=" + salt.hex())
    if tree:
        argv.append("--out-merkle-tree=" + tree)
    if desc:
        argv.append("--out-descriptor=" + desc)
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE).stdout.decode().split()
    return "%s:%s" % (hash_alg, out[0])


def composite(data, hash_alg="sha256", block_size=4096, salt=None):
    """(content to sload, digest, descriptor position, descriptor size, tree size)."""
    with tempfile.TemporaryDirectory() as td:
        src, tree, desc = (os.path.join(td, n) for n in ("data", "tree", "desc"))
        with open(src, "wb") as f:
            f.write(data)
        digest = fsverity_digest(src, hash_alg, block_size, salt, tree, desc)
        with open(tree, "rb") as f:
            tree_b = f.read()
        with open(desc, "rb") as f:
            desc_b = f.read()
    meta = (len(data) + ALIGN - 1) // ALIGN * ALIGN
    # An empty file's descriptor would sit at 0 and sload would make the file inline (a
    # kernel's enable never leaves one inline): the descriptor may lie anywhere past the tree.
    if not data:
        meta = ALIGN
    content = data + bytes(meta - len(data)) + tree_b + desc_b
    return content, digest, meta + len(tree_b), len(desc_b), len(tree_b)


def _append_xattr(raw, xa_words, index, name, value):
    """raw (bytearray inode block) with one xattr entry appended to its inline area."""
    start = 4052 - 4 * xa_words
    area = raw[start:4052]
    if T.F2fsImage.u32(area, 0) != XATTR_MAGIC:
        area[0:24] = struct.pack("<II", XATTR_MAGIC, 1) + bytes(16)
        for i in range(24, len(area)):
            area[i] = 0
    o = 24
    while o + 4 <= len(area) and T.F2fsImage.u32(area, o) != 0:
        o += (4 + area[o + 1] + T.F2fsImage.u16(area, o + 2) + 3) & ~3
    entry = struct.pack("<BBH", index, len(name), len(value)) + name + value
    entry += bytes((-len(entry)) % 4)
    if o + len(entry) + 4 > len(area):
        raise RuntimeError("no room for the verity xattr in the inline area")
    area[o:o + len(entry)] = entry
    raw[start:4052] = area


def patch(img, path, data_size, desc_pos, desc_size, location=None):
    """Makes the sload'ed file at path a verity file of data_size bytes.  location: the raw
    16-byte xattr value instead of the right one (bad-input tests)."""
    with T.F2fsImage(img) as im:
        ino = im.lookup(path)
        inode = im.inode(ino)
        addr, xa, feature = inode["addr"], inode["xattr_addrs"], im.feature
        raw = bytearray(inode["raw"])
        if not (inode["inline"] & T.INLINE_XATTR) or not xa:
            raise RuntimeError("%s: no inline xattr area to hold the verity location" % path)
        struct.pack_into("<Q", raw, 16, data_size)
        raw[2] |= FADVISE_VERITY
        value = location if location is not None else struct.pack("<IIQ", 1, desc_size, desc_pos)
        _append_xattr(raw, xa, XATTR_INDEX_VERITY, b"v", value)
        if feature & T.FEAT_INODE_CHKSUM and inode["inline"] & T.EXTRA_ATTR:
            struct.pack_into("<I", raw, 368, im.inode_checksum(bytes(raw), ino))
    with open(img, "r+b") as f:
        f.seek(addr * BLK)
        f.write(bytes(raw))
    return ino


class Spec:
    """One verity file: its data and tree parameters."""

    def __init__(self, name, data, hash_alg="sha256", block_size=4096, salt=None):
        self.name, self.data = name, data
        self.hash_alg, self.block_size, self.salt = hash_alg, block_size, salt
        self.digest = self.desc_pos = self.desc_size = self.tree_size = None


def build(img, size_mb, features, specs, plain=None, extra_args=()):
    """mkfs with features, the verity files of specs (and plain files: name -> bytes) sload'ed
    and patched.  Returns {name: ino}."""
    T.mkfs(img, size_mb, features, extra_args)
    with tempfile.TemporaryDirectory() as src:
        for s in specs:
            content, s.digest, s.desc_pos, s.desc_size, s.tree_size = composite(
                s.data, s.hash_alg, s.block_size, s.salt)
            with open(os.path.join(src, s.name), "wb") as f:
                f.write(content)
        for name, data in (plain or {}).items():
            with open(os.path.join(src, name), "wb") as f:
                f.write(data)
        T.sload(img, src)
    return {s.name: patch(img, "/" + s.name, len(s.data), s.desc_pos, s.desc_size) for s in specs}


def file_block_addr(img, ino, index):
    with T.F2fsImage(img) as im:
        return im.bmap(im.inode(ino), index)


def read_tree(img, path):
    """(tree bytes, descriptor bytes, data size) of verity file path, read offline."""
    with T.F2fsImage(img) as im:
        inode = im.inode(im.lookup(path))
        loc = im.xattrs(inode).get("index11.v")
        if loc is None or inode["advise"] & FADVISE_VERITY == 0:
            return None
        _, dsize, dpos = struct.unpack("<IIQ", loc)
        size = inode["size"]
        meta = (size + ALIGN - 1) // ALIGN * ALIGN

        def read(pos, n):
            out = b""
            while n > 0:
                blk, off = divmod(pos, BLK)
                a = im.bmap(inode, blk)
                b = bytes(BLK) if a in (T.NULL_ADDR, T.NEW_ADDR) else im.block(a)
                take = min(n, BLK - off)
                out += b[off:off + take]
                pos += take
                n -= take
            return out
        return read(meta, dpos - meta), read(dpos, dsize), size
