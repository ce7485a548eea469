#!/usr/bin/env bash
# NBD benchmark: f2fuse over an nbdkit export (file plugin, unix socket) next to f2fuse on the
# same image file and next to fio's own nbd engine on a raw export (the ceiling), with 0, 1 and
# 5 ms of added latency (nbdkit's delay filter).  4 KiB random read/write and 128 KiB
# sequential read/write, fio io_uring O_DIRECT at QD32.  Details: bench/nbd/nbd_bench.py.
#
#   NBD_BENCH_REPS      interleaved repetitions (default 3; the table shows medians)
#   NBD_BENCH_SECS      seconds per fio run (default 8)
#   NBD_BENCH_QD        queue depth (default 32)
#   NBD_BENCH_DELAYS    added latencies in ms, comma-separated (default 0,1,5)
#   NBD_BENCH_FILE_MIB  size of the file read and written (default 256)
#   NBD_BENCH_OPTS      extra f2fuse -o options (connections=4, queue_depth=...)
#   NBD_BENCH_BASELINE_BIN  another f2fuse binary (say, a build of the last commit) measured
#                       on the same export in the same interleaved runs, as a column of its own
#   NBD_BENCH_ROWS      workloads, comma-separated (randread,randwrite,read128k,write128k)
#   NBD_BENCH_CONFIGS   columns to run (memfs,f2fuse file,f2fuse nbd,fio nbd)
#   QUICK=1             one repetition, no added latency, 4 s runs
# Writes bench/results/nbd.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/f2fuse ] || make -j2 >/dev/null
exec python3 bench/nbd/nbd_bench.py
