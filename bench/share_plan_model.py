#!/usr/bin/env python3
"""How close can an online policy pack the fractional jobs of a trace? A model without nodes.

Takes a trace's fractional jobs (one device, under 1000 milli-GPU), shuffles them (one order per
seed) and packs them onto devices of 1000 milli, counting what is left in partly used devices at
the end, as a percentage of the openb cluster's GPU (6,212 devices). No CPU, no nodes, no whole
jobs: the packing question alone, which is where the default policy's remaining idle GPU sits at
100% arrived (bench/POLICY_LOG.md). It prints:

  * best fit in arrival order (online);
  * best-fit decreasing (offline: knows every job, sorted largest first);
  * the cutting-stock LP optimum of the same jobs (fewest devices, fractional: a lower bound on
    any packing), by column generation;
  * "plan": online, best fit among the devices a job keeps on a pattern of the LP of the sizes
    seen so far (re-solved at 1, 2, 4, ... jobs), else an empty device (what
    src/sched/policies/share_plan.h does inside the policy);
  * "plan, then best fit": the same, but falling back to best fit anywhere before an empty one.

Usage: bench/share_plan_model.py [POD_CSV] [--seeds 0-3]
"""
import argparse
import bisect
import collections
import csv
import itertools
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
CAPACITY = 6212 * 1000  # milli-GPU of openb_node_list_gpu_node.csv
DEVICE = 1000


def knapsack(sizes, values):
    """The pattern (counts per size) of largest total value within one device."""
    best = [0.0] * (DEVICE + 1)
    choice = [-1] * (DEVICE + 1)
    for c in range(1, DEVICE + 1):
        best[c] = best[c - 1]
        for i, s in enumerate(sizes):
            if s <= c and best[c - s] + values[i] > best[c] + 1e-9:
                best[c] = best[c - s] + values[i]
                choice[c] = i
    pattern = [0] * len(sizes)
    c = DEVICE
    while c > 0:
        if choice[c] < 0:
            c -= 1
        else:
            pattern[choice[c]] += 1
            c -= sizes[choice[c]]
    return pattern, best[DEVICE]


def lp(counts):
    """min sum x_p s.t. sum_p a_ip x_p = d_i, x >= 0: (devices, [(pattern dict, uses)])."""
    sizes = sorted(counts)
    k = len(sizes)
    d = [float(counts[s]) for s in sizes]
    basis = [[1 if i == j else 0 for i in range(k)] for j in range(k)]
    binv = [[1.0 if i == j else 0.0 for j in range(k)] for i in range(k)]
    x = d[:]
    for _ in range(50 * k + 100):
        y = [sum(binv[r][c] for r in range(k)) for c in range(k)]
        a, value = knapsack(sizes, y)
        if value <= 1 + 1e-7:
            break
        u = [sum(binv[r][c] * a[c] for c in range(k)) for r in range(k)]
        leave, ratio = -1, 0.0
        for r in range(k):
            if u[r] <= 1e-9:
                continue
            q = max(0.0, x[r]) / u[r]
            if leave < 0 or q < ratio - 1e-9 or (q <= ratio + 1e-9 and u[r] > u[leave]):
                leave, ratio = r, q
        if leave < 0:
            break
        for r in range(k):
            x[r] -= ratio * u[r]
        x[leave] = ratio
        pivot = u[leave]
        binv[leave] = [v / pivot for v in binv[leave]]
        for r in range(k):
            if r != leave and u[r] != 0:
                f = u[r]
                binv[r] = [binv[r][c] - f * binv[leave][c] for c in range(k)]
        basis[leave] = a
    used = collections.defaultdict(float)
    for j in range(k):
        if x[j] > 1e-9:
            used[tuple(basis[j])] += x[j]
    pats = [({sizes[i]: p[i] for i in range(k) if p[i]}, v) for p, v in used.items()]
    return sum(x for _, x in pats), pats


def substates(pats):
    """Every sub-multiset of a pattern, as sorted tuples."""
    out = set()
    for p, _ in pats:
        elems = sorted(s for s, n in p.items() for _ in range(n))
        for r in range(len(elems) + 1):
            out.update(itertools.combinations(elems, r))
    return out


def best_fit(seq):
    gaps = []
    for s in seq:
        i = bisect.bisect_left(gaps, s)
        g = (gaps.pop(i) if i < len(gaps) else DEVICE) - s
        bisect.insort(gaps, g)
    return sum(gaps)


def planned(seq, fallback_best_fit):
    seen = collections.Counter()
    refresh = 1
    allowed = set()
    devices = []  # [free, sorted tuple of jobs]
    for n, s in enumerate(seq, 1):
        seen[s] += 1
        if n >= refresh:
            refresh *= 2
            allowed = substates(lp(seen)[1])
        best = anywhere = None
        for i, (free, jobs) in enumerate(devices):
            if free < s:
                continue
            keeps = tuple(sorted(jobs + (s,))) in allowed or jobs not in allowed
            if keeps and (best is None or free < devices[best][0]):
                best = i
            if anywhere is None or free < devices[anywhere][0]:
                anywhere = i
        if best is None and fallback_best_fit:
            best = anywhere
        if best is None:
            devices.append([DEVICE, ()])
            best = len(devices) - 1
        free, jobs = devices[best]
        devices[best] = [free - s, tuple(sorted(jobs + (s,)))]
    return sum(free for free, _ in devices)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pods", nargs="?",
                    default=os.path.join(HERE, "traces", "alibaba-openb", "openb_pod_list_default.csv"))
    ap.add_argument("--seeds", default="0-3")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    with open(args.pods) as f:
        jobs = [int(r["gpu_milli"]) for r in csv.DictReader(f)
                if r["num_gpu"] == "1" and 0 < int(r["gpu_milli"]) < DEVICE]
    pct = lambda milli: f"{milli / CAPACITY * 100:.2f}"
    devices, pats = lp(collections.Counter(jobs))
    volume = sum(jobs)
    print(f"{os.path.basename(args.pods)}: {len(jobs)} fractional jobs; stranded in partly used "
          f"devices, % of the cluster's GPU ({CAPACITY // 1000} devices)")
    print(f"  best-fit decreasing (offline)          {pct(best_fit(sorted(jobs, reverse=True)))}")
    print(f"  LP optimum (lower bound, {len(pats):2d} patterns)  {pct(devices * DEVICE - volume)}")
    for seed in seeds:
        order = jobs[:]
        random.Random(seed).shuffle(order)
        print(f"  order {seed}: best fit {pct(best_fit(order))}   plan {pct(planned(order, False))}   "
              f"plan, then best fit {pct(planned(order, True))}")


if __name__ == "__main__":
    main()
