#!/usr/bin/env bash
# fscrypt read benchmark: what decrypting every block costs.  One image holds the same random
# file twice: one in a plain directory, one in an encrypted directory (a v2 policy,
# AES-256-XTS contents, made empty by tests/integration/f2crypt.py and filled through the mount
# with its key, so f2fuse encrypted it).  fio reads each through a read-only mount with the
# key: 1 MiB sequential reads with O_DIRECT (every read reaches the daemon: the kernel's page
# cache is out of the picture), the same buffered (caches dropped first: the kernel's
# read-ahead keeps several READs in flight, decrypted by libfuse's workers side by side), and
# 4 KiB random reads with O_DIRECT.  Files and workloads alternate within each repetition, a
# fresh mount for each pass; the table has medians, the encrypted/plain ratio of the medians
# and the median of each repetition's ratio (steadier while the machine's load drifts).
#
#   FSCRYPT_BENCH_REPS   repetitions (default 5)
#   FSCRYPT_BENCH_MIB    size of the file (default 256)
#   FSCRYPT_BENCH_RAND   seconds of random reads per pass (default 5)
#   FSCRYPT_BENCH_DIR    where the image lives (default build/bench-fscrypt; not tmpfs)
#   QUICK=1              64 MiB, 2 repetitions, 2 s of random reads
# Writes the table to stdout and bench/results/fscrypt.md.  Needs root (drop_caches), fio,
# and /usr/bin/python3 with python3-cryptography (for f2crypt.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${QUICK:-0}" = 1 ]; then
    : "${FSCRYPT_BENCH_MIB:=64}" "${FSCRYPT_BENCH_REPS:=2}" "${FSCRYPT_BENCH_RAND:=2}"
fi
reps=${FSCRYPT_BENCH_REPS:-5}
mib=${FSCRYPT_BENCH_MIB:-256}
rand=${FSCRYPT_BENCH_RAND:-5}
dir=${FSCRYPT_BENCH_DIR:-build/bench-fscrypt}
bin=build/f2fuse
out=bench/results/fscrypt.md
img=$dir/fscrypt.img
mnt=$dir/mnt
key=$dir/key
[ -x "$bin" ] || { echo "bench/fscrypt: run make first" >&2; exit 1; }
mkdir -p "$dir" "$mnt" "$dir/src/plain" "$dir/src/enc" "$(dirname "$out")"
cleanup() {
    mountpoint -q "$mnt" && fusermount3 -u "$mnt"
    rm -rf "$dir"
}
trap cleanup EXIT

truncate -s $(( (2 * mib + 512) * 1024 * 1024 )) "$img"
mkfs.f2fs -q -f -O extra_attr,inode_checksum,encrypt "$img" >/dev/null
sload.f2fs -f "$dir/src" "$img" >/dev/null
head -c 64 /dev/urandom >"$key"
/usr/bin/python3 - "$img" "$key" <<'EOF'
import sys
sys.path.insert(0, "tests/integration")
import f2crypt as X
X.encrypt_tree(sys.argv[1], "/enc", open(sys.argv[2], "rb").read(), X.Policy(2, 32))
EOF
# Each file written alone and synced, so that both are one extent (interleaved writeback of
# two files would split them, and reads would then differ by the node lookups, not the cipher).
head -c "${mib}M" /dev/urandom >"$dir/data"
"$bin" -o rw,fscrypt_key="$key" "$img" "$mnt"
for file in enc plain; do
    cp "$dir/data" "$mnt/$file/file"
    "$bin" sync "$mnt"
done
fusermount3 -u "$mnt"
rm -f "$dir/data"

results=$(mktemp)
pass() { # file mode rep
    local args
    if [ "$2" = seq ]; then
        args=(--rw=read --bs=1M --direct=1)
    elif [ "$2" = buffered ]; then
        args=(--rw=read --bs=1M --direct=0 --invalidate=1)
        echo 3 >/proc/sys/vm/drop_caches
    else
        args=(--rw=randread --bs=4k --direct=1 --time_based --runtime="$rand")
    fi
    fio --name=c --filename="$mnt/$1/file" --ioengine=psync --numjobs=1 \
        --output-format=json "${args[@]}" >"$results.json"
    python3 - "$results.json" "$1 $2 $3" >>"$results" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(sys.argv[2], j["bw_bytes"] / 1e6, j["iops"])
EOF
}
for rep in $(seq "$reps"); do
    for mode in seq buffered rand; do
        for file in plain enc; do
            "$bin" -o ro,fscrypt_key="$key" "$img" "$mnt"
            pass "$file" "$mode" "$rep"
            fusermount3 -u "$mnt"
        done
    done
done
aesni=$(grep -qw aes /proc/cpuinfo && echo "AES-NI" || echo "no AES-NI")

python3 - "$results" "$out" "$reps" "$mib" "$rand" "$aesni" <<'EOF'
import statistics, sys, time
path, out, reps, mib, rand, aesni = sys.argv[1:]
rows, by_rep = {}, {}
for line in open(path):
    f, mode, rep, mbps, iops = line.split()
    rows.setdefault((f, mode), []).append((float(mbps), float(iops)))
    by_rep.setdefault((mode, rep), {})[f] = (float(mbps), float(iops))
med = lambda f, m, k: statistics.median(r[k] for r in rows[(f, m)])
# The machine's load drifts: the ratio of each repetition's back-to-back passes is steadier.
paired = lambda m, k: statistics.median(v["enc"][k] / v["plain"][k]
                                        for (mode, _), v in by_rep.items() if mode == m)
lines = ["# fscrypt read benchmark", "",
         "%s UTC, %s reps (medians), a %s MiB random file plain and encrypted (v2, "
         "AES-256-XTS, %s), fio psync reads through an f2fuse ro mount with the key." %
         (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), reps, mib, aesni), "",
         "| workload | plain | encrypted | encrypted/plain | per-repetition ratio |",
         "|---|---:|---:|---:|---:|"]
names = {"seq": "1 MiB sequential O_DIRECT", "buffered": "1 MiB sequential buffered",
         "rand": "4 KiB random O_DIRECT (%s s)" % rand}
for mode, unit, k in (("seq", "MB/s", 0), ("buffered", "MB/s", 0), ("rand", "IOPS", 1)):
    a, b = med("plain", mode, k), med("enc", mode, k)
    lines.append("| %s (%s) | %.0f | %.0f | %.2f | %.2f |" % (names[mode], unit, a, b, b / a,
                                                           paired(mode, k)))
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
rm -f "$results" "$results.json"
