#!/usr/bin/python3
"""f2crypt: fscrypt encryption inside an f2fs image, written independently of f2fuse (test-only).

The UML kernel here has no CONFIG_FS_ENCRYPTION, so the encrypted test images are made here,
following the documented format (Documentation/filesystems/fscrypt.rst, fs/crypto, fs/f2fs),
with Debian's python3-cryptography for the ciphers (run under /usr/bin/python3: the default
python3 on PATH does not see Debian's modules).  It is both the encoder of the tests' images
and their oracle: it decrypts with the key and computes the no-key names a kernel shows without
it, from the bytes on disk, without any f2fuse code.

What it does to a directory of an sload'ed (or otherwise written) image, in place:
  - every directory, regular file and symlink below gets an encryption context (xattr index 9,
    name "c", in the inode's inline xattr area) and FADVISE_ENCRYPT; v1 (28 bytes) or v2
    (40 bytes) with a random nonce;
  - every name in those directories becomes its ciphertext (AES-256-CBC-CTS, NUL-padded to
    the policy's 4/8/16/32 and to at least 16 bytes, IV 0 or the policy's), its hash the TEA
    hash of the ciphertext (or, casefolded, the SipHash of the folded plaintext), the dentry
    area rebuilt; the child's i_name becomes the ciphertext and it gets FADVISE_ENC_NAME;
  - regular files' blocks are encrypted in place (AES-256-XTS, data unit = block or the
    policy's log2_data_unit_size, IV = data unit index, or with IV_INO_LBLK_64/32 the inode
    number in it), symlink targets become struct fscrypt_symlink_data (le16 length +
    ciphertext + NUL, i_size = 2 + length);
  - inode checksums are recomputed.
Keys: v2 per-file keys = HKDF-SHA512(master, info "fscrypt\\0" + context byte + nonce); the
key identifier = HKDF(ctx 1, empty); IV_INO_LBLK_64/32 per-mode keys from (mode, fs uuid); v1
per-file keys = AES-128-ECB(key = nonce) of the master key.

Limits (asserted): directories must fit their inline area or their one dentry block (dir_level
0) once encrypted; regular files must not be inline (the kernel never has inline encrypted
files), except empty ones whose inline flag is dropped; contexts need room in the inline
xattr area and no xattr node; DIRECT_KEY (Adiantum only) and modes other than AES-256-XTS +
AES-256-CBC-CTS and AES-128-CBC-ESSIV + AES-128-CBC-CTS are not implemented.

Module use:  Image(path) -> encrypt_tree(path, key, policy) -> Record; decrypt_tree(path, key);
             nokey_names(path) (what a keyless listing shows); nokey_name(hash, ciphertext).
Command line: f2crypt.py selftest | encrypt IMG DIR KEYHEX [v1|v2] | decrypt IMG DIR KEYHEX
              [MAXBYTES] (kind, SHA-256, path per line) | nokey IMG DIR (for tests under
              other Pythons)
"""

import hashlib
import hmac
import os
import random
import struct
import sys

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import f2compress  # noqa: E402
import f2test as T  # noqa: E402

BLK = 4096

# include/uapi/linux/fscrypt.h
MODE_AES_256_XTS, MODE_AES_256_CTS = 1, 4
MODE_AES_128_CBC, MODE_AES_128_CTS = 5, 6      # CBC-ESSIV for contents, CBC-CTS for names
PAD = {4: 0, 8: 1, 16: 2, 32: 3}
FLAG_DIRECT_KEY, FLAG_IV_INO_LBLK_64, FLAG_IV_INO_LBLK_32 = 0x04, 0x08, 0x10
KEY_SIZE = {MODE_AES_256_XTS: 64, MODE_AES_256_CTS: 32, MODE_AES_128_CBC: 16, MODE_AES_128_CTS: 16}
PAIRS = ((MODE_AES_256_XTS, MODE_AES_256_CTS), (MODE_AES_128_CBC, MODE_AES_128_CTS))
# fs/crypto/fscrypt_private.h: HKDF context bytes
HKDF_KEY_IDENTIFIER, HKDF_PER_FILE_KEY, HKDF_IV_INO_LBLK_64_KEY = 1, 2, 4
HKDF_DIRHASH_KEY, HKDF_IV_INO_LBLK_32_KEY, HKDF_INODE_HASH_KEY = 5, 6, 7

# f2fs on-disk bits (include/f2fs_fs.h)
FADVISE_ENCRYPT, FADVISE_ENC_NAME = 0x04, 0x08
INLINE_XATTR, INLINE_DATA, INLINE_DENTRY, DATA_EXIST = 0x01, 0x02, 0x04, 0x08
XATTR_MAGIC, XATTR_INDEX_ENCRYPTION = 0xF2F52011, 9
CASEFOLD_FL = 0x40000000
FEAT_INODE_CHKSUM, FEAT_EXTRA_ATTR = 0x20, 0x8
SLOT, NR_DENTRY_IN_BLOCK = 8, 214
FT = {0o100000: 1, 0o040000: 2, 0o020000: 3, 0o060000: 4, 0o010000: 5, 0o140000: 6, 0o120000: 7}


# ---------------------------------------------------------------------------------------------
# primitives

def aes_ecb(key, data, decrypt=False):
    c = Cipher(algorithms.AES(key), modes.ECB())
    op = c.decryptor() if decrypt else c.encryptor()
    return op.update(data) + op.finalize()


def xts(key, tweak, data, decrypt=False):
    """AES-XTS of one data unit (IEEE 1619), tweak = the 16-byte IV."""
    c = Cipher(algorithms.AES(key), modes.XTS(tweak))
    op = c.decryptor() if decrypt else c.encryptor()
    return op.update(data) + op.finalize()


def cbc_essiv(key, iv, data, decrypt=False):
    """AES-128-CBC-ESSIV of one data unit: the IV encrypted with AES-256 under SHA-256 of the
    key, then CBC chained by hand over single-block ECB (no library CBC: the self-test compares
    against cryptography's CBC)."""
    iv = aes_ecb(hashlib.sha256(key).digest(), iv)
    out, prev = [], iv
    for i in range(0, len(data), 16):
        blk = data[i:i + 16]
        if decrypt:
            out.append(_xor(aes_ecb(key, blk, True), prev))
            prev = blk
        else:
            prev = aes_ecb(key, _xor(blk, prev))
            out.append(prev)
    return b"".join(out)


def _xor(a, b):
    return bytes(x ^ y for x, y in zip(a, b))


def cts_encrypt(key, iv, pt):
    """AES-CBC with ciphertext stealing, the Linux cts(cbc(aes)) variant (CS3, RFC 3962): for
    more than one block the last two ciphertext blocks are swapped, the last one cut."""
    n = len(pt)
    assert n >= 16
    if n == 16:
        return aes_ecb(key, _xor(pt, iv))
    tail = n % 16 or 16
    padded = pt + bytes(16 - tail)
    blocks, prev = [], iv
    for i in range(0, len(padded), 16):
        prev = aes_ecb(key, _xor(padded[i:i + 16], prev))
        blocks.append(prev)
    return b"".join(blocks[:-2]) + blocks[-1] + blocks[-2][:tail]


def cts_decrypt(key, iv, ct):
    n = len(ct)
    assert n >= 16
    if n == 16:
        return _xor(aes_ecb(key, ct, True), iv)
    tail = n % 16 or 16
    nfull = (n - tail) // 16 - 1          # blocks before the swapped pair
    head, cn_1, last = ct[:16 * nfull], ct[16 * nfull:16 * nfull + 16], ct[16 * nfull + 16:]
    # cn_1 is the last CBC block (C_n); last holds the first `tail` bytes of C_{n-1}.
    d = aes_ecb(key, cn_1, True)             # = P_n (zero-padded) xor C_{n-1}
    c_prev = last + d[tail:]                 # C_{n-1} rebuilt from the stolen bytes
    p_n = _xor(d[:tail], last)
    out, prev = [], iv
    for i in range(0, len(head), 16):
        out.append(_xor(aes_ecb(key, head[i:i + 16], True), prev))
        prev = head[i:i + 16]
    p_n_1 = _xor(aes_ecb(key, c_prev, True), prev)
    return b"".join(out) + p_n_1 + p_n


def hkdf_sha512(ikm, context, info, length):
    """fscrypt's HKDF-SHA512: no salt, info = "fscrypt\\0" + context byte + info."""
    return HKDF(algorithm=hashes.SHA512(), length=length, salt=None,
                info=b"fscrypt\0" + bytes([context]) + info).derive(ikm)


def hkdf_sha512_by_hand(ikm, context, info, length):
    """The same from hmac, for the self-test (RFC 5869 step by step)."""
    prk = hmac.new(bytes(64), ikm, hashlib.sha512).digest()
    out, t, i = b"", b"", 1
    full = b"fscrypt\0" + bytes([context]) + info
    while len(out) < length:
        t = hmac.new(prk, t + full + bytes([i]), hashlib.sha512).digest()
        out += t
        i += 1
    return out[:length]


def siphash24(key, msg):
    """SipHash-2-4 with a 16-byte key; returns the 64-bit value (lib/siphash.c)."""
    M = 0xFFFFFFFFFFFFFFFF
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d, k0 ^ 0x6c7967656e657261,
         k1 ^ 0x7465646279746573]

    def rotl(x, b):
        return ((x << b) | (x >> (64 - b))) & M

    def rnd():
        v[0] = (v[0] + v[1]) & M; v[1] = rotl(v[1], 13); v[1] ^= v[0]; v[0] = rotl(v[0], 32)  # noqa: E702
        v[2] = (v[2] + v[3]) & M; v[3] = rotl(v[3], 16); v[3] ^= v[2]                     # noqa: E702
        v[0] = (v[0] + v[3]) & M; v[3] = rotl(v[3], 21); v[3] ^= v[0]                     # noqa: E702
        v[2] = (v[2] + v[1]) & M; v[1] = rotl(v[1], 17); v[1] ^= v[2]; v[2] = rotl(v[2], 32)  # noqa: E702
    n = len(msg)
    last = (n & 0xFF) << 56
    full = n - n % 8
    for i in range(0, full, 8):
        m = struct.unpack_from("<Q", msg, i)[0]
        v[3] ^= m
        rnd(); rnd()                                                                     # noqa: E702
        v[0] ^= m
    for i, b in enumerate(msg[full:]):
        last |= b << (8 * i)
    v[3] ^= last
    rnd(); rnd()                                                                         # noqa: E702
    v[0] ^= last
    v[2] ^= 0xFF
    rnd(); rnd(); rnd(); rnd()                                                           # noqa: E702
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def f2fs_hash(name):
    """fs/f2fs/hash.c TEA_hash_name: "." and ".." hash to 0."""
    if name in (b".", b".."):
        return 0
    M = 0xFFFFFFFF
    buf = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476]
    p = 0
    n = len(name)
    while True:
        pad = (n | (n << 8)) & M
        pad = (pad | (pad << 16)) & M
        chunk = name[p:p + 16]
        words, val = [], pad
        for i, c in enumerate(chunk):
            if i % 4 == 0:
                val = pad
            val = (c + (val << 8)) & M
            if i % 4 == 3:
                words.append(val)
                val = pad
        if len(chunk) % 4:
            words.append(val)
        while len(words) < 4:
            words.append(pad)
        b0, b1, s = buf[0], buf[1], 0
        for _ in range(16):
            s = (s + 0x9E3779B9) & M
            b0 = (b0 + ((((b1 << 4) & M) + words[0]) ^ ((b1 + s) & M) ^ ((b1 >> 5) + words[1]))) & M
            b1 = (b1 + ((((b0 << 4) & M) + words[2]) ^ ((b0 + s) & M) ^ ((b0 >> 5) + words[3]))) & M
        buf[0] = (buf[0] + b0) & M
        buf[1] = (buf[1] + b1) & M
        p += 16
        if n <= 16:
            break
        n -= 16
    return buf[0]


B64URL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def b64url(data):
    """base64url without padding, bit by bit (not the stdlib's, to stay independent)."""
    out, acc, bits = bytearray(), 0, 0
    for b in data:
        acc = (acc << 8) | b
        bits += 8
        while bits >= 6:
            bits -= 6
            out.append(B64URL[(acc >> bits) & 63])
    if bits:
        out.append(B64URL[(acc << (6 - bits)) & 63])
    return bytes(out)


def nokey_name(hash_code, ciphertext):
    """struct fscrypt_nokey_name as f2fs lists it: le32 hash, le32 0, then the ciphertext, or
    its first 149 bytes and the SHA-256 of the rest; base64url."""
    raw = struct.pack("<II", hash_code, 0)
    if len(ciphertext) <= 149:
        raw += ciphertext
    else:
        raw += ciphertext[:149] + hashlib.sha256(ciphertext[149:]).digest()
    return b64url(raw)


def nokey_symlink(target_raw):
    """What readlink shows for an encrypted symlink without its key."""
    n = struct.unpack_from("<H", target_raw, 0)[0]
    return nokey_name(0, target_raw[2:2 + n])


# ---------------------------------------------------------------------------------------------
# keys and policies

class MasterKey:
    def __init__(self, raw, descriptor=None):
        assert len(raw) == 64, "the encoder takes 64-byte master keys"
        self.raw = bytes(raw)
        self.identifier = hkdf_sha512(self.raw, HKDF_KEY_IDENTIFIER, b"", 16)
        # v1 descriptors are chosen by userspace; e4crypt and fscrypt take double SHA-512.
        self.descriptor = descriptor or \
            hashlib.sha512(hashlib.sha512(self.raw).digest()).digest()[:8]


class Policy:
    def __init__(self, version=2, pad=32, iv_flag=0, log2_dus=0,
                 contents=MODE_AES_256_XTS, filenames=MODE_AES_256_CTS):
        assert version in (1, 2) and pad in PAD
        assert iv_flag in (0, FLAG_IV_INO_LBLK_64, FLAG_IV_INO_LBLK_32)
        assert version == 2 or (iv_flag == 0 and log2_dus == 0)
        assert log2_dus in (0, 9, 10, 11, 12)
        self.version, self.pad, self.iv_flag, self.log2_dus = version, pad, iv_flag, log2_dus
        self.contents, self.filenames = contents, filenames
        self.flags = PAD[pad] | iv_flag

    def context(self, key, nonce):
        assert len(nonce) == 16
        if self.version == 1:
            return struct.pack("<BBBB8s16s", 1, self.contents, self.filenames, self.flags,
                               key.descriptor, nonce)
        return struct.pack("<BBBBB3s16s16s", 2, self.contents, self.filenames, self.flags,
                           self.log2_dus, bytes(3), key.identifier, nonce)

    @staticmethod
    def parse(ctx):
        """(Policy, key id or descriptor, nonce) from a stored context."""
        if len(ctx) == 28 and ctx[0] == 1:
            v, c, f, fl, kid, nonce = struct.unpack("<BBBB8s16s", ctx)
            dus = 0
        elif len(ctx) == 40 and ctx[0] == 2:
            v, c, f, fl, dus, _, kid, nonce = struct.unpack("<BBBBB3s16s16s", ctx)
        else:
            raise ValueError("context of %d bytes, version %d" % (len(ctx), ctx[0] if ctx else -1))
        pad = {0: 4, 1: 8, 2: 16, 3: 32}[fl & 3]
        return Policy(1 if v == 1 else 2, pad, fl & ~3, dus, c, f), kid, nonce


class InodeKeys:
    """The keys and IVs of one inode (fs/crypto/keysetup.c, crypto.c fscrypt_generate_iv)."""

    def __init__(self, key, policy, nonce, ino, fs_uuid, is_reg):
        if (policy.contents, policy.filenames) not in PAIRS:
            raise NotImplementedError("only AES-256-XTS + AES-256-CBC-CTS, AES-128-CBC-ESSIV + "
                                      "AES-128-CBC-CTS")
        self.policy, self.ino, self.nonce = policy, ino, nonce
        mode = policy.contents if is_reg else policy.filenames
        size = KEY_SIZE[mode]
        self.hashed_ino = 0
        if policy.version == 1:
            assert len(key.raw) >= size
            self.key = aes_ecb(nonce, key.raw[:size])
        elif policy.iv_flag == FLAG_IV_INO_LBLK_64:
            self.key = hkdf_sha512(key.raw, HKDF_IV_INO_LBLK_64_KEY, bytes([mode]) + fs_uuid, size)
        elif policy.iv_flag == FLAG_IV_INO_LBLK_32:
            self.key = hkdf_sha512(key.raw, HKDF_IV_INO_LBLK_32_KEY, bytes([mode]) + fs_uuid, size)
            hkey = hkdf_sha512(key.raw, HKDF_INODE_HASH_KEY, b"", 16)
            self.hashed_ino = siphash24(hkey, struct.pack("<Q", ino)) & 0xFFFFFFFF
        else:
            self.key = hkdf_sha512(key.raw, HKDF_PER_FILE_KEY, nonce, size)
        self.dirhash_key = (hkdf_sha512(key.raw, HKDF_DIRHASH_KEY, nonce, 16)
                            if policy.version == 2 else None)

    def iv(self, index):
        if self.policy.iv_flag == FLAG_IV_INO_LBLK_64:
            index |= self.ino << 32
        elif self.policy.iv_flag == FLAG_IV_INO_LBLK_32:
            index = (self.hashed_ino + index) & 0xFFFFFFFF
        return struct.pack("<Q", index) + bytes(8)

    # -- names (also symlink targets)
    def ciphertext_len(self, n, limit=255):
        """fscrypt_fname_encrypted_size: at least 16, rounded up to the padding, at most
        limit (NAME_MAX for names; what the block leaves for symlink targets)."""
        m = max(n, 16)
        m = (m + self.policy.pad - 1) // self.policy.pad * self.policy.pad
        return min(m, limit)

    def encrypt_name(self, name, limit=255):
        n = self.ciphertext_len(len(name), limit)
        assert len(name) <= n
        return cts_encrypt(self.key, self.iv(0), name + bytes(n - len(name)))

    def decrypt_name(self, ct):
        return cts_decrypt(self.key, self.iv(0), ct).rstrip(b"\0")

    def dirhash(self, name):
        """Encrypted + casefolded directories: SipHash of the folded name (ASCII only here)."""
        assert all(c < 128 for c in name), "the encoder folds ASCII names only"
        return siphash24(self.dirhash_key, name.lower()) & 0xFFFFFFFF

    # -- contents
    def _units(self):
        dus = 1 << (self.policy.log2_dus or 12)
        return dus, BLK // dus

    def crypt_block(self, lblk, data, decrypt=False):
        dus, per = self._units()
        out = []
        for u in range(per):
            unit, iv = data[u * dus:(u + 1) * dus], self.iv(lblk * per + u)
            if self.policy.contents == MODE_AES_128_CBC:
                out.append(cbc_essiv(self.key, iv, unit, decrypt))
            else:
                out.append(xts(self.key, iv, unit, decrypt))
        return b"".join(out)


# ---------------------------------------------------------------------------------------------
# the image

class Image:
    """Reads with f2test's F2fsImage (through a shared mapping) and writes blocks in place."""

    def __init__(self, path):
        self.path = path
        self.im = T.F2fsImage(path)
        self.fd = os.open(path, os.O_RDWR)
        self.uuid = bytes(self.im.sb["uuid"])

    def close(self):
        os.fsync(self.fd)
        os.close(self.fd)
        self.im.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def write_block(self, addr, data):
        assert len(data) == BLK and self.im.main_blkaddr <= addr < self.im.block_count
        os.pwrite(self.fd, data, addr * BLK)

    def inode(self, ino):
        return self.im.inode(ino)

    def write_inode(self, ino, raw):
        """Writes an inode block back with its checksum recomputed."""
        raw = bytearray(raw)
        extra = struct.unpack_from("<H", raw, 360)[0] if raw[3] & 0x20 else 0
        if self.im.feature & FEAT_INODE_CHKSUM and raw[3] & 0x20 and extra >= 12:
            struct.pack_into("<I", raw, 368, self.im.inode_checksum(bytes(raw), ino))
        self.write_block(self.im.node_addr(ino), bytes(raw))

    # -- xattrs in the inline area
    def xattr_area(self, i):
        if not (i["inline"] & INLINE_XATTR) or not i["xattr_addrs"]:
            raise AssertionError("inode %d has no inline xattr area" % i["ino"])
        return 4052 - 4 * i["xattr_addrs"], 4 * i["xattr_addrs"]

    def get_context(self, i):
        off, size = self.xattr_area(i)
        area = i["raw"][off:off + size]
        for idx, name, value in parse_xattrs(area):
            if idx == XATTR_INDEX_ENCRYPTION and name == b"c":
                return value
        if i["xattr_nid"]:
            node = self.im.node(i["xattr_nid"])[:4072]
            for idx, name, value in parse_xattrs(area + node):
                if idx == XATTR_INDEX_ENCRYPTION and name == b"c":
                    return value
        return None

    def set_xattr(self, raw, i, index, name, value):
        """Puts (index, name) = value into the inline area of raw (replacing an old one)."""
        assert not i["xattr_nid"], "inode %d has an xattr node" % i["ino"]
        off, size = self.xattr_area(i)
        entries = [e for e in parse_xattrs(raw[off:off + size]) if e[:2] != (index, name)]
        entries.append((index, name, value))
        area = build_xattrs(entries)
        assert len(area) + 4 <= size, "inode %d: no room for the context" % i["ino"]
        raw[off:off + size] = area + bytes(size - len(area))


def parse_xattrs(buf):
    res = []
    if len(buf) < 24 or struct.unpack_from("<I", buf, 0)[0] != XATTR_MAGIC:
        return res
    o = 24
    while o + 4 <= len(buf) and struct.unpack_from("<I", buf, o)[0] != 0:
        idx, nl, vs = buf[o], buf[o + 1], struct.unpack_from("<H", buf, o + 2)[0]
        res.append((idx, bytes(buf[o + 4:o + 4 + nl]), bytes(buf[o + 4 + nl:o + 4 + nl + vs])))
        o += (4 + nl + vs + 3) & ~3
    return res


def build_xattrs(entries):
    out = bytearray(struct.pack("<II16x", XATTR_MAGIC, 1))
    for idx, name, value in entries:
        e = struct.pack("<BBH", idx, len(name), len(value)) + name + value
        out += e + bytes(-len(e) % 4)
    return bytes(out)


def dentry_layout(i):
    """(offset of the dentry area in its block, bitmap, reserved, slots) of a directory:
    its inline area, or a dentry block."""
    if i["inline"] & INLINE_DENTRY:
        m = i["max_inline"]
        nr = 8 * m // 153
        bm = (nr + 7) // 8
        return i["inline_off"], bm, m - 19 * nr - bm, nr
    return 0, 27, 3, NR_DENTRY_IN_BLOCK


def build_dentries(area_len, layout, entries):
    """A dentry area: entries = [(name bytes, hash, ino, file type)], "." and ".." first."""
    _, bm, rsv, nr = layout
    area = bytearray(area_len)
    de_off, name_off = bm + rsv, bm + rsv + 11 * nr
    pos = 0
    for name, h, ino, ft in entries:
        slots = max(1, (len(name) + SLOT - 1) // SLOT)
        assert pos + slots <= nr, "the encrypted names do not fit the directory (%d slots)" % nr
        struct.pack_into("<IIHB", area, de_off + 11 * pos, h, ino, len(name), ft)
        area[name_off + SLOT * pos:name_off + SLOT * pos + len(name)] = name
        for s in range(pos, pos + slots):
            area[s >> 3] |= 1 << (s & 7)
        pos += slots
    return bytes(area)


# ---------------------------------------------------------------------------------------------
# encryption of a tree

class Record:
    """What encrypt_tree did: per path relative to the top, the inode, its kind, plaintext
    content or target, and for directories the no-key names a keyless listing must show."""

    def __init__(self):
        self.entries = {}      # rel path (bytes) -> dict(ino, kind, data)
        self.nokey = {}        # rel dir path -> {no-key name: (plaintext name, ino)}
        self.ciphertext = {}   # rel path -> ciphertext of its name
        self.nokey_of = {}     # rel path -> its no-key name in its directory

    def nokey_path(self, rel):
        """The path a keyless mount shows for rel (plaintext path under the top directory)."""
        parts = rel.split(b"/")
        return b"/".join(self.nokey_of[b"/".join(parts[:i + 1])] for i in range(len(parts)))


class Encoder:
    def __init__(self, img, key, policy, rng, casefold=False):
        self.img, self.key, self.policy, self.rng = img, key, policy, rng
        self.casefold = casefold
        self.done = set()
        self.rec = Record()

    def keys_of(self, ino, nonce, is_reg):
        return InodeKeys(self.key, self.policy, nonce, ino, self.img.uuid, is_reg)

    def new_nonce(self):
        return bytes(self.rng.getrandbits(8) for _ in range(16))

    def give_context(self, raw, i):
        nonce = self.new_nonce()
        self.img.set_xattr(raw, i, XATTR_INDEX_ENCRYPTION, b"c", self.policy.context(self.key, nonce))
        raw[2] |= FADVISE_ENCRYPT
        return nonce

    def encrypt_file(self, ino, rel):
        i = self.img.inode(ino)
        raw = bytearray(i["raw"])
        plain = self.img.im.read_data(i)
        if i["inline"] & INLINE_DATA:
            assert i["size"] == 0, "%r: inline file (the kernel never has inline encrypted ones)" % rel
            raw[3] &= ~(INLINE_DATA | DATA_EXIST) & 0xFF
        nonce = self.give_context(raw, i)
        k = self.keys_of(ino, nonce, True)
        for lblk in range((i["size"] + BLK - 1) // BLK):
            addr = self.img.im.bmap(i, lblk)
            if addr in (T.NULL_ADDR, T.NEW_ADDR):
                continue   # holes stay holes: they read as zeros, never decrypted
            self.img.write_block(addr, k.crypt_block(lblk, self.img.im.block(addr)))
        self.img.write_inode(ino, raw)
        self.rec.entries[rel] = dict(ino=ino, kind="file", data=plain)

    def encrypt_symlink(self, ino, rel):
        i = self.img.inode(ino)
        raw = bytearray(i["raw"])
        target = self.img.im.read_data(i)
        nonce = self.give_context(raw, i)
        k = self.keys_of(ino, nonce, False)
        ct = k.encrypt_name(target, 4096 - 3)
        disk = struct.pack("<H", len(ct)) + ct + b"\0"
        if i["inline"] & INLINE_DATA:
            assert len(disk) <= i["max_inline"], "%r: encrypted target outgrows the inline area" % rel
            o = i["inline_off"]
            raw[o:o + i["max_inline"]] = disk + bytes(i["max_inline"] - len(disk))
        else:
            addr = self.img.im.bmap(i, 0)
            self.img.write_block(addr, disk + bytes(BLK - len(disk)))
        struct.pack_into("<Q", raw, 16, len(disk) - 1)
        self.img.write_inode(ino, raw)
        self.rec.entries[rel] = dict(ino=ino, kind="link", data=target,
                                     nokey=nokey_name(0, ct))

    def encrypt_dir(self, ino, rel):
        i = self.img.inode(ino)
        assert i["raw"][347] == 0, "%r: i_dir_level is not 0" % rel
        raw = bytearray(i["raw"])
        if not (i["inline"] & INLINE_DENTRY):
            assert i["size"] == BLK, "%r: only one-block directories (size %d)" % (rel, i["size"])
        if self.casefold:
            struct.pack_into("<I", raw, 80, struct.unpack_from("<I", raw, 80)[0] | CASEFOLD_FL)
        entries = self.img.im.dentries(i)
        nonce = self.give_context(raw, i)
        k = self.keys_of(ino, nonce, False)
        self.rec.entries[rel] = dict(ino=ino, kind="dir", data=None)
        listing = {}
        new = []
        for name, cino, ft, _ in entries:
            if name in (b".", b".."):
                new.append((name, 0, cino, ft))
                continue
            crel = rel + b"/" + name if rel else name
            ct = k.encrypt_name(name)
            h = k.dirhash(name) if self.casefold else f2fs_hash(ct)
            new.append((ct, h, cino, ft))
            listing[nokey_name(h, ct)] = (name, cino)
            self.rec.nokey_of[crel] = nokey_name(h, ct)
            self.rec.ciphertext[crel] = ct
            self.child(cino, ft, crel, name, ct, h, ino)
        self.rec.nokey[rel] = listing
        # the dot entries first, in their slots 0 and 1
        new.sort(key=lambda e: (e[0] != b".", e[0] != b".."))
        if i["inline"] & INLINE_DENTRY:
            lay = dentry_layout(i)
            o, m = i["inline_off"], i["max_inline"]
            raw[o:o + m] = build_dentries(m, lay, new)
        else:
            addr = self.img.im.bmap(i, 0)
            self.img.write_block(addr, build_dentries(BLK, dentry_layout(i), new))
        self.img.write_inode(ino, raw)

    def child(self, cino, ft, crel, name, ct, h, pino):
        first = cino not in self.done
        self.done.add(cino)
        if first:
            if ft == 2:
                self.encrypt_dir(cino, crel)
            elif ft == 1:
                self.encrypt_file(cino, crel)
            elif ft == 7:
                self.encrypt_symlink(cino, crel)
            else:
                self.rec.entries[crel] = dict(ino=cino, kind="special", data=None)
        else:
            self.rec.entries[crel] = dict(ino=cino, kind="hardlink", data=None)
        # init_dent_inode: the name the inode records, as its entry stores it
        ci = self.img.inode(cino)
        craw = bytearray(ci["raw"])
        craw[2] |= FADVISE_ENC_NAME
        if ci["pino"] == pino and bytes(ci["name"]) == name:
            craw[92:92 + 255] = bytes(255)
            craw[92:92 + len(ct)] = ct
            if self.casefold and len(ct) + 4 <= 255:
                struct.pack_into("<I", craw, 92 + len(ct), h)
            struct.pack_into("<I", craw, 88, len(ct))
        self.img.write_inode(cino, craw)


def set_context_bytes(image, ino, ctx):
    """Replaces inode ino's encryption context by ctx (None removes it): damage for tests."""
    with Image(image) as img:
        i = img.inode(ino)
        raw = bytearray(i["raw"])
        off, size = img.xattr_area(i)
        entries = [e for e in parse_xattrs(raw[off:off + size])
                   if e[:2] != (XATTR_INDEX_ENCRYPTION, b"c")]
        if ctx is not None:
            entries.append((XATTR_INDEX_ENCRYPTION, b"c", ctx))
        area = build_xattrs(entries)
        raw[off:off + size] = area + bytes(size - len(area))
        img.write_inode(ino, raw)


def get_context_bytes(image, ino):
    with Image(image) as img:
        return img.get_context(img.inode(ino))


def seal_fsynced(image, dir_path, key, ino, seed=0):
    """An fsync'ed new file (f2fuse's roll-forward chain: inode blocks with the dentry mark,
    not in the NAT yet) created in directory dir_path before that directory was encrypted
    here: makes the chain's inode what a kernel with the key would have written into the
    encrypted directory - context, FADVISE_ENCRYPT and ENC_NAME, i_name the ciphertext of its
    name under the directory's key, its data blocks encrypted.  Returns (plain name, contents,
    ciphertext name, hash)."""
    with Image(image) as img:
        dino = _dir_ino(img, dir_path)
        dk = inode_keys(img, key, dino, False)
        im = img.im
        copies = []
        for addr in range(im.main_blkaddr, im.block_count):
            b = im.block(addr)
            if struct.unpack_from("<II", b, 4072) == (ino, ino) and b[0:2] != b"\0\0" and \
                    struct.unpack_from("<I", b, 84)[0] == dino:
                copies.append(addr)
        assert copies, "no inode block of %d in the chain" % ino
        # the newest copy carries the pointers and the size
        newest = max(copies, key=lambda a: (struct.unpack_from("<Q", im.block(a), 4084)[0], a))
        nb = im.block(newest)
        name = bytes(nb[92:92 + struct.unpack_from("<I", nb, 88)[0]])
        ct = dk.encrypt_name(name)
        casefolded = struct.unpack_from("<I", im.inode(dino)["raw"], 80)[0] & CASEFOLD_FL
        h = dk.dirhash(name) if casefolded else f2fs_hash(ct)
        nonce = bytes(random.Random(seed).getrandbits(8) for _ in range(16))
        ctx = dk.policy.context(MasterKey(key), nonce)
        fk = InodeKeys(MasterKey(key), dk.policy, nonce, ino, img.uuid, True)
        for addr in copies:
            raw = bytearray(im.block(addr))
            i = _inode_of_raw(im, raw, ino, addr)
            off, size = img.xattr_area(i)
            entries = [e for e in parse_xattrs(raw[off:off + size])] + \
                [(XATTR_INDEX_ENCRYPTION, b"c", ctx)]
            area = build_xattrs(entries)
            assert len(area) + 4 <= size
            raw[off:off + size] = area + bytes(size - len(area))
            raw[2] |= FADVISE_ENCRYPT | FADVISE_ENC_NAME
            raw[92:92 + 255] = bytes(255)
            raw[92:92 + len(ct)] = ct
            if casefolded and len(ct) + 4 <= 255:     # the keyed hash, for recovery
                struct.pack_into("<I", raw, 92 + len(ct), h)
            struct.pack_into("<I", raw, 88, len(ct))
            if im.feature & FEAT_INODE_CHKSUM and raw[3] & 0x20 and \
                    struct.unpack_from("<H", raw, 360)[0] >= 12:
                struct.pack_into("<I", raw, 368, im.inode_checksum(bytes(raw), ino))
            img.write_block(addr, bytes(raw))
        i = _inode_of_raw(im, bytearray(im.block(newest)), ino, newest)
        assert not (i["inline"] & INLINE_DATA), "the fsync'ed file is inline"
        plain = bytearray()
        for lblk in range((i["size"] + BLK - 1) // BLK):
            a = struct.unpack_from("<I", i["raw"], 360 + i["extra_isize"] + 4 * lblk)[0]
            assert lblk < i["addrs"], "the fsync'ed file needs a direct node"
            if a in (T.NULL_ADDR, T.NEW_ADDR):
                plain += bytes(BLK)
                continue
            blk = im.block(a)
            plain += blk
            img.write_block(a, fk.crypt_block(lblk, blk))
        return name, bytes(plain[:i["size"]]), ct, h


def _inode_of_raw(im, raw, ino, addr):
    """f2test's inode dict for an inode block that the NAT does not point at."""
    saved = im.nat_entry, im.block
    im.nat_entry = lambda nid: (0, ino, addr, 0)
    im.block = lambda a: bytes(raw) if a == addr else saved[1](a)
    try:
        return im.inode(ino)
    finally:
        im.nat_entry, im.block = saved


def _dir_ino(img, path):
    return img.im.lookup(path)


def lookup_encrypted(img, path, rel, key, descriptor=None):
    """The inode number of rel (plaintext names, b"/"-separated) below the encrypted
    directory path of an open Image."""
    ino = _dir_ino(img, path)
    for part in rel.split(b"/"):
        k = inode_keys(img, key, ino, False, descriptor)
        found = [c for name, c, _, _ in img.im.dentries(img.inode(ino))
                 if name not in (b".", b"..") and k.decrypt_name(name) == part]
        if not found:
            raise KeyError("%r not found below %s" % (rel, path))
        ino = found[0]
    return ino


def encrypt_tree(image, path, key, policy=None, seed=0, casefold=False, descriptor=None):
    """Encrypts directory `path` (e.g. "/enc") of `image` and everything below; returns the
    Record.  key: 64 bytes; descriptor: a v1 descriptor other than the usual one."""
    policy = policy or Policy()
    with Image(image) as img:
        ino = _dir_ino(img, path)
        i = img.inode(ino)
        assert i["mode"] & 0o170000 == 0o040000, "%s is no directory" % path
        enc = Encoder(img, MasterKey(key, descriptor), policy, random.Random(seed), casefold)
        enc.done.add(ino)
        enc.encrypt_dir(ino, b"")
        return enc.rec


# ---------------------------------------------------------------------------------------------
# decryption (the oracle) and the keyless view

def inode_keys(img, key, ino, is_reg, descriptor=None):
    i = img.inode(ino)
    ctx = img.get_context(i)
    if ctx is None:
        raise ValueError("inode %d has no encryption context" % ino)
    policy, kid, nonce = Policy.parse(ctx)
    mk = MasterKey(key, descriptor)
    want = mk.descriptor if policy.version == 1 else mk.identifier
    if kid != want:
        raise ValueError("inode %d is encrypted with another key" % ino)
    return InodeKeys(mk, policy, nonce, ino, img.uuid, is_reg)


def decrypt_tree(image, path, key, descriptor=None, max_bytes=None):
    """{rel path: (kind, plaintext content / target / None)} of an encrypted tree; a file
    over max_bytes (a sparse giant) is ("bigfile", its size), not read."""
    out = {}
    with Image(image) as img:
        def keys(ino, is_reg):
            return inode_keys(img, key, ino, is_reg, descriptor)

        def walk(ino, rel):
            i = img.inode(ino)
            k = keys(ino, False)
            for name, cino, ft, _ in img.im.dentries(i):
                if name in (b".", b".."):
                    continue
                plain = k.decrypt_name(name)
                crel = rel + b"/" + plain if rel else plain
                ci = img.inode(cino)
                if ft == 2:
                    out[crel] = ("dir", None)
                    walk(cino, crel)
                elif ft == 1 and max_bytes is not None and ci["size"] > max_bytes:
                    out[crel] = ("bigfile", ci["size"])
                elif ft == 1 and ci["flags"] & f2compress.COMPR_FL:
                    fk = keys(cino, True)
                    data, _ = f2compress.decode_inode(
                        img.im, ci, f2compress.codecs()[0], crel,
                        crypt=lambda lblk, blk: fk.crypt_block(lblk, blk, decrypt=True))
                    out[crel] = ("file", data)
                elif ft == 1:
                    fk = keys(cino, True)
                    data = bytearray()
                    for lblk in range((ci["size"] + BLK - 1) // BLK):
                        addr = img.im.bmap(ci, lblk)
                        blk = bytes(BLK) if addr in (T.NULL_ADDR, T.NEW_ADDR) else \
                            fk.crypt_block(lblk, img.im.block(addr), decrypt=True)
                        data += blk
                    out[crel] = ("file", bytes(data[:ci["size"]]))
                elif ft == 7:
                    lk = keys(cino, False)
                    disk = img.im.read_data(ci)
                    n = struct.unpack_from("<H", disk, 0)[0]
                    out[crel] = ("link", lk.decrypt_name(disk[2:2 + n]))
                else:
                    out[crel] = ("special", None)
        walk(_dir_ino(img, path), b"")
    return out


def check_names(image, path, key, descriptor=None, linked=()):
    """What a kernel relies on in the encrypted tree at path, from the bytes on disk: every
    entry's hash_code (TEA over the ciphertext, or in a casefolded directory the SipHash of the
    folded plaintext under the directory's dirhash key), and the i_name of each child named
    there (the ciphertext, ENC_NAME, in a casefolded directory the hash after it).  Returns a
    list of problems.  linked: inodes that had a second name, whose i_name may be any of
    them (f2fuse keeps the first, the kernel records the latest)."""
    problems = []
    with Image(image) as img:
        def walk(ino, rel):
            i = img.inode(ino)
            k = inode_keys(img, key, ino, False, descriptor)
            casefold = struct.unpack_from("<I", i["raw"], 80)[0] & CASEFOLD_FL
            for name, cino, ft, off in img.im.dentries(i):
                if name in (b".", b".."):
                    continue
                plain = k.decrypt_name(name)
                crel = rel + b"/" + plain if rel else plain
                h = struct.unpack_from("<I", img.im.mm, off)[0]
                want = k.dirhash(plain) if casefold else f2fs_hash(name)
                if h != want:
                    problems.append("%r: hash_code %08x, want %08x" % (crel, h, want))
                ci = img.inode(cino)
                # a hard-linked inode records one of its names (f2fuse: its first)
                if ci["pino"] == ino and ci["namelen"] == len(name) and ci["links"] == 1 and \
                        cino not in linked:
                    raw = ci["raw"]
                    if bytes(ci["name"]) != name:
                        problems.append("%r: i_name is not the entry's ciphertext" % crel)
                    if not raw[2] & FADVISE_ENC_NAME:
                        problems.append("%r: i_advise lacks ENC_NAME" % crel)
                    if casefold and len(name) + 4 <= 255 and \
                            struct.unpack_from("<I", raw, 92 + len(name))[0] != want:
                        problems.append("%r: i_name lacks the hash after the name" % crel)
                if ft == 2:
                    walk(cino, crel)
        walk(_dir_ino(img, path), b"")
    return problems


def nokey_names(image, dir_ino):
    """The names a keyless listing of directory dir_ino shows: {no-key name: child ino}."""
    with Image(image) as img:
        res = {}
        for name, cino, ft, off in img.im.dentries(img.inode(dir_ino)):
            if name in (b".", b".."):
                continue
            h = struct.unpack_from("<I", img.im.mm, off)[0]
            res[nokey_name(h, name)] = cino
        return res


def symlink_raw(image, ino):
    with Image(image) as img:
        return img.im.read_data(img.inode(ino))


# ---------------------------------------------------------------------------------------------
# self-test: known answers for the primitives, round trips for the rest

def selftest():
    # RFC 3962 appendix B: AES-128 CBC-CTS, IV 0 (also crypto/testmgr.h cts_mode_tv_template)
    key = b"chicken teriyaki"
    msg = b"I would like the General Gau's Chicken, please, and wonton soup."
    kat = {17: "c6353568f2bf8cb4d8a580362da7ff7f97",
           31: "fc00783e0efdb2c1d445d4c8eff7ed2297687268d6ecccc0c07b25e25ecfe5",
           32: "39312523a78662d5be7fcbcc98ebf5a897687268d6ecccc0c07b25e25ecfe584",
           47: "97687268d6ecccc0c07b25e25ecfe584b3fffd940c16a18c1b5549d2f838029e"
               "39312523a78662d5be7fcbcc98ebf5",
           48: "97687268d6ecccc0c07b25e25ecfe5849dad8bbb96c4cdc03bc103e1a194bbd8"
               "39312523a78662d5be7fcbcc98ebf5a8",
           64: "97687268d6ecccc0c07b25e25ecfe58439312523a78662d5be7fcbcc98ebf5a8"
               "4807efe836ee89a526730dbc2f7bc8409dad8bbb96c4cdc03bc103e1a194bbd8"}
    for n, hexct in kat.items():
        ct = cts_encrypt(key, bytes(16), msg[:n])
        assert ct.hex() == hexct, "CTS %d: %s" % (n, ct.hex())
        assert cts_decrypt(key, bytes(16), ct) == msg[:n], "CTS decrypt %d" % n
    # IEEE P1619 vector 10: AES-256-XTS, data unit 0xff (crypto/testmgr.h aes_xts_tv_template)
    k = bytes.fromhex("2718281828459045235360287471352662497757247093699959574966967627"
                      "3141592653589793238462643383279502884197169399375105820974944592")
    pt = bytes(range(256)) * 2
    ct = xts(k, struct.pack("<Q", 0xff) + bytes(8), pt)
    assert ct[:32].hex() == "1c3b3a102f770386e4836c99e370cf9bea00803f5e482357a4ae12d414a3e63b", \
        "XTS: %s" % ct[:32].hex()
    # SipHash-2-4 paper, appendix A: key 00..0f, messages 00.. of length 0, 8, 15
    sk = bytes(range(16))
    assert siphash24(sk, b"") == 0x726fdb47dd0e0e31
    assert siphash24(sk, bytes(range(8))) == 0x93f5f5799a932462
    assert siphash24(sk, bytes(range(15))) == 0xa129ca6149be45e5
    # CBC-ESSIV by hand against the library's CBC with the ESSIV IV
    k16, iv0, data = bytes(range(16)), bytes(range(16, 32)), bytes(range(256)) * 2
    c = Cipher(algorithms.AES(k16), modes.CBC(aes_ecb(hashlib.sha256(k16).digest(), iv0)))
    e = c.encryptor()
    assert cbc_essiv(k16, iv0, data) == e.update(data) + e.finalize(), "CBC-ESSIV"
    assert cbc_essiv(k16, iv0, cbc_essiv(k16, iv0, data), True) == data
    # HKDF as fscrypt builds it, two ways
    mk = bytes(range(64))
    for ctx, info in ((1, b""), (2, bytes(16)), (4, b"\x01" + bytes(range(16)))):
        assert hkdf_sha512(mk, ctx, info, 64) == hkdf_sha512_by_hand(mk, ctx, info, 64)
    # base64url against the stdlib's
    import base64
    for n in range(40):
        r = random.Random(n)
        d = bytes(r.getrandbits(8) for _ in range(n))
        assert b64url(d) == base64.urlsafe_b64encode(d).rstrip(b"=")
    # names and blocks round trip, every padding and IV flavour
    r = random.Random(7)
    key = MasterKey(bytes(r.getrandbits(8) for _ in range(64)))
    blk = bytes(r.getrandbits(8) for _ in range(BLK))
    for pol in (Policy(2, 32), Policy(2, 4), Policy(1, 16), Policy(2, 16, FLAG_IV_INO_LBLK_64),
                Policy(2, 8, FLAG_IV_INO_LBLK_32), Policy(2, 32, 0, 9),
                Policy(2, 16, 0, 0, MODE_AES_128_CBC, MODE_AES_128_CTS),
                Policy(1, 32, 0, 0, MODE_AES_128_CBC, MODE_AES_128_CTS)):
        kk = InodeKeys(key, pol, bytes(range(16)), 1234, bytes(16), False)
        for n in (1, 15, 16, 17, 31, 100, 255):
            name = bytes(65 + (j % 26) for j in range(n))
            ct = kk.encrypt_name(name)
            assert len(ct) == kk.ciphertext_len(n) and kk.decrypt_name(ct) == name
        kk = InodeKeys(key, pol, bytes(range(16)), 1234, bytes(16), True)
        assert kk.crypt_block(5, kk.crypt_block(5, blk), decrypt=True) == blk
        assert kk.crypt_block(5, blk) != kk.crypt_block(6, blk)
    print("f2crypt selftest: ok")


def main(argv):
    if len(argv) >= 2 and argv[1] == "selftest":
        selftest()
    elif len(argv) >= 5 and argv[1] == "encrypt":
        pol = Policy(1 if argv[5:] == ["v1"] else 2)
        rec = encrypt_tree(argv[2], argv[3], bytes.fromhex(argv[4]), pol)
        for rel, e in sorted(rec.entries.items()):
            print(e["kind"], e["ino"], rel.decode("utf-8", "replace"))
    elif len(argv) in (5, 6) and argv[1] == "decrypt":
        # kind, SHA-256 of the contents or target ("-" for a directory; the size of a file
        # over MAXBYTES, kind "bigfile"), path as bytes
        max_bytes = int(argv[5]) if len(argv) == 6 else None
        out = sys.stdout.buffer
        for rel, (kind, data) in sorted(decrypt_tree(argv[2], argv[3], bytes.fromhex(argv[4]),
                                                     max_bytes=max_bytes).items()):
            what = str(data) if kind == "bigfile" else \
                hashlib.sha256(data).hexdigest() if data is not None else "-"
            out.write(kind.encode() + b" " + what.encode() + b" " + rel + b"\n")
    elif len(argv) == 4 and argv[1] == "nokey":
        with Image(argv[2]) as img:
            ino = _dir_ino(img, argv[3])
        for n, cino in sorted(nokey_names(argv[2], ino).items()):
            print(n.decode(), cino)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
