#!/usr/bin/env bash
# End-to-end benchmark (issue #8, the table of the loop driver's direct-I/O-via-AIO post): fio
# and metadata workloads inside mounted file systems — f2fuse backend=uring (O_DIRECT image;
# also with writeback_cache) and backend=psync (buffered), fuse2fs, kernel ext4 on a loop
# device with direct-io off and on — and the FUSE ceiling:
# memfs (bench/fio/memfs.c), a minimal in-memory FUSE file system with f2fuse's dispatch.
#
# fio rows (buffered, as in that post): psync 16 jobs 4 KiB randread/read/randwrite/write,
# 128 KiB read/write, and 4 jobs io_uring QD32 4 KiB randread/randwrite.  Metadata rows:
# create, stat, unlink of many small files in 16 directories from 4 threads
# (build/bench/fio/meta_load), untar of a source tree, create+4 KiB+fsync from 4 threads.
# All configurations stay mounted; runs are interleaved (repetition > workload >
# configuration), with sync + drop_caches before each; medians.
#
#   QUICK=1                 smoke run (~3 min): 1 repetition, 2 s runs, 16 x 8 MiB files,
#                           5,000 metadata files, a small tarball
#   FIO_BENCH_SECONDS       seconds per fio run (default 3)        full run: ~30 min
#   FIO_BENCH_REPS          repetitions (default 3)
#   FIO_BENCH_JOB_MIB       file size per fio job (default 32; 16 jobs)
#   FIO_BENCH_IMAGE_MIB     image size for every configuration (default 4096, sparse)
#   FIO_BENCH_META_FILES    files in the create/stat/unlink rows (default 100000)
#   FIO_BENCH_FSYNC_FILES   files in the fsync row (default 2000)
#   FIO_BENCH_TAR_SRC       directories packed into the untar row's tarball
#   FIO_BENCH_CONFIGS       comma list: memfs,f2fuse-uring,memfs-ring,f2fuse-uring-ring,
#                           memfs-wbc,f2fuse-uring-wbc,f2fuse-psync,fuse2fs,ext4-loop,
#                           ext4-loop-dio, f2fuse-baseline (the -wbc pair: writeback_cache on; they skip the
#                           metadata rows unless FIO_BENCH_WBC_META=1; the -ring pair: FUSE
#                           over io_uring, -o fuse_ring, with the fuse module's enable_uring
#                           set on for the run and restored after)
#   FIO_BENCH_RING_THREADS  threads per kernel queue of the -ring pair (default 16)
#   FIO_BENCH_ROWS          comma list of row keys (randread,read,read128k,uring-randread,
#                           randwrite,uring-randwrite,write,write128k,create,stat,unlink,untar,fsync)
#   FIO_BENCH_F2FUSE_OPTS   extra f2fuse -o options (e.g. writeback_cache=off)
#   FIO_BENCH_MEMFS_OPTS    memfs -o options (writeback_cache)
#   FIO_BENCH_DIR           where images and mount points go (default build/; not tmpfs);
#                           it needs free space for every image (checked before the run)
#   FIO_BENCH_BASELINE_BIN  another f2fuse binary (say, a build of the last commit) measured in
#                           the same run as configuration f2fuse-baseline (backend=uring and
#                           FIO_BENCH_F2FUSE_OPTS): an A/B of a change
# Writes bench/results/fio.md (table), fio.png (chart), fio.json (every run).  Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build/f2fuse build/bench/fio/memfs build/bench/fio/meta_load
exec /usr/bin/python3 bench/fio/fio_bench.py
