#!/usr/bin/env bash
# Block layer benchmark: blk_bench with the uring and psync backends against fio
# (ioengine=io_uring, direct=1) on the same 1 GiB image, same block size and queue depth.
# Each workload runs BLK_BENCH_REPS times per tool, the tools interleaved; the table shows
# medians, the ratio to fio, CPU (user+system, % of one core) and how many of the image's
# pages sit in the host page cache after the run (the host cache is dropped before each).
#
#   BLK_BENCH_SECONDS  seconds per run (default 4; 6 workloads x 3 tools x 3 reps)
#   BLK_BENCH_REPS     repetitions (default 3)
#   BLK_BENCH_DIR      where the image lives (default build/bench-blk; must not be tmpfs)
#   BLK_BENCH_KEEP=1   keep the image afterwards
# Writes the table to stdout and bench/results/blk.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

secs=${BLK_BENCH_SECONDS:-4}
reps=${BLK_BENCH_REPS:-3}
size_mib=1024
dir=${BLK_BENCH_DIR:-build/bench-blk}
bin=build/bench/blk/blk_bench
out=bench/results/blk.md
img=$dir/blk.img
started=$(date +%s)

for tool in fio jq fincore; do
    command -v $tool >/dev/null || { echo "blk bench: $tool is missing" >&2; exit 1; }
done
make -s "$bin"
mkdir -p "$dir" "$(dirname "$out")"

# Written, not just allocated: reads of unwritten extents never reach the disk.
if [ "$(stat -c %s "$img" 2>/dev/null || echo 0)" != $((size_mib << 20)) ]; then
    echo "creating $img ($size_mib MiB)" >&2
    rm -f "$img"
    fallocate -l "${size_mib}M" "$img"
    dd if=/dev/zero of="$img" bs=1M count=$size_mib oflag=direct conv=notrunc,fsync status=none
fi
[ "${BLK_BENCH_KEEP:-0}" = 1 ] || trap 'rm -f "$img"' EXIT

drop_cache() { dd of="$img" oflag=nocache conv=notrunc,fdatasync count=0 status=none; }
cached_pages() { fincore --bytes --noheadings --output RES "$img" | awk '{print int($1 / 4096)}'; }

# Each prints "iops mbps cpu"
run_fio() { # rw bs qd
    fio --name=blk --filename="$img" --size=${size_mib}M --rw="$1" --bs="$2" --iodepth="$3" \
        --ioengine=io_uring --direct=1 --time_based --runtime="$secs" --output-format=json |
        jq -r '.jobs[0] | "\(.read.iops + .write.iops) \((.read.bw_bytes + .write.bw_bytes) / 1e6) \(.usr_cpu + .sys_cpu)"'
}
run_blk() { # backend rw bs qd
    "$bin" --backend "$1" --file "$img" --size $((size_mib << 20)) --rw "$2" --bs "$3" \
        --qd "$4" --seconds "$secs" |
        awk '{for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
              print v["iops"], v["mbps"], v["cpu"]}'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "-" }'; }
fmt() { awk -v v="$1" -v d="$2" 'BEGIN { printf "%.*f", d, v }'; }

workloads=("4k randread QD1:randread:4096:1"
           "4k randread QD32:randread:4096:32"
           "4k randwrite QD1:randwrite:4096:1"
           "4k randwrite QD32:randwrite:4096:32"
           "1M read QD4:read:1048576:4"
           "1M write QD4:write:1048576:4")
tools=(fio uring psync)

rows=()
for w in "${workloads[@]}"; do
    IFS=: read -r label rw bs qd <<<"$w"
    declare -A iops=() mbps=() cpu=() pages=()
    for ((rep = 1; rep <= reps; rep++)); do
        for tool in "${tools[@]}"; do
            drop_cache
            if [ "$tool" = fio ]; then
                read -r i m c < <(run_fio "$rw" "$bs" "$qd")
            else
                read -r i m c < <(run_blk "$tool" "$rw" "$bs" "$qd")
            fi
            p=$(cached_pages)
            echo "  $label $tool rep $rep: iops=$i mbps=$m cpu=$c cached_pages=$p" >&2
            iops[$tool]+=" $i"; mbps[$tool]+=" $m"; cpu[$tool]+=" $c"; pages[$tool]+=" $p"
        done
    done
    declare -A mi=() mm=() mc=() mp=()
    for tool in "${tools[@]}"; do
        mi[$tool]=$(echo "${iops[$tool]}" | median)
        mm[$tool]=$(echo "${mbps[$tool]}" | median)
        mc[$tool]=$(echo "${cpu[$tool]}" | median)
        mp[$tool]=$(echo "${pages[$tool]}" | median)
    done
    row="| $label | $(fmt "${mi[fio]}" 0) | $(fmt "${mi[uring]}" 0) | $(ratio "${mi[uring]}" "${mi[fio]}")"
    row+=" | $(fmt "${mi[psync]}" 0) | $(ratio "${mi[psync]}" "${mi[fio]}")"
    row+=" | $(fmt "${mm[fio]}" 1) / $(fmt "${mm[uring]}" 1) / $(fmt "${mm[psync]}" 1)"
    row+=" | $(fmt "${mc[fio]}" 0) / $(fmt "${mc[uring]}" 0) / $(fmt "${mc[psync]}" 0)"
    row+=" | ${mp[fio]} / ${mp[uring]} / ${mp[psync]} |"
    rows+=("$row")
    unset iops mbps cpu pages mi mm mc mp
done

fstype=$(findmnt -n -o FSTYPE -T "$dir" 2>/dev/null || stat -f -c %T "$dir")
{
    echo "## Block layer: blk_bench vs fio"
    echo
    echo "$(date -u +%Y-%m-%d), kernel $(uname -r), $(nproc) CPUs, image ${size_mib} MiB on $fstype," \
         "${secs}s per run, median of $reps (tools interleaved), host cache dropped before each run."
    echo
    echo "| workload | fio IOPS | uring IOPS | uring/fio | psync IOPS | psync/fio | MB/s fio / uring / psync | CPU % fio / uring / psync | cached pages after fio / uring / psync |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "fio: ioengine=io_uring direct=1.  uring: blk_bench through blk_submit, O_DIRECT." \
         "psync: blk_bench, buffered pread/pwrite run inline, so its effective queue depth is 1," \
         "its reads get readahead and, once pages are cached, memory speed, and its writes count" \
         "when they reach the page cache, not the disk: the cached-pages column is its price."
    echo "Total bench time: $(( $(date +%s) - started ))s."
} | tee "$out"
