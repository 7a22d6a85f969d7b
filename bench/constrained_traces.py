#!/usr/bin/env python3
"""Constrained variants of the shipped openb traces: GPU pods that name the GPU model they need.

The shipped traces leave `gpu_spec` empty; real fleets are heterogeneous and their jobs pin
models. Following the FGD paper's gpuspecX workloads (about X% of GPU pods carry a gpu_spec,
PROTOCOL.md), each variant takes a shipped trace and, with a fixed seed, gives about X% of its
GPU pods a constraint:

  * a model drawn in proportion to the cluster's GPUs of that model, among the models whose
    nodes could ever host the pod (enough GPUs, CPU and memory on one node): a constraint no
    node satisfies would only measure rejection, not placement;
  * for a model with a relative (the two V100s) half of the draws name the family as a
    `|`-list ("V100M16|V100M32"), as "any V100" does.

Variants (name: base trace, share of GPU pods constrained):
  gpuspec05, gpuspec10, gpuspec20, gpuspec25, gpuspec33   default, X = 5 .. 33
  gpushare40-spec25, gpushare80-spec25                     fractional-heavy traces, X = 25
  multigpu30-spec25, multigpu50-spec25                     multi-GPU-heavy traces, X = 25

Deterministic: the seed of a variant is fixed (2023 + X, plus the base's offset) and only
random.Random.random() is used, whose sequence Python keeps stable across versions.

Usage: bench/constrained_traces.py [--out DIR]   (default bench/traces/generated; prints one
line per file with its rows, constrained share and SHA-256)
"""
import argparse
import csv
import hashlib
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "traces", "alibaba-openb")
FAMILIES = [["V100M16", "V100M32"]]
VARIANTS = [("gpuspec05", "default", 5), ("gpuspec10", "default", 10), ("gpuspec20", "default", 20),
            ("gpuspec25", "default", 25), ("gpuspec33", "default", 33),
            ("gpushare40-spec25", "gpushare40", 25), ("gpushare80-spec25", "gpushare80", 25),
            ("multigpu30-spec25", "multigpu30", 25), ("multigpu50-spec25", "multigpu50", 25)]
BASE_OFFSET = {"default": 0, "gpushare40": 100, "gpushare80": 200, "multigpu30": 300, "multigpu50": 400}


def read_nodes():
    with open(os.path.join(TRACES, "openb_node_list_gpu_node.csv")) as f:
        return [{"cpu": int(r["cpu_milli"]), "mem": int(r["memory_mib"]), "gpus": int(r["gpu"]),
                 "model": r["model"]} for r in csv.DictReader(f) if r["model"]]


def feasible_models(pod, nodes):
    """Models with at least one node that could host the pod when empty."""
    return {n["model"] for n in nodes
            if n["gpus"] >= pod["num_gpu"] and n["cpu"] >= pod["cpu"] and n["mem"] >= pod["mem"]}


def pick(rng, weights):
    """A key of `weights` drawn in proportion to its weight (sorted keys: stable order)."""
    keys = sorted(weights)
    total = sum(weights[k] for k in keys)
    x = rng.random() * total
    for k in keys:
        x -= weights[k]
        if x < 0:
            return k
    return keys[-1]


def spec_for(rng, model, allowed):
    for fam in FAMILIES:
        if model in fam and rng.random() < 0.5:
            return "|".join(m for m in fam if m in allowed)
    return model


def generate(name, base, share, nodes, out_dir):
    gpus_of = {}
    for n in nodes:
        gpus_of[n["model"]] = gpus_of.get(n["model"], 0) + n["gpus"]
    rng = random.Random(2023 + share + BASE_OFFSET[base])
    src = os.path.join(TRACES, f"openb_pod_list_{base}.csv")
    with open(src, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    if "gpu_spec" not in header:  # the multigpu files have only the first five columns
        header = header[:5] + ["gpu_spec"]
        rows = [r[:5] + [""] for r in rows]
    gpu_pods = constrained = 0
    for r in rows:
        pod = {"cpu": int(r[1]), "mem": int(r[2]), "num_gpu": int(r[3])}
        if pod["num_gpu"] == 0:
            continue
        gpu_pods += 1
        draw = rng.random()
        if draw >= share / 100.0:
            continue
        allowed = feasible_models(pod, nodes)
        if not allowed:
            continue
        model = pick(rng, {m: gpus_of[m] for m in allowed})
        r[5] = spec_for(rng, model, allowed)
        constrained += 1
    path = os.path.join(out_dir, f"openb_pod_list_{name}.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(f"{name:<20} from {base:<11} {len(rows):5d} pods, {constrained:4d} of {gpu_pods} GPU pods "
          f"constrained ({100.0 * constrained / gpu_pods:4.1f}%)  sha256 {digest[:16]}")
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "traces", "generated"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    nodes = read_nodes()
    for name, base, share in VARIANTS:
        generate(name, base, share, nodes, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
