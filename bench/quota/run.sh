#!/usr/bin/env bash
# Quota upkeep: create and 4 KiB random-write rows on a plain image and on a
# -O extra_attr,project_quota,quota one, interleaved, medians and the ratio (quota_bench.py;
# table in bench/results/quota.md).  QUICK=1: 20,000 files, 20,000 writes, 3 repetitions.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${QUICK:-0}" = 1 ]; then
    : "${QUOTA_BENCH_FILES:=20000}" "${QUOTA_BENCH_WRITES:=20000}" "${QUOTA_BENCH_REPS:=3}"
    export QUOTA_BENCH_FILES QUOTA_BENCH_WRITES QUOTA_BENCH_REPS
fi
for tool in mkfs.f2fs fsck.f2fs fusermount3 flock; do
    command -v $tool >/dev/null || { echo "quota bench: $tool is missing" >&2; exit 1; }
done
make -s build/f2fuse
exec python3 bench/quota/quota_bench.py "$@"
