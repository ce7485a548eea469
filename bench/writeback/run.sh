#!/usr/bin/env bash
# Writeback benchmark: bandwidth × time background writeback ("writeback: add
# dirty_background_time per bdi variable") reproduced through the FUSE mount.  A producer writes
# 100 MiB at 12.5 MB/s (~100 Mbit/s, the patch's NFS link) in records of 4 KiB .. 10 MiB (the
# patch's table), then fsyncs; the device is limited to 25 MiB/s (-o dev_bw=25M).  Throughput
# with dirty_background_time=0 against the tuned value, interleaved in one run; a PNG of dirty
# bytes and writeback rate over time for both (python3-matplotlib).  Details:
# bench/writeback/wb_bench.py.
#
#   WB_BENCH_TUNED      tuned dirty_background_time in ms (default 100)
#   WB_BENCH_SIZES      record sizes, comma-separated (default the patch's ten)
#   WB_BENCH_REPS       repetitions per cell (default 1; the table shows medians)
#   WB_BENCH_RANDOM=1   records at shuffled offsets (the patch's RanWriteSpeed column)
#   WB_BENCH_MIB, WB_BENCH_RATE (bytes/s), WB_BENCH_DEV_BW, WB_BENCH_PLOT_SIZE, WB_BENCH_DIR
#   WB_BENCH_DEVICE=nbd the image on an nbdkit export behind its rate filter (WB_BENCH_DEV_BW,
#                       burstiness WB_BENCH_BURST s) instead of dev_bw: a real network device
#   QUICK=1             two record sizes only
# Writes bench/results/writeback.md, writeback.png and writeback_series.csv.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/f2fuse ] && [ -x build/bench/writeback/wb_producer ] || make -j2 >/dev/null
exec python3 bench/writeback/wb_bench.py
