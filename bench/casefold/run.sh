#!/usr/bin/env bash
# Casefold benchmark: create, stat and unlink of CF_BENCH_FILES files (100 bytes each) in one
# directory through the FUSE mount, the directory casefolded (chattr +F) or not, on the same
# kind of image (mkfs.f2fs -O casefold -C utf8, 2 GiB sparse, fresh for every run), the two
# interleaved, CF_BENCH_REPS times each, with bench/fio's meta_load (one thread).  The
# kernel's caches are dropped before the stat and unlink phases, so that every name reaches
# f2fuse in both directories (a casefolded directory's names are revalidated at every use
# anyway: docs/ARCHITECTURE.md, "Casefold").  The table shows medians and the ratio.
#
#   CF_BENCH_FILES  files per run (default 100000)
#   CF_BENCH_REPS   repetitions per configuration (default 3)
#   CF_BENCH_DIR    where images and mount points live (default build/bench-casefold;
#                   not tmpfs: f2fuse opens the image O_DIRECT)
#   QUICK=1         smoke test: 10000 files, 1 repetition
# Writes the table to stdout and bench/results/casefold.md.  Needs root (drop_caches).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${QUICK:-0}" = 1 ]; then
    : "${CF_BENCH_FILES:=10000}" "${CF_BENCH_REPS:=1}"
fi
files=${CF_BENCH_FILES:-100000}
reps=${CF_BENCH_REPS:-3}
dir=${CF_BENCH_DIR:-build/bench-casefold}
bin=$PWD/build/f2fuse
load=$PWD/build/bench/fio/meta_load
[ -x "$bin" ] && [ -x "$load" ] || { echo "bench/casefold: run make first" >&2; exit 1; }
mkdir -p "$dir" bench/results
raw="$dir/raw.txt"
: >"$raw"

one_run() { # $1 = plain|casefold, $2 = repetition
    local img="$dir/img" mnt="$dir/mnt"
    rm -f "$img"
    truncate -s 2G "$img"
    mkfs.f2fs -q -f -O casefold -C utf8 "$img" >/dev/null
    mkdir -p "$mnt"
    "$bin" -o rw "$img" "$mnt"
    mkdir "$mnt/top"
    [ "$1" = casefold ] && chattr +F "$mnt/top"
    for phase in create stat unlink; do
        [ "$phase" = create ] || { sync; echo 2 >/proc/sys/vm/drop_caches; }
        "$load" "$phase" "$mnt/top" "$files" 1 1 | sed "s/^/mode=$1 rep=$2 /" >>"$raw"
    done
    fusermount3 -u "$mnt"
    flock "$img" true
}

for rep in $(seq 1 "$reps"); do
    for mode in plain casefold; do
        one_run "$mode" "$rep"
    done
done

python3 - "$raw" "$files" "$reps" <<'PY' | tee bench/results/casefold.md
import re, statistics, sys
raw, files, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = {}
for line in open(raw):
    kv = dict(x.split("=", 1) for x in line.split())
    runs.setdefault((kv["phase"], kv["mode"]), []).append(float(kv["seconds"]))
print("# casefold: %d files in one directory, one thread, median of %d runs\n" % (files, reps))
print("| phase | plain ops/s | casefolded ops/s | casefolded / plain |")
print("|---|---|---|---|")
for phase in ("create", "stat", "unlink"):
    p = statistics.median(runs[(phase, "plain")])
    c = statistics.median(runs[(phase, "casefold")])
    print("| %s | %.0f | %.0f | %.3f |" % (phase, files / p, files / c, p / c))
PY
