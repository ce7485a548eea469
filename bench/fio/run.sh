#!/usr/bin/env bash
# End-to-end benchmark (issue #8, the table of the loop driver's direct-I/O-via-AIO post; issue
# #25, warm and cold): fio and metadata workloads inside mounted file systems — f2fuse
# backend=uring (O_DIRECT image; also with writeback_cache, and in a 512M memory cgroup) and
# backend=psync (buffered), fuse2fs, kernel ext4 on a loop device with direct-io off and on —
# and the FUSE ceiling: memfs (bench/fio/memfs.c), a minimal in-memory FUSE file system with
# f2fuse's dispatch and kernel-side setup.
#
# fio rows (buffered, as in that post): psync 16 jobs 4 KiB randread/read, 128 KiB read and
# 4 jobs io_uring QD32 4 KiB randread, each cold (caches dropped, fio invalidate=1) and warm
# (the files read once, then measured with nothing dropped, invalidate=0); 4 KiB randwrite,
# write, 128 KiB write, io_uring QD32 randwrite.  Other rows, in order: read-after-write
# (RAW_MIB written with 1 MiB writes, read back at once with 128 KiB reads), create, stat
# (cold) and stat-attr (only names and inodes dropped, drop_caches=2: a LOOKUP per file, as
# after the attribute timeout) and unlink of many small files in 16 directories from 4
# threads (build/bench/fio/meta_load), untar of a source tree, create+4 KiB+fsync from 4
# threads, and the source tree as a developer uses one: cp -a TREE_SRC, read every file
# right after, read all again, rm -rf (nothing dropped).  All configurations stay mounted;
# runs are interleaved (repetition > workload > configuration); medians.  At the end, the
# memory cgroup curve: f2fuse's stat rate over CURVE_FILES files with its daemon in cgroups
# of growing limits (OOM kills counted).
#
# The full run (the figures bench/RESULTS.md quotes), on a quiet machine (~2-3 h: 1,000,000
# files per metadata row on every configuration):
#     BENCH=fio make bench          (or: bench/fio/run.sh; needs root)
#   QUICK=1                 smoke run (~5 min): 1 repetition, 2 s runs, 16 x 8 MiB files,
#                           5,000 metadata files, /usr/include/linux as the tree, 256 MiB
#                           read-after-write, a 20,000-file curve at 64..512M
#   FIO_BENCH_SECONDS       seconds per fio run (default 3)
#   FIO_BENCH_REPS          repetitions (default 3)
#   FIO_BENCH_JOB_MIB       file size per fio job (default 32; 16 jobs)
#   FIO_BENCH_IMAGE_MIB     image size for every configuration (default: room for the metadata
#                           rows' files, 7.7 GiB for 1,000,000; sparse)
#   FIO_BENCH_META_FILES    files in the create/stat/stat-attr/unlink rows (default 1000000)
#   FIO_BENCH_FSYNC_FILES   files in the fsync row (default 2000)
#   FIO_BENCH_TAR_SRC       directories packed into the untar row's tarball
#   FIO_BENCH_TREE_SRC      the source tree rows' directory (default /usr/include)
#   FIO_BENCH_RAW_MIB       read-after-write: MiB written and read back (default 1024)
#   FIO_BENCH_CG_MIB        the memory cgroup configuration's limit (default 512)
#   FIO_BENCH_CURVE=0       no cgroup curve; FIO_BENCH_CURVE_MIB (limits, 0 = none; default
#                           256,512,1024,2048,4096,0), FIO_BENCH_CURVE_FILES (default 1000000);
#                           `bench/fio/run.sh --cgroup-curve` runs the curve alone
#   FIO_BENCH_CONFIGS       comma list: memfs,f2fuse-uring,memfs-ring,f2fuse-uring-ring,
#                           memfs-wbc,f2fuse-uring-wbc,f2fuse-psync,f2fuse-cg512,fuse2fs,
#                           ext4-loop,ext4-loop-dio, f2fuse-baseline (the -wbc pair: writeback_cache on; they skip the
#                           metadata rows unless FIO_BENCH_WBC_META=1; the -ring pair: FUSE
#                           over io_uring, -o fuse_ring, with the fuse module's enable_uring
#                           set on for the run and restored after)
#   FIO_BENCH_RING_THREADS  threads per kernel queue of the -ring pair (default 16)
#   FIO_BENCH_ROWS          comma list of row keys (randread,randread-warm,read,read-warm,
#                           read128k,read128k-warm,uring-randread,uring-randread-warm,randwrite,
#                           uring-randwrite,write,write128k,raw,create,stat,stat-attr,unlink,
#                           untar,fsync,tree-cp,tree-read,tree-reread,tree-rm; stat needs
#                           create, the tree rows tree-cp first)
#   FIO_BENCH_F2FUSE_OPTS   extra f2fuse -o options (e.g. writeback_cache=off)
#   FIO_BENCH_MEMFS_OPTS    memfs -o options (writeback_cache)
#   FIO_BENCH_DIR           where images and mount points go (default build/; not tmpfs);
#                           it needs free space for every image (checked before the run)
#   FIO_BENCH_BASELINE_BIN  another f2fuse binary (say, a build of the last commit) measured in
#                           the same run as configuration f2fuse-baseline (backend=uring and
#                           FIO_BENCH_F2FUSE_OPTS): an A/B of a change
# Writes bench/results/fio.md (table), fio.png (chart), fio.json (every run), fio-cgroup.md
# and fio-cgroup.png (the curve).  Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build/f2fuse build/bench/fio/memfs build/bench/fio/meta_load
exec /usr/bin/python3 bench/fio/fio_bench.py "$@"
