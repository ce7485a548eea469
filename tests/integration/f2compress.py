"""f2fs compressed files, read and rewritten offline by the tests, independently of f2fuse.

  decode(img, path)            the file as the kernel reads it: compressed clusters decompressed
                               with Debian's python3-lz4 / python3-lzo / python3-zstandard (and the
                               LZO-RLE streams this module wrote), plain clusters as stored
  transcode(img, path, alg)    rewrites every compressed cluster of a file in place with another
                               algorithm (zstd through python3-zstandard; LZO-RLE through
                               lzorle_encode below), optionally with compress_chksum
  patch_inode / patch_cluster  offline damage for the bad-input tests
  lzorle_decode(data, n)       an LZO-RLE (and plain LZO1X) decoder written here from
                               Documentation/staging/lzo.rst, for streams f2fuse wrote
  accounting(img, path)        i_compr_blocks as stored, and as the slots say it must be
  lzorle_encode(data)          an LZO1X bitstream version 1 (LZO-RLE) writer after
                               Documentation/staging/lzo.rst: literal runs and zero runs only
                               (the kernel's decoder reads any valid stream; this one is simple);
                               codecs() also offers liblzo2's streams behind a v1 header

Layout facts (fs/f2fs/compress.c, FORMAT.md): a cluster of 1 << i_log_cluster_size slots is
compressed when its first slot is COMPRESS_ADDR; the next slots hold the compressed blocks
{le32 clen, le32 chksum, 16 reserved bytes, data}, then NEW_ADDR (reserved) or NULL_ADDR
(released) slots.  i_compress_algorithm is at inode offset 392, i_log_cluster_size 393,
i_compress_flag 394 (bit 0: chksum).
"""
import os
import struct

import f2test as T

COMPRESS_ADDR = 0xFFFFFFFE
NEW_ADDR = 0xFFFFFFFF
COMPR_FL = 0x4
HEADER = 24
LZO, LZ4, ZSTD, LZORLE = 0, 1, 2, 3
NAMES = {LZO: "lzo", LZ4: "lz4", ZSTD: "zstd", LZORLE: "lzo-rle"}
F2FS_SUPER_MAGIC = 0xF2F52010


def codecs():
    """(decompress, compress) by algorithm, or raises ImportError naming the package."""
    try:
        import lz4.block
    except ImportError:
        raise ImportError("python3-lz4 is not installed")
    try:
        import lzo
    except ImportError:
        raise ImportError("python3-lzo is not installed")
    try:
        import zstandard
    except ImportError:
        raise ImportError("python3-zstandard is not installed")
    dec = {
        LZ4: lambda d, n: lz4.block.decompress(d, uncompressed_size=n),
        LZO: lambda d, n: lzo.decompress(d, False, n),
        ZSTD: lambda d, n: zstandard.ZstdDecompressor().decompress(d, max_output_size=n),
    }
    def lzorle(d, level=None):
        """The shorter of two version 1 streams: this module's zero-run writer, or liblzo2's
        LZO1X-1 stream behind a version header (v1 reads v0 instructions alike; the one
        ambiguous form needs a copy from over 32 KiB back, past a 16 KiB cluster)."""
        runs = lzorle_encode(d)
        plain = bytes([17, 1]) + lzo.compress(d, 1, False)
        return runs if len(runs) <= len(plain) or len(d) > 16384 else plain
    enc = {
        ZSTD: lambda d, level=3: zstandard.ZstdCompressor(level=level).compress(d),
        LZORLE: lzorle,
    }
    return dec, enc


def lzorle_encode(data):
    """A version 1 stream: literal runs, and zero runs of 4 or more (0001 1LLL, then
    (0xfc | S), 0xff, X; run = (X << 3 | L) + 4).  Up to 3 literals after a zero run ride in
    its S bits, as the format wants (a literal-run instruction needs state 0)."""
    out = bytearray([17, 1])
    chunks = []          # ("lit", bytes) / ("zero", n), alternating
    i, n = 0, len(data)
    while i < n:
        j = i
        while j < n and data[j] == 0:
            j += 1
        if j - i >= 4:
            chunks.append(("zero", j - i))
            i = j
            continue
        k = i
        while k < n:
            z = k
            while z < n and data[z] == 0 and z - k < 4:
                z += 1
            if z - k >= 4:
                break
            k = z + 1 if z == k else z
        chunks.append(("lit", bytes(data[i:k])))
        i = k
    first = True
    pending_zero = None      # a zero-run instruction not yet written: its S bits may change
    # A stream may not start with a zero run: a first byte above 17 is a literal count.  A
    # short leading run joins the literals after it; a long one gives 4 zeros to a first-byte
    # literal run (21: copy 4), the rest stays a run.
    if chunks and chunks[0][0] == "zero":
        z = chunks[0][1]
        if z < 8:
            rest = chunks[1][1] if len(chunks) > 1 else b""
            chunks[0:2] = [("lit", bytes(z) + rest)]
        else:
            out.extend([21, 0, 0, 0, 0])
            chunks[0] = ("zero", z - 4)
            first = False

    def emit_zero(count, trailing):
        v = count - 4
        out.extend([0x18 | (v & 7), 0xFC | len(trailing), 0xFF, v >> 3])
        out.extend(trailing)

    def emit_literal_run(lit):
        length = len(lit) - 3
        if length <= 15:
            out.append(length)
        else:
            out.append(0)
            rest = length - 15
            while rest > 255:
                out.append(0)
                rest -= 255
            out.append(rest)
        out.extend(lit)

    for kind, val in chunks:
        if kind == "zero":
            if pending_zero is not None:
                emit_zero(pending_zero, b"")
            # runs longer than one instruction holds: pieces of 2051, never a last piece < 4
            while val > 2051:
                piece = 2051 if val - 2051 >= 4 else val - 4
                emit_zero(piece, b"")
                val -= piece
            pending_zero = val
        else:
            lit = val
            if pending_zero is not None:
                if len(lit) <= 3:
                    emit_zero(pending_zero, lit)
                    pending_zero = None
                    first = False
                    continue
                emit_zero(pending_zero, b"")
                pending_zero = None
            elif first and len(lit) <= 3:
                out.append(17 + len(lit))        # first byte 18..20: copy 1..3 literals
                out.extend(lit)
                first = False
                continue
            emit_literal_run(lit)
        first = False
    if pending_zero is not None:
        emit_zero(pending_zero, b"")
    out.extend([0x11, 0, 0])
    return bytes(out)


def lzorle_decode(data, n):
    """Decodes an LZO1X stream, bitstream version 1 (LZO-RLE) included, to exactly n bytes;
    raises ValueError for anything malformed.  Written from lzo.rst's instruction table, not
    from f2fuse's decoder: it is the independent reader of f2fuse's LZO-RLE clusters."""
    out = bytearray()
    ip = 0
    version = 0
    if len(data) >= 5 and data[0] == 17:
        version = data[1]
        ip = 2

    def byte():
        nonlocal ip
        if ip >= len(data):
            raise ValueError("input overrun")
        ip += 1
        return data[ip - 1]

    def long_len(base):
        extra = 0
        while True:
            b = byte()
            if b:
                return extra + base + b
            extra += 255

    def literals(count):
        nonlocal ip
        if ip + count > len(data):
            raise ValueError("literals past the input")
        out.extend(data[ip:ip + count])
        ip += count

    def copy(dist, length):
        if dist <= 0 or dist > len(out):
            raise ValueError("copy from before the output")
        for _ in range(length):
            out.append(out[-dist])

    state = 0
    if ip < len(data) and data[ip] > 17:
        t = byte() - 17
        literals(t)
        state = t if t < 4 else 4
    while True:
        op = byte()
        if op < 16:
            if state == 0:
                length = long_len(15) if op == 0 else op
                literals(length + 3)
                state = 4
                continue
            h = byte()
            dist, length = ((op >> 2) + (h << 2) + 1, 2) if state < 4 else \
                ((op >> 2) + (h << 2) + 2049, 3)
            s_ = op & 3
        elif op >= 64:
            dist = ((op >> 2) & 7) + (byte() << 3) + 1
            length = (op >> 5) + 1
            s_ = op & 3
        elif op >= 32:
            length = (op & 31) or long_len(31)
            length += 2
            d = byte() | byte() << 8
            dist = (d >> 2) + 1
            s_ = d & 3
        else:
            high = op & 8
            if version and high and ip + 2 < len(data) and data[ip] & 0xFC == 0xFC and \
                    data[ip + 1] == 0xFF:
                s_ = data[ip] & 3
                run = ((data[ip + 2] << 3) | (op & 7)) + 4
                ip += 3
                out.extend(bytes(run))
                literals(s_)
                state = s_
                continue
            length = (op & 7) or long_len(7)
            length += 2
            d = byte() | byte() << 8
            far = (high << 11) + (d >> 2)
            if far == 0:
                if length != 3 or ip != len(data):
                    raise ValueError("bad end marker")
                break
            dist = far + 16384
            s_ = d & 3
        copy(dist, length)
        literals(s_)
        state = s_
        if len(out) > n:
            raise ValueError("output past %d bytes" % n)
    if len(out) != n:
        raise ValueError("decoded %d bytes, expected %d" % (len(out), n))
    return bytes(out)


def _inode_fields(raw):
    return raw[392], raw[393], struct.unpack_from("<H", raw, 394)[0]


def clusters(im, inode):
    """[(first block, slots)] of a compressed file's clusters."""
    alg, log, _ = _inode_fields(inode["raw"])
    csize = 1 << log
    nblocks = (inode["size"] + T.BLK - 1) // T.BLK
    return [(c, [im.bmap(inode, c + k) for k in range(csize)]) for c in range(0, nblocks, csize)]


def compressed_blocks(slots):
    out = []
    for a in slots[1:]:
        if a in (NEW_ADDR, 0):
            break
        out.append(a)
    return out


def decode(img, path, dec):
    """(data, layout): the file's bytes as the kernel reads them; layout = {first block:
    ("compressed"|"plain", slots)}."""
    with T.F2fsImage(img) as im:
        return decode_inode(im, im.inode(im.lookup(path)), dec, path)


def decode_inode(im, i, dec, what="", crypt=None):
    """decode() of inode i (an F2fsImage's inode dict).  crypt(lblk, block): an encrypted
    file's block decrypted; a compressed block is decrypted as the file block whose slot it
    takes (the cluster's first + 1 on), as f2fs_write_compressed_pages encrypts it."""
    def block(lblk, a):
        return crypt(lblk, im.block(a)) if crypt else im.block(a)
    if not i["flags"] & COMPR_FL:
        return im.read_data(i), {}
    alg, log, flag = _inode_fields(i["raw"])
    rlen = T.BLK << log
    nblocks = (i["size"] + T.BLK - 1) // T.BLK
    out, layout = [], {}
    for c, slots in clusters(im, i):
        if slots[0] == COMPRESS_ADDR:
            data = b"".join(block(c + 1 + k, a) for k, a in enumerate(compressed_blocks(slots)))
            clen = struct.unpack_from("<I", data, 0)[0] if data else 0
            if clen + HEADER > len(data):
                raise T.Corrupt("%s cluster %d: clen %d past its blocks" % (what, c, clen))
            cdata = data[HEADER:HEADER + clen]
            if flag & 1 and struct.unpack_from("<I", data, 4)[0] != \
                    T.crc_raw(F2FS_SUPER_MAGIC, cdata):
                raise T.Corrupt("%s cluster %d: checksum mismatch" % (what, c))
            try:
                plain = lzorle_decode(cdata, rlen) if alg == LZORLE else dec[alg](cdata, rlen)
            except Exception as e:
                raise T.Corrupt("%s cluster %d (%s) does not decode: %s"
                                % (what, c, NAMES.get(alg), e))
            if len(plain) != rlen:
                raise T.Corrupt("%s cluster %d: %d bytes" % (what, c, len(plain)))
            out.append(plain)
            layout[c] = ("compressed", tuple(slots))
        else:
            for k, a in enumerate(slots[:nblocks - c]):
                out.append(bytes(T.BLK) if a in (0, NEW_ADDR) else block(c + k, a))
            layout[c] = ("plain", tuple(slots[:nblocks - c]))
    return b"".join(out)[:i["size"]], layout


def _write_block(img, addr, data):
    with open(img, "r+b") as f:
        f.seek(addr * T.BLK)
        f.write(data)


def patch_inode(img, path, edit):
    """edit(raw bytearray) changes the inode block; its checksum is recomputed."""
    with T.F2fsImage(img) as im:
        ino = im.lookup(path)
        i = im.inode(ino)
        raw = bytearray(i["raw"])
        edit(raw)
        if im.feature & T.FEAT_INODE_CHKSUM and i["inline"] & T.EXTRA_ATTR:
            struct.pack_into("<I", raw, 368, im.inode_checksum(bytes(raw), ino))
        addr = i["addr"]
    _write_block(img, addr, bytes(raw))


def patch_cluster(img, path, nth, edit):
    """edit(bytearray of the nth compressed cluster's blocks) changes them in place."""
    with T.F2fsImage(img) as im:
        i = im.inode(im.lookup(path))
        comp = [(c, s) for c, s in clusters(im, i) if s[0] == COMPRESS_ADDR]
        blocks = compressed_blocks(comp[nth][1])
        buf = bytearray(b"".join(im.block(a) for a in blocks))
    edit(buf)
    for k, a in enumerate(blocks):
        _write_block(img, a, bytes(buf[k * T.BLK:(k + 1) * T.BLK]))


def transcode(img, path, alg, dec, enc, chksum=False, level=3):
    """Rewrites every compressed cluster of path with alg in the blocks it already has, and
    sets the inode's algorithm (and compress_chksum).  Returns the clusters rewritten; raises
    ValueError when one does not fit its blocks."""
    with T.F2fsImage(img) as im:
        i = im.inode(im.lookup(path))
        old, log, _ = _inode_fields(i["raw"])
        rlen = T.BLK << log
        plan = []
        for c, slots in clusters(im, i):
            if slots[0] != COMPRESS_ADDR:
                continue
            blocks = compressed_blocks(slots)
            data = b"".join(im.block(a) for a in blocks)
            clen = struct.unpack_from("<I", data, 0)[0]
            plain = dec[old](data[HEADER:HEADER + clen], rlen)
            new = enc[alg](plain, level)
            if len(new) + HEADER > len(blocks) * T.BLK:
                raise ValueError("%s cluster %d: %s needs %d bytes, the cluster has %d blocks"
                                 % (path, c, NAMES[alg], len(new), len(blocks)))
            sum_ = T.crc_raw(F2FS_SUPER_MAGIC, new) if chksum else 0
            buf = struct.pack("<II", len(new), sum_) + bytes(16) + new
            buf += bytes(len(blocks) * T.BLK - len(buf))
            plan.append((blocks, buf))
    for blocks, buf in plan:
        for k, a in enumerate(blocks):
            _write_block(img, a, buf[k * T.BLK:(k + 1) * T.BLK])

    def edit(raw):
        raw[392] = alg
        flag = struct.unpack_from("<H", raw, 394)[0]
        flag = (flag | 1) if chksum else (flag & ~1)
        struct.pack_into("<H", raw, 394, flag)
    patch_inode(img, path, edit)
    return len(plan)


def accounting(img, path):
    """(stored i_compr_blocks, what the slots make it): a compressed cluster's COMPRESS_ADDR
    and NEW_ADDR slots, none for a released file (fsck.f2fs's count, which fsck only fixes
    silently with -a)."""
    with T.F2fsImage(img) as im:
        return accounting_inode(im, im.inode(im.lookup(path)))


def accounting_inode(im, i):
    """accounting() of inode i (an F2fsImage's inode dict)."""
    stored = struct.unpack_from("<Q", i["raw"], 384)[0]
    if i["inline"] & 0x80:      # F2FS_COMPRESS_RELEASED
        return stored, 0
    _, log, _ = _inode_fields(i["raw"])
    csize = 1 << log
    nslots = (i["size"] + T.BLK - 1) // T.BLK
    nslots = (nslots + csize - 1) // csize * csize
    want = 0
    for c in range(0, nslots, csize):
        slots = [im.bmap(i, c + k) for k in range(csize)]
        if slots[0] == COMPRESS_ADDR:
            want += sum(1 for a in slots if a in (COMPRESS_ADDR, NEW_ADDR))
    return stored, want


def fields(img, path):
    """(algorithm, log cluster size, checksum flag, level) of a compressed file's inode."""
    with T.F2fsImage(img) as im:
        alg, log, flag = _inode_fields(im.inode(im.lookup(path))["raw"])
        return alg, log, bool(flag & 1), flag >> 8
