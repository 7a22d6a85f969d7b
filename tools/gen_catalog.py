#!/usr/bin/env python3
"""Generates data/catalog.json, Tessera's own GPU partition catalog.

Run once by hand when the research notes change; the output is committed and embedded into
the tessera_partition library at build time. The product never reads the research notes at
run time.

    python3 tools/gen_catalog.py [--source PATH] [--out data/catalog.json]

What it does to the source (gpu-partitions.json, schema 3):
  * renames models to Tessera's canonical names and keeps the vendor names as aliases;
  * strips parenthetical notes from profile names ("1g.23gb (early: 1g.24gb)" -> "1g.23gb")
    and keeps the early names as profile aliases;
  * turns reported GiB into integer MiB (round(GiB * 1024)); where no size was reported it
    estimates one and lists "memory_mib" in the profile's inferred_fields;
  * turns AMD mode tables into integer capacities (MiB, partitions, CUs).
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SOURCE = os.path.join(HERE, "..", "..", "shared", "data", "gpu-partitions.json")
DEFAULT_OUT = os.path.join(HERE, "..", "data", "catalog.json")

# Source model name -> (canonical name, extra short aliases). Only unambiguous short aliases.
NVIDIA_NAMES = {
    "A30-24GB": ("A30-24GB", ["A30"]),
    "A100-SXM4-40GB": ("A100-40GB", []),
    "A100-80GB (SXM4 and PCIe)": ("A100-80GB", []),
    "H100-80GB (SXM5 and PCIe)": ("H100-80GB", []),
    "H100-NVL-94GB": ("H100-NVL-94GB", ["H100-NVL"]),
    "GH200 (H100 96GB on GH200)": ("GH200-96GB", ["GH200"]),
    "GH200 144GB HBM3e": ("GH200-144GB", []),
    "H200-141GB": ("H200-141GB", ["H200"]),
    "B200-180GB": ("B200-180GB", ["B200"]),
    "GB200 (HGX/NVL GB200 GPU)": ("GB200-186GB", ["GB200"]),
    "B300 (HGX B300)": ("B300-288GB", ["B300"]),
}
AMD_NAMES = ["MI300X", "MI325X", "MI355X"]

# A30's single JPEG/OFA engine allows one "+me" GI of either size; the 8-slice parts have a
# single "+me" profile capped at one instance. Either way: at most one "+me" GI per GPU.
MEDIA_EXTENSION_LIMIT = 1


def die(msg):
    print("gen_catalog: " + msg, file=sys.stderr)
    sys.exit(1)


def strip_parenthetical(name):
    """'1g.23gb (early boards/drivers: 1g.24gb)' -> ('1g.23gb', ['1g.24gb'])."""
    m = re.match(r"^(\S+)\s*\((.*)\)\s*$", name)
    if not m:
        return name, []
    base, note = m.group(1), m.group(2)
    aliases = re.findall(r"\b\d+g\.\d+gb(?:\+me)?\b", note)
    return base, [a for a in aliases if a != base]


def gib_to_mib(gib):
    return int(round(gib * 1024))


def estimate_profile_mib(profile, model_profiles, device_mib, total_memory_slices):
    """An estimate for a profile whose size was not reported. Returns (MiB, basis)."""
    slices = profile["memory_slices"]
    reported = [p for p in model_profiles if p.get("memory_gib_reported") is not None]
    same = [p for p in reported if p["memory_slices"] == slices]
    if same:
        return gib_to_mib(same[0]["memory_gib_reported"]), "same memory slices as " + \
            strip_parenthetical(same[0]["name"])[0]
    if reported:
        ref = max(reported, key=lambda p: (p["memory_slices"], p["memory_gib_reported"]))
        mib = gib_to_mib(ref["memory_gib_reported"]) * slices // ref["memory_slices"]
        return mib, "scaled from " + strip_parenthetical(ref["name"])[0]
    # Nothing reported on this model: its share of the device, less 5% (reported profiles
    # expose 91-99% of their nominal share), rounded down to 256 MiB.
    mib = device_mib * slices * 95 // (total_memory_slices * 100)
    return mib - mib % 256, "95% of the device's memory share"


def convert_nvidia(src):
    name, short_aliases = NVIDIA_NAMES[src["model"]]
    aliases = []
    for a in [strip_parenthetical(src["model"])[0], src["model"]] + src.get("aliases", []) \
            + short_aliases:
        if a != name and a not in aliases:
            aliases.append(a)
    device_mib = int(src["memory_size_gb"]) * 1024
    profiles = []
    for p in src["profiles"]:
        pname, paliases = strip_parenthetical(p["name"])
        inferred_fields = list(p.get("inferred_fields", []))
        out = {
            "name": pname,
            "aliases": paliases,
            "nvidia_smi_profile_id": p.get("nvidia_smi_profile_id"),
            "compute_slices": p["compute_slices"],
            "memory_slices": p["memory_slices"],
        }
        if p["placements"]["size"] != p["memory_slices"]:
            die("%s %s: placement size differs from memory_slices" % (name, pname))
        if p.get("memory_gib_reported") is not None:
            out["memory_mib"] = gib_to_mib(p["memory_gib_reported"])
        else:
            mib, basis = estimate_profile_mib(p, src["profiles"], device_mib,
                                              src["total_memory_slices"])
            out["memory_mib"] = mib
            out["memory_mib_basis"] = "estimated: " + basis
            if "memory_mib" not in inferred_fields:
                inferred_fields.append("memory_mib")
        out["max_instances"] = p["max_instances"]
        out["starts"] = list(p["placements"]["starts"])
        out["media_extension"] = pname.endswith("+me")
        out["inferred"] = bool(p.get("inferred", False)) or bool(inferred_fields)
        out["inferred_fields"] = inferred_fields
        profiles.append(out)
    placements_inferred = all("placements" in p["inferred_fields"] for p in profiles)
    model = {
        "name": name,
        "vendor": "NVIDIA",
        "kind": "mig",
        "aliases": aliases,
        "architecture": src.get("architecture", ""),
        "memory_mib": device_mib,
        "compute_slices": src["total_compute_slices"],
        "memory_slices": src["total_memory_slices"],
        "max_gpu_instances": src.get("max_gpu_instances", src["total_compute_slices"]),
        "media_extension_limit": MEDIA_EXTENSION_LIMIT,
        "constraints": list(src.get("extra_constraints", [])),
        "inferred": placements_inferred or bool(src.get("partial", False)),
        "inferred_fields": (["placements"] if placements_inferred else []) +
                           (["partial"] if src.get("partial") else []),
        "profiles": profiles,
    }
    if "max_gpu_instances" not in src:
        model["inferred_fields"].append("max_gpu_instances")
    return model


def convert_amd(src):
    name = src["model"]
    device_mib = int(src["memory_gb"]) * 1024
    pairs_key = "valid_combinations" if "valid_combinations" in src else \
        "valid_combinations_bare_metal"
    pairs = []
    for text in src[pairs_key]:
        compute, memory = text.split("+")
        pairs.append({"compute": compute, "memory": memory})
    validated = [t.split(" ")[0] for t in src.get("amd_validated_combinations", [])]
    return {
        "name": name,
        "vendor": "AMD",
        "kind": "amd",
        "aliases": [],
        "architecture": src.get("architecture", ""),
        "memory_mib": device_mib,
        "xcd_count": src["xcd_count"],
        "cus": src["total_cu"],
        "memory_modes": [{"name": m["mode"], "domains": m["numa_domains"]}
                         for m in src["memory_partition_modes"]],
        "compute_modes": [{"name": m["mode"], "partitions": m["partitions"],
                           "xcds_per_partition": m["xcds_per_partition"],
                           "cus_per_partition": m["cus_per_partition"]}
                          for m in src["compute_partition_modes"]],
        "legal_pairs": pairs,
        "validated_pairs": validated,
        "inferred": bool(src.get("inferred", False)),
        "inferred_fields": list(src.get("inferred_fields", [])),
    }


def format_json(obj):
    text = json.dumps(obj, indent=2, ensure_ascii=True)
    # Keep short scalar arrays on one line.
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]",
                  lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=DEFAULT_SOURCE)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    with open(args.source) as f:
        src = json.load(f)
    models = []
    seen = set()
    for g in src["nvidia_mig"]["gpus"]:
        if g["model"] not in NVIDIA_NAMES:
            print("gen_catalog: skipping %s (not catalogued)" % g["model"], file=sys.stderr)
            continue
        models.append(convert_nvidia(g))
        seen.add(g["model"])
    missing = set(NVIDIA_NAMES) - seen
    if missing:
        die("source lacks " + ", ".join(sorted(missing)))
    amd = {g["model"]: g for g in src["amd_partitioning"]["gpus"]}
    for n in AMD_NAMES:
        if n not in amd:
            die("source lacks " + n)
        models.append(convert_amd(amd[n]))
    catalog = {
        "schema_version": 1,
        "generated_by": "tools/gen_catalog.py",
        "source": "shared/data/gpu-partitions.json schema %s (%s)" % (
            src.get("schema_version"), src.get("generated_utc")),
        "units": "memory in MiB (integers); slices and partitions are counts",
        "models": models,
    }
    with open(args.out, "w") as f:
        f.write(format_json(catalog))
    print("wrote %s: %d models" % (os.path.relpath(args.out), len(models)))


if __name__ == "__main__":
    main()
