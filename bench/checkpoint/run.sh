#!/usr/bin/env bash
# Checkpoint benchmark: merged checkpoints (f2fs "checkpoint=merge") reproduced through the
# FUSE mount.
#
# Contention runs, on a fresh 4 GiB sparse f2fs image each (mkfs.f2fs), mounted by f2fuse with
# nocheckpoint_merge and with checkpoint_merge, interleaved, CP_BENCH_REPS times each:
#   thread B  fio, streaming 128 KiB buffered writes into dirB (started first, runs throughout)
#   thread C  endless (create dir2/file_j; fsync(dir2)) under ionice -c3 nice -n 19
#   thread A  CP_BENCH_OPS x (create dir1/file_i; fsync(dir1)), timed, once B and C have run
#             for CP_BENCH_WARMUP seconds; B and C are stopped when A ends.
# Checkpoint counters come from `f2fuse stat`, as deltas over A's run where the counter allows
# it (requests, written, served average, wait average) and since mount otherwise (served max,
# wait p99, wait max: a maximum and a histogram cannot be differenced; the mount is fresh and
# only the warm-up precedes A).  The same A/B/C workload runs on kernel ext4 on a loop device
# (sparse image of the same size) for reference.  Then a plain fsync latency test on f2fuse:
# 4 KiB pwrite + fsync of a regular file that is in the last checkpoint, CP_BENCH_FSYNC_OPS
# times, with fsync=fast and fsync=checkpoint (fresh image each, interleaved).
# The table shows medians over the repetitions.
#
#   CP_BENCH_OPS        thread A's operations (default 1000)
#   CP_BENCH_REPS       repetitions per configuration (default 3)
#   CP_BENCH_WARMUP     seconds B and C run before A starts (default 2)
#   CP_BENCH_FSYNC_OPS  pwrite+fsync pairs per fsync run (default 2000)
#   CP_BENCH_FSYNC_REPS repetitions of the fsync test (default 3)
#   CP_BENCH_EXT4=0     skip the ext4 reference
#   CP_BENCH_MANY_C     also run off/on with this many C processes (default 4; 0 or 1 = skip):
#                       each in its own directory dir2..dirN+1 (the kernel serializes
#                       fsyncs and creates of one FUSE directory on its inode lock, so C
#                       processes sharing dir2 would make one requester).  A and one C are
#                       two synchronous requesters, which can at best be served in pairs;
#                       more requesters show what merging can do
#   CP_BENCH_SLOW_OPTS  also run off/on (one C) on an emulated slow, saturated device with these
#                       mount options (default "dev_bw=50M": a 50 MB/s device whose queue
#                       serves checkpoint I/O before background writeback (B's data, which
#                       checkpoints do not write) before the idle-class C, as the checkpoint=merge
#                       post's BFQ with a low-weight cgroup for C); "" = skip
#   CP_BENCH_TIMEOUT    seconds before thread A is given up (default 240)
#   CP_BENCH_OPTS       extra f2fuse mount options (appended to every mount)
#   CP_BENCH_DIR        where images and mount points live (default build/bench-checkpoint;
#                       must not be tmpfs: f2fuse opens the image O_DIRECT)
#   QUICK=1             smoke test (~1 min): 200 ops, 1 repetition, 300 fsyncs
# Writes the table to stdout and bench/results/checkpoint.md.  Needs root (losetup, mount).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "${QUICK:-0}" = 1 ]; then
    : "${CP_BENCH_OPS:=200}" "${CP_BENCH_REPS:=1}" "${CP_BENCH_FSYNC_OPS:=300}"
    : "${CP_BENCH_FSYNC_REPS:=1}" "${CP_BENCH_WARMUP:=1}"
fi
ops=${CP_BENCH_OPS:-1000}
reps=${CP_BENCH_REPS:-3}
warmup=${CP_BENCH_WARMUP:-2}
fsync_ops=${CP_BENCH_FSYNC_OPS:-2000}
fsync_reps=${CP_BENCH_FSYNC_REPS:-3}
do_ext4=${CP_BENCH_EXT4:-1}
many_c=${CP_BENCH_MANY_C:-4}
slow_opts=${CP_BENCH_SLOW_OPTS-dev_bw=50M}
a_timeout=${CP_BENCH_TIMEOUT:-240}
extra_opts=${CP_BENCH_OPTS:+,$CP_BENCH_OPTS}
dir=${CP_BENCH_DIR:-build/bench-checkpoint}
size=4G
f2fuse=build/f2fuse
load=build/bench/checkpoint/cp_load
out=bench/results/checkpoint.md
started=$(date +%s)

for tool in fio jq mkfs.f2fs mkfs.ext4 losetup fusermount3 ionice mountpoint timeout; do
    command -v $tool >/dev/null || { echo "checkpoint bench: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || [ "$do_ext4" = 0 ] ||
    { echo "checkpoint bench: ext4 reference needs root (or CP_BENCH_EXT4=0)" >&2; exit 1; }
make -s "$f2fuse" "$load"
mkdir -p "$dir" "$(dirname "$out")"
dir=$(realpath "$dir")
mnt=$dir/mnt
img=$dir/bench.img
log=$dir/f2fuse.log
mkdir -p "$mnt"
if mountpoint -q "$mnt"; then
    echo "checkpoint bench: $mnt is already a mount point (a previous run?)" >&2
    exit 1
fi

# --- cleanup: only what this script started -------------------------------------------------
daemon_pid='' fio_pid='' loopdev=''
c_pids=()
stop_bg() { # pid...: SIGTERM, then wait
    for p in "$@"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    for p in "$@"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
}
cleanup() {
    set +e
    stop_bg "${c_pids[@]}"
    [ -n "$fio_pid" ] && kill -INT "$fio_pid" 2>/dev/null && wait "$fio_pid" 2>/dev/null
    c_pids=() fio_pid=''
    if mountpoint -q "$mnt"; then
        if [ -n "$loopdev" ]; then umount "$mnt" || umount -l "$mnt"
        else fusermount3 -u "$mnt" || fusermount3 -uz "$mnt"; fi
    fi
    if [ -n "$daemon_pid" ]; then
        for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null
        daemon_pid=
    fi
    [ -n "$loopdev" ] && losetup -d "$loopdev"
    loopdev=
    rm -f "$img" "$dir"/fio.json "$dir"/c*.out "$dir"/stat[01]
}
trap cleanup EXIT
trap 'exit 130' INT TERM

new_image() { rm -f "$img"; truncate -s $size "$img"; }

mount_f2fuse() { # options
    new_image
    mkfs.f2fs -f -q "$img" >/dev/null
    "$f2fuse" -f -o "rw,$1$extra_opts" "$img" "$mnt" >>"$log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 200); do
        mountpoint -q "$mnt" && return 0
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "checkpoint bench: f2fuse -o rw,$1 did not mount; see $log" >&2
    exit 1
}

mount_ext4() {
    new_image
    loopdev=$(losetup -f --show --direct-io=on "$img")
    mkfs.ext4 -q -F "$loopdev"
    mount "$loopdev" "$mnt"
}

unmount_all() {
    if [ -n "$loopdev" ]; then
        umount "$mnt"
        losetup -d "$loopdev"
        loopdev=
    else
        fusermount3 -u "$mnt"
        wait "$daemon_pid" || echo "checkpoint bench: f2fuse exited with $?; see $log" >&2
        daemon_pid=
    fi
    rm -f "$img"
}

snap() { "$f2fuse" stat "$mnt"; } # "name value" lines
# val FILE NAME
val() { awk -v k="$2" '$1 == k {print $2; f = 1} END {if (!f) print 0}' "$1"; }
kv() { # "k=v k=v" line, key -> value
    tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'
}

# One A/B/C run on what is mounted at $mnt.  Sets $result to one line of key=value pairs.
# (Runs in the main shell, not in $(...), so that the cleanup trap knows B's and C's pids.)
run_abc() { # fs: f2fuse|ext4, number of C processes
    local fs=$1 nc=$2 i
    mkdir "$mnt/dir1" "$mnt/dirB"
    for ((i = 0; i < nc; i++)); do mkdir "$mnt/dir$((i + 2))"; done
    fio --name=b --directory="$mnt/dirB" --rw=write --bs=128k --size=1G --time_based \
        --runtime=3600 --fallocate=none --output-format=json --output="$dir/fio.json" \
        >/dev/null 2>&1 &
    fio_pid=$!
    for ((i = 0; i < nc; i++)); do
        ionice -c3 nice -n 19 "$load" dirsync "$mnt/dir$((i + 2))" 0 c >"$dir/c$i.out" &
        c_pids+=($!)
    done
    sleep "$warmup"
    local s0=$dir/stat0 s1=$dir/stat1 a
    if [ "$fs" = f2fuse ]; then snap >"$s0"; fi
    if ! a=$(timeout -k 10 "$a_timeout" "$load" dirsync "$mnt/dir1" "$ops" a); then
        echo "checkpoint bench: thread A failed or timed out after ${a_timeout}s ($fs)" >&2
        exit 1
    fi
    if [ "$fs" = f2fuse ]; then snap >"$s1"; fi
    stop_bg "${c_pids[@]}"
    c_pids=()
    kill -INT "$fio_pid"
    wait "$fio_pid" || true
    fio_pid=
    local bmbps
    bmbps=$(sed -n '/^{/,$p' "$dir/fio.json" |
            jq -r '.jobs[0] | if .error != 0 then "error\(.error)" else .write.bw_bytes / 1e6 end')
    local c_ops_s=0
    for ((i = 0; i < nc; i++)); do
        c_ops_s=$(awk -v a="$c_ops_s" -v b="$(kv "$(cat "$dir/c$i.out")" ops_per_s)" 'BEGIN {print a + b}')
    done
    local line
    line="a_s=$(kv "$a" elapsed_s) a_ops=$(kv "$a" ops_per_s) a_p50=$(kv "$a" lat_p50_us)"
    line+=" a_p99=$(kv "$a" lat_p99_us) b_mbps=$bmbps c_ops_s=$c_ops_s"
    if [ "$fs" = f2fuse ]; then
        line+=$(awk -v n="$ops" -v secs="$(kv "$a" elapsed_s)" '
            FNR == NR {a[$1] = $2; next} {b[$1] = $2}
            END {
                req = b["checkpoint.requests"] - a["checkpoint.requests"]
                wr = b["checkpoint.written"] - a["checkpoint.written"]
                # wait_avg_us is total/waits, and every request is one wait
                wt = b["checkpoint.wait_avg_us"] * b["checkpoint.requests"] - \
                     a["checkpoint.wait_avg_us"] * a["checkpoint.requests"]
                printf " req=%d written=%d ratio=%.3f served=%.2f served_max=%d", req, wr,
                       req ? wr / req : 0, wr ? req / wr : 0, b["checkpoint.served_max"]
                printf " wait_avg=%.0f wait_p99=%d wait_max=%d", req ? wt / req : 0,
                       b["checkpoint.wait_p99_us"], b["checkpoint.wait_max_us"]
                # the requests of C and of the timer: all but those of A
                printf " c_during_a=%d cp_per_s=%.0f data_mib=%.0f", req - n,
                       (secs > 0 ? wr / secs : 0), (b["blk.write.bytes"] - a["blk.write.bytes"]) / 1048576
                bw = b["checkpoint.batch_waits"] - a["checkpoint.batch_waits"]
                printf " batch_waits=%d batch_joined=%d batch_wait_avg=%d", bw,
                       b["checkpoint.batch_joined"] - a["checkpoint.batch_joined"], b["checkpoint.batch_wait_avg_us"]
            }' "$s0" "$s1")
    fi
    result=$line
}

run_fsync() { # fsync mode
    mkdir "$mnt/d"
    local s0=$dir/stat0 s1=$dir/stat1 r
    snap >"$s0"
    r=$(timeout -k 10 "$a_timeout" "$load" fsync "$mnt/d/f" "$fsync_ops")
    snap >"$s1"
    result="p50=$(kv "$r" lat_p50_us) p99=$(kv "$r" lat_p99_us) max=$(kv "$r" lat_max_us)"
    result+=" ops_s=$(kv "$r" ops_per_s)"
    result+=" fast=$(( $(val "$s1" fsync.fast) - $(val "$s0" fsync.fast) ))"
    result+=" cps=$(( $(val "$s1" checkpoint.written) - $(val "$s0" checkpoint.written) ))"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}'; }
# med CONFIG KEY: median of KEY over the runs of CONFIG
declare -A runs=()
med() { local v="" l; while read -r l; do [ -n "$l" ] && v+=" $(kv "$l" "$2")"; done <<<"${runs[$1]:-}"; echo "$v" | median; }
all() { local v="" l; while read -r l; do [ -n "$l" ] && v+="$(kv "$l" "$2") "; done <<<"${runs[$1]:-}"; echo "${v% }"; }
fmt() { awk -v v="$1" -v d="$2" 'BEGIN { if (v == "-" || v == "") print "-"; else printf "%.*f", d, v }'; }
ms() { awk -v v="$1" 'BEGIN { if (v == "-" || v == "") print "-"; else printf "%.1f", v / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "-") printf "%.2f", a / b; else print "-" }'; }

: >"$log"
echo "checkpoint bench: $ops ops of A, $reps reps, images in $dir" >&2
for ((rep = 1; rep <= reps; rep++)); do
    for cfg in off on ext4 off_many on_many off_slow on_slow; do
        nc=1
        case $cfg in
        off) mount_f2fuse nocheckpoint_merge ;;
        on) mount_f2fuse checkpoint_merge ;;
        ext4) [ "$do_ext4" = 1 ] || continue; mount_ext4 ;;
        *_many)
            [ "$many_c" -gt 1 ] || continue
            nc=$many_c
            if [ $cfg = off_many ]; then mount_f2fuse nocheckpoint_merge; else mount_f2fuse checkpoint_merge; fi ;;
        *_slow)
            [ -n "$slow_opts" ] || continue
            if [ $cfg = off_slow ]; then mount_f2fuse "nocheckpoint_merge,$slow_opts"
            else mount_f2fuse "checkpoint_merge,$slow_opts"; fi ;;
        esac
        fs=f2fuse; [ $cfg = ext4 ] && fs=ext4
        run_abc $fs "$nc"
        unmount_all
        echo "  A/B/C $cfg rep $rep: $result" >&2
        runs[$cfg]+="$result"$'\n'
    done
done
for ((rep = 1; rep <= fsync_reps; rep++)); do
    for mode in fast checkpoint; do
        mount_f2fuse "fsync=$mode"
        run_fsync
        unmount_all
        echo "  fsync=$mode rep $rep: $result" >&2
        runs[fsync_$mode]+="$result"$'\n'
    done
done

a_off=$(med off a_s) a_on=$(med on a_s)
ratio_on=$(med on ratio)
# The targets are judged where the checkpoint=merge post's experiment has its conditions: A's
# time on the slow, saturated device (C's idle-class I/O gets little of it, as the post's
# low-weight cgroup), the checkpoints written under contention with several C's.  On the host's fast
# device nothing is saturated, so there is no inversion for merging to remove: that pair
# is reported as information.
t1_where="slow device ($slow_opts)" t1_on=$a_on t1_off=$a_off
[ -n "$slow_opts" ] && t1_on=$(med on_slow a_s) t1_off=$(med off_slow a_s)
[ -n "$slow_opts" ] || t1_where="host device"
t2_where="one C" t2_ratio=$ratio_on t2_written=$(med on written) t2_req=$(med on req)
if [ "$many_c" -gt 1 ]; then
    t2_where="${many_c}×C" t2_ratio=$(med on_many ratio)
    t2_written=$(med on_many written) t2_req=$(med on_many req)
fi
t1=$(awk -v a="$t1_on" -v b="$t1_off" 'BEGIN {print (b > 0 && a <= 0.5 * b) ? "PASS" : "MISS"}')
t2=$(awk -v r="$t2_ratio" 'BEGIN {print (r != "-" && r <= 0.5) ? "PASS" : "MISS"}')
cell() { # config key digits conv
    local v
    v=$(med "$1" "$2")
    if [ "$4" = ms ]; then ms "$v"; else fmt "$v" "$3"; fi
}
many=0
[ "$many_c" -gt 1 ] && many=1
slow=0
[ -n "$slow_opts" ] && slow=1
row() { # label key digits [ms] [y = ext4 has it]
    local conv=${4:-fmt} off on line
    off=$(cell off "$2" "$3" "$conv") on=$(cell on "$2" "$3" "$conv")
    line="| $1 | $off | $on | $(ratio "$on" "$off")"
    if [ $many = 1 ]; then
        off=$(cell off_many "$2" "$3" "$conv") on=$(cell on_many "$2" "$3" "$conv")
        line+=" | $off | $on | $(ratio "$on" "$off")"
    fi
    if [ $slow = 1 ]; then
        off=$(cell off_slow "$2" "$3" "$conv") on=$(cell on_slow "$2" "$3" "$conv")
        line+=" | $off | $on | $(ratio "$on" "$off")"
    fi
    if [ "$do_ext4" = 1 ]; then
        if [ -n "${5:-}" ]; then line+=" | $(cell ext4 "$2" "$3" "$conv")"; else line+=" | -"; fi
    fi
    echo "$line |"
}
{
    echo "## Checkpoint merge: A/B/C contention through the FUSE mount"
    echo
    echo "$(date -u +%Y-%m-%d), kernel $(uname -r), $(nproc) CPUs, f2fuse $(git describe --always --dirty 2>/dev/null || echo ?)," \
         "fresh ${size}iB sparse image per run on $(findmnt -n -o FSTYPE -T "$dir" 2>/dev/null || echo '?')," \
         "A = $ops x (create dir1/file_i; fsync(dir1)), B = fio 128 KiB buffered writes," \
         "C = endless (create; fsync(dir2)) under ionice -c3 nice 19 (one process; ${many_c}×C: that many, each in its own directory), ${warmup}s of B+C before A;" \
         "load average $(cut -d" " -f1-3 /proc/loadavg) at the end; median of $reps runs (configurations interleaved).${extra_opts:+ Extra options: ${extra_opts#,}.}"
    echo
    hdr="| | merge off | merge on | on/off" sep="|---|---:|---:|---:"
    [ $many = 1 ] && hdr+=" | off, ${many_c}×C | on, ${many_c}×C | on/off" sep+="|---:|---:|---:"
    [ $slow = 1 ] && hdr+=" | off, slow dev | on, slow dev | on/off" sep+="|---:|---:|---:"
    [ "$do_ext4" = 1 ] && hdr+=" | ext4 (loop)" sep+="|---:"
    echo "$hdr |"
    echo "$sep|"
    row "A elapsed (s)" a_s 2 fmt y
    row "A throughput (ops/s)" a_ops 0 fmt y
    row "A op latency p50 (ms)" a_p50 0 ms y
    row "A op latency p99 (ms)" a_p99 0 ms y
    row "checkpoint requests (during A)" req 0
    row "checkpoints written (during A)" written 0
    row "written / requests" ratio 2
    row "requests served per checkpoint, avg" served 2
    row "requests served per checkpoint, max (since mount)" served_max 0
    row "request wait avg (ms, during A)" wait_avg 0 ms
    row "request wait p99 (ms, since mount, log2 bucket edge)" wait_p99 0 ms
    row "request wait max (ms, since mount)" wait_max 0 ms
    row "checkpoints per second" cp_per_s 0
    row "other requests during A (C's, the timer's; ± requests in flight at the snapshots)" c_during_a 0
    row "batch waits before a checkpoint (during A)" batch_waits 0
    row "requests that joined during a batch wait (during A)" batch_joined 0
    row "batch wait avg (ms, since mount)" batch_wait_avg 0 ms
    row "bytes written to the image during A (MiB)" data_mib 0
    row "B throughput (fio, MB/s)" b_mbps 0 fmt y
    row "C throughput (ops/s, all C, whole run)" c_ops_s 0 fmt y
    echo
    echo "Per run, A elapsed (s): merge off $(all off a_s); merge on $(all on a_s)$([ "$do_ext4" = 1 ] && echo "; ext4 $(all ext4 a_s)")." \
         "Written/requests with merge: $(all on ratio).$([ $many = 1 ] && echo " With ${many_c}×C: A elapsed off $(all off_many a_s), on $(all on_many a_s); written/requests on $(all on_many ratio).")"
    echo
    echo "- $t1: A's time with merge ≤ 0.5× without, $t1_where: $(fmt "$t1_on" 2) s vs $(fmt "$t1_off" 2) s (×$(ratio "$t1_on" "$t1_off"))."
    echo "- $t2: under contention ($t2_where), checkpoints written ≤ 0.5× requests: ×$(fmt "$t2_ratio" 2)" \
         "($t2_written of $t2_req)."
    [ $slow = 1 ] && echo "- (slow device: $slow_opts) per run, A elapsed off $(all off_slow a_s), on $(all on_slow a_s); written/requests ×$(fmt "$(med on_slow ratio)" 2)."
    echo "- (information) host device, one C: A ×$(ratio "$a_on" "$a_off") ($(fmt "$a_on" 2) s vs $(fmt "$a_off" 2) s), written/requests ×$(fmt "$ratio_on" 2) (two synchronous requesters share at best every checkpoint: 0.50 is the floor)."
    [ $many = 1 ] && echo "- with ${many_c} C processes: A ×$(ratio "$(med on_many a_s)" "$(med off_many a_s)")," \
         "written/requests ×$(fmt "$(med on_many ratio)" 2)."
    echo
    echo "## fsync latency: 4 KiB pwrite + fsync of a file in the last checkpoint"
    echo
    echo "$fsync_ops pairs per run, no other load from the bench, default mount options otherwise" \
         "(checkpoint_merge, checkpoint_interval=5), fresh image per run, median of $fsync_reps runs (modes interleaved)." \
         "Checkpoints written include the setup's (the new file's first fsync and its directory's)."
    echo
    echo "| fsync= | p50 (µs) | p99 (µs) | max (µs) | pairs/s | fast-path fsyncs | checkpoints written |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for mode in fast checkpoint; do
        echo "| $mode | $(fmt "$(med fsync_$mode p50)" 0) | $(fmt "$(med fsync_$mode p99)" 0)" \
             "| $(fmt "$(med fsync_$mode max)" 0) | $(fmt "$(med fsync_$mode ops_s)" 0)" \
             "| $(med fsync_$mode fast) | $(med fsync_$mode cps) |"
    done
    echo
    echo "Total bench time: $(( $(date +%s) - started ))s."
} | tee "$out"
