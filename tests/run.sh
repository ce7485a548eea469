#!/usr/bin/env bash
# Runs every f2fuse test and ends with the line "N passed, N failed".
#   unit tests        build/tests/test_*       (and again under ASan+UBSan: build-san/tests/)
#   integration tests tests/integration/test_* (executables; exit 0 pass, 77 skip, else fail)
# F2FUSE_TEST_FILTER=regex runs only the tests whose name matches.
set -u
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)

echo "== building (normal, ASan+UBSan, and the daemon with ThreadSanitizer)"
buildlog=$(mktemp /tmp/f2fuse-build.XXXXXX)
make -s -j"$jobs" all >"$buildlog" 2>&1 || { cat "$buildlog"; echo "0 passed, 1 failed"; exit 1; }
make -s -j"$jobs" SAN=1 all >"$buildlog" 2>&1 || { cat "$buildlog"; echo "0 passed, 1 failed"; exit 1; }
make -s -j"$jobs" SAN=thread build-tsan/f2fuse >"$buildlog" 2>&1 || { cat "$buildlog"; echo "0 passed, 1 failed"; exit 1; }

export F2FUSE_BIN=$root/build/f2fuse
export F2FUSE_SAN_BIN=$root/build-san/f2fuse
export F2FUSE_ROOT=$root
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

passed=0; failed=0; skipped=0; failed_names=()
filter=${F2FUSE_TEST_FILTER:-.}

run_one() { # name command...
    local name=$1; shift
    [[ $name =~ $filter ]] || return 0
    local log start rc
    log=$(mktemp /tmp/f2fuse-test.XXXXXX)
    start=$(date +%s)
    timeout --kill-after=10 "${F2FUSE_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1
    rc=$?
    local secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); echo "PASS $name (${secs}s)"
    elif [ $rc -eq 77 ]; then
        skipped=$((skipped + 1)); echo "SKIP $name: $(tail -n 1 "$log")"
    else
        failed=$((failed + 1)); failed_names+=("$name"); echo "FAIL $name (exit $rc, ${secs}s)"
        sed 's/^/    /' "$log" | tail -n 60
    fi
    rm -f "$log"
}

for t in build/tests/test_*; do
    [ -x "$t" ] && run_one "unit/$(basename "$t")" "$t"
done
for t in build-san/tests/test_*; do
    [ -x "$t" ] && run_one "unit-san/$(basename "$t")" "$t"
done
for t in tests/integration/test_*; do
    [ -x "$t" ] && run_one "integration/$(basename "$t")" "$t"
done

[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
if [ $skipped -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ $failed -eq 0 ]
