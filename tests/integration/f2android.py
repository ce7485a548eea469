"""Android userdata's features, one at a time and together, for the model tester.

  SETS                    name -> (mkfs -O features, extra mkfs arguments): each feature of the
                          set Android formats userdata with, alone, and "android", all of them
  Special(...)            what such an image holds besides the workload's tree, written by
                          others than f2fuse (so that the model run shows f2fuse leaves it
                          intact while it works beside it):
    .prepare()            before the first mount: compressed files (sload.f2fs of Debian's
                          source built with LZ4, build_f2fs_tools), a verity file (f2verity:
                          Debian's fsverity computes the tree), on an encrypt image the
                          encrypted tree test_model seals itself (f2crypt)
    .after_mount(mnt)     a casefolded directory (chattr +F) with names in several scripts
    .check(mnt)           through a mount: the compressed files read back as written, the
                          verity file measures as `fsverity digest` said and refuses writing,
                          casefolded names are found under other casings and listed as stored;
                          raises Problem naming what differs
The workload itself runs in /w, as always; what this adds lives in /special.
"""
import errno
import hashlib
import os
import random
import subprocess
import unicodedata

import f2test as T
import f2verity as V

HERE = os.path.dirname(os.path.abspath(__file__))
ANDROID = ["encrypt", "extra_attr", "project_quota", "quota", "verity", "casefold",
           "compression"]
SETS = {
    "encrypt": (["encrypt"], ()),
    "quota": (["quota"], ()),
    "project_quota": (["extra_attr", "project_quota", "quota"], ()),
    "verity": (["extra_attr", "verity"], ()),
    "casefold": (["casefold"], ("-C", "utf8")),
    "compression": (["extra_attr", "compression"], ()),
    "android": (ANDROID, ("-C", "utf8")),
}
CASEFOLD_NAMES = ["Readme.TXT", "straße", "ΣΊΣΥΦΟΣ", "Кириллица", "ınfo-İ", "e\u0301cole",
                  "🙂-Emoji"]


class Problem(Exception):
    pass


def _fold(name):
    """Casefolding for the check's own choice of spellings (all of 12.1, no ignorables)."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def _sha(data):
    return hashlib.sha256(data).hexdigest()


class Special:
    def __init__(self, img, wd, features, seed):
        self.img, self.wd = img, wd
        self.features = set(features or [])
        self.rng = random.Random(seed * 1009 + 7)
        self.compressed = {}      # rel path -> sha256
        self.verity = None        # (rel path, digest, data sha256)
        self.casefold = []        # names created in /special/cf
        self.notes = []

    def prepare(self):
        """Writes /special into the mkfs'ed image; returns the lines to log."""
        src = os.path.join(self.wd, "special-src")
        root = os.path.join(src, "special")
        os.makedirs(os.path.join(root, "compr"))
        sload = ["sload.f2fs", "-P"]
        if "compression" in self.features:
            p = subprocess.run([os.path.join(HERE, "build_f2fs_tools")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=900)
            if p.returncode == 0:
                tools = p.stdout.decode().strip()
                sload = [os.path.join(tools, "sbin", "sload.f2fs"), "-P", "-c", "-a", "lz4",
                         "-i", "txt"]
                words = [b"android ", b"userdata ", b"f2fs ", b"cluster\n"]
                for k in range(3):
                    data = b"".join(self.rng.choice(words) for _ in range(20000 + 9000 * k))
                    rel = "special/compr/log%d.txt" % k
                    with open(os.path.join(src, rel), "wb") as f:
                        f.write(data)
                    self.compressed[rel] = _sha(data)
            else:
                self.notes.append("no compressed files: %s" % p.stderr.decode().strip()[-200:])
        if "verity" in self.features:
            data = self.rng.randbytes(150 * 1024 + 333)
            content, digest, desc_pos, desc_size, _ = V.composite(data)
            with open(os.path.join(root, "verity.bin"), "wb") as f:
                f.write(content)
            self.verity = ("special/verity.bin", digest, _sha(data), len(data), desc_pos,
                           desc_size)
        with open(os.path.join(root, "plain.bin"), "wb") as f:
            f.write(self.rng.randbytes(20000))
        rc, out = T.run_tool(sload + ["-f", src, "-t", "/", self.img], timeout=600, check=False)
        if rc != 0 and not (rc == 1 and "[ASSERT]" in out):
            raise Problem("sload of /special failed (exit %d): %s" % (rc, T.tail(out, 5)))
        if self.verity:
            rel, _, _, size, pos, dsize = self.verity
            V.patch(self.img, "/" + rel, size, pos, dsize)
        with T.F2fsImage(self.img) as im:
            for rel in self.compressed:
                if not im.inode(im.lookup("/" + rel))["flags"] & T.COMPR_FL:
                    raise Problem("sload did not compress %s" % rel)
        parts = (["%d compressed files" % len(self.compressed)] if self.compressed else []) + \
            (["a verity file"] if self.verity else []) + \
            (["a casefolded directory (at the first mount)"] if "casefold" in self.features
             else []) + self.notes
        return ["/special: " + (", ".join(parts) or "a plain file")]

    def after_mount(self, mnt):
        if "casefold" not in self.features:
            return
        d = os.path.join(mnt, "special", "cf")
        os.mkdir(d)
        p = subprocess.run(["chattr", "+F", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            raise Problem("chattr +F /special/cf: %s" % p.stdout.decode().strip())
        for name in CASEFOLD_NAMES:
            with open(os.path.join(d, name), "wb") as f:
                f.write(name.encode())
            self.casefold.append(name)

    def check(self, mnt):
        for rel, sha in self.compressed.items():
            with open(os.path.join(mnt, rel), "rb") as f:
                if _sha(f.read()) != sha:
                    raise Problem("compressed file /%s reads back changed" % rel)
        if self.verity:
            rel, digest, sha, _, _, _ = self.verity
            path = os.path.join(mnt, rel)
            with open(path, "rb") as f:
                if _sha(f.read()) != sha:
                    raise Problem("verity file /%s reads back changed" % rel)
            p = subprocess.run(["fsverity", "measure", path], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            if p.returncode != 0 or digest not in p.stdout.decode():
                raise Problem("verity file /%s measures %r, expected %s" %
                              (rel, p.stdout.decode().strip(), digest))
            try:
                os.close(os.open(path, os.O_WRONLY))
                raise Problem("verity file /%s opened for writing" % rel)
            except OSError as e:
                if e.errno != errno.EPERM:
                    raise Problem("verity file /%s: open for writing gave %s" %
                                  (rel, errno.errorcode.get(e.errno)))
        if self.casefold:
            d = os.path.join(mnt, "special", "cf")
            listed = sorted(os.listdir(d))
            if listed != sorted(self.casefold):
                raise Problem("casefolded directory lists %r, expected %r" %
                              (listed, sorted(self.casefold)))
            for name in self.casefold:
                for other in (name.upper(), name.lower(), name.swapcase()):
                    if _fold(other) != _fold(name):
                        continue           # e.g. "ı".upper() is "I", which folds to "i"
                    try:
                        with open(os.path.join(d, other), "rb") as f:
                            if f.read() != name.encode():
                                raise Problem("casefolded %r opened as %r reads wrong" %
                                              (name, other))
                    except FileNotFoundError:
                        raise Problem("casefolded name %r not found as %r" % (name, other))
