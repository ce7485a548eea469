#!/usr/bin/env bash
# `make bench`: every benchmark in turn; each writes its table to bench/results/NAME.md.
# BENCH=name[,name] runs only those (blk, checkpoint, trim, fio); QUICK=1 is passed on
# (bench/fio: ~3 min smoke run instead of ~22-30 min).
set -u
cd "$(dirname "$0")/.."
only=${BENCH:-}
status=0
for dir in bench/*/; do
    name=$(basename "$dir")
    [ -x "$dir/run.sh" ] || continue
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then
        continue
    fi
    echo "== bench/$name"
    "$dir/run.sh" || { echo "bench/$name failed"; status=1; }
done
exit $status
