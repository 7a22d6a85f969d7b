#!/usr/bin/env python3
"""The full openb sweep: every policy on every trace that has published reference rows, seeds
42-51, under the FGD paper's protocol. Compares the mean unallocated GPU % at 100% arrived with
the published figures (bench/traces/alibaba-openb/fgd_reference_unallocated_gpu_pct.csv) and
prints the acceptance checks of issue 3:

  1. faithful baselines: |ours - reference| <= 0.6 points for fgd, <= 1.0 for the other five;
  2. tessera (online mix) <= FGD reference + 0.15 on every trace (required), strictly below it
     (target), and <= 3.6% on the default trace (target).

Usage: bench/openb_sweep.py [--binary build/src/cli/tessera] [--seeds 42-51] [--traces a,b]
                            [--out bench/results/openb_sweep.csv]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "traces", "alibaba-openb")
REF_NAMES = {"01-Random": "random", "02-DotProd": "dotprod", "03-GpuClustering": "clustering",
             "04-GpuPacking": "packing", "05-BestFit": "bestfit", "06-FGD": "fgd"}
POLICIES = ["random", "dotprod", "clustering", "packing", "bestfit", "fgd", "tessera",
            "tessera-oracle"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(HERE, "..", "build", "src", "cli", "tessera"))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--traces", default="")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "openb_sweep.csv"))
    args = ap.parse_args()

    ref = {}
    with open(os.path.join(TRACES, "fgd_reference_unallocated_gpu_pct.csv")) as f:
        for row in csv.DictReader(f):
            if int(row["arrived_pct"]) == 100:
                ref[(row["workload"].replace("openb_pod_list_", ""), REF_NAMES[row["policy"]])] = \
                    float(row["unalloc_mean"])
    traces = sorted({t for t, _ in ref}, key=lambda t: (t != "default", t))
    if args.traces:
        traces = [t for t in traces if t in args.traces.split(",")]

    print(f"openb sweep: {len(POLICIES)} policies x {len(traces)} traces, seeds {args.seeds}, "
          f"{os.cpu_count()} cores", flush=True)
    start = time.time()
    rows = []
    for trace in traces:
        t0 = time.time()
        out = subprocess.run(
            [args.binary, "sim", "openb", "--nodes", os.path.join(TRACES, "openb_node_list_gpu_node.csv"),
             "--pods", os.path.join(TRACES, f"openb_pod_list_{trace}.csv"), "--policy", ",".join(POLICIES),
             "--seeds", args.seeds, "--json"], check=True, capture_output=True, text=True).stdout
        for r in json.loads(out):
            for pct, st in r["unallocated_gpu_pct"].items():
                rows.append({"trace": trace, "policy": r["policy"], "arrived_pct": int(pct),
                             "mean": st["mean"], "median": st["median"], "sd": st["sd"]})
        print(f"  {trace}: {time.time() - t0:.1f}s", flush=True)
    elapsed = time.time() - start

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["trace", "policy", "arrived_pct", "mean", "median", "sd"])
        w.writeheader()
        w.writerows(rows)

    at100 = {(r["trace"], r["policy"]): r for r in rows if r["arrived_pct"] == 100}
    print()
    print("mean unallocated GPU % at 100% arrived (ours / published reference)")
    print(f"{'trace':<12}" + "".join(f"{p:>17}" for p in POLICIES))
    ok1 = ok2 = True
    strict = True
    for t in traces:
        line = f"{t:<12}"
        for p in POLICIES:
            ours = at100[(t, p)]["mean"]
            r = ref.get((t, p))
            line += f"{ours:>8.2f} / {r:>6.2f}" if r is not None else f"{ours:>8.2f} /    -  "
            if r is not None:
                tol = 0.6 if p == "fgd" else 1.0
                ok1 = ok1 and abs(ours - r) <= tol
        print(line)
    print()
    print("acceptance 2: tessera (online mix) against the published FGD figure")
    for t in traces:
        ours = at100[(t, "tessera")]["mean"]
        fgd = ref[(t, "fgd")]
        ok2 = ok2 and ours <= fgd + 0.15
        strict = strict and ours < fgd
        print(f"  {t:<12} tessera {ours:6.2f}  fgd(ref) {fgd:6.2f}  diff {ours - fgd:+.2f}  "
              f"({100 * (fgd - ours) / fgd:+.1f}% fewer stranded GPUs)")
    default = at100.get(("default", "tessera"))
    print()
    print(f"1. faithful baselines (fgd within 0.6, others within 1.0): {'PASS' if ok1 else 'FAIL'}")
    print(f"2. tessera <= FGD + 0.15 on every trace (required): {'PASS' if ok2 else 'FAIL'}")
    print(f"   tessera strictly below FGD on every trace (target): {'yes' if strict else 'no'}")
    if default:
        print(f"   default trace: {default['mean']:.2f}% (target 3.6%): "
              f"{'met' if default['mean'] <= 3.6 else 'not met'}")
    print(f"4. full sweep time: {elapsed:.1f}s ({len(POLICIES)} policies x {len(traces)} traces x "
          f"seeds {args.seeds}); curves written to {os.path.relpath(args.out)}")
    return 0 if (ok1 and ok2) else 1


if __name__ == "__main__":
    sys.exit(main())
