#!/usr/bin/env python3
"""How few GPUs could any policy leave idle at 100% arrived? Bounds from the trace alone.

At 100% arrived, unallocated = capacity - allocated = the GPU demand dropped so far, and it is
at least the idle capacity stranded in partly used GPUs. This script packs only the trace's
fractional (single-GPU, < 1000 milli) jobs, offline and knowing them all, ignoring CPU, memory,
nodes and whole-GPU jobs - every one of which only makes things harder - and reports:

  * best-fit decreasing (an offline packing that is near optimal in practice): its waste;
  * a lower bound on any packing: each job above 500 milli needs its own GPU, and the hole it
    leaves can only take jobs no larger than the hole; 0.81 jobs leave 0.19 holes that only the
    rare jobs of 0.19 or less can fill.

Usage: bench/packing_bound.py [POD_CSV ...] (default: the default trace)
"""
import bisect
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CAPACITY = 6212 * 1000  # milli-GPU of openb_node_list_gpu_node.csv


def bounds(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    demand = sum(int(r["num_gpu"]) * int(r["gpu_milli"]) for r in rows)
    items = sorted((int(r["gpu_milli"]) for r in rows
                    if r["num_gpu"] == "1" and int(r["gpu_milli"]) < 1000), reverse=True)
    # Best-fit decreasing.
    bins = []
    for it in items:
        i = bisect.bisect_left(bins, it)
        r = (bins.pop(i) if i < len(bins) else 1000) - it
        bisect.insort(bins, r)
    bfd = sum(bins)
    # Lower bound: holes of the >500 jobs, filled greedily (smallest holes first) by the small
    # jobs that fit them, as if small jobs could be split across holes of at least their size.
    big = [x for x in items if x > 500]
    small = sorted(x for x in items if x <= 500)
    holes = sorted(1000 - x for x in big)
    stranded = 0
    budget = {}  # volume of small jobs that fit under each hole size, consumed smallest first
    j = 0
    avail = 0
    for h in holes:
        while j < len(small) and small[j] <= h:
            avail += small[j]
            j += 1
        fill = min(h, avail)
        avail -= fill
        stranded += h - fill
    return len(items), bfd, stranded, demand


def main():
    paths = sys.argv[1:] or [os.path.join(HERE, "traces", "alibaba-openb", "openb_pod_list_default.csv")]
    for p in paths:
        n, bfd, lb, demand = bounds(p)
        pct = demand / CAPACITY * 100
        note = ("all of them arrive before 100%" if pct <= 100 else
                f"only ~{100 / pct * 100:.0f}% of them arrive before 100%, so scale the figures down")
        print(f"{os.path.basename(p)}: {n} fractional jobs, trace demand {pct:.0f}% of capacity "
              f"({note}); offline best-fit-decreasing strands {bfd / CAPACITY * 100:.2f}% of "
              f"cluster GPU; any packing strands at least {lb / CAPACITY * 100:.2f}%")


if __name__ == "__main__":
    main()
