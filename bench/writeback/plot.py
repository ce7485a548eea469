#!/usr/bin/python3
"""Plots bench/writeback's time series: dirty bytes and writeback rate over time, for
dirty_background_time = 0 and tuned.  usage: plot.py SERIES.csv OUT.png TITLE"""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    path, png, title = sys.argv[1], sys.argv[2], sys.argv[3]
    runs = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            runs.setdefault(int(row["dbt_ms"]), []).append(
                (float(row["t_s"]), int(row["dirty_bytes"]), int(row["data_written_bytes"])))
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for dbt, rows in sorted(runs.items()):
        label = "dirty_background_time=%d ms" % dbt if dbt else "dirty_background_time=0 (off)"
        t = [r[0] for r in rows]
        ax1.plot(t, [r[1] / 2**20 for r in rows], label=label)
        # over ~0.5 s: writeback lands in chunks, a 100 ms difference would alias
        k = 5
        rate = [(rows[i][2] - rows[max(0, i - k)][2]) /
                max(rows[i][0] - rows[max(0, i - k)][0], 1e-9) / 1e6 for i in range(len(rows))]
        ax2.plot(t, rate, label=label)
    ax1.set_ylabel("dirty data (MiB)")
    ax2.set_ylabel("data written back (MB/s)")
    ax2.set_xlabel("time (s)")
    ax1.set_title("bench/writeback: " + title)
    ax1.legend()
    ax2.legend()
    ax1.grid(alpha=0.3)
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
