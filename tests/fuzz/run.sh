#!/usr/bin/env bash
# Runs the libFuzzer harnesses (build them first: make fuzzers).
#   run.sh --time SECONDS [--only REGEX] [--artifacts DIR]   fuzz each harness that long
#   run.sh --replay                                            run every regression input once
# Fuzzing starts from tests/fuzz/corpus/<harness>/ (fuzz_mount_rw shares fuzz_mount's) plus a
# scratch corpus; the committed corpora are not changed.  A crash, sanitizer report, leak or
# an input running over 10 s (a hang) fails the run; its input is kept in the artifacts
# directory (minimise it with -minimize_crash=1 and add it to tests/fuzz/regress/<harness>/).
# Prints one line per harness with executions and CPU seconds, then the totals.
set -u
cd "$(dirname "$0")/../.."
bins=build-fuzz/fuzz
time=60; only=.; art=""; replay=0
while [ $# -gt 0 ]; do
    case $1 in
    --time) time=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --artifacts) art=$2; shift 2 ;;
    --replay) replay=1; shift ;;
    *) echo "usage: $0 --time SECONDS [--only REGEX] [--artifacts DIR] | --replay" >&2; exit 2 ;;
    esac
done
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[ -n "$art" ] || art=$(mktemp -d "${TMPDIR:-/tmp}/f2fuse-fuzz-art.XXXXXX")
mkdir -p "$art"
failed=0; total_execs=0; total_cpu=0; ran=0

corpus_of() { case $1 in fuzz_mount_rw) echo fuzz_mount ;; *) echo "$1" ;; esac; }

for bin in "$bins"/fuzz_*; do
    name=$(basename "$bin")
    [[ $name =~ $only ]] || continue
    log=$(mktemp "${TMPDIR:-/tmp}/f2fuse-fuzz-log.XXXXXX")
    if [ $replay = 1 ]; then
        inputs=(tests/fuzz/regress/"$name"/*)
        [ -e "${inputs[0]}" ] || { rm -f "$log"; continue; }
        "$bin" -timeout=10 "${inputs[@]}" >"$log" 2>&1
        rc=$?
        echo "replay $name: ${#inputs[@]} input(s), exit $rc"
    else
        work=$(mktemp -d "${TMPDIR:-/tmp}/f2fuse-fuzz-work.XXXXXX")
        TIMEFORMAT='%U %S'
        { time "$bin" -max_total_time="$time" -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$art/$name-" -dict=tests/fuzz/f2fs.dict \
            "$work" "tests/fuzz/corpus/$(corpus_of "$name")" >"$log" 2>&1; } 2>"$log.time"
        rc=$?
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
        cpu=$(awk '{printf "%d", $1 + $2}' "$log.time" 2>/dev/null || echo 0)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
        echo "fuzz $name: ${execs:-0} executions, ${cpu:-0} s CPU, $cov, exit $rc"
        total_execs=$((total_execs + ${execs:-0})); total_cpu=$((total_cpu + ${cpu:-0}))
        rm -rf "$work" "$log.time"
    fi
    ran=$((ran + 1))
    if [ $rc -ne 0 ]; then
        failed=$((failed + 1))
        echo "  FAILED: $name (artifacts in $art)"
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written|#[0-9]+ 0x.* in ' "$log" | head -n 30 | sed 's/^/    /'
    fi
    rm -f "$log"
done
[ $replay = 1 ] || echo "total: $ran harness(es), $total_execs executions, $total_cpu s CPU"
[ $failed -eq 0 ]
