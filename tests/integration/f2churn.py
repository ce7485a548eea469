"""The overwrite ("churn") workload of the segment-cleaning test and benchmark (Python 3 stdlib).

Fill a mounted file system to a fraction of its user space with a seeded mix of file sizes, then
overwrite at random until a multiple of the capacity has been written: partial overwrites of
existing files (a random run of blocks) and replacements (a file deleted, a new one of a random
size created), keeping the fill level.  Every block's content is a function of (file id, block
index, version), so the expected state is a small table and any file can be verified by content.

Used by tests/integration/test_gc and bench/gc.
"""

import hashlib
import os
import time

BLK = 4096
KiB = 1024
MiB = 1 << 20

# (weight, smallest, largest) file sizes in bytes: many small files, some medium, a few large
SIZE_MIX = ((55, 4 * KiB, 64 * KiB), (35, 64 * KiB, 1 * MiB), (10, 1 * MiB, 4 * MiB))


def block_bytes(fid, idx, ver):
    d = hashlib.blake2b(b"%d:%d:%d" % (fid, idx, ver), digest_size=64).digest()
    return d * (BLK // 64)


class Churn:
    """State: files {fid: [size, [version per block]]}; names are f<fid> in subdirectories d<k>."""

    def __init__(self, mnt, rng, capacity, fill, ndirs=8, max_file=None):
        self.mnt, self.rng, self.capacity, self.fill = mnt, rng, capacity, fill
        self.ndirs = ndirs
        self.max_file = max_file or max(s for _, _, s in SIZE_MIX)
        self.files = {}
        self.next_fid = 1
        self.used = 0          # bytes of file data (rounded to blocks)
        self.written = 0       # bytes written by the workload
        self.timeline = []     # (seconds since start, bytes written) after each operation
        self.t0 = time.monotonic()
        self.inflight = set()  # fids the last step touched (power-cut test: uncertain)
        self.last_op = None    # description of the last operation (failure messages)
        for k in range(ndirs):
            os.makedirs(os.path.join(mnt, "d%d" % k), exist_ok=True)

    # -- names and content
    def path(self, fid):
        return os.path.join(self.mnt, "d%d" % (fid % self.ndirs), "f%d" % fid)

    def expected(self, fid):
        size, vers = self.files[fid]
        return b"".join(block_bytes(fid, i, v) for i, v in enumerate(vers))[:size]

    def random_size(self):
        total = sum(w for w, _, _ in SIZE_MIX)
        r = self.rng.randrange(total)
        for w, lo, hi in SIZE_MIX:
            if r < w:
                return min(self.rng.randrange(lo, hi + 1), self.max_file)
            r -= w
        return 4 * KiB

    @staticmethod
    def rounded(size):
        """Space a file of size bytes takes: its blocks, its inode and its direct nodes (the
        fill level counts them, so that many small files cannot push the real use past it)."""
        nblk = (size + BLK - 1) // BLK
        return (nblk + 1 + (nblk + 1017) // 1018) * BLK

    # -- operations
    def _write_blocks(self, fd, fid, first, vers, size, sync):
        buf = b"".join(block_bytes(fid, first + i, v) for i, v in enumerate(vers))
        end = min(size, (first + len(vers)) * BLK)
        buf = buf[:end - first * BLK]
        off = first * BLK
        mv = memoryview(buf)
        while mv:
            n = os.pwrite(fd, mv, off)
            mv, off = mv[n:], off + n
        if sync:
            os.fsync(fd)
        self.written += len(buf)

    def create(self, size, sync=False):
        fid = self.next_fid
        self.next_fid += 1
        self.inflight.add(fid)
        self.last_op = ("create", fid, size)
        nblk = (size + BLK - 1) // BLK
        vers = [0] * nblk
        fd = os.open(self.path(fid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            self.files[fid] = [size, vers]
            self.used += self.rounded(size)
            self._write_blocks(fd, fid, 0, vers, size, sync)
        finally:
            os.close(fd)
        if sync:
            self.sync_dir(fid)
        return fid

    def sync_dir(self, fid):
        fd = os.open(os.path.dirname(self.path(fid)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, fid, sync=False):
        self.inflight.add(fid)
        self.last_op = ("delete", fid)
        os.unlink(self.path(fid))
        size, _ = self.files.pop(fid)
        self.used -= self.rounded(size)
        if sync:
            self.sync_dir(fid)

    def overwrite(self, fid, sync=False):
        self.inflight.add(fid)
        size, vers = self.files[fid]
        nblk = len(vers)
        n = min(nblk, self.rng.choice((1, 1, 2, 4, 8, 16, 64, 256)))
        first = self.rng.randrange(nblk - n + 1)
        new = [vers[first + i] + 1 for i in range(n)]
        self.last_op = ("overwrite", fid, first, n)
        fd = os.open(self.path(fid), os.O_WRONLY)
        try:
            # the model changes first: a failed write leaves the file uncertain (inflight)
            vers[first:first + n] = new
            self._write_blocks(fd, fid, first, new, size, sync)
        finally:
            os.close(fd)

    def fill_up(self, sync=False):
        """Creates files until the fill level is reached."""
        target = int(self.capacity * self.fill)
        while True:
            size = self.random_size()
            if self.used + self.rounded(size) > target:
                size = target - self.used
                if size < BLK:
                    break
            self.inflight = set()
            self.create(size, sync)
        self.mark()

    def step(self, sync=False):
        """One random operation: mostly a partial overwrite, sometimes a replacement."""
        self.inflight = set()
        if self.files and self.rng.random() < 0.75:
            self.overwrite(self.rng.choice(list(self.files)), sync)
        else:
            if self.files:
                self.delete(self.rng.choice(list(self.files)), sync)
            room = int(self.capacity * self.fill) - self.used
            size = min(self.random_size(), room)
            while room >= BLK and size >= BLK:
                self.create(size, sync)
                room = int(self.capacity * self.fill) - self.used
                size = min(self.random_size(), room)
                if self.rng.random() < 0.5:
                    break
        self.mark()

    def mark(self):
        self.timeline.append((time.monotonic() - self.t0, self.written))

    def churn(self, factor, deadline=None, sync=False):
        """Overwrites until factor x capacity more bytes are written (or the deadline passes)."""
        goal = self.written + int(factor * self.capacity)
        while self.written < goal:
            if deadline and time.monotonic() > deadline:
                return False
            self.step(sync)
        return True

    # -- checking
    def describe(self, fid, got):
        """Which version each differing block holds (for failure messages)."""
        size, vers = self.files[fid]
        out = []
        for i, v in enumerate(vers):
            blk = got[i * BLK:(i + 1) * BLK]
            want = block_bytes(fid, i, v)[:len(blk)]
            if blk == want:
                continue
            found = [u for u in range(max(0, v - 3), v + 3) if block_bytes(fid, i, u)[:len(blk)] == blk]
            what = ("v%d" % found[0]) if found else ("zeros" if blk == bytes(len(blk)) else "?")
            out.append("blk %d: %s not v%d" % (i, what, v))
        return "; ".join(out[:6]) + (" (+%d more)" % (len(out) - 6) if len(out) > 6 else "")

    def verify(self, chk, uncertain=(), where=""):
        """Every file has its expected content; names match.  Files in `uncertain` (the operation
        a power cut interrupted) may be absent, or hold any per-block mix of versions."""
        seen = set()
        for k in range(self.ndirs):
            d = os.path.join(self.mnt, "d%d" % k)
            for name in os.listdir(d):
                fid = int(name[1:]) if name.startswith("f") and name[1:].isdigit() else None
                if fid is None or (fid not in self.files and fid not in uncertain):
                    chk.fail("%sunexpected file %s/%s" % (where, d, name))
                    continue
                seen.add(fid)
        for fid in self.files:
            if fid not in seen and fid not in uncertain:
                chk.fail("%sfile %s is missing" % (where, self.path(fid)))
        bad = 0
        for fid in sorted(seen):
            with open(self.path(fid), "rb") as f:
                got = f.read()
            if fid in uncertain:
                continue
            want = self.expected(fid)
            if got != want:
                bad += 1
                if bad <= 8:
                    first = next((i for i in range(min(len(got), len(want)))
                                  if got[i] != want[i]), min(len(got), len(want)))
                    chk.fail("%sfile %s: content differs (size %d, expected %d; first difference "
                             "at byte %d; %s)" % (where, self.path(fid), len(got), len(want), first,
                                                  self.describe(fid, got)))
        chk.check(bad == 0, "%s%d file(s) with wrong content" % (where, bad))
        return len(seen)
