#!/usr/bin/env bash
# Read-extent benchmark: what reading through an inode's largest extent (i_ext) saves.
# Two layouts of one large file: loaded by sload.f2fs (which records its largest extent, as a
# kernel does), and written in order through f2fuse itself.  extent_bench reads it through
# the library with extent_cache on and off,
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

sizeb=$(( (mib + 256) * 1024 * 1024 ))
head -c "${mib}M" /dev/urandom >"$dir/src/big"
truncate -s $sizeb "$img.sload"
mkfs.f2fs -q -f "$img.sload" >/dev/null
sload.f2fs -f "$dir/src" -t / "$img.sload" >/dev/null
rm -f "$dir/src/big"
truncate -s $sizeb "$img.f2fuse"
mkfs.f2fs -q -f "$img.f2fuse" >/dev/null
"$bin" write "$img.f2fuse" big "$mib"
extent_of() { (dump.f2fs -i 4 "$1" 2>/dev/null || true) | grep -o 'i_ext: .*' | head -n 1; }
ext_sload=$(extent_of "$img.sload")
ext_f2fuse=$(extent_of "$img.f2fuse")

results=$(mktemp)
for rep in $(seq "$reps"); do
    for layout in sload f2fuse; do
        for mode in seq rand; do
            count=$([ $mode = seq ] && echo 1 || echo "$rand")
            for ext_on in on off; do
                line=$("$bin" "$img.$layout" big $mode $ext_on "$count" "$rep")
                echo "$layout $mode $ext_on $line" >>"$results"
            done
        done
    done
done

python3 - "$results" "$out" "$reps" "$mib" "$rand" "$ext_sload" "$ext_f2fuse" <<'EOF'
import statistics, sys, time
path, out, reps, mib, rand, ext_sload, ext_f2fuse = sys.argv[1:]
rows = {}
for line in open(path):
    layout, mode, on, *kv = line.split()
    d = dict(x.split("=") for x in kv)
    rows.setdefault((layout, mode, on), []).append({k: float(v) for k, v in d.items()})
lines = ["# Read extent (i_ext) benchmark", "",
         "%s UTC, %s reps (medians), a %s MiB file loaded by sload.f2fs (%s) or written in "
         "order through f2fuse (%s), read through the library with extent_cache on/off; "
         "cold = fresh open, warm = the same pass again in that open."
         % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), reps, mib, ext_sload, ext_f2fuse), "",
         "| layout | workload | extent_cache | noextent_cache | on/off | CPU us/op on / off | node reads (cache misses) on / off | blocks via extent |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
for layout in ("sload", "f2fuse"):
  med = lambda mode, on, key: statistics.median(r[key] for r in rows[(layout, mode, on)])
  for mode, unit, key in (("seq", "MB/s", "mbps"), ("rand", "IOPS", "iops")):
    for phase in ("cold", "warm"):
        a, b = med(mode, "on", phase + "_" + key), med(mode, "off", phase + "_" + key)
        lines.append("| %s | %s %s (%s) | %.0f | %.0f | %.2fx | %.1f / %.1f | %.0f / %.0f | %.0f |" % (
            layout, "1 MiB sequential" if mode == "seq" else "4 KiB random x %s" % rand, phase, unit, a, b,
            a / b, med(mode, "on", phase + "_cpu_us_per_op"), med(mode, "off", phase + "_cpu_us_per_op"),
            med(mode, "on", "cache_misses"), med(mode, "off", "cache_misses"),
            med(mode, "on", "extent_hits")))
text = "\n".join(lines) + "\n"
open(out, "w").write(text)
print(text)
EOF
rm -f "$results"
