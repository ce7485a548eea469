#!/usr/bin/env bash
# `make bench`: every benchmark in turn; each writes its table to bench/results/NAME.md, and
# bench/chart.py draws it into bench/results/NAME.png.
# BENCH=name[,name] runs only those (blk, casefold, checkpoint, compress, fscrypt, gc, trim,
# verity, writeback, fio); QUICK=1 is passed on (bench/fio: ~5 min smoke run instead of ~2-3 h).
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
    started=$(mktemp)
    "$dir/run.sh" || { echo "bench/$name failed"; status=1; }
    # its chart for docs/GUIDE.md (bench/chart.py: stdlib Python, PNG next to the table),
    # unless the benchmark drew its own (fio, gc and writeback plot with matplotlib), which
    # the generic chart would overwrite
    if [ -f "bench/results/$name.md" ] && ! [ "bench/results/$name.png" -nt "$started" ]; then
        python3 bench/chart.py "bench/results/$name.md" || echo "bench/$name: no chart"
    fi
    rm -f "$started"
done
exit $status
