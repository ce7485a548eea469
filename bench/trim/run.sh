#!/usr/bin/env bash
# Trim benchmark: merged, parallel discards ("ext4: improve discard efficiency") reproduced
# through the FUSE mount.
#
# Workload (bench/trim/makefrag.c, the ext4 thread's makefrag): TRIM_BENCH_FILES files of
# TRIM_BENCH_FILE_MIB MiB written through the mount, then a 4 KiB hole punched every 16 KiB of
# each (fallocate PUNCH_HOLE|KEEP_SIZE through FUSE): 10 x 64 MiB = 40,960 isolated holes.
# The image is built once per size (mounted -o nodiscard, so nothing is discarded before the
# fstrim) and copied (sparse) for every run, so every run starts from the same bytes.  Then
# `fstrim -v MNT` is timed with discard_mode=block (one request per free block, one at a
# time), serial (merged ranges, one at a time) and parallel (merged ranges, discard_qd=32 in
# flight; the default), interleaved, TRIM_BENCH_REPS times; a second fstrim right after each.
# Ranges, merges and requests in flight come from `f2fuse stat`.  The same workload on kernel
# ext4 on a loop device (sparse image of the same size, next to f2fuse's) is the reference;
# its discard requests are the loop device's discard I/O count.  Then a larger size
# (TRIM_BENCH_LARGE_MIB per file) for f2fuse alone, TRIM_BENCH_LARGE_MODES, once.
# The table shows medians.
#
# Where the images live matters: a hole punched into an image file is a fallocate on the
# file system holding it, serialized on the image's inode, and on a host mounted -o discard
# (this machine's /) each one also waits for a discard of the host disk (~0.1 ms), which
# then dominates every variant.  So the main runs use a scratch ext4 (sparse file, loop
# device, default mount options: no discard) under TRIM_BENCH_DIR, where a punch costs
# microseconds and what is measured is the trim path itself; with TRIM_BENCH_HOST=1 (the
# default) the small workload then runs once more, once, in TRIM_BENCH_DIR itself.
#
#   TRIM_BENCH_FILES        files (default 10)
#   TRIM_BENCH_FILE_MIB     MiB per file (default 64)
#   TRIM_BENCH_IMG_MIB      image size (default files x size x 1.6)
#   TRIM_BENCH_REPS         repetitions (default 3)
#   TRIM_BENCH_LARGE_MIB    MiB per file of the large run (default 512; 0 = skip it)
#   TRIM_BENCH_LARGE_MODES  modes of the large run (default "block serial parallel")
#   TRIM_BENCH_EXT4=0       skip the ext4 reference
#   TRIM_BENCH_DIR          work directory (default build/bench-trim; not tmpfs: f2fuse opens
#                           images O_DIRECT)
#   TRIM_BENCH_SCRATCH=0    no scratch file system: the main runs happen in TRIM_BENCH_DIR
#   TRIM_BENCH_HOST=0       skip the extra run directly in TRIM_BENCH_DIR
#   QUICK=1                 smoke test: 4 x 16 MiB, 1 repetition, no large run
# Writes the table to stdout and bench/results/trim.md.  Needs root (losetup, mount).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "${QUICK:-0}" = 1 ]; then
    : "${TRIM_BENCH_FILES:=4}" "${TRIM_BENCH_FILE_MIB:=16}" "${TRIM_BENCH_REPS:=1}"
    : "${TRIM_BENCH_LARGE_MIB:=0}"
fi
files=${TRIM_BENCH_FILES:-10}
file_mib=${TRIM_BENCH_FILE_MIB:-64}
img_size() { local m=$(( $1 * $2 * 8 / 5 )); echo $(( m < 256 ? 256 : m )); } # f2fs wants room
img_mib=${TRIM_BENCH_IMG_MIB:-$(img_size "$files" "$file_mib")}
reps=${TRIM_BENCH_REPS:-3}
large_mib=${TRIM_BENCH_LARGE_MIB:-512}
large_modes=${TRIM_BENCH_LARGE_MODES:-block serial parallel}
do_ext4=${TRIM_BENCH_EXT4:-1}
use_scratch=${TRIM_BENCH_SCRATCH:-1}
do_host=${TRIM_BENCH_HOST:-1}
dir=${TRIM_BENCH_DIR:-build/bench-trim}
f2fuse=$PWD/build/f2fuse
makefrag=$PWD/build/bench/trim/makefrag
out=bench/results/trim.md
started=$(date +%s)

for tool in mkfs.f2fs mkfs.ext4 losetup fusermount3 fstrim mountpoint python3; do
    command -v $tool >/dev/null || { echo "trim bench: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "trim bench: needs root (losetup, mount)" >&2; exit 1; }
make -s build/f2fuse "build/bench/trim/makefrag"
mkdir -p "$dir" "$(dirname "$out")"
dir=$(realpath "$dir")
work=$dir # where the images of the current section live

pid=""; loopdev=""; scratch_loop=""
cleanup() {
    mountpoint -q "$dir/mnt" 2>/dev/null && fusermount3 -u "$dir/mnt" 2>/dev/null || true
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
    mountpoint -q "$dir/emnt" 2>/dev/null && umount "$dir/emnt" || true
    [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null || true
    rm -f "$dir"/*.img
    if mountpoint -q "$dir/scratch" 2>/dev/null; then
        rm -f "$dir"/scratch/*.img
        umount "$dir/scratch" || true
    fi
    [ -n "$scratch_loop" ] && losetup -d "$scratch_loop" 2>/dev/null || true
    rm -f "$dir/scratch.fs"
}
trap cleanup EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
trimmed_bytes() { sed -n 's/.*(\([0-9]*\) bytes) trimmed.*/\1/p'; }
stat_of() { "$f2fuse" stat "$dir/mnt" | awk -v k="$1" '$1 == k { print $2 }'; }

# MiB of the file that hold data (SEEK_DATA/SEEK_HOLE), after its dirty pages are written;
# its clean pages are dropped too (this file's only), so no run punches through page cache
# that another would not have.
alloc_mib() {
    sync "$1"
    dd of="$1" oflag=nocache conv=notrunc,fdatasync count=0 status=none
    python3 - "$1" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size, off, data = os.fstat(fd).st_size, 0, 0
while off < size:
    try:
        d = os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        break
    off = os.lseek(fd, d, os.SEEK_HOLE)
    data += off - d
print(data >> 20)
PY
}

mount_f2fuse() { # image options
    mkdir -p "$dir/mnt"
    "$f2fuse" -f -o "$2" "$1" "$dir/mnt" 2>>"$dir/daemon.log" &
    pid=$!
    for _ in $(seq 200); do
        mountpoint -q "$dir/mnt" && return 0
        kill -0 "$pid" 2>/dev/null || { echo "f2fuse exited: $(tail -3 "$dir/daemon.log")" >&2; exit 1; }
        sleep 0.05
    done
    echo "f2fuse did not mount" >&2
    exit 1
}

umount_f2fuse() {
    fusermount3 -u "$dir/mnt"
    wait "$pid"
    pid=""
}

# Builds $work/base-<tag>.img: files of $2 MiB, fragmented, on an image of $3 MiB.
build_base() { # tag file_mib img_mib
    local img=$work/base-$1.img made
    rm -f "$img"
    truncate -s "${3}M" "$img"
    mkfs.f2fs -f "$img" >/dev/null
    mount_f2fuse "$img" rw,nodiscard
    made=$("$makefrag" "$dir/mnt" "$files" "$2") || { echo "makefrag failed" >&2; exit 1; }
    echo "  building $1: $made" >&2
    python3 -c "import os; fd = os.open('$dir/mnt', os.O_RDONLY); os.fsync(fd)" # a checkpoint
    umount_f2fuse
}

# One f2fuse run: prints "secs bytes ranges merges inflight_max secs2 bytes2 mib_before mib_after"
run_f2fuse() { # tag mode
    local img=$work/run.img before t0 t1 t2 o1 o2 ranges merges inflight
    cp --sparse=always "$work/base-$1.img" "$img"
    before=$(alloc_mib "$img")
    mount_f2fuse "$img" "rw,nodiscard,discard_mode=$2"
    t0=$(now); o1=$(fstrim -v "$dir/mnt"); t1=$(now)
    o2=$(fstrim -v "$dir/mnt"); t2=$(now)
    ranges=$(stat_of discard.ranges_issued); merges=$(stat_of discard.merges)
    inflight=$(stat_of discard.inflight_max)
    umount_f2fuse
    echo "$(secs "$t0" "$t1") $(echo "$o1" | trimmed_bytes) $ranges $merges $inflight" \
         "$(secs "$t1" "$t2") $(echo "$o2" | trimmed_bytes) $before $(alloc_mib "$img")"
    rm -f "$img"
}

# One ext4 run on a fresh loop-mounted image: same output shape ("-" for merges, in flight).
run_ext4() {
    local img=$work/ext4.img dev d0 d1 before t0 t1 t2 o1 o2
    rm -f "$img"
    truncate -s "${img_mib}M" "$img"
    mkfs.ext4 -q -F -b 4096 "$img" # f2fs's block size (a small image would get 1 KiB)
    loopdev=$(losetup -f --show "$img")
    mkdir -p "$dir/emnt"
    mount "$loopdev" "$dir/emnt"
    "$makefrag" "$dir/emnt" "$files" "$file_mib" >/dev/null || { echo "makefrag failed" >&2; exit 1; }
    sync -f "$dir/emnt"
    dev=$(basename "$loopdev")
    before=$(alloc_mib "$img") # also writes the backing file's pages, as f2fuse's copy is
    d0=$(awk '{print $12}' "/sys/block/$dev/stat")
    t0=$(now); o1=$(fstrim -v "$dir/emnt"); t1=$(now)
    d1=$(awk '{print $12}' "/sys/block/$dev/stat")
    o2=$(fstrim -v "$dir/emnt"); t2=$(now)
    umount "$dir/emnt"
    losetup -d "$loopdev"
    loopdev=""
    echo "$(secs "$t0" "$t1") $(echo "$o1" | trimmed_bytes) $((d1 - d0)) - -" \
         "$(secs "$t1" "$t2") $(echo "$o2" | trimmed_bytes) $before $(alloc_mib "$img")"
    rm -f "$img"
}

declare -A res=()
record() { # key "fields..."
    res[$1]+="$2|"
    echo "  $1: $2" >&2
}
# Median of field n over the runs of key.
field() { echo "${res[$1]:-}" | tr '|' '\n' | awk -v n="$2" 'NF {print $n}' | median; }

# The small workload, n times, modes and ext4 interleaved, in $work; keys "<where>/small/..."
small_runs() { # where reps
    echo "trim bench ($1): $files x $file_mib MiB files, image $img_mib MiB, $2 repetition(s), in $work" >&2
    build_base small "$file_mib" "$img_mib"
    for ((rep = 1; rep <= $2; rep++)); do
        for mode in block serial parallel; do
            record "$1/small/$mode" "$(run_f2fuse small "$mode")"
        done
        [ "$do_ext4" = 1 ] && record "$1/small/ext4" "$(run_ext4)"
    done
    rm -f "$work/base-small.img"
}

large_img_mib=$(img_size "$files" "$large_mib")
large_runs() { # where
    echo "trim bench ($1): large: $files x $large_mib MiB, image $large_img_mib MiB" >&2
    build_base large "$large_mib" "$large_img_mib"
    for mode in $large_modes; do
        record "$1/large/$mode" "$(run_f2fuse large "$mode")"
    done
    rm -f "$work/base-large.img"
}

main_where=host
if [ "$use_scratch" = 1 ]; then
    # room for a base image and a copy of the largest size, plus the ext4 image
    scratch_gib=$(( (large_mib > 0 ? large_img_mib : img_mib) * 3 / 1024 + 4 ))
    truncate -s "${scratch_gib}G" "$dir/scratch.fs"
    mkfs.ext4 -q -F "$dir/scratch.fs"
    scratch_loop=$(losetup -f --show "$dir/scratch.fs")
    mkdir -p "$dir/scratch"
    mount "$scratch_loop" "$dir/scratch"
    work=$dir/scratch
    main_where=scratch
fi
main_fs="$(findmnt -n -o FSTYPE -T "$work") ($(findmnt -n -o OPTIONS -T "$work"))"
small_runs "$main_where" "$reps"
[ "$large_mib" -gt 0 ] && large_runs "$main_where"
host_fs="$(findmnt -n -o FSTYPE -T "$dir") ($(findmnt -n -o OPTIONS -T "$dir"))"
if [ "$use_scratch" = 1 ]; then
    rm -f "$work"/*.img
    umount "$dir/scratch"
    losetup -d "$scratch_loop"
    scratch_loop=""
    rm -f "$dir/scratch.fs"
    work=$dir
    [ "$do_host" = 1 ] && small_runs host 1
fi

# Table
label() {
    case $1 in
        */block) echo "f2fuse (a) block: one discard per free block, serial" ;;
        */serial) echo "f2fuse (b) serial: merged ranges, one at a time" ;;
        */parallel) echo "f2fuse (c) parallel: merged ranges, 32 in flight" ;;
        */ext4) echo "kernel ext4 on a loop device" ;;
    esac
}
mib() { awk -v b="$1" 'BEGIN { if (b == "") print "-"; else printf "%.1f", b / 1048576 }'; }
rows=()
for where in scratch host; do
    for size in small large; do
        base_a=$(field "$where/$size/block" 1)
        for kind in block serial parallel ext4; do
            key=$where/$size/$kind
            [ -n "${res[$key]:-}" ] || continue
            t=$(field "$key" 1); b=$(field "$key" 2); r=$(field "$key" 3); m=$(field "$key" 4)
            q=$(field "$key" 5); t2=$(field "$key" 6); b2=$(field "$key" 7)
            a0=$(field "$key" 8); a1=$(field "$key" 9)
            all=$(echo "${res[$key]}" | tr '|' '\n' | awk 'NF {printf "%s%s", sep, $1; sep=" / "}')
            speed=$(awk -v a="$base_a" -v t="$t" 'BEGIN { if (a > 0 && t > 0) printf "%.1fx", a / t; else print "-" }')
            if [ "$size" = small ]; then sz="$files x $file_mib MiB"; else sz="$files x $large_mib MiB"; fi
            if [ "$where" = scratch ]; then wh="scratch ext4"; else wh="host dir"; fi
            rows+=("| $wh | $sz | $(label "$key") | $t ($all) | $speed | $(mib "$b") | $r | $m | $q | $t2 s / $(mib "$b2") | $a0 -> $a1 |")
        done
    done
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.1fx", a / b; else print "n/a" }'; }
{
    echo "## Trim: fstrim after the makefrag workload"
    echo
    echo "$(date -u +%Y-%m-%d), kernel $(uname -r), $(nproc) CPUs."
    echo "Backing file systems: \"scratch ext4\" = $main_fs on a loop device (sparse file under"\
         "$dir); \"host dir\" = $dir itself, $host_fs."
    large_note="no large run"
    [ "$large_mib" -gt 0 ] && large_note="$files x $large_mib MiB on $large_img_mib MiB for the large run"
    echo "Workload: $files files of $file_mib MiB written through the mount, then a 4 KiB hole"\
         "punched every 16 KiB of each; image $img_mib MiB ($large_note); f2fuse mounted -o"\
         "nodiscard so the fstrim does"\
         "all the discarding; medians of $reps run(s) (all runs in parentheses), modes interleaved."
    echo
    echo "| backing | files | how | fstrim s | vs (a) | MiB trimmed | discard requests | merges | max in flight | 2nd fstrim s / MiB | image MiB holding data before -> after |"
    echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    for where in scratch host; do
        [ -n "${res[$where/small/parallel]:-}" ] || continue
        echo "Targets ($where, $files x $file_mib MiB): (c) vs (a): $(ratio "$(field "$where/small/block" 1)" "$(field "$where/small/parallel" 1)");"\
             "(c) vs kernel ext4: $(ratio "$(field "$where/small/ext4" 1)" "$(field "$where/small/parallel" 1)") faster"\
             "($(field "$where/small/parallel" 1) s vs $(field "$where/small/ext4" 1) s)."
    done
    echo
    echo "discard requests: f2fuse's discard.ranges_issued (one punched hole each); ext4: the"\
         "loop device's discard I/Os (each one a hole punched into its backing file)."\
         "merges: blocks that joined a neighbour's request (free blocks - requests)."\
         "A punched hole is a fallocate on the backing file system, serialized on the image's"\
         "inode; on the host dir, mounted -o discard, each also waits for a discard of the host"\
         "disk, which then dominates every variant.  Parallel issue overlaps f2fuse's own"\
         "per-request cost (submission, io_uring worker, completion, wake-up) with that work."
    echo "Total bench time: $(( $(date +%s) - started ))s."
} | tee "$out"
