#!/usr/bin/env bash
# Segment-cleaning benchmark: the overwrite workload of tests/integration/test_gc at 50%, 80%
# and 90% fill, 90% again with -o nossr (GC without slack space reuse), and the 90% workload on
# an 8x larger image ("empty": no GC needed) as the baseline; throughput over time and write
# amplification; table in bench/results/gc.md, plot in bench/results/gc.png
# (python3-matplotlib).  See gc_bench.py.
#   GC_BENCH_IMG_MIB  image size (default 256)
#   GC_BENCH_FACTOR   capacity multiples overwritten per run (default 5)
#   GC_BENCH_REPS     repetitions, interleaved (default 3)
#   GC_BENCH_OPTS     mount options (default rw,cache_size=16M)
#   GC_BENCH_FILLS    levels, comma-separated: empty, <percent>, <percent>nossr
#                     (default empty,50,80,90,90nossr); e.g. 90,95,99 near full
#   GC_BENCH_BIN      binary, or several as label=path,label=path run interleaved with a
#                     ratio to the first (default build/f2fuse)
#   GC_BENCH_MAX_SECS end a run's timed phase after this many seconds (default 0: none)
#   QUICK=1           128 MiB, 1 repetition
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${QUICK:-0}" = 1 ]; then
    : "${GC_BENCH_IMG_MIB:=128}" "${GC_BENCH_REPS:=1}"
    export GC_BENCH_IMG_MIB GC_BENCH_REPS
fi
for tool in mkfs.f2fs fsck.f2fs fusermount3; do
    command -v $tool >/dev/null || { echo "gc bench: $tool is missing" >&2; exit 1; }
done
make -s build/f2fuse
# The system python carries Debian's matplotlib; a python3 earlier on PATH may not.
py=python3
if ! $py -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then
    py=/usr/bin/python3
fi
exec "$py" bench/gc/gc_bench.py "$@"
