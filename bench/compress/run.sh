#!/usr/bin/env bash
# Compressed files: sequential write and read throughput and the daemon's CPU per MiB for
# each algorithm against the same file uncompressed, on compressible text and on random
# (incompressible) data, and the room on the device each takes.
#
# One image (compression feature); per configuration a directory, +c unless "plain", the
# mount's compress_algorithm / compress_log_size choosing the codec.  A write pass copies a
# source file into it with dd (1 MiB writes) and `f2fuse sync` (the clusters are compressed
# at writeback: the pass ends when they are on the device); a read pass, in a fresh
# read-only mount, reads it back with O_DIRECT 1 MiB reads (every read reaches the daemon).
# CPU = the daemon's user + system time over the pass (/proc/PID/stat).  Device blocks = the
# file's valid block addresses, counted offline (compressed clusters keep spare slots
# reserved: the user-visible size is the same).  Configurations and kinds rotate within
# each repetition; the table has medians, and ratios to "plain" (the median of the
# repetitions' ratios: each repetition runs every configuration).
#
#   COMPRESS_BENCH_REPS   repetitions (default 5; QUICK=1: 2)
#   COMPRESS_BENCH_MIB    size of each file (default 128; QUICK=1: 32)
#   COMPRESS_BENCH_DIR    where the image lives (default build/bench-compress; not tmpfs)
#   COMPRESS_BENCH_ONLY   configurations to run, comma-separated (default all)
# Writes the table to stdout and bench/results/compress.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=${QUICK:-}
reps=${COMPRESS_BENCH_REPS:-$([ -n "$quick" ] && echo 2 || echo 5)}
mib=${COMPRESS_BENCH_MIB:-$([ -n "$quick" ] && echo 32 || echo 128)}
dir=${COMPRESS_BENCH_DIR:-build/bench-compress}
only=${COMPRESS_BENCH_ONLY:-}
bin=$PWD/build/f2fuse
out=bench/results/compress.md
img=$dir/compress.img
mnt=$dir/mnt
# name algorithm[:level] log_cluster_size (plain: no +c)
configs=(
    "plain - 2"
    "lz4 lz4 2"
    "lz4-64k lz4 4"
    "lz4hc lz4:9 2"
    "zstd zstd 2"
    "zstd-64k zstd 4"
    "lzo lzo 2"
    "lzo-rle lzo-rle 2"
)
if [ -n "$only" ]; then
    kept=()
    for c in "${configs[@]}"; do
        [[ ",$only,plain," == *",${c%% *},"* ]] && kept+=("$c")
    done
    configs=("${kept[@]}")
fi
make -s "$bin"
mkdir -p "$dir" "$mnt" "$(dirname "$out")"
pid=
cleanup() {
    mountpoint -q "$mnt" && fusermount3 -u "$mnt"
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

# sources: words of a dictionary-like vocabulary (compresses to ~40 % with LZ4), and random
python3 - "$dir/text.src" "$mib" <<'EOF'
import random, sys
r = random.Random(2026)
syll = ["ka", "lo", "mi", "ne", "ru", "ta", "ve", "so", "pi", "de", "ga", "fo"]
vocab = ["".join(r.choice(syll) for _ in range(r.randint(1, 4))) for _ in range(5000)]
words = [w.encode() for w in vocab]
n = int(sys.argv[2]) << 20
with open(sys.argv[1], "wb") as f:
    done = 0
    while done < n:
        line = b" ".join(r.choice(words) for _ in range(r.randint(5, 15))) + b".\n"
        f.write(line)
        done += len(line)
    f.truncate(n)
EOF
head -c "${mib}M" /dev/urandom >"$dir/rand.src"

truncate -s $(( (${#configs[@]} * 2 * mib * 3 / 2 + 1024) * 1024 * 1024 )) "$img"
mkfs.f2fs -q -f -O extra_attr,compression "$img" >/dev/null

mount_fs() { # opts
    "$bin" -f -o "$1" "$img" "$mnt" 2>>"$dir/daemon.log" &
    pid=$!
    for _ in $(seq 200); do
        mountpoint -q "$mnt" && return 0
        sleep 0.05
    done
    echo "mount failed" >&2
    exit 1
}
umount_fs() {
    fusermount3 -u "$mnt"
    wait "$pid" || true
    pid=
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
now() { date +%s.%N; }

mount_fs rw
for c in "${configs[@]}"; do
    read -r name alg log <<<"$c"
    mkdir "$mnt/$name"
    [ "$name" = plain ] || chattr +c "$mnt/$name"
done
umount_fs

results=$dir/results.txt
: >"$results"
hz=$(getconf CLK_TCK)
n=${#configs[@]}
for rep in $(seq "$reps"); do
    for i in $(seq 0 $((n - 1))); do
        c=${configs[$(( (i + rep) % n ))]}
        read -r name alg log <<<"$c"
        opts=rw,compress_log_size=$log
        [ "$alg" = - ] || opts=$opts,compress_algorithm=$alg
        for kind in text rand; do
            mount_fs "$opts"
            rm -f "$mnt/$name/$kind"
            "$bin" sync "$mnt"
            c0=$(cpu_ticks); t0=$(now)
            dd if="$dir/$kind.src" of="$mnt/$name/$kind" bs=1M status=none
            "$bin" sync "$mnt"
            t1=$(now); c1=$(cpu_ticks)
            enc=$("$bin" stat "$mnt" | awk '$1 == "compress.encode_cpu_us" {print $2}')
            umount_fs
            mount_fs ro
            c2=$(cpu_ticks); t2=$(now)
            dd if="$mnt/$name/$kind" of=/dev/null bs=1M iflag=direct status=none
            t3=$(now); c3=$(cpu_ticks)
            dec=$("$bin" stat "$mnt" | awk '$1 == "compress.decode_cpu_us" {print $2}')
            umount_fs
            echo "$name $kind $rep $t0 $t1 $c0 $c1 $t2 $t3 $c2 $c3 ${enc:-0} ${dec:-0}" >>"$results"
        done
    done
done

# device blocks of every file, offline
blocks=$dir/blocks.txt
/usr/bin/python3 - "$img" "$blocks" "${configs[@]}" <<'EOF'
import sys
sys.path.insert(0, "tests/integration")
import f2test as T
img, out = sys.argv[1], sys.argv[2]
with T.F2fsImage(img) as im, open(out, "w") as f:
    for c in sys.argv[3:]:
        name = c.split()[0]
        for kind in ("text", "rand"):
            i = im.inode(im.lookup("/%s/%s" % (name, kind)))
            n = (i["size"] + 4095) // 4096
            used = sum(1 for k in range(n) if im.bmap(i, k) not in (0, 0xFFFFFFFF, 0xFFFFFFFE))
            f.write("%s %s %d %d\n" % (name, kind, used, n))
EOF

python3 - "$results" "$blocks" "$out" "$reps" "$mib" "$hz" <<'EOF'
import statistics, sys, time
res, blk, out, reps, mib, hz = sys.argv[1:]
mib, hz = int(mib), int(hz)
rows, order = {}, []
for line in open(res):
    name, kind, rep, t0, t1, c0, c1, t2, t3, c2, c3, enc, dec = line.split()
    if name not in order:
        order.append(name)
    f = lambda x: float(x)
    rows.setdefault((name, kind), []).append(dict(rep=rep,
        w=mib / (f(t1) - f(t0)), wc=(f(c1) - f(c0)) * 1000 / hz / mib,
        r=mib / (f(t3) - f(t2)), rc=(f(c3) - f(c2)) * 1000 / hz / mib,
        enc=f(enc) / 1000 / mib, dec=f(dec) / 1000 / mib))
used = {}
for line in open(blk):
    name, kind, u, n = line.split()
    used[(name, kind)] = (int(u), int(n))
order.sort(key=lambda n: n != "plain")
med = lambda name, kind, k: statistics.median(r[k] for r in rows[(name, kind)])
def ratio(name, kind, k):  # the median of each repetition's ratio to plain's
    base = {r["rep"]: r[k] for r in rows[("plain", kind)]}
    return statistics.median(r[k] / base[r["rep"]] for r in rows[(name, kind)])
lines = ["# Compressed files: sequential write and read", "",
         "%s UTC, %s repetitions (medians), %d MiB files; write = dd 1 MiB writes + "
         "`f2fuse sync`, read = O_DIRECT 1 MiB reads in a fresh ro mount; CPU = the daemon's "
         "ms per MiB (codec: the time in the codec alone); device = blocks the file holds on "
         "the device, of its size; vs plain: the median of the repetitions' ratios." % (
             time.strftime("%Y-%m-%d %H:%M", time.gmtime()), reps, mib),
         ""]
for kind, title in (("text", "compressible text"), ("rand", "random data")):
    lines += ["## %s" % title, "",
              "| config | write MB/s | vs plain | CPU ms/MiB (codec) | read MB/s | vs plain | "
              "CPU ms/MiB (codec) | device |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in order:
        w, r = med(name, kind, "w"), med(name, kind, "r")
        u, n = used[(name, kind)]
        lines.append("| %s | %.0f | %.2f | %.1f (%.1f) | %.0f | %.2f | %.1f (%.1f) | %.0f %% |" % (
            name, w, ratio(name, kind, "w"), med(name, kind, "wc"), med(name, kind, "enc"), r,
            ratio(name, kind, "r"),
            med(name, kind, "rc"), med(name, kind, "dec"), 100.0 * u / n))
    lines.append("")
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
EOF
