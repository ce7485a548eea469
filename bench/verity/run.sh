#!/usr/bin/env bash
# fs-verity read benchmark: what verifying every block against the Merkle tree costs.
# One image holds the same random file twice, one copy made a verity file by `fsverity
# enable` through the mount (SHA-256, 4 KiB blocks).  fio reads each with O_DIRECT (every
# read reaches the daemon: the kernel's page cache is out of the picture): sequential 1 MiB
# reads of the whole file (one at a time: the hashing is serial), and 4 KiB random reads;
# and buffered sequential reads (the page cache dropped first: the kernel's read-ahead keeps
# several 1 MiB READs in flight, hashed by libfuse's workers side by side).  "cold" = the first pass after a fresh
# mount (no tree block in f2fuse's cache), "warm" = the same pass again in that mount (tree
# blocks cached and verified: only data blocks are hashed).  Files and phases alternate
# within each repetition; the table has medians and the verity/plain ratio.
#
#   VERITY_BENCH_REPS   repetitions (default 5)
#   VERITY_BENCH_MIB    size of the file (default 256)
#   VERITY_BENCH_RAND   seconds of random reads per pass (default 5)
#   VERITY_BENCH_DIR    where the image lives (default build/bench-verity; not tmpfs)
# Writes the table to stdout and bench/results/verity.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

reps=${VERITY_BENCH_REPS:-5}
mib=${VERITY_BENCH_MIB:-256}
rand=${VERITY_BENCH_RAND:-5}
dir=${VERITY_BENCH_DIR:-build/bench-verity}
bin=build/f2fuse
out=bench/results/verity.md
img=$dir/verity.img
mnt=$dir/mnt
make -s "$bin"
mkdir -p "$dir" "$mnt" "$(dirname "$out")"
cleanup() {
    mountpoint -q "$mnt" && fusermount3 -u "$mnt"
    rm -rf "$dir"
}
trap cleanup EXIT

truncate -s $(( (2 * mib + 512) * 1024 * 1024 )) "$img"
mkfs.f2fs -q -f -O extra_attr,verity "$img" >/dev/null
"$bin" -o rw "$img" "$mnt"
head -c "${mib}M" /dev/urandom >"$mnt/plain"
cp "$mnt/plain" "$mnt/verity"
"$bin" sync "$mnt"
fsverity enable "$mnt/verity"
digest=$(fsverity measure "$mnt/verity" | cut -d' ' -f1)
fusermount3 -u "$mnt"

results=$(mktemp)
pass() { # file mode phase rep
    local args
    if [ "$2" = seq ]; then
        args=(--rw=read --bs=1M --direct=1)
    elif [ "$2" = buffered ]; then
        args=(--rw=read --bs=1M --direct=0 --invalidate=1)
    else
        args=(--rw=randread --bs=4k --direct=1 --time_based --runtime="$rand")
    fi
    [ "$2" = buffered ] && echo 3 >/proc/sys/vm/drop_caches
    fio --name=v --filename="$mnt/$1" --ioengine=psync --numjobs=1 \
        --output-format=json "${args[@]}" >"$results.json"
    python3 - "$results.json" "$1 $2 $3 $4" >>"$results" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(sys.argv[2], j["bw_bytes"] / 1e6, j["iops"])
EOF
}
for rep in $(seq "$reps"); do
    for file in plain verity; do
        for mode in seq buffered rand; do
            "$bin" -o ro "$img" "$mnt"
            pass "$file" "$mode" cold "$rep"
            pass "$file" "$mode" warm "$rep"
            fusermount3 -u "$mnt"
        done
    done
done

python3 - "$results" "$out" "$reps" "$mib" "$rand" "$digest" <<'EOF'
import statistics, sys, time
path, out, reps, mib, rand, digest = sys.argv[1:]
rows = {}
for line in open(path):
    f, mode, phase, rep, mbps, iops = line.split()
    rows.setdefault((f, mode, phase), []).append((float(mbps), float(iops)))
med = lambda f, m, p, k: statistics.median(r[k] for r in rows[(f, m, p)])
lines = ["# fs-verity read benchmark", "",
         "%s UTC, %s reps (medians), a %s MiB random file and its verity copy (%s), fio "
         "psync reads through an f2fuse ro mount; cold = first pass after the mount, "
         "warm = the same pass again." % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), reps,
                                          mib, digest), "",
         "| workload | plain | verity | verity/plain |", "|---|---:|---:|---:|"]
names = {"seq": "1 MiB sequential O_DIRECT", "buffered": "1 MiB sequential buffered",
         "rand": "4 KiB random O_DIRECT (%s s)" % rand}
for mode, unit, k in (("seq", "MB/s", 0), ("buffered", "MB/s", 0), ("rand", "IOPS", 1)):
    for phase in ("cold", "warm"):
        a, b = med("plain", mode, phase, k), med("verity", mode, phase, k)
        name = names[mode]
        lines.append("| %s %s (%s) | %.0f | %.0f | %.2f |" % (name, phase, unit, a, b, b / a))
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
rm -f "$results" "$results.json"
