"""A model of the kernel's casefolding of f2fs names (fs/unicode, UTF-8 12.1 "nfdicf"), for
test_casefold.  Python 3 stdlib only, run under Debian's /usr/bin/python3: its unicodedata is
Unicode 14.0.0 (the test checks the version).  The kernel's table is Unicode 12.1, so
code points Unicode assigned after 12.1 are cut by their age, read from Debian's
unicode-data (/usr/share/unicode/DerivedAge.txt, with DerivedCoreProperties.txt for
Default_Ignorable_Code_Point, which unicodedata does not expose).

What the model says (docs/FORMAT.md, "Casefolded directories"):
  fold(name)        the bytes a kernel hashes and compares, or None when it cannot fold the
                    name (not UTF-8 as its table reads it, or a fold of 255 bytes or more)
  entry_hash(name)  the hash_code a kernel since 5.8 (and f2fuse) gives a new entry
  tools_hash(name)  what fsck.f2fs 1.15 expects instead (it folds into a 4 KiB buffer and
                    gives a fold of "." or ".." the hash 0, as kernels before 5.8 did)
  tea(data)         the f2fs TEA name hash
The model is written from the Unicode data and the kernel's documented behaviour, not from
f2fuse's C code; the two agree only if both are right (fsck is the third opinion).
"""
import unicodedata

UCD = "/usr/share/unicode"
UNICODE_VERSION = "14.0.0"
NAME_LEN = 255

_AGE = None     # bytearray: 0 unassigned, 1 assigned by 12.1, 2 assigned later
_IGNORABLE = None


def _ranges(path, want=None):
    """(first, last, value) of a UCD property file's data lines."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            cps, value = [x.strip() for x in line.split(";")[:2]]
            if want is not None and value != want:
                continue
            a, _, b = cps.partition("..")
            yield int(a, 16), int(b or a, 16), value


def load():
    """Reads the age and ignorable tables once (raises OSError without unicode-data)."""
    global _AGE, _IGNORABLE
    if _AGE is not None:
        return
    age = bytearray(0x110000)
    for a, b, v in _ranges(UCD + "/DerivedAge.txt"):
        major, minor = (int(x) for x in v.split(".")[:2])
        age[a:b + 1] = bytes([1 if (major, minor) <= (12, 1) else 2]) * (b + 1 - a)
    ign = bytearray(0x110000)
    for a, b, _ in _ranges(UCD + "/DerivedCoreProperties.txt", "Default_Ignorable_Code_Point"):
        ign[a:b + 1] = b"\x01" * (b + 1 - a)
    _AGE, _IGNORABLE = age, ign


def age_class(cp):
    load()
    return _AGE[cp]


def ignorable(cp):
    load()
    return _IGNORABLE[cp] == 1


def replacement(cp):
    """The kernel table's code points for cp (assigned by 12.1): full case folding if it
    changes cp, else the canonical decomposition, each part replaced again; nothing for a
    Default_Ignorable code point."""
    if ignorable(cp):
        return []
    c = chr(cp)
    parts = c.casefold()
    if parts == c:
        parts = unicodedata.normalize("NFD", c)
        if parts == c:
            return [cp]
    out = []
    for p in parts:
        out += replacement(ord(p))
    return out


# units: ("c", cp, ccc) a character, ("b", byte) a stray continuation byte, ("i",) an ignorable
def _units(cp, keep_ignorables=False):
    if cp < 0x80:
        return [("c", cp + 32 if 0x41 <= cp <= 0x5A else cp, 0)]
    a = age_class(cp)
    if keep_ignorables and ignorable(cp):
        return [("c", cp, 0)]
    if a != 2 and ignorable(cp):        # reserved ignorables too, but not ones assigned later
        return [("i",)]
    if a != 1:                          # the 12.1 table has no data: itself, a starter
        return [("c", cp, 0)]
    return [("c", x, unicodedata.combining(chr(x))) for x in replacement(cp)]


def _decode(data, i, n):
    """(code point, length) of the character at data[i] as the kernel's table accepts it
    (shortest form, no surrogates, at most U+10FFFF), or None."""
    b = data[i]
    if b < 0x80:
        return b, 1
    if 0xC2 <= b <= 0xDF:
        ln, cp, lo, hi = 2, b & 0x1F, 0x80, 0xBF
    elif 0xE0 <= b <= 0xEF:
        ln, cp = 3, b & 0x0F
        lo, hi = (0xA0 if b == 0xE0 else 0x80), (0x9F if b == 0xED else 0xBF)
    elif 0xF0 <= b <= 0xF4:
        ln, cp = 4, b & 0x07
        lo, hi = (0x90 if b == 0xF0 else 0x80), (0x8F if b == 0xF4 else 0xBF)
    else:
        return None
    if n - i < ln or not lo <= data[i + 1] <= hi:
        return None
    for k in range(1, ln):
        if data[i + k] & 0xC0 != 0x80:
            return None
        cp = cp << 6 | (data[i + k] & 0x3F)
    return cp, ln


def _emit(out, u):
    if u[0] == "b":
        out.append(u[1])
    else:
        out += chr(u[1]).encode("utf-8", "surrogatepass")


def fold(name, limit=NAME_LEN - 1, keep_ignorables=False):
    """The kernel's folded bytes of name, or None when it cannot fold it.  A NUL ends the
    name; a byte 0x80-0xBF where a character should start is passed through (once per pass
    over a run of combining marks, as the kernel's reader does); combining marks between two
    starters come out by ascending class, an ignorable counting as a starter.
    keep_ignorables: as kernels from 6.12 to 6.13-rc2 folded (ignorables kept as they are)."""
    name = bytes(name)
    n = name.find(b"\0")
    n = len(name) if n < 0 else n
    if n and name[0] & 0xC0 == 0x80:
        return None
    units, i = [], 0
    while i < n:
        if name[i] & 0xC0 == 0x80:
            units.append(("b", name[i]))
            i += 1
            continue
        d = _decode(name, i, n)
        if d is None:
            return None
        units += _units(d[0], keep_ignorables)
        i += d[1]
    out = bytearray()
    i = 0
    while i < len(units):
        u = units[i]
        if u[0] == "i":
            i += 1
        elif u[0] == "b" or u[2] == 0:
            _emit(out, u)
            i += 1
        else:
            end = i + 1
            while end < len(units) and not (units[end][0] == "i" or
                                            (units[end][0] == "c" and units[end][2] == 0)):
                end += 1
            run = units[i:end]
            for v in run[1:]:
                if v[0] == "b":
                    _emit(out, v)
            for cls in sorted({v[2] for v in run if v[0] == "c"}):
                for v in run:
                    if v[0] == "b" or v[2] == cls:
                        _emit(out, v)
            i = end
    return bytes(out) if len(out) <= limit else None


def _words(msg, length):
    pad = (length | length << 8) & 0xFFFFFFFF
    pad |= (pad << 16) & 0xFFFFFFFF
    out, val = [], pad
    take = min(length, 16)
    for i in range(take):
        if i % 4 == 0:
            val = pad
        val = (msg[i] + (val << 8)) & 0xFFFFFFFF
        if i % 4 == 3:
            out.append(val)
            val = pad
    if len(out) < 4 and take % 4:
        out.append(val)
    while len(out) < 4:
        out.append(pad)
    return out


def tea(data):
    """f2fs's TEA name hash of data (no special case for "." and "..")."""
    M = 0xFFFFFFFF
    buf = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476]
    p, length = 0, len(data)
    while True:
        w = _words(data[p:p + 16], length)
        s, b0, b1 = 0, buf[0], buf[1]
        for _ in range(16):
            s = (s + 0x9E3779B9) & M
            b0 = (b0 + ((((b1 << 4) + w[0]) & M) ^ ((b1 + s) & M) ^ (((b1 >> 5) + w[1]) & M))) & M
            b1 = (b1 + ((((b0 << 4) + w[2]) & M) ^ ((b0 + s) & M) ^ (((b0 >> 5) + w[3]) & M))) & M
        buf[0] = (buf[0] + b0) & M
        buf[1] = (buf[1] + b1) & M
        p += 16
        if length <= 16:
            break
        length -= 16
    return buf[0]


def is_dots(name):
    return name in (b".", b"..")


def plain_hash(name):
    return 0 if is_dots(name) else tea(name)


def entry_hash(name, casefolded=True):
    """The hash_code of name's entry as kernels since 5.8 and f2fuse write it."""
    if not casefolded or is_dots(name):
        return plain_hash(name)
    f = fold(name)
    return tea(f) if f else tea(name)


def tools_hash(name, casefolded=True):
    """What fsck.f2fs 1.15 expects (f2fs_dentry_hash): the fold into a 4 KiB buffer, "."
    and ".." (also as folds) hash to 0, an empty fold hashes as empty."""
    if not casefolded:
        return plain_hash(name)
    f = fold(name, limit=4095)
    data = name if f is None else f
    return plain_hash(data)


def matches(lookup, stored, strict=False):
    """Whether a lookup of `lookup` finds the entry stored as `stored` in a casefolded
    directory (f2fs_match_name/generic_ci_match): by folded form when lookup folds, by bytes
    when it does not (non-strict; strict refuses such a lookup before)."""
    f = fold(lookup)
    if f:
        return fold(stored) == f
    return lookup == stored
