#!/usr/bin/env python3
"""Quota upkeep benchmark (bench/quota): what keeping the quota files costs the operations
that charge usage, on the same workload on a plain image and on one made with
-O extra_attr,project_quota,quota.

Rows: create (N new files of 4 KiB each: an inode and a block charged per file) and 4k random
writes (4 KiB pwrite at random offsets of a new 256 MiB file: each one reserves a block and,
now and then, a node), each timed to the end of `f2fuse sync` (the checkpoint that writes the
quota files).  Repetitions interleave the two images; the table has medians and the ratio
quota / plain.  Output: stdout and bench/results/quota.md.
  QUOTA_BENCH_FILES  files of the create row (default 100000)
  QUOTA_BENCH_WRITES 4 KiB writes of the write row (default 50000)
  QUOTA_BENCH_REPS   repetitions (default 5)
"""
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "build", "f2fuse")
FILES = int(os.environ.get("QUOTA_BENCH_FILES", "100000"))
WRITES = int(os.environ.get("QUOTA_BENCH_WRITES", "50000"))
REPS = int(os.environ.get("QUOTA_BENCH_REPS", "5"))
VARIANTS = [("plain", []), ("quota", ["-O", "extra_attr,project_quota,quota"])]


def mounted(img, mnt):
    subprocess.run([BIN, "-o", "rw,checkpoint_interval=0", img, mnt], check=True)


def unmount(img, mnt):
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    subprocess.run(["flock", img, "true"], check=True)       # the final checkpoint is done


def one(wd, name, mkfs_args):
    img, mnt = os.path.join(wd, name + ".img"), os.path.join(wd, "mnt")
    os.makedirs(mnt, exist_ok=True)
    with open(img, "wb") as f:
        f.truncate(2 << 30)
    subprocess.run(["mkfs.f2fs", "-q", "-f"] + mkfs_args + [img], check=True)
    mounted(img, mnt)
    block = os.urandom(4096)
    t0 = time.monotonic()
    d = os.path.join(mnt, "files")
    os.mkdir(d)
    for i in range(FILES):
        fd = os.open(os.path.join(d, "f%d" % i), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, block)
        os.close(fd)
    subprocess.run([BIN, "sync", mnt], check=True)
    create = FILES / (time.monotonic() - t0)
    rng = random.Random(1)
    fd = os.open(os.path.join(mnt, "big"), os.O_CREAT | os.O_WRONLY, 0o644)
    t0 = time.monotonic()
    for _ in range(WRITES):
        os.pwrite(fd, block, rng.randrange(65536) * 4096)
    os.close(fd)
    subprocess.run([BIN, "sync", mnt], check=True)
    writes = WRITES / (time.monotonic() - t0)
    unmount(img, mnt)
    fsck = subprocess.run(["fsck.f2fs", "--dry-run", "-f", img], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    if b"[ASSERT]" in fsck.stdout or b"Fixing" in fsck.stdout or fsck.returncode != 0:
        print("%s: fsck.f2fs not clean" % name, file=sys.stderr)
    os.unlink(img)
    return create, writes


def main():
    res = {n: ([], []) for n, _ in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="quota-bench-", dir="/var/tmp") as wd:
        for rep in range(REPS):
            for name, args in (VARIANTS if rep % 2 == 0 else VARIANTS[::-1]):
                c, w = one(wd, name, args)
                res[name][0].append(c)
                res[name][1].append(w)
                print("rep %d %-5s create %.0f/s  4k random writes %.0f/s" % (rep, name, c, w),
                      flush=True)
    rows = ["| row | plain (median/s) | quota (median/s) | quota / plain |", "|---|---|---|---|"]
    for k, label in ((0, "create + 4 KiB, %d files" % FILES), (1, "4 KiB random writes, %d" % WRITES)):
        p, q = statistics.median(res["plain"][k]), statistics.median(res["quota"][k])
        rows.append("| %s | %.0f | %.0f | %.3f |" % (label, p, q, q / p))
    text = "\n".join(rows) + "\n\n%d repetitions, interleaved; each row timed to the end of " \
        "`f2fuse sync`.\n" % REPS
    print(text)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "quota.md"), "w") as f:
        f.write("# bench/quota\n\n" + text)


if __name__ == "__main__":
    main()
