#!/usr/bin/env bash
# Read-extent benchmark: what reading through an inode's largest extent (i_ext) saves.
# An image is filled by sload.f2fs with one large file (sload records its largest extent, as
# a kernel does); extent_bench reads it through the library with extent_cache on and off,
# sequentially (1 MiB reads) and at random (4 KiB), each from a fresh open (cold: none of
# the file's nodes cached) and again in the same open (warm).  The two settings alternate
# within each repetition; the table shows medians, the ratio on/off, and what the cold pass
# cost: block reads and cache misses (the node blocks read).
#
#   EXTENT_BENCH_REPS   repetitions (default 5)
#   EXTENT_BENCH_MIB    size of the file (default 768)
#   EXTENT_BENCH_RAND   random reads per pass (default 20000)
#   EXTENT_BENCH_DIR    where the image lives (default build/bench-extent; not tmpfs)
# Writes the table to stdout and bench/results/extent.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

reps=${EXTENT_BENCH_REPS:-5}
mib=${EXTENT_BENCH_MIB:-768}
rand=${EXTENT_BENCH_RAND:-20000}
dir=${EXTENT_BENCH_DIR:-build/bench-extent}
bin=build/bench/extent/extent_bench
out=bench/results/extent.md
img=$dir/extent.img
make -s "$bin"
mkdir -p "$dir/src" "$(dirname "$out")"
trap 'rm -rf "$dir"' EXIT

head -c "${mib}M" /dev/urandom >"$dir/src/big"
truncate -s $(( (mib + 256) * 1024 * 1024 )) "$img"
mkfs.f2fs -q -f "$img" >/dev/null
sload.f2fs -f "$dir/src" -t / "$img" >/dev/null
rm -f "$dir/src/big"
ext=$( (dump.f2fs -i 4 "$img" 2>/dev/null || true) | grep -o 'i_ext: .*' | head -n 1)

results=$(mktemp)
for rep in $(seq "$reps"); do
    for mode in seq rand; do
        count=$([ $mode = seq ] && echo 1 || echo "$rand")
        for ext_on in on off; do
            line=$("$bin" "$img" big $mode $ext_on "$count" "$rep")
            echo "$mode $ext_on $line" >>"$results"
        done
    done
done

python3 - "$results" "$out" "$reps" "$mib" "$rand" "$ext" <<'EOF'
import statistics, sys, time
path, out, reps, mib, rand, ext = sys.argv[1:]
rows = {}
for line in open(path):
    mode, on, *kv = line.split()
    d = dict(x.split("=") for x in kv)
    rows.setdefault((mode, on), []).append({k: float(v) for k, v in d.items()})
med = lambda mode, on, key: statistics.median(r[key] for r in rows[(mode, on)])
lines = ["# Read extent (i_ext) benchmark", "",
         "%s UTC, %s reps (medians), a %s MiB file loaded by sload.f2fs (%s), read through "
         "the library with extent_cache on/off; cold = fresh open, warm = the same pass again."
         % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), reps, mib, ext), "",
         "| workload | extent_cache | noextent_cache | on/off | node reads (cache misses) on / off | blocks via extent |",
         "|---|---:|---:|---:|---:|---:|"]
for mode, unit, key in (("seq", "MB/s", "mbps"), ("rand", "IOPS", "iops")):
    for phase in ("cold", "warm"):
        a, b = med(mode, "on", phase + "_" + key), med(mode, "off", phase + "_" + key)
        lines.append("| %s %s (%s) | %.0f | %.0f | %.2fx | %.0f / %.0f | %.0f |" % (
            "1 MiB sequential" if mode == "seq" else "4 KiB random x %s" % rand, phase, unit, a, b,
            a / b, med(mode, "on", "cache_misses"), med(mode, "off", "cache_misses"),
            med(mode, "on", "extent_hits")))
text = "\n".join(lines) + "\n"
open(out, "w").write(text)
print(text)
EOF
rm -f "$results"
